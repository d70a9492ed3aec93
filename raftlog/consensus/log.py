"""The log port: what the core needs from a replicated log (Kafka's `ReplicatedLog`).

Offsets count records; entries are Kafka v2 record batches kept as opaque
bytes. Appends land in the log at once but become durable only when the
runtime calls `flush` (the core asks for it through `Ready.flush_log_to`).
`raftlog.testing.memory_log.MemoryLog` is the in-memory fake; an adapter
over `raftlog.storage.log` is the real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from raftlog.consensus.snapshot import SnapshotId


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """An offset with the epoch that goes with it (Kafka `OffsetAndEpoch`)."""

    offset: int
    epoch: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.epoch < 0:
            raise ValueError(f"bad offset/epoch ({self.offset}, {self.epoch})")


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """Offsets given to an append: ``first_offset`` .. ``last_offset`` inclusive."""

    first_offset: int
    last_offset: int

    def __post_init__(self) -> None:
        if self.last_offset < self.first_offset:
            raise ValueError("an append covers at least one record")


class ReplicatedLog(Protocol):
    """The core's view of the log. All methods are synchronous and cheap.

    Invariants an implementation keeps (and the core relies on):
    ``start_offset() <= flushed_offset() <= end_offset()``; batches are
    contiguous; epochs never decrease along the log.
    """

    def start_offset(self) -> int:
        """First offset still in the log (the latest snapshot's end offset, or 0)."""
        ...

    def end_offset(self) -> int:
        """Log end offset (LEO): the offset the next record will get."""
        ...

    def flushed_offset(self) -> int:
        """Every record below this offset is durable."""
        ...

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch, else the latest snapshot's epoch, else 0."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch ``<= epoch`` in the log and the offset where it ends
        (start of the next epoch, or the LEO). Below the oldest epoch it returns
        (start offset, snapshot epoch or 0). KIP-101's OffsetsForLeaderEpoch."""
        ...

    def append_as_leader(self, batch: bytes, leader_epoch: int, now_ms: int) -> LogAppendInfo:
        """Append one batch at the LEO, rewriting its base offset and partition
        leader epoch (both outside the CRC)."""
        ...

    def append_as_follower(self, records: bytes) -> LogAppendInfo:
        """Append whole batches fetched from the leader, verbatim. Raises
        ValueError if they do not start at the LEO or are corrupt."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above ``offset`` (a batch boundary, >= start)."""
        ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, at least one batch if
        any, then more while they fit in ``max_bytes``."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable (fsync)."""
        ...

    def latest_snapshot_id(self) -> SnapshotId | None:
        """The newest durable snapshot, if any."""
        ...

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        """The bytes of a stored snapshot, or None if it is not stored."""
        ...

    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Durably store a snapshot (written to a temporary file, fsynced, renamed
        to `raftlog.consensus.snapshot.snapshot_filename`)."""
        ...

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool:
        """Move the log start to ``snapshot_id.end_offset`` if that is at or below
        the flushed offset, deleting older records; returns whether it moved."""
        ...

    def truncate_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Replace the whole log by a stored snapshot: start = end = its end offset."""
        ...
