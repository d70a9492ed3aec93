"""A pure-Python controller for one partition, enough for the replication
simulation (the real one lives in ``metadata_quorum``).

It registers brokers (a new broker epoch each time, fencing the previous
incarnation first), fences them after ``broker.session.timeout.ms`` without a
heartbeat, elects leaders cleanly from the ISR, moves leadership on request
(back-to-back leader changes, KIP-279) and validates AlterPartition like
KRaft's ``ReplicationControlManager`` (broker epoch, leader epoch, partition
epoch, KIP-841 eligibility, KIP-903 broker epochs). Every change bumps the
partition epoch and is appended to `FakeController.history`, which brokers
pull in order, as observers of the metadata log would.

Invariant (KIP-841), checked on every change: the leader is never a fenced
broker; a fenced broker stays in the ISR only as its last member (KRaft keeps
it there, leaderless, so it can be elected cleanly when it returns).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from data_plane.replication.types import (
    NO_LEADER,
    UNKNOWN_BROKER_EPOCH,
    AlterPartitionRequest,
    AlterPartitionResponse,
    PartitionState,
)
from raftlog.net.errors import ErrorCode


@dataclass(slots=True)
class BrokerRegistration:
    broker_epoch: int
    fenced: bool
    last_heartbeat_ms: int


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    """One entry of the metadata log as brokers see it."""

    state: PartitionState
    fenced: frozenset[int]


class FakeController:
    """One partition's controller. Never crashes: the metadata quorum is not
    under test here. ``unclean_leader_election_enable`` stays False."""

    def __init__(self, initial: PartitionState, *, session_timeout_ms: int,
                 rng: random.Random) -> None:
        """Elections pick *any* eligible ISR member (drawn from ``rng``): every
        one is a legal clean choice, and an adversarial pick finds more bugs
        than Kafka's first-in-assignment-order rule."""
        self.session_timeout_ms = session_timeout_ms
        self.rng = rng
        self.brokers: dict[int, BrokerRegistration] = {}
        self.state = initial
        self.history: list[MetadataVersion] = []
        self._next_broker_epoch = 100
        self.elections = 0

    # ---- views --------------------------------------------------------------

    def fenced(self) -> frozenset[int]:
        return frozenset(b for b, r in self.brokers.items() if r.fenced)

    def is_eligible(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced

    # ---- brokers -----------------------------------------------------------------

    def bootstrap(self, broker_ids: tuple[int, ...], now_ms: int) -> dict[int, int]:
        """Register ``broker_ids`` unfenced and publish the initial state;
        returns their broker epochs."""
        epochs = {}
        for broker_id in broker_ids:
            epochs[broker_id] = self._next_broker_epoch
            self.brokers[broker_id] = BrokerRegistration(self._next_broker_epoch, False, now_ms)
            self._next_broker_epoch += 1
        self._publish(self.state)
        return epochs

    def register(self, broker_id: int, now_ms: int) -> int:
        """A (re)starting broker registers: the old incarnation is fenced
        first, then a new broker epoch is granted, fenced until it heartbeats."""
        reg = self.brokers.get(broker_id)
        if reg is not None and not reg.fenced:
            self._fence(broker_id)
        epoch = self._next_broker_epoch
        self._next_broker_epoch += 1
        self.brokers[broker_id] = BrokerRegistration(epoch, True, now_ms)
        self._publish(self.state)
        return epoch

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        """A live broker's heartbeat; unfences it (and may elect it)."""
        reg = self.brokers.get(broker_id)
        if reg is None or reg.broker_epoch != broker_epoch:
            return
        reg.last_heartbeat_ms = now_ms
        if reg.fenced:
            reg.fenced = False
            state = self.state
            if state.leader == NO_LEADER and broker_id in state.isr:
                state = self._with_leader(state, broker_id)
            self._publish(state)

    def tick(self, now_ms: int) -> None:
        """Fence brokers whose session expired."""
        for broker_id, reg in sorted(self.brokers.items()):
            if not reg.fenced and now_ms - reg.last_heartbeat_ms > self.session_timeout_ms:
                self._fence(broker_id)
                self._publish(self.state)

    def _fence(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = True
        state = self.state
        isr = state.isr
        if broker_id in isr and len(isr) > 1:
            isr = tuple(r for r in isr if r != broker_id)
        if state.leader == broker_id:
            # Clean election among the other unfenced ISR members.
            candidates = [r for r in isr if r != broker_id and self.is_eligible(r)]
            self.elections += 1
            state = replace(state, isr=isr,
                            leader=self.rng.choice(candidates) if candidates else NO_LEADER,
                            leader_epoch=state.leader_epoch + 1)
        else:
            state = replace(state, isr=isr)
        if state != self.state:
            self.state = replace(state, partition_epoch=self.state.partition_epoch + 1)

    # ---- elections ---------------------------------------------------------------

    def _with_leader(self, state: PartitionState, leader: int) -> PartitionState:
        self.elections += 1
        return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1)

    def move_leader(self, rng: random.Random) -> bool:
        """Move leadership to another eligible ISR member (preferred-leader
        election / controlled move); returns whether it moved."""
        others = [r for r in self.state.isr if r != self.state.leader and self.is_eligible(r)]
        if not others:
            return False
        self._publish(self._with_leader(self.state, rng.choice(others)))
        return True

    # ---- AlterPartition ---------------------------------------------------------------

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """Validate and apply an ISR change (KRaft's order of checks)."""
        error = self._validate_alter_partition(request)
        if error is not None:
            return AlterPartitionResponse(request.change_id, error)
        if request.new_isr != self.state.isr:
            self._publish(replace(self.state, isr=request.new_isr))
        s = self.state
        return AlterPartitionResponse(request.change_id, ErrorCode.none, s.leader,
                                      s.leader_epoch, s.partition_epoch, s.isr)

    def _validate_alter_partition(self, request: AlterPartitionRequest) -> ErrorCode | None:
        sender = self.brokers.get(request.broker_id)
        if sender is None or sender.fenced or sender.broker_epoch != request.broker_epoch:
            return ErrorCode.stale_broker_epoch
        state = self.state
        if request.leader_epoch != state.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if request.broker_id != state.leader:
            return ErrorCode.invalid_request
        if request.partition_epoch != state.partition_epoch:
            return ErrorCode.invalid_update_version
        if not set(request.new_isr) <= set(state.replicas):
            return ErrorCode.invalid_request
        for pair in request.new_isr_with_epochs:
            reg = self.brokers.get(pair.broker_id)
            if reg is None or reg.fenced:
                return ErrorCode.ineligible_replica  # KIP-841
            if pair.broker_epoch not in (UNKNOWN_BROKER_EPOCH, reg.broker_epoch):
                return ErrorCode.ineligible_replica  # KIP-903: built from a stale fetch
        return None

    # ---- the metadata log ---------------------------------------------------------------

    def _publish(self, state: PartitionState) -> None:
        if state != self.state:
            state = replace(state, partition_epoch=self.state.partition_epoch + 1)
        self.state = state
        self._check_invariants()
        self.history.append(MetadataVersion(state, self.fenced()))

    def _check_invariants(self) -> None:
        s = self.state
        if s.leader != NO_LEADER and not self.is_eligible(s.leader):
            raise AssertionError(f"KIP-841: fenced broker {s.leader} is leader: {s}")
        for r in s.isr:
            if not self.is_eligible(r) and len(s.isr) > 1:
                raise AssertionError(f"KIP-841: fenced broker {r} in a multi-member ISR: {s}")
