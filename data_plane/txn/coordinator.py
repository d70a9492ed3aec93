"""Transaction coordinator for one ``__transaction_state`` partition (KIP-98, KIP-360).

Pure state machine, shaped like the controller (STYLE.md §1): each command
validates and returns a `TxnResult` of records to append to
``__transaction_state``, the response, and WriteTxnMarkers requests to send.
Commands mutate nothing; state changes only in `replay`. The shell, per
command: ``result = handle_x(...)``; append the records and, at once (before
the next command, as the active controller does), ``coordinator.apply(result,
last_offset)`` with the offset they were given; send ``result.response`` only
once they are committed (a failover before that loses them, and the client
retries); send ``result.markers`` after the records commit, and report each
written marker with `handle_marker_written`, which returns the COMPLETE_*
result once every partition has its marker.

Uncommitted state. The state runs ahead of the commit: it includes records
the high watermark has not reached (a command waiting for its commit, or a
log tail loaded after a failover or a failed wait). Commands are safe with
that, since their answers wait for a commit that covers everything before
them. A read is not: `verify_partitions`, which lets a partition leader
append a transaction's first batch, answers only from a transactional id's
committed state (its last record below the high watermark the caller gives)
and CONCURRENT_TRANSACTIONS (retry) otherwise. Answering from an add that a
failover then lost would let the batch in with no record of it in any
transaction: a hanging transaction (found by the txn chaos workload with a
coordinator kill).

Failover: `load` replays the partition's records and returns the markers of
every PREPARE_* transaction, which are resent so the transaction completes as
decided: a transaction is never half-applied.

Producer ids come from an injected `ProducerIdAllocator` (backed by the
controller's AllocateProducerIds blocks of 1000).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from data_plane.txn.markers import TxnMarkerRequest
from data_plane.txn.txn_log import (
    DEFAULT_NUM_PARTITIONS,
    GROUP_METADATA_TOPIC,
    TxnLogRecord,
    partition_for,
)
from data_plane.txn.txn_metadata import TopicPartition, TxnMetadata, TxnState
from raftlog.net.errors import ErrorCode

#: ``transaction.max.timeout.ms`` default.
DEFAULT_MAX_TXN_TIMEOUT_MS = 900_000
#: ``transactional.id.expiration.ms`` default.
DEFAULT_TXN_ID_EXPIRATION_MS = 86_400_000

_PREPARE = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
_ENDED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class ProducerIdAllocator(Protocol):
    """Hands out unique producer ids (a block from the controller)."""

    def next_producer_id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TxnResponse:
    """The answer to InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn or EndTxn."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TxnResult:
    records: tuple[TxnLogRecord, ...]
    response: TxnResponse
    markers: tuple[TxnMarkerRequest, ...] = ()


def _error(code: ErrorCode) -> TxnResult:
    return TxnResult((), TxnResponse(code))


class TransactionCoordinator:
    """The coordinator for ``__transaction_state`` partition ``partition``,
    at ``coordinator_epoch`` (that partition's leader epoch)."""

    def __init__(self, partition: int, coordinator_epoch: int, allocator: ProducerIdAllocator,
                 *, num_partitions: int = DEFAULT_NUM_PARTITIONS,
                 max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS,
                 txn_id_expiration_ms: int = DEFAULT_TXN_ID_EXPIRATION_MS) -> None:
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.allocator = allocator
        self.num_partitions = num_partitions
        self.max_timeout_ms = max_timeout_ms
        self.txn_id_expiration_ms = txn_id_expiration_ms
        self._txns: dict[str, TxnMetadata] = {}
        # Partitions still waiting for their marker, per PREPARE_* transaction.
        self._pending: dict[str, set[TopicPartition]] = {}
        # Offset of each id's latest record (absent: unknown, taken as committed).
        self._written_at: dict[str, int] = {}

    # ==== views =====================================================================

    def metadata(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def all_metadata(self) -> list[TxnMetadata]:
        """Every transactional id this coordinator holds (ListTransactions)."""
        return list(self._txns.values())

    def pending_markers(self, transactional_id: str) -> frozenset[TopicPartition]:
        return frozenset(self._pending.get(transactional_id, ()))

    def _owns(self, transactional_id: str) -> bool:
        return partition_for(transactional_id, self.num_partitions) == self.partition

    # ==== state changes =============================================================

    def replay(self, record: TxnLogRecord, offset: int = -1) -> None:
        """Apply one ``__transaction_state`` record (live or on load) found at
        ``offset`` of the partition (-1: not known; taken as committed)."""
        m = record.metadata
        if m is None:
            # A tombstone's id answers as unknown at once: a refusal,
            # whether or not the tombstone commits (the id was idle).
            self._txns.pop(record.transactional_id, None)
            self._pending.pop(record.transactional_id, None)
            self._written_at.pop(record.transactional_id, None)
            return
        if offset >= 0:
            self._written_at[record.transactional_id] = offset
        else:
            self._written_at.pop(record.transactional_id, None)
        self._txns[record.transactional_id] = m
        if m.state in _PREPARE:
            self._pending[record.transactional_id] = set(m.partitions)
        else:
            self._pending.pop(record.transactional_id, None)

    def apply(self, result: TxnResult, last_offset: int = -1) -> None:
        """Apply a command's records, appended as one batch ending at
        ``last_offset`` (-1: not known; taken as committed)."""
        for record in result.records:
            self.replay(record, last_offset)

    def load(self, records: Iterable[tuple[int, TxnLogRecord]]) -> list[TxnMarkerRequest]:
        """Become coordinator: replay the log's ``(offset, record)`` pairs,
        return the markers to resend for every PREPARE_* transaction (they
        then complete)."""
        self._txns.clear()
        self._pending.clear()
        self._written_at.clear()
        for offset, record in records:
            self.replay(record, offset)
        out: list[TxnMarkerRequest] = []
        for tid in sorted(self._pending):
            out.extend(self._markers(self._txns[tid], self._pending[tid]))
        return out

    # ==== InitProducerId ============================================================

    def handle_init_producer_id(
        self, transactional_id: str | None, timeout_ms: int, now_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> TxnResult:
        """InitProducerId (KIP-98; KIP-360 ``expected`` = the producer's current
        (id, epoch) when it re-initialises after an error).

        No transactional id: a fresh id at epoch 0, nothing written. Unknown
        id: a fresh producer id, EMPTY. Known id: the epoch is bumped
        (fencing the zombie), or a new producer id once the epoch is
        exhausted; an ONGOING transaction is first aborted with the bumped
        epoch (answer CONCURRENT_TRANSACTIONS, the client retries).
        Errors: NOT_COORDINATOR, INVALID_TRANSACTION_TIMEOUT,
        CONCURRENT_TRANSACTIONS (PREPARE_* or markers pending), PRODUCER_FENCED
        (``expected`` is neither the current nor the previous id/epoch).
        """
        if transactional_id is None:
            return TxnResult((), TxnResponse(ErrorCode.none,
                                             self.allocator.next_producer_id(), 0))
        if not self._owns(transactional_id):
            return _error(ErrorCode.not_coordinator)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return _error(ErrorCode.invalid_transaction_timeout)
        m = self._txns.get(transactional_id)
        if m is None:
            fresh = TxnMetadata(transactional_id, self.allocator.next_producer_id(), 0,
                                timeout_ms, TxnState.EMPTY, last_update_ms=now_ms)
            return self._write(fresh, ErrorCode.none)
        if m.state in _PREPARE or transactional_id in self._pending or m.state in (
                TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return _error(ErrorCode.concurrent_transactions)
        if expected is not None and expected != (m.producer_id, m.producer_epoch):
            if (expected == (m.last_producer_id, m.last_producer_epoch)
                    and m.state in _ENDED):
                # A retry of the bump we already did (KIP-360): same answer.
                return TxnResult((), TxnResponse(ErrorCode.none, m.producer_id,
                                                 m.producer_epoch))
            return _error(ErrorCode.producer_fenced)
        if m.state == TxnState.ONGOING:
            fenced = self._abort_with_bump(m, now_ms)
            return TxnResult((TxnLogRecord(transactional_id, fenced),),
                             TxnResponse(ErrorCode.concurrent_transactions),
                             self._markers(fenced, fenced.partitions))
        if m.epoch_exhausted:
            bumped = m.transition_to(
                TxnState.EMPTY, producer_id=self.allocator.next_producer_id(), producer_epoch=0,
                last_producer_id=m.producer_id, last_producer_epoch=m.producer_epoch,
                timeout_ms=timeout_ms, partitions=frozenset(), txn_start_ms=-1,
                last_update_ms=now_ms)
        else:
            bumped = m.transition_to(
                TxnState.EMPTY, producer_epoch=m.producer_epoch + 1,
                last_producer_id=m.producer_id, last_producer_epoch=m.producer_epoch,
                timeout_ms=timeout_ms, partitions=frozenset(), txn_start_ms=-1,
                last_update_ms=now_ms)
        return self._write(bumped, ErrorCode.none)

    # ==== AddPartitionsToTxn / AddOffsetsToTxn ======================================

    def handle_add_partitions(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, partitions: Iterable[TopicPartition],
                              now_ms: int) -> TxnResult:
        """AddPartitionsToTxn (v3 semantics): ONGOING with the partitions added.

        Errors: NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING (unknown id or
        other producer id), PRODUCER_FENCED (other epoch),
        CONCURRENT_TRANSACTIONS (PREPARE_* or markers pending),
        INVALID_TXN_STATE (DEAD, PREPARE_EPOCH_FENCE).
        """
        m, err = self._check_producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return _error(err)
        if m.state in _PREPARE:
            return _error(ErrorCode.concurrent_transactions)
        if m.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return _error(ErrorCode.invalid_txn_state)
        wanted = frozenset(partitions)
        if m.state == TxnState.ONGOING and wanted <= m.partitions:
            return TxnResult((), TxnResponse(ErrorCode.none, m.producer_id, m.producer_epoch))
        start = m.txn_start_ms if m.state == TxnState.ONGOING else now_ms
        ongoing = m.transition_to(TxnState.ONGOING, partitions=m.partitions | wanted,
                                  txn_start_ms=start, last_update_ms=now_ms)
        return self._write(ongoing, ErrorCode.none)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition], *,
                          high_watermark: int) -> dict[TopicPartition, ErrorCode]:
        """KIP-890's check for a partition leader (AddPartitionsToTxn v4 with
        ``verify_only``): is each partition in the producer's ongoing
        transaction, as committed below ``high_watermark`` (this partition's)?
        Changes nothing.

        Per partition: NONE if it is; INVALID_TXN_STATE if not (the
        transaction ended, or the producer never added it). For all:
        NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, as
        AddPartitionsToTxn; CONCURRENT_TRANSACTIONS while the id's latest
        record is not yet committed, or the transaction is being completed
        (the leader's produce then retries)."""
        wanted = list(partitions)
        if not self._owns(transactional_id):
            return dict.fromkeys(wanted, ErrorCode.not_coordinator)
        if self._written_at.get(transactional_id, -1) >= high_watermark:
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        m, err = self._check_producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return dict.fromkeys(wanted, err)
        if m.state in _PREPARE:
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        ongoing = m.partitions if m.state == TxnState.ONGOING else frozenset()
        return {tp: ErrorCode.none if tp in ongoing else ErrorCode.invalid_txn_state
                for tp in wanted}

    def handle_add_offsets(self, transactional_id: str, producer_id: int,
                           producer_epoch: int, group_id: str, now_ms: int) -> TxnResult:
        """AddOffsetsToTxn: adds the group's ``__consumer_offsets`` partition
        (``abs(hashCode(group)) % 50``, as the group coordinator hashes)."""
        tp = (GROUP_METADATA_TOPIC, partition_for(group_id, self.num_partitions))
        return self.handle_add_partitions(transactional_id, producer_id, producer_epoch,
                                          (tp,), now_ms)

    # ==== EndTxn ====================================================================

    def handle_end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       commit: bool, now_ms: int) -> TxnResult:
        """EndTxn: ONGOING -> PREPARE_COMMIT/ABORT plus one marker per partition.

        A retry after completion answers NONE (same outcome) or
        INVALID_TXN_STATE (the other outcome); while preparing: the same
        outcome is CONCURRENT_TRANSACTIONS (retriable), the other
        INVALID_TXN_STATE. EMPTY is INVALID_TXN_STATE. Producer checks as in
        `handle_add_partitions`.
        """
        m, err = self._check_producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return _error(err)
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if m.state == TxnState.ONGOING:
            prepared = m.transition_to(target, last_update_ms=now_ms)
            return TxnResult((TxnLogRecord(transactional_id, prepared),),
                             TxnResponse(ErrorCode.none, m.producer_id, m.producer_epoch),
                             self._markers(prepared, prepared.partitions))
        if m.state == done:
            return TxnResult((), TxnResponse(ErrorCode.none, m.producer_id, m.producer_epoch))
        if m.state == target:
            return _error(ErrorCode.concurrent_transactions)
        return _error(ErrorCode.invalid_txn_state)

    def handle_marker_written(self, transactional_id: str, partition: TopicPartition,
                              now_ms: int) -> TxnResult | None:
        """WriteTxnMarkers succeeded for ``partition`` (or the partition is
        gone: UNKNOWN_TOPIC_OR_PARTITION counts as written, as in Kafka).
        Returns the COMPLETE_* result once the last marker is written, else
        None. Retriable marker errors are the marker channel's business: it
        resends the same `TxnMarkerRequest`."""
        waiting = self._pending.get(transactional_id)
        if waiting is None or partition not in waiting:
            return None
        if len(waiting) > 1:
            waiting.discard(partition)
            return None
        m = self._txns[transactional_id]
        final = (TxnState.COMPLETE_COMMIT if m.state == TxnState.PREPARE_COMMIT
                 else TxnState.COMPLETE_ABORT)
        completed = m.transition_to(final, partitions=frozenset(), txn_start_ms=-1,
                                    last_update_ms=now_ms)
        return self._write(completed, ErrorCode.none)

    # ==== timers ====================================================================

    def tick(self, now_ms: int) -> list[TxnResult]:
        """``transaction.timeout.ms``: ONGOING transactions past their timeout
        are aborted with a bumped epoch (fencing the producer, KIP-98);
        ended ids idle for ``transactional.id.expiration.ms`` are tombstoned."""
        out: list[TxnResult] = []
        for tid in sorted(self._txns):
            m = self._txns[tid]
            if tid in self._pending:
                continue
            if m.state == TxnState.ONGOING and now_ms - m.txn_start_ms > m.timeout_ms:
                aborted = self._abort_with_bump(m, now_ms)
                out.append(TxnResult((TxnLogRecord(tid, aborted),),
                                     TxnResponse(ErrorCode.none),
                                     self._markers(aborted, aborted.partitions)))
            elif m.state in _ENDED and now_ms - m.last_update_ms >= self.txn_id_expiration_ms:
                m.transition_to(TxnState.DEAD)  # checks the transition
                out.append(TxnResult((TxnLogRecord(tid, None),), TxnResponse(ErrorCode.none)))
        return out

    # ==== helpers ===================================================================

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> tuple[TxnMetadata | None, ErrorCode]:
        if not self._owns(transactional_id):
            return None, ErrorCode.not_coordinator
        m = self._txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            return None, ErrorCode.invalid_producer_id_mapping
        if m.producer_epoch != producer_epoch:
            return None, ErrorCode.producer_fenced
        if transactional_id in self._pending or m.state in _PREPARE:
            # EndTxn wants to tell the same-outcome retry apart (below).
            return (m, ErrorCode.none) if m.state in _PREPARE else (
                None, ErrorCode.concurrent_transactions)
        return m, ErrorCode.none

    def _abort_with_bump(self, m: TxnMetadata, now_ms: int) -> TxnMetadata:
        # The bump fences the producer's in-flight batches and its EndTxn;
        # an exhausted epoch aborts without a bump (Kafka does the same).
        epoch = m.producer_epoch if m.epoch_exhausted else m.producer_epoch + 1
        return m.transition_to(TxnState.PREPARE_ABORT, producer_epoch=epoch,
                               last_producer_id=m.producer_id,
                               last_producer_epoch=m.producer_epoch, last_update_ms=now_ms)

    def _markers(self, m: TxnMetadata, partitions: Iterable[TopicPartition]
                 ) -> tuple[TxnMarkerRequest, ...]:
        commit = m.state == TxnState.PREPARE_COMMIT
        return tuple(TxnMarkerRequest(m.transactional_id, m.producer_id, m.producer_epoch,
                                      commit, self.coordinator_epoch, topic, partition)
                     for topic, partition in sorted(partitions))

    def _write(self, m: TxnMetadata, error: ErrorCode) -> TxnResult:
        return TxnResult((TxnLogRecord(m.transactional_id, m),),
                         TxnResponse(error, m.producer_id, m.producer_epoch))
