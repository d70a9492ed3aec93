"""Primitive field codecs of the metadata record encoding (layout in ``metadata_quorum.records``).

Every decoder reads from a `Reader` and raises only `MetadataRecordError`;
encoders append to a ``bytearray`` and assume the value was validated by the
record's ``__post_init__`` (so they never see out-of-range input).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from .errors import MetadataRecordError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

INT8_MIN, INT8_MAX = -(1 << 7), (1 << 7) - 1
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class Reader:
    """A cursor over one record value; every short read is a `MetadataRecordError`."""

    __slots__ = ("_data", "pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.remaining < n:
            raise MetadataRecordError(
                f"truncated record: need {n} bytes at position {self.pos}, have {self.remaining}"
            )
        chunk = self._data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def _unpack(self, st: struct.Struct) -> int:
        value: int = st.unpack(self.take(st.size))[0]
        return value

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)


# A field codec: (encode(value, out), decode(reader) -> value).
Encoder = Callable[[Any, bytearray], None]
Decoder = Callable[[Reader], Any]


def enc_int8(v: int, out: bytearray) -> None:
    out += _I8.pack(v)


def enc_int16(v: int, out: bytearray) -> None:
    out += _I16.pack(v)


def enc_int32(v: int, out: bytearray) -> None:
    out += _I32.pack(v)


def enc_int64(v: int, out: bytearray) -> None:
    out += _I64.pack(v)


def dec_int8(r: Reader) -> int:
    return r.int8()


def dec_int16(r: Reader) -> int:
    return r.int16()


def dec_int32(r: Reader) -> int:
    return r.int32()


def dec_int64(r: Reader) -> int:
    return r.int64()


def enc_float64(v: float, out: bytearray) -> None:
    out += _F64.pack(v)


def dec_float64(r: Reader) -> float:
    value: float = _F64.unpack(r.take(_F64.size))[0]
    return value


def enc_bool(v: bool, out: bytearray) -> None:
    out += b"\x01" if v else b"\x00"


def dec_bool(r: Reader) -> bool:
    raw = r.int8()
    if raw not in (0, 1):
        raise MetadataRecordError(f"boolean byte must be 0 or 1, got {raw}")
    return raw == 1


def enc_tristate(v: bool | None, out: bytearray) -> None:
    """None (unchanged) = -1, False = 0, True = 1."""
    out += _I8.pack(-1 if v is None else int(v))


def dec_tristate(r: Reader) -> bool | None:
    raw = r.int8()
    if raw not in (-1, 0, 1):
        raise MetadataRecordError(f"tri-state byte must be -1, 0 or 1, got {raw}")
    return None if raw == -1 else raw == 1


def enc_uuid(v: uuid.UUID, out: bytearray) -> None:
    out += v.bytes


def dec_uuid(r: Reader) -> uuid.UUID:
    return uuid.UUID(bytes=r.take(16))


def enc_nullable_string(v: str | None, out: bytearray) -> None:
    if v is None:
        out += _I16.pack(-1)
        return
    raw = v.encode("utf-8")
    out += _I16.pack(len(raw))
    out += raw


def enc_string(v: str, out: bytearray) -> None:
    enc_nullable_string(v, out)


def dec_nullable_string(r: Reader) -> str | None:
    n = r.int16()
    if n == -1:
        return None
    if n < 0:
        raise MetadataRecordError(f"negative string length {n}")
    raw = r.take(n)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataRecordError(f"string is not UTF-8: {exc}") from None


def dec_string(r: Reader) -> str:
    s = dec_nullable_string(r)
    if s is None:
        raise MetadataRecordError("null where a non-null string is required")
    return s


def enc_bytes(v: bytes, out: bytearray) -> None:
    """int32 length N >= 0, then the N bytes (Kafka's non-flexible ``bytes``)."""
    out += _I32.pack(len(v))
    out += v


def dec_bytes(r: Reader) -> bytes:
    n = r.int32()
    if n < 0:
        raise MetadataRecordError(f"negative bytes length {n}")
    return r.take(n)  # checks the length before allocating anything


def enc_nullable_int32s(v: tuple[int, ...] | None, out: bytearray) -> None:
    if v is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(v))
    out += struct.pack(f">{len(v)}i", *v)


def enc_int32s(v: tuple[int, ...], out: bytearray) -> None:
    enc_nullable_int32s(v, out)


def dec_nullable_int32s(r: Reader) -> tuple[int, ...] | None:
    n = r.int32()
    if n == -1:
        return None
    if n < 0:
        raise MetadataRecordError(f"negative array length {n}")
    raw = r.take(4 * n)  # checks the length before allocating anything
    return tuple(struct.unpack(f">{n}i", raw))


def dec_int32s(r: Reader) -> tuple[int, ...]:
    v = dec_nullable_int32s(r)
    if v is None:
        raise MetadataRecordError("null where a non-null array is required")
    return v


def enc_strings(v: tuple[str, ...], out: bytearray) -> None:
    """int32 count N >= 0, then N non-null strings (Kafka's ``[]string``)."""
    out += _I32.pack(len(v))
    for item in v:
        enc_string(item, out)


def dec_strings(r: Reader) -> tuple[str, ...]:
    n = r.int32()
    # Every string takes >= 2 bytes (its length), so a count above what is
    # left is a lie; refusing it here bounds the work a corrupt count causes.
    if n < 0 or 2 * n > r.remaining:
        raise MetadataRecordError(f"bad string array count {n}")
    return tuple(dec_string(r) for _ in range(n))


def check_int(name: str, value: int, lo: int, hi: int) -> None:
    """Raise ValueError/TypeError unless ``value`` is an int (not bool) in [lo, hi]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is outside [{lo}, {hi}]")


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def check_string(name: str, value: object, *, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if len(value.encode("utf-8", errors="strict")) > INT16_MAX:
        raise ValueError(f"{name} is longer than {INT16_MAX} bytes")


def check_bytes(name: str, value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    if len(value) > INT32_MAX:
        raise ValueError(f"{name} is longer than {INT32_MAX} bytes")


def check_uuid(name: str, value: object) -> None:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"{name} must be a uuid.UUID, got {type(value).__name__}")


def check_broker_ids(name: str, value: object, *, nullable: bool = False) -> None:
    """A tuple of distinct broker ids in [0, INT32_MAX]."""
    if value is None and nullable:
        return
    if not isinstance(value, tuple):
        raise TypeError(f"{name} must be a tuple, got {type(value).__name__}")
    for item in value:
        check_int(f"{name} member", item, 0, INT32_MAX)
    if len(set(value)) != len(value):
        raise ValueError(f"{name} {value} has duplicates")
