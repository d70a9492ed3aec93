"""A replica's producer state and aborted-transaction index, kept in step with its log.

`ReplicaTxnState` binds the pure `ProducerStateManager` and `AbortedTxnIndex`
to one partition replica's `raftlog.storage.Log` and directory. The
replication core (`data_plane.replication.partition.Partition`) calls it at
every point where the log changes, so the state always describes exactly the
batches below the log end offset (the invariant `check_in_step` asserts):

- **append** (leader and follower): `validate` before a leader append;
  `note_segment` before and `apply_appended` after any append. A segment
  roll seen there persists the producer snapshot at the new segment's base
  offset and the old segment's ``.txnindex`` (Kafka writes both at roll);
- **high watermark**: `on_high_watermark`;
- **truncation**: `after_truncation` (snapshots above the new end are
  deleted: the rule the txn simulation found — a stale snapshot above a
  truncation point would resurrect producer state the log no longer holds);
- **retention**: `after_log_start_moved`;
- **open and becoming leader**: `load` and `catch_up` (replay the log tail
  above the newest usable snapshot).

Files live next to the segments, named like Kafka's:
``<offset>.snapshot`` and ``<segment base>.txnindex``. They are written with
``write_file_atomically`` through the injected `FileSystem`, so the
simulator's fake disk sees them too. With ``fs=None`` nothing is persisted
and `load` replays the whole log (tests and simulations that need no files).

A snapshot is the commit point for the ``.txnindex`` files below it: the
index of a rolled segment is written before the snapshot at its end, so a
snapshot at offset S implies every index below S is on disk. A write that
fails (a full or failing disk) raises nothing into the append that rolled:
an index not written is retried at the next roll, and no snapshot is
written until it is (the snapshot would vouch for it); a snapshot not
written only means a longer replay on the next open.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Iterator, Mapping

from data_plane.txn.lso import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    AbortedTxnIndex,
    TxnIndexError,
    last_stable_offset,
    txn_index_file_name,
)
from data_plane.txn.markers import MarkerError, scan_batches
from data_plane.txn.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendVerdict,
    LoggedBatch,
    ProducerStateManager,
    SnapshotError,
    parse_snapshot_file_name,
)
from raftlog.records import BatchHeader
from raftlog.storage import FileSystem, Log
from raftlog.storage.files import read_whole_file, write_file_atomically

__all__ = ("ReplicaTxnState", "read_log_batches")

log = logging.getLogger(__name__)

# How much of the log one replay read asks for.
_REPLAY_READ_BYTES = 1 << 20


def read_log_batches(segment_log: Log, start: int) -> Iterator[LoggedBatch]:
    """``(header, marker)`` for every batch from the one holding ``start``
    (clamped to the log start offset) to the log end."""
    offset = max(start, segment_log.log_start_offset)
    while offset < segment_log.log_end_offset:
        data = segment_log.read(offset, _REPLAY_READ_BYTES)
        last: BatchHeader | None = None
        for header, marker in scan_batches(data.records):
            yield header, marker
            last = header
        if last is None:
            return
        offset = last.next_offset


class _LazySnapshots(Mapping[int, bytes]):
    """Snapshot offset -> bytes, read from disk only when asked for."""

    def __init__(self, fs: FileSystem, paths: Mapping[int, str]) -> None:
        self._fs = fs
        self._paths = dict(paths)

    def __getitem__(self, offset: int) -> bytes:
        return read_whole_file(self._fs, self._paths[offset])

    def __iter__(self) -> Iterator[int]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


class ReplicaTxnState:
    """Producer state + aborted index of one replica (see the module docstring)."""

    def __init__(self, directory: str, fs: FileSystem | None, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = directory
        self.fs = fs
        self.producers = ProducerStateManager(
            producer_id_expiration_ms=producer_id_expiration_ms)
        self.aborted = AbortedTxnIndex()
        # Base offset of the active segment as of the last append we saw.
        self._active_base = -1
        # KIP-890 verification guards: producer id -> the token of a
        # verification in flight. Any transactional batch or marker of that
        # producer reaching the log clears it, so a verification that a
        # marker overtook does not let its batch start a new transaction.
        self._verification_guards: dict[int, object] = {}
        # Rolled segments ``(base, next base)`` whose .txnindex is not on disk
        # yet (a failed write, or a segment rolled before a crash), oldest first.
        self._unwritten_indexes: list[tuple[int, int]] = []

    # ==== views =====================================================================

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO for ``high_watermark`` (read_committed visibility bound)."""
        return last_stable_offset(high_watermark, self.producers.first_unstable_offset())

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        return self.aborted.aborted_transactions(fetch_offset, upper_bound)

    def check_in_step(self, segment_log: Log) -> None:
        """Tier-3 invariant: the state covers exactly the log's batches."""
        if self.producers.map_end_offset != segment_log.log_end_offset:
            raise AssertionError(
                f"{self.directory}: producer state ends at {self.producers.map_end_offset}, "
                f"log at {segment_log.log_end_offset}")

    # ==== open and becoming leader ==================================================

    def load(self, segment_log: Log) -> None:
        """Rebuild on open: the newest valid snapshot within the log, the
        ``.txnindex`` files below it, then the log tail above it."""
        self.aborted = AbortedTxnIndex()
        start = segment_log.log_start_offset
        leo = segment_log.log_end_offset
        loaded_at: int | None = None
        snapshots = self._snapshot_paths()
        for offset in sorted(snapshots, reverse=True):
            if not start <= offset <= leo or self.fs is None:
                continue
            try:
                self.producers.load_snapshot(read_whole_file(self.fs, snapshots[offset]))
            except (SnapshotError, OSError) as e:
                log.warning("%s: skipping snapshot %d: %s", self.directory, offset, e)
                continue
            loaded_at = offset
            break
        if loaded_at is None:
            self.producers.reset(start)
        else:
            self._load_indexes_below(segment_log, loaded_at)
        self._delete_snapshots_above(leo)
        # Replaying from the log start (no snapshot, or a torn index): the
        # start may lie inside the first batch.
        self.catch_up(segment_log, from_log_start=self.producers.map_end_offset == start)
        self.producers.truncate_head(start)
        self.aborted.truncate_head(start)
        self._active_base = segment_log.active_segment.base_offset
        # Segments rolled above the snapshot may lack their index (a crash
        # before it was written): write them before any later snapshot.
        self._unwritten_indexes = []
        if self.fs is not None:
            bases = [seg.base_offset for seg in segment_log.segments]
            above = loaded_at if loaded_at is not None else start
            for base, next_base in itertools.pairwise(bases):
                path = os.path.join(self.directory, txn_index_file_name(base))
                if next_base > above and not self.fs.exists(path):
                    self._unwritten_indexes.append((base, next_base))
            self._write_unwritten_indexes()

    def catch_up(self, segment_log: Log, *, from_log_start: bool = False) -> None:
        """Apply the log's batches above the state's end (a no-op when the
        follower path kept up; run on becoming leader). ``from_log_start``:
        the state starts at the log start offset, perhaps inside a batch
        (`ProducerStateManager.load_from_batches`)."""
        end = self.producers.map_end_offset
        if end >= segment_log.log_end_offset:
            return
        self._apply(read_log_batches(segment_log, end), from_log_start=from_log_start)

    def _load_indexes_below(self, segment_log: Log, snapshot_offset: int) -> None:
        if self.fs is None:
            return
        for segment in segment_log.segments:
            if segment.base_offset >= snapshot_offset:
                break
            path = os.path.join(self.directory, txn_index_file_name(segment.base_offset))
            if not self.fs.exists(path):
                continue
            try:
                self.aborted.load_segment(read_whole_file(self.fs, path))
            except (TxnIndexError, ValueError) as e:
                # Torn index: fall back to replaying from the log start.
                log.warning("%s: unreadable %s (%s); replaying the log", self.directory, path, e)
                self.aborted = AbortedTxnIndex()
                self.producers.reset(segment_log.log_start_offset)
                return

    # ==== KIP-890 verification =====================================================

    def take_verifications_from(self, other: ReplicaTxnState) -> None:
        """Carry ``other``'s KIP-890 verifications in flight over (a log-dir
        move replaces a replica's state with the copy's,
        `data_plane.broker.log_dir_moves`)."""
        self._verification_guards = dict(other._verification_guards)

    def needs_verification(self, producer_id: int) -> bool:
        """A transactional batch of ``producer_id`` would start a transaction
        on this partition (none of its is ongoing here)."""
        return not self.producers.has_ongoing_transaction(producer_id)

    def start_verification(self, producer_id: int) -> object:
        """The guard token for a verification of ``producer_id`` (the one in
        flight, or a new one)."""
        guard = self._verification_guards.get(producer_id)
        if guard is None:
            guard = self._verification_guards[producer_id] = object()
        return guard

    def verification_holds(self, producer_id: int, guard: object) -> bool:
        """Nothing of the producer reached the log since the guard was made."""
        return self._verification_guards.get(producer_id) is guard

    def end_verification(self, producer_id: int, guard: object) -> None:
        if self._verification_guards.get(producer_id) is guard:
            del self._verification_guards[producer_id]

    # ==== appends ===================================================================

    def validate(self, headers: list[BatchHeader], now_ms: int) -> AppendVerdict:
        """`ProducerStateManager.validate_batches` (``now_ms``: wall clock, as
        the batch timestamps it compares with for expiry)."""
        return self.producers.validate_batches(headers, now_ms)

    def note_segment(self, segment_log: Log) -> None:
        """Before an append: persist what a roll since the last append left behind."""
        base = segment_log.active_segment.base_offset
        if base != self._active_base and self._active_base >= 0:
            self._on_roll(self._active_base, base)
        self._active_base = base

    def apply_appended(self, segment_log: Log, batches: Iterable[LoggedBatch]) -> None:
        """After an append of ``batches`` (their headers carry the assigned offsets)."""
        new_base = segment_log.active_segment.base_offset
        if new_base != self._active_base:
            # The append rolled first (the log rolls before writing), so the
            # state is exactly at the new segment's base.
            self._on_roll(self._active_base, new_base)
            self._active_base = new_base
        self._apply(batches)

    def apply_appended_bytes(self, segment_log: Log, records: bytes | bytearray) -> None:
        """`apply_appended` for log bytes (a follower's fetched batches)."""
        try:
            batches = list(scan_batches(records))
        except MarkerError as e:
            raise AssertionError(f"{self.directory}: appended an unreadable marker: {e}") from e
        self.apply_appended(segment_log, batches)

    def _apply(self, batches: Iterable[LoggedBatch], *, from_log_start: bool = False) -> None:
        if self._verification_guards:
            batches = list(batches)
            for header, _ in batches:
                if header.is_transactional:
                    self._verification_guards.pop(header.producer_id, None)
        done = self.producers.load_from_batches(batches, from_log_start=from_log_start)
        if done:
            self.aborted.append_completed(done)

    def _on_roll(self, old_base: int, new_base: int) -> None:
        if self.fs is None or old_base < 0 or new_base <= old_base:
            return
        self._unwritten_indexes.append((old_base, new_base))
        if not self._write_unwritten_indexes():
            return  # no snapshot: it would vouch for the index that is missing
        if self.producers.map_end_offset == new_base:
            snapshot = self.producers.take_snapshot()
            try:
                write_file_atomically(
                    self.fs, os.path.join(self.directory, snapshot.file_name), snapshot.data)
            except OSError as e:
                log.warning("%s: cannot write the producer snapshot at %d (an older one "
                            "and the log stand in): %s", self.directory, new_base, e)

    def _write_unwritten_indexes(self) -> bool:
        """Write the .txnindex of every rolled segment that lacks it, oldest
        first; False (and a warning) at the first that cannot be written."""
        assert self.fs is not None
        while self._unwritten_indexes:
            base, next_base = self._unwritten_indexes[0]
            data = self.aborted.segment_bytes(base, next_base)
            if data:
                try:
                    write_file_atomically(
                        self.fs, os.path.join(self.directory, txn_index_file_name(base)), data)
                except OSError as e:
                    log.warning("%s: cannot write the aborted-transaction index of segment "
                                "%d (retried at the next roll): %s", self.directory, base, e)
                    return False
            del self._unwritten_indexes[0]
        return True

    # ==== high watermark, truncation, retention, expiry =============================

    def on_high_watermark(self, high_watermark: int) -> None:
        self.producers.on_high_watermark(high_watermark)

    def after_truncation(self, segment_log: Log) -> None:
        """The log was truncated (divergence, out of range, or fully restarted):
        rebuild from the newest snapshot at or below the new end and delete
        every snapshot and index above it."""
        leo = segment_log.log_end_offset
        self._active_base = segment_log.active_segment.base_offset
        if segment_log.log_start_offset == leo:
            # Empty log (possibly restarted elsewhere): nothing survives.
            self._delete_snapshots_above(-1)
            self._delete_indexes_from(0)
            self.producers.reset(leo)
            self.aborted = AbortedTxnIndex()
            self._unwritten_indexes = []
            return
        paths = self._snapshot_paths()
        snapshots: Mapping[int, bytes] = (
            _LazySnapshots(self.fs, paths) if self.fs is not None else {})
        doomed = self.producers.truncate_to(
            leo, snapshots, lambda start: read_log_batches(segment_log, start))
        for name in doomed:
            self._remove(name)
        self._delete_snapshots_above(leo)
        self.aborted.truncate_to(leo)
        self._delete_indexes_from(self._active_base)
        self._unwritten_indexes = [(b, n) for b, n in self._unwritten_indexes
                                   if n <= self._active_base]
        if self.producers.map_end_offset < segment_log.log_start_offset:
            self.producers.reset(segment_log.log_start_offset)
        self.check_in_step(segment_log)

    def after_log_start_moved(self, segment_log: Log) -> None:
        """Retention or DeleteRecords moved the log start."""
        start = segment_log.log_start_offset
        self.producers.truncate_head(start)
        self.aborted.truncate_head(start)
        if self.fs is None:
            return
        bases = {s.base_offset for s in segment_log.segments}
        self._unwritten_indexes = [(b, n) for b, n in self._unwritten_indexes if b in bases]
        for name in self._list():
            offset = parse_snapshot_file_name(name)
            stale_snapshot = offset is not None and offset < start
            orphan_index = name.endswith(TXN_INDEX_SUFFIX) and _index_base(name) not in bases
            if stale_snapshot or orphan_index:
                self._remove(name)

    def remove_expired_producers(self, wall_now_ms: int) -> list[int]:
        return self.producers.remove_expired_producers(wall_now_ms)

    # ==== files =====================================================================

    def _list(self) -> list[str]:
        if self.fs is None or not self.fs.exists(self.directory):
            return []
        return self.fs.list_dir(self.directory)

    def _snapshot_paths(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for name in self._list():
            offset = parse_snapshot_file_name(name)
            if offset is not None:
                out[offset] = os.path.join(self.directory, name)
        return out

    def _delete_snapshots_above(self, offset: int) -> None:
        for snap_offset, path in self._snapshot_paths().items():
            if snap_offset > offset:
                self._remove(os.path.basename(path))

    def _delete_indexes_from(self, base: int) -> None:
        for name in self._list():
            if name.endswith(TXN_INDEX_SUFFIX) and _index_base(name) >= base:
                self._remove(name)

    def _remove(self, name: str) -> None:
        if self.fs is None:
            return
        path = os.path.join(self.directory, name)
        if self.fs.exists(path):
            self.fs.remove(path)


def _index_base(name: str) -> int:
    stem = name.removesuffix(TXN_INDEX_SUFFIX)
    return int(stem) if stem.isdigit() else -1
