"""Per-partition producer state: idempotent dedupe and ongoing transactions (KIP-98).

`ProducerStateManager` is Kafka's ``ProducerStateManager`` for one partition
replica, reduced to its pure core. Per producer id it keeps the producer
epoch, the sequence/offset ranges of the last `NUM_BATCHES_TO_RETAIN` (5)
batches, the coordinator epoch of the last marker and the first offset of the
producer's ongoing transaction. It reads batch headers only (plus the single
record of a COMMIT/ABORT control batch): no per-record work.

Produce path, per batch (`validate_batches`, Kafka's
``ProducerAppendInfo.checkProducerEpoch``/``checkSequence``):

1. Non-idempotent batch (producer id -1): always accepted, not tracked.
2. A batch whose ``(epoch, first seq, last seq)`` equals one of the 5
   retained batches is a **duplicate**: the append must not happen; the
   verdict carries the ORIGINAL offsets and the caller answers success
   (Kafka answers NONE with the original base offset; clients also accept
   DUPLICATE_SEQUENCE_NUMBER as success).
3. Epoch older than the producer's current epoch: INVALID_PRODUCER_EPOCH
   (Kafka 2.7+; it was PRODUCER_FENCED before KIP-588).
4. Epoch newer than the current one: the first sequence must be 0, else
   OUT_OF_ORDER_SEQUENCE_NUMBER (KIP-360: a bumped epoch restarts sequences).
5. Same epoch: the first sequence must follow the last one, wrapping from
   Int32.MAX to 0, else OUT_OF_ORDER_SEQUENCE_NUMBER. A producer whose epoch is
   known but who has no retained batch (after a marker bumped its epoch)
   must start at 0.
6. **Unknown producer id.** If the partition may have forgotten the producer
   (its id is at most `max_forgotten_producer_id`: the highest id whose
   entry expired or whose batches retention or DeleteRecords removed, or
   every id when the state was not built from offset 0), the batch is
   accepted at any sequence and the entry is rebuilt from it, as in Kafka
   2.5+ (KIP-360: the producer cannot tell a retention-expired id from a
   lost write, so the broker no longer answers UNKNOWN_PRODUCER_ID on
   produce; `ErrorCode.unknown_producer_id` is never returned here).
   A producer the partition cannot have seen must start at sequence 0,
   else OUT_OF_ORDER_SEQUENCE_NUMBER. Kafka accepts that batch too; raftlog
   does not, because of a race that loses acknowledged writes: a client
   sends seq 0-49 to a stale leader and, after a metadata refresh, seq 50-99
   to the new one, which would place 50-99 first; the resent 0-49 is then
   neither next in sequence nor a retained duplicate, and librdkafka counts
   it as delivered. With the rejection, the client resends from seq 0.
   (Producer ids come from controller blocks handed out in increasing
   order, so new producers mostly have ids above every forgotten one.)
7. A non-transactional batch from a producer with an open transaction:
   INVALID_TXN_STATE (Kafka ``updateCurrentTxnFirstOffset``).

Transactions: the first transactional batch of a producer opens its
transaction at that batch's first offset; a COMMIT/ABORT marker closes it
and yields a `CompletedTxn` (for the aborted index, see ``lso``). A completed
transaction stays *unreplicated* until the high watermark passes its marker,
so that the first unstable offset (and hence the LSO) never runs past a
transaction a new leader could still see as open.

Expiry: a producer without an open transaction whose last batch timestamp
is ``producer.id.expiration.ms`` (default 86400000) old is forgotten
(`remove_expired_producers`; `validate_batches` treats such an entry as
already expired, so the answer does not depend on when the sweep ran).

Snapshots (`take_snapshot`, `load_snapshot`) are versioned and CRC'd (v2 adds
`max_forgotten_producer_id`; a v1 snapshot is read as having forgotten
every id, which only relaxes rule 6), named
``<offset, 20 digits>.snapshot`` like Kafka's, where offset is the next offset
after the last batch the state includes. Unlike Kafka's (which keeps only the
last batch per producer) they keep all 5 retained batches, so dedupe after a
restore is as good as before it. Unreplicated completed transactions are not
snapshotted (neither are they in Kafka).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from data_plane.txn.markers import EndTxnMarker
from raftlog.net.errors import ErrorCode
from raftlog.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

#: Kafka ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``: why max.in.flight <= 5.
NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
#: ``producer.id.expiration.ms`` default (KIP-854); ``transactional.id.expiration.ms`` matches.
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1

SNAPSHOT_VERSION = 2
SNAPSHOT_SUFFIX = ".snapshot"
_SNAP_VERSION = struct.Struct(">h")
_SNAP_HEADER_V1 = struct.Struct(">hIqi")  # version, crc, map end offset, entry count
_SNAP_HEADER = struct.Struct(">hIqiq")  # v2: ... and the max forgotten producer id
#: `max_forgotten_producer_id` when the partition cannot name what it forgot.
ALL_FORGOTTEN = 2**63 - 1
_SNAP_CRC_START = 6  # the CRC covers everything after itself
_SNAP_ENTRY = struct.Struct(">qhiqqb")  # pid, epoch, coord epoch, txn first offset, ts, n
_SNAP_BATCH = struct.Struct(">iiqq")  # first seq, last seq, first offset, last offset

LoggedBatch = tuple[BatchHeader, EndTxnMarker | None]


class SnapshotError(ValueError):
    """A producer-state snapshot that cannot be decoded (torn, corrupt, unknown version)."""


class ProducerStateError(AssertionError):
    """A broken invariant (STYLE.md §8 tier 3): e.g. an update below the applied offset."""


def batch_last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The last sequence of a batch, wrapping past Int32.MAX to 0 (Kafka
    ``DefaultRecordBatch.incrementSequence``)."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Whether ``next_sequence`` directly follows ``last_sequence`` (with wrap-around)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One retained batch: its sequence range and the offsets it was written at."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """What a partition remembers about one producer id."""

    producer_id: int
    producer_epoch: int
    #: The newest last, at most NUM_BATCHES_TO_RETAIN, all of `producer_epoch`.
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    #: First offset of the open transaction, None when none is open.
    current_txn_first_offset: int | None = None
    #: maxTimestamp of the producer's last batch or marker (drives expiry).
    last_timestamp_ms: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def snapshot_key(self) -> tuple[object, ...]:
        """Everything that defines the entry, for equality checks in tests and sims."""
        return (self.producer_id, self.producer_epoch, tuple(self.batches),
                self.coordinator_epoch, self.current_txn_first_offset, self.last_timestamp_ms)


@dataclass(frozen=True, slots=True)
class AppendVerdict:
    """The producer-state answer for a produce request to one partition.

    ``error`` is NONE (append), DUPLICATE_SEQUENCE_NUMBER (do NOT append;
    answer success with ``first_offset``/``last_offset``, the original
    offsets), or a rejection: OUT_OF_ORDER_SEQUENCE_NUMBER,
    INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_RECORD,
    TRANSACTION_COORDINATOR_FENCED (markers only).
    """

    error: ErrorCode
    first_offset: int = NO_OFFSET
    last_offset: int = NO_OFFSET
    message: str | None = None

    @property
    def should_append(self) -> bool:
        return self.error == ErrorCode.none

    @property
    def is_duplicate(self) -> bool:
        return self.error == ErrorCode.duplicate_sequence_number


ACCEPT = AppendVerdict(ErrorCode.none)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset`` (Kafka ``CompletedTxn``).

    ``last_stable_offset`` is the first offset of the earliest transaction
    still open after this one completed, else ``last_offset + 1``: the value
    an aborted-index entry records (Kafka ``lastStableOffset(completedTxn)``).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """Snapshot bytes and the file name they go in; written by the shell at roll."""

    offset: int
    file_name: str
    data: bytes


def snapshot_file_name(offset: int) -> str:
    """``<offset, 20 digits>.snapshot`` (Kafka's name)."""
    if offset < 0:
        raise ValueError(f"snapshot offset must not be negative: {offset}")
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    """The offset of a snapshot file name, None if ``name`` is not one."""
    stem = name.removesuffix(SNAPSHOT_SUFFIX)
    if stem == name or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


# (epoch, last seq, transaction open) of a producer as earlier batches of the
# same request left it: validation of batch n sees batches 0..n-1.
_Pending = tuple[int, int, bool]


class ProducerStateManager:
    """Producer state of one partition replica (see the module docstring).

    Invariant: the state reflects exactly the batches below `map_end_offset`;
    `update` must be called once per appended batch, in offset order, on the
    leader and on followers alike.
    """

    def __init__(self, *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
                 ) -> None:
        if producer_id_expiration_ms <= 0:
            raise ValueError(f"producer.id.expiration.ms must be positive: "
                             f"{producer_id_expiration_ms}")
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._entries: dict[int, ProducerStateEntry] = {}
        # pid -> first offset of its open transaction. Insertion order is
        # offset order (transactions open in log order), so the first item is
        # the earliest open transaction.
        self._ongoing: dict[int, int] = {}
        # Completed, but the marker is not yet below the high watermark.
        self._unreplicated: list[CompletedTxn] = []
        self._map_end_offset = 0
        # Every producer id above this that has no entry never appended to
        # the partition (rule 6 of the module docstring).
        self._max_forgotten = NO_PRODUCER_ID

    # ==== views =====================================================================

    @property
    def map_end_offset(self) -> int:
        """The offset after the last batch applied (Kafka ``mapEndOffset``)."""
        return self._map_end_offset

    @property
    def producer_ids(self) -> frozenset[int]:
        return frozenset(self._entries)

    @property
    def max_forgotten_producer_id(self) -> int:
        """The highest producer id the partition may have forgotten: swept by
        expiry or removed with the batches below a new log start;
        `ALL_FORGOTTEN` when the state was not built from offset 0 or skipped
        batches; -1 when it forgot none. A producer above it that has no
        entry was never seen, and must start at sequence 0 (rule 6)."""
        return self._max_forgotten

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._entries.get(producer_id)

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        return producer_id in self._ongoing

    def ongoing_transactions(self) -> dict[int, int]:
        """pid -> first offset of every open transaction, earliest first."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction that is open, or completed
        by a marker not yet below the high watermark; None if there is none."""
        if not self._unreplicated and not self._ongoing:
            return None  # every fetch's answer asks (its LSO): the common case first
        candidates = [t.first_offset for t in self._unreplicated]
        if self._ongoing:
            candidates.append(next(iter(self._ongoing.values())))
        return min(candidates, default=None)

    def state_key(self) -> tuple[object, ...]:
        """A comparable summary of the whole state (live vs rebuilt checks)."""
        return (self._map_end_offset,
                tuple(self._entries[p].snapshot_key() for p in sorted(self._entries)),
                tuple(self._ongoing.items()), self._max_forgotten)

    # ==== produce path ==============================================================

    def validate_append(self, header: BatchHeader, now_ms: int) -> AppendVerdict:
        """`validate_batches` for a single batch."""
        return self.validate_batches((header,), now_ms)

    def validate_batches(self, headers: Sequence[BatchHeader], now_ms: int) -> AppendVerdict:
        """Check a produce request's batches, in order, against the state.

        Mutates nothing. Returns the first rejection, or a duplicate verdict
        (with the original offsets) if any batch is a retained duplicate — the
        whole request is then a resend and nothing may be appended, as in
        Kafka's ``analyzeAndValidateProducerState`` — else `ACCEPT`.
        """
        pending: dict[int, _Pending] = {}
        for header in headers:
            verdict = self._check_batch(header, pending, now_ms)
            if verdict is not ACCEPT:
                return verdict
        return ACCEPT

    def _check_batch(self, header: BatchHeader, pending: dict[int, _Pending],
                     now_ms: int) -> AppendVerdict:
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return ACCEPT
        if header.is_control:
            return AppendVerdict(ErrorCode.invalid_record,
                                 message="control batches come only from WriteTxnMarkers")
        first_seq = header.base_sequence
        if first_seq < 0 or header.producer_epoch < 0:
            return AppendVerdict(ErrorCode.invalid_record,
                                 message=f"producer {pid} batch without sequence or epoch")
        last_seq = batch_last_sequence(first_seq, header.last_offset_delta)
        epoch = header.producer_epoch
        entry = self._live_entry(pid, now_ms)
        state = pending.get(pid)
        txn_open = False
        if (state is None and first_seq != 0 and pid not in self._entries
                and pid > self.max_forgotten_producer_id):
            return AppendVerdict(
                ErrorCode.out_of_order_sequence_number,
                message=f"producer {pid} is new to this partition: its first batch must "
                f"have sequence 0, not {first_seq}")
        if state is None and entry is not None:
            duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
            if duplicate is not None:
                return AppendVerdict(ErrorCode.duplicate_sequence_number,
                                     duplicate.first_offset, duplicate.last_offset)
            state = (entry.producer_epoch, entry.last_seq,
                     entry.current_txn_first_offset is not None)
        if state is not None:
            current_epoch, current_last_seq, txn_open = state
            if epoch < current_epoch:
                return AppendVerdict(
                    ErrorCode.invalid_producer_epoch,
                    message=f"producer {pid}: epoch {epoch} is older than {current_epoch}")
            if epoch > current_epoch:
                if first_seq != 0:
                    return AppendVerdict(
                        ErrorCode.out_of_order_sequence_number,
                        message=f"producer {pid}: new epoch {epoch} must start at "
                        f"sequence 0, not {first_seq}")
                txn_open = False  # a bumped epoch ended any earlier transaction
            elif not in_sequence(current_last_seq, first_seq):
                return AppendVerdict(
                    ErrorCode.out_of_order_sequence_number,
                    message=f"producer {pid} epoch {epoch}: sequence {first_seq} "
                    f"after {current_last_seq}")
            if txn_open and not header.is_transactional:
                return AppendVerdict(
                    ErrorCode.invalid_txn_state,
                    message=f"producer {pid}: non-transactional batch inside a transaction")
        pending[pid] = (epoch, last_seq, header.is_transactional or txn_open)
        return ACCEPT

    def validate_marker(self, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int) -> AppendVerdict:
        """Check a WriteTxnMarkers entry before its control batch is appended
        (Kafka ``appendEndTxnMarker``): an older producer epoch is
        INVALID_PRODUCER_EPOCH, an older coordinator epoch
        TRANSACTION_COORDINATOR_FENCED. Markers need no sequence."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return ACCEPT
        if producer_epoch < entry.producer_epoch:
            return AppendVerdict(
                ErrorCode.invalid_producer_epoch,
                message=f"marker for producer {producer_id} at epoch {producer_epoch} "
                f"< {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return AppendVerdict(
                ErrorCode.transaction_coordinator_fenced,
                message=f"coordinator epoch {coordinator_epoch} < {entry.coordinator_epoch}")
        return ACCEPT

    def _live_entry(self, producer_id: int, now_ms: int) -> ProducerStateEntry | None:
        entry = self._entries.get(producer_id)
        if entry is not None and self._is_expired(entry, now_ms):
            return None
        return entry

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp_ms >= self.producer_id_expiration_ms)

    # ==== applying appended batches =================================================

    def update(self, header: BatchHeader, first_offset: int, last_offset: int,
               marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply one batch appended at ``first_offset..last_offset``.

        ``marker`` is required for a COMMIT/ABORT control batch (it then
        returns the `CompletedTxn`). Batches must come in offset order;
        raises `ProducerStateError` otherwise, or for a marker on a
        non-control batch.
        """
        if first_offset < self._map_end_offset or last_offset < first_offset:
            raise ProducerStateError(
                f"batch {first_offset}..{last_offset} applied below map end offset "
                f"{self._map_end_offset}")
        if first_offset > self._map_end_offset:
            # Batches the state never saw (a log starting above 0, a compacted
            # gap): a producer may have written only there.
            self._max_forgotten = ALL_FORGOTTEN
        self._map_end_offset = last_offset + 1
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        if header.is_control:
            if marker is None:
                return None  # not a transaction marker (e.g. a KRaft control record)
            return self._apply_marker(header, marker, last_offset)
        if marker is not None:
            raise ProducerStateError(f"marker given for data batch at {first_offset}")
        entry = self._entry_for_epoch(pid, header.producer_epoch)
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(
                header.base_sequence,
                batch_last_sequence(header.base_sequence, header.last_offset_delta),
                first_offset, last_offset))
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing[pid] = first_offset
        entry.last_timestamp_ms = header.max_timestamp
        return None

    def _entry_for_epoch(self, producer_id: int, epoch: int) -> ProducerStateEntry:
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = ProducerStateEntry(producer_id, epoch)
            self._entries[producer_id] = entry
        elif epoch != entry.producer_epoch:
            # A new epoch restarts sequences (KIP-360); old batches can no
            # longer be duplicates.
            entry.producer_epoch = epoch
            entry.batches.clear()
        return entry

    def _apply_marker(self, header: BatchHeader, marker: EndTxnMarker,
                      offset: int) -> CompletedTxn:
        pid = header.producer_id
        current = self._entries.get(pid)
        # A marker may bump the epoch (timeout abort, KIP-890) but never lowers it.
        epoch = header.producer_epoch if current is None else max(header.producer_epoch,
                                                                   current.producer_epoch)
        entry = self._entry_for_epoch(pid, epoch)
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp_ms = header.max_timestamp
        self._ongoing.pop(pid, None)
        lso = next(iter(self._ongoing.values()), offset + 1)
        completed = CompletedTxn(pid, offset if first is None else first, offset,
                                 not marker.commit, lso)
        self._unreplicated.append(completed)
        return completed

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the HW: they no
        longer hold the first unstable offset back."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated
                                  if t.last_offset >= high_watermark]

    # ==== rebuilding ================================================================

    def load_from_batches(self, batches: Iterable[LoggedBatch], *,
                          from_log_start: bool = False) -> list[CompletedTxn]:
        """Replay log batches (``(header, marker)``, see ``markers.scan_batches``)
        from `map_end_offset` on. Batches wholly below it are skipped (a read
        may start mid-batch). Returns the transactions completed on the way,
        so the caller can rebuild the aborted-transaction index.

        ``from_log_start``: the state was reset to the log start offset,
        which DeleteRecords (or a follower following its leader's start) may
        have put inside a batch. That batch is the first one read and is
        replayed whole, as Kafka does: its producer's sequence and offsets
        are still the latest (a retry of it is a duplicate with its original
        offsets), as they are on a replica that never restarted. Otherwise a
        batch that begins below `map_end_offset` is an error (`update`)."""
        completed: list[CompletedTxn] = []
        for header, marker in batches:
            if header.last_offset < self._map_end_offset:
                continue
            if from_log_start and header.base_offset < self._map_end_offset:
                self._map_end_offset = header.base_offset
            from_log_start = False  # only the first batch can straddle the start
            done = self.update(header, header.base_offset, header.last_offset, marker)
            if done is not None:
                completed.append(done)
        return completed

    def reset(self, map_end_offset: int = 0) -> None:
        """Forget everything; the next batch applied must start at or after ``map_end_offset``."""
        self._entries.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._map_end_offset = map_end_offset
        self._max_forgotten = NO_PRODUCER_ID if map_end_offset == 0 else ALL_FORGOTTEN

    def truncate_to(self, offset: int, snapshots: Mapping[int, bytes],
                    read_batches_from: Callable[[int], Iterable[LoggedBatch]]) -> list[str]:
        """Rebuild after the log was truncated to ``offset`` (Kafka ``loadProducerState``).

        ``snapshots`` maps snapshot offsets to their bytes (read lazily if the
        shell likes); the state restarts from the newest one at or below
        ``offset`` (or empty) and replays ``read_batches_from(start)``, which
        must yield the truncated log's batches from ``start`` (clamped to its
        log start offset by the caller). Returns the snapshot file names above
        ``offset``, which the shell deletes. A corrupt snapshot is skipped in
        favour of an older one (Kafka deletes it and falls back).
        """
        doomed = sorted(o for o in snapshots if o > offset)
        for base in sorted((o for o in snapshots if o <= offset), reverse=True):
            try:
                self.load_snapshot(snapshots[base])
            except SnapshotError:
                doomed.append(base)
                continue
            break
        else:
            self.reset()
        self.load_from_batches(read_batches_from(self._map_end_offset))
        return [snapshot_file_name(o) for o in sorted(doomed)]

    def truncate_head(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: producers whose last
        batch is below it are forgotten (Kafka ``onLogStartOffsetIncremented``);
        their next batch is accepted as from an unknown producer (KIP-360)."""
        for pid in [p for p, e in self._entries.items()
                    if e.current_txn_first_offset is None and e.last_offset < log_start_offset]:
            del self._entries[pid]
            self._max_forgotten = max(self._max_forgotten, pid)
        self._unreplicated = [t for t in self._unreplicated if t.last_offset >= log_start_offset]
        if log_start_offset > self._map_end_offset:
            self._max_forgotten = ALL_FORGOTTEN
            self._map_end_offset = log_start_offset

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open
        transaction; returns their ids."""
        expired = [p for p, e in self._entries.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._entries[pid]
        self._max_forgotten = max([self._max_forgotten, *expired])
        return expired

    # ==== snapshots =================================================================

    def take_snapshot(self) -> ProducerSnapshot:
        """The state as a snapshot at `map_end_offset` (call at segment roll,
        where it equals the new segment's base offset)."""
        offset = self._map_end_offset
        return ProducerSnapshot(offset, snapshot_file_name(offset),
                                encode_snapshot(offset, self._entries.values(),
                                                max_forgotten=self._max_forgotten))

    def load_snapshot(self, data: bytes) -> None:
        """Replace the state with a snapshot's. Raises `SnapshotError` (state untouched)."""
        offset, entries, max_forgotten = decode_snapshot(data)
        self.reset(offset)
        self._max_forgotten = max_forgotten
        opened = sorted((e.current_txn_first_offset, e.producer_id) for e in entries
                        if e.current_txn_first_offset is not None)
        for entry in entries:
            self._entries[entry.producer_id] = entry
        for first_offset, pid in opened:
            self._ongoing[pid] = first_offset


def encode_snapshot(offset: int, entries: Iterable[ProducerStateEntry], *,
                    max_forgotten: int = ALL_FORGOTTEN) -> bytes:
    """Snapshot v2: ``version int16, crc uint32 (CRC32C of what follows),
    offset int64, count int32, max forgotten producer id int64``, then per producer ``pid int64, epoch int16,
    coordinator epoch int32, txn first offset int64 (-1: none), last
    timestamp int64, batch count int8`` and its batches ``first seq int32,
    last seq int32, first offset int64, last offset int64``. (v1 is the same
    without the max forgotten producer id.)"""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray()
    for e in ordered:
        txn = NO_OFFSET if e.current_txn_first_offset is None else e.current_txn_first_offset
        body += _SNAP_ENTRY.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch, txn,
                                 e.last_timestamp_ms, len(e.batches))
        for b in e.batches:
            body += _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
    head = struct.pack(">qiq", offset, len(ordered), max_forgotten)
    crc = crc32c(head + body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc) + head + bytes(body)


def decode_snapshot(data: bytes) -> tuple[int, list[ProducerStateEntry], int]:
    """Inverse of `encode_snapshot`: ``(offset, entries, max forgotten producer
    id)``; a v1 snapshot gives `ALL_FORGOTTEN`. Raises `SnapshotError`."""
    if len(data) < _SNAP_VERSION.size:
        raise SnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    (version,) = _SNAP_VERSION.unpack_from(data)
    if version not in (1, SNAPSHOT_VERSION):
        raise SnapshotError(f"snapshot version {version} is not supported")
    header = _SNAP_HEADER_V1 if version == 1 else _SNAP_HEADER
    if len(data) < header.size:
        raise SnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    if version == 1:
        _, crc, offset, count = _SNAP_HEADER_V1.unpack_from(data)
        max_forgotten = ALL_FORGOTTEN
    else:
        _, crc, offset, count, max_forgotten = _SNAP_HEADER.unpack_from(data)
    if crc32c(data[_SNAP_CRC_START:]) != crc:
        raise SnapshotError("snapshot CRC mismatch")
    if offset < 0 or count < 0 or max_forgotten < NO_PRODUCER_ID:
        raise SnapshotError(f"snapshot offset {offset} / count {count} / max forgotten "
                            f"producer {max_forgotten} is negative")
    pos = header.size
    entries: list[ProducerStateEntry] = []
    try:
        for _ in range(count):
            pid, epoch, coord, txn, ts, n = _SNAP_ENTRY.unpack_from(data, pos)
            pos += _SNAP_ENTRY.size
            if not 0 <= n <= NUM_BATCHES_TO_RETAIN:
                raise SnapshotError(f"producer {pid} has {n} batches")
            entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coord,
                                       current_txn_first_offset=None if txn < 0 else txn,
                                       last_timestamp_ms=ts)
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                pos += _SNAP_BATCH.size
            entries.append(entry)
    except struct.error as e:
        raise SnapshotError(f"truncated snapshot: {e}") from e
    if pos != len(data):
        raise SnapshotError(f"{len(data) - pos} trailing bytes after the snapshot")
    return offset, entries, max_forgotten
