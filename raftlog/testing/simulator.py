"""Deterministic simulation of a KRaft quorum (Kafka's RaftEventSimulationTest,
TigerBeetle's VOPR): whole clusters in one thread, from one seed, on a
virtual clock.

Each seed picks a cluster (3 or 5 voters plus 2 observers), link faults
(drop, delay/reorder, duplication) and a schedule of node and network faults
(partitions: halves, isolated leader, bridge, one-way; crash and restart
losing unflushed writes; pauses; disk loss of one voter; a candidate
stranded above a live leader's epoch). After a safety phase everything
heals and a liveness phase requires a new commit that every node, voters
and observers alike, applies within a bounded virtual time. Invariants are checked after every
event; a failure raises `SimulationFailure` naming the seed, and
``python -m raftlog.testing.simulator --seed N`` replays it exactly.

The simulated runtime handles each `Ready` like the real one: the fsync
takes virtual time, during which the node handles nothing else; a crash in
that window loses the unflushed log tail, the unpersisted election state
and the unsent messages.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import NotLeaderError
from raftlog.consensus.messages import Envelope
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, Ready, SnapshotLoad
from raftlog.consensus.roles import ElectionState, FollowerState
from raftlog.testing.memory_log import MemoryLog
from raftlog.testing.network import FakeNetwork, LinkFaults

CoreFactory = Callable[..., KRaftCore]

_SNAPSHOT = struct.Struct(">qi16s")


class SimulationFailure(AssertionError):
    """An invariant broke (or the cluster got stuck). Carries the seed."""

    def __init__(self, seed: int, now_ms: int, message: str, trace: list[str]) -> None:
        tail = "\n".join(trace[-40:])
        super().__init__(f"seed {seed} failed at t={now_ms} ms: {message}\n"
                         f"replay: python -m raftlog.testing.simulator --seed {seed}\n"
                         f"last events:\n{tail}")
        self.seed = seed
        self.now_ms = now_ms
        self.reason = message


@dataclass(frozen=True, slots=True)
class SimParams:
    """The knobs one seed draws (see `SimParams.draw`)."""

    voters: int
    observers: int
    faults: LinkFaults
    safety_ms: int
    liveness_ms: int
    fault_every_ms: tuple[int, int]
    propose_every_ms: tuple[int, int]
    disk_loss: bool

    @staticmethod
    def draw(rng: random.Random) -> SimParams:
        voters = rng.choice((3, 3, 5))
        faults = LinkFaults(
            drop_probability=rng.choice((0.0, 0.01, 0.05)),
            duplicate_probability=rng.choice((0.0, 0.02)),
            min_delay_ms=1,
            max_delay_ms=rng.choice((3, 10, 30)),
        )
        return SimParams(voters=voters, observers=2, faults=faults,
                         safety_ms=rng.randint(1500, 3000), liveness_ms=6000,
                         fault_every_ms=(100, 500), propose_every_ms=(5, 40),
                         disk_loss=rng.random() < 0.3)


def sim_config(voters: tuple[int, ...]) -> QuorumConfig:
    """Kafka's timeouts scaled down 5x so each seed covers many elections."""
    return QuorumConfig(voters=frozenset(voters), election_timeout_ms=200,
                        election_backoff_max_ms=200, fetch_timeout_ms=400,
                        request_timeout_ms=400, append_linger_ms=5, retry_backoff_ms=4,
                        fetch_max_wait_ms=100, fetch_max_bytes=4096,
                        fetch_snapshot_max_bytes=64)


@dataclass(slots=True)
class StateMachine:
    """The listener: a hash chain over committed batch bytes."""

    applied_end: int = 0
    chain: bytes = b"\x00" * 16
    last_epoch: int = 0


@dataclass(slots=True)
class SimNode:
    node_id: int
    log: MemoryLog
    core: KRaftCore | None
    stored: ElectionState | None = None
    machine: StateMachine = field(default_factory=StateMachine)
    io: Ready | None = None  # a Ready whose fsync is in progress
    io_sent: bool = False  # its messages and events went out before the fsync
    paused: bool = False
    inbox: list[Envelope] = field(default_factory=list)
    tick_at: int = -1
    incarnation: int = 0
    max_epoch: int = 0  # of this incarnation (in memory)
    max_hw: int = 0  # of this incarnation
    wiped: bool = False


class Simulation:
    """One seeded run. `run` returns a summary or raises `SimulationFailure`."""

    def __init__(self, seed: int, *, core_factory: CoreFactory = KRaftCore,
                 params: SimParams | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        # Half the seeds honour `Ready.send_before_persist` as the real driver
        # does (send and apply, then fsync); the others always fsync first.
        # Drawn apart from `rng` so the rest of a seed's schedule is unchanged.
        self.early_send = random.Random(f"early-send/{seed}").random() < 0.5
        self.sent_before_fsync = 0  # Ready's sent ahead of their fsync
        self.params = params if params is not None else SimParams.draw(self.rng)
        p = self.params
        self.voters = tuple(range(1, p.voters + 1))
        self.observers = tuple(range(p.voters + 1, p.voters + 1 + p.observers))
        self.config = sim_config(self.voters)
        self.core_factory = core_factory
        self.network = FakeNetwork(random.Random(self.rng.getrandbits(64)), p.faults)
        self.now = 0
        self._seq = 0
        self._queue: list[tuple[int, int, str, int, object]] = []
        self.trace: list[str] = []
        # The "strand_candidate" fault (see `_strand_candidate`): the voter to
        # cut off as soon as it becomes a candidate, and those it happened to.
        self.strand_target: int | None = None
        self.stranded: list[int] = []
        # Until then a scripted fault plays out: no other fault is injected
        # and clients do not propose.
        self.scripted_until = 0
        self.nodes: dict[int, SimNode] = {}
        for nid in self.voters + self.observers:
            node = SimNode(nid, MemoryLog(), None)
            self.nodes[nid] = node
            self._start_core(node, recovering=False)
        # Global knowledge for the invariants.
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.committed_chain: dict[int, bytes] = {}  # end offset -> chain hash
        self.committed_batch: dict[int, bytes] = {}  # end offset -> batch bytes
        self.max_committed = 0
        self.commits_by_epoch: dict[int, int] = {}  # leader epoch -> highest HW it reached
        self.durable_epoch: dict[int, int] = {}
        self.wiped_voters: set[int] = set()
        self.crashed: set[int] = set()
        self.proposals = 0
        self.faults_injected: list[str] = []
        self.healed_at: int | None = None
        self.liveness_target: int | None = None  # virtual time liveness checks began
        self.live_committed_at: int | None = None
        self.live_commit_end: int | None = None  # end offset of the first committed marker

    # ------------------------------------------------------------------ setup

    def _start_core(self, node: SimNode, *, recovering: bool) -> None:
        node.incarnation += 1
        node.core = self.core_factory(
            node_id=node.node_id, config=self.config, log=node.log,
            rng=random.Random(self.rng.getrandbits(64)), stored=node.stored,
            now_ms=self.now, recovering=recovering)
        node.machine = StateMachine()
        node.max_epoch = node.core.epoch
        node.max_hw = node.core.high_watermark
        node.tick_at = -1
        self._after_activity(node)

    def _push(self, at: int, kind: str, node_id: int, payload: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, node_id, payload))

    def _note(self, text: str) -> None:
        self.trace.append(f"{self.now:>6} {text}")
        if len(self.trace) > 400:
            del self.trace[:200]

    def fail(self, message: str) -> SimulationFailure:
        return SimulationFailure(self.seed, self.now, message, self.trace + self.describe_nodes())

    def describe_nodes(self) -> list[str]:
        """One line per node: role, epoch, HW and log offsets."""
        lines = []
        for node in self.nodes.values():
            core = node.core
            state = "down" if core is None else (
                f"{core.role_name} epoch={core.epoch} leader={core.quorum.leader_id()} "
                f"hw={core.high_watermark} applied={core.applied_offset}"
                f"{' recovering' if core.quorum.recovering else ''}")
            lines.append(f"  node {node.node_id}: {state} log=[{node.log.start_offset()}, "
                         f"{node.log.flushed_offset()}, {node.log.end_offset()}]"
                         f"{' paused' if node.paused else ''}{' io' if node.io else ''}")
        return lines

    # ------------------------------------------------------------------ run

    def run(self) -> dict[str, object]:
        p = self.params
        end = p.safety_ms + p.liveness_ms
        self._push(self.rng.randint(*p.fault_every_ms), "fault", 0)
        self._push(self.rng.randint(*p.propose_every_ms), "propose", 0)
        self._push(p.safety_ms, "heal", 0)
        while self._queue:
            at, _, kind, node_id, payload = heapq.heappop(self._queue)
            if at > end:
                break
            self.now = at
            try:
                self._dispatch(kind, node_id, payload)
            except SimulationFailure:
                raise
            except Exception as exc:  # a core invariant (tier 3) is a failure too
                raise self.fail(f"{type(exc).__name__}: {exc}") from exc
            self._check_invariants()
            if self.liveness_target is not None and self._liveness_reached():
                return self.summary()
        if self.live_commit_end is None:
            raise self.fail(f"liveness: no new commit within {p.liveness_ms} ms after heal "
                            f"(committed offset {self.max_committed})")
        raise self.fail(f"liveness: nodes {self._lagging_nodes()} did not apply the commit "
                        f"ending at {self.live_commit_end} within {p.liveness_ms} ms after heal")

    def summary(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "voters": len(self.voters),
            "virtual_ms": self.now,
            "epochs": len(self.leaders),
            "committed_offset": self.max_committed,
            "recovered_ms": (None if self.live_committed_at is None or self.healed_at is None
                             else self.live_committed_at - self.healed_at),
            "proposals": self.proposals,
            "faults": list(self.faults_injected),
            "messages": self.network.sent,
            "dropped": self.network.dropped,
            "duplicated": self.network.duplicated,
            "early_send": self.early_send,
            "sent_before_fsync": self.sent_before_fsync,
        }

    def _dispatch(self, kind: str, node_id: int, payload: object) -> None:
        if kind == "deliver":
            assert isinstance(payload, tuple)
            envelope, incarnation = payload
            self._deliver(envelope, incarnation)
        elif kind == "tick":
            node = self.nodes[node_id]
            if node.core is not None and node.tick_at == self.now:
                # This tick is consumed even when the node cannot take it (an
                # fsync or a pause in progress): forget it, so the activity
                # that ends the fsync or the pause schedules a new one. Kept,
                # it would block rescheduling when the fsync ends in this same
                # virtual millisecond (the node would never tick again).
                node.tick_at = -1
                if not node.paused and node.io is None:
                    node.core.tick(self.now)
                    self._after_activity(node)
        elif kind == "io":
            self._finish_io(self.nodes[node_id], payload)
        elif kind == "propose":
            if self.now >= self.scripted_until:
                self._propose()
            if self.liveness_target is None:
                self._push(self.now + self.rng.randint(*self.params.propose_every_ms), "propose", 0)
        elif kind == "fault":
            if self.healed_at is None and self.now >= self.scripted_until:
                self._inject_fault()
                self._push(self.now + self.rng.randint(*self.params.fault_every_ms), "fault", 0)
        elif kind == "restart":
            self._restart(self.nodes[node_id], wipe=bool(payload))
        elif kind == "resume":
            self._resume(self.nodes[node_id])
        elif kind == "strand_cut":
            self._strand_cut(payload)
        elif kind == "restart_grantors":
            self._restart_grantors(payload)
        elif kind == "unstrand":
            self._unstrand(node_id)
        elif kind == "heal":
            self._heal()
        elif kind == "liveness_propose":
            self._liveness_propose()
        else:  # pragma: no cover
            raise AssertionError(kind)

    # ------------------------------------------------------------------ node runtime

    def _deliver(self, envelope: Envelope, incarnation: int) -> None:
        node = self.nodes[envelope.destination]
        if node.core is None or node.incarnation != incarnation:
            return  # the connection died with the process
        if not self.network.connected(envelope.source, envelope.destination):
            return
        if node.paused or node.io is not None:
            node.inbox.append(envelope)
            return
        node.core.step(envelope, self.now)
        self._after_activity(node)

    def _after_activity(self, node: SimNode) -> None:
        """Drain Ready's (the fsync takes virtual time) and schedule the next tick."""
        core = node.core
        assert core is not None
        while node.io is None and not node.paused:
            if node.inbox:
                core.step(node.inbox.pop(0), self.now)
                continue
            if not core.has_ready():
                break
            ready = core.ready()
            self._maybe_strand(node)
            if ready.must_sync:
                node.io = ready
                node.io_sent = self.early_send and ready.send_before_persist
                if node.io_sent:
                    self.sent_before_fsync += 1
                    self._send_and_apply(node, ready)
                self._push(self.now + self.rng.randint(0, 3), "io", node.node_id,
                           (node.incarnation, ready))
                return
            self._complete_ready(node, ready)
        if node.io is None and not node.paused:
            deadline = core.tick(self.now)
            if node.tick_at < 0 or deadline < node.tick_at or node.tick_at < self.now:
                node.tick_at = deadline
                self._push(deadline, "tick", node.node_id)
            if core.has_ready():
                self._after_activity(node)

    def _finish_io(self, node: SimNode, payload: object) -> None:
        assert isinstance(payload, tuple)
        incarnation: int = payload[0]
        ready: Ready = payload[1]
        if node.core is None or incarnation != node.incarnation or node.io is not ready:
            return
        node.io = None
        if ready.election_state is not None:
            node.stored = ready.election_state
            last = self.durable_epoch.get(node.node_id, 0)
            if ready.election_state.epoch < last:
                raise self.fail(f"node {node.node_id}: durable epoch went "
                                f"{last} -> {ready.election_state.epoch}")
            self.durable_epoch[node.node_id] = ready.election_state.epoch
        if ready.flush_log_to is not None:
            node.log.flush()
        if node.paused:  # paused mid-fsync: finish when resumed
            node.io = ready
            return
        self._complete_ready(node, ready)
        self._after_activity(node)

    def _complete_ready(self, node: SimNode, ready: Ready) -> None:
        assert node.core is not None
        if node.io_sent:
            node.io_sent = False
        else:
            self._send_and_apply(node, ready)
        node.core.advance(ready)
        self._maybe_snapshot(node)

    def _send_and_apply(self, node: SimNode, ready: Ready) -> None:
        for envelope in ready.messages:
            for at in self.network.route(envelope, self.now):
                dst = self.nodes[envelope.destination]
                self._push(at, "deliver", dst.node_id, (envelope, dst.incarnation))
        for event in ready.events:
            if isinstance(event, CommittedBatch):
                self._apply(node, event)
            elif isinstance(event, SnapshotLoad):
                self._load_snapshot(node, event)
            elif isinstance(event, LeaderAndEpoch):
                self._note(f"node {node.node_id}: leader {event.leader_id} epoch {event.epoch}")

    def _apply(self, node: SimNode, batch: CommittedBatch) -> None:
        m = node.machine
        if batch.base_offset != m.applied_end:
            raise self.fail(f"node {node.node_id} applied batch at {batch.base_offset}, "
                            f"expected {m.applied_end}")
        m.chain = hashlib.blake2b(m.chain + batch.data, digest_size=16).digest()
        m.applied_end = batch.last_offset + 1
        m.last_epoch = batch.epoch
        known = self.committed_chain.get(m.applied_end)
        if known is None:
            self.committed_chain[m.applied_end] = m.chain
            self.committed_batch[m.applied_end] = batch.data
        elif known != m.chain:
            raise self.fail(f"node {node.node_id}: committed prefix up to {m.applied_end} "
                            "differs from another node's")
        self.max_committed = max(self.max_committed, m.applied_end)
        if self.liveness_target is not None and self._live_marker in batch.data \
                and self.live_commit_end is None:
            self.live_committed_at = self.now
            self.live_commit_end = m.applied_end

    def _load_snapshot(self, node: SimNode, load: SnapshotLoad) -> None:
        end, epoch, chain = _SNAPSHOT.unpack(load.data)
        if end != load.snapshot_id.end_offset or epoch != load.snapshot_id.epoch:
            raise self.fail(f"node {node.node_id}: snapshot id/content mismatch")
        known = self.committed_chain.get(end)
        if known is not None and known != chain:
            raise self.fail(f"node {node.node_id}: snapshot at {end} disagrees with commits")
        node.machine = StateMachine(end, chain, epoch)

    def _maybe_snapshot(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        m = node.machine
        if m.applied_end - node.log.start_offset() < 40 or self.rng.random() > 0.05:
            return
        if m.applied_end != core.applied_offset or m.applied_end > node.log.flushed_offset():
            return
        data = _SNAPSHOT.pack(m.applied_end, m.last_epoch, m.chain)
        core.create_snapshot(m.applied_end, data, m.last_epoch)
        self._note(f"node {node.node_id}: snapshot at {m.applied_end}")

    # ------------------------------------------------------------------ clients

    def _current_leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values()
                if n.core is not None and n.core.is_leader and not n.paused]

    def _propose(self) -> None:
        for node in self._current_leaders():
            if node.io is not None:
                continue
            assert node.core is not None
            try:
                node.core.propose([b"v%d-%d" % (self.seed, self.proposals)], self.now)
                self.proposals += 1
            except NotLeaderError:
                continue
            self._after_activity(node)
            return

    def _liveness_propose(self) -> None:
        """After the heal, keep proposing a marker record to whoever leads until
        one commits (a leader may lose its queued proposals when it steps down)."""
        if self.liveness_target is None:
            self.liveness_target = self.now
        for node in self._current_leaders():
            assert node.core is not None
            if node.io is not None:
                continue
            node.core.propose([self._live_marker], self.now)
            self._after_activity(node)
            break
        self._push(self.now + 50, "liveness_propose", 0)

    @property
    def _live_marker(self) -> bytes:
        return b"live-%d" % self.seed

    def _liveness_reached(self) -> bool:
        """A marker proposed after the heal committed, and every node (voters
        and observers alike) has applied it: a replica stuck outside the
        leader's epoch (say, Prospective in a higher one) fails liveness even
        though a majority keeps committing without it."""
        return not self._lagging_nodes()

    def _lagging_nodes(self) -> list[int]:
        """Nodes that have not applied the first committed marker (all of
        them while none has committed)."""
        end = self.live_commit_end
        if end is None:
            return sorted(self.nodes)
        return [nid for nid, node in sorted(self.nodes.items())
                if node.core is None or node.machine.applied_end < end]

    # ------------------------------------------------------------------ faults

    def _inject_fault(self) -> None:
        rng = self.rng
        choice = rng.choice(("partition_halves", "isolate_leader", "bridge", "one_way",
                             "crash", "crash", "pause", "heal_network", "disk_loss",
                             "strand_candidate"))
        ids = list(self.voters + self.observers)
        if choice == "partition_halves":
            rng.shuffle(ids)
            half = len(ids) // 2
            self.network.heal()
            self.network.partition(ids[:half], ids[half:])
        elif choice == "isolate_leader":
            leaders = self._current_leaders()
            if not leaders:
                return
            lid = leaders[0].node_id
            self.network.heal()
            self.network.partition([lid], [i for i in ids if i != lid])
        elif choice == "bridge":
            voters = list(self.voters)
            rng.shuffle(voters)
            bridge = voters[0]
            rest = voters[1:]
            left, right = rest[:len(rest) // 2], rest[len(rest) // 2:]
            self.network.heal()
            for a in left:
                for b in right:
                    self.network.cut_one_way(a, b)
                    self.network.cut_one_way(b, a)
            _ = bridge
        elif choice == "one_way":
            a, b = rng.sample(list(self.voters), 2)
            self.network.cut_one_way(a, b)
        elif choice == "heal_network":
            self.network.heal()
        elif choice == "strand_candidate":
            if not self._strand_candidate():
                return
        elif choice == "crash":
            node = self.nodes[rng.choice(ids)]
            if node.core is None:
                return
            self._crash(node)
            self._push(self.now + rng.randint(20, 600), "restart", node.node_id, False)
        elif choice == "pause":
            node = self.nodes[rng.choice(ids)]
            if node.core is None or node.paused:
                return
            node.paused = True
            self._push(self.now + rng.randint(20, 800), "resume", node.node_id)
        elif choice == "disk_loss":
            if not self.params.disk_loss or self.wiped_voters:
                return
            node = self.nodes[rng.choice(list(self.voters))]
            if node.core is None:
                return
            self._crash(node)
            self.wiped_voters.add(node.node_id)
            self._push(self.now + rng.randint(20, 600), "restart", node.node_id, True)
        self.faults_injected.append(choice)
        self._note(f"fault {choice} cut={sorted(self.network.cut)}")

    def _strand_candidate(self) -> bool:
        """The "strand_candidate" fault: a follower V wins a pre-vote while the
        leader L keeps a majority, becomes a candidate of E+1, and is cut off
        before its vote requests leave (the shape of metadata_sim seed 257; seed 186
        drew it before controlled shutdown fenced brokers).

        Clients pause (so V's log stays as long as everyone's); 60 ms later
        L's answers to V are cut, so V's fetch timeout fires at its current
        deadline. One millisecond before it, the other followers V needs
        restart: a restarted follower grants pre-votes until its first fetch
        (KIP-996), then fetches from L again, so L keeps its majority in E
        while V, stranded, loses in E+1 and falls back to Prospective in E+1.
        Returns False when there is no such L and V now."""
        picked = self._strand_roles()
        if picked is None or self.strand_target is not None:
            return False
        lid, target, grantors = picked
        self.scripted_until = self.now + 60
        self._push(self.now + 60, "strand_cut", 0, (lid, target, grantors))
        return True

    def _strand_roles(self) -> tuple[int, int, tuple[int, ...]] | None:
        """(L, V, grantors): the live leader, a follower of it to strand and
        the followers whose grants V needs; None if there are not enough."""
        leaders = self._current_leaders()
        if not leaders:
            return None
        lid = leaders[0].node_id
        followers = []
        for vid in self.voters:
            node = self.nodes[vid]
            role = None if node.core is None else node.core.quorum.role
            if vid != lid and not node.paused and node.io is None \
                    and isinstance(role, FollowerState) and role.leader_id == lid:
                followers.append(vid)
        if len(followers) < self.config.majority:
            return None
        self.rng.shuffle(followers)
        return lid, followers[0], tuple(sorted(followers[1:self.config.majority]))

    def _strand_cut(self, payload: object) -> None:
        assert isinstance(payload, tuple)
        lid, target, grantors = payload
        core = self.nodes[target].core
        role = None if core is None else core.quorum.role
        leader = self.nodes[lid].core
        if self.healed_at is not None or leader is None or not leader.is_leader \
                or not isinstance(role, FollowerState) or role.leader_id != lid:
            self.scripted_until = self.now
            return
        deadline = max(self.now + 1, role.fetch_deadline_ms)
        self.network.cut_one_way(lid, target)
        self.strand_target = target
        # Time for V's pre-vote rounds to meet a restarted grantor; the strand
        # itself extends this.
        self.scripted_until = deadline + 2 * self.config.election_timeout_ms
        self._note(f"strand: cut {lid}->{target}, restart {grantors} at {deadline - 1}")
        self._push(deadline - 1, "restart_grantors", 0, grantors)

    def _restart_grantors(self, payload: object) -> None:
        assert isinstance(payload, tuple)
        if self.healed_at is not None:
            return
        for vid in payload:
            node = self.nodes[vid]
            if node.core is not None and not node.paused:
                self._crash(node)
                self._restart(node, wipe=False)

    def _maybe_strand(self, node: SimNode) -> None:
        """Cut the strand target off from every node once it is a candidate:
        its vote requests are in the Ready it is about to persist, so nobody
        learns its new epoch. Reconnected 300-1500 ms later."""
        core = node.core
        if self.strand_target != node.node_id or self.healed_at is not None \
                or core is None or core.role_name != "Candidate":
            return
        self.strand_target = None
        if self.now >= self.scripted_until:
            return  # it stood for other reasons, later: not this fault's shape
        others = [i for i in self.nodes if i != node.node_id]
        self.network.partition([node.node_id], others)
        self.stranded.append(node.node_id)
        self._note(f"strand candidate {node.node_id} in epoch {core.epoch}")
        until = self.now + self.rng.randint(300, 1500)
        self.scripted_until = until
        self._push(until, "unstrand", node.node_id)

    def _unstrand(self, node_id: int) -> None:
        """Reconnect a stranded candidate (other cuts stay as they are)."""
        for other in self.nodes:
            if other != node_id:
                self.network.cut.discard((node_id, other))
                self.network.cut.discard((other, node_id))
        self._note(f"unstrand node {node_id} cut={sorted(self.network.cut)}")

    def _crash(self, node: SimNode) -> None:
        self._note(f"crash node {node.node_id}")
        node.core = None
        node.io = None
        node.io_sent = False
        node.inbox.clear()
        node.paused = False
        node.log.crash()
        self.crashed.add(node.node_id)

    def _restart(self, node: SimNode, *, wipe: bool) -> None:
        if node.core is not None:
            return
        self.crashed.discard(node.node_id)
        if wipe:
            self._note(f"restart node {node.node_id} on an empty disk")
            node.log = MemoryLog()
            node.stored = None
            self.durable_epoch.pop(node.node_id, None)
            node.wiped = True
        else:
            self._note(f"restart node {node.node_id}")
        self._start_core(node, recovering=wipe)

    def _resume(self, node: SimNode) -> None:
        if not node.paused:
            return
        node.paused = False
        if node.core is None:
            return
        if node.io is not None:  # its fsync finished while paused
            ready, node.io = node.io, None
            self._complete_ready(node, ready)
        node.tick_at = -1
        self._after_activity(node)

    def _heal(self) -> None:
        self._note("heal: network, pauses and crashes")
        self.healed_at = self.now
        self.strand_target = None
        self.network.heal()
        self.network.faults = LinkFaults(0.0, 0.0, 1, self.params.faults.max_delay_ms)
        for node in self.nodes.values():
            if node.core is None:
                self._restart(node, wipe=False)
            elif node.paused:
                self._resume(node)
        self._push(self.now + 1, "liveness_propose", 0)

    # ------------------------------------------------------------------ invariants

    def _check_invariants(self) -> None:
        majority = self.config.majority
        for node in self.nodes.values():
            core = node.core
            if core is None:
                continue
            if core.epoch < node.max_epoch:
                raise self.fail(f"node {node.node_id}: epoch went {node.max_epoch} -> {core.epoch}")
            node.max_epoch = core.epoch
            if core.high_watermark < node.max_hw:
                raise self.fail(f"node {node.node_id}: HW went {node.max_hw} -> "
                                f"{core.high_watermark}")
            node.max_hw = core.high_watermark
            if not core.is_leader:
                continue
            # At most one leader per epoch.
            known = self.leaders.get(core.epoch)
            if known is not None and known != node.node_id:
                raise self.fail(f"two leaders in epoch {core.epoch}: {known} and {node.node_id}")
            # Leader completeness (Raft thesis 3.6): the leader of epoch E holds
            # every record committed by leaders of earlier epochs. (A leader
            # that was paused may lag commits of later epochs; it cannot
            # commit anything itself any more.)
            if known is None:
                earlier = max((hw for e, hw in self.commits_by_epoch.items() if e < core.epoch),
                              default=0)
                if node.log.end_offset() < earlier:
                    raise self.fail(f"leader {node.node_id} (epoch {core.epoch}) log ends at "
                                    f"{node.log.end_offset()}, below {earlier} committed in "
                                    "earlier epochs")
            self.leaders[core.epoch] = node.node_id
            hw = core.high_watermark
            if hw > self.max_committed_by_leaders():
                self._record_leader_commit(node, hw)
            self._check_majority_holds(node, hw, majority)

    def max_committed_by_leaders(self) -> int:
        return self._leader_committed

    _leader_committed = 0

    def _record_leader_commit(self, node: SimNode, hw: int) -> None:
        self._leader_committed = hw
        assert node.core is not None
        epoch = node.core.epoch
        self.commits_by_epoch[epoch] = max(self.commits_by_epoch.get(epoch, 0), hw)
        batch = node.log.batch_containing(hw - 1)
        if batch is not None and batch.next_offset == hw:
            known = self.committed_batch.get(hw)
            if known is not None and known != batch.data:
                raise self.fail(f"leader {node.node_id} committed different bytes at {hw}")
            self.committed_batch[hw] = batch.data

    def _check_majority_holds(self, leader: SimNode, hw: int, majority: int) -> None:
        """Every committed offset is held (flushed) by a majority of voters;
        a voter that lost its disk is excused (there is at most one)."""
        if hw <= leader.log.start_offset():
            return
        mine = leader.log.batch_containing(hw - 1)
        if mine is None:
            raise self.fail(f"leader {leader.node_id} lacks its own committed offset {hw - 1}")
        holders = 0
        for vid in self.voters:
            log = self.nodes[vid].log
            if log.start_offset() >= hw:
                holders += 1
                continue
            if log.flushed_offset() < hw:
                continue
            theirs = log.batch_containing(hw - 1)
            if theirs is not None and theirs.data == mine.data:
                holders += 1
        if holders + len(self.wiped_voters) < majority:
            raise self.fail(f"offset {hw - 1} committed by leader {leader.node_id} is held by "
                            f"only {holders} voters")


def run_seed(seed: int, *, core_factory: CoreFactory = KRaftCore) -> dict[str, object]:
    """Run one seed; raise `SimulationFailure` on a broken invariant."""
    return Simulation(seed, core_factory=core_factory).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Replay KRaft simulation seeds.")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=1, help="run seeds seed..seed+count-1")
    parser.add_argument("--trace", action="store_true", help="print the event trace tail")
    args = parser.parse_args(argv)
    failures = 0
    for seed in range(args.seed, args.seed + args.count):
        sim = Simulation(seed)
        try:
            summary = sim.run()
        except SimulationFailure as exc:
            failures += 1
            print(exc)
            continue
        print(" ".join(f"{k}={v}" for k, v in summary.items()))
        if args.trace:
            print("\n".join(sim.trace[-60:]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
