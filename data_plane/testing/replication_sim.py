"""Deterministic simulation of one partition's replication (Kafka's
``RaftEventSimulationTest`` and TigerBeetle's VOPR, applied to the data plane).

One partition, RF=3, ``min.insync.replicas``=2, brokers 1-3, a
`FakeController`, a producer sending acks=all, all on a virtual clock in one
thread and driven by one seeded `random.Random`. Each broker runs the real
`Partition` core and `Purgatory` over a real `raftlog.storage.Log` on its own
`FakeFileSystem`; logs are not fsynced per write (as in Kafka), only on
segment rolls and on random "page-cache writeback" flushes.

Faults: message drop and delay (hence reorder) on every link, all the time;
and, one at a time, a broker crash (losing its unsynced bytes, with torn
tails) and restart, a pause (SIGSTOP), a network partition isolating one
broker (usually the leader, with or without the producer), and fast
back-to-back leader moves (KIP-279).

**Fault model (the durability promise).** acks=all with RF=3 and minISR=2
survives any *single* crash, pause or partition. Kafka's design without
KIP-966 relies on at most one failure at a time plus the ISR: a crash that
loses unsynced data is injected only when no other fault is active, the
controller's ISR holds all three replicas (the previous victim has fully
rejoined) and no leader has an ISR change in flight. Pauses, partitions and leader moves need only that no other fault
is active. Two overlapping data-losing crashes would be the "last replica
standing" loss of kraft.md §4 #7, which Kafka fixes only with KIP-966.

Invariants, checked after every event (`SimulationFailure` names the seed):

- no acknowledged offset is lost or changes value: when the ack arrives the
  offset must be committed with that value, and the acting leader's log must
  always hold every acknowledged offset, byte-identical;
- committed data never changes: every replica's log below the HW it knows
  is byte-identical to what was first committed at those offsets (batch by
  batch, so replicas agree byte for byte below their HW);
- a leader's HW never decreases within its epoch; one leader per epoch.

After the safety phase everything heals; the liveness phase requires the ISR
to return to all three replicas, a new acknowledged write, and all replica
logs to become byte-identical (checked once more at the end).
``python -m data_plane.testing.replication_sim --seed N`` replays a seed.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from data_plane.purgatory import DelayedFetch, DelayedProduce, ProduceWait, Purgatory
from data_plane.replication.partition import Partition
from data_plane.replication.types import (
    NO_LEADER,
    Acks,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AppendResult,
    FetchPartition,
    FetchPartitionResult,
    FollowerFetchOutcome,
    PartitionState,
    ReplicationConfig,
    TopicPartition,
)
from data_plane.testing.fake_controller import FakeController, MetadataVersion
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, decode_records, iter_batches
from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

TOPIC = "sim"
KEY: TopicPartition = (TOPIC, 0)
BROKERS = (1, 2, 3)
CONTROLLER = 0
PRODUCER = 100
LOG_DIR = "/data/sim-0"

PartitionFactory = Callable[..., Partition]


class SimulationFailure(AssertionError):
    """An invariant broke or the cluster got stuck. Carries the seed."""

    def __init__(self, seed: int, now_ms: int, message: str, trace: list[str]) -> None:
        tail = "\n".join(trace[-30:])
        super().__init__(
            f"seed {seed} failed at t={now_ms} ms: {message}\n"
            f"replay: python -m data_plane.testing.replication_sim --seed {seed}\n"
            f"last events:\n{tail}"
        )
        self.seed = seed
        self.now_ms = now_ms
        self.reason = message


@dataclass(frozen=True, slots=True)
class SimParams:
    """The knobs one seed draws (`SimParams.draw`); times are virtual ms,
    Kafka's defaults scaled down so each seed sees many faults."""

    safety_ms: int
    liveness_ms: int
    drop_probability: float
    max_delay_ms: int
    fault_gap_ms: tuple[int, int]
    produce_every_ms: tuple[int, int]
    replica_lag_time_max_ms: int
    session_timeout_ms: int
    segment_bytes: int
    torn_crashes: bool
    tick_ms: int = 25
    heartbeat_ms: int = 200
    metadata_pull_ms: int = 60
    fetch_max_wait_ms: int = 100
    fetch_timeout_ms: int = 400
    produce_timeout_ms: int = 1500
    flush_every_ms: tuple[int, int] = (300, 3000)

    @staticmethod
    def draw(rng: random.Random) -> SimParams:
        return SimParams(
            safety_ms=rng.randint(6_000, 10_000),
            liveness_ms=15_000,
            drop_probability=rng.choice((0.0, 0.01, 0.03)),
            max_delay_ms=rng.choice((2, 10, 40)),
            fault_gap_ms=(200, 1200),
            produce_every_ms=(10, 60),
            replica_lag_time_max_ms=rng.choice((800, 1500)),
            session_timeout_ms=rng.choice((600, 1000)),
            segment_bytes=rng.choice((1024, 4096)),
            torn_crashes=rng.random() < 0.5,
        )


@dataclass(slots=True)
class _InFlightFetch:
    request_id: int
    request: FetchPartition
    sent_at_ms: int


@dataclass(slots=True)
class SimBroker:
    """One broker process: its disk survives crashes, everything else does not."""

    broker_id: int
    fs: FakeFileSystem
    log: Log
    partition: Partition
    broker_epoch: int
    produce_purgatory: Purgatory[DelayedProduce] = field(default_factory=Purgatory)
    fetch_purgatory: Purgatory[DelayedFetch] = field(default_factory=Purgatory)
    # Replies owed when a delayed operation finishes, by id(operation).
    owed: dict[int, Callable[[], None]] = field(default_factory=dict)
    incarnation: int = 0
    crashed: bool = False
    paused: bool = False
    inbox: list[Callable[[], None]] = field(default_factory=list)
    metadata_version: int = 0
    next_heartbeat_ms: int = 0
    next_metadata_ms: int = 0
    next_flush_ms: int = 0
    fetch: _InFlightFetch | None = None
    # Checker state: offsets below this were compared with the committed record.
    verified_upto: int = 0
    # (incarnation, epoch) -> highest HW seen while leading.
    leader_hw: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return not self.crashed


@dataclass(slots=True)
class SimReport:
    seed: int
    virtual_ms: int
    events: int
    acked_records: int
    crashes: int
    pauses: int
    isolations: int
    leader_moves: int
    elections: int
    truncations: int
    final_log_end_offset: int


class ReplicationSimulation:
    """One seeded run; `run` returns a `SimReport` or raises `SimulationFailure`."""

    def __init__(self, seed: int, *, partition_factory: PartitionFactory = Partition,
                 params: SimParams | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.params = params or SimParams.draw(self.rng)
        self.partition_factory = partition_factory
        self.now_ms = 0
        self.clock = FakeClock(wall_ms=1_700_000_000_000, monotonic_ms=0)
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.events = 0
        self.trace: list[str] = []
        self.config = ReplicationConfig(
            replica_lag_time_max_ms=self.params.replica_lag_time_max_ms,
            min_insync_replicas=2,
            replica_fetch_backoff_ms=50,
            alter_partition_retry_backoff_ms=20,
            alter_partition_timeout_ms=400,
        )
        self.log_config = LogConfig(segment_bytes=self.params.segment_bytes,
                                    index_interval_bytes=256)
        initial = PartitionState(TOPIC, 0, leader=1, leader_epoch=0, partition_epoch=0,
                                 replicas=BROKERS, isr=BROKERS)
        self.controller = FakeController(initial, session_timeout_ms=self.params.session_timeout_ms,
                                         rng=self.rng)
        self.brokers: dict[int, SimBroker] = {}
        epochs = self.controller.bootstrap(BROKERS, 0)
        for broker_id in BROKERS:
            fs = FakeFileSystem()
            log = Log.open(LOG_DIR, self.log_config, fs=fs, clock=self.clock)
            epoch = epochs[broker_id]
            self.brokers[broker_id] = SimBroker(
                broker_id, fs, log, self._new_partition(broker_id, log, epoch), epoch
            )
        # Network faults: one isolated broker at most.
        self.isolated: int | None = None
        self.producer_reaches_isolated = False
        self.active_fault: str | None = None
        self.safety_over = False
        # Committed record: base offset -> batch bytes, contiguous from 0 to committed_end.
        self.committed: dict[int, bytes] = {}
        self.committed_end = 0
        # Acknowledged writes: offset -> value.
        self.acked: dict[int, bytes] = {}
        self.acked_end = 0
        self.acked_after_heal = 0
        self.epoch_leaders: dict[int, int] = {}
        # Producer.
        self._next_value = 0
        self._next_request_id = 0
        self._producer_in_flight: dict[int, int] = {}  # request id -> sent at
        self.stats = {"crashes": 0, "pauses": 0, "isolations": 0, "leader_moves": 0,
                      "truncations": 0}

    def _new_partition(self, broker_id: int, log: Log, broker_epoch: int) -> Partition:
        return self.partition_factory(TOPIC, 0, local_id=broker_id, log=log,
                                      config=self.config, broker_epoch=broker_epoch)

    # ==== event loop ================================================================

    def _at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, action))

    def note(self, message: str) -> None:
        self.trace.append(f"t={self.now_ms} {message}")
        if len(self.trace) > 400:
            del self.trace[:200]

    def fail(self, message: str) -> SimulationFailure:
        return SimulationFailure(self.seed, self.now_ms, message, self.trace)

    def run(self) -> SimReport:
        """Safety phase, heal, liveness phase; raises `SimulationFailure`."""
        p = self.params
        for broker_id in BROKERS:
            self._at(self.rng.randint(0, p.tick_ms), functools.partial(self._broker_tick, broker_id))
        self._at(0, self._controller_tick)
        self._at(0, self._producer_tick)
        self._at(self.rng.randint(*p.fault_gap_ms), self._fault_tick)
        self._at(p.safety_ms, self._heal_all)
        deadline = p.safety_ms + p.liveness_ms
        try:
            while self._queue:
                time_ms, _, action = heapq.heappop(self._queue)
                if time_ms > deadline:
                    break
                self.now_ms = time_ms
                self.clock.advance(time_ms - self.clock.monotonic_ms())
                action()
                self.events += 1
                self._check_invariants()
                if self.safety_over and self._converged():
                    self._check_final()
                    return self._report()
        except SimulationFailure:
            raise
        except Exception as e:
            raise self.fail(f"{type(e).__name__}: {e}") from e
        raise self.fail(self._stuck_reason())

    # ==== network ===================================================================

    def _connected(self, a: int, b: int) -> bool:
        if self.isolated is None or self.isolated not in (a, b):
            return True
        other = b if a == self.isolated else a
        return other == PRODUCER and self.producer_reaches_isolated

    def _send(self, src: int, dst: int, deliver: Callable[[], None]) -> None:
        if not self._connected(src, dst) or self.rng.random() < self.params.drop_probability:
            return
        incarnation = self.brokers[dst].incarnation if dst in self.brokers else 0
        delay = self.rng.randint(1, self.params.max_delay_ms)
        self._at(self.now_ms + delay, lambda: self._arrive(src, dst, incarnation, deliver))

    def _arrive(self, src: int, dst: int, incarnation: int, deliver: Callable[[], None]) -> None:
        if not self._connected(src, dst):
            return
        broker = self.brokers.get(dst)
        if broker is not None:
            if broker.crashed or broker.incarnation != incarnation:
                return
            if broker.paused:
                broker.inbox.append(deliver)
                return
        deliver()

    # ==== brokers ===================================================================

    def _broker_tick(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        self._at(self.now_ms + self.params.tick_ms, lambda: self._broker_tick(broker_id))
        if b.crashed or b.paused:
            return
        now = self.now_ms
        for op in b.produce_purgatory.expire(now):
            b.owed.pop(id(op))()
        for fetch_op in b.fetch_purgatory.expire(now):
            b.owed.pop(id(fetch_op))()
        if now >= b.next_heartbeat_ms:
            b.next_heartbeat_ms = now + self.params.heartbeat_ms
            epoch = b.broker_epoch
            self._send(broker_id, CONTROLLER,
                       lambda: self.controller.heartbeat(broker_id, epoch, self.now_ms))
        if now >= b.next_metadata_ms:
            b.next_metadata_ms = now + self.params.metadata_pull_ms
            self._pull_metadata(b)
        if now >= b.next_flush_ms:
            # Page-cache writeback: the OS flushes on its own schedule.
            if b.next_flush_ms:
                b.log.flush()
            b.next_flush_ms = now + self.rng.randint(*self.params.flush_every_ms)
        b.partition.maybe_shrink_isr(now)
        self._send_alter_partition(b)
        if b.fetch is not None and now - b.fetch.sent_at_ms > self.params.fetch_timeout_ms:
            b.fetch = None
        self._maybe_fetch(b)

    def _pull_metadata(self, b: SimBroker) -> None:
        broker_id, since = b.broker_id, b.metadata_version
        incarnation = b.incarnation

        def at_controller() -> None:
            updates = self.controller.history[since:]
            end = len(self.controller.history)
            if updates:
                self._send(CONTROLLER, broker_id,
                           lambda: self._apply_metadata(broker_id, incarnation, updates, end))

        self._send(broker_id, CONTROLLER, at_controller)

    def _apply_metadata(self, broker_id: int, incarnation: int,
                        updates: list[MetadataVersion], end: int) -> None:
        b = self.brokers[broker_id]
        if b.incarnation != incarnation or end <= b.metadata_version:
            return
        # A running broker may replay each record or jump to the latest image;
        # a (re)started one publishes only the image it caught up to (KRaft
        # brokers publish metadata once they reach the log's high watermark),
        # never states from before its registration.
        if b.metadata_version == 0 or self.rng.random() < 0.5:
            updates = updates[-1:]
        b.metadata_version = end
        epoch_before = b.partition.leader_epoch
        for version in updates:
            state = version.state
            if state.leader == broker_id:
                changed = b.partition.become_leader(state, self.now_ms)
            else:
                changed = b.partition.become_follower(state, self.now_ms)
            b.partition.update_ineligible_replicas(version.fenced)
            if changed:
                self.note(f"b{broker_id} applies {state.leader}@{state.leader_epoch} "
                          f"pe={state.partition_epoch} isr={state.isr} -> {b.partition.role.value}")
        if b.partition.leader_epoch != epoch_before:
            b.fetch = None
        self._after_change(b)
        self._maybe_fetch(b)

    def _send_alter_partition(self, b: SimBroker) -> None:
        request = b.partition.poll_alter_partition(self.now_ms)
        if request is None:
            return
        self.note(f"b{b.broker_id} AlterPartition {request.new_isr} "
                  f"e={request.leader_epoch} pe={request.partition_epoch}")
        broker_id, incarnation = b.broker_id, b.incarnation

        def at_controller(req: AlterPartitionRequest = request) -> None:
            response = self.controller.alter_partition(req)
            if (response.error == ErrorCode.none and len(req.new_isr) == len(BROKERS)
                    and not self.safety_over and self.rng.random() < 0.3):
                # Nemesis timed to an ISR expansion: crash the leader while the
                # newcomer may still lag (the maximal-ISR race, kraft.md §4 #4).
                self._at(self.now_ms + self.rng.randint(0, 30), self._crash_leader_if_allowed)
            self._send(CONTROLLER, broker_id,
                       lambda: self._on_alter_partition_response(broker_id, incarnation, response))

        self._send(broker_id, CONTROLLER, at_controller)

    def _on_alter_partition_response(self, broker_id: int, incarnation: int,
                                     response: AlterPartitionResponse) -> None:
        b = self.brokers[broker_id]
        if b.incarnation != incarnation:
            return
        b.partition.handle_alter_partition_response(response, self.now_ms)
        self._after_change(b)

    def _after_change(self, b: SimBroker) -> None:
        """Wake delayed operations after an append, HW move, ISR or role change."""
        for op in b.produce_purgatory.check_and_complete(KEY, self.now_ms):
            b.owed.pop(id(op))()
        for fetch_op in b.fetch_purgatory.check_and_complete(KEY, self.now_ms):
            b.owed.pop(id(fetch_op))()

    # ---- fetch ---------------------------------------------------------------------

    def _maybe_fetch(self, b: SimBroker) -> None:
        if b.crashed or b.paused or b.fetch is not None:
            return
        request = b.partition.fetch_request(self.now_ms)
        if request is None:
            return
        leader = b.partition.leader_id
        self._next_request_id += 1
        b.fetch = _InFlightFetch(self._next_request_id, request, self.now_ms)
        follower_id, request_id, incarnation = b.broker_id, self._next_request_id, b.incarnation
        self._send(follower_id, leader,
                   lambda: self._on_fetch(leader, follower_id, incarnation, request_id, request))

    def _on_fetch(self, leader_id: int, follower_id: int, incarnation: int, request_id: int,
                  request: FetchPartition) -> None:
        b = self.brokers[leader_id]

        def reply() -> None:
            result = b.partition.handle_fetch(request, self.now_ms)
            self._after_change(b)
            self._send(leader_id, follower_id, lambda: self._on_fetch_response(
                follower_id, incarnation, request_id, result))

        result = b.partition.handle_fetch(request, self.now_ms)
        self._after_change(b)
        if result.error != ErrorCode.none or result.records or result.diverging_epoch:
            self._send(leader_id, follower_id, lambda: self._on_fetch_response(
                follower_id, incarnation, request_id, result))
            return
        op = DelayedFetch({KEY: request}, min_bytes=1,
                          deadline_ms=self.now_ms + self.params.fetch_max_wait_ms,
                          lookup=self._lookup(b))
        if b.fetch_purgatory.try_complete_else_watch(op, self.now_ms):
            reply()
        else:
            b.owed[id(op)] = reply

    def _lookup(self, b: SimBroker) -> Callable[[TopicPartition], Partition | None]:
        partition = b.partition
        return lambda key: partition if key == KEY else None

    def _on_fetch_response(self, follower_id: int, incarnation: int, request_id: int,
                           result: FetchPartitionResult) -> None:
        b = self.brokers[follower_id]
        if b.incarnation != incarnation or b.fetch is None or b.fetch.request_id != request_id:
            return
        request = b.fetch.request
        b.fetch = None
        outcome = b.partition.handle_fetch_response(request, result, self.now_ms)
        if outcome is FollowerFetchOutcome.TRUNCATED:
            self.stats["truncations"] += 1
            self.note(f"b{follower_id} truncated to {b.log.log_end_offset} "
                      f"({result.diverging_epoch})")
        b.verified_upto = min(b.verified_upto, b.log.log_end_offset)
        self._after_change(b)
        self._maybe_fetch(b)

    # ==== controller ================================================================

    def _controller_tick(self) -> None:
        self._at(self.now_ms + self.params.tick_ms, self._controller_tick)
        before = len(self.controller.history)
        self.controller.tick(self.now_ms)
        if len(self.controller.history) != before:
            s = self.controller.state
            self.note(f"controller fences: leader={s.leader}@{s.leader_epoch} isr={s.isr}")

    # ==== producer ==================================================================

    def _producer_tick(self) -> None:
        self._at(self.now_ms + self.rng.randint(*self.params.produce_every_ms),
                 self._producer_tick)
        for request_id, sent_at in list(self._producer_in_flight.items()):
            if self.now_ms - sent_at > self.params.produce_timeout_ms + 500:
                del self._producer_in_flight[request_id]  # indefinite: never acked
        if self.safety_over and self.acked_after_heal > 0:
            return  # quiesce so the replicas can converge
        leader = self.controller.state.leader
        if leader == NO_LEADER or len(self._producer_in_flight) >= 5:
            return
        builder = BatchBuilder()
        values = []
        for _ in range(self.rng.randint(1, 3)):
            value = f"v{self._next_value}".encode()
            self._next_value += 1
            values.append(value)
            builder.append(value, timestamp_ms=self.clock.wall_ms())
        records = bytearray(builder.build())
        self._next_request_id += 1
        request_id = self._next_request_id
        self._producer_in_flight[request_id] = self.now_ms
        self._send(PRODUCER, leader, lambda: self._on_produce(leader, request_id, records, values))

    def _on_produce(self, leader_id: int, request_id: int, records: bytearray,
                    values: list[bytes]) -> None:
        b = self.brokers[leader_id]
        result = b.partition.append_records(records, Acks.ALL, self.now_ms)
        if result.error == ErrorCode.none:
            self.note(f"b{leader_id} appended {values} at {result.base_offset} "
                      f"e={result.leader_epoch}")
        self._after_change(b)
        if result.error != ErrorCode.none:
            self._send(leader_id, PRODUCER,
                       lambda: self._on_produce_response(request_id, result.error, result, values))
            return
        op = DelayedProduce({KEY: ProduceWait(result.required_offset, result.leader_epoch)},
                            deadline_ms=self.now_ms + self.params.produce_timeout_ms,
                            lookup=self._lookup(b))

        def reply() -> None:
            error = op.outcome[KEY]
            self._send(leader_id, PRODUCER,
                       lambda: self._on_produce_response(request_id, error, result, values))

        if b.produce_purgatory.try_complete_else_watch(op, self.now_ms):
            reply()
        else:
            b.owed[id(op)] = reply

    def _on_produce_response(self, request_id: int, error: ErrorCode, result: AppendResult,
                             values: list[bytes]) -> None:
        self._producer_in_flight.pop(request_id, None)
        if error != ErrorCode.none:
            return
        base = result.base_offset
        if base + len(values) > self.committed_end or base not in self.committed:
            raise self.fail(f"acked offsets {base}..{base + len(values) - 1} are not committed "
                            f"(committed end {self.committed_end})")
        stored = [r.value for r in decode_records(self.committed[base])]
        if stored != values:
            raise self.fail(f"acked {values} at {base} but the committed batch holds {stored}")
        for i, value in enumerate(values):
            self.acked[base + i] = value
        self.acked_end = max(self.acked_end, base + len(values))
        if self.safety_over:
            self.acked_after_heal += 1
        self.note(f"producer acked {values} at {base}")

    # ==== faults ====================================================================

    def _fault_tick(self) -> None:
        if self.safety_over:
            return
        self._at(self.now_ms + self.rng.randint(*self.params.fault_gap_ms), self._fault_tick)
        if self.active_fault is not None:
            return
        leader = self.controller.state.leader
        target = leader if leader != NO_LEADER and self.rng.random() < 0.6 else (
            self.rng.choice(BROKERS))
        kinds = ["pause", "isolate", "leader_moves", "none"]
        if self._crash_allowed():
            kinds += ["crash", "crash"]
        kind = self.rng.choice(kinds)
        duration = self.rng.randint(50, 3000)
        if kind == "crash":
            self._crash(target)
            self._at(self.now_ms + duration, lambda: self._restart(target))
        elif kind == "pause":
            self.stats["pauses"] += 1
            self.active_fault = f"pause b{target}"
            self.brokers[target].paused = True
            self.note(f"FAULT pause b{target} for {duration} ms")
            self._at(self.now_ms + duration, lambda: self._resume(target))
        elif kind == "isolate":
            self.stats["isolations"] += 1
            self.active_fault = f"isolate b{target}"
            self.isolated = target
            self.producer_reaches_isolated = self.rng.random() < 0.5
            self.note(f"FAULT isolate b{target} (producer reaches it: "
                      f"{self.producer_reaches_isolated}) for {duration} ms")
            self._at(self.now_ms + duration, self._heal_network)
        elif kind == "leader_moves":
            self._leader_moves(self.rng.randint(2, 4))

    def _crash_leader_if_allowed(self) -> None:
        leader = self.controller.state.leader
        if leader == NO_LEADER or self.safety_over or not self._crash_allowed():
            return
        self._crash(leader)
        self._at(self.now_ms + self.rng.randint(50, 3000), lambda: self._restart(leader))

    def _crash_allowed(self) -> bool:
        # An AlterPartition in flight counts as well as the committed ISR: a
        # leader that proposed shrinking the ISR to itself and then lost its
        # unsynced bytes would be the last ISR member once the shrink commits
        # (seed 714538: the shrink arrived after the crash). That is the
        # two-failure "last replica standing" loss the fault model excludes.
        return (
            self.active_fault is None
            and set(self.controller.state.isr) == set(BROKERS)
            and not any(b.partition.isr_change_in_flight for b in self.brokers.values()
                        if not b.crashed and b.partition.is_leader)
            and all(b.running and not b.paused for b in self.brokers.values())
            and not self.controller.fenced()
        )

    def _crash(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        self.stats["crashes"] += 1
        self.active_fault = f"crash b{broker_id}"
        lost = b.log.log_end_offset - b.log.flushed_offset
        b.crashed = True
        b.fs.crash(self.rng, torn=self.params.torn_crashes)
        b.owed.clear()
        self.note(f"FAULT crash b{broker_id} (LEO {b.log.log_end_offset}, "
                  f"~{lost} unsynced offsets at risk)")

    def _restart(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        if not b.crashed:
            return
        b.crashed = False
        b.incarnation += 1
        b.log = Log.open(LOG_DIR, self.log_config, fs=b.fs, clock=self.clock)
        b.broker_epoch = self.controller.register(broker_id, self.now_ms)
        b.partition = self._new_partition(broker_id, b.log, b.broker_epoch)
        b.produce_purgatory = Purgatory()
        b.fetch_purgatory = Purgatory()
        b.owed = {}
        b.inbox = []
        b.fetch = None
        b.metadata_version = 0
        b.next_heartbeat_ms = b.next_metadata_ms = self.now_ms
        b.verified_upto = min(b.verified_upto, b.log.log_end_offset)
        self.active_fault = None
        self.note(f"HEAL restart b{broker_id}: recovered LEO {b.log.log_end_offset}, "
                  f"broker epoch {b.broker_epoch}")

    def _resume(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        if not b.paused:
            return
        b.paused = False
        self.active_fault = None
        inbox, b.inbox = b.inbox, []
        self.note(f"HEAL resume b{broker_id} ({len(inbox)} buffered messages)")
        for deliver in inbox:
            deliver()

    def _heal_network(self) -> None:
        if self.isolated is not None:
            self.note(f"HEAL network (b{self.isolated} rejoins)")
        self.isolated = None
        self.active_fault = None

    def _leader_moves(self, count: int) -> None:
        """Back-to-back leader changes a few ms apart (KIP-279)."""
        self.stats["leader_moves"] += 1

        def move(left: int) -> None:
            if self.safety_over or not self.controller.move_leader(self.rng):
                return
            s = self.controller.state
            self.note(f"FAULT leader move -> b{s.leader}@{s.leader_epoch}")
            if left > 1:
                self._at(self.now_ms + self.rng.randint(1, 30), lambda: move(left - 1))

        move(count)

    def _heal_all(self) -> None:
        self.safety_over = True
        self.note("=== heal all; liveness phase ===")
        self._heal_network()
        for broker_id, b in self.brokers.items():
            if b.crashed:
                self._restart(broker_id)
            if b.paused:
                self._resume(broker_id)
        self.params = _without_drops(self.params)

    # ==== invariants ================================================================

    def _check_invariants(self) -> None:
        state = self.controller.state
        for b in self.brokers.values():
            if b.crashed:
                continue
            p = b.partition
            if b.verified_upto > b.log.log_end_offset:
                b.verified_upto = b.log.log_end_offset
            if not b.log.log_start_offset <= p.high_watermark <= b.log.log_end_offset:
                raise self.fail(f"b{b.broker_id} HW {p.high_watermark} outside its log")
            target = p.high_watermark
            if p.is_leader:
                epoch = p.leader_epoch
                owner = self.epoch_leaders.setdefault(epoch, b.broker_id)
                if owner != b.broker_id:
                    raise self.fail(f"two leaders in epoch {epoch}: b{owner} and b{b.broker_id}")
                key = (b.incarnation, epoch)
                if p.high_watermark < b.leader_hw.get(key, 0):
                    raise self.fail(f"b{b.broker_id} leader HW went down in epoch {epoch}: "
                                    f"{b.leader_hw[key]} -> {p.high_watermark}")
                b.leader_hw[key] = p.high_watermark
                if epoch == state.leader_epoch:
                    # The acting leader must hold every acknowledged write.
                    if b.log.log_end_offset < self.acked_end:
                        raise self.fail(f"acknowledged offsets lost: leader b{b.broker_id} "
                                        f"LEO {b.log.log_end_offset} < acked end {self.acked_end}")
                    target = max(target, self.acked_end)
            self._verify_prefix(b, target)

    def _verify_prefix(self, b: SimBroker, upto: int) -> None:
        """Compare b's batches below ``upto`` with the committed record."""
        while b.verified_upto < upto:
            start = b.verified_upto
            data = b.log.read(start, 1 << 16, max_offset=upto).records
            if not data:
                return
            for header, pos in iter_batches(data):
                if header.base_offset != b.verified_upto:
                    raise self.fail(f"b{b.broker_id} batch at {header.base_offset}, "
                                    f"expected one at {b.verified_upto}")
                batch = data[pos:pos + header.size_in_bytes]
                if header.base_offset < self.committed_end:
                    expected = self.committed.get(header.base_offset)
                    if expected != batch:
                        raise self.fail(
                            f"b{b.broker_id} disagrees with committed data at offset "
                            f"{header.base_offset} (below HW {upto}): "
                            f"{_describe(batch)} != {_describe(expected)}")
                else:
                    if header.base_offset != self.committed_end:
                        raise self.fail(f"gap in committed data at {self.committed_end}")
                    self.committed[header.base_offset] = bytes(batch)
                    self.committed_end = header.next_offset
                b.verified_upto = header.next_offset
            if b.verified_upto == start:
                return

    def _converged(self) -> bool:
        if self.acked_after_heal == 0:
            return False
        state = self.controller.state
        if state.leader == NO_LEADER or set(state.isr) != set(BROKERS):
            return False
        leader = self.brokers[state.leader]
        p = leader.partition
        if not p.is_leader or p.leader_epoch != state.leader_epoch:
            return False
        leo = leader.log.log_end_offset
        return p.high_watermark == leo and all(
            b.log.log_end_offset == leo and b.partition.high_watermark == leo
            for b in self.brokers.values()
        )

    def _check_final(self) -> None:
        leader = self.brokers[self.controller.state.leader]
        leo = leader.log.log_end_offset
        reference = _whole_log(leader.log)
        for b in self.brokers.values():
            if _whole_log(b.log) != reference:
                raise self.fail(f"b{b.broker_id}'s log differs from the leader's after healing")
        values: dict[int, bytes | None] = {}
        for header, pos in iter_batches(reference):
            for record in decode_records(reference, pos=pos):
                values[record.offset] = record.value
            del header
        for offset, value in self.acked.items():
            if values.get(offset) != value:
                raise self.fail(f"acked {value!r} at {offset}, final log holds "
                                f"{values.get(offset)!r} (LEO {leo})")

    def _stuck_reason(self) -> str:
        s = self.controller.state
        parts = [f"liveness: no convergence {self.params.liveness_ms} ms after healing; "
                 f"controller leader={s.leader}@{s.leader_epoch} isr={s.isr} "
                 f"acked after heal={self.acked_after_heal}"]
        for b in self.brokers.values():
            p = b.partition
            parts.append(f"b{b.broker_id}: {p.role.value}@{p.leader_epoch} "
                         f"LEO={b.log.log_end_offset} HW={p.high_watermark} isr={p.isr} "
                         f"pending={p.isr_change_in_flight}")
        return "; ".join(parts)

    def _report(self) -> SimReport:
        leader = self.brokers[self.controller.state.leader]
        return SimReport(
            seed=self.seed, virtual_ms=self.now_ms, events=self.events,
            acked_records=len(self.acked), crashes=self.stats["crashes"],
            pauses=self.stats["pauses"], isolations=self.stats["isolations"],
            leader_moves=self.stats["leader_moves"], elections=self.controller.elections,
            truncations=self.stats["truncations"],
            final_log_end_offset=leader.log.log_end_offset,
        )


def _without_drops(params: SimParams) -> SimParams:
    from dataclasses import replace
    return replace(params, drop_probability=0.0)


def _whole_log(log: Log) -> bytes:
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        last = None
        for header, _ in iter_batches(data):
            last = header
        assert last is not None
        out += data
        offset = last.next_offset
    return bytes(out)


def _describe(batch: bytes | bytearray | None) -> str:
    if batch is None:
        return "nothing"
    records = decode_records(batch)
    return f"{[r.value for r in records]}@{records[0].offset}" if records else "empty"


def run_seed(seed: int, *, partition_factory: PartitionFactory = Partition) -> SimReport:
    """Run one seed; raises `SimulationFailure`."""
    return ReplicationSimulation(seed, partition_factory=partition_factory).run()


def run_seeds(seeds: range, *, partition_factory: PartitionFactory = Partition,
              stop_at_first_failure: bool = True) -> tuple[list[SimReport], list[SimulationFailure]]:
    """Run many seeds; returns reports and failures."""
    reports: list[SimReport] = []
    failures: list[SimulationFailure] = []
    for seed in seeds:
        try:
            reports.append(run_seed(seed, partition_factory=partition_factory))
        except SimulationFailure as e:
            failures.append(e)
            if stop_at_first_failure:
                break
    return reports, failures


def main(argv: list[str] | None = None) -> int:
    from data_plane.testing.broken_replication import BROKEN_VARIANTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="replay one seed (prints its trace tail)")
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 0..N-1")
    parser.add_argument("--broken", choices=sorted(BROKEN_VARIANTS), help="a broken core")
    args = parser.parse_args(argv)
    factory = BROKEN_VARIANTS[args.broken] if args.broken else Partition
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else range(args.seeds)
    started = time.perf_counter()
    reports, failures = run_seeds(seeds, partition_factory=factory, stop_at_first_failure=False)
    elapsed = time.perf_counter() - started
    for failure in failures:
        print(failure, file=sys.stderr)
    total = len(reports) + len(failures)
    print(f"{total} seeds, {len(failures)} failed, {elapsed:.1f} s; "
          f"acked {sum(r.acked_records for r in reports)} records, "
          f"{sum(r.crashes for r in reports)} crashes, {sum(r.elections for r in reports)} "
          f"elections, {sum(r.truncations for r in reports)} truncations")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
