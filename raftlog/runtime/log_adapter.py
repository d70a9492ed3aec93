"""`SegmentReplicatedLog`: the core's `ReplicatedLog` port over the storage `Log`.

Kafka's ``KafkaMetadataLog`` plays this role over ``UnifiedLog``. One log
directory holds the segment files (``raftlog.storage``), the snapshots and
(written by the runtime) ``quorum-state``::

    00000000000000000000.log ...             segments, leader-epoch-checkpoint
    00000000000000000100-0000000003.checkpoint   snapshot: offsets [0, 100), last epoch 3
    quorum-state

Snapshots (KIP-630) are opaque bytes to this module. A snapshot file is
written to ``<name>.tmp``, fsynced, renamed and the directory fsynced, so a
listed snapshot is always whole. The log start offset follows the snapshots:
`delete_before_snapshot` moves it to a snapshot's end offset (the storage log
persists it in ``log-start-offset-checkpoint``).

Opening reconciles a crash between the two steps of `truncate_to_snapshot`
(snapshot stored, log not yet emptied): if the newest snapshot ends beyond
the log end offset, the log restarts empty at the snapshot's end, as Kafka's
``KafkaMetadataLog`` does on load. Snapshots older than the log start are
deleted then too.

Threading: every method runs on the event-loop thread except `flush`, which
the runtime calls from a worker thread while the loop keeps accepting
requests (the storage `Log` is safe for that; the core is not touched while
the flush runs).
"""

from __future__ import annotations

import logging
import os

from raftlog.clock import Clock, SystemClock
from raftlog.consensus.log import LogAppendInfo, OffsetAndEpoch
from raftlog.consensus.snapshot import SnapshotId, parse_snapshot_filename, snapshot_filename
from raftlog.records import RecordError
from raftlog.storage import (
    FileSystem,
    InvalidEpochError,
    InvalidRecordBatchError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    RealFileSystem,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from raftlog.storage.files import read_whole_file, write_file_atomically

__all__ = ("SegmentReplicatedLog",)

log = logging.getLogger(__name__)

_BAD_APPEND = (
    RecordError,  # corrupt batch (CRC, framing) from the codec
    UnexpectedAppendOffsetError,
    InvalidEpochError,
    InvalidRecordBatchError,
    RecordTooLargeError,
)


class SegmentReplicatedLog:
    """`raftlog.consensus.log.ReplicatedLog` over a `raftlog.storage.Log`.

    Open it with `open`; `close` it for a clean shutdown. Raises what the
    port documents: ValueError for follower appends that do not continue the
    log or are corrupt; storage errors (`raftlog.storage.StorageError`) and
    OSError otherwise, which the runtime treats as fatal.
    """

    def __init__(self, storage: Log, fs: FileSystem, directory: str) -> None:
        """Use `open`."""
        self.storage = storage
        self.directory = directory
        self._fs = fs
        self._snapshots: list[SnapshotId] = []  # sorted, oldest first
        # The bytes of the snapshot last read (FetchSnapshot reads it chunk by chunk).
        self._cached: tuple[SnapshotId, bytes] | None = None

    @classmethod
    def open(
        cls,
        directory: str,
        *,
        config: LogConfig | None = None,
        fs: FileSystem | None = None,
        clock: Clock | None = None,
    ) -> SegmentReplicatedLog:
        """Open (or create) the log in ``directory`` and reconcile its snapshots.

        Raises `raftlog.storage.CorruptCheckpointError` and OSError from the storage log.
        """
        files = fs if fs is not None else RealFileSystem()
        storage = Log.open(directory, config or LogConfig(), fs=files, clock=clock or SystemClock())
        self = cls(storage, files, directory)
        self._snapshots = sorted(
            sid
            for sid in (parse_snapshot_filename(n) for n in files.list_dir(directory))
            if sid is not None
        )
        latest = self.latest_snapshot_id()
        if latest is not None and latest.end_offset > storage.log_end_offset:
            log.warning(
                "snapshot %s ends beyond the log end %d: restarting the log at %d",
                latest,
                storage.log_end_offset,
                latest.end_offset,
            )
            storage.truncate_fully_and_start_at(latest.end_offset)
        self._delete_snapshots_below(storage.log_start_offset, keep=latest)
        return self

    def close(self, *, clean: bool = True) -> None:
        """Flush and close the storage log (clean shutdown). Idempotent.
        ``clean=False`` only releases its files (its disk failed): the next
        open recovers it as after a crash."""
        self.storage.close(clean=clean)

    # -- queries -----------------------------------------------------------------

    def start_offset(self) -> int:
        return self.storage.log_start_offset

    def end_offset(self) -> int:
        return self.storage.log_end_offset

    def flushed_offset(self) -> int:
        return self.storage.flushed_offset

    def last_fetched_epoch(self) -> int:
        end = self.storage.log_end_offset
        if end > self.storage.log_start_offset:
            # The epoch cache may name the epoch of the *next* batch (an entry
            # starting at the LEO); the last batch's epoch is the last entry
            # starting below the LEO.
            for entry in reversed(self.storage.epoch_entries):
                if entry.start_offset < end:
                    return entry.epoch
        return self._snapshot_epoch()

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        start = self.storage.log_start_offset
        end = self.storage.log_end_offset
        snapshot_epoch = self._snapshot_epoch()
        entries = [e for e in self.storage.epoch_entries if e.start_offset < end]
        found = -1
        for entry in entries:
            if entry.epoch > epoch:
                if found >= 0:
                    return OffsetAndEpoch(max(entry.start_offset, start), found)
                break
            found = entry.epoch
        if found >= 0:
            return OffsetAndEpoch(end, found)
        if snapshot_epoch <= epoch:
            # Only the snapshot (or nothing) is at or below ``epoch``: it ends
            # where the first batch of a later epoch begins.
            first = entries[0].start_offset if entries else end
            return OffsetAndEpoch(max(first, start), snapshot_epoch)
        return OffsetAndEpoch(start, snapshot_epoch)

    def read(self, offset: int, max_bytes: int) -> bytes:
        try:
            return self.storage.read(offset, max_bytes).records
        except OffsetOutOfRangeError:
            return b""

    # -- writes --------------------------------------------------------------------

    def append_as_leader(self, batch: bytes, leader_epoch: int, now_ms: int) -> LogAppendInfo:
        info = self.storage.append_as_leader(bytearray(batch), leader_epoch, now_ms)
        return LogAppendInfo(info.first_offset, info.last_offset)

    def append_as_follower(self, records: bytes) -> LogAppendInfo:
        try:
            info = self.storage.append_as_follower(records)
        except _BAD_APPEND as exc:
            raise ValueError(str(exc)) from exc
        if info.batch_count == 0:
            raise ValueError("append_as_follower takes at least one batch")
        return LogAppendInfo(info.first_offset, info.last_offset)

    def truncate_to(self, offset: int) -> None:
        if offset < self.storage.log_start_offset:
            raise ValueError(
                f"truncate to {offset} below log start {self.storage.log_start_offset}"
            )
        self.storage.truncate_to(offset)

    def flush(self) -> None:
        self.storage.flush()

    # -- snapshots -------------------------------------------------------------------

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        if snapshot_id not in self._snapshots:
            return None
        if self._cached is not None and self._cached[0] == snapshot_id:
            return self._cached[1]
        data = read_whole_file(self._fs, self._snapshot_path(snapshot_id))
        self._cached = (snapshot_id, data)
        return data

    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        write_file_atomically(self._fs, self._snapshot_path(snapshot_id), data)
        if snapshot_id not in self._snapshots:
            self._snapshots.append(snapshot_id)
            self._snapshots.sort()
        self._cached = (snapshot_id, data)

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"unknown snapshot {snapshot_id}")
        offset = snapshot_id.end_offset
        if offset <= self.storage.log_start_offset or offset > self.storage.flushed_offset:
            return False
        moved = self.storage.delete_records_before(offset)
        self._delete_snapshots_below(offset, keep=snapshot_id)
        return moved

    def truncate_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"unknown snapshot {snapshot_id}")
        self.storage.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._delete_snapshots_below(snapshot_id.end_offset, keep=snapshot_id)

    # -- helpers ---------------------------------------------------------------------

    def _snapshot_epoch(self) -> int:
        latest = self.latest_snapshot_id()
        return latest.epoch if latest is not None else 0

    def _snapshot_path(self, snapshot_id: SnapshotId) -> str:
        return os.path.join(self.directory, snapshot_filename(snapshot_id))

    def _delete_snapshots_below(self, offset: int, *, keep: SnapshotId | None) -> None:
        """Delete snapshots older than ``keep`` or ending below ``offset`` (the
        log start): nothing can need them once a newer one is durable."""
        doomed = [
            s
            for s in self._snapshots
            if s != keep and (s.end_offset < offset or (keep is not None and s < keep))
        ]
        for snapshot_id in doomed:
            self._fs.remove(self._snapshot_path(snapshot_id), sync_dir=False)
            self._snapshots.remove(snapshot_id)
        if doomed:
            self._fs.fsync_dir(self.directory)
        if self._cached is not None and self._cached[0] not in self._snapshots:
            self._cached = None
