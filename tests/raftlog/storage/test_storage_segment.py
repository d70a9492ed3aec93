"""LogSegment: append and index rule, reads, truncation, loading and recovery."""

from __future__ import annotations

import pytest
from storage_helpers import batch_offsets, make_batch

from raftlog.records import BATCH_HEADER_SIZE, parse_header
from raftlog.storage import LogConfig, LogSegment
from raftlog.storage.index import CorruptIndexError
from raftlog.storage.segment import parse_segment_file_name, segment_file_name
from raftlog.testing.disk import FakeFileSystem

D = "/seg"
CONFIG = LogConfig(index_interval_bytes=150)


def new_segment(fs: FakeFileSystem, base: int = 100) -> LogSegment:
    fs.make_dirs(D)
    return LogSegment.create(fs, D, base, CONFIG, now_ms=0)


def fill(segment: LogSegment, batches: int, records: int = 3, base: int = 100) -> list[bytes]:
    out = []
    offset = base
    for i in range(batches):
        data = make_batch(records, base_offset=offset, timestamp_ms=1000 + 10 * i, epoch=1)
        h = parse_header(data)
        segment.append([data], [(h.last_offset, h.max_timestamp, h.size_in_bytes)])
        out.append(data)
        offset = h.next_offset
    return out


def index_state(segment: LogSegment) -> tuple[object, ...]:
    return (
        segment.offset_index.entries(),
        segment.time_index.entries(),
        segment.next_offset,
        segment.max_timestamp,
        segment.offset_of_max_timestamp,
        segment.bytes_since_last_index_entry,
    )


def test_file_names_are_20_digit_base_offsets() -> None:
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    assert parse_segment_file_name("00000000000000000042.timeindex") == (42, ".timeindex")
    assert parse_segment_file_name("leader-epoch-checkpoint") is None
    assert parse_segment_file_name("0042.log") is None


def test_index_entry_once_more_than_the_interval_was_written() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    batches = fill(segment, 6)
    size = len(batches[0])  # every batch has the same size
    assert 75 < size <= 150  # so an entry every second batch
    # Kafka: the first batch is never indexed; then whenever > interval bytes passed.
    assert [p for _, p in segment.offset_index.entries()] == [2 * size, 4 * size]
    assert segment.next_offset == 118
    assert segment.max_timestamp == 1052
    assert segment.time_index.last_entry() == (1042, 114)  # batch [112, 114]


def test_read_returns_whole_batches_from_the_one_holding_the_offset() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    batches = fill(segment, 6)
    size = len(batches[0])
    assert batch_offsets(segment.read(107, 2 * size, None)) == [(106, 108), (109, 111)]
    # max_bytes smaller than a batch still returns that batch
    assert batch_offsets(segment.read(100, 1, None)) == [(100, 102)]
    # max_offset excludes batches reaching it
    assert batch_offsets(segment.read(100, 10_000, 109)) == [(100, 102), (103, 105), (106, 108)]
    assert segment.read(109, 10_000, 109) == b""
    assert segment.read(118, 10_000, None) == b""


def test_truncate_rebuilds_indexes_exactly_as_a_scan_would() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    fill(segment, 6)
    removed = segment.truncate_to(110)  # inside batch [109, 111]: it goes whole
    assert removed > 0
    assert segment.next_offset == 109
    fresh = LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0)
    fresh.recover()
    assert index_state(fresh) == index_state(segment)


def test_load_indexes_after_write_matches_the_live_state() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    fill(segment, 7)
    segment.log_file.sync()
    segment.write_indexes()
    loaded = LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0)
    loaded.load_indexes()
    assert index_state(loaded) == index_state(segment)
    assert loaded.rolling_based_timestamp == 1002


def test_load_indexes_rejects_a_missing_or_wrong_index() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    fill(segment, 7)
    segment.log_file.sync()
    with pytest.raises(CorruptIndexError):  # never written
        LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0).load_indexes()
    segment.write_indexes()
    # An index that lost its last entry is caught by the tail walk.
    fs.corrupt(segment.path(".index"), 0, b"")
    data = fs.file_bytes(segment.path(".index"))
    handle = fs.open(segment.path(".index"))
    handle.truncate(len(data) - 8)
    handle.sync()
    with pytest.raises(CorruptIndexError):
        LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0).load_indexes()


def test_recover_truncates_a_partial_batch_and_reports_epochs() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    batches = fill(segment, 4)
    segment.log_file.append(batches[0][: BATCH_HEADER_SIZE + 5])  # torn write
    result = LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0).recover()
    assert result.valid_bytes == sum(map(len, batches))
    assert result.truncated_bytes == BATCH_HEADER_SIZE + 5
    assert result.epoch_starts == [(1, 100)]


def test_recover_stops_at_a_bad_crc_and_at_a_non_contiguous_batch() -> None:
    fs = FakeFileSystem()
    segment = new_segment(fs)
    batches = fill(segment, 4)
    size = len(batches[0])
    fs.corrupt(segment.path(".log"), 2 * size + BATCH_HEADER_SIZE + 2, b"\xee")
    recovered = LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0)
    result = recovered.recover()
    assert result.valid_bytes == 2 * size
    assert recovered.next_offset == 106

    # A valid batch whose offsets do not continue the segment is garbage.
    recovered.log_file.append(make_batch(3, base_offset=500))
    again = LogSegment.open_existing(fs, D, 100, CONFIG, now_ms=0)
    assert again.recover().valid_bytes == 2 * size
