"""One log segment: a ``.log`` file of record batches plus its two indexes.

A segment holds the batches with offsets ``[base_offset, next_offset)``. Its
files are named by the 20-digit base offset, as in Kafka:
``00000000000000000000.log``, ``.index``, ``.timeindex``.

Index files are written whole and atomically (temp, fsync, rename) when the
segment is rolled, when the log closes cleanly, and after a rebuild; in
between the in-memory indexes run ahead of the files. That is safe because
the log only trusts index files of segments that are not the last one, or
after a clean shutdown, and both cases write them first (storage/log.py).

The index rule matches Kafka's ``LogSegment.append``: before a batch, if more
than ``index.interval.bytes`` were written since the last entry, index the
batch (its last offset, its position) and offer the time index the largest
timestamp so far. Every index built here, whether on append, on recovery or
after a truncation, equals the one a full scan would build.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from raftlog.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    RecordError,
    iter_batches,
    parse_header,
    validate_batch,
)
from raftlog.storage.config import INT_MAX, LogConfig
from raftlog.storage.files import BytesLike, FileHandle, FileSystem, write_file_atomically
from raftlog.storage.index import (
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
#: A log cleaner's segment while it is written, then once the swap is committed.
CLEANED_SUFFIX = ".log.cleaned"
SWAP_SUFFIX = ".log.swap"
NO_TIMESTAMP = -1
# Recovery reads this much at a time and validates every batch in it.
_RECOVERY_CHUNK_BYTES = 1 << 20
# How many of the newest batches a segment remembers the place of (`LogSegment._recent`).
_RECENT_BATCHES = 64


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 zero-padded digits plus suffix."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``(base_offset, suffix)`` for a segment file name, else None."""
    stem, dot, suffix = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + suffix


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What `LogSegment.recover` found."""

    valid_bytes: int
    truncated_bytes: int
    # (epoch, first offset) wherever the partition leader epoch rises.
    epoch_starts: list[tuple[int, int]]


class LogSegment:
    """A segment's files and in-memory indexes. The owning `Log` serialises calls.

    ``next_offset`` is one past the last offset stored; ``max_timestamp`` the
    largest batch maxTimestamp (``NO_TIMESTAMP`` when empty), which retention
    judges the segment by.
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        base_offset: int,
        config: LogConfig,
        log_file: FileHandle,
        created_ms: int,
    ) -> None:
        self._fs = fs
        self._directory = directory
        self.base_offset = base_offset
        self._config = config
        self.log_file = log_file
        self.offset_index = OffsetIndex(
            base_offset, config.segment_index_bytes // OFFSET_ENTRY_SIZE
        )
        self.time_index = TimeIndex(base_offset, config.segment_index_bytes // TIME_ENTRY_SIZE)
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        # Kafka's rollingBasedTimestamp: the first batch's max timestamp.
        self.rolling_based_timestamp: int | None = None
        self.created_ms = created_ms
        # The newest batches appended since the segment was opened, oldest
        # first: base offset -> (position, size, last offset). Followers and
        # tailing consumers read from one of these, and `read` then finds the
        # batch without scanning headers from the sparse index entry (a pread
        # per batch). Batches in a segment are contiguous, so every batch
        # after a remembered one is remembered too. Cleared by truncation.
        self._recent: dict[int, tuple[int, int, int]] = {}

    # --- construction ---------------------------------------------------------

    @classmethod
    def create(
        cls, fs: FileSystem, directory: str, base_offset: int, config: LogConfig, now_ms: int,
        *, log_suffix: str = LOG_SUFFIX,
    ) -> LogSegment:
        """Create a new, empty segment (the ``.log`` file and a durable dir entry).

        A stale file of the same name (left by a crash) is emptied.
        ``log_suffix``: the log cleaner writes a segment under another name
        (``.log.cleaned``) and renames it into place; `path` and the index
        files always use the final names.
        """
        path = os.path.join(directory, segment_file_name(base_offset, log_suffix))
        handle = fs.open(path, create=True, sync_dir=True)
        if handle.size:
            handle.truncate(0)
            handle.sync()
        return cls(fs, directory, base_offset, config, handle, now_ms)

    @classmethod
    def open_existing(
        cls, fs: FileSystem, directory: str, base_offset: int, config: LogConfig, now_ms: int,
        *, log_suffix: str = LOG_SUFFIX,
    ) -> LogSegment:
        """Open an existing ``.log`` (or, with ``log_suffix``, a cleaner's
        file); call `load_indexes` or `recover` next."""
        path = os.path.join(directory, segment_file_name(base_offset, log_suffix))
        return cls(fs, directory, base_offset, config, fs.open(path), now_ms)

    def path(self, suffix: str) -> str:
        """The path of this segment's file with ``suffix`` (".log", ".index", ...)."""
        return os.path.join(self._directory, segment_file_name(self.base_offset, suffix))

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self.log_file.size

    # --- append -----------------------------------------------------------------

    def append(self, buffers: Sequence[BytesLike], batches: Sequence[tuple[int, int, int]]) -> None:
        """Write batches at the end: ``buffers`` are their bytes (one writev), and
        ``batches`` gives each batch's ``(last_offset, max_timestamp, size)``.

        The caller has checked that they continue this segment (offsets and room).
        """
        position = self.log_file.size
        if len(buffers) == 1:
            self.log_file.append(buffers[0])
        else:
            self.log_file.append_many(buffers)
        recent = self._recent
        for last_offset, max_timestamp, size in batches:
            recent[self.next_offset] = (position, size, last_offset)
            self._index_batch(last_offset, max_timestamp, size, position)
            position += size
        if len(recent) > 2 * _RECENT_BATCHES:
            for base in list(recent)[: len(recent) - _RECENT_BATCHES]:
                del recent[base]

    def _index_batch(self, last_offset: int, max_timestamp: int, size: int, position: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_timestamp
        if self.bytes_since_last_index_entry > self._config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1

    def reconfigure(self, config: LogConfig) -> None:
        """Use ``config`` from now on: ``segment.bytes`` for the roll decision
        and ``index.interval.bytes`` for the next index entries. The index
        files keep the size they were created with (``segment.index.bytes``
        applies to new segments, as in Kafka)."""
        self._config = config

    def can_hold(self, appended_bytes: int, batch_count: int, last_offset: int) -> bool:
        """Whether an append fits without rolling: size, index room, int32 relative offsets."""
        return (
            self.size <= self._config.segment_bytes - appended_bytes
            and len(self.offset_index) + batch_count <= self.offset_index.max_entries
            and len(self.time_index) + batch_count <= self.time_index.max_entries
            and last_offset - self.base_offset <= INT_MAX
        )

    def time_waited_for_roll_ms(self, now_ms: int, message_timestamp_ms: int) -> int:
        """Kafka's ``timeWaitedForRoll``: the incoming batches' max timestamp
        minus the first batch's timestamp; if the first batch has none, now
        minus the segment's creation time.

        Message time, not the broker's clock, against the first batch: records
        with old timestamps (a backfill, a mirror of an old topic) do not roll
        a segment per append."""
        start = self.rolling_based_timestamp
        if start is None or start < 0:
            return now_ms - self.created_ms
        return message_timestamp_ms - start

    # --- read ---------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        """Whole batches from the one holding ``offset``: at least that batch
        (if it exists and ends below ``max_offset``), then more while the total
        stays within ``max_bytes``. Empty if ``offset`` >= `next_offset`.
        """
        if offset >= self.next_offset:
            return b""
        end = self.log_file.size
        position, size, last_offset = self._locate(offset, end)
        if max_offset is not None and last_offset >= max_offset:
            return b""
        data = self.log_file.read_at(position, min(max(max_bytes, size), end - position))
        # Cut at the last whole batch (and below max_offset); the first always stays.
        cut = size
        while cut + BATCH_HEADER_SIZE <= len(data):
            following = parse_header(data, cut)
            if cut + following.size_in_bytes > len(data):
                break
            if max_offset is not None and following.last_offset >= max_offset:
                break
            cut += following.size_in_bytes
        return data if cut == len(data) else data[:cut]

    def readable_bytes(self, offset: int, max_bytes: int, max_offset: int | None) -> int:
        """``len(read(offset, max_bytes, max_offset))``, without reading when
        ``offset`` starts a remembered batch (a long-polling fetch asks this
        on every append)."""
        if offset >= self.next_offset:
            return 0
        recent = self._recent
        entry = recent.get(offset)
        if entry is None:
            return len(self.read(offset, max_bytes, max_offset))
        limit = max(max_bytes, entry[1])
        total = 0
        while entry is not None:
            _, size, last_offset = entry
            if (max_offset is not None and last_offset >= max_offset) or total + size > limit:
                return total
            total += size
            entry = recent.get(last_offset + 1)
        if last_offset + 1 != self.next_offset:  # pragma: no cover - contiguous by construction
            return len(self.read(offset, max_bytes, max_offset))
        return total

    def _locate(self, offset: int, end: int) -> tuple[int, int, int]:
        """(position, size, last offset) of the batch holding ``offset`` (< `next_offset`)."""
        entry = self._recent.get(offset)
        if entry is not None:
            return entry
        position = self.offset_index.lookup(offset)
        while True:
            header = self._header_at(position)
            if header.last_offset >= offset:
                return position, header.size_in_bytes, header.last_offset
            position += header.size_in_bytes
            if position >= end:  # pragma: no cover - next_offset says the batch exists
                raise AssertionError(f"offset {offset} not found in segment {self.base_offset}")

    def _header_at(self, position: int) -> BatchHeader:
        return parse_header(self.log_file.read_at(position, BATCH_HEADER_SIZE))

    def iter_headers(self, start: int = 0) -> Iterator[tuple[BatchHeader, int]]:
        """``(header, position)`` of each batch from ``start`` (no CRC check)."""
        position, end = start, self.log_file.size
        while position < end:
            header = self._header_at(position)
            yield header, position
            position += header.size_in_bytes

    # --- truncation -------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset``; return bytes removed.

        Truncation is at batch granularity: a batch straddling ``offset`` goes
        whole, so `next_offset` may end below ``offset``. The result is synced.
        """
        if offset >= self.next_offset:
            return 0
        position = self.offset_index.lookup(offset) if offset > self.base_offset else 0
        for header, pos in self.iter_headers(position):
            if header.last_offset >= offset:
                position = pos
                break
        removed = self.log_file.size - position
        self.log_file.truncate(position)
        self.log_file.sync()
        # Rebuild rather than trim: a time-index entry added at a dropped index
        # point may name a kept offset, and a scan would not produce it.
        self._reset()
        for header, pos in self.iter_headers(0):
            self._index_batch(header.last_offset, header.max_timestamp, header.size_in_bytes, pos)
        return removed

    # --- loading and recovery ---------------------------------------------------

    def load_indexes(self) -> None:
        """Trust the index files (clean shutdown, or a non-last segment) and
        find `next_offset` and `max_timestamp` by walking the few batches after
        the last index entry (Kafka's ``readNextOffset``).

        Raises `CorruptIndexError` if a file is missing or fails a check; the
        caller then calls `recover`.
        """
        try:
            index_data = self._read_file(INDEX_SUFFIX)
            time_data = self._read_file(TIME_INDEX_SUFFIX)
        except FileNotFoundError as e:
            raise CorruptIndexError(f"missing index file: {e}") from e
        size = self.log_file.size
        self.offset_index = OffsetIndex.decode(
            index_data, self.base_offset, self.offset_index.max_entries, size
        )
        self.time_index = TimeIndex.decode(
            time_data, self.base_offset, self.time_index.max_entries, None
        )
        try:
            self._replay_tail()
        except RecordError as e:
            raise CorruptIndexError(f"segment {self.base_offset}: {e}") from e
        last_time = self.time_index.last_entry()
        if last_time is not None and last_time[1] >= self.next_offset:
            raise CorruptIndexError(f"time index entry {last_time} beyond the segment")
        first = next(self.iter_headers(), None)
        self.rolling_based_timestamp = first[0].max_timestamp if first else None

    def _replay_tail(self) -> None:
        """Recompute next_offset, max timestamp and bytes since the last index
        entry from the in-memory indexes plus a header walk after the last
        offset-index entry. Raises `CorruptIndexError` if the walk shows an
        entry is missing or wrong."""
        entries = self.offset_index.entries()
        last_time = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = last_time or (NO_TIMESTAMP, -1)
        start = entries[-1][1] if entries else 0
        self.next_offset = self.base_offset
        self.bytes_since_last_index_entry = 0
        for header, position in self.iter_headers(start):
            if entries and position == start:
                if header.last_offset != entries[-1][0]:
                    raise CorruptIndexError(
                        f"index entry {entries[-1]} is not a batch's last offset"
                    )
            elif self.bytes_since_last_index_entry > self._config.index_interval_bytes:
                raise CorruptIndexError(f"index lacks an entry for the batch at {position}")
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.bytes_since_last_index_entry += header.size_in_bytes
            self.next_offset = header.next_offset
        if start and self.next_offset == self.base_offset:  # pragma: no cover - defensive
            raise CorruptIndexError("index points past the end of the segment")

    def _reset(self) -> None:
        self._recent.clear()
        self.offset_index = OffsetIndex(self.base_offset, self.offset_index.max_entries)
        self.time_index = TimeIndex(self.base_offset, self.time_index.max_entries)
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp = None

    def recover(self, epochs_from_offset: int = 0) -> RecoveryResult:
        """Rescan the ``.log`` validating every batch's CRC and that offsets run
        on; truncate at the first bad or partial batch; rebuild both indexes
        (in memory; `write_indexes` persists them). The truncation is synced.

        ``epoch_starts`` lists where the partition leader epoch rises among
        batches ending at or after ``epochs_from_offset`` (the log start).
        """
        self._reset()
        epoch_starts: list[tuple[int, int]] = []
        size = self.log_file.size
        position = 0
        while position < size:
            consumed = self._recover_chunk(position, size, epoch_starts, epochs_from_offset)
            if consumed == 0:
                break
            position += consumed
        truncated = size - position
        if truncated:
            self.log_file.truncate(position)
            self.log_file.sync()
        return RecoveryResult(position, truncated, epoch_starts)

    def _recover_chunk(
        self, position: int, size: int, epoch_starts: list[tuple[int, int]], epochs_from: int
    ) -> int:
        """Validate and index the whole batches in one chunk; return bytes consumed
        (0 at a torn or corrupt batch)."""
        chunk = self.log_file.read_at(position, min(_RECOVERY_CHUNK_BYTES, size - position))
        consumed = 0
        try:
            for header, pos in iter_batches(chunk):
                if not self._continues(header):
                    return consumed
                self._recovered(header, position + pos, epoch_starts, epochs_from)
                consumed = pos + header.size_in_bytes
        except CorruptRecordError:
            return consumed
        if consumed == 0 and len(chunk) >= BATCH_HEADER_SIZE:
            # One batch bigger than a chunk: read it whole.
            try:
                header = parse_header(chunk)
                if position + header.size_in_bytes > size:
                    return 0
                header = validate_batch(self.log_file.read_at(position, header.size_in_bytes))
            except CorruptRecordError:
                return 0
            if not self._continues(header):
                return 0
            self._recovered(header, position, epoch_starts, epochs_from)
            consumed = header.size_in_bytes
        return consumed

    def _continues(self, header: BatchHeader) -> bool:
        # Our logs are contiguous, compacted ones too (the cleaner keeps each
        # batch's offset range, storage/cleaner.py): a batch must start where
        # the previous one ended, else it is garbage that happens to have a
        # good CRC.
        return (
            header.base_offset == self.next_offset
            and header.last_offset >= header.base_offset
            and header.last_offset - self.base_offset <= INT_MAX
        )

    def _recovered(
        self,
        header: BatchHeader,
        position: int,
        epoch_starts: list[tuple[int, int]],
        epochs_from: int,
    ) -> None:
        epoch = header.partition_leader_epoch
        wanted = epoch >= 0 and header.last_offset >= epochs_from
        if wanted and (not epoch_starts or epoch > epoch_starts[-1][0]):
            epoch_starts.append((epoch, header.base_offset))
        self._index_batch(header.last_offset, header.max_timestamp, header.size_in_bytes, position)

    # --- files ----------------------------------------------------------------

    def write_indexes(self) -> None:
        """Persist both indexes atomically (temp file, fsync, rename, dir fsync)."""
        write_file_atomically(self._fs, self.path(INDEX_SUFFIX), self.offset_index.encode())
        write_file_atomically(self._fs, self.path(TIME_INDEX_SUFFIX), self.time_index.encode())

    def _read_file(self, suffix: str) -> bytes:
        handle = self._fs.open(self.path(suffix))
        try:
            return handle.read_at(0, handle.size)
        finally:
            handle.close()

    def close(self) -> None:
        """Release the ``.log`` handle (index files are not held open)."""
        self.log_file.close()

    def delete_files(self) -> None:
        """Close and unlink the segment's files; the caller fsyncs the directory.

        The ``.log`` goes first: an index without its log is swept at open,
        while a log without its index is simply rebuilt.
        """
        self.log_file.close()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            path = self.path(suffix)
            if self._fs.exists(path):
                self._fs.remove(path, sync_dir=False)
