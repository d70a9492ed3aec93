"""Deterministic simulation of the metadata quorum with brokers (issue 4 §5).

Reuses raftlog's `raftlog.testing.simulator.Simulation` (virtual clock,
seeded faults: partitions, one-way cuts, crashes losing unflushed writes,
pauses, a voter's disk loss; a safety phase, then heal and liveness) and
replaces its toy state machine with the real thing:

- **controllers** (the 3 voters): a `QuorumController` over each KRaft core,
  replaying every committed batch (hot standby) and proposing straight into
  the core when active; ``tick`` at its deadlines (session fencing,
  rebalancing); snapshots of the committed image (KIP-630);
- **brokers** (the observers): each a Raft observer whose committed batches
  go through the broker's own `BrokerMetadataListener`/`MetadataPublisher`,
  plus a synchronous broker actor doing what `BrokerLifecycle` does:
  register (a new incarnation per process start), heartbeat with its
  replayed offset and want_fence until caught up, follow NOT_CONTROLLER,
  re-register on STALE_BROKER_EPOCH;
- **an admin** creating (and sometimes deleting) topics on whichever
  controller it believes active, and now and then turning KIP-966 ELR off
  or on (UpdateFeatures, ``elr_toggles=True``, the default), so that the
  records each direction writes (`feature_control.elr_clear_records`,
  `elr_safety_records`) meet the faults too.

RPCs between brokers and controllers travel over the simulator's network
(same partitions, delays) and are answered only once their records commit
(the facade's contract), NOT_CONTROLLER when leadership is lost first.

Invariants, checked after every event (each new image is checked once per
offset):

- every node's image at offset N equals every other node's image at N
  (controllers and brokers alike);
- no partition has a fenced, shutting-down or unregistered leader;
- no ISR holds a fenced or shutting-down broker (KIP-841; see
  `cluster_control`); with KIP-966 ELR off (``elr=False``), except as the
  last member of a leaderless partition;
- with ELR on (the default, as a new cluster's): a partition has a leader
  exactly when its ISR is not empty; its ELR is empty while the ISR is at
  ``min.insync.replicas`` (2 here, at most the replica count); the last
  known ELR is set only while it has no leader. A partition left leaderless
  with its last ISR member while ELR was off keeps that shape, as Kafka's
  does, until its next change (same partition epoch) after ELR goes on;
- with ELR off, no partition has an ELR or a last known ELR;
- per node, leader epochs and partition epochs never decrease;
- plus every Raft invariant of the base simulation.

A failure raises `SimulationFailure` naming the seed;
``python -m data_plane.testing.metadata_sim --seed N`` replays it.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from data_plane.broker.metadata_publisher import BrokerMetadataListener, MetadataPublisher
from metadata_quorum.controller.cluster_control import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from metadata_quorum.controller.feature_control import (
    FeatureUpdate,
    UpdateFeaturesRequest,
    UpgradeType,
)
from metadata_quorum.controller.quorum_controller import (
    ControllerRole,
    NotControllerError,
    QuorumController,
    Submission,
)
from metadata_quorum.controller.replication_control import (
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.features import ELR_FEATURE, broker_features, elr_enabled
from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.loader import build_snapshot_batches
from metadata_quorum.records import (
    NO_LEADER,
    Endpoint,
    FeatureLevelRecord,
    decode_metadata_batch,
)
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import NotLeaderError
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, Ready, SnapshotLoad
from raftlog.net.errors import ErrorCode
from raftlog.testing.simulator import (
    CoreFactory,
    SimNode,
    Simulation,
    SimulationFailure,
    StateMachine,
)

__all__ = ("MetadataSimulation", "run_seed")

SESSION_TIMEOUT_MS = 600
MIN_INSYNC_REPLICAS = 2  # the controllers' static min.insync.replicas (KIP-966's ELR)
HEARTBEAT_INTERVAL_MS = 100
RPC_TIMEOUT_MS = 300
CONTROLLER_TICK_MS = 50
ADMIN_EVERY_MS = (40, 160)
CLUSTER_ID = "sim-cluster"


class _CoreProposer:
    """`MetadataLog` over a node's current core (None while crashed)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node

    def propose(self, values: Sequence[bytes], now_ms: int) -> int:
        core = self.node.core
        if core is None:
            raise RuntimeError("proposal on a crashed node")
        return core.propose(list(values), now_ms)


@dataclass(slots=True)
class _Pending:
    submission: Submission[Any]
    epoch: int
    source: int
    incarnation: int
    request_id: int


@dataclass(slots=True)
class _Broker:
    """The synchronous twin of `BrokerLifecycle` (one per observer node)."""

    broker_id: int
    incarnation_id: uuid.UUID = field(default_factory=uuid.uuid4)
    epoch: int = -1
    fenced: bool = True
    target: int | None = None  # controller it believes active
    outstanding: int | None = None  # request id awaiting an answer
    next_request_id: int = 0
    registrations: list[int] = field(default_factory=list)


class MetadataSimulation(Simulation):
    """One seed of controllers + brokers (see module doc)."""

    def __init__(self, seed: int, *, core_factory: CoreFactory = KRaftCore,
                 elr: bool = True, elr_toggles: bool = True) -> None:
        """``core_factory`` swaps the KRaft core (the self-tests' broken ones);
        ``elr`` formats the cluster with KIP-966 eligible leader replicas;
        ``elr_toggles`` lets the admin turn them off and on."""
        probe = Simulation(seed)  # draws the base parameters from the seed
        # Longer safety phases than the Raft-only simulation: sessions (600 ms)
        # must have time to expire, brokers to be fenced and come back.
        params = replace(probe.params, voters=3, observers=3,
                         safety_ms=probe.params.safety_ms * 2, liveness_ms=8000)
        self._controllers: dict[int, QuorumController] = {}
        self._publishers: dict[int, MetadataPublisher] = {}
        self._listeners: dict[int, BrokerMetadataListener] = {}
        self._brokers: dict[int, _Broker] = {}
        self._pending: dict[int, list[_Pending]] = {}
        self._images_at: dict[int, MetadataImage] = {}
        self._last_image: dict[int, MetadataImage] = {}
        self._uuid_seq = 0
        self.topics_created = 0
        self.topics_deleted = 0
        self.fencings = 0
        self.registrations = 0
        self.unfencings = 0
        self.elr = elr
        self.elr_toggles = elr_toggles
        self.elr_updates = 0
        # (topic id, partition, partition epoch) of partitions seen leaderless
        # with a non-empty ISR while ELR was off: the shape they may keep,
        # unchanged, after ELR goes on.
        self._elr_off_shapes: set[tuple[uuid.UUID, int, int]] = set()
        self.controller_config = ControllerConfig(
            cluster_id=CLUSTER_ID,
            broker_session_timeout_ms=SESSION_TIMEOUT_MS,
            leader_imbalance_check_interval_ms=1000,
            min_insync_replicas=MIN_INSYNC_REPLICAS,
            bootstrap_records=(FeatureLevelRecord(ELR_FEATURE, 1),) if elr else (),
        )
        super().__init__(seed, core_factory=core_factory, params=params)
        for broker_id in self.observers:
            self._brokers[broker_id] = self._new_broker(broker_id)
            self._push(self.now + 1 + broker_id, "broker_wake", broker_id)
        for controller_id in self.voters:
            self._push(self.now + CONTROLLER_TICK_MS, "ctick", controller_id)
        self._push(self.now + self.rng.randint(*ADMIN_EVERY_MS), "admin", 0)

    # ------------------------------------------------------------------ node setup

    def _start_core(self, node: SimNode, *, recovering: bool) -> None:
        nid = node.node_id
        # A (re)started process: fresh in-memory state, replayed from its log.
        if nid in self.voters:
            self._controllers[nid] = QuorumController(
                nid, self.controller_config, _CoreProposer(node)
            )
            self._pending[nid] = []
        else:
            publisher = MetadataPublisher()
            self._publishers[nid] = publisher
            self._listeners[nid] = BrokerMetadataListener(publisher, snapshot_max_bytes=1 << 30)
            if nid in self._brokers:
                self._brokers[nid] = self._new_broker(nid)
                self._push(self.now + 1, "broker_wake", nid)
        self._last_image.pop(nid, None)
        super()._start_core(node, recovering=recovering)

    def _new_broker(self, broker_id: int) -> _Broker:
        self._uuid_seq += 1
        incarnation = uuid.UUID(int=(self.seed << 32) + self._uuid_seq)
        return _Broker(broker_id, incarnation_id=incarnation)

    def _crash(self, node: SimNode) -> None:
        super()._crash(node)
        self._pending[node.node_id] = []

    # ------------------------------------------------------------------ replay

    def _complete_ready(self, node: SimNode, ready: Ready) -> None:
        """As the base runtime does (send, then apply in order, then advance),
        with leader changes reaching the controller in order with commits:
        the claim batch of a new epoch must come after its leader change."""
        core = node.core
        assert core is not None
        nid = node.node_id
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
                self._note(f"node {nid}: leader {event.leader_id} epoch {event.epoch}")
                if nid in self.voters:
                    self._controllers[nid].handle_leader_change(event)
                else:
                    self._listeners[nid].handle_leader_change(event)
        core.advance(ready)
        self._maybe_snapshot(node)
        self._resolve_pending(nid)

    def _apply(self, node: SimNode, batch: CommittedBatch) -> None:
        super()._apply(node, batch)  # the committed-prefix hash chain
        nid = node.node_id
        if nid in self.voters:
            controller = self._controllers[nid]
            if batch.last_offset not in self._images_at:
                self._note_elr_off_shapes(controller.committed_image, batch)
            controller.handle_commit(batch)
            self._observe(nid, controller.committed_image)
        else:
            self._listeners[nid].handle_commit(batch)
            self._observe(nid, self._publishers[nid].image)

    def _note_elr_off_shapes(self, before: MetadataImage, batch: CommittedBatch) -> None:
        """Images are checked per batch, and one batch may both leave a
        partition leaderless with ELR off and turn ELR on (the controller's
        proposals share batches). For a batch that turns ELR on, note the
        ELR-off shapes of the images between its records, so that the check
        of the batch's image knows them."""
        if batch.is_control:
            return
        records = [r for _, r in decode_metadata_batch(batch.data).records]
        if not any(isinstance(r, FeatureLevelRecord) and r.name == ELR_FEATURE for r in records):
            return
        image = before
        for record in records:
            if not elr_enabled(image):
                self._note_shapes(image)
            delta = MetadataDelta(image)
            delta.replay(record)
            image = delta.apply(image.provenance)

    def _note_shapes(self, image: MetadataImage) -> None:
        for topic, pid, part in image.iter_partitions():
            if part.leader == NO_LEADER and len(part.isr) == 1:
                self._elr_off_shapes.add((topic.topic_id, pid, part.partition_epoch))

    def _load_snapshot(self, node: SimNode, load: SnapshotLoad) -> None:
        end = load.snapshot_id.end_offset
        chain = self.committed_chain.get(end)
        if chain is None:
            raise self.fail(f"node {node.node_id}: snapshot at {end} of nothing committed")
        node.machine = StateMachine(end, chain, load.snapshot_id.epoch)
        nid = node.node_id
        self._last_image.pop(nid, None)  # a snapshot may skip epochs: restart the watch
        if nid in self.voters:
            controller = self._controllers[nid]
            controller.handle_load_snapshot(load)
            self._observe(nid, controller.committed_image)
        else:
            self._listeners[nid].handle_load_snapshot(load)
            self._observe(nid, self._publishers[nid].image)

    def _maybe_snapshot(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        m = node.machine
        if m.applied_end - node.log.start_offset() < 40 or self.rng.random() > 0.05:
            return
        if m.applied_end != core.applied_offset or m.applied_end > node.log.flushed_offset():
            return
        image = self._image_of(node.node_id)
        if image.provenance.last_offset != m.applied_end - 1:
            return
        core.create_snapshot(m.applied_end, build_snapshot_batches(image), m.last_epoch)
        self._note(f"node {node.node_id}: metadata snapshot at {m.applied_end}")

    def _image_of(self, nid: int) -> MetadataImage:
        if nid in self.voters:
            return self._controllers[nid].committed_image
        return self._publishers[nid].image

    # ------------------------------------------------------------------ events

    def _dispatch(self, kind: str, node_id: int, payload: object) -> None:
        if kind == "ctick":
            self._controller_tick(node_id)
        elif kind == "broker_wake":
            self._broker_wake(node_id, payload)
        elif kind == "rpc":
            self._handle_rpc(node_id, payload)
        elif kind == "reply":
            self._handle_reply(node_id, payload)
        elif kind == "admin":
            self._admin()
            if self.healed_at is None:
                self._push(self.now + self.rng.randint(*ADMIN_EVERY_MS), "admin", 0)
        else:
            super()._dispatch(kind, node_id, payload)

    def _propose(self) -> None:
        """The base simulation's raw proposals would not decode: the admin and
        the brokers are the only writers here."""

    def _liveness_propose(self) -> None:
        if self.liveness_target is None:
            self.liveness_target = self.now
        # A topic whose name is the marker: its TopicRecord carries the bytes.
        self._send_to_active(
            CreateTopicsRequest((CreatableTopic(self._live_marker.decode(), 1, 1),))
        )
        self._push(self.now + 50, "liveness_propose", 0)

    def _usable(self, nid: int) -> bool:
        node = self.nodes[nid]
        return node.core is not None and not node.paused and node.io is None

    def _controller_tick(self, nid: int) -> None:
        self._push(self.now + CONTROLLER_TICK_MS, "ctick", nid)
        if not self._usable(nid):
            return
        controller = self._controllers[nid]
        if controller.role is ControllerRole.ACTIVE:
            try:
                controller.tick(self.now)
            except NotLeaderError:
                return  # the core resigned; the leader change follows
            self._after_activity(self.nodes[nid])
            self._resolve_pending(nid)

    # ------------------------------------------------------------------ RPCs

    def _send(self, source: int, incarnation: int, target: int, request: object,
              request_id: int) -> None:
        if not self.network.connected(source, target):
            return
        delay = self.rng.randint(1, max(1, self.params.faults.max_delay_ms))
        self._push(self.now + delay, "rpc", target, (source, incarnation, request, request_id))

    def _handle_rpc(self, nid: int, payload: object) -> None:
        assert isinstance(payload, tuple)
        source, incarnation, request, request_id = payload
        node = self.nodes[nid]
        if node.core is not None and not node.paused and node.io is not None:
            self._push(self.now + 1, "rpc", nid, payload)  # busy with an fsync: queue
            return
        if not self._usable(nid):
            return  # lost with the process (or the pause): the caller times out
        controller = self._controllers[nid]
        try:
            submission = controller.submit(request, self.now)
        except (NotControllerError, NotLeaderError):
            # NotLeaderError: the facade still thinks it is active but the core
            # resigned (check-quorum); the node answers NOT_CONTROLLER, as
            # ControllerService does.
            self._reply(nid, source, incarnation, request_id, None)
            return
        self._pending[nid].append(
            _Pending(submission, controller.epoch, source, incarnation, request_id)
        )
        self._after_activity(self.nodes[nid])
        self._resolve_pending(nid)

    def _resolve_pending(self, nid: int) -> None:
        controller = self._controllers.get(nid)
        if controller is None or nid not in self.voters:
            return
        waiting = self._pending.get(nid, [])
        keep: list[_Pending] = []
        for pending in waiting:
            lost = controller.role is not ControllerRole.ACTIVE or controller.epoch != pending.epoch
            if lost:
                self._reply(nid, pending.source, pending.incarnation, pending.request_id, None)
            elif controller.is_committed(pending.submission):
                self._reply(nid, pending.source, pending.incarnation, pending.request_id,
                            pending.submission.response)
            else:
                keep.append(pending)
        self._pending[nid] = keep

    def _reply(self, nid: int, source: int, incarnation: int, request_id: int,
               response: object) -> None:
        if source == 0 or not self.network.connected(nid, source):
            return
        delay = self.rng.randint(1, max(1, self.params.faults.max_delay_ms))
        self._push(self.now + delay, "reply", source, (nid, incarnation, request_id, response))

    def _send_to_active(self, request: object) -> None:
        """The admin: send to a controller that believes it is active."""
        for nid in self.voters:
            controller = self._controllers[nid]
            if controller.role is ControllerRole.ACTIVE and self._usable(nid):
                self._push(self.now + 1, "rpc", nid, (0, 0, request, 0))
                return

    def _admin(self) -> None:
        rng = self.rng
        image = self._controllers[self.voters[0]].committed_image
        if self.elr_toggles and rng.random() < 0.04:
            # From this voter's committed image; a stale view sends an update
            # the controller refuses (a downgrade typed as an upgrade) or a
            # no-op, both harmless.
            on = elr_enabled(image)
            self._send_to_active(UpdateFeaturesRequest((FeatureUpdate(
                ELR_FEATURE, 0 if on else 1,
                UpgradeType.SAFE_DOWNGRADE if on else UpgradeType.UPGRADE),)))
            self.elr_updates += 1
            return
        if image.topics and rng.random() < 0.15:
            victim = rng.choice(sorted(t.name for t in image.topics.values()))
            self._send_to_active(DeleteTopicsRequest(names=(victim,)))
            self.topics_deleted += 1
            return
        name = f"t{self.topics_created}"
        self.topics_created += 1
        self._send_to_active(CreateTopicsRequest((
            CreatableTopic(name, rng.randint(1, 3), rng.randint(1, 3)),)))

    # ------------------------------------------------------------------ brokers

    def _broker_wake(self, nid: int, payload: object) -> None:
        """Send the broker's next registration/heartbeat, or time out the last one."""
        broker = self._brokers[nid]
        node = self.nodes[nid]
        if payload is not None and payload != broker.outstanding:
            return  # a stale timer
        if node.core is None:
            return  # crashed: the restart creates a new broker
        if node.paused:
            self._push(self.now + HEARTBEAT_INTERVAL_MS, "broker_wake", nid)
            return
        if payload is not None:  # timed out: try another controller
            broker.target = None
        broker.next_request_id += 1
        broker.outstanding = broker.next_request_id
        image = self._publishers[nid].image
        request: object
        if broker.epoch < 0:
            request = BrokerRegistrationRequest(
                broker_id=nid, incarnation_id=broker.incarnation_id,
                listeners=(Endpoint("PLAINTEXT", f"b{nid}", 9092),), cluster_id=CLUSTER_ID,
                features=broker_features())
        else:
            caught_up = image.provenance.last_offset >= broker.epoch
            request = BrokerHeartbeatRequest(
                broker_id=nid, broker_epoch=broker.epoch,
                current_metadata_offset=image.provenance.last_offset,
                want_fence=not caught_up)
        target = broker.target
        if target is None:
            hint = self._publishers[nid].leader_id
            target = hint if hint in self.voters else self.rng.choice(self.voters)
        assert target is not None
        broker.target = target
        self._send(nid, node.incarnation, target, request, broker.outstanding)
        self._push(self.now + RPC_TIMEOUT_MS, "broker_wake", nid, broker.outstanding)

    def _handle_reply(self, nid: int, payload: object) -> None:
        assert isinstance(payload, tuple)
        _controller_id, incarnation, request_id, response = payload
        node = self.nodes[nid]
        broker = self._brokers[nid]
        if node.incarnation != incarnation or node.core is None or node.paused:
            return
        if request_id != broker.outstanding:
            return
        broker.outstanding = None
        next_in = HEARTBEAT_INTERVAL_MS
        if response is None:  # NOT_CONTROLLER
            broker.target = None
            next_in = 20
        elif isinstance(response, BrokerRegistrationResponse):
            if response.error is ErrorCode.none:
                if broker.registrations and response.broker_epoch <= broker.registrations[-1]:
                    raise self.fail(f"broker {nid}: epoch {response.broker_epoch} after "
                                    f"{broker.registrations[-1]}")
                broker.epoch = response.broker_epoch
                broker.registrations.append(broker.epoch)
                self.registrations += 1
                broker.fenced = True
                next_in = 1
            else:
                next_in = 50
        elif isinstance(response, BrokerHeartbeatResponse):
            if response.error in (ErrorCode.stale_broker_epoch,
                                  ErrorCode.broker_id_not_registered):
                broker.epoch = -1
                next_in = 1
            elif response.error is ErrorCode.none:
                if broker.fenced and not response.is_fenced:
                    self.unfencings += 1
                broker.fenced = response.is_fenced
        self._push(self.now + next_in, "broker_wake", nid)

    # ------------------------------------------------------------------ invariants

    def _observe(self, nid: int, image: MetadataImage) -> None:
        offset = image.provenance.last_offset
        known = self._images_at.get(offset)
        if known is None:
            self._check_image(image)
            self._images_at[offset] = image
        elif known != image:
            raise self.fail(f"node {nid}: image at offset {offset} differs from another node's")
        previous = self._last_image.get(nid)
        if previous is not None:
            self._check_epochs_grow(nid, previous, image)
            if nid == self.voters[0]:  # count the fencings once, as one replica saw them
                self.fencings += sum(
                    1 for bid, b in image.brokers.items()
                    if b.fenced and bid in previous.brokers and not previous.brokers[bid].fenced
                )
        self._last_image[nid] = image

    def _check_image(self, image: MetadataImage) -> None:
        offset = image.provenance.last_offset
        for topic, pid, part in image.iter_partitions():
            where = f"offset {offset}: {topic.name}-{pid}"
            if part.leader != NO_LEADER:
                broker = image.brokers.get(part.leader)
                if broker is None or broker.fenced or broker.in_controlled_shutdown:
                    raise self.fail(f"{where} is led by {part.leader}, which is not usable")
            elr_on = elr_enabled(image)
            shape = (topic.topic_id, pid, part.partition_epoch)
            legacy = part.leader == NO_LEADER and len(part.isr) == 1
            if legacy and not elr_on:
                self._elr_off_shapes.add(shape)
            elif legacy and shape in self._elr_off_shapes:
                continue  # ELR-off's shape, unchanged since ELR went on
            for member in part.isr:
                broker = image.brokers.get(member)
                usable = broker is not None and not broker.fenced \
                    and not broker.in_controlled_shutdown
                if not usable and (elr_on or not legacy):
                    raise self.fail(f"{where}: ISR {part.isr} holds unusable broker {member}")
            if elr_on:
                self._check_elr(where, part)
            elif part.elr or part.last_known_elr:
                raise self.fail(f"{where}: ELR {part.elr} / {part.last_known_elr} with ELR off")

    def _check_elr(self, where: str, part: PartitionRegistration) -> None:
        if (part.leader == NO_LEADER) != (not part.isr):
            raise self.fail(f"{where}: leader {part.leader} with ISR {part.isr}")
        if part.elr and len(part.isr) >= min(MIN_INSYNC_REPLICAS, len(part.replicas)):
            raise self.fail(f"{where}: ELR {part.elr} beside a full ISR {part.isr}")
        if part.last_known_elr and part.leader != NO_LEADER:
            raise self.fail(f"{where}: last known ELR {part.last_known_elr} with a leader")

    def _check_epochs_grow(self, nid: int, before: MetadataImage, after: MetadataImage) -> None:
        for topic_id, topic in after.topics.items():
            old = before.topics.get(topic_id)
            if old is None or old is topic:
                continue
            for pid, part in topic.partitions.items():
                was = old.partitions.get(pid)
                if was is None:
                    continue
                if part.leader_epoch < was.leader_epoch or \
                        part.partition_epoch < was.partition_epoch:
                    raise self.fail(
                        f"node {nid}: {topic.name}-{pid} epochs went "
                        f"{was.leader_epoch}/{was.partition_epoch} -> "
                        f"{part.leader_epoch}/{part.partition_epoch}")

    def fail(self, message: str) -> SimulationFailure:
        failure = super().fail(message)
        failure.args = (
            str(failure).replace("raftlog.testing.simulator", "data_plane.testing.metadata_sim"),
        )
        return failure

    def _liveness_reached(self) -> bool:
        """After the heal: the marker topic committed, and every broker is
        unfenced again in the image of every replica."""
        return super()._liveness_reached() and self._brokers_back()

    def _brokers_back(self) -> bool:
        """Every broker is unfenced in the image of every replica."""
        for nid in self.nodes:
            if self.nodes[nid].core is None:
                return False
            registered = self._image_of(nid).brokers
            if any(bid not in registered or registered[bid].fenced for bid in self.observers):
                return False
        return True

    def summary(self) -> dict[str, object]:
        result = super().summary()
        final = self._images_at[max(self._images_at)] if self._images_at else None
        result.update(
            topics_created=self.topics_created,
            topics_in_image=0 if final is None else len(final.topics),
            registrations=self.registrations,
            fencings=self.fencings,
            unfencings=self.unfencings,
            elr_updates=self.elr_updates,
            elr_on_at_end=final is not None and elr_enabled(final),
        )
        return result


def run_seed(seed: int) -> dict[str, object]:
    """Run one seed; raise `SimulationFailure` on a broken invariant (a
    replica that never catches up after the heal, say a voter stuck outside
    the leader's epoch, fails liveness like anything else)."""
    return MetadataSimulation(seed).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Replay metadata simulation seeds.")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=1)
    args = parser.parse_args(argv)
    failures = 0
    for seed in range(args.seed, args.seed + args.count):
        try:
            summary = run_seed(seed)
        except SimulationFailure as exc:
            failures += 1
            print(exc)
            continue
        print(" ".join(f"{k}={v}" for k, v in summary.items() if k != "faults"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
