"""The leader-epoch cache: which epoch started at which offset (KIP-101/279).

`LeaderEpochCache` is pure logic over a list of `EpochEntry`; it answers the
OffsetForLeaderEpoch question `end_offset_for`. Persistence is separate:
`encode_checkpoint` / `decode_checkpoint` give Kafka's
``leader-epoch-checkpoint`` text format, and `LeaderEpochCheckpointFile`
replaces the file atomically (temp file, fsync, rename, directory fsync)
through the file-layer port.

Format (Kafka's ``CheckpointFile``)::

    0            <- version
    2            <- number of entries
    0 0          <- "epoch startOffset"
    3 120
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
from dataclasses import dataclass

from raftlog.storage.errors import CorruptCheckpointError
from raftlog.storage.files import FileSystem, read_whole_file, write_file_atomically

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"
_CHECKPOINT_VERSION = 0

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Epoch ``epoch`` wrote its first batch at ``start_offset``."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.start_offset < 0:
            raise ValueError(f"epoch entry must not be negative: {self}")


class LeaderEpochCache:
    """Epoch start offsets, with epochs and start offsets both strictly increasing.

    Mutators return whether they changed anything, so the owner knows when to
    rewrite the checkpoint. Not thread-safe: the owning `Log` serialises calls.
    """

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        # Invariant: epochs strictly increase and start offsets strictly increase.
        self._entries: list[EpochEntry] = []
        for entry in entries or []:
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        """The newest entry (not a copy of them all), or None when empty."""
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or ``UNDEFINED_EPOCH`` (-1) when empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        """The oldest epoch, or ``UNDEFINED_EPOCH`` (-1) when empty."""
        return self._entries[0].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether it changed.

        Kafka's ``LeaderEpochFileCache.assign`` rules:
        - the same epoch as the latest at a start offset >= its start is a no-op;
        - otherwise the new entry wins: entries whose epoch >= ``epoch`` or whose
          start offset >= ``start_offset`` are removed from the end first (logged
          as a warning when that drops anything but a same-offset entry), so
          both columns stay strictly increasing.
        The `Log` never feeds it a lower epoch (it raises `InvalidEpochError`
        first); these rules only matter for direct users. Raises `ValueError`
        for a negative epoch or offset.
        """
        entry = EpochEntry(epoch, start_offset)
        if self._entries:
            latest = self._entries[-1]
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("epoch entry %s truncated conflicting entries %s", entry, removed)
        self._entries.append(entry)
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """The OffsetForLeaderEpoch answer: ``(epoch, end_offset)``.

        ``epoch`` is the largest known epoch <= ``requested_epoch`` and
        ``end_offset`` is the start offset of the next higher epoch, or
        ``log_end_offset`` when that epoch is the latest (including a request
        above the latest epoch, as the issue words it). Returns
        ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` = (-1, -1) for an empty
        cache and for ``requested_epoch`` == -1. A request below the earliest
        epoch gets ``(requested_epoch, start offset of the earliest epoch)``,
        as Kafka's ``LeaderEpochFileCache.endOffsetFor`` answers: the asker
        holds an epoch this log no longer has, so everything it has from that
        start offset on diverges and it must truncate there (KIP-101).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epochs = [e.epoch for e in self._entries]
        i = bisect.bisect_right(epochs, requested_epoch) - 1
        if i < 0:
            return requested_epoch, self._entries[0].start_offset
        if i == len(self._entries) - 1:
            return self._entries[i].epoch, log_end_offset
        return self._entries[i].epoch, self._entries[i + 1].start_offset

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        before = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        return len(self._entries) != before

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop entries starting at or
        before it, keeping the last of them re-based to ``start_offset`` (Kafka:
        that epoch still covers the new first offset)."""
        i = 0
        while i < len(self._entries) and self._entries[i].start_offset <= start_offset:
            i += 1
        if i == 0:
            return False
        kept = EpochEntry(self._entries[i - 1].epoch, start_offset)
        changed = i > 1 or self._entries[0] != kept
        self._entries[:i] = [kept]
        return changed

    def clear(self) -> bool:
        """Remove every entry (the log was emptied)."""
        changed = bool(self._entries)
        self._entries.clear()
        return changed


def encode_checkpoint(entries: list[EpochEntry]) -> bytes:
    """Kafka's checkpoint text: version line, count line, "epoch offset" lines."""
    lines = [str(_CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_checkpoint(data: bytes, source: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
    """Parse `encode_checkpoint` output. Raises `CorruptCheckpointError`."""
    try:
        lines = data.decode("ascii").splitlines()
        if not lines or int(lines[0]) != _CHECKPOINT_VERSION:
            raise ValueError(f"unknown version line {lines[:1]}")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"expected {count} entries, found {len(lines) - 2}")
        entries = []
        for line in lines[2:]:
            epoch, offset = line.split(" ")
            entries.append(EpochEntry(int(epoch), int(offset)))
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise CorruptCheckpointError(f"{source}: {e}") from e
    for a, b in itertools.pairwise(entries):
        if not (a.epoch < b.epoch and a.start_offset < b.start_offset):
            raise CorruptCheckpointError(f"{source}: entries not increasing: {a}, {b}")
    return entries


class LeaderEpochCheckpointFile:
    """The ``leader-epoch-checkpoint`` file of one log directory."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self._fs = fs
        self.path = os.path.join(directory, CHECKPOINT_FILE_NAME)

    def read(self) -> list[EpochEntry]:
        """The stored entries; empty if the file is missing. Raises `CorruptCheckpointError`."""
        if not self._fs.exists(self.path):
            return []
        return decode_checkpoint(read_whole_file(self._fs, self.path), self.path)

    def write(self, entries: list[EpochEntry]) -> None:
        """Replace the file durably (returns after the directory fsync)."""
        write_file_atomically(self._fs, self.path, encode_checkpoint(entries))
