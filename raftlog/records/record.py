"""One v2 record inside a batch: its dataclasses and its varint encoding.

Layout (Kafka protocol guide, "Record"; KIP-82 for headers)::

    length: varint            bytes after this field
    attributes: int8          unused, 0
    timestampDelta: varlong   from the batch's baseTimestamp
    offsetDelta: varint       from the batch's baseOffset
    keyLength: varint         -1 for a null key
    key: byte[]
    valueLength: varint       -1 for a null value
    value: byte[]
    headersCount: varint
    headers: [headerKeyLength varint, headerKey utf-8,
              headerValueLength varint (-1 null), headerValue byte[]]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import CorruptRecordError
from .varint import read_varint, read_varlong, write_varint, write_varlong


@dataclass(frozen=True, slots=True)
class Header:
    """A record header (KIP-82). The key is a non-null UTF-8 string; the value may be null."""

    key: str
    value: bytes | None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str):
            raise TypeError(f"header key must be str, got {type(self.key).__name__}")
        if self.value is not None and not isinstance(self.value, bytes):
            raise TypeError(f"header value must be bytes or None, got {type(self.value).__name__}")


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record with its absolute offset and timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


HeaderLike = Header | tuple[str, bytes | None]


def as_headers(headers: Iterable[HeaderLike]) -> tuple[Header, ...]:
    """Normalise headers given as Header objects or ``(key, value)`` pairs."""
    return tuple(h if isinstance(h, Header) else Header(h[0], h[1]) for h in headers)


def _write_bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        write_varint(-1, out)
    else:
        write_varint(len(data), out)
        out += data


def encode_record(
    out: bytearray,
    *,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[Header, ...],
) -> int:
    """Append one encoded record to ``out``; returns the bytes appended.

    Raises ValueError if a delta or length does not fit its varint type.
    """
    body = bytearray(b"\x00")  # attributes: unused in v2
    write_varlong(timestamp_delta, body)
    write_varint(offset_delta, body)
    _write_bytes(key, body)
    _write_bytes(value, body)
    write_varint(len(headers), body)
    for header in headers:
        _write_bytes(header.key.encode("utf-8"), body)
        _write_bytes(header.value, body)
    start = len(out)
    write_varint(len(body), out)
    out += body
    return len(out) - start


def _read_bytes(
    buf: bytes, pos: int, end: int, what: str, record_start: int
) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos, end)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(
                f"record at {record_start}: {what} length {length} is negative", pos=pos
            )
        return None, pos
    if length > end - pos:
        raise CorruptRecordError(
            f"record at {record_start}: {what} length {length} runs past the record's end",
            pos=pos,
        )
    return buf[pos : pos + length], pos + length


def decode_record(
    buf: bytes, pos: int, *, base_offset: int, base_timestamp: int, timestamp_override: int | None
) -> tuple[Record, int]:
    """Decode the record at ``buf[pos:]``; returns it and the position after it.

    ``timestamp_override`` replaces every record's timestamp (LogAppendTime
    batches, whose timestamps are the batch's maxTimestamp).

    Raises VarintError, or CorruptRecordError if a length is negative or
    runs past the record, the record's length disagrees with its fields, or
    a header key is null or not UTF-8. Positions are within ``buf``.
    """
    start = pos
    length, pos = read_varint(buf, pos, len(buf))
    if length < 0 or length > len(buf) - pos:
        raise CorruptRecordError(
            f"record at {start}: length {length} does not fit the {len(buf) - pos} bytes left",
            pos=start,
        )
    body_start = pos
    end = pos + length
    if pos >= end:
        raise CorruptRecordError(f"record at {start}: empty record", pos=start)
    pos += 1  # attributes: unused in v2
    timestamp_delta, pos = read_varlong(buf, pos, end)
    offset_delta, pos = read_varint(buf, pos, end)
    key, pos = _read_bytes(buf, pos, end, "key", start)
    value, pos = _read_bytes(buf, pos, end, "value", start)
    header_count, pos = read_varint(buf, pos, end)
    if header_count < 0:
        raise CorruptRecordError(
            f"record at {start}: negative header count {header_count}", pos=start
        )
    headers: list[Header] = []
    for _ in range(header_count):
        raw_key, pos = _read_bytes(buf, pos, end, "header key", start)
        if raw_key is None:
            raise CorruptRecordError(f"record at {start}: null header key", pos=start)
        try:
            header_key = raw_key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(
                f"record at {start}: header key is not UTF-8", pos=start
            ) from exc
        header_value, pos = _read_bytes(buf, pos, end, "header value", start)
        headers.append(Header(header_key, header_value))
    if pos != end:
        raise CorruptRecordError(
            f"record at {start}: length says {length} bytes, fields use {pos - body_start}",
            pos=start,
        )
    timestamp = (
        base_timestamp + timestamp_delta if timestamp_override is None else timestamp_override
    )
    record = Record(base_offset + offset_delta, timestamp, key, value, tuple(headers))
    return record, end
