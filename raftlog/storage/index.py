"""Sparse offset and time indexes of one segment, held in memory.

Both use Kafka's on-disk entry formats, big-endian, offsets relative to the
segment's base offset:

- ``.index``: 8-byte entries ``(relative_offset int32, position int32)``;
  the entry's offset is the *last* offset of the batch starting at
  ``position`` (Kafka's ``LogSegment.append`` indexes ``batch.lastOffset``).
- ``.timeindex``: 12-byte entries ``(timestamp int64, relative_offset int32)``:
  the largest timestamp seen so far in the segment and the offset where it
  was seen; timestamps strictly increase (Kafka's ``TimeIndex.maybeAppend``).

Kafka memory-maps these files; we keep them as arrays and write the file
whole when a segment is rolled, closed or rebuilt (storage/segment.py says
when). Decoding checks them like Kafka's ``sanityCheck`` so a torn or
corrupt file is detected and rebuilt rather than trusted.
"""

from __future__ import annotations

import bisect
import struct
from array import array

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12


class CorruptIndexError(Exception):
    """An index file fails its sanity check (the segment rebuilds it)."""


class OffsetIndex:
    """Sparse map relative offset -> file position; both strictly increase."""

    __slots__ = ("_offsets", "_positions", "base_offset", "max_entries")

    def __init__(self, base_offset: int, max_entries: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._offsets = array("q")  # relative offsets
        self._positions = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def entries(self) -> list[tuple[int, int]]:
        """``(absolute_offset, position)`` pairs, oldest first."""
        return [
            (self.base_offset + o, p) for o, p in zip(self._offsets, self._positions, strict=True)
        ]

    @property
    def last_position(self) -> int:
        """Position of the last indexed batch, or 0 when empty."""
        return self._positions[-1] if self._positions else 0

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must strictly increase (invariant)."""
        relative = offset - self.base_offset
        if self._offsets and (relative <= self._offsets[-1] or position <= self._positions[-1]):
            raise AssertionError(
                f"offset index entry ({offset}, {position}) does not follow {self.entries()[-1]}"
            )
        self._offsets.append(relative)
        self._positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch whose last offset is <= ``offset``, else 0.

        A scan from there finds the batch holding ``offset``.
        """
        i = bisect.bisect_right(self._offsets, offset - self.base_offset) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after ``position``."""
        i = bisect.bisect_left(self._positions, position)
        del self._offsets[i:]
        del self._positions[i:]

    def encode(self) -> bytes:
        flat = array("q", [0]) * (2 * len(self._offsets))
        flat[0::2] = self._offsets
        flat[1::2] = self._positions
        return struct.pack(f">{len(flat)}i", *flat)

    @classmethod
    def decode(
        cls, data: bytes, base_offset: int, max_entries: int, segment_size: int
    ) -> OffsetIndex:
        """Parse and sanity-check a ``.index`` file. Raises `CorruptIndexError`."""
        if len(data) % OFFSET_ENTRY_SIZE:
            raise CorruptIndexError(f"index size {len(data)} is not a multiple of 8")
        index = cls(base_offset, max_entries)
        flat = struct.unpack(f">{len(data) // 4}i", data)
        prev_offset, prev_position = -1, -1
        for relative, position in zip(flat[0::2], flat[1::2], strict=True):
            if relative <= prev_offset or position <= prev_position or position >= segment_size:
                raise CorruptIndexError(f"bad offset index entry ({relative}, {position})")
            prev_offset, prev_position = relative, position
        index._offsets = array("q", flat[0::2])
        index._positions = array("q", flat[1::2])
        return index


class TimeIndex:
    """Sparse map max-timestamp-so-far -> relative offset; timestamps strictly increase."""

    __slots__ = ("_offsets", "_timestamps", "base_offset", "max_entries")

    def __init__(self, base_offset: int, max_entries: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._timestamps = array("q")
        self._offsets = array("q")  # relative offsets

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    def entries(self) -> list[tuple[int, int]]:
        """``(timestamp, absolute_offset)`` pairs, oldest first."""
        return [
            (t, self.base_offset + o) for t, o in zip(self._timestamps, self._offsets, strict=True)
        ]

    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, absolute_offset)`` of the newest entry."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add an entry if ``timestamp`` is newer than the last one (Kafka's rule)."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return False
        self._timestamps.append(timestamp)
        self._offsets.append(offset - self.base_offset)
        return True

    def lookup(self, timestamp: int) -> int:
        """The offset of the first entry with timestamp >= ``timestamp``, or -1.

        ListOffsets-by-time starts its scan from the previous entry's offset.
        """
        i = bisect.bisect_left(self._timestamps, timestamp)
        return self.base_offset + self._offsets[i] if i < len(self._timestamps) else -1

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        relative = offset - self.base_offset
        i = len(self._offsets)
        while i > 0 and self._offsets[i - 1] >= relative:
            i -= 1
        del self._timestamps[i:]
        del self._offsets[i:]

    def encode(self) -> bytes:
        out = bytearray()
        for t, o in zip(self._timestamps, self._offsets, strict=True):
            out += struct.pack(">qi", t, o)
        return bytes(out)

    @classmethod
    def decode(
        cls, data: bytes, base_offset: int, max_entries: int, next_relative_offset: int | None
    ) -> TimeIndex:
        """Parse and sanity-check a ``.timeindex``. Raises `CorruptIndexError`.

        ``next_relative_offset`` bounds the offsets when the segment's end is
        known (a non-active segment); None skips that check.
        """
        if len(data) % TIME_ENTRY_SIZE:
            raise CorruptIndexError(f"time index size {len(data)} is not a multiple of 12")
        index = cls(base_offset, max_entries)
        prev_ts, prev_offset = None, -1
        for pos in range(0, len(data), TIME_ENTRY_SIZE):
            timestamp, relative = struct.unpack_from(">qi", data, pos)
            bad_order = prev_ts is not None and timestamp <= prev_ts
            out_of_range = relative < prev_offset or (
                next_relative_offset is not None and relative >= next_relative_offset
            )
            if bad_order or out_of_range or relative < 0:
                raise CorruptIndexError(f"bad time index entry ({timestamp}, {relative})")
            index._timestamps.append(timestamp)
            index._offsets.append(relative)
            prev_ts, prev_offset = timestamp, relative
        return index
