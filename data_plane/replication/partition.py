"""One partition replica on one broker: the sans-I/O replication core.

`Partition` owns the replica's role (none, leader, follower), its log and its
high watermark. Metadata drives roles (`become_leader`, `become_follower`);
requests drive the rest (`append_records`, `handle_fetch`,
`handle_fetch_response`, `handle_alter_partition_response`); the shell calls
`maybe_shrink_isr` and `poll_alter_partition` on a timer and `fetch_request`
when its fetcher builds a request. Every input carries ``now_ms``; outputs are
the dataclasses of `data_plane.replication.types`. No asyncio, sockets or
clocks (STYLE.md §1). The log is the injected `raftlog.storage.Log` (whose
own I/O the simulator fakes with `FakeFileSystem`).

Records stay opaque: the core looks at batch headers and CRCs only (plus the
single record of a COMMIT/ABORT control batch).

Producer state (KIP-98) rides along: `ReplicaTxnState` is told of every
append (leader and follower), high-watermark move, truncation and segment
roll, so idempotent dedupe and the last stable offset survive a leader
change: a follower's state is always current, a new leader only catches up
on the tail (`data_plane.txn.replica_state`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Protocol

from data_plane.replication import isr as isr_math
from data_plane.replication.follower import FollowerState, divergence_truncation_offset
from data_plane.replication.leader import LeaderState
from data_plane.replication.types import (
    LONG_MAX,
    NO_LEADER,
    UNKNOWN_BROKER_EPOCH,
    Acks,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AppendResult,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResult,
    FollowerFetchOutcome,
    PartitionState,
    ReplicationConfig,
    Role,
    TopicPartition,
)
from data_plane.txn.markers import EndTxnMarker, build_marker_batch
from data_plane.txn.producer_state import AppendVerdict
from data_plane.txn.replica_state import ReplicaTxnState
from raftlog.net.errors import ErrorCode
from raftlog.records import (
    NO_TIMESTAMP,
    BatchHeader,
    RecordError,
    decode_records,
    validate_batches,
)
from raftlog.storage import (
    InvalidEpochError,
    InvalidRecordBatchError,
    Log,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)

log = logging.getLogger(__name__)

#: DeleteRecords' offset meaning "up to the high watermark" (Kafka's
#: ``DeleteRecordsRequest.HIGH_WATERMARK``).
DELETE_TO_HIGH_WATERMARK = -1

# AlterPartition errors after which only newer metadata can settle the change
# (Kafka's Partition.handleAlterPartitionError: no retry).
_AWAIT_METADATA_ERRORS = frozenset({
    ErrorCode.fenced_leader_epoch,
    ErrorCode.invalid_update_version,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.invalid_request,
    ErrorCode.new_leader_elected,
})
# The controller states the change was not applied and our partition epoch is
# current: fall back to the committed ISR.
_REVERT_ERRORS = frozenset({ErrorCode.ineligible_replica, ErrorCode.operation_not_attempted})


class PartitionStateError(ValueError):
    """Caller misuse: metadata for another partition, or a role this broker cannot take."""


class Partition:
    """A replica of ``(topic, partition)`` on broker ``local_id``.

    Roles and legal transitions (all driven by metadata, fenced by leader
    epoch; a stale epoch is ignored and the call returns False):

    - NONE -> LEADER(e) | FOLLOWER(e)             first metadata for the replica
    - LEADER(e) -> LEADER(e' > e) | FOLLOWER(e' > e)
    - FOLLOWER(e) -> FOLLOWER(e' > e) | LEADER(e' > e)
    - LEADER(e) | FOLLOWER(e) -> same role, same e  ISR refresh, only with a
      newer partition epoch
    - any -> NONE                                   `stop`

    Invariants (checked where they could break, tier 3 of STYLE.md §8):
    ``log_start_offset <= high_watermark <= log_end_offset``; on a leader the
    HW never decreases within an epoch.
    """

    leader_state_class: type[LeaderState] = LeaderState
    # Deliberately broken variants only: pre-KIP-101 truncation to the HW on
    # becoming a follower.
    truncate_to_high_watermark_on_become_follower = False

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        local_id: int,
        log: Log,
        config: ReplicationConfig,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
        initial_high_watermark: int = 0,
        txn_state: ReplicaTxnState | None = None,
    ) -> None:
        """``initial_high_watermark`` is the checkpointed HW (capped to the log).
        ``txn_state`` persists producer snapshots; by default it keeps them in
        memory only (rebuilt from the whole log on open)."""
        self.topic = topic
        self.partition = partition
        self.local_id = local_id
        self.log = log
        self.config = config
        self.broker_epoch = broker_epoch
        self._role = Role.NONE
        # The first leader epoch of this replica's current unbroken leadership.
        self._leading_since_epoch = -1
        self._leader_epoch = -1
        self._partition_epoch = -1
        self._leader_id = NO_LEADER
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()
        self._high_watermark = min(
            max(initial_high_watermark, log.log_start_offset), log.log_end_offset
        )
        self._leader: LeaderState | None = None
        self._follower: FollowerState | None = None
        self._ineligible: frozenset[int] = frozenset()
        # AlterPartition change ids, unique for the life of this replica.
        self._change_ids = itertools.count(1)
        self.txn = txn_state if txn_state is not None else ReplicaTxnState(log.directory, None)
        self.txn.load(log)
        self.txn.on_high_watermark(self._high_watermark)
        # Leader: follower id -> its last fetch that found nothing to do
        # (`IdleFollowerFetch`). Follower: the last request `fetch_request` built.
        self._idle_fetches: dict[int, IdleFollowerFetch] = {}
        self._last_fetch_request: FetchPartition | None = None

    # ==== views =====================================================================

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def role(self) -> Role:
        return self._role

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR (the leader's, or the follower's metadata copy)."""
        return self._leader.isr if self._leader is not None else self._isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed + proposed ISR while an AlterPartition is in flight (KIP-497)."""
        return self._leader.maximal_isr if self._leader is not None else self._isr

    @property
    def isr_change_in_flight(self) -> bool:
        return self._leader is not None and self._leader.isr_change_in_flight

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """`_last_stable_offset` at the current high watermark."""
        return self._last_stable_offset(self._high_watermark)

    def _last_stable_offset(self, hw: int) -> int:
        """The LSO: ``min(hw, first unstable offset)``, never below the log
        start (Kafka's ``maybeIncrementFirstUnstableOffset``): DeleteRecords
        up to the HW may pass an open transaction's first offset."""
        return max(self.txn.last_stable_offset(hw), self.log.log_start_offset)

    @property
    def leader_epoch_start_offset(self) -> int | None:
        """Where the current leader epoch began (leaders only)."""
        return self._leader.epoch_start_offset if self._leader is not None else None

    @property
    def high_watermark_is_lagging(self) -> bool:
        """A new leader's HW still below its epoch start (KIP-207): the records
        in between are on every ISR member but not yet known committed, so
        ListOffsets(latest) should answer OFFSET_NOT_AVAILABLE meanwhile."""
        return self._leader is not None and self._high_watermark < self._leader.epoch_start_offset

    def follower_fetch_state(self, replica_id: int) -> tuple[int, int, bool] | None:
        """Leader's view of a follower: (LEO, last caught-up ms, fetched in epoch)."""
        if self._leader is None or replica_id not in self._leader.followers:
            return None
        idle = self._idle_fetches.get(replica_id)
        if idle is not None:
            idle.settle()
        s = self._leader.followers[replica_id]
        return (s.log_end_offset, s.last_caught_up_time_ms, s.fetched_in_current_epoch)

    # ==== transitions ===============================================================

    def become_leader(self, state: PartitionState, now_ms: int) -> bool:
        """Apply metadata naming this broker leader (Kafka's ``makeLeader``).

        A newer leader epoch starts a fresh `LeaderState`: the epoch starts at
        the current LEO, follower LEOs are forgotten (KIP-320 rule 3), any
        pending AlterPartition is dropped. The same epoch with a newer
        partition epoch refreshes the ISR and the assignment (a reassignment
        adds replicas without a new epoch). Anything older is ignored.
        Returns whether anything changed. Raises `PartitionStateError` if
        ``state`` is for another partition or does not name this broker leader.
        """
        self._check_state(state)
        if state.leader != self.local_id:
            raise PartitionStateError(f"{state} does not make broker {self.local_id} leader")
        if state.leader_epoch < self._leader_epoch:
            return False
        if state.leader_epoch == self._leader_epoch:
            if self._leader is None or state.partition_epoch <= self._partition_epoch:
                return False
            if state.replicas != self._replicas:
                self._leader.set_replicas(state.replicas, self.log.log_end_offset, now_ms)
                self._idle_fetches.clear()
            self._replicas = state.replicas
            self._partition_epoch = state.partition_epoch
            self._leader.commit_isr(state.isr, state.partition_epoch)
            self._maybe_increment_leader_hw()
            return True
        self._set_metadata(state)
        if self._role is not Role.LEADER:
            self._leading_since_epoch = state.leader_epoch
        self._role = Role.LEADER
        self._follower = None
        self._leader = self.leader_state_class(
            topic=self.topic,
            partition=self.partition,
            local_id=self.local_id,
            local_broker_epoch=self.broker_epoch,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            epoch_start_offset=self.log.log_end_offset,
            replicas=state.replicas,
            isr=state.isr,
            config=self.config,
            now_ms=now_ms,
            change_ids=self._change_ids,
        )
        # Followers keep the producer state current; replay whatever tail is
        # missing so dedupe and the LSO hold from the first produce.
        self.txn.catch_up(self.log)
        # With ISR = {leader} the HW can move at once (Kafka does this in makeLeader).
        self._maybe_increment_leader_hw()
        return True

    def become_follower(self, state: PartitionState, now_ms: int) -> bool:
        """Apply metadata naming another broker (or no broker) leader
        (Kafka's ``makeFollower``).

        A newer leader epoch starts a fresh `FollowerState`; the log is *not*
        truncated here (KIP-101: truncation waits for the leader's answer to
        the first fetch, which carries our last fetched epoch). The same epoch
        with a newer partition epoch refreshes the ISR copy. Older metadata is
        ignored. Returns whether anything changed. Raises `PartitionStateError`
        for another partition, for this broker named leader, or if this broker
        is not a replica.
        """
        self._check_state(state)
        if state.leader == self.local_id:
            raise PartitionStateError(f"{state} makes broker {self.local_id} leader")
        if self.local_id not in state.replicas:
            raise PartitionStateError(f"broker {self.local_id} is not a replica in {state}")
        if state.leader_epoch < self._leader_epoch:
            return False
        if state.leader_epoch == self._leader_epoch:
            if self._follower is None or state.partition_epoch <= self._partition_epoch:
                return False
            self._set_metadata(state)
            return True
        self._set_metadata(state)
        self._role = Role.FOLLOWER
        self._leader = None
        self._follower = FollowerState(leader_id=state.leader, leader_epoch=state.leader_epoch)
        if self.truncate_to_high_watermark_on_become_follower:
            self.log.truncate_to(self._high_watermark)
            self.txn.after_truncation(self.log)
        return True

    def stop(self) -> None:
        """Stop replicating (partition deleted or moved away): role NONE. The
        log stays open; the caller closes or deletes it."""
        self._role = Role.NONE
        self._leader = None
        self._follower = None

    def update_ineligible_replicas(self, ineligible: frozenset[int]) -> None:
        """Brokers the metadata marks fenced or in controlled shutdown: never
        proposed for the ISR (KIP-841)."""
        self._ineligible = ineligible

    def _set_metadata(self, state: PartitionState) -> None:
        self._leader_epoch = state.leader_epoch
        self._partition_epoch = state.partition_epoch
        self._leader_id = state.leader
        self._replicas = state.replicas
        self._isr = state.isr

    def _check_state(self, state: PartitionState) -> None:
        if state.key != self.key:
            raise PartitionStateError(f"{state} is not for partition {self.key}")

    # ==== leader: produce ===========================================================

    def append_records(self, records: bytes | bytearray, acks: int, now_ms: int,
                       *, wall_clock_ms: int | None = None,
                       from_coordinator: bool = False) -> AppendResult:
        """Append a producer's batches as leader (Kafka's ``appendRecordsToLeader``).

        Checks, in order: acks in {0, 1, -1} (INVALID_REQUIRED_ACKS); leader
        (NOT_LEADER_OR_FOLLOWER); batch headers and CRC (CORRUPT_MESSAGE);
        each batch within ``message.max.bytes`` (MESSAGE_TOO_LARGE); producer
        batches only, with offset deltas 0..n-1 (INVALID_RECORD); CreateTime
        timestamps within ``message.timestamp.before/after.max.ms``
        (INVALID_TIMESTAMP); keys on a compacted topic (INVALID_RECORD); for acks=all
        a committed ISR of at least ``min.insync.replicas``
        (NOT_ENOUGH_REPLICAS, before anything is written). Then assigns
        offsets, stamps the leader epoch (header rewrite, no recompression)
        and may advance the HW. For acks=all the caller waits for
        `check_enough_replicas_reach_offset`.

        Producer state (KIP-98) is checked after min.insync.replicas, before
        the append: a resend of a retained batch is answered NONE with the
        ORIGINAL offsets and appends nothing (acks=all still waits for those
        offsets to be committed); OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH and INVALID_TXN_STATE reject the request.
        ``wall_clock_ms`` (producer expiry compares it with batch
        timestamps) defaults to ``now_ms``.

        ``from_coordinator``: the group coordinator's own batches (Kafka's
        ``AppendOrigin.COORDINATOR``). A TxnOffsetCommit batch is
        transactional with a producer id and epoch but no sequence, so only
        the epoch is checked (an older one is INVALID_PRODUCER_EPOCH: the
        zombie's offsets are fenced).
        """
        wall_now = now_ms if wall_clock_ms is None else wall_clock_ms
        if acks not in (Acks.NONE, Acks.LEADER, Acks.ALL):
            return AppendResult(ErrorCode.invalid_required_acks, error_message=f"acks={acks}")
        leader = self._leader
        if leader is None:
            return AppendResult(ErrorCode.not_leader_or_follower)
        headers = self._validate_producer_batches(records, wall_now)
        if isinstance(headers, AppendResult):
            return headers
        if acks == Acks.ALL and len(leader.isr) < self.config.min_insync_replicas:
            return AppendResult(
                ErrorCode.not_enough_replicas,
                error_message=f"ISR {leader.isr} is smaller than min.insync.replicas "
                f"{self.config.min_insync_replicas}",
            )
        verdict = (self._validate_coordinator_epochs(headers) if from_coordinator
                   else self.txn.validate(headers, wall_now))
        if not verdict.should_append:
            return self._rejected_or_duplicate(verdict, leader.leader_epoch)
        self.txn.note_segment(self.log)
        try:
            info = self.log.append_as_leader(records, leader.leader_epoch, validated=headers)
        except RecordTooLargeError as e:
            return AppendResult(ErrorCode.message_too_large, error_message=str(e))
        except InvalidRecordBatchError as e:
            return AppendResult(ErrorCode.corrupt_message, error_message=str(e))
        except InvalidEpochError as e:
            # Our log holds a newer epoch than we lead: a broken invariant.
            raise AssertionError(f"{self.key}: leader epoch below the log's: {e}") from e
        except OSError as e:
            # Disk full or failing: nothing was appended (the file undoes a
            # partial write); Kafka's answer for a log it cannot write.
            log.error("%s: append failed: %s", self.key, e)
            return AppendResult(ErrorCode.kafka_storage_error, error_message=f"append failed: {e}")
        self.txn.apply_appended(self.log, _placed(headers, info.first_offset))
        self._maybe_increment_leader_hw()
        return AppendResult(
            ErrorCode.none,
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_start_offset=self.log.log_start_offset,
            leader_epoch=leader.leader_epoch,
            records_count=info.records_count,
            log_append_time_ms=(info.max_timestamp
                                if self.log.config.message_timestamp_type == "LogAppendTime"
                                else -1),
        )

    def _rejected_or_duplicate(self, verdict: AppendVerdict, leader_epoch: int) -> AppendResult:
        if verdict.is_duplicate:
            log.info("%s: duplicate produce answered with offsets %d..%d",
                     self.key, verdict.first_offset, verdict.last_offset)
            return AppendResult(
                ErrorCode.none,
                base_offset=verdict.first_offset,
                last_offset=verdict.last_offset,
                log_start_offset=self.log.log_start_offset,
                leader_epoch=leader_epoch,
            )
        log.debug("%s: produce rejected with %s: %s", self.key, verdict.error.name, verdict.message)
        return AppendResult(verdict.error, error_message=verdict.message)

    def _validate_coordinator_epochs(self, headers: list[BatchHeader]) -> AppendVerdict:
        for header in headers:
            entry = self.txn.producers.entry(header.producer_id)
            if entry is not None and header.producer_epoch < entry.producer_epoch:
                return AppendVerdict(
                    ErrorCode.invalid_producer_epoch,
                    message=f"producer {header.producer_id}: epoch {header.producer_epoch} "
                    f"is older than {entry.producer_epoch}")
        return AppendVerdict(ErrorCode.none)

    def append_txn_marker(self, producer_id: int, producer_epoch: int, marker: EndTxnMarker,
                          *, timestamp_ms: int) -> AppendResult:
        """Append a COMMIT/ABORT control batch as leader (WriteTxnMarkers, KIP-98).

        Checked against the producer state first (`validate_marker`: an
        older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator
        epoch TRANSACTION_COORDINATOR_FENCED). Markers skip
        ``min.insync.replicas`` at append (Kafka appends them with
        ``requiredAcks=-1`` and checks when waiting); the caller waits for
        `required_offset` like an acks=all produce.
        """
        leader = self._leader
        if leader is None:
            return AppendResult(ErrorCode.not_leader_or_follower)
        verdict = self.txn.producers.validate_marker(
            producer_id, producer_epoch, marker.coordinator_epoch)
        if not verdict.should_append:
            return AppendResult(verdict.error, error_message=verdict.message)
        batch = bytearray(build_marker_batch(producer_id, producer_epoch, marker,
                                             timestamp_ms=timestamp_ms))
        self.txn.note_segment(self.log)
        try:
            info = self.log.append_as_leader(batch, leader.leader_epoch)
        except OSError as e:
            log.error("%s: marker append failed: %s", self.key, e)
            return AppendResult(ErrorCode.kafka_storage_error, error_message=f"append failed: {e}")
        header = validate_batches(batch)[0]
        self.txn.apply_appended(self.log, [(header, marker)])
        self._maybe_increment_leader_hw()
        return AppendResult(ErrorCode.none, base_offset=info.first_offset,
                            last_offset=info.last_offset,
                            log_start_offset=self.log.log_start_offset,
                            leader_epoch=leader.leader_epoch, records_count=1)

    def _validate_producer_batches(
        self, records: bytes | bytearray, wall_now_ms: int
    ) -> list[BatchHeader] | AppendResult:
        try:
            headers = validate_batches(records)
        except RecordError as e:
            return AppendResult(ErrorCode.corrupt_message, error_message=str(e))
        if not headers:
            return AppendResult(ErrorCode.invalid_record, error_message="no record batch")
        limit = self.log.config.message_max_bytes
        for header in headers:
            if header.size_in_bytes > limit:
                return AppendResult(
                    ErrorCode.message_too_large,
                    error_message=f"batch of {header.size_in_bytes} bytes exceeds "
                    f"message.max.bytes {limit}",
                )
            if header.is_control:
                return AppendResult(ErrorCode.invalid_record,
                                    error_message="producers may not write control batches")
            if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
                return AppendResult(
                    ErrorCode.invalid_record,
                    error_message=f"recordsCount {header.records_count} with lastOffsetDelta "
                    f"{header.last_offset_delta}",
                )
        config = self.config
        if (config.message_timestamp_before_max_ms < LONG_MAX
                or config.message_timestamp_after_max_ms < LONG_MAX):
            rejected = self._check_timestamps(records, headers, wall_now_ms)
            if rejected is not None:
                return rejected
        if config.compacted:
            return self._check_keys(records, headers)
        return headers

    def _check_timestamps(
        self, records: bytes | bytearray, headers: list[BatchHeader], now_ms: int
    ) -> AppendResult | None:
        """KIP-937 (Kafka's ``LogValidator.validateTimestamp``): with
        ``message.timestamp.type=CreateTime``, every record's timestamp must
        lie within [now - message.timestamp.before.max.ms, now +
        message.timestamp.after.max.ms]; a record without one (-1) passes.

        The upper bound is checked on each batch's maxTimestamp, which no
        record exceeds, so the default bound (one hour ahead) costs one
        comparison per batch. The lower bound needs each record's timestamp
        (a batch header holds no minimum), so records are read only when a
        topic sets ``message.timestamp.before.max.ms``."""
        if self.log.config.message_timestamp_type != "CreateTime":
            return None
        config = self.config
        low = now_ms - config.message_timestamp_before_max_ms
        high = now_ms + config.message_timestamp_after_max_ms
        before_bounded = config.message_timestamp_before_max_ms < LONG_MAX
        position = 0
        for header in headers:
            if header.max_timestamp > high or before_bounded:
                try:
                    stamps = [(r.timestamp, r.offset) for r in decode_records(
                        records, pos=position, validate_crc=False)]
                except RecordError as e:
                    return AppendResult(ErrorCode.corrupt_message, error_message=str(e))
                if header.max_timestamp > high:
                    # A batch whose records are all in range but whose
                    # maxTimestamp is not is refused for that maxTimestamp.
                    stamps.append((header.max_timestamp, header.last_offset))
                for timestamp, offset in stamps:
                    if timestamp != NO_TIMESTAMP and not low <= timestamp <= high:
                        return AppendResult(
                            ErrorCode.invalid_timestamp,
                            error_message=f"Timestamp {timestamp} of message with offset "
                            f"{offset} is out of range. The timestamp should be within "
                            f"[{low}, {high}]")
            position += header.size_in_bytes
        return None

    def _check_keys(
        self, records: bytes | bytearray, headers: list[BatchHeader]
    ) -> list[BatchHeader] | AppendResult:
        """Kafka's ``LogValidator`` rule for compacted topics: every record has
        a key (the cleaner compacts by key). It reads records, so only
        compacted topics pay for it."""
        position = 0
        for header in headers:
            try:
                keyless = any(r.key is None for r in decode_records(
                    records, pos=position, validate_crc=False))
            except RecordError as e:
                return AppendResult(ErrorCode.corrupt_message, error_message=str(e))
            if keyless:
                return AppendResult(
                    ErrorCode.invalid_record,
                    error_message="Compacted topic cannot accept message without key in "
                    f"topic partition {self.topic}-{self.partition}.")
            position += header.size_in_bytes
        return headers

    def check_enough_replicas_reach_offset(
        self, required_offset: int, leader_epoch: int
    ) -> tuple[bool, ErrorCode]:
        """DelayedProduce's test (Kafka's ``checkEnoughReplicasReachOffset``):
        ``(done, error)``.

        Done with NONE once the HW reaches ``required_offset`` and the maximal
        ISR still has ``min.insync.replicas`` members; done with
        NOT_ENOUGH_REPLICAS_AFTER_APPEND as soon as the maximal ISR has fewer
        (the HW holds below the minimum, so waiting could only time out:
        Kafka 3.7+ lets such a produce time out instead); done with
        NOT_LEADER_OR_FOLLOWER unless this replica has led without a break
        since the epoch that appended. A new epoch with the same leader (a
        reassignment removing a follower bumps it) keeps the wait: only a
        follower truncates, so the appended record is still there. A break
        (follower, then leader again) fails it, since the record may have
        been truncated meanwhile. Kafka checks only that it leads now.
        """
        leader = self._leader
        if leader is None or not self._leading_since_epoch <= leader_epoch <= leader.leader_epoch:
            return True, ErrorCode.not_leader_or_follower
        if len(leader.maximal_isr) < self.config.min_insync_replicas:
            return True, ErrorCode.not_enough_replicas_after_append
        if self._high_watermark < required_offset:
            return False, ErrorCode.none
        return True, ErrorCode.none

    # ==== leader: DeleteRecords ======================================================

    def delete_records(self, offset: int) -> tuple[ErrorCode, int, str | None]:
        """DeleteRecords as leader (Kafka's ``deleteRecordsOnLocalLog``): move
        the log start offset up to ``offset`` (-1: the high watermark) and
        delete the segments wholly below it. ``(error, target offset,
        message)``: NOT_LEADER_OR_FOLLOWER; OFFSET_OUT_OF_RANGE below -1 or
        above the HW; KAFKA_STORAGE_ERROR if the disk fails. Followers follow
        the leader's log start from its fetch answers; the caller waits for
        `delete_records_low_watermark` to reach the target."""
        if self._leader is None:
            return ErrorCode.not_leader_or_follower, -1, None
        hw = self._high_watermark
        target = hw if offset == DELETE_TO_HIGH_WATERMARK else offset
        if target < 0 or target > hw:
            return (ErrorCode.offset_out_of_range, -1,
                    f"Cannot increment the log start offset to {offset} of partition "
                    f"{self.topic}-{self.partition} since it is larger than the high "
                    f"watermark {hw}" if target > hw else f"Invalid offset {offset}")
        try:
            if self.log.delete_records_before(target):
                self.txn.after_log_start_moved(self.log)
        except OSError as e:
            log.error("%s: delete records failed: %s", self.key, e)
            return ErrorCode.kafka_storage_error, -1, f"delete records failed: {e}"
        return ErrorCode.none, target, None

    def delete_records_low_watermark(self) -> int | None:
        """The lowest log start offset over this leader and every eligible
        follower (Kafka's ``lowWatermarkIfLeader``; -1 while one has not
        reported it yet), or None if this replica does not lead."""
        leader = self._leader
        if leader is None:
            return None
        low = self.log.log_start_offset
        for replica_id, state in leader.followers.items():
            if replica_id not in self._ineligible and state.log_start_offset < low:
                low = state.log_start_offset
        return low

    # ==== leader: fetch =============================================================

    def handle_fetch(self, request: FetchPartition, now_ms: int) -> FetchPartitionResult:
        """Serve one partition of a Fetch as leader (Kafka's ``fetchRecords``).

        Order of checks: leader (NOT_LEADER_OR_FOLLOWER); current leader epoch
        (older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH); a follower
        outside the assignment (NOT_LEADER_OR_FOLLOWER); for followers, the
        last fetched epoch against our epoch cache: on divergence the answer
        is ``DivergingEpoch`` and no records, and the fetch does not count
        toward the follower's LEO (KIP-320); the offset within [log start,
        LEO] (OFFSET_OUT_OF_RANGE). Followers read up to the LEO and their
        fetch updates their state, may expand the ISR and advance the HW;
        consumers read only below the HW.
        """
        # Runs for every partition of every fetch: attributes are read once.
        leader = self._leader
        if leader is None:
            if request.from_any_replica and self._follower is not None:
                return self._read_as_follower(request)
            return self._error_result(ErrorCode.not_leader_or_follower)
        replica_id = request.replica_id
        follower = replica_id >= 0  # request.is_from_follower
        if follower:
            idle = self._idle_fetches.get(replica_id)
            if idle is not None:
                if idle.request is request and idle.refresh(now_ms):
                    # The same request, and nothing its answer depends on moved.
                    return idle.result
                del self._idle_fetches[replica_id]  # replaced by this fetch
        current_epoch = request.current_leader_epoch
        if current_epoch >= 0 and current_epoch != self._leader_epoch:
            error = self._check_current_leader_epoch(current_epoch)
            assert error is not None
            return self._error_result(error)
        log = self.log
        leo = log.log_end_offset
        fetch_offset = request.fetch_offset
        if follower:
            if replica_id not in leader.followers:
                return self._error_result(ErrorCode.not_leader_or_follower)
            last_fetched_epoch = request.last_fetched_epoch
            # An in-step follower (its last epoch is our latest, not past our
            # end) cannot diverge: `_diverging_epoch` without the call.
            if last_fetched_epoch >= 0 and not (
                fetch_offset <= leo and last_fetched_epoch == log.latest_epoch
            ):
                diverging = self._diverging_epoch(last_fetched_epoch, fetch_offset)
                if diverging is not None:
                    return self._result(ErrorCode.none, diverging_epoch=diverging)
        log_start = log.log_start_offset
        if not log_start <= fetch_offset <= leo:
            return self._result(ErrorCode.offset_out_of_range)
        max_offset = None if follower else self._consumer_read_bound(request)
        # Nothing to read at the end (an idle partition, most of a follower's
        # fetch): skip the segment lookup.
        end = leo if max_offset is None else min(leo, max_offset)
        records = (log.read(fetch_offset, request.max_bytes, max_offset).records
                   if fetch_offset < end else b"")
        if follower:
            leader.update_follower_fetch_state(
                replica_id,
                fetch_offset=fetch_offset,
                log_start_offset=request.log_start_offset,
                broker_epoch=request.replica_epoch,
                leader_log_end_offset=leo,
                now_ms=now_ms,
            )
            if replica_id not in leader.isr:  # an ISR member has nothing to join
                leader.maybe_propose_expand(
                    replica_id,
                    high_watermark=self._high_watermark,
                    ineligible=self._ineligible,
                    now_ms=now_ms,
                )
            if self._high_watermark < leo:  # at the LEO already it cannot move
                self._maybe_increment_leader_hw()
        aborted: tuple[tuple[int, int], ...] = ()
        if request.read_committed and max_offset is not None:
            # Kafka's collectAbortedTxns over [fetch offset, LSO).
            aborted = tuple((a.producer_id, a.first_offset) for a in
                            self.txn.aborted_transactions(fetch_offset, max_offset))
        hw = self._high_watermark
        result = FetchPartitionResult(
            ErrorCode.none,
            high_watermark=hw,
            log_start_offset=log_start,
            log_end_offset=leo,
            records=records,
            leader_id=self._leader_id,
            leader_epoch=self._leader_epoch,
            last_stable_offset=self._last_stable_offset(hw),
            aborted_transactions=aborted,
        )
        if follower and fetch_offset == leo == hw and replica_id in leader.isr:
            self._idle_fetches[replica_id] = IdleFollowerFetch(self, request, result)
        return result

    def _read_as_follower(self, request: FetchPartition) -> FetchPartitionResult:
        """A consumer's fetch served by a follower (KIP-392): the same
        epoch and range checks as the leader's, records below this
        replica's high watermark (or last stable offset), which trails the
        leader's by a fetch round trip."""
        error = self._check_current_leader_epoch(request.current_leader_epoch)
        if error is not None:
            return self._error_result(error)
        log = self.log
        fetch_offset = request.fetch_offset
        if not log.log_start_offset <= fetch_offset <= log.log_end_offset:
            return self._result(ErrorCode.offset_out_of_range)
        bound = self._consumer_read_bound(request)
        records = (log.read(fetch_offset, request.max_bytes, bound).records
                   if fetch_offset < bound else b"")
        aborted: tuple[tuple[int, int], ...] = ()
        if request.read_committed:
            aborted = tuple((a.producer_id, a.first_offset) for a in
                            self.txn.aborted_transactions(fetch_offset, bound))
        return self._result(ErrorCode.none, records=records, aborted_transactions=aborted)

    def preferred_read_replica(self, fetch_offset: int, client_rack: str,
                               rack_of: Callable[[int], str | None], now_ms: int) -> int | None:
        """The follower a consumer in ``client_rack`` should read from, as
        Kafka's ``RackAwareReplicaSelector`` picks it; None for this leader.

        The leader if it is in that rack; else, of the in-sync followers in
        it that hold ``fetch_offset``, the most caught up (highest log end
        offset, then the most recently caught up). ``rack_of``: a broker's
        rack, None for one a client cannot reach (fenced, unregistered)."""
        leader = self._leader
        if leader is None or not client_rack or rack_of(leader.local_id) == client_rack:
            return None
        best: tuple[int, int, int] | None = None
        for replica, state in leader.followers.items():
            if (replica in leader.isr and rack_of(replica) == client_rack
                    and state.log_start_offset <= fetch_offset <= state.log_end_offset):
                candidate = (state.log_end_offset, state.last_caught_up_time_ms - now_ms, replica)
                if best is None or candidate > best:
                    best = candidate
        return None if best is None else best[2]

    def _consumer_read_bound(self, request: FetchPartition) -> int:
        """A consumer reads below the HW, or below the LSO with READ_COMMITTED (KIP-98)."""
        if request.read_committed:
            return self._last_stable_offset(self._high_watermark)
        return self._high_watermark

    def idle_fetch(
        self, request: FetchPartition, result: FetchPartitionResult
    ) -> IdleFollowerFetch | None:
        """The stored idle answer if ``result`` is it (`handle_fetch` just
        answered ``request`` with it), else None."""
        if not request.is_from_follower:
            return None
        idle = self._idle_fetches.get(request.replica_id)
        if idle is None or idle.request is not request or idle.result is not result:
            return None
        return idle

    def delayed_fetch_bytes(self, request: FetchPartition) -> int | None:
        """For DelayedFetch: bytes now readable for ``request``, or None if the
        fetch must be answered now anyway (leadership or epoch changed, the
        follower diverged, the offset fell out of range)."""
        if self._leader is None:
            if not request.from_any_replica or self._follower is None:
                return None
            # A consumer reading from this follower (KIP-392).
            if self._check_current_leader_epoch(request.current_leader_epoch) is not None:
                return None
            fetch_offset = request.fetch_offset
            if not self.log.log_start_offset <= fetch_offset <= self.log.log_end_offset:
                return None
            bound = self._consumer_read_bound(request)
            if fetch_offset >= bound:
                return 0
            return self.log.readable_bytes(fetch_offset, request.max_bytes, bound)
        follower = request.replica_id >= 0  # request.is_from_follower
        if follower:
            idle = self._idle_fetches.get(request.replica_id)
            if idle is not None and idle.request is request and idle.still_idle():
                return 0
        current_epoch = request.current_leader_epoch
        if current_epoch >= 0 and current_epoch != self._leader_epoch:
            return None  # FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH: answer now
        log = self.log
        leo = log.log_end_offset
        fetch_offset = request.fetch_offset
        if follower:
            last_fetched_epoch = request.last_fetched_epoch
            if last_fetched_epoch >= 0 and not (
                fetch_offset <= leo and last_fetched_epoch == log.latest_epoch
            ) and self._diverging_epoch(last_fetched_epoch, fetch_offset) is not None:
                return None
            end = limit = leo
        else:
            end = self._consumer_read_bound(request)
            limit = self._high_watermark
        if fetch_offset > limit or fetch_offset < log.log_start_offset:
            return None
        if fetch_offset >= end:
            return 0
        return log.readable_bytes(fetch_offset, request.max_bytes, None if follower else end)

    def _check_current_leader_epoch(self, current_leader_epoch: int) -> ErrorCode | None:
        if current_leader_epoch < 0 or current_leader_epoch == self._leader_epoch:
            return None
        if current_leader_epoch < self._leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    def _diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> EpochEndOffset | None:
        if last_fetched_epoch == self.log.latest_epoch >= 0:
            # The common case, a follower in step: the cache would answer
            # (latest epoch, LEO) without a lookup.
            leo = self.log.log_end_offset
            return None if fetch_offset <= leo else EpochEndOffset(last_fetched_epoch, leo)
        epoch, end_offset = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0:
            # Our cache has no epochs (an empty log): the follower keeps nothing
            # beyond our end.
            epoch, end_offset = -1, self.log.log_end_offset
        if epoch < last_fetched_epoch or end_offset < fetch_offset:
            return EpochEndOffset(epoch, end_offset)
        return None

    def _error_result(self, error: ErrorCode) -> FetchPartitionResult:
        return FetchPartitionResult(error, leader_id=self._leader_id, leader_epoch=self._leader_epoch)

    def _result(
        self,
        error: ErrorCode,
        *,
        records: bytes = b"",
        diverging_epoch: EpochEndOffset | None = None,
        aborted_transactions: tuple[tuple[int, int], ...] = (),
    ) -> FetchPartitionResult:
        return FetchPartitionResult(
            error,
            high_watermark=self._high_watermark,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            records=records,
            diverging_epoch=diverging_epoch,
            leader_id=self._leader_id,
            leader_epoch=self._leader_epoch,
            last_stable_offset=self._last_stable_offset(self._high_watermark),
            aborted_transactions=aborted_transactions,
        )

    # ==== leader: HW and ISR ========================================================

    def _maybe_increment_leader_hw(self) -> bool:
        """Move the HW to the minimum LEO over the (maximal) ISR, unless the
        committed ISR is below ``min.insync.replicas`` (at most the replica
        count): then it holds, as Kafka's leaders do since 3.7. That is what
        lets KIP-966 trust a replica that left the ISR below the minimum
        (the ELR) to hold every record below the HW; acks=1 records appended
        meanwhile become visible once the ISR is back at the minimum."""
        leader = self._leader
        if leader is None:
            return False
        if len(leader.isr) < min(self.config.min_insync_replicas, len(leader.replicas)):
            return False
        leo = self.log.log_end_offset
        candidate = leader.high_watermark_candidate(leo)
        new_hw = isr_math.next_high_watermark(self._high_watermark, candidate)
        if new_hw == self._high_watermark:
            return False
        if not self.log.log_start_offset <= new_hw <= leo:
            raise AssertionError(f"{self.key}: HW {new_hw} outside the log "
                                 f"[{self.log.log_start_offset}, {leo}]")
        self._high_watermark = new_hw
        self.txn.on_high_watermark(new_hw)
        return True

    def maybe_shrink_isr(self, now_ms: int) -> bool:
        """Propose removing followers that have not caught up to the leader's
        LEO within ``replica.lag.time.max.ms`` (Kafka's ``maybeShrinkIsr``,
        run periodically). Returns whether a change was proposed; fetch it
        with `poll_alter_partition`."""
        if self._leader is None:
            return False
        for idle in self._idle_fetches.values():
            idle.settle()  # fetches that skipped a parked partition count
        return self._leader.maybe_propose_shrink(self.log.log_end_offset, now_ms)

    def poll_alter_partition(self, now_ms: int) -> AlterPartitionRequest | None:
        """The AlterPartition to send now, if one is due: a new proposal, a
        retry after a retriable error, or a resend after
        ``alter_partition_timeout_ms`` without an answer. At most one change
        is ever pending."""
        pending = self._leader.pending if self._leader is not None else None
        if pending is None or pending.awaiting_metadata or now_ms < pending.retry_at_ms:
            return None
        if (
            pending.sent_at_ms is not None
            and now_ms < pending.sent_at_ms + self.config.alter_partition_timeout_ms
        ):
            return None
        pending.sent_at_ms = now_ms
        return pending.request

    def handle_alter_partition_response(
        self, response: AlterPartitionResponse, now_ms: int
    ) -> bool:
        """Settle the pending ISR change (Kafka's ``handleAlterPartitionUpdate``
        and ``handleAlterPartitionError``). Returns whether the committed ISR
        changed.

        - NONE: adopt the controller's ISR and partition epoch, unless the
          answer is for another leader epoch or an older partition epoch
          (then newer metadata settles it).
        - INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED: not applied; revert.
        - FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...: our view is stale;
          stay pending (HW over the maximal ISR) until metadata arrives.
        - anything else (retriable): resend after the retry backoff.

        A response for a change that is no longer pending is ignored.
        """
        leader = self._leader
        pending = leader.pending if leader is not None else None
        if leader is None or pending is None or pending.request.change_id != response.change_id:
            return False
        if response.error == ErrorCode.none:
            if response.leader_epoch != leader.leader_epoch or (
                response.partition_epoch < leader.partition_epoch
            ):
                pending.awaiting_metadata = True
                return False
            leader.commit_isr(response.isr, response.partition_epoch)
            self._partition_epoch = response.partition_epoch
            self._isr = leader.isr
            self._maybe_increment_leader_hw()
            return True
        if response.error in _REVERT_ERRORS:
            leader.revert_pending()
            return False
        if response.error in _AWAIT_METADATA_ERRORS:
            pending.awaiting_metadata = True
            return False
        pending.sent_at_ms = None
        pending.retry_at_ms = now_ms + self.config.alter_partition_retry_backoff_ms
        return False

    # ==== follower ==================================================================

    def fetch_request(self, now_ms: int) -> FetchPartition | None:
        """The next fetch to send to the leader, or None (not a follower, no
        leader, fenced, or backing off). It carries the LEO as fetch offset,
        the log's latest epoch as last fetched epoch (KIP-320) and our leader
        epoch for fencing."""
        follower = self._follower
        if follower is None or not follower.can_fetch(now_ms):
            return None
        try:
            self._drop_epoch_entries_at_log_end()
        except OSError as e:
            # The epoch checkpoint could not be rewritten (disk full or
            # failing); the cache in memory already dropped the entry. As a
            # failed follower append: this partition backs off, the others
            # of its leader keep fetching.
            log.warning("%s: cannot checkpoint the epoch cache: %s", self.key, e)
            follower.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
            return None
        leo = self.log.log_end_offset
        last_fetched_epoch = self.last_fetched_epoch
        last = self._last_fetch_request
        # The same fields give the same object: the leader's session and its
        # idle-fetch memo (`IdleFollowerFetch`) recognise an unchanged partition by identity.
        if (last is not None and last.fetch_offset == leo
                and last.current_leader_epoch == follower.leader_epoch
                and last.last_fetched_epoch == last_fetched_epoch
                and last.max_bytes == self.config.replica_fetch_max_bytes
                and last.replica_epoch == self.broker_epoch
                and last.log_start_offset == self.log.log_start_offset):
            return last
        self._last_fetch_request = FetchPartition(
            fetch_offset=leo,
            current_leader_epoch=follower.leader_epoch,
            last_fetched_epoch=last_fetched_epoch,
            max_bytes=self.config.replica_fetch_max_bytes,
            replica_id=self.local_id,
            replica_epoch=self.broker_epoch,
            log_start_offset=self.log.log_start_offset,
        )
        return self._last_fetch_request

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch in the log (-1 if none): the newest
        epoch-cache entry that starts below the log end.

        The cache may also hold an entry starting exactly at the log end: a
        leader writes its epoch before the first batch, and recovery or a
        crash can leave the entry without the batch until the follower
        truncates at its log end (`_drop_epoch_entries_at_log_end`); reporting
        that entry would make the leader answer the same DivergingEpoch
        forever. Skipping it gives the epoch Kafka would send.
        """
        leo = self.log.log_end_offset
        latest = self.log.latest_epoch_entry
        if latest is None:
            return -1
        if latest.start_offset < leo:
            return latest.epoch  # the common case: no copy of the cache
        for entry in reversed(self.log.epoch_entries):
            if entry.start_offset < leo:
                return entry.epoch
        return -1

    def _drop_epoch_entries_at_log_end(self) -> None:
        """Forget epoch-cache entries that start at the log end (no batch carries them).

        A leader checkpoints its epoch before its first batch; a crash or a
        lost leadership can leave the entry without the batch, and a kept
        entry makes every later ``append_as_follower`` of older-epoch batches
        fail. Truncating at the log end drops it (Kafka's follower gets the
        same from ``UnifiedLog.truncateTo``, which always truncates the epoch
        cache). Cheap when there is nothing to drop.
        """
        latest = self.log.latest_epoch_entry
        if latest is not None and latest.start_offset >= self.log.log_end_offset:
            self.log.truncate_to(self.log.log_end_offset)

    def handle_fetch_response(
        self, request: FetchPartition, result: FetchPartitionResult, now_ms: int
    ) -> FollowerFetchOutcome:
        """Apply the leader's answer to ``request`` (which we sent).

        Stale answers (another epoch, or our LEO moved since) are dropped.
        DivergingEpoch truncates (`divergence_truncation_offset`);
        records are appended as they are; the HW becomes
        min(leader HW, our LEO). FENCED_LEADER_EPOCH stops fetching until
        newer metadata; UNKNOWN_LEADER_EPOCH and NOT_LEADER_OR_FOLLOWER (the
        leader's metadata is behind ours, or ours behind) back off and retry,
        as Kafka's fetcher does: newer metadata replaces this state anyway.
        """
        follower = self._follower
        if (
            follower is None
            or request.current_leader_epoch != follower.leader_epoch
            or request.fetch_offset != self.log.log_end_offset
        ):
            return FollowerFetchOutcome.STALE
        error = result.error
        try:
            if error == ErrorCode.none and result.diverging_epoch is not None:
                self._truncate_on_divergence(result.diverging_epoch)
                return FollowerFetchOutcome.TRUNCATED
            if error == ErrorCode.offset_out_of_range:
                return self._handle_offset_out_of_range(follower, result, now_ms)
        except OSError as e:
            # Disk full or failing mid-truncation (the producer state and
            # the HW followed what the log did): back off and ask again.
            log.warning("%s: cannot truncate: %s", self.key, e)
            follower.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
            return FollowerFetchOutcome.RETRY_LATER
        if error == ErrorCode.none:
            return self._append_fetched(follower, result, now_ms)
        if error == ErrorCode.fenced_leader_epoch:
            follower.fenced = True
            return FollowerFetchOutcome.WAIT_FOR_METADATA
        follower.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
        return FollowerFetchOutcome.RETRY_LATER

    def _append_fetched(
        self, follower: FollowerState, result: FetchPartitionResult, now_ms: int
    ) -> FollowerFetchOutcome:
        outcome = FollowerFetchOutcome.NO_DATA
        if result.records:
            self.txn.note_segment(self.log)
            try:
                self.log.append_as_follower(result.records)
            except (UnexpectedAppendOffsetError, InvalidEpochError, InvalidRecordBatchError,
                    RecordTooLargeError, OSError) as e:
                # Bad peer input (tier 1), or our disk is full or failing
                # (nothing was appended): drop the response and retry later.
                log.warning("%s: cannot append fetched batches: %s", self.key, e)
                follower.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
                return FollowerFetchOutcome.RETRY_LATER
            self.txn.apply_appended_bytes(self.log, result.records)
            outcome = FollowerFetchOutcome.APPENDED
        if result.high_watermark >= 0:
            self._high_watermark = max(
                self.log.log_start_offset, min(result.high_watermark, self.log.log_end_offset)
            )
            self.txn.on_high_watermark(self._high_watermark)
        if result.log_start_offset > self.log.log_start_offset:
            self._follow_log_start(min(result.log_start_offset, self._high_watermark))
        return outcome

    def _follow_log_start(self, offset: int) -> None:
        """Move our log start up to the leader's (Kafka's follower
        ``maybeIncrementLogStartOffset``), never past our high watermark: the
        leader's DeleteRecords and retention reach every replica, and the
        leader's low watermark sees it in our next fetch."""
        try:
            if self.log.delete_records_before(offset):
                self.txn.after_log_start_moved(self.log)
        except OSError as e:
            log.warning("%s: cannot move the log start to %d: %s", self.key, offset, e)

    def _truncate_on_divergence(self, diverging: EpochEndOffset) -> None:
        target = divergence_truncation_offset(
            diverging,
            self.log.end_offset_for_epoch(diverging.epoch),
            self.log.log_end_offset,
            self.log.log_start_offset,
        )
        if target < self._high_watermark:
            log.warning("%s: truncating to %d, below the high watermark %d",
                        self.key, target, self._high_watermark)
        try:
            self.log.truncate_to(target)
        finally:
            self._after_truncation()

    def _after_truncation(self) -> None:
        """Bring the producer state and the HW along with a truncated log;
        also after a truncation that failed part-way (the log may have
        changed before the error)."""
        self.txn.after_truncation(self.log)
        self._high_watermark = max(self.log.log_start_offset,
                                   min(self._high_watermark, self.log.log_end_offset))

    def _handle_offset_out_of_range(
        self, follower: FollowerState, result: FetchPartitionResult, now_ms: int
    ) -> FollowerFetchOutcome:
        leo = self.log.log_end_offset
        if 0 <= result.log_end_offset < leo:
            # The leader's log ends below ours with no epoch to compare (only
            # after an unclean election): keep at most the leader's log.
            if not self.config.unclean_leader_election_enable:
                log.warning("%s: leader's end %d is below ours %d with unclean election "
                            "disabled; truncating", self.key, result.log_end_offset, leo)
            try:
                self.log.truncate_to(result.log_end_offset)
            finally:
                self._after_truncation()
            return FollowerFetchOutcome.TRUNCATED
        if result.log_start_offset > leo:
            # We are behind the leader's retention: restart empty at its
            # start (the HW with it: `_after_truncation` lifts it to the
            # new log start).
            try:
                self.log.truncate_fully_and_start_at(result.log_start_offset)
            finally:
                self._after_truncation()
            return FollowerFetchOutcome.TRUNCATED
        follower.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
        return FollowerFetchOutcome.RETRY_LATER


def _placed(headers: list[BatchHeader], first_offset: int) -> list[tuple[BatchHeader, None]]:
    """The appended batches' headers with the offsets the log assigned."""
    out: list[tuple[BatchHeader, None]] = []
    offset = first_offset
    for header in headers:
        out.append((header.at_offset(offset), None))
        offset += header.last_offset_delta + 1
    return out


class IdleParking(Protocol):
    """A fetch session that parked an idle partition (`data_plane.api.fetch`):
    its fetches skip the partition and do not `IdleFollowerFetch.refresh`
    it while it stays parked."""

    def parked_fetch_ms(self, idle: IdleFollowerFetch) -> int | None:
        """The time of the session's last fetch while ``idle`` is parked there
        (a fetch that left it idle), or None if it is not parked any more."""
        ...


class IdleFollowerFetch:
    """A follower's fetch that found the partition idle: the follower at our
    LEO, the HW there too, the follower in the ISR, nothing to read.

    Followers fetch every partition they follow from a leader, and most are
    idle (``__consumer_offsets``). While the same request object comes back
    (a fetch session hands the cached one; `Partition.fetch_request` returns
    the same object for the same fields) and nothing its answer depends on
    has moved (leader term and state, partition epoch, LEO, HW, log start,
    latest epoch), the answer is the same: `Partition.handle_fetch` records
    the fetch in the follower's state, as the full path would, and returns
    the stored result. A fetch session may also keep this object and call
    `refresh` instead of serving the partition (`Partition.idle_fetch`), and
    then park the partition (``parked_by``): its fetches skip it, and what
    they would have recorded is recorded by `settle` before the follower's
    state is read, or by `unparked` when the partition changes.
    """

    # A follower fetches every idle partition of its session on every fetch:
    # `still_idle` and `refresh` run tens of times per fetch, so they compare
    # fields with early exits instead of building a fingerprint tuple.
    __slots__ = ("end_offset", "high_watermark", "latest_epoch", "leader", "leader_epoch",
                 "log", "log_start_offset", "parked_by", "partition", "partition_epoch",
                 "recorded_ms", "request", "result")

    def __init__(self, partition: Partition, request: FetchPartition,
                 result: FetchPartitionResult) -> None:
        self.partition = partition
        self.leader = partition._leader
        self.request = request
        self.result = result
        log = self.log = partition.log
        self.end_offset = log.log_end_offset
        self.high_watermark = partition._high_watermark
        self.leader_epoch = partition._leader_epoch
        self.partition_epoch = partition._partition_epoch
        self.log_start_offset = log.log_start_offset
        self.latest_epoch = log.latest_epoch
        # The fetch time last recorded in the follower's state through this answer.
        self.recorded_ms = -1
        #: The session that parked the partition, while it skips it.
        self.parked_by: IdleParking | None = None

    def still_idle(self) -> bool:
        """Whether nothing the stored answer depends on has moved: leader
        term and state, partition epoch, LEO, HW, log start, latest epoch."""
        partition = self.partition
        log = self.log
        return (self.leader is partition._leader
                and partition._idle_fetches.get(self.request.replica_id) is self
                and log is partition.log
                and self.end_offset == log.log_end_offset
                and self.high_watermark == partition._high_watermark
                and self.leader_epoch == partition._leader_epoch
                and self.partition_epoch == partition._partition_epoch
                and self.log_start_offset == log.log_start_offset
                and self.latest_epoch == log.latest_epoch)

    def refresh(self, now_ms: int) -> bool:
        """The follower fetched again with the same request: if the partition
        is still idle, record the fetch as `Partition.handle_fetch` would and
        return True (its answer is `result` again). False: serve it fully."""
        if not self.still_idle():
            return False
        self._record(now_ms)
        return True

    def settle(self) -> None:
        """Record the last fetch of the session that parked this partition
        (`IdleParking`), as `refresh` would have on that fetch, if the answer
        still stands. Run before the follower's state is read."""
        parked_by = self.parked_by
        if parked_by is None:
            return
        at = parked_by.parked_fetch_ms(self)
        if at is None:
            self.parked_by = None
        elif at > self.recorded_ms and self.still_idle():
            self._record(at)

    def unparked(self, last_fetch_ms: int) -> None:
        """The session that parked this partition stops skipping it because
        the partition just changed (an append, a HW or epoch move). Its
        fetches until then, the last at ``last_fetch_ms``, found it idle:
        record that one, as `refresh` would have, unless this answer was
        replaced meanwhile (the follower fetched it anew, or leadership
        moved)."""
        self.parked_by = None
        partition = self.partition
        if (last_fetch_ms > self.recorded_ms and self.leader is partition._leader
                and partition._idle_fetches.get(self.request.replica_id) is self):
            self._record(last_fetch_ms)

    def _record(self, now_ms: int) -> None:
        request = self.request
        assert self.leader is not None
        self.leader.record_fetch_at_log_end(
            request.replica_id, request.fetch_offset, request.log_start_offset,
            request.replica_epoch, now_ms)
        self.recorded_ms = now_ms
