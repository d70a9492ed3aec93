"""Zig-zag varints, as used inside Kafka v2 records.

Kafka (KIP-98, ``ByteUtils.writeVarint``/``writeVarlong``) encodes record
fields as protobuf-style base-128 varints of the zig-zag transform, so small
negative numbers (a null length, -1) stay one byte. An int32 varint takes at
most 5 bytes and an int64 varlong at most 10; anything longer, or whose value
does not fit the type, is corrupt.
"""

from __future__ import annotations

from .errors import VarintError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def _zigzag_bytes(unsigned: int, out: bytearray) -> None:
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)


def write_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint of int32 ``value``; raises ValueError if out of range."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} is outside int32")
    _zigzag_bytes(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF, out)


def write_varlong(value: int, out: bytearray) -> None:
    """Append the zig-zag varlong of int64 ``value``; raises ValueError if out of range."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} is outside int64")
    _zigzag_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def varint_size(value: int) -> int:
    """Bytes ``write_varint(value)`` would append."""
    unsigned = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    size = 1
    while unsigned > 0x7F:
        unsigned >>= 7
        size += 1
    return size


def _read(buf: bytes, pos: int, end: int, max_bytes: int, bits: int, what: str) -> tuple[int, int]:
    unsigned = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise VarintError(f"{what} at {start} is cut off at {end}", pos=start)
        if pos - start >= max_bytes:
            raise VarintError(f"{what} at {start} is longer than {max_bytes} bytes", pos=start)
        byte = buf[pos]
        pos += 1
        unsigned |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    if unsigned >> bits:
        raise VarintError(f"{what} at {start} does not fit in int{bits}", pos=start)
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read an int32 zig-zag varint from ``buf[pos:end]``; returns (value, next pos).

    Raises VarintError if it runs past ``end``, is longer than 5 bytes, or
    decodes to more than 32 bits.
    """
    return _read(buf, pos, end, _MAX_VARINT_BYTES, 32, "varint")


def read_varlong(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read an int64 zig-zag varlong from ``buf[pos:end]``; returns (value, next pos).

    Raises VarintError if it runs past ``end``, is longer than 10 bytes, or
    decodes to more than 64 bits.
    """
    return _read(buf, pos, end, _MAX_VARLONG_BYTES, 64, "varlong")
