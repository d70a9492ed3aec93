"""The leader role of one partition replica (Kafka's leader half of
``Partition``, after KRaft's ``LeaderState``).

A `LeaderState` lives for one leader epoch. It holds the leader's view of
every follower (`ReplicaFetchState`), the ISR as committed by the controller
or a pending change (`PendingIsrChange`, at most one in flight, KIP-497), and
decides ISR shrink/expand. It never touches the log or the HW itself: the
owning `Partition` feeds it offsets and applies its answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from data_plane.replication import isr as isr_math
from data_plane.replication.types import (
    UNKNOWN_BROKER_EPOCH,
    UNKNOWN_OFFSET,
    AlterPartitionRequest,
    BrokerEpochPair,
    ReplicationConfig,
)


@dataclass(slots=True)
class ReplicaFetchState:
    """The leader's view of one follower in this leader epoch (Kafka's ``ReplicaState``)."""

    # The follower's LEO: the offset of its last validated (non-diverging) fetch
    # in this epoch; UNKNOWN_OFFSET until then.
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    # The leader's LEO when that fetch arrived (for lastCaughtUpTimeMs).
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    # Last time the follower was known to be at the leader's LEO; never decreases.
    last_caught_up_time_ms: int = 0
    # The broker epoch its last fetch carried (KIP-903), sent with AlterPartition.
    broker_epoch: int = UNKNOWN_BROKER_EPOCH
    fetched_in_current_epoch: bool = False


@dataclass(slots=True)
class PendingIsrChange:
    """An AlterPartition the leader has proposed and not seen settled.

    While it exists the HW is computed over ``maximal_isr`` = committed +
    proposed, and no other ISR change starts (Kafka's ``PendingExpandIsr`` /
    ``PendingShrinkIsr``).
    """

    request: AlterPartitionRequest
    committed_isr: tuple[int, ...]
    # When the request was last handed out; None = due (not sent, or to be retried).
    sent_at_ms: int | None = None
    # Not before this time (retry backoff).
    retry_at_ms: int = 0
    # The controller said our view is stale: only new metadata settles this change.
    awaiting_metadata: bool = False

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        extra = tuple(r for r in self.request.new_isr if r not in self.committed_isr)
        return self.committed_isr + extra


class LeaderState:
    """Leader of a partition for one ``leader_epoch`` (immutable).

    ``epoch_start_offset`` is the log end offset when leadership began: the
    first offset this epoch writes. The class attributes below exist so the
    simulator's self-test can build deliberately broken leaders
    (`data_plane.testing.broken_replication`); production code never changes them.
    """

    # Safety switches, only ever flipped by the deliberately broken variants.
    hw_over_maximal_isr = True  # KIP-497: count the HW over committed + proposed
    expand_requires_epoch_start = True  # KIP-320 rule 4

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        local_id: int,
        local_broker_epoch: int,
        leader_epoch: int,
        partition_epoch: int,
        epoch_start_offset: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        config: ReplicationConfig,
        now_ms: int,
        change_ids: Iterator[int],
    ) -> None:
        """``change_ids`` is owned by the `Partition`, so AlterPartition change
        ids stay unique across leader epochs: a late answer to an earlier
        epoch's request must never settle this epoch's change."""
        self.topic = topic
        self.partition = partition
        self.local_id = local_id
        self.local_broker_epoch = local_broker_epoch
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.epoch_start_offset = epoch_start_offset
        self.replicas = replicas
        self.config = config
        # Invariant: contains local_id; a subset of replicas (metadata-validated).
        self.isr: tuple[int, ...] = isr
        self.pending: PendingIsrChange | None = None
        self._change_ids = change_ids
        # A new leader epoch forgets everything it knew about followers: their
        # LEOs must be re-established by fetches validated in this epoch (KIP-320
        # rule 3). ISR members start "caught up now" so they are not shrunk at once.
        self.followers: dict[int, ReplicaFetchState] = {}
        self._reset_followers(epoch_start_offset, now_ms)

    def set_replicas(
        self, replicas: tuple[int, ...], leader_log_end_offset: int, now_ms: int
    ) -> None:
        """The assignment changed within this leader epoch (a reassignment
        adding replicas, KIP-455): track new followers from scratch (not
        caught up, so they join the ISR only by catching up) and forget
        replicas no longer assigned."""
        self.replicas = replicas
        for replica in replicas:
            if replica != self.local_id and replica not in self.followers:
                self.followers[replica] = ReplicaFetchState(
                    last_fetch_leader_log_end_offset=leader_log_end_offset,
                    last_fetch_time_ms=now_ms,
                    last_caught_up_time_ms=0,
                )
        for replica in [r for r in self.followers if r not in replicas]:
            del self.followers[replica]

    def _reset_followers(self, leader_log_end_offset: int, now_ms: int) -> None:
        for replica in self.replicas:
            if replica == self.local_id:
                continue
            self.followers[replica] = ReplicaFetchState(
                last_fetch_leader_log_end_offset=leader_log_end_offset,
                last_fetch_time_ms=now_ms,
                last_caught_up_time_ms=now_ms if replica in self.isr else 0,
            )

    # ---- views ---------------------------------------------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed ISR + proposed ISR while a change is pending (KIP-497)."""
        return self.pending.maximal_isr if self.pending is not None else self.isr

    @property
    def isr_change_in_flight(self) -> bool:
        return self.pending is not None

    def high_watermark_candidate(self, leader_log_end_offset: int) -> int:
        """Min LEO over the maximal ISR (see `isr.high_watermark_candidate`)."""
        members = self.maximal_isr if self.hw_over_maximal_isr else self.isr
        leos = {r: s.log_end_offset for r, s in self.followers.items()}
        return isr_math.high_watermark_candidate(
            leader_log_end_offset, self.local_id, members, leos
        )

    # ---- follower fetches ----------------------------------------------------

    def update_follower_fetch_state(
        self,
        replica_id: int,
        *,
        fetch_offset: int,
        log_start_offset: int,
        broker_epoch: int,
        leader_log_end_offset: int,
        now_ms: int,
    ) -> None:
        """Record a validated fetch (the caller checked epoch and divergence).

        Raises `KeyError` for a replica outside the assignment (the caller
        answers NOT_LEADER_OR_FOLLOWER before getting here).
        """
        state = self.followers[replica_id]
        state.last_caught_up_time_ms = isr_math.next_last_caught_up_time_ms(
            fetch_offset=fetch_offset,
            leader_log_end_offset=leader_log_end_offset,
            last_caught_up_time_ms=state.last_caught_up_time_ms,
            last_fetch_leader_log_end_offset=state.last_fetch_leader_log_end_offset,
            last_fetch_time_ms=state.last_fetch_time_ms,
            fetch_time_ms=now_ms,
        )
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_log_end_offset = leader_log_end_offset
        state.last_fetch_time_ms = now_ms
        state.broker_epoch = broker_epoch
        state.fetched_in_current_epoch = True

    def record_fetch_at_log_end(
        self, replica_id: int, log_end_offset: int, log_start_offset: int, broker_epoch: int,
        now_ms: int,
    ) -> None:
        """`update_follower_fetch_state` for a fetch at the leader's LEO
        (``fetch_offset == leader_log_end_offset == log_end_offset``): an idle
        partition's follower, refreshed on every fetch of its session, so
        spelled out without the general case's keyword calls. The follower is
        caught up now (`isr.next_last_caught_up_time_ms`, first case)."""
        state = self.followers[replica_id]
        if now_ms > state.last_caught_up_time_ms:
            state.last_caught_up_time_ms = now_ms
        state.log_end_offset = log_end_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_log_end_offset = log_end_offset
        state.last_fetch_time_ms = now_ms
        state.broker_epoch = broker_epoch
        state.fetched_in_current_epoch = True

    # ---- ISR changes -----------------------------------------------------------

    def maybe_propose_expand(
        self, replica_id: int, *, high_watermark: int, ineligible: frozenset[int], now_ms: int
    ) -> bool:
        """Propose adding ``replica_id`` if it meets the three conditions
        (`isr.can_join_isr`), no change is in flight, and the metadata does
        not mark it ineligible (fenced or shutting down, KIP-841)."""
        if self.pending is not None or replica_id in self.isr or replica_id in ineligible:
            return False
        state = self.followers.get(replica_id)
        if state is None:
            return False
        epoch_start = self.epoch_start_offset if self.expand_requires_epoch_start else 0
        if not isr_math.can_join_isr(
            log_end_offset=state.log_end_offset,
            high_watermark=high_watermark,
            leader_epoch_start_offset=epoch_start,
            fetched_in_current_epoch=state.fetched_in_current_epoch,
        ):
            return False
        self._propose((*self.isr, replica_id), now_ms)
        return True

    def out_of_sync_replicas(self, leader_log_end_offset: int, now_ms: int) -> list[int]:
        """ISR followers not caught up within ``replica.lag.time.max.ms``."""
        lagging = []
        for replica in self.isr:
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            if state is None or not isr_math.is_caught_up(
                log_end_offset=state.log_end_offset,
                leader_log_end_offset=leader_log_end_offset,
                last_caught_up_time_ms=state.last_caught_up_time_ms,
                now_ms=now_ms,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            ):
                lagging.append(replica)
        return lagging

    def maybe_propose_shrink(self, leader_log_end_offset: int, now_ms: int) -> bool:
        """Propose dropping lagging followers (the leader always stays)."""
        if self.pending is not None:
            return False
        lagging = self.out_of_sync_replicas(leader_log_end_offset, now_ms)
        if not lagging:
            return False
        self._propose(tuple(r for r in self.isr if r not in lagging), now_ms)
        return True

    def _propose(self, new_isr: tuple[int, ...], now_ms: int) -> None:
        pairs = tuple(
            BrokerEpochPair(
                r,
                self.local_broker_epoch
                if r == self.local_id
                else self.followers[r].broker_epoch,
            )
            for r in new_isr
        )
        request = AlterPartitionRequest(
            change_id=next(self._change_ids),
            topic=self.topic,
            partition=self.partition,
            broker_id=self.local_id,
            broker_epoch=self.local_broker_epoch,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            new_isr_with_epochs=pairs,
        )
        self.pending = PendingIsrChange(request=request, committed_isr=self.isr, retry_at_ms=now_ms)

    def commit_isr(self, isr: Iterable[int], partition_epoch: int) -> None:
        """The controller's ISR at ``partition_epoch`` is now ours; any pending
        change is settled (by its response or by newer metadata)."""
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        self.pending = None

    def revert_pending(self) -> None:
        """The controller said the change was not applied (INELIGIBLE_REPLICA,
        OPERATION_NOT_ATTEMPTED): back to the committed ISR."""
        self.pending = None
