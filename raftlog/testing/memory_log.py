"""An in-memory `raftlog.consensus.log.ReplicatedLog` that can lose unflushed
writes on `crash` (Kafka's ``MockLog.reopen``)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from raftlog.consensus.log import LogAppendInfo, OffsetAndEpoch
from raftlog.consensus.snapshot import SnapshotId
from raftlog.records import RecordError, iter_batches, rewrite_base_offset_and_epoch


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch in the log: offsets ``base_offset`` .. ``next_offset - 1``."""

    base_offset: int
    next_offset: int
    epoch: int
    data: bytes


class MemoryLog:
    """A list of batches, a flushed offset and a set of durable snapshots.

    Appends are volatile until `flush`; `truncate_to` and snapshot operations
    are durable at once (like a file truncate plus directory fsync).
    """

    def __init__(self) -> None:
        self._batches: list[StoredBatch] = []
        self._bases: list[int] = []  # base offsets, for bisect
        self._start_offset = 0
        self._flushed_offset = 0
        self._snapshots: dict[SnapshotId, bytes] = {}
        self._latest_snapshot: SnapshotId | None = None

    # -- queries ---------------------------------------------------------------

    def start_offset(self) -> int:
        return self._start_offset

    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start_offset

    def flushed_offset(self) -> int:
        return self._flushed_offset

    def last_fetched_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        return self._latest_snapshot.epoch if self._latest_snapshot is not None else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        start_epoch = self._latest_snapshot.epoch if self._latest_snapshot is not None else 0
        found_epoch = -1
        end = self._start_offset
        if start_epoch <= epoch:
            found_epoch = start_epoch
        for batch in self._batches:
            if batch.epoch > epoch:
                if found_epoch >= 0:
                    return OffsetAndEpoch(batch.base_offset, found_epoch)
                break
            found_epoch = batch.epoch
            end = batch.next_offset
        if found_epoch < 0:
            return OffsetAndEpoch(self._start_offset, start_epoch)
        return OffsetAndEpoch(end, found_epoch)

    def read(self, offset: int, max_bytes: int) -> bytes:
        index = self._index_of(offset)
        if index is None:
            return b""
        out = [self._batches[index].data]
        size = len(out[0])
        for batch in self._batches[index + 1:]:
            if size + len(batch.data) > max_bytes:
                break
            out.append(batch.data)
            size += len(batch.data)
        return b"".join(out)

    def batch_containing(self, offset: int) -> StoredBatch | None:
        """The batch holding ``offset``, if the log has it (for invariant checks)."""
        index = self._index_of(offset)
        return None if index is None else self._batches[index]

    def batches(self) -> tuple[StoredBatch, ...]:
        return tuple(self._batches)

    def _index_of(self, offset: int) -> int | None:
        if not self._batches or offset < self._start_offset or offset >= self.end_offset():
            return None
        return bisect.bisect_right(self._bases, offset) - 1

    # -- writes ------------------------------------------------------------------

    def append_as_leader(self, batch: bytes, leader_epoch: int, now_ms: int) -> LogAppendInfo:
        if leader_epoch < self.last_fetched_epoch():
            raise ValueError(f"epoch {leader_epoch} below last epoch {self.last_fetched_epoch()}")
        buf = bytearray(batch)
        base = self.end_offset()
        rewrite_base_offset_and_epoch(buf, 0, base, leader_epoch)
        batches = list(iter_batches(buf))
        if len(batches) != 1 or batches[0][0].size_in_bytes != len(buf):
            raise ValueError("append_as_leader takes exactly one whole batch")
        header = batches[0][0]
        self._push(StoredBatch(base, header.next_offset, leader_epoch, bytes(buf)))
        return LogAppendInfo(base, header.last_offset)

    def append_as_follower(self, records: bytes) -> LogAppendInfo:
        """The port's contract: ValueError for corrupt batches (a CRC or framing
        error from the codec included) or ones that do not continue the log."""
        try:
            return self._append_as_follower(records)
        except RecordError as exc:
            raise ValueError(f"corrupt batch: {exc}") from exc

    def _append_as_follower(self, records: bytes) -> LogAppendInfo:
        first = self.end_offset()
        expected = first
        epoch = self.last_fetched_epoch()
        parsed: list[StoredBatch] = []
        consumed = 0
        view = memoryview(records)
        for header, pos in iter_batches(records):
            if header.base_offset != expected:
                raise ValueError(f"batch at {header.base_offset}, expected {expected}")
            if header.partition_leader_epoch < epoch:
                raise ValueError("epochs must not decrease along the log")
            epoch = header.partition_leader_epoch
            parsed.append(StoredBatch(header.base_offset, header.next_offset, epoch,
                                      bytes(view[pos:pos + header.size_in_bytes])))
            expected = header.next_offset
            consumed = pos + header.size_in_bytes
        if not parsed or consumed != len(records):
            raise ValueError("append_as_follower takes whole batches")
        for batch in parsed:
            self._push(batch)
        return LogAppendInfo(first, expected - 1)

    def _push(self, batch: StoredBatch) -> None:
        self._batches.append(batch)
        self._bases.append(batch.base_offset)

    def truncate_to(self, offset: int) -> None:
        if offset < self._start_offset:
            raise ValueError(f"truncate to {offset} below log start {self._start_offset}")
        index = bisect.bisect_left(self._bases, offset)
        if index < len(self._batches) and self._batches[index].base_offset != offset:
            raise ValueError(f"truncate to {offset}: not a batch boundary")
        if index > 0 and self._batches[index - 1].next_offset > offset:
            raise ValueError(f"truncate to {offset}: not a batch boundary")
        del self._batches[index:]
        del self._bases[index:]
        self._flushed_offset = min(self._flushed_offset, self.end_offset())

    def flush(self) -> None:
        self._flushed_offset = self.end_offset()

    # -- snapshots -----------------------------------------------------------------

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._latest_snapshot

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._snapshots[snapshot_id] = data
        if self._latest_snapshot is None or snapshot_id > self._latest_snapshot:
            self._latest_snapshot = snapshot_id

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"unknown snapshot {snapshot_id}")
        offset = snapshot_id.end_offset
        if offset <= self._start_offset or offset > self._flushed_offset:
            return False
        index = bisect.bisect_left(self._bases, offset)
        if index < len(self._batches) and self._batches[index].base_offset != offset:
            raise ValueError(f"snapshot end {offset} is not a batch boundary")
        del self._batches[:index]
        del self._bases[:index]
        self._start_offset = offset
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]
        return True

    def truncate_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"unknown snapshot {snapshot_id}")
        self._batches.clear()
        self._bases.clear()
        self._start_offset = snapshot_id.end_offset
        self._flushed_offset = snapshot_id.end_offset
        self._latest_snapshot = snapshot_id
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]

    # -- faults ----------------------------------------------------------------------

    def crash(self) -> None:
        """Lose every record above the flushed offset (a power cut)."""
        self.truncate_to(self._boundary_at_or_below(self._flushed_offset))

    def _boundary_at_or_below(self, offset: int) -> int:
        index = bisect.bisect_right(self._bases, offset) - 1
        if index < 0:
            return self._start_offset
        batch = self._batches[index]
        return batch.next_offset if batch.next_offset <= offset else batch.base_offset
