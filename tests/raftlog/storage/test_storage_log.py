"""Log: appends as leader and follower, reads, rolls, truncation, retention,
flush policy and group commit, recovery and clean shutdown (over the fake disk)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from storage_helpers import LOG_DIR, batch_offsets, make_batch, read_all

from raftlog.records import BATCH_HEADER_SIZE, iter_batches, parse_header, validate_batches
from raftlog.storage import (
    EpochEntry,
    InvalidEpochError,
    InvalidRecordBatchError,
    Log,
    LogClosedError,
    LogConfig,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

OpenLog = Callable[..., Log]
T0 = 1_700_000_000_000


def files(fs: FakeFileSystem) -> list[str]:
    return fs.list_dir(LOG_DIR)


# --- appends ------------------------------------------------------------------


def test_leader_append_assigns_offsets_and_epoch_without_touching_the_crc(
    open_log: OpenLog,
) -> None:
    log = open_log()
    info = log.append_as_leader(make_batch(3), leader_epoch=4, now_ms=T0)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 2, 3)
    info = log.append_as_leader(make_batch(2) + make_batch(5), leader_epoch=4, now_ms=T0)
    assert (info.first_offset, info.last_offset, info.batch_count) == (3, 9, 2)
    assert log.log_end_offset == 10
    headers = [h for h, _ in iter_batches(read_all(log))]  # iter_batches checks CRCs
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 4), (3, 4), (5, 4)]
    assert log.epoch_entries == [EpochEntry(4, 0)]


@pytest.mark.parametrize("buffer", [bytes, bytearray])
def test_log_append_time_stamps_each_batch_with_the_leaders_clock(
    open_log: OpenLog, buffer: Callable[[bytes], bytes | bytearray],
) -> None:
    """``message.timestamp.type=LogAppendTime``: whatever the producer's
    timestamps, each batch gets maxTimestamp = the append time and the
    LOG_APPEND_TIME attribute, with a fresh CRC (the records are untouched;
    readers take their timestamps from maxTimestamp). CreateTime keeps them."""
    from raftlog.records import TimestampType, decode_records

    log = open_log(message_timestamp_type="LogAppendTime")
    old = 1_000_000_000_000
    info = log.append_as_leader(buffer(make_batch(2, timestamp_ms=old) + make_batch(
        3, timestamp_ms=old + 5)), leader_epoch=0, now_ms=T0)
    assert info.max_timestamp == T0
    data = read_all(log)
    headers = [h for h, _ in iter_batches(data)]  # checks every CRC
    assert [(h.timestamp_type, h.max_timestamp) for h in headers] == [
        (TimestampType.LOG_APPEND_TIME, T0)] * 2
    assert {r.timestamp for r in decode_records(data)} == {T0}
    # Listing offsets by time and rolling by segment.ms see the append time.
    assert log.active_segment.max_timestamp == T0
    log.reconfigure(LogConfig())  # back to CreateTime: the producer's timestamps stay
    log.append_as_leader(buffer(make_batch(1, timestamp_ms=old)), leader_epoch=0, now_ms=T0)
    ((header, _),) = iter_batches(read_all(log, 5))
    assert (header.timestamp_type, header.max_timestamp) == (TimestampType.CREATE_TIME, old)


def test_leader_append_rewrites_a_bytearray_in_place(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=T0)
    buf = bytearray(make_batch(3))
    log.append_as_leader(buf, leader_epoch=1, now_ms=T0)
    assert parse_header(buf).base_offset == 2
    assert read_all(log, 2) == bytes(buf)


def test_new_leader_epoch_updates_the_epoch_cache(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(3), leader_epoch=1, now_ms=T0)
    log.append_as_leader(make_batch(3), leader_epoch=1, now_ms=T0)
    log.append_as_leader(make_batch(3), leader_epoch=5, now_ms=T0)
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(5, 6)]
    assert log.latest_epoch == 5
    assert log.end_offset_for_epoch(1) == (1, 6)
    assert log.end_offset_for_epoch(3) == (1, 6)
    assert log.end_offset_for_epoch(5) == (5, 9)
    with pytest.raises(InvalidEpochError):
        log.append_as_leader(make_batch(1), leader_epoch=4, now_ms=T0)


@pytest.mark.parametrize(
    "bad",
    [b"", make_batch(2)[:-1], make_batch(2) + b"\x00" * 10],
)
def test_leader_append_rejects_what_is_not_whole_valid_batches(
    open_log: OpenLog, bad: bytes
) -> None:
    log = open_log()
    with pytest.raises(InvalidRecordBatchError):
        log.append_as_leader(bad, leader_epoch=0, now_ms=T0)
    corrupt = bytearray(make_batch(2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(InvalidRecordBatchError, match="CRC"):
        log.append_as_leader(bytes(corrupt), leader_epoch=0, now_ms=T0)
    assert log.log_end_offset == 0


def test_size_limits(open_log: OpenLog) -> None:
    log = open_log(message_max_bytes=200, segment_bytes=300)
    with pytest.raises(RecordTooLargeError, match=r"message\.max\.bytes"):
        log.append_as_leader(make_batch(1, value_size=300), leader_epoch=0, now_ms=T0)
    small = make_batch(1, value_size=60)
    with pytest.raises(RecordTooLargeError, match=r"segment\.bytes"):
        log.append_as_leader(small * 4, leader_epoch=0, now_ms=T0)
    # Headers the caller validated skip the second CRC pass, not the limits.
    big = make_batch(1, value_size=300)
    with pytest.raises(RecordTooLargeError, match=r"message\.max\.bytes"):
        log.append_as_leader(big, leader_epoch=0, now_ms=T0, validated=validate_batches(big))
    info = log.append_as_leader(small, leader_epoch=0, now_ms=T0,
                                validated=validate_batches(small))
    assert (info.first_offset, info.last_offset) == (0, 0)


def test_a_follower_takes_a_batch_above_its_message_max_bytes(open_log: OpenLog) -> None:
    # The leader accepted it (before max.message.bytes was lowered, or under
    # its own limit): refusing it would stop replication at this offset for
    # good. Kafka's followers ignore the record size too.
    log = open_log(message_max_bytes=200)
    big = make_batch(1, value_size=300, base_offset=0, epoch=0)
    info = log.append_as_follower(big, now_ms=T0)
    assert (info.first_offset, info.last_offset) == (0, 0)
    with pytest.raises(RecordTooLargeError, match=r"message\.max\.bytes"):
        log.append_as_leader(make_batch(1, value_size=300), leader_epoch=0, now_ms=T0)


def test_follower_append_keeps_offsets_and_epochs(open_log: OpenLog) -> None:
    log = open_log()
    data = make_batch(2, base_offset=0, epoch=1) + make_batch(3, base_offset=2, epoch=3)
    info = log.append_as_follower(data, now_ms=T0)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert read_all(log) == data
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(3, 2)]
    empty = log.append_as_follower(b"")
    assert (empty.records_count, log.log_end_offset) == (0, 5)


@pytest.mark.parametrize("base", [4, 6])
def test_follower_append_rejects_gaps_and_overlaps(open_log: OpenLog, base: int) -> None:
    log = open_log()
    log.append_as_follower(make_batch(5, base_offset=0, epoch=1))
    with pytest.raises(UnexpectedAppendOffsetError) as info:
        log.append_as_follower(make_batch(1, base_offset=base, epoch=1))
    assert info.value.expected_offset == 5
    within = make_batch(1, base_offset=5, epoch=1) + make_batch(1, base_offset=7, epoch=1)
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(within)
    with pytest.raises(InvalidEpochError):
        log.append_as_follower(make_batch(1, base_offset=5, epoch=0))
    assert log.log_end_offset == 5


# --- reads --------------------------------------------------------------------


def test_read_returns_at_least_one_batch_and_respects_bounds(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=600, index_interval_bytes=100)
    for i in range(20):
        log.append_as_leader(make_batch(3, tag=i), leader_epoch=0, now_ms=T0)
    assert len(log.segments) > 3
    size = len(make_batch(3))
    for offset in range(60):
        data = log.read(offset, size).records
        first = next(iter_batches(data))[0]
        assert first.base_offset <= offset <= first.last_offset
    assert batch_offsets(log.read(4, 1).records) == [(3, 5)]  # bigger than max_bytes
    assert batch_offsets(log.read(0, 3 * size).records) == [(0, 2), (3, 5), (6, 8)]
    assert log.read(60, 100).records == b""
    assert batch_offsets(log.read(0, 10 * size, max_offset=6).records) == [(0, 2), (3, 5)]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(61, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_reads_and_readable_bytes_agree_over_remembered_and_scanned_batches(
    open_log: OpenLog, fs: FakeFileSystem,
) -> None:
    # 300 batches in one segment: the newest (up to 128) are remembered, the
    # older ones are found by a header scan from the sparse index.
    log = open_log(index_interval_bytes=4096)
    for i in range(300):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=T0)
    size = len(make_batch(2))
    for offset in range(0, 600, 7):
        for max_bytes, bound in ((1, None), (3 * size, None), (10 * size, offset + 5)):
            data = log.read(offset, max_bytes, max_offset=bound).records
            assert log.readable_bytes(offset, max_bytes, bound) == len(data)
            if bound is None:
                first = next(iter_batches(data))[0]
                assert first.base_offset <= offset <= first.last_offset
    assert log.readable_bytes(600, 100) == 0
    # Reading the newest batch, as a caught-up follower does, scans no header.
    reads_before = fs.reads
    assert batch_offsets(log.read(598, size).records) == [(598, 599)]
    assert fs.reads == reads_before + 1
    with pytest.raises(OffsetOutOfRangeError):
        log.readable_bytes(601, 100)


def test_truncation_forgets_remembered_batches(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(10):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=T0)
    assert log.truncate_to(10)
    log.append_as_leader(make_batch(5, tag=99), leader_epoch=1, now_ms=T0)
    assert batch_offsets(log.read(10, 10_000).records) == [(10, 14)]
    assert log.readable_bytes(10, 10_000) == len(make_batch(5, tag=99))
    assert log.readable_bytes(8, 1) == len(make_batch(2))


# --- rolling -------------------------------------------------------------------


def test_roll_by_segment_bytes(open_log: OpenLog) -> None:
    size = len(make_batch(3))
    log = open_log(segment_bytes=3 * size)
    for _ in range(7):
        log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=T0)
    assert [s.base_offset for s in log.segments] == [0, 9, 18]
    assert [s.size for s in log.segments] == [3 * size, 3 * size, size]
    assert f"{9:020d}.log" in files(log._fs)  # type: ignore[attr-defined]


def test_roll_by_segment_ms_compares_message_timestamps(open_log: OpenLog) -> None:
    # Kafka's shouldRoll: the new batch's max timestamp minus the segment's
    # first batch timestamp, whatever the broker's clock says.
    log = open_log(segment_ms=1000)
    log.append_as_leader(make_batch(1, timestamp_ms=T0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(make_batch(1, timestamp_ms=T0 + 1000), leader_epoch=0, now_ms=T0 + 5000)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, timestamp_ms=T0 + 1001), leader_epoch=0, now_ms=T0 + 5000)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # The same rule for replicated batches.
    log.append_as_follower(make_batch(1, timestamp_ms=T0 + 3002, base_offset=3, epoch=0),
                         now_ms=T0)
    assert [s.base_offset for s in log.segments] == [0, 2, 3]


def test_old_message_timestamps_do_not_roll_a_segment_per_append(open_log: OpenLog) -> None:
    # A backfill: records a month old, appended now. Rolling on the broker's
    # clock would open two files per append until the descriptors run out.
    log = open_log(segment_ms=7 * 24 * 3600 * 1000)
    month_ago = T0 - 30 * 24 * 3600 * 1000
    for i in range(50):
        log.append_as_leader(make_batch(1, timestamp_ms=month_ago + i), leader_epoch=0,
                             now_ms=T0 + i)
    assert len(log.segments) == 1


def test_roll_by_segment_ms_without_timestamps_uses_the_creation_time(open_log: OpenLog) -> None:
    log = open_log(segment_ms=1000)
    log.append_as_leader(make_batch(1, timestamp_ms=-1), leader_epoch=0, now_ms=T0)
    created = log.segments[0].created_ms
    log.append_as_leader(make_batch(1, timestamp_ms=-1), leader_epoch=0, now_ms=created + 1000)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, timestamp_ms=-1), leader_epoch=0, now_ms=created + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_the_offset_index_is_full(open_log: OpenLog) -> None:
    log = open_log(index_interval_bytes=0, segment_index_bytes=24)  # 3 entries max
    for _ in range(10):
        log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=T0)
    assert all(len(s.offset_index) <= 3 for s in log.segments)
    assert len(log.segments) > 1
    assert len(read_all(log)) == 10 * len(make_batch(1))


# --- truncation, delete-records, retention ---------------------------------------


def test_truncate_to_across_segments_fixes_indexes_and_epochs(
    open_log: OpenLog, fs: FakeFileSystem
) -> None:
    log = open_log(segment_bytes=400, index_interval_bytes=50)
    for i in range(12):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=i // 4, now_ms=T0)
    assert log.epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 8), EpochEntry(2, 16)]
    assert log.truncate_to(11)  # inside batch [10, 11]: it goes whole
    assert log.log_end_offset == 10
    assert log.epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 8)]
    assert log.flushed_offset <= 10
    assert not log.truncate_to(50)
    assert batch_offsets(read_all(log))[-1] == (8, 9)
    kept = read_all(log)
    log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=T0)
    assert log.epoch_entries[-1] == EpochEntry(3, 10)
    fs.crash()  # the truncation was durable; the unflushed append is lost
    reopened = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert read_all(reopened) == kept
    # Epoch 3 was checkpointed before its batch; it starts at the end, so it stays.
    assert reopened.epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 8), EpochEntry(3, 10)]


def test_truncate_fully_and_start_at(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log(segment_bytes=400)
    for _ in range(8):
        log.append_as_leader(make_batch(2), leader_epoch=1, now_ms=T0)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (1000, 1000, [])
    assert [s.base_offset for s in log.segments] == [1000]
    log.append_as_follower(make_batch(2, base_offset=1000, epoch=7))
    fs.crash()
    reopened = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert reopened.log_start_offset == 1000
    assert reopened.log_end_offset in (1000, 1002)


def test_delete_records_moves_the_start_and_deletes_whole_segments(
    open_log: OpenLog, fs: FakeFileSystem
) -> None:
    size = len(make_batch(2))
    log = open_log(segment_bytes=2 * size)
    for i in range(6):
        log.append_as_leader(make_batch(2), leader_epoch=i, now_ms=T0)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    assert log.delete_records_before(5)
    assert log.log_start_offset == 5
    assert [s.base_offset for s in log.segments] == [4, 8]
    assert log.epoch_entries[0] == EpochEntry(2, 5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    assert batch_offsets(log.read(5, 1).records) == [(4, 5)]  # whole batch, Kafka's rule
    assert not log.delete_records_before(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(13)
    assert LOG_START_OFFSET_FILE in files(fs)
    fs.crash()
    assert Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock()).log_start_offset == 5
    log = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    leo = log.log_end_offset
    assert log.delete_records_before(leo)  # up to the end: rolls, deletes all old
    assert [s.base_offset for s in log.segments] == [leo]
    assert log.log_end_offset == leo


def test_retention_ms_judges_a_segment_by_its_newest_record(open_log: OpenLog) -> None:
    day = 86_400_000
    size = len(make_batch(1))
    log = open_log(segment_bytes=2 * size, retention_ms=7 * day)
    ts = [T0, T0 + 5 * day, T0 + 1 * day, T0 + 6 * day, T0 + 10 * day]
    for t in ts:
        log.append_as_leader(make_batch(1, timestamp_ms=t), leader_epoch=0, now_ms=t)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    # Day 12: segment 0's oldest record is 12 days old but its newest is 7 days: kept.
    assert log.apply_retention(now_ms=T0 + 12 * day) == 0
    assert log.apply_retention(now_ms=T0 + 12 * day + 1) == 1
    assert log.log_start_offset == 2
    # The active segment is never deleted, however old.
    assert log.apply_retention(now_ms=T0 + 100 * day) == 1
    assert [s.base_offset for s in log.segments] == [4]
    assert log.log_start_offset == 4


def test_retention_bytes_and_high_watermark_bound(open_log: OpenLog) -> None:
    size = len(make_batch(1))
    log = open_log(segment_bytes=size, retention_bytes=2 * size, retention_ms=-1)
    for _ in range(6):
        log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=T0)
    assert len(log.segments) == 6
    assert log.apply_retention(now_ms=T0, high_watermark=2) == 2
    assert log.apply_retention(now_ms=T0) == 2
    assert log.size_in_bytes == 2 * size
    assert log.log_start_offset == 4


# --- flushing -------------------------------------------------------------------


def test_group_commit_many_appends_one_sync(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=T0)  # writes the epoch checkpoint
    before = fs.sync_count
    for _ in range(49):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=T0)
    assert fs.sync_count == before  # no sync per append by default
    assert log.flushed_offset == 0
    assert log.flush() == 100
    assert fs.sync_count == before + 1
    assert log.flush() == 100
    assert fs.sync_count == before + 1  # nothing new: no sync


def test_flush_messages_one_syncs_every_append(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log(flush_messages=1)
    for i in range(5):
        log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=T0)
        assert log.flushed_offset == i + 1
    fs.crash()
    assert Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock()).log_end_offset == 5


def test_flush_messages_counts_records(open_log: OpenLog) -> None:
    log = open_log(flush_messages=5)
    log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=T0)
    assert log.flushed_offset == 0
    log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=T0)
    assert log.flushed_offset == 6


def test_flush_ms(fs: FakeFileSystem, clock: FakeClock, open_log: OpenLog) -> None:
    log = open_log(flush_ms=100)
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=clock.wall_ms())
    assert not log.maybe_flush(clock.wall_ms() + 100)
    assert log.maybe_flush(clock.wall_ms() + 101)
    assert log.flushed_offset == 1
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=clock.wall_ms() + 500)
    assert log.flushed_offset == 2  # the append itself saw flush.ms expire


def test_flush_from_a_worker_thread_while_appending(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=2000)
    stop = threading.Event()
    flushed: list[int] = []

    def flusher() -> None:
        while not stop.is_set():
            flushed.append(log.flush())

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for i in range(300):
            log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=T0)
    finally:
        stop.set()
        worker.join()
    assert flushed == sorted(flushed)  # flushed_offset never goes back
    assert log.flush() == 600
    assert len(batch_offsets(read_all(log))) == 300


# --- recovery and clean shutdown ---------------------------------------------------


def test_crash_loses_exactly_the_unflushed_tail(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log(segment_bytes=500)
    for _ in range(10):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=T0)
    log.flush()
    for _ in range(10):
        log.append_as_leader(make_batch(2), leader_epoch=1, now_ms=T0)
    flushed = log.flushed_offset  # rolls synced the segments they closed
    assert 20 <= flushed < log.log_end_offset
    durable = read_all(log)[: flushed // 2 * len(make_batch(2))]
    fs.crash()
    reopened = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert not reopened.opened_cleanly
    assert reopened.recovered_segment_count == 1  # only the last segment
    assert read_all(reopened) == durable
    assert reopened.epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 20)][: 1 + (flushed > 20)]


def test_corrupt_tail_is_truncated_at_the_first_bad_crc(
    open_log: OpenLog, fs: FakeFileSystem
) -> None:
    log = open_log()
    for _ in range(5):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=T0)
    log.flush()
    size = len(make_batch(2))
    path = log.active_segment.path(".log")
    fs.corrupt(path, 3 * size + BATCH_HEADER_SIZE + 1, b"\x99")
    fs.crash()
    reopened = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert reopened.log_end_offset == 6
    assert len(fs.file_bytes(path)) == 3 * size


def test_clean_shutdown_skips_the_rescan(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log(segment_bytes=500, index_interval_bytes=50)
    for i in range(20):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=i // 5, now_ms=T0)
    content = read_all(log)
    log.close()
    assert CLEAN_SHUTDOWN_FILE in files(fs)
    with pytest.raises(LogClosedError):
        log.append_as_leader(make_batch(1), leader_epoch=9, now_ms=T0)
    reopened = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert reopened.opened_cleanly
    assert reopened.recovered_segment_count == 0
    assert CLEAN_SHUTDOWN_FILE not in files(fs)  # removed, so a crash now means recovery
    assert read_all(reopened) == content
    assert reopened.epoch_entries == log.epoch_entries
    fs.crash()
    again = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert not again.opened_cleanly
    assert again.recovered_segment_count == 1


def test_missing_or_corrupt_indexes_are_rebuilt(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log(segment_bytes=500, index_interval_bytes=50)
    for i in range(20):
        log.append_as_leader(make_batch(2, tag=i), leader_epoch=0, now_ms=T0)
    content = read_all(log)
    entries = [s.offset_index.entries() for s in log.segments]
    log.close()
    first, second = log.segments[0], log.segments[1]
    fs.remove(first.path(".index"))
    fs.corrupt(second.path(".timeindex"), 0, b"\x7f" * 12)
    reopened = Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert reopened.opened_cleanly
    assert reopened.recovered_segment_count == 2
    assert [s.offset_index.entries() for s in reopened.segments] == entries
    assert read_all(reopened) == content
    assert first.path(".index").rsplit("/", 1)[1] in files(fs)  # written back


def test_temp_files_and_orphan_indexes_are_swept(open_log: OpenLog, fs: FakeFileSystem) -> None:
    log = open_log()
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=T0)
    log.close()
    for name in ("leader-epoch-checkpoint.tmp", f"{77:020d}.index"):
        fs.open(f"{LOG_DIR}/{name}", create=True).close()
    Log.open(LOG_DIR, log.config, fs=fs, clock=FakeClock())
    assert not any(n.endswith(".tmp") or n.startswith(f"{77:020d}") for n in files(fs))



def test_truncate_to_the_log_end_drops_an_epoch_entry_without_batches(
    open_log: OpenLog, fs: FakeFileSystem
) -> None:
    """Kafka's UnifiedLog.truncateTo: even when no batch goes, epoch entries
    starting at the log end go. The stale entry comes from a leader that
    checkpointed its new epoch, then crashed before its batch was synced."""
    log = open_log()
    log.append_as_leader(make_batch(3), leader_epoch=1, now_ms=T0)
    log.flush()
    log.append_as_leader(make_batch(2), leader_epoch=5, now_ms=T0)  # epoch 5 checkpointed, batch not synced
    fs.crash()
    log = open_log()
    assert log.log_end_offset == 3
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(5, 3)]
    assert log.truncate_to(log.log_end_offset) is False  # no batch removed ...
    assert log.epoch_entries == [EpochEntry(1, 0)]  # ... but the stale epoch is gone
    log.append_as_follower(make_batch(2, base_offset=3, epoch=2))  # an older-epoch batch now fits
    fs.crash()
    assert open_log().epoch_entries[:1] == [EpochEntry(1, 0)]  # the drop was durable
