"""A durable, segmented log of Kafka record batches (Kafka's ``UnifiedLog`` +
``LocalLog``, minus compaction, transactions and tiered storage).

Directory layout (Kafka's)::

    00000000000000000000.log        record batches, offsets [0, 1200)
    00000000000000000000.index      sparse offset index
    00000000000000000000.timeindex  sparse time index
    00000000000000001200.log        the active segment (last)
    ...
    leader-epoch-checkpoint          epoch -> start offset
    log-start-offset-checkpoint      "0\\n<log start offset>\\n"
    cleaner-offset-checkpoint        "0\\n<first dirty offset>\\n" (compacted logs)
    .kafka_cleanshutdown             present only while the log is closed cleanly

Durability and crash consistency (the orderings matter, so they are listed):

- Appends write with ``os.write`` and do not sync unless the flush policy
  (``flush.messages``/``flush.ms``) says so; `Log.flush` makes everything
  appended so far durable with one ``fdatasync`` per dirty segment (group
  commit). `Log.flushed_offset` says how far that goes.
- A roll syncs the old segment and writes its index files *before* creating
  the new one, so every segment but the last is always fully synced and
  indexed. Recovery after a crash therefore rescans only the last segment
  (and any whose index files fail their sanity check).
- A new epoch is written to ``leader-epoch-checkpoint`` (fsynced) before the
  batches that carry it; recovery trims checkpoint entries beyond the log end,
  as Kafka's ``LogLoader`` does.
- Segment files are deleted from the end (truncation) or the start
  (retention), and the directory is fsynced before anything depends on it.
- Truncations are synced before they return (Kafka defers this; we keep the
  "truncated prefix is what survives" rule simple).
- The log cleaner (storage/cleaner.py) writes a segment's compacted copy to
  ``<base>.log.cleaned`` and syncs it; renaming it to ``<base>.log.swap``
  commits the swap; the old segment's files are deleted and the swap is
  renamed to ``<base>.log``. Opening the log deletes a ``.cleaned`` file
  and finishes a ``.swap`` (Kafka's ``LogLoader`` does the same).

Thread-safety: every method may be called from any thread. State changes
hold ``_lock``. `Log.flush` holds ``_flush_lock`` and syncs *outside*
``_lock``, so one thread (an event loop) can keep appending while a worker
thread runs the group-commit ``fdatasync``; the next flush picks up whatever
arrived meanwhile. Operations that close files (truncation, retention,
close) take ``_flush_lock`` first, so a sync never races a close.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading

from raftlog.clock import Clock
from raftlog.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    RecordError,
    parse_header,
    rewrite_base_offset_and_epoch,
    stamp_log_append_time,
    validate_batches,
)
from raftlog.records.batch import pack_header
from raftlog.storage.config import LogConfig
from raftlog.storage.epoch_cache import EpochEntry, LeaderEpochCache, LeaderEpochCheckpointFile
from raftlog.storage.errors import (
    CorruptCheckpointError,
    InvalidEpochError,
    InvalidRecordBatchError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from raftlog.storage.files import BytesLike, FileSystem, read_whole_file, write_file_atomically
from raftlog.storage.index import CorruptIndexError
from raftlog.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
)
from raftlog.values import value

LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

log = logging.getLogger(__name__)


@value
class LogAppendInfo:
    """What an append wrote (Kafka's ``LogAppendInfo``).

    For an empty follower append, ``first_offset`` is the log end offset and
    ``last_offset`` one less.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    records_count: int
    batch_count: int
    valid_bytes: int


@value
class FetchData:
    """Whole batches read from ``fetch_offset`` (the first batch may start below it)."""

    fetch_offset: int
    records: bytes
    log_start_offset: int
    log_end_offset: int


class Log:
    """One partition's log in one directory. Open it with `Log.open`.

    Offsets ``[log_start_offset, log_end_offset)`` are readable; offsets
    below `flushed_offset` are durable.
    """

    def __init__(self, fs: FileSystem, directory: str, config: LogConfig, clock: Clock) -> None:
        """Use `Log.open`; this only sets fields."""
        self._fs = fs
        self.directory = directory
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []  # base offsets of _segments, for bisect
        self._epoch_cache = LeaderEpochCache()
        self._epoch_file = LeaderEpochCheckpointFile(fs, directory)
        self._log_start_offset = 0
        self._flushed_offset = 0
        # Segments written since the last flush snapshot (by identity).
        self._dirty: dict[int, LogSegment] = {}
        self._unflushed_messages = 0
        self._last_flush_ms = clock.wall_ms()
        self._closed = False
        # Bumped by every truncation and every deletion of segments: a log
        # cleaner pass that began before one is not swapped in.
        self._generation = 0
        # The log cleaner's first dirty offset (Kafka's cleaner-offset-checkpoint).
        self._cleaner_checkpoint = 0
        self.opened_cleanly = False
        # Segments whose batches were CRC-scanned at open (0 after a clean shutdown).
        self.recovered_segment_count = 0

    # ==== opening ================================================================

    @classmethod
    def open(cls, directory: str, config: LogConfig, *, fs: FileSystem, clock: Clock) -> Log:
        """Open (or create) the log in ``directory``, recovering after a crash.

        After a clean shutdown only index files are read. Otherwise the last
        segment, and any segment with a missing or corrupt index, is rescanned;
        its tail is truncated at the first partial, corrupt or non-contiguous
        batch and its indexes are rebuilt. A corrupt segment before the last
        one truncates the log there (Kafka's recovery does the same).

        Raises `CorruptCheckpointError` if a checkpoint file cannot be parsed.
        """
        self = cls(fs, directory, config, clock)
        fs.make_dirs(directory)
        self.opened_cleanly = fs.exists(self._path(CLEAN_SHUTDOWN_FILE))
        bases = self._sweep_directory()
        self._log_start_offset = self._read_offset_file(LOG_START_OFFSET_FILE)
        self._cleaner_checkpoint = self._read_offset_file(CLEANER_CHECKPOINT_FILE)
        self._epoch_cache = LeaderEpochCache(self._epoch_file.read())
        now_ms = clock.wall_ms()
        if not bases:
            self._add_segment(
                LogSegment.create(fs, directory, self._log_start_offset, config, now_ms)
            )
        else:
            self._load_segments(bases, now_ms)
        self._finish_open(now_ms)
        return self

    def _sweep_directory(self) -> list[int]:
        """Remove temp files and orphan indexes, finish a log cleaner's
        committed swap; return segment base offsets."""
        names = self._fs.list_dir(self.directory)
        swaps = []
        for name in names:
            parsed = parse_segment_file_name(name)
            if parsed is not None and parsed[1] == CLEANED_SUFFIX:
                self._fs.remove(self._path(name), sync_dir=False)
            elif parsed is not None and parsed[1] == SWAP_SUFFIX:
                swaps.append(parsed[0])
        for base in swaps:
            self._finish_swap(base, names)
        if swaps:
            names = self._fs.list_dir(self.directory)
        bases = set()
        for name in names:
            parsed = parse_segment_file_name(name)
            if parsed is not None and parsed[1] == LOG_SUFFIX:
                bases.add(parsed[0])
        removed = False
        for name in names:
            parsed = parse_segment_file_name(name)
            orphan = (
                parsed is not None
                and parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                and parsed[0] not in bases
            )
            if name.endswith(".tmp") or orphan:
                self._fs.remove(self._path(name), sync_dir=False)
                removed = True
        if removed:
            self._fs.fsync_dir(self.directory)
        return sorted(bases)

    def _finish_swap(self, base: int, names: list[str]) -> None:
        """A crash left ``<base>.log.swap``: it was synced whole before it got
        that name, so it replaces the segment files it covers."""
        swap = LogSegment.open_existing(
            self._fs, self.directory, base, self.config, 0, log_suffix=SWAP_SUFFIX)
        try:
            swap.recover()
            end = swap.next_offset
        finally:
            swap.close()
        log.warning("finishing the log cleaner's swap of %d..%d", base, end)
        for name in names:
            parsed = parse_segment_file_name(name)
            if (parsed is not None and parsed[1] in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                    and base <= parsed[0] < max(end, base + 1)):
                self._fs.remove(self._path(name), sync_dir=False)
        self._fs.fsync_dir(self.directory)
        swap_path = swap.path(SWAP_SUFFIX)
        if end == base:  # pragma: no cover - the cleaner never writes an empty segment
            self._fs.remove(swap_path, sync_dir=True)
            return
        self._fs.rename(swap_path, swap.path(LOG_SUFFIX), sync_dir=True)

    def _load_segments(self, bases: list[int], now_ms: int) -> None:
        for i, base in enumerate(bases):
            segment = LogSegment.open_existing(self._fs, self.directory, base, self.config, now_ms)
            is_last = i == len(bases) - 1
            truncated = False
            if is_last and not self.opened_cleanly:
                truncated = self._recover(segment)
            else:
                try:
                    segment.load_indexes()
                except CorruptIndexError as e:
                    log.warning("rebuilding indexes of segment %d: %s", base, e)
                    truncated = self._recover(segment)
                    segment.write_indexes()
            self._add_segment(segment)
            next_base = None if is_last else bases[i + 1]
            if next_base is not None and (truncated or segment.next_offset != next_base):
                # Everything after a hole or a corrupt batch is unreachable.
                log.error(
                    "segment %d ends at %d, next starts at %d: dropping later segments",
                    base,
                    segment.next_offset,
                    next_base,
                )
                for later in bases[i + 1 :]:
                    doomed = LogSegment.open_existing(
                        self._fs, self.directory, later, self.config, now_ms
                    )
                    doomed.delete_files()
                self._fs.fsync_dir(self.directory)
                break

    def _recover(self, segment: LogSegment) -> bool:
        result = segment.recover(epochs_from_offset=self._log_start_offset)
        self.recovered_segment_count += 1
        if result.truncated_bytes:
            log.warning(
                "segment %d: truncated %d bytes of torn or corrupt tail at position %d",
                segment.base_offset,
                result.truncated_bytes,
                result.valid_bytes,
            )
        for epoch, start_offset in result.epoch_starts:
            if epoch > self._epoch_cache.latest_epoch:
                self._epoch_cache.assign(epoch, start_offset)
        return result.truncated_bytes > 0

    def _finish_open(self, now_ms: int) -> None:
        leo = self.log_end_offset
        if self._log_start_offset > leo:
            # Only reachable if synced data vanished; start empty at the start offset.
            log.error("log start offset %d is beyond the log end %d", self._log_start_offset, leo)
            self._replace_all_segments(self._log_start_offset, now_ms)
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        # Segments wholly below the start (a crash between checkpoint and delete).
        doomed = [s for s in self._segments[:-1] if s.next_offset <= self._log_start_offset]
        if doomed:
            self._delete_segments(doomed)
        # Drop epochs that start beyond the recovered end (their batches were
        # lost). An epoch starting exactly at the end stays: like a Kafka
        # leader's, the cache may name the epoch the next batch will carry.
        changed = self._epoch_cache.truncate_from_end(self.log_end_offset + 1)
        changed |= self._epoch_cache.truncate_from_start(self._log_start_offset)
        if changed:
            self._epoch_file.write(self._epoch_cache.entries)
        if self.opened_cleanly:
            self._fs.remove(self._path(CLEAN_SHUTDOWN_FILE), sync_dir=True)
        # After a SIGKILL the page cache may hold bytes never synced: sync them
        # so flushed_offset == log_end_offset is true, not hoped.
        self._segments[-1].log_file.sync()
        self._flushed_offset = self.log_end_offset

    # ==== properties ==============================================================

    @property
    def log_start_offset(self) -> int:
        """The first readable offset; moves up with retention and delete-records."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """LEO: one past the last offset appended."""
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is durable (synced to disk)."""
        return self._flushed_offset

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in the log, or -1 if none."""
        return self._epoch_cache.latest_epoch

    @property
    def latest_epoch_entry(self) -> EpochEntry | None:
        """The leader-epoch cache's newest entry, or None if it is empty."""
        return self._epoch_cache.latest_entry

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        """The leader-epoch cache's entries, oldest first."""
        return self._epoch_cache.entries

    @property
    def generation(self) -> int:
        """Bumped by every truncation and every deletion of segments: a copy
        of the log made before a change of it sees the number move."""
        return self._generation

    @property
    def active_segment(self) -> LogSegment:
        """The last segment, the only one appended to (treat as read-only)."""
        return self._segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """All segments, oldest first (treat as read-only)."""
        return tuple(self._segments)

    @property
    def size_in_bytes(self) -> int:
        """Total size of the ``.log`` files."""
        return sum(s.size for s in self._segments)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest epoch <= epoch, its end offset)`` (Kafka's rules).

        See `LeaderEpochCache.end_offset_for`.
        """
        with self._lock:
            return self._epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # ==== appends ===================================================================

    def append_as_leader(
        self, records: BytesLike, leader_epoch: int, now_ms: int | None = None,
        *, validated: list[BatchHeader] | None = None,
    ) -> LogAppendInfo:
        """Assign offsets from the log end offset to one or more whole batches and append.

        Each batch's baseOffset and partitionLeaderEpoch are rewritten (outside
        the CRC, so nothing is recompressed). A ``bytearray`` is rewritten in
        place and written with one ``write``; other buffers get fresh headers
        and are written with ``writev`` without copying the records.

        Raises `InvalidRecordBatchError` (not whole valid batches, bad CRC, an
        empty batch, lastOffsetDelta != recordsCount - 1), `RecordTooLargeError`,
        `InvalidEpochError` (``leader_epoch`` below the latest epoch),
        `LogClosedError`.

        ``validated``: the headers `validate_batches` returned for exactly
        these bytes, when the caller has checked them already (headers and
        CRCs are then not checked twice; the size limits still are).
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must not be negative: {leader_epoch}")
        headers = self._validate(records, validated)
        if not headers:
            raise InvalidRecordBatchError("a leader append needs at least one batch")
        with self._lock:
            self._check_open()
            now = self._clock.wall_ms() if now_ms is None else now_ms
            latest = self._epoch_cache.latest_epoch
            if leader_epoch < latest:
                raise InvalidEpochError(leader_epoch, latest)
            first_offset = offset = self.log_end_offset
            append_time = now if self.config.message_timestamp_type == "LogAppendTime" else None
            buffers, batches, records_count = self._assign_offsets(
                records, headers, offset, leader_epoch, append_time
            )
            last_offset = batches[-1][0]
            if leader_epoch > latest:
                # Durable before any batch of the epoch (KIP-101: the cache may
                # run ahead of the log, never behind).
                self._epoch_cache.assign(leader_epoch, first_offset)
                self._epoch_file.write(self._epoch_cache.entries)
            self._maybe_roll(len(records), len(headers), last_offset, now, batches)
            self._segments[-1].append(buffers, batches)
            self._after_append(records_count, now)
            return _append_info(first_offset, batches, records_count, len(records))

    @staticmethod
    def _assign_offsets(
        records: BytesLike, headers: list[BatchHeader], offset: int, epoch: int,
        append_time: int | None = None,
    ) -> tuple[list[BytesLike], list[tuple[int, int, int]], int]:
        """``append_time``: ``message.timestamp.type=LogAppendTime``, each
        batch is stamped with it (`stamp_log_append_time`)."""
        view = memoryview(records)
        in_place = isinstance(records, bytearray)
        buffers: list[BytesLike] = [records] if in_place else []
        batches: list[tuple[int, int, int]] = []
        records_count = 0
        position = 0
        for header in headers:
            count = header.records_count
            if count <= 0 or header.last_offset_delta != count - 1:
                raise InvalidRecordBatchError(
                    f"batch at {position}: recordsCount {count}, lastOffsetDelta "
                    f"{header.last_offset_delta}: a producer batch has deltas 0..count-1"
                )
            size = header.size_in_bytes
            if in_place:
                if append_time is not None:
                    stamp_log_append_time(view[position : position + size], append_time)
                rewrite_base_offset_and_epoch(view, position, offset, epoch)
            else:
                head = bytearray(view[position : position + BATCH_HEADER_SIZE])
                body = view[position + BATCH_HEADER_SIZE : position + size]
                if append_time is not None:
                    stamp_log_append_time(head, append_time, body)
                rewrite_base_offset_and_epoch(head, 0, offset, epoch)
                buffers.append(head)
                buffers.append(body)
            offset += count
            batches.append((offset - 1,
                            header.max_timestamp if append_time is None else append_time, size))
            records_count += count
            position += size
        return buffers, batches, records_count

    def append_as_follower(self, records: BytesLike, now_ms: int | None = None) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs (replication).

        The first batch must start at the log end offset and each next batch
        where the previous ended; epochs must not decrease nor fall below the
        log's latest epoch. New epochs go to the epoch cache. An empty buffer
        appends nothing. ``message.max.bytes`` is not checked: the leader did.

        One exception to "starts at the log end offset": an empty first
        batch that begins below it and ends at or above it. The log cleaner
        merges neighbouring emptied batches into one (`raftlog.storage.cleaner`),
        so a leader that compacted may hold ``[86..93]`` empty where this
        replica stopped at 92 (it lagged, or lost its unsynced tail); the part
        from the log end offset on is appended as an empty batch of the same
        epoch, ``[92..93]``, and the offsets below stay as they are here.

        Raises `UnexpectedAppendOffsetError` (gap or overlap),
        `InvalidEpochError`, `InvalidRecordBatchError`, `RecordTooLargeError`
        (the append exceeds ``segment.bytes``), `LogClosedError`.
        """
        records = self._trim_straddling_empty_batch(records)
        headers = self._validate(records, ignore_record_size=True)
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if not headers:
                return LogAppendInfo(leo, leo - 1, -1, -1, 0, 0, 0)
            now = self._clock.wall_ms() if now_ms is None else now_ms
            expected = leo
            epoch = self._epoch_cache.latest_epoch
            new_epochs: list[tuple[int, int]] = []
            batches: list[tuple[int, int, int]] = []
            records_count = 0
            for header in headers:
                if header.base_offset != expected or header.last_offset < header.base_offset:
                    raise UnexpectedAppendOffsetError(
                        f"follower batch [{header.base_offset}, {header.last_offset}] does not "
                        f"continue the log at {expected} (log end offset {leo})",
                        header.base_offset,
                        expected,
                    )
                if header.partition_leader_epoch < epoch:
                    raise InvalidEpochError(header.partition_leader_epoch, epoch)
                if header.partition_leader_epoch > epoch:
                    epoch = header.partition_leader_epoch
                    new_epochs.append((epoch, header.base_offset))
                expected = header.next_offset
                records_count += header.records_count
                batches.append((header.last_offset, header.max_timestamp, header.size_in_bytes))
            if new_epochs:
                for new_epoch, start in new_epochs:
                    self._epoch_cache.assign(new_epoch, start)
                self._epoch_file.write(self._epoch_cache.entries)
            self._maybe_roll(len(records), len(headers), expected - 1, now, batches)
            self._segments[-1].append([records], batches)
            self._after_append(records_count, now)
            return _append_info(leo, batches, records_count, len(records))

    def _trim_straddling_empty_batch(self, records: BytesLike) -> BytesLike:
        """`append_as_follower`'s exception: ``records`` with an empty first
        batch that straddles the log end offset cut to begin there."""
        if len(records) < BATCH_HEADER_SIZE:
            return records
        try:
            first = parse_header(records)
        except RecordError:
            return records  # _validate reports it
        leo = self.log_end_offset
        if (first.records_count != 0 or not first.base_offset < leo <= first.last_offset
                or first.size_in_bytes != BATCH_HEADER_SIZE or first.is_control
                or first.producer_id != -1):
            return records
        trimmed = pack_header(
            b"", base_offset=leo, partition_leader_epoch=first.partition_leader_epoch,
            attributes=0, last_offset_delta=first.last_offset - leo,
            base_timestamp=first.base_timestamp, max_timestamp=first.max_timestamp,
            producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=0)
        return trimmed + bytes(memoryview(records)[BATCH_HEADER_SIZE:])

    def _validate(
        self, records: BytesLike, validated: list[BatchHeader] | None = None,
        *, ignore_record_size: bool = False,
    ) -> list[BatchHeader]:
        """Headers and CRCs, the append against ``segment.bytes``, and each
        batch against ``message.max.bytes`` unless ``ignore_record_size``:
        a follower takes whatever its leader accepted (Kafka's
        ``ignoreRecordSize`` for replication), or a lowered limit, or one that
        differs between brokers, would wedge replication at the first larger
        batch."""
        if validated is not None:
            headers = validated
        else:
            try:
                headers = validate_batches(records)
            except RecordError as e:
                raise InvalidRecordBatchError(str(e)) from e
        for header in headers:
            if not ignore_record_size and header.size_in_bytes > self.config.message_max_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size_in_bytes} bytes exceeds message.max.bytes "
                    f"{self.config.message_max_bytes}"
                )
        if len(records) > self.config.segment_bytes:
            raise RecordTooLargeError(
                f"append of {len(records)} bytes exceeds segment.bytes {self.config.segment_bytes}"
            )
        return headers

    def _after_append(self, records_count: int, now_ms: int) -> None:
        active = self._segments[-1]
        self._dirty[id(active)] = active
        self._unflushed_messages += records_count
        if (
            self._unflushed_messages >= self.config.flush_messages
            or now_ms - self._last_flush_ms > self.config.flush_ms
        ):
            self._flush_holding_lock(now_ms)

    def _flush_holding_lock(self, now_ms: int) -> None:
        # Called from an append, which holds _lock but not _flush_lock; no file
        # can be closed meanwhile because closing needs _lock too.
        for segment in self._dirty.values():
            segment.log_file.sync()
        self._dirty.clear()
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._flushed_offset = self.log_end_offset

    # ==== configuration =============================================================

    def reconfigure(self, config: LogConfig) -> None:
        """Apply a changed topic config (IncrementalAlterConfigs) to the open
        log, as Kafka's ``UnifiedLog.updateConfig``: rolling, retention,
        flushing and size limits follow it from the next operation on."""
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.reconfigure(config)

    # ==== rolling ===================================================================

    def _maybe_roll(
        self, appended_bytes: int, batch_count: int, last_offset: int, now_ms: int,
        batches: list[tuple[int, int, int]],
    ) -> None:
        """Roll before an append of ``batches`` ((last offset, max timestamp,
        size) each) if the active segment cannot hold it, or if it spans more
        than ``segment.ms`` of message time (Kafka's ``shouldRoll``)."""
        active = self._segments[-1]
        if active.size == 0:
            return
        if not active.can_hold(appended_bytes, batch_count, last_offset):
            self._roll(now_ms)
            return
        max_timestamp = max(batch[1] for batch in batches)
        if active.time_waited_for_roll_ms(now_ms, max_timestamp) > self.config.segment_ms:
            self._roll(now_ms)

    def roll(self, now_ms: int | None = None) -> bool:
        """Start a new active segment at the log end offset; returns False (and
        does nothing) if the active segment is empty."""
        with self._lock:
            self._check_open()
            if self._segments[-1].size == 0:
                return False
            self._roll(self._clock.wall_ms() if now_ms is None else now_ms)
            return True

    def _roll(self, now_ms: int) -> None:
        old = self._segments[-1]
        # Ordering: the old segment is synced and indexed before the new file
        # exists, so recovery only ever needs to rescan the last segment.
        old.log_file.sync()
        old.write_indexes()
        self._dirty.pop(id(old), None)
        self._add_segment(
            LogSegment.create(self._fs, self.directory, old.next_offset, self.config, now_ms)
        )
        self._flushed_offset = max(self._flushed_offset, old.next_offset)

    def _add_segment(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    # ==== flushing ==================================================================

    def flush(self) -> int:
        """Make everything appended so far durable; returns the new `flushed_offset`.

        One ``fdatasync`` per segment written since the last flush, however
        many appends that covers (group commit). Safe to call from a worker
        thread while other threads append: the sync runs without blocking them.
        Raises `LogClosedError`; an ``OSError`` from fdatasync propagates and
        the log must be treated as failed (the page cache state is unknown).
        """
        with self._flush_lock:
            with self._lock:
                self._check_open()
                target = self.log_end_offset
                dirty = list(self._dirty.values())
                self._dirty.clear()
                self._unflushed_messages = 0
                self._last_flush_ms = self._clock.wall_ms()
            for segment in dirty:
                segment.log_file.sync()
            with self._lock:
                self._flushed_offset = max(self._flushed_offset, min(target, self.log_end_offset))
                return self._flushed_offset

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """The ``flush.ms`` timer (Kafka's log flusher): flush if unflushed data
        has waited longer than ``flush.ms``; returns whether it flushed."""
        with self._lock:
            now = self._clock.wall_ms() if now_ms is None else now_ms
            due = bool(self._dirty) and now - self._last_flush_ms > self.config.flush_ms
        if due:
            self.flush()
        return due

    # ==== reading ===================================================================

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchData:
        """Whole batches from the one holding ``offset``, about ``max_bytes`` of them.

        Always returns at least one batch when ``offset`` < log end offset, even
        if it is bigger than ``max_bytes`` (Kafka's rule, so consumers make
        progress), unless ``max_offset`` excludes it: batches whose last offset
        is >= ``max_offset`` (e.g. the high watermark) are not returned. Reads
        stop at a segment boundary. ``offset`` == log end offset gives no bytes.

        Raises `OffsetOutOfRangeError` if ``offset`` < log start offset or >
        log end offset; `LogClosedError`.
        """
        with self._lock:
            segment, leo = self._segment_for_read(offset)
            data = segment.read(offset, max_bytes, max_offset)
            return FetchData(offset, data, self._log_start_offset, leo)

    def readable_bytes(self, offset: int, max_bytes: int, max_offset: int | None = None) -> int:
        """``len(read(offset, max_bytes, max_offset).records)``: usually without
        reading (a long-polling fetch asks on every append). Raises as `read`."""
        with self._lock:
            segment, _ = self._segment_for_read(offset)
            return segment.readable_bytes(offset, max_bytes, max_offset)

    def _segment_for_read(self, offset: int) -> tuple[LogSegment, int]:
        """The segment holding ``offset`` and the log end offset (caller holds the lock)."""
        self._check_open()
        leo = self.log_end_offset
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, leo)
        return self._segments[bisect.bisect_right(self._bases, offset) - 1], leo

    # ==== truncation and retention ==================================================

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset >= ``offset`` (follower divergence).

        Truncation is per batch: a batch straddling ``offset`` is removed
        whole, so the log end offset may end up below ``offset``. An
        ``offset`` below the first segment truncates fully and restarts the
        log there. The epoch cache loses entries starting at or after the new
        end. Durable on return. Returns whether any batch was removed.

        An ``offset`` at or past the log end removes no batch but still drops
        epoch-cache entries that start at the log end, as Kafka's
        ``UnifiedLog.truncateTo`` does: a leader checkpoints its epoch before
        its first batch, and if it crashed or lost leadership before that
        batch was written, the stale entry would make every later follower
        append of older-epoch batches fail.
        Raises `ValueError` for a negative offset, `LogClosedError`.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                if self._epoch_cache.truncate_from_end(self.log_end_offset):
                    self._epoch_file.write(self._epoch_cache.entries)
                return False
            if offset < self._bases[0]:
                self._truncate_fully_and_start_at(offset)
                return True
            self._generation += 1
            # Later segments go first (and durably), so a crash leaves a prefix.
            doomed = [s for s in self._segments if s.base_offset > offset]
            if doomed:
                self._delete_segments(doomed, from_end=True)
            self._segments[-1].truncate_to(offset)
            leo = self.log_end_offset
            if self._epoch_cache.truncate_from_end(leo):
                self._epoch_file.write(self._epoch_cache.entries)
            if self._log_start_offset > leo:
                self._write_log_start_offset(leo)
            if self._cleaner_checkpoint > leo:
                self._write_cleaner_checkpoint(leo)
            # Segments before the last were synced when rolled; the last was
            # just synced by its truncation: everything left is durable.
            self._flushed_offset = leo
            self._dirty.clear()
            self._unflushed_messages = 0
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``offset`` (both
        the log start and end offset); clears the epoch cache. Durable on return.
        Raises `ValueError` for a negative offset, `LogClosedError`."""
        if offset < 0:
            raise ValueError(f"cannot start a log at a negative offset {offset}")
        with self._flush_lock, self._lock:
            self._check_open()
            self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._replace_all_segments(offset, self._clock.wall_ms())
        if self._epoch_cache.clear():
            self._epoch_file.write([])
        self._write_log_start_offset(offset)
        if self._cleaner_checkpoint != offset:
            self._write_cleaner_checkpoint(offset)
        self._flushed_offset = offset

    def _replace_all_segments(self, offset: int, now_ms: int) -> None:
        self._generation += 1
        for segment in reversed(self._segments):
            segment.delete_files()
        self._segments.clear()
        self._bases.clear()
        self._dirty.clear()
        self._fs.fsync_dir(self.directory)
        self._add_segment(LogSegment.create(self._fs, self.directory, offset, self.config, now_ms))

    def delete_records_before(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords /
        ``maybeIncrementLogStartOffset``) and delete the segments wholly below it.

        Data up to ``offset`` is flushed first so the persisted start never
        passes the durable end. Returns whether the start moved. Raises
        `OffsetOutOfRangeError` if ``offset`` > log end offset, `LogClosedError`.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            leo = self.log_end_offset
            if offset > leo:
                raise OffsetOutOfRangeError(offset, self._log_start_offset, leo)
            if offset <= self._log_start_offset:
                return False
            self._generation += 1
            now = self._clock.wall_ms()
            if offset > self._flushed_offset:
                self._flush_holding_lock(now)
            self._write_log_start_offset(offset)
            if self._epoch_cache.truncate_from_start(offset):
                self._epoch_file.write(self._epoch_cache.entries)
            if offset == leo and self._segments[-1].size:
                self._roll(now)  # so every old segment can go, as Kafka does
            doomed = [s for s in self._segments[:-1] if s.next_offset <= offset]
            if doomed:
                self._delete_segments(doomed)
            return True

    def apply_retention(self, now_ms: int | None = None, high_watermark: int | None = None) -> int:
        """Delete old segments by ``retention.ms``, then by ``retention.bytes``.

        Whole segments only, oldest first, never the active segment, and (if
        given) only segments wholly below ``high_watermark`` (Kafka's
        ``deletableSegments`` upper bound). A segment is expired when its
        *largest* timestamp is more than ``retention.ms`` old, so old records
        outlive the retention time until their whole segment ages out. A
        segment with no timestamps is never expired by time. The log start
        offset moves to the first remaining segment. Returns how many
        segments were deleted. Raises `LogClosedError`.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            now = self._clock.wall_ms() if now_ms is None else now_ms
            candidates = self._segments[:-1]
            if high_watermark is not None:
                candidates = [s for s in candidates if s.next_offset <= high_watermark]
            count = 0
            if self.config.retention_ms >= 0:
                for segment in candidates:
                    if (
                        segment.max_timestamp < 0
                        or now - segment.max_timestamp <= self.config.retention_ms
                    ):
                        break
                    count += 1
            if self.config.retention_bytes >= 0:
                excess = self.size_in_bytes - self.config.retention_bytes
                excess -= sum(s.size for s in candidates[:count])
                while count < len(candidates) and excess - candidates[count].size >= 0:
                    excess -= candidates[count].size
                    count += 1
            if count == 0:
                return 0
            doomed = candidates[:count]
            new_start = max(self._log_start_offset, doomed[-1].next_offset)
            if new_start != self._log_start_offset:
                self._write_log_start_offset(new_start)
            if self._epoch_cache.truncate_from_start(new_start):
                self._epoch_file.write(self._epoch_cache.entries)
            self._delete_segments(doomed)
            return count

    def _delete_segments(self, doomed: list[LogSegment], *, from_end: bool = False) -> None:
        self._generation += 1
        ordered = list(reversed(doomed)) if from_end else doomed
        for segment in ordered:
            self._dirty.pop(id(segment), None)
            segment.delete_files()
        gone = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in gone]
        self._bases = [s.base_offset for s in self._segments]
        self._fs.fsync_dir(self.directory)

    # ==== compaction (storage/cleaner.py drives these) ==============================

    @property
    def first_dirty_offset(self) -> int:
        """Where the log cleaner's next pass begins: the batches below it were
        compacted against every key written before it (Kafka's cleaner
        checkpoint), never below the log start."""
        return max(self._cleaner_checkpoint, self._log_start_offset)

    def cleanable_segments(self, upper_bound: int) -> tuple[list[LogSegment], int]:
        """The segments a cleaner may compact: every one but the active
        segment that ends at or below ``upper_bound`` (the caller's bound:
        high watermark, last stable offset, compaction lag), oldest first,
        and the generation to hand back to `replace_with_cleaned`. Raises
        `LogClosedError`."""
        with self._lock:
            self._check_open()
            cleanable = []
            for segment in self._segments[:-1]:
                if segment.next_offset > upper_bound:
                    break
                cleanable.append(segment)
            return cleanable, self._generation

    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new, empty segment at ``<base_offset>.log.cleaned`` for the
        cleaner to append a compacted copy to."""
        return LogSegment.create(
            self._fs, self.directory, base_offset, self.config, self._clock.wall_ms(),
            log_suffix=CLEANED_SUFFIX,
        )

    def discard_cleaned_segment(self, segment: LogSegment) -> None:
        """Close and delete a cleaned segment that will not be swapped in."""
        segment.close()
        path = segment.path(CLEANED_SUFFIX)
        if self._fs.exists(path):
            self._fs.remove(path, sync_dir=False)

    def replace_with_cleaned(
        self, old: list[LogSegment], new: LogSegment, generation: int
    ) -> bool:
        """Swap ``new`` (from `create_cleaned_segment`, synced, holding the
        same offset range) in for the neighbouring segments ``old``. Returns
        False, changing nothing, if the log was truncated or lost segments
        since `cleanable_segments` returned ``generation``, or ``old`` are
        no longer neighbours before the active segment; the caller then
        discards ``new``. Raises `LogClosedError`, and `ValueError` for a
        segment that does not cover ``old``'s range.

        Crash-safe: the rename to ``.log.swap`` is the commit point (see the
        module docstring)."""
        if not old or new.base_offset != old[0].base_offset or new.next_offset != old[-1].next_offset:
            raise ValueError(
                f"cleaned segment {new.base_offset}..{new.next_offset} does not cover "
                f"the segments it replaces"
            )
        with self._flush_lock, self._lock:
            self._check_open()
            if generation != self._generation:
                return False
            position = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
            end = None if position is None else position + len(old)
            if (position is None or end is None or end >= len(self._segments)
                    or any(a is not b for a, b in zip(self._segments[position:end], old, strict=True))):
                return False
            self._fs.rename(new.path(CLEANED_SUFFIX), new.path(SWAP_SUFFIX), sync_dir=True)
            for segment in old:
                self._dirty.pop(id(segment), None)
                segment.delete_files()
            self._fs.fsync_dir(self.directory)
            self._fs.rename(new.path(SWAP_SUFFIX), new.path(LOG_SUFFIX), sync_dir=True)
            # Reopen under the final name (a test file system's synced-size
            # marker follows the name), then persist the rebuilt indexes.
            handle = self._fs.open(new.path(LOG_SUFFIX))
            new.log_file.close()
            new.log_file = handle
            handle.sync()
            new.write_indexes()
            self._segments[position:end] = [new]
            self._bases = [s.base_offset for s in self._segments]
            return True

    def set_first_dirty_offset(self, offset: int) -> None:
        """Record that everything below ``offset`` has been compacted
        (``cleaner-offset-checkpoint``, written atomically)."""
        with self._lock:
            self._check_open()
            if offset != self._cleaner_checkpoint:
                self._write_cleaner_checkpoint(min(offset, self.log_end_offset))

    # ==== closing ==================================================================

    def close(self, *, clean: bool = True) -> None:
        """Flush, write the active segment's indexes and the clean-shutdown
        marker, and release every file. Idempotent; later calls to other
        methods raise `LogClosedError`.

        ``clean=False`` only releases the files: for a log whose directory
        failed (Kafka's ``closeHandlers``), where nothing more is written and
        the next open recovers the log as after a crash."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            if not clean:
                for segment in self._segments:
                    segment.close()
                self._closed = True
                return
            for segment in self._dirty.values():
                segment.log_file.sync()
            self._dirty.clear()
            self._flushed_offset = self.log_end_offset
            self._segments[-1].write_indexes()
            marker = self._fs.open(self._path(CLEAN_SHUTDOWN_FILE), create=True, sync_dir=True)
            marker.sync()
            marker.close()
            for segment in self._segments:
                segment.close()
            self._closed = True

    # ==== helpers ==================================================================

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _read_offset_file(self, name: str) -> int:
        path = self._path(name)
        if not self._fs.exists(path):
            return 0
        data = read_whole_file(self._fs, path)
        try:
            version, offset = data.decode("ascii").split()
            if int(version) != 0 or int(offset) < 0:
                raise ValueError(f"version {version}, offset {offset}")
            return int(offset)
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptCheckpointError(f"{path}: {e}") from e

    def _write_cleaner_checkpoint(self, offset: int) -> None:
        write_file_atomically(
            self._fs, self._path(CLEANER_CHECKPOINT_FILE), f"0\n{offset}\n".encode()
        )
        self._cleaner_checkpoint = offset

    def _write_log_start_offset(self, offset: int) -> None:
        write_file_atomically(
            self._fs, self._path(LOG_START_OFFSET_FILE), f"0\n{offset}\n".encode()
        )
        self._log_start_offset = offset


def _append_info(
    first_offset: int, batches: list[tuple[int, int, int]], records_count: int, valid_bytes: int
) -> LogAppendInfo:
    max_timestamp, offset_of_max = -1, -1
    for last_offset, timestamp, _ in batches:
        if timestamp > max_timestamp:
            max_timestamp, offset_of_max = timestamp, last_offset
    return LogAppendInfo(
        first_offset,
        batches[-1][0],
        max_timestamp,
        offset_of_max,
        records_count,
        len(batches),
        valid_bytes,
    )
