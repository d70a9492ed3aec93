"""Proposal batching by ``append.linger.ms`` (Kafka ``BatchAccumulator``).

Offsets are assigned at `propose` time: the accumulator knows where the
next batch will start, since the leader appends nothing else while it leads.

Proposed values become records with no key, no headers and a create-time
timestamp, in uncompressed v2 batches. The accumulator encodes those records
itself rather than through `raftlog.records.BatchBuilder`: it is the
per-proposal hot path of the leader, and with that fixed shape a record is
a few cached varints around the value (the bytes are identical to the
builder's; the tests check that).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from raftlog.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from raftlog.records.batch import Compression, TimestampType, make_attributes, pack_header
from raftlog.records.varint import write_varint, write_varlong

_ATTRIBUTES = make_attributes(
    Compression.NONE, TimestampType.CREATE_TIME, is_transactional=False, is_control=False
)
_RECORD_ATTRIBUTES = b"\x00"  # unused in v2
_NULL_KEY = b"\x01"  # varint -1
_NO_HEADERS = b"\x00"  # varint 0


@lru_cache(maxsize=1 << 16)
def _varint(value: int) -> bytes:
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


@lru_cache(maxsize=1 << 12)
def _varlong(value: int) -> bytes:
    out = bytearray()
    write_varlong(value, out)
    return bytes(out)


class BatchAccumulator:
    """Collects proposed record values into batches for one leader epoch."""

    def __init__(self, *, epoch: int, next_offset: int, linger_ms: int,
                 max_batch_bytes: int) -> None:
        self.epoch = epoch
        self._next_offset = next_offset  # offset of the next proposed record
        self._linger_ms = linger_ms
        self._max_batch_bytes = max_batch_bytes
        # The open batch: its encoded records, count, base and max timestamps.
        self._records: list[bytes] | None = None
        self._count = 0
        self._base_offset = next_offset
        self._base_timestamp = 0
        self._max_timestamp = 0
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
        """Queue ``values``; returns the offset of the last one.

        Raises ValueError for an empty proposal, TypeError for a value that
        is not bytes.
        """
        if not values:
            raise ValueError("a proposal holds at least one record")
        for value in values:
            if not isinstance(value, bytes):
                raise TypeError(f"a proposed value must be bytes, got {type(value).__name__}")
        size = sum(len(v) for v in values)
        if self._records is not None and self._pending_bytes + size > self._max_batch_bytes:
            self._close()
        if self._records is None:
            self._records = []
            self._count = 0
            self._base_offset = self._next_offset
            self._base_timestamp = now_ms
            self._max_timestamp = now_ms
            self._deadline_ms = now_ms + self._linger_ms
        records = self._records
        timestamp_delta = _varlong(now_ms - self._base_timestamp)
        delta = self._count
        for value in values:
            body = b"".join((_RECORD_ATTRIBUTES, timestamp_delta, _varint(delta), _NULL_KEY,
                             _varint(len(value)), value, _NO_HEADERS))
            records.append(_varint(len(body)))
            records.append(body)
            delta += 1
        self._count = delta
        self._max_timestamp = max(self._max_timestamp, now_ms)
        self._pending_bytes += size
        self._next_offset += len(values)
        if self._pending_bytes >= self._max_batch_bytes or self._linger_ms == 0:
            self._close()
        return self._next_offset - 1

    def drain(self, now_ms: int, *, force: bool = False) -> list[bytes]:
        """Batches ready to append: closed ones, plus the open one if its linger
        expired (or ``force``)."""
        if self._records is not None and (
                force or (self._deadline_ms is not None and now_ms >= self._deadline_ms)):
            self._close()
        closed, self._closed = self._closed, []
        return closed

    def _close(self) -> None:
        if self._records is not None:
            self._closed.append(pack_header(
                b"".join(self._records), base_offset=self._base_offset,
                partition_leader_epoch=self.epoch, attributes=_ATTRIBUTES,
                last_offset_delta=self._count - 1, base_timestamp=self._base_timestamp,
                max_timestamp=self._max_timestamp, producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH, base_sequence=NO_SEQUENCE,
                records_count=self._count))
        self._records = None
        self._pending_bytes = 0
        self._deadline_ms = None
