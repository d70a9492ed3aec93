"""Helpers for the storage tests: batch builders and whole-log reads."""

from __future__ import annotations

from raftlog.records import BatchBuilder, iter_batches
from raftlog.storage import Log

LOG_DIR = "/data/topic-0"


def make_batch(
    count: int = 1,
    *,
    value_size: int = 10,
    timestamp_ms: int = 1_700_000_000_000,
    base_offset: int = 0,
    epoch: int = -1,
    tag: int = 0,
) -> bytes:
    """One batch of ``count`` records, value bytes derived from ``tag``."""
    builder = BatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i in range(count):
        value = bytes([(tag + i) % 256]) * value_size
        builder.append(value, key=None, timestamp_ms=timestamp_ms + i)
    return builder.build()


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """``(base_offset, last_offset)`` of each whole batch in ``data``."""
    return [(h.base_offset, h.last_offset) for h, _ in iter_batches(data)]


def read_all(log: Log, start: int | None = None) -> bytes:
    """Every batch from ``start`` (default: log start) to the log end."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        assert data, f"no data at {offset} below LEO {log.log_end_offset}"
        out += data
        offset = list(iter_batches(data))[-1][0].next_offset
    return bytes(out)
