"""Snapshot identities and file naming (KIP-630).

A snapshot covers every record below ``end_offset``; ``epoch`` is the epoch
of the last record it covers. Files are named ``<endOffset>-<epoch>.checkpoint``
with both numbers zero-padded (20 and 10 digits, like Kafka) so a directory
listing sorts by offset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SNAPSHOT_SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """(end offset, epoch) of a snapshot; orders by end offset then epoch."""

    end_offset: int
    epoch: int

    def __post_init__(self) -> None:
        if self.end_offset < 0 or self.epoch < 0:
            raise ValueError(f"bad snapshot id {self.end_offset}-{self.epoch}")


def snapshot_filename(snapshot_id: SnapshotId) -> str:
    """The file name for ``snapshot_id``: ``00000000000000000100-0000000003.checkpoint``."""
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_filename(name: str) -> SnapshotId | None:
    """The id encoded in a snapshot file name, or None if ``name`` is not one."""
    match = _NAME.match(name)
    if match is None:
        return None
    return SnapshotId(int(match.group(1)), int(match.group(2)))
