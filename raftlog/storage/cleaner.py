"""Log compaction (``cleanup.policy=compact``; Kafka's ``LogCleaner``).

A pass over one log:

1. **Cleanable range.** Every segment but the active one that ends at or
   below the caller's upper bound (the high watermark and the last stable
   offset: nothing a new leader might truncate is ever compacted against)
   and, with ``min.compaction.lag.ms``, whose newest record is at least
   that old.
2. **Key map.** The dirty part of that range (from the log's first dirty
   offset, ``cleaner-offset-checkpoint``) is read, and each key maps to the
   offset of its newest record there. With a memory budget
   (``log.cleaner.dedupe.buffer.size``) the map may stop at a batch before
   the end; the pass then cleans only up to there.
3. **Copy.** The cleanable segments, oldest first, in groups of
   neighbours that fit one segment together (``segment.bytes``, the index
   size, int32 relative offsets; Kafka's ``groupSegmentsBySize``), are each
   copied to ``<first base>.log.cleaned`` keeping only the records the map
   does not supersede, and swapped in for the group
   (`Log.replace_with_cleaned`). A lone segment where nothing changes is
   left alone. The first dirty offset then moves to the end of the range.

What a record keeps and what it loses:

- A record with a key stays only while no newer record with that key lies
  in the dirty range. Offsets never change: a rewritten batch keeps its
  baseOffset, lastOffsetDelta, leader epoch and producer fields, and each
  record its offset delta, so a batch's offset range is what it was.
- A tombstone (null value) that is its key's newest record stays for
  ``delete.retention.ms`` more. The first pass that keeps it writes the
  delete horizon into its batch (KIP-534: attribute bit 6, baseTimestamp =
  now + ``delete.retention.ms``, record timestamps re-encoded against it);
  a later pass after the horizon drops it.
- A batch left with no record becomes an empty batch. Consecutive empty
  batches of one leader epoch are merged into one header covering their
  offsets, except an idempotent producer's last batch in the range, which
  stays as an empty batch with its producer id, epoch and sequence range,
  so that its producer state survives a restart (Kafka keeps that batch for
  the same reason). Clients skip empty batches (the protocol allows them
  after compaction). So, unlike Kafka, which leaves gaps between batches,
  a compacted log stays contiguous batch by batch, and replication,
  recovery and truncation need no gap rules.

Transactions (the range lies below the last stable offset, so each of its
transactions has ended; the marker says how):

- A committed transaction's records are compacted like any others: their
  keys enter the map (once the COMMIT marker is read) and they give way to
  newer records of their keys.
- An aborted transaction's records are all removed, as Kafka's cleaner
  removes them; an aborted write never enters the map, so it never hides
  an older committed value.
- A transactional batch left with no records becomes an ordinary empty
  batch (or its producer's last batch, kept empty with its producer fields,
  as above), so a replica replaying the log never sees a transaction begin
  where none is left.
- A transactional batch whose marker lies above the cleanable range (not
  rolled yet) keeps its records, its keys outside the map, until a later
  pass sees the marker; but those a newer record of their key supersedes
  go now, committed or not (left, one could outlive a newer tombstone of
  its key and bring a deleted key back).

- A COMMIT marker stays while any record of its transaction does. Once
  none is left, the pass sets the marker's delete horizon
  (``delete.retention.ms`` on, as for a tombstone), and a pass after that
  drops it (Kafka's rule): a replica replaying the log then sees neither,
  so it never takes a transaction without its marker for an open one.
  ABORT markers stay for good (`_Copy._copy_control` says why).

Deliberately conservative, where Kafka does more:
- A record without a key is kept (Kafka's cleaner drops it). Brokers
  refuse keyless produces to compacted topics, as Kafka's do, so only a
  topic that became compacted later holds any.
- A batch whose codec this process cannot read (lz4 or snappy without
  their optional modules) is copied unchanged, and its keys do not enter
  the map.
- A segment the caller says must keep its base offset (``can_merge``
  False: the broker's per-segment transaction index files are named by it)
  is cleaned on its own, never merged into its predecessor.

The pass reads segments without the log's lock (they are not the active
segment, so only a truncation or a deletion can touch them, and either
bumps the log's generation, which makes the swap refuse). Per-record work
happens here, in the cleaner, never on the produce or fetch path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from raftlog.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    RecordError,
    TimestampType,
    iter_batches,
    parse_header,
    validate_batch,
)
from raftlog.records.batch import ControlRecordType, pack_header
from raftlog.records.builder import parse_control_record_key
from raftlog.records.compression import compress, decompress
from raftlog.records.reader import DEFAULT_MAX_DECOMPRESSED_BYTES
from raftlog.records.record import Record, decode_record, encode_record
from raftlog.storage.config import INT_MAX
from raftlog.storage.log import Log
from raftlog.storage.segment import LogSegment

log = logging.getLogger(__name__)

_DELETE_HORIZON_BIT = 0x40
_TIMESTAMP_TYPE_BIT = 0x08
_READ_CHUNK_BYTES = 1 << 20
_WRITE_CHUNK_BYTES = 1 << 20
NO_TIMESTAMP = -1


class CleanerStopped(Exception):
    """`clean` was asked to stop (``stop`` was set); nothing more is swapped."""


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """The topic configs a cleaner pass follows (Kafka's names and defaults)."""

    #: How long a tombstone stays after the pass that first kept it.
    delete_retention_ms: int = 86_400_000
    #: Records newer than this are not compacted (their segment is not cleanable).
    min_compaction_lag_ms: int = 0
    #: Clean once dirty bytes / cleanable bytes reach this.
    min_cleanable_dirty_ratio: float = 0.5
    #: Clean regardless of the ratio once a dirty record is this old.
    max_compaction_lag_ms: int = (1 << 63) - 1


@dataclass(slots=True)
class CleanResult:
    """What one pass did (the figures Kafka's cleaner logs)."""

    #: The key map covered [first_dirty_offset, end_offset).
    first_dirty_offset: int
    end_offset: int
    keys: int = 0
    segments_rewritten: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    #: Of ``records_removed``: records of aborted transactions.
    aborted_records_removed: int = 0
    #: Transaction markers removed (their transactions had nothing left).
    markers_removed: int = 0
    #: The log was truncated or lost segments meanwhile; the pass stopped.
    aborted: bool = False
    #: The key map reached ``max_map_bytes`` before the end of the cleanable
    #: range: this pass covered up to ``end_offset``, the next goes on from it.
    map_full: bool = False
    rewritten_bases: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DirtyState:
    """How much of a log's cleanable range is dirty."""

    clean_bytes: int
    dirty_bytes: int
    #: The oldest timestamp in the first dirty segment (-1 if unknown).
    first_dirty_timestamp: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_segments(
    target: Log, upper_bound: int, now_ms: int, min_compaction_lag_ms: int
) -> tuple[list[LogSegment], int]:
    """`Log.cleanable_segments`, cut before the first segment holding a
    record newer than ``min.compaction.lag.ms``."""
    segments, generation = target.cleanable_segments(upper_bound)
    if min_compaction_lag_ms > 0:
        for i, segment in enumerate(segments):
            if segment.max_timestamp > now_ms - min_compaction_lag_ms:
                return segments[:i], generation
    return segments, generation


def dirty_state(target: Log, upper_bound: int, now_ms: int, min_compaction_lag_ms: int = 0) -> DirtyState:
    """Clean and dirty bytes of the cleanable range (Kafka's
    ``LogToClean``: the ratio decides which log is cleaned next)."""
    segments, _ = cleanable_segments(target, upper_bound, now_ms, min_compaction_lag_ms)
    first_dirty = target.first_dirty_offset
    clean = dirty = 0
    first_dirty_timestamp = NO_TIMESTAMP
    for segment in segments:
        if segment.next_offset <= first_dirty:
            clean += segment.size
        else:
            if dirty == 0:
                first_dirty_timestamp = segment.rolling_based_timestamp or NO_TIMESTAMP
            dirty += segment.size
    return DirtyState(clean, dirty, first_dirty_timestamp)


def needs_cleaning(state: DirtyState, config: CompactionConfig, now_ms: int) -> bool:
    """Kafka's choice: the dirty ratio reached ``min.cleanable.dirty.ratio``,
    or a dirty record is older than ``max.compaction.lag.ms``."""
    if state.dirty_bytes == 0:
        return False
    if state.ratio >= config.min_cleanable_dirty_ratio:
        return True
    first = state.first_dirty_timestamp
    return first >= 0 and now_ms - first > config.max_compaction_lag_ms


def clean(
    target: Log, upper_bound: int, now_ms: int, config: CompactionConfig,
    *, stop: threading.Event | None = None,
    can_merge: Callable[[LogSegment], bool] | None = None,
    max_map_bytes: int | None = None,
) -> CleanResult | None:
    """One compaction pass over ``target`` below ``upper_bound``; None when
    nothing in the cleanable range is dirty.

    Raises `RecordError` for a corrupt batch in the range (nothing is
    swapped from then on), `CleanerStopped` once ``stop`` is set (checked
    at every batch), `LogClosedError`, `OSError`.

    ``can_merge(segment)``: whether ``segment`` may be merged into the
    segment before it (default: always).

    ``max_map_bytes`` (``log.cleaner.dedupe.buffer.size``): about how much
    memory the key map may take (`MAP_ENTRY_BYTES` plus the key per key).
    When the next batch's new keys would not fit, the map ends before that
    batch (after one batch at least, so every pass gets somewhere), as
    Kafka's ``buildOffsetMap`` stops when its map is full: the pass cleans
    only up to there, copies every batch from there on unchanged, and the
    first dirty offset moves only that far, so the next pass goes on from
    there.
    """
    segments, generation = cleanable_segments(
        target, upper_bound, now_ms, config.min_compaction_lag_ms)
    first_dirty = target.first_dirty_offset
    if not segments or segments[-1].next_offset <= first_dirty:
        return None
    scan = _scan(segments, first_dirty, stop, max_map_bytes)
    end = segments[-1].next_offset if scan.end_offset is None else scan.end_offset
    result = CleanResult(first_dirty, end, map_full=scan.end_offset is not None)
    result.keys = len(scan.key_map)
    live = [s for s in segments
            if s.next_offset > target.log_start_offset and s.base_offset < end]
    txn_retained: dict[int, bool] = {}
    for group in group_segments(live, target.config.segment_bytes, can_merge):
        copy = _Copy(target, group, scan, now_ms, config, result, stop, txn_retained)
        cleaned = copy.run()
        if cleaned is None:
            continue
        cleaned.log_file.sync()
        if not target.replace_with_cleaned(group, cleaned, generation):
            target.discard_cleaned_segment(cleaned)
            result.aborted = True
            return result
        result.segments_rewritten += len(group)
        result.rewritten_bases.append(group[0].base_offset)
    target.set_first_dirty_offset(result.end_offset)
    return result


def group_segments(
    segments: list[LogSegment], max_bytes: int,
    can_merge: Callable[[LogSegment], bool] | None = None,
) -> list[list[LogSegment]]:
    """Runs of neighbouring segments whose copies fit one segment: their
    sizes add up to at most ``max_bytes``, their offset index entries fit
    one index, and their offsets stay within int32 of the first base."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups and (can_merge is None or can_merge(segment)):
            group = groups[-1]
            first = group[0]
            if (sum(s.size for s in group) + segment.size <= max_bytes
                    and sum(len(s.offset_index) for s in group) + len(segment.offset_index)
                    < first.offset_index.max_entries
                    and segment.next_offset - 1 - first.base_offset <= INT_MAX):
                group.append(segment)
                continue
        groups.append([segment])
    return groups


# ==== reading ====================================================================


def _segment_batches(
    segment: LogSegment, stop: threading.Event | None
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a segment with its bytes, CRC-checked, read in chunks."""
    position, end = 0, segment.size
    handle = segment.log_file
    while position < end:
        chunk = handle.read_at(position, min(_READ_CHUNK_BYTES, end - position))
        view = memoryview(chunk)
        consumed = 0
        for header, at in iter_batches(chunk):
            if stop is not None and stop.is_set():
                raise CleanerStopped()
            size = header.size_in_bytes
            yield header, view[at : at + size]
            consumed = at + size
        if consumed == 0:
            # One batch bigger than a chunk.
            size = parse_header(chunk).size_in_bytes
            whole = handle.read_at(position, size)
            header = validate_batch(whole)
            yield header, memoryview(whole)
            consumed = size
        position += consumed


def _records(header: BatchHeader, batch: memoryview) -> list[tuple[Record, memoryview]] | None:
    """Each record with its encoded bytes; None if the batch cannot be read
    here (an unavailable codec) or is malformed."""
    try:
        data = decompress(
            header.compression, batch[BATCH_HEADER_SIZE:], limit=DEFAULT_MAX_DECOMPRESSED_BYTES)
        override = (header.max_timestamp
                    if header.timestamp_type == TimestampType.LOG_APPEND_TIME else None)
        out: list[tuple[Record, memoryview]] = []
        view = memoryview(data)
        position = 0
        for _ in range(header.records_count):
            record, end = decode_record(
                data, position, base_offset=header.base_offset,
                base_timestamp=header.base_timestamp, timestamp_override=override)
            out.append((record, view[position:end]))
            position = end
        if position != len(data):
            return None
        return out
    except (RecordError, ValueError) as e:
        log.warning("cleaner: batch at offset %d is unreadable (%s); kept as it is",
                    header.base_offset, e)
        return None


@dataclass(slots=True)
class _ScanResult:
    """What the read pass learnt about the cleanable range."""

    #: Key -> offset of its newest record in the dirty range (committed
    #: transactional records included).
    key_map: dict[bytes, int] = field(default_factory=dict)
    #: Producer id -> base offset of its last data batch in the whole range.
    last_producer_batch: dict[int, int] = field(default_factory=dict)
    #: Base offset of each transactional data batch whose marker is in the
    #: range -> True if its transaction committed, False if it aborted. A
    #: batch not in it (its marker lies above the range) is left as it is.
    txn_fates: dict[int, bool] = field(default_factory=dict)
    #: Where the map stopped when it filled up (a batch's base offset); None
    #: if it covers the whole range. Batches from there on are not cleaned.
    end_offset: int | None = None


#: What one key costs the key map, besides the key's bytes (measured with
#: tracemalloc on CPython 3.11: a dict entry, the key's bytes object header
#: and the offset's int come to 90-100 bytes).
MAP_ENTRY_BYTES = 100


def _scan(
    segments: list[LogSegment], first_dirty: int, stop: threading.Event | None,
    max_map_bytes: int | None = None,
) -> _ScanResult:
    """One read of the cleanable range: the key map of its dirty part, each
    idempotent producer's last batch, and each transaction's outcome.

    A transactional batch's keys enter the map only once its COMMIT marker
    is read (an aborted write must never hide an older committed value), and
    a key keeps the newer of the two offsets (the marker comes after records
    of other producers already mapped)."""
    scan = _ScanResult()
    key_map, last_producer_batch, fates = scan.key_map, scan.last_producer_batch, scan.txn_fates
    # Producer id -> its open transaction's data batches (base offsets) and
    # the keys they wrote in the dirty range, until its marker.
    open_txns: dict[int, tuple[list[int], list[tuple[bytes, int]]]] = {}
    map_bytes = 0  # the map's and the open transactions' keys
    for segment in segments:
        dirty = segment.next_offset > first_dirty
        for header, batch in _segment_batches(segment, stop):
            pid = header.producer_id
            if header.is_control:
                if header.is_transactional and pid in open_txns:
                    committed = _marker_commits(header, batch)
                    bases, keys = open_txns.pop(pid)
                    if committed is None:
                        continue  # unreadable marker: its batches stay as they are
                    for base in bases:
                        fates[base] = committed
                    if committed:
                        for key, offset in keys:
                            if key_map.get(key, -1) < offset:
                                key_map[key] = offset
                continue
            if pid >= 0:
                last_producer_batch[pid] = header.base_offset
            in_dirty = dirty and header.last_offset >= first_dirty
            txn_keys: list[tuple[bytes, int]] | None = None
            if header.is_transactional:
                txn = open_txns.get(pid)
                if txn is None:
                    txn = open_txns[pid] = ([], [])
                txn[0].append(header.base_offset)
                txn_keys = txn[1]
            if not in_dirty:
                continue
            records = _records(header, batch)
            if records is None:
                if txn_keys is not None:
                    # Unreadable: never mapped, so never decided either.
                    open_txns[pid][0].remove(header.base_offset)
                continue
            if max_map_bytes is not None:
                cost = sum(MAP_ENTRY_BYTES + len(record.key) for record, _ in records
                           if record.key is not None and record.key not in key_map)
                if map_bytes and map_bytes + cost > max_map_bytes:
                    if txn_keys is not None:
                        open_txns[pid][0].pop()  # not this pass's
                    scan.end_offset = header.base_offset
                    return scan
                map_bytes += cost
            for record, _ in records:
                if record.key is not None and record.offset >= first_dirty:
                    if txn_keys is not None:
                        txn_keys.append((record.key, record.offset))
                    else:
                        key_map[record.key] = record.offset
    return scan


def _marker_commits(header: BatchHeader, batch: memoryview) -> bool | None:
    """Whether a transaction marker is a COMMIT (False: ABORT; None: not a
    readable transaction marker)."""
    records = _records(header, batch)
    if not records:
        return None
    try:
        _, kind = parse_control_record_key(records[0][0].key)
    except (RecordError, ValueError):
        return None
    if kind == ControlRecordType.COMMIT:
        return True
    if kind == ControlRecordType.ABORT:
        return False
    return None


# ==== copying ====================================================================


class _Copy:
    """A group of segments' compacted copy, written to ``<first base>.log.cleaned``."""

    def __init__(
        self, target: Log, group: list[LogSegment], scan: _ScanResult, now_ms: int,
        config: CompactionConfig, result: CleanResult, stop: threading.Event | None = None,
        txn_retained: dict[int, bool] | None = None,
    ) -> None:
        #: Producer id -> whether a record of its current transaction stays
        #: (shared by the groups of a pass: a marker may follow its records
        #: in a later group).
        self._txn_retained = {} if txn_retained is None else txn_retained
        self._stop = stop
        self._target = target
        self._group = group
        self._key_map = scan.key_map
        self._last_producer_batch = scan.last_producer_batch
        self._txn_fates = scan.txn_fates
        self._end = scan.end_offset
        self._now_ms = now_ms
        self._config = config
        self._result = result
        self._out: LogSegment | None = None
        self._buffers: list[bytes | memoryview] = []
        self._batches: list[tuple[int, int, int]] = []
        self._buffered = 0
        # A run of batches left empty: (base offset, last offset, leader epoch).
        self._empty_run: tuple[int, int, int] | None = None
        self._changed = False

    def run(self) -> LogSegment | None:
        """The cleaned segment (synced by the caller), or None if nothing changed."""
        group = self._group
        self._out = self._target.create_cleaned_segment(group[0].base_offset)
        self._changed = len(group) > 1
        try:
            for segment in group:
                for header, batch in _segment_batches(segment, self._stop):
                    self._result.bytes_read += len(batch)
                    self._copy_batch(header, batch)
            self._end_empty_run()
            self._flush()
            if self._out.next_offset != group[-1].next_offset:
                raise AssertionError(
                    f"cleaned segment ends at {self._out.next_offset}, "
                    f"the original at {group[-1].next_offset}")
        except BaseException:
            self._target.discard_cleaned_segment(self._out)
            raise
        if not self._changed:
            self._target.discard_cleaned_segment(self._out)
            return None
        self._result.bytes_written += self._out.size
        return self._out

    def _copy_batch(self, header: BatchHeader, batch: memoryview) -> None:
        if self._end is not None and header.base_offset >= self._end:
            self._keep(header, batch)  # beyond a full map's reach
            return
        if header.is_control:
            self._copy_control(header, batch)
            return
        retained = self._copy_data(header, batch)
        if header.is_transactional:
            pid = header.producer_id
            self._txn_retained[pid] = self._txn_retained.get(pid, False) or retained

    def _copy_control(self, header: BatchHeader, batch: memoryview) -> None:
        """A COMMIT marker goes once nothing of its transaction is left
        (Kafka's rule, KIP-534): the first pass that finds it so sets its
        delete horizon (``delete.retention.ms`` on, as for a tombstone, so a
        reader that saw the records before they went still finds the
        marker), and a pass after the horizon drops it. A replica replaying
        the log then sees neither records nor marker of that transaction.

        ABORT markers stay. The broker's aborted-transaction index, which
        read_committed fetches hand to consumers, still lists the aborted
        transaction; a consumer that meets the producer's batches inside
        that range skips them until the producer's ABORT marker, so without
        it the producer's later, committed records would be skipped too.
        (Kafka rewrites that index when it cleans; this cleaner does not.)"""
        retained = self._txn_retained.pop(header.producer_id, False)
        if not header.is_transactional or retained or _marker_commits(header, batch) is not True:
            self._keep(header, batch)
            return
        if not header.has_delete_horizon:
            records = _records(header, batch)
            assert records is not None  # _marker_commits read it
            self._changed = True
            self._emit(*self._rewrite(header, records, set_horizon=True))
        elif self._now_ms >= header.base_timestamp:
            self._result.markers_removed += 1
            self._add_to_empty_run(header, new=True)
        else:
            self._keep(header, batch)

    def _copy_data(self, header: BatchHeader, batch: memoryview) -> bool:
        """Copy a data batch; returns whether any of its records stays."""
        undecided = False
        if header.is_transactional and header.records_count > 0:
            committed = self._txn_fates.get(header.base_offset)
            # None: its marker is above the range. Its records that a newer
            # record of their key supersedes go whether it committed or not;
            # the rest stay as they are.
            undecided = committed is None
            if committed is False:
                # An aborted transaction's records go (Kafka's cleaner drops
                # them too); the batch's offsets stay, as an empty batch.
                self._result.records_read += header.records_count
                self._result.records_removed += header.records_count
                self._result.aborted_records_removed += header.records_count
                self._drop_all(header)
                return False
        if header.records_count == 0:
            # Empty already (an earlier pass): a producer's last batch stays,
            # anything else joins the run of empty batches around it.
            if header.producer_id >= 0 and self._is_last_of_producer(header):
                self._keep(header, batch)
            else:
                self._add_to_empty_run(header, new=header.producer_id >= 0)
            return False
        records = _records(header, batch)
        if records is None:
            self._keep(header, batch)
            return True
        self._result.records_read += len(records)
        horizon_passed = header.has_delete_horizon and self._now_ms >= header.base_timestamp
        kept: list[tuple[Record, memoryview]] = []
        needs_horizon = False
        for record, raw in records:
            key = record.key
            if key is not None:
                newest = self._key_map.get(key)
                if newest is not None and record.offset < newest:
                    continue
                if record.value is None and not undecided:
                    if horizon_passed:
                        self._result.tombstones_removed += 1
                        continue
                    needs_horizon = needs_horizon or not header.has_delete_horizon
            kept.append((record, raw))
        self._result.records_removed += len(records) - len(kept)
        if len(kept) == len(records) and not needs_horizon:
            self._keep(header, batch)
        elif kept:
            self._changed = True
            self._emit(*self._rewrite(header, kept, needs_horizon))
        else:
            self._drop_all(header)
        return bool(kept)

    def _drop_all(self, header: BatchHeader) -> None:
        """A batch none of whose records stays: an empty batch with its
        producer fields if it is its producer's last, else part of the run
        of empty batches. Either way not transactional: a replica replaying
        the log must not see a transaction begin there (its marker stays)."""
        if header.producer_id >= 0 and self._is_last_of_producer(header):
            self._changed = True
            self._emit(_empty_batch(header), header.last_offset, header.max_timestamp)
        else:
            self._add_to_empty_run(header, new=True)

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        return self._last_producer_batch.get(header.producer_id) == header.base_offset

    def _rewrite(
        self, header: BatchHeader, kept: list[tuple[Record, memoryview]], set_horizon: bool
    ) -> tuple[bytes, int, int]:
        """The batch with only ``kept``: its bytes, last offset and maxTimestamp."""
        attributes = header.attributes
        base_timestamp = header.base_timestamp
        log_append_time = bool(attributes & _TIMESTAMP_TYPE_BIT)
        if set_horizon:
            attributes |= _DELETE_HORIZON_BIT
            base_timestamp = self._now_ms + self._config.delete_retention_ms
        section = bytearray()
        if set_horizon and not log_append_time:
            # Record timestamps are deltas from baseTimestamp, which now holds
            # the horizon: re-encode each against it.
            for record, _ in kept:
                encode_record(
                    section, offset_delta=record.offset - header.base_offset,
                    timestamp_delta=record.timestamp - base_timestamp,
                    key=record.key, value=record.value, headers=record.headers)
        else:
            for _, raw in kept:
                section += raw
        max_timestamp = (header.max_timestamp if log_append_time
                         else max(record.timestamp for record, _ in kept))
        data = pack_header(
            compress(header.compression, section),
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            records_count=len(kept),
        )
        return data, header.last_offset, max_timestamp

    def _keep(self, header: BatchHeader, batch: memoryview) -> None:
        """Copy a batch as it is."""
        self._emit(batch, header.last_offset, header.max_timestamp)

    def _emit(self, data: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        self._end_empty_run()
        self._append(data, last_offset, max_timestamp)

    def _add_to_empty_run(self, header: BatchHeader, *, new: bool) -> None:
        """``new``: the batch was not already a merged empty batch (so the
        copy differs from the original even if the run stays one batch)."""
        run = self._empty_run
        epoch = header.partition_leader_epoch
        if run is not None and run[2] == epoch and run[1] + 1 == header.base_offset:
            self._empty_run = (run[0], header.last_offset, epoch)
            self._changed = True
            return
        self._end_empty_run()
        self._empty_run = (header.base_offset, header.last_offset, epoch)
        self._changed = self._changed or new

    def _end_empty_run(self) -> None:
        run = self._empty_run
        if run is None:
            return
        self._empty_run = None
        base, last, epoch = run
        data = pack_header(
            b"", base_offset=base, partition_leader_epoch=epoch, attributes=0,
            last_offset_delta=last - base, base_timestamp=NO_TIMESTAMP,
            max_timestamp=NO_TIMESTAMP, producer_id=-1, producer_epoch=-1, base_sequence=-1,
            records_count=0)
        self._append(data, last, NO_TIMESTAMP)

    def _append(self, data: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        self._buffers.append(data)
        self._batches.append((last_offset, max_timestamp, len(data)))
        self._buffered += len(data)
        if self._buffered >= _WRITE_CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._buffers or self._out is None:
            return
        self._out.append(self._buffers, self._batches)
        self._buffers, self._batches, self._buffered = [], [], 0


def _empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch with no records: its offsets, epoch, timestamps and
    producer fields (the producer state a restart rebuilds from the log)."""
    return pack_header(
        b"",
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes & _TIMESTAMP_TYPE_BIT,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=0,
    )
