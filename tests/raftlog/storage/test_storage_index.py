"""Offset and time indexes: lookups, Kafka's entry formats, sanity checks."""

from __future__ import annotations

import struct

import pytest

from raftlog.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def offset_index(*entries: tuple[int, int], base: int = 100) -> OffsetIndex:
    index = OffsetIndex(base, max_entries=10)
    for offset, position in entries:
        index.append(offset, position)
    return index


def test_lookup_is_a_floor_on_last_offsets() -> None:
    index = offset_index((104, 500), (109, 1000))
    assert index.lookup(100) == 0  # before the first entry: scan from the start
    assert index.lookup(104) == 500
    assert index.lookup(108) == 500
    assert index.lookup(109) == 1000
    assert index.lookup(500) == 1000


def test_entries_must_strictly_increase() -> None:
    index = offset_index((104, 500))
    with pytest.raises(AssertionError):
        index.append(104, 600)
    with pytest.raises(AssertionError):
        index.append(105, 500)


def test_offset_index_file_format_is_kafkas_8_byte_entries() -> None:
    index = offset_index((104, 500), (109, 1000))
    assert index.encode() == struct.pack(">iiii", 4, 500, 9, 1000)
    back = OffsetIndex.decode(index.encode(), 100, 10, segment_size=2000)
    assert back.entries() == [(104, 500), (109, 1000)]


@pytest.mark.parametrize(
    "data",
    [
        b"\x00" * 7,  # not whole entries
        struct.pack(">iiii", 4, 500, 3, 1000),  # offsets go back
        struct.pack(">iiii", 4, 500, 9, 400),  # positions go back
        struct.pack(">ii", 4, 5000),  # beyond the segment
    ],
)
def test_offset_index_sanity_check(data: bytes) -> None:
    with pytest.raises(CorruptIndexError):
        OffsetIndex.decode(data, 100, 10, segment_size=2000)


def test_truncate_to_position_and_fullness() -> None:
    index = OffsetIndex(0, max_entries=2)
    index.append(3, 100)
    assert not index.is_full
    index.append(7, 200)
    assert index.is_full
    index.truncate_to_position(200)
    assert index.entries() == [(3, 100)]
    assert index.last_position == 100


def test_time_index_keeps_only_newer_timestamps() -> None:
    index = TimeIndex(100, max_entries=10)
    assert index.maybe_append(50, 101)
    assert not index.maybe_append(50, 103)
    assert not index.maybe_append(40, 104)
    assert index.maybe_append(60, 105)
    assert index.entries() == [(50, 101), (60, 105)]
    assert index.last_entry() == (60, 105)
    assert index.lookup(55) == 105
    assert index.lookup(70) == -1


def test_time_index_format_truncation_and_sanity() -> None:
    index = TimeIndex(100, max_entries=10)
    index.maybe_append(50, 101)
    index.maybe_append(60, 105)
    assert index.encode() == struct.pack(">qiqi", 50, 1, 60, 5)
    back = TimeIndex.decode(index.encode(), 100, 10, next_relative_offset=6)
    assert back.entries() == index.entries()
    with pytest.raises(CorruptIndexError):
        TimeIndex.decode(index.encode(), 100, 10, next_relative_offset=5)
    with pytest.raises(CorruptIndexError):
        TimeIndex.decode(struct.pack(">qiqi", 60, 1, 50, 5), 100, 10, None)
    with pytest.raises(CorruptIndexError):
        TimeIndex.decode(b"\x00" * 13, 100, 10, None)
    index.truncate_to_offset(105)
    assert index.entries() == [(50, 101)]
