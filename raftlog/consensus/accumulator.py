"""Proposal batching by ``append.linger.ms`` (Kafka ``BatchAccumulator``).

Offsets are assigned at `propose` time: the accumulator knows where the
next batch will start, since the leader appends nothing else while it leads.
"""

from __future__ import annotations

from collections.abc import Sequence

from raftlog.records import BatchBuilder


class BatchAccumulator:
    """Collects proposed record values into batches for one leader epoch."""

    def __init__(self, *, epoch: int, next_offset: int, linger_ms: int,
                 max_batch_bytes: int) -> None:
        self.epoch = epoch
        self._next_offset = next_offset  # offset of the next proposed record
        self._linger_ms = linger_ms
        self._max_batch_bytes = max_batch_bytes
        self._builder: BatchBuilder | None = None
        self._pending_bytes = 0
        self._deadline_ms: int | None = None
        self._closed: list[bytes] = []

    @property
    def next_offset(self) -> int:
        return self._next_offset

    def deadline_ms(self) -> int | None:
        """When the open batch must be closed (linger expiry), if one is open."""
        return self._deadline_ms

    def append(self, values: Sequence[bytes], now_ms: int) -> int:
        """Queue ``values``; returns the offset of the last one."""
        if not values:
            raise ValueError("a proposal holds at least one record")
        size = sum(len(v) for v in values)
        if self._builder is not None and self._pending_bytes + size > self._max_batch_bytes:
            self._close()
        if self._builder is None:
            self._builder = BatchBuilder(base_offset=self._next_offset,
                                         partition_leader_epoch=self.epoch)
            self._deadline_ms = now_ms + self._linger_ms
        for value in values:
            self._builder.append(value, timestamp_ms=now_ms)
        self._pending_bytes += size
        self._next_offset += len(values)
        if self._pending_bytes >= self._max_batch_bytes or self._linger_ms == 0:
            self._close()
        return self._next_offset - 1

    def drain(self, now_ms: int, *, force: bool = False) -> list[bytes]:
        """Batches ready to append: closed ones, plus the open one if its linger
        expired (or ``force``)."""
        if self._builder is not None and (
                force or (self._deadline_ms is not None and now_ms >= self._deadline_ms)):
            self._close()
        closed, self._closed = self._closed, []
        return closed

    def _close(self) -> None:
        if self._builder is not None:
            self._closed.append(self._builder.build())
        self._builder = None
        self._pending_bytes = 0
        self._deadline_ms = None
