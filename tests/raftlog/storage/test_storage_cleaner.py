"""The log cleaner (storage/cleaner.py): what compaction keeps, where it stops,
and that a crash at any step leaves either the old or the new segment."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import LOG_DIR, read_all

import raftlog.storage.cleaner as cleaner_module
from raftlog.records import BatchBuilder, Compression, decode_records, iter_batches
from raftlog.records.batch import ControlRecordType
from raftlog.records.builder import build_control_batch
from raftlog.storage import Log, LogConfig, UnexpectedAppendOffsetError
from raftlog.storage.cleaner import CompactionConfig, clean, dirty_state, needs_cleaning
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

T0 = 1_700_000_000_000
DAY = 86_400_000
Write = tuple[bytes | None, bytes | None]  # key, value (None: tombstone)


def keyed_batch(
    writes: list[Write], *, timestamp_ms: int = T0, compression: Compression = Compression.NONE,
    producer_id: int = -1, base_sequence: int = -1, transactional: bool = False,
) -> bytes:
    builder = BatchBuilder(compression=compression, producer_id=producer_id,
                           producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=base_sequence, is_transactional=transactional)
    for i, (key, value) in enumerate(writes):
        builder.append(value, key=key, timestamp_ms=timestamp_ms + i)
    return builder.build()


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, control records included."""
    data = read_all(log)
    out = []
    for _, at in iter_batches(data):
        out += [(r.offset, r.key, r.value) for r in decode_records(data, pos=at)]
    return out


def headers_of(log: Log) -> list:  # type: ignore[type-arg]
    return [h for h, _ in iter_batches(read_all(log))]


def assert_contiguous(log: Log) -> None:
    expected = log.log_start_offset
    for header in headers_of(log):
        assert header.base_offset == expected, headers_of(log)
        expected = header.next_offset
    assert expected == log.log_end_offset


@pytest.fixture
def small_log(open_log: Callable[..., Log]) -> Log:
    return open_log(segment_bytes=400)


def test_keeps_each_keys_newest_record_at_its_offset(small_log: Log, clock: FakeClock) -> None:
    log = small_log
    written: list[tuple[int, bytes, bytes]] = []
    rng = random.Random(7)
    for n in range(60):
        key = b"k%d" % rng.randrange(6)
        value = b"v%d" % n
        info = log.append_as_leader(keyed_batch([(key, value)]), 0)
        written.append((info.first_offset, key, value))
    size_before = log.size_in_bytes
    log.roll()
    result = clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    assert result is not None and not result.aborted
    newest = {key: (offset, value) for offset, key, value in written}
    assert records_of(log) == sorted((o, k, v) for k, (o, v) in newest.items())
    assert log.first_dirty_offset == log.log_end_offset
    assert log.size_in_bytes < size_before / 3
    assert result.records_removed == 60 - len(newest)
    assert_contiguous(log)
    # A second pass finds nothing dirty.
    assert clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig()) is None


def test_never_compacts_against_records_at_or_above_the_upper_bound(
    small_log: Log, clock: FakeClock
) -> None:
    log = small_log
    for n in range(20):
        log.append_as_leader(keyed_batch([(b"a", b"old%d" % n)]), 0)
    log.roll()
    bound = log.log_end_offset
    for n in range(20):
        log.append_as_leader(keyed_batch([(b"a", b"new%d" % n)]), 0)
    log.roll()
    clean(log, bound, clock.wall_ms(), CompactionConfig())
    values = [v for _, _, v in records_of(log)]
    # The newest record below the bound survives with everything above it.
    assert values == [b"old19"] + [b"new%d" % n for n in range(20)]
    assert log.first_dirty_offset == bound
    # The next pass, with a higher bound, supersedes it.
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    assert [v for _, _, v in records_of(log)] == [b"new19"]


def test_multi_record_and_compressed_batches_keep_offsets(small_log: Log, clock: FakeClock) -> None:
    log = Log.open(LOG_DIR + "-z", LogConfig(segment_bytes=2000), fs=small_log._fs, clock=clock)
    for codec in (Compression.NONE, Compression.GZIP, Compression.ZSTD):
        log.append_as_leader(keyed_batch(
            [(b"x", b"1"), (b"y", b"1"), (b"z", b"1")], compression=codec), 0)
    log.append_as_leader(keyed_batch([(b"y", b"2")]), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    assert records_of(log) == [(6, b"x", b"1"), (8, b"z", b"1"), (9, b"y", b"2")]
    codecs = [h.compression for h in headers_of(log)]
    assert Compression.ZSTD in codecs
    assert_contiguous(log)


def test_tombstones_stay_for_delete_retention_then_go(small_log: Log, clock: FakeClock) -> None:
    log = small_log
    config = CompactionConfig(delete_retention_ms=DAY)
    log.append_as_leader(keyed_batch([(b"gone", b"v")], timestamp_ms=T0 - 5), 0)
    log.append_as_leader(keyed_batch([(b"kept", b"v")], timestamp_ms=T0 - 4), 0)
    log.append_as_leader(keyed_batch([(b"gone", None)], timestamp_ms=T0 - 3), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert records_of(log) == [(1, b"kept", b"v"), (2, b"gone", None)]
    tombstone_batch = headers_of(log)[-1]
    assert tombstone_batch.has_delete_horizon
    assert tombstone_batch.base_timestamp == clock.wall_ms() + DAY
    # The record keeps its own timestamp under the new base.
    data = read_all(log)
    last_at = list(iter_batches(data))[-1][1]
    assert decode_records(data, pos=last_at)[0].timestamp == T0 - 3
    clock.advance(DAY - 1)
    log.append_as_leader(keyed_batch([(b"other", b"v")]), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert (2, b"gone", None) in records_of(log)
    clock.advance(2)
    log.append_as_leader(keyed_batch([(b"other", b"w")]), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert [(k, v) for _, k, v in records_of(log)] == [(b"kept", b"v"), (b"other", b"w")]
    assert_contiguous(log)


def _marker(kind: ControlRecordType, producer_id: int) -> bytes:
    return build_control_batch(kind, b"\x00\x00\x00\x00\x00\x00", producer_id=producer_id,
                               producer_epoch=0, timestamp_ms=T0)


def test_transactions_are_compacted_by_their_outcome(small_log: Log, clock: FakeClock) -> None:
    """Committed transactional records compact like any others; aborted ones
    are removed and hide nothing; a transaction whose marker is not in the
    cleanable range yet is left as it is until a later pass; markers stay;
    an emptied transactional batch is no longer transactional."""
    log = small_log

    def txn(writes: list[Write], pid: int) -> bytes:
        return keyed_batch(writes, producer_id=pid, base_sequence=0, transactional=True)

    log.append_as_leader(keyed_batch([(b"a", b"plain-a")]), 0)                   # 0
    log.append_as_leader(txn([(b"a", b"aborted-a")], 7), 0)                      # 1
    log.append_as_leader(_marker(ControlRecordType.ABORT, 7), 0)                 # 2
    log.append_as_leader(keyed_batch([(b"b", b"plain-b")]), 0)                   # 3
    log.append_as_leader(txn([(b"b", b"committed-b"), (b"c", b"committed-c")], 8), 0)  # 4, 5
    log.append_as_leader(keyed_batch([(b"c", b"newer-c")]), 0)                   # 6
    log.append_as_leader(_marker(ControlRecordType.COMMIT, 8), 0)                # 7
    log.append_as_leader(txn([(b"a", b"undecided-a")], 10), 0)                   # 8
    log.roll()
    log.append_as_leader(_marker(ControlRecordType.ABORT, 10), 0)                # 9, active
    result = clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    assert result is not None and result.aborted_records_removed == 1
    data = [(o, k, v) for o, k, v in records_of(log) if k in (b"a", b"b", b"c")]
    assert data == [(0, b"a", b"plain-a"), (4, b"b", b"committed-b"), (6, b"c", b"newer-c"),
                    (8, b"a", b"undecided-a")]
    headers = {h.base_offset: h for h in headers_of(log)}
    assert headers[2].is_control and headers[7].is_control and headers[9].is_control
    # Producer 7's only data batch stays, empty and no longer transactional.
    assert (headers[1].producer_id, headers[1].records_count, headers[1].is_transactional) == (
        7, 0, False)
    assert headers[4].is_transactional and headers[4].records_count == 1
    assert headers[8].is_transactional and headers[8].records_count == 1
    assert_contiguous(log)

    # The marker is rolled into the cleanable range: the aborted write goes.
    log.append_as_leader(keyed_batch([(b"d", b"plain-d")]), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    data = [(o, k, v) for o, k, v in records_of(log) if k in (b"a", b"b", b"c")]
    assert data == [(0, b"a", b"plain-a"), (4, b"b", b"committed-b"), (6, b"c", b"newer-c")]
    assert {h.base_offset: h for h in headers_of(log)}[8].records_count == 0
    assert_contiguous(log)


def test_a_deleted_key_stays_deleted_when_its_transactions_marker_comes_late(
    small_log: Log, clock: FakeClock
) -> None:
    """A transactional write whose marker is not in the cleanable range yet
    (the active segment) is still superseded by a newer record of its key:
    left in place, it would outlive the tombstone after it (whose delete
    horizon passes first) and bring the deleted key back once the marker
    says it committed. Found by the property test below."""
    log = small_log
    config = CompactionConfig(delete_retention_ms=1_000)
    log.append_as_leader(keyed_batch([(b"k", b"in a transaction")], producer_id=2,
                                     base_sequence=0, transactional=True), 0)     # 0
    log.append_as_leader(keyed_batch([(b"k", None)]), 0)                        # 1
    log.roll()
    log.append_as_leader(_marker(ControlRecordType.COMMIT, 2), 0)               # 2, active
    clean(log, log.log_end_offset, clock.wall_ms(), config)
    clock.advance(2_000)
    log.append_as_leader(keyed_batch([(b"other", b"v")]), 0)                    # 3
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert [(o, v) for o, k, v in records_of(log) if k == b"k"] == []
    assert_contiguous(log)


def test_a_marker_goes_once_its_transaction_has_nothing_left(
    small_log: Log, clock: FakeClock
) -> None:
    """A committed transaction's marker whose records were all superseded
    gets a delete horizon in the pass that empties the transaction and is
    dropped by a pass after it; a marker whose transaction still has a
    record stays as it is, and so does an ABORT marker (read_committed
    consumers skip the producer's batches listed as aborted until it)."""
    log = small_log
    config = CompactionConfig(delete_retention_ms=1_000)

    def txn(key: bytes, value: bytes, pid: int) -> bytes:
        return keyed_batch([(key, value)], producer_id=pid, base_sequence=0, transactional=True)

    log.append_as_leader(txn(b"a", b"aborted", 7), 0)                        # 0
    log.append_as_leader(_marker(ControlRecordType.ABORT, 7), 0)             # 1
    log.append_as_leader(txn(b"b", b"superseded", 8), 0)                     # 2
    log.append_as_leader(_marker(ControlRecordType.COMMIT, 8), 0)            # 3
    log.append_as_leader(txn(b"c", b"stays", 9), 0)                          # 4
    log.append_as_leader(_marker(ControlRecordType.COMMIT, 9), 0)            # 5
    log.append_as_leader(keyed_batch([(b"b", b"newer")]), 0)                 # 6
    log.roll()
    first = clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert first is not None and first.markers_removed == 0
    headers = {h.base_offset: h for h in headers_of(log)}
    assert headers[1].is_control and not headers[1].has_delete_horizon
    assert headers[3].is_control and headers[3].has_delete_horizon
    assert headers[5].is_control and not headers[5].has_delete_horizon
    before = records_of(log)
    clock.advance(999)
    log.append_as_leader(keyed_batch([(b"d", b"dirty")]), 0)                 # 7
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert records_of(log) == [*before, (7, b"d", b"dirty")]  # not yet
    clock.advance(1)
    log.append_as_leader(keyed_batch([(b"e", b"dirty")]), 0)                 # 8
    log.roll()
    result = clean(log, log.log_end_offset, clock.wall_ms(), config)
    assert result is not None and result.markers_removed == 1
    controls = [h.base_offset for h in headers_of(log) if h.is_control]
    assert controls == [1, 5]
    assert [(o, k, v) for o, k, v in records_of(log) if k in (b"a", b"b", b"c")] == [
        (4, b"c", b"stays"), (6, b"b", b"newer")]
    assert_contiguous(log)


def test_a_full_key_map_ends_the_pass_and_the_next_pass_goes_on(
    small_log: Log, clock: FakeClock
) -> None:
    """``max_map_bytes`` (``log.cleaner.dedupe.buffer.size``): the map stops
    before the batch whose new keys would not fit; batches from there on are
    copied unchanged and stay dirty; later passes finish the job, with the
    same result as one unbounded pass."""
    log = small_log
    for n in range(40):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 8), b"v%d" % n)]), 0)
    log.roll()
    before = records_of(log)
    budget = 3 * (cleaner_module.MAP_ENTRY_BYTES + 2)  # three two-byte keys
    result = clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig(),
                   max_map_bytes=budget)
    assert result is not None and result.map_full and result.keys == 3
    # k0, k1, k2 were mapped from offsets 0..2; k3 at offset 3 did not fit.
    assert result.end_offset == 3 == log.first_dirty_offset
    assert records_of(log) == before  # nothing below 3 is superseded within 0..2
    passes = 1
    while (result := clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig(),
                           max_map_bytes=budget)) is not None:
        passes += 1
        assert result.keys <= 3
        assert_contiguous(log)
    newest = {k: (o, v) for o, k, v in before}
    assert {k: (o, v) for o, k, v in records_of(log)} == newest
    assert len(records_of(log)) == 8
    assert log.first_dirty_offset == log.log_end_offset and passes > 3


def test_a_tombstone_beyond_a_full_map_is_not_touched(small_log: Log, clock: FakeClock) -> None:
    """A tombstone past where the map stopped is copied as it is: no delete
    horizon is set on it, and none is acted on, until a pass maps it (and so
    removes its key's older values first). Acting on it earlier would bring
    a deleted key back."""
    log = small_log
    log.append_as_leader(keyed_batch([(b"gone", b"old value")]), 0)            # 0
    for n, key in enumerate((b"a", b"b", b"c")):
        log.append_as_leader(keyed_batch([(key, b"v%d" % n)]), 0)             # 1..3
    log.append_as_leader(keyed_batch([(b"gone", None)]), 0)                   # 4
    log.roll()
    two_keys = 2 * (cleaner_module.MAP_ENTRY_BYTES + 4)
    config = CompactionConfig(delete_retention_ms=1_000)
    while True:
        result = clean(log, log.log_end_offset, clock.wall_ms(), config, max_map_bytes=two_keys)
        if result is None:
            break
        clock.advance(2_000)  # every horizon set so far has passed
        assert [v for _, k, v in records_of(log) if k == b"gone"][-1:] in ([None], [])
    assert [r for r in records_of(log) if r[1] == b"gone"] in ([(4, b"gone", None)], [])


def test_a_producers_last_batch_stays_as_an_empty_batch(small_log: Log, clock: FakeClock) -> None:
    log = small_log
    for seq in range(3):
        log.append_as_leader(keyed_batch([(b"k", b"p%d" % seq)], producer_id=42,
                                         base_sequence=seq), 0)
    log.append_as_leader(keyed_batch([(b"k", b"plain")]), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    headers = headers_of(log)
    producer = [h for h in headers if h.producer_id == 42]
    assert len(producer) == 1
    assert (producer[0].base_offset, producer[0].base_sequence, producer[0].records_count) == (2, 2, 0)
    # The two earlier batches became one empty header with no producer.
    assert [(h.base_offset, h.last_offset, h.producer_id, h.records_count)
            for h in headers[:1]] == [(0, 1, -1, 0)]
    assert records_of(log) == [(3, b"k", b"plain")]
    assert_contiguous(log)


def test_a_replica_can_copy_a_compacted_log(small_log: Log, clock: FakeClock, fs: FakeFileSystem) -> None:
    log = small_log
    for n in range(30):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 4), b"v%d" % n)]), n // 10)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    follower = Log.open(LOG_DIR + "-follower", LogConfig(segment_bytes=400), fs=fs, clock=clock)
    data = read_all(log)
    for header, at in iter_batches(data):
        follower.append_as_follower(data[at : at + header.size_in_bytes])
    assert read_all(follower) == read_all(log)
    assert follower.epoch_entries == log.epoch_entries


def test_a_lagging_replica_catches_up_over_empty_batches_merged_across_its_end(
    small_log: Log, clock: FakeClock, fs: FakeFileSystem
) -> None:
    """A replica stopped at a batch boundary that the leader's cleaner then
    merged into a longer empty batch still catches up: the leader's empty
    batch is appended from the replica's end on. (Found by the compact
    chaos workload: such a follower was stuck for good.)"""
    log = small_log
    follower = Log.open(LOG_DIR + "-follower", LogConfig(segment_bytes=400), fs=fs, clock=clock)
    for n in range(30):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 2), b"v%d" % n)]), 0)
    data = read_all(log)
    for header, at in iter_batches(data):
        if header.base_offset >= 12:
            break
        follower.append_as_follower(data[at : at + header.size_in_bytes])
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    merged = [h for h in headers_of(log) if h.records_count == 0 and h.base_offset < 12 <= h.last_offset]
    assert merged, headers_of(log)  # the leader's empty batches now straddle 12
    data = read_all(log)
    for header, at in iter_batches(data):
        if header.last_offset >= follower.log_end_offset:
            follower.append_as_follower(data[at : at + header.size_in_bytes])
    assert follower.log_end_offset == log.log_end_offset
    assert_contiguous(follower)
    # The follower's own records below 12 are untouched; above, it holds
    # what the leader holds.
    assert [r for r in records_of(follower) if r[0] >= 12] == [
        r for r in records_of(log) if r[0] >= 12]
    assert follower.epoch_entries == log.epoch_entries
    # A batch with records that begins below the end is still refused.
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data[: headers_of(log)[0].size_in_bytes])


def test_reopen_after_a_clean_and_after_a_power_cut(
    small_log: Log, clock: FakeClock, fs: FakeFileSystem
) -> None:
    log = small_log
    for n in range(40):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 3), b"v%d" % n)]), 0)
    log.roll()
    clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    expected, dirty = records_of(log), log.first_dirty_offset
    log.close()
    reopened = Log.open(LOG_DIR, LogConfig(segment_bytes=400), fs=fs, clock=clock)
    assert records_of(reopened) == expected and reopened.first_dirty_offset == dirty
    fs.crash()
    again = Log.open(LOG_DIR, LogConfig(segment_bytes=400), fs=fs, clock=clock)
    assert records_of(again) == expected and again.first_dirty_offset == dirty
    assert again.recovered_segment_count >= 1


class _FailingFs(FakeFileSystem):
    """Raises once ``fail_on(method, path)`` matches: a crash at that step."""

    def __init__(self, fail_on: Callable[[str, str], bool]) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.armed = False

    def rename(self, src: str, dst: str, *, sync_dir: bool = True) -> None:
        if self.armed and self.fail_on("rename", dst):
            raise OSError("crash")
        super().rename(src, dst, sync_dir=sync_dir)

    def remove(self, path: str, *, sync_dir: bool = True) -> None:
        if self.armed and self.fail_on("remove", path):
            raise OSError("crash")
        super().remove(path, sync_dir=sync_dir)


@pytest.mark.parametrize("step", [
    ("rename", ".log.swap"),    # before the commit point: the old segment stays
    ("remove", ".index"),       # after it, old files half deleted: the swap finishes
    ("rename", "0.log"),        # swap not yet renamed to .log: it finishes
])
def test_a_crash_at_each_swap_step_leaves_one_whole_segment(
    step: tuple[str, str], clock: FakeClock
) -> None:
    fs = _FailingFs(lambda method, path: method == step[0] and path.endswith(step[1]))
    fs.make_dirs(LOG_DIR)
    log = Log.open(LOG_DIR, LogConfig(segment_bytes=400), fs=fs, clock=clock)
    for n in range(30):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 3), b"v%d" % n)]), 0)
        log.flush()
    log.roll()
    original = records_of(log)
    newest = {k: (o, v) for o, k, v in original}
    fs.armed = True
    with pytest.raises(OSError, match="crash"):
        clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    fs.armed = False
    fs.crash()
    reopened = Log.open(LOG_DIR, LogConfig(segment_bytes=400), fs=fs, clock=clock)
    got = records_of(reopened)
    # Either segment version, never a mix that loses a newest record.
    assert {k: (o, v) for o, k, v in got} == newest
    assert set(got) <= set(original)
    assert_contiguous(reopened)
    assert not [n for n in fs.list_dir(LOG_DIR) if n.endswith((".cleaned", ".swap"))]
    # And a later pass completes.
    clean(reopened, reopened.log_end_offset, clock.wall_ms(), CompactionConfig())
    assert sorted(records_of(reopened)) == sorted((o, k, v) for k, (o, v) in newest.items())


def test_a_truncation_during_a_pass_stops_the_swap(
    small_log: Log, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = small_log
    for n in range(30):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 3), b"v%d" % n)]), 0)
    log.roll()
    before = records_of(log)
    real_run = cleaner_module._Copy.run

    def run_then_truncate(self: cleaner_module._Copy) -> object:
        out = real_run(self)
        log.truncate_to(log.log_end_offset - 1)
        return out

    monkeypatch.setattr(cleaner_module._Copy, "run", run_then_truncate)
    result = clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig())
    assert result is not None and result.aborted and result.segments_rewritten == 0
    assert records_of(log) == before[:-1]
    assert log.first_dirty_offset == 0
    assert not [n for n in log._fs.list_dir(LOG_DIR) if n.endswith(".cleaned")]


def test_dirty_ratio_and_compaction_lag(small_log: Log, clock: FakeClock) -> None:
    log = small_log
    for n in range(20):
        log.append_as_leader(keyed_batch([(b"k", b"v%d" % n)], timestamp_ms=clock.wall_ms()), 0)
    log.roll()
    now = clock.wall_ms()
    state = dirty_state(log, log.log_end_offset, now)
    assert state.clean_bytes == 0 and state.dirty_bytes == log.size_in_bytes
    assert needs_cleaning(state, CompactionConfig(), now)
    lagged = CompactionConfig(min_compaction_lag_ms=60_000)
    assert clean(log, log.log_end_offset, now, lagged) is None
    clock.advance(60_001)
    clean(log, log.log_end_offset, clock.wall_ms(), lagged)
    state = dirty_state(log, log.log_end_offset, clock.wall_ms())
    assert state.dirty_bytes == 0 and not needs_cleaning(state, CompactionConfig(), now)


@st.composite
def _histories(draw: st.DrawFn) -> list[tuple[str, int]]:
    ops = st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5)),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("clean"), st.integers(0, 100)),
        st.tuples(st.just("wait"), st.integers(0, 2 * DAY)),
    )
    return draw(st.lists(ops, min_size=1, max_size=60))


@settings(max_examples=150, deadline=None)
@given(_histories(), st.sampled_from([None, 1, 250, 600]))
def test_readers_see_every_keys_last_write_at_its_offset(
    history: list[tuple[str, int]], map_bytes: int | None,
) -> None:
    """``map_bytes``: the key map's budget (`clean`'s ``max_map_bytes``); a
    small one makes passes stop part-way (1: one batch a pass)."""
    fs, clock = FakeFileSystem(), FakeClock()
    fs.make_dirs(LOG_DIR)
    log = Log.open(LOG_DIR, LogConfig(segment_bytes=300), fs=fs, clock=clock)
    config = CompactionConfig(delete_retention_ms=DAY)
    written: dict[int, tuple[bytes, bytes | None]] = {}
    bound = 0
    for n, (op, arg) in enumerate(history):
        if op in ("put", "delete"):
            key, value = b"k%d" % arg, (b"v%d" % n if op == "put" else None)
            info = log.append_as_leader(keyed_batch([(key, value)], timestamp_ms=clock.wall_ms()), 0)
            written[info.first_offset] = (key, value)
        elif op == "roll":
            log.roll()
        elif op == "clean":
            bound = max(bound, log.log_end_offset * arg // 100)
            clean(log, bound, clock.wall_ms(), config, max_map_bytes=map_bytes)
        else:
            clock.advance(arg)
    got = records_of(log)
    assert_contiguous(log)
    # Every record read is the one written at that offset.
    for offset, read_key, read_value in got:
        assert written[offset] == (read_key, read_value)
    last_written: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(written):
        key, value = written[offset]
        last_written[key] = (offset, value)
    last_read: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, read_key, read_value in got:
        assert read_key is not None
        last_read[read_key] = (offset, read_value)
    for key, (offset, value) in last_written.items():
        if value is None:
            # A deleted key's tombstone may be gone, and then every value too.
            assert last_read.get(key, (offset, None)) == (offset, None)
        else:
            assert last_read[key] == (offset, value)
    # Nothing at or above the cleaner's bound was removed.
    assert [o for o, _, _ in got if o >= bound] == [o for o in sorted(written) if o >= bound]


def test_neighbouring_segments_merge_unless_one_must_keep_its_base(
    small_log: Log, clock: FakeClock, fs: FakeFileSystem
) -> None:
    log = small_log
    for n in range(60):
        log.append_as_leader(keyed_batch([(b"k%d" % (n % 3), b"v%d" % n)]), 0)
    log.roll()
    before = [s.base_offset for s in log.segments]
    keep = before[3]
    # Groups are sized by what the segments hold before a pass (Kafka's
    # rule): full segments are copied one to one, and the next pass merges
    # the small copies.
    for extra in range(2):
        clean(log, log.log_end_offset, clock.wall_ms(), CompactionConfig(),
              can_merge=lambda segment: segment.base_offset != keep)
        log.append_as_leader(keyed_batch([(b"k0", b"w%d" % extra)]), 0)
        log.roll()
    after = [s.base_offset for s in log.segments]
    assert len(after) <= len(before) // 2, (before, after)
    assert keep in after and after[0] == 0
    assert [(k, v) for _, k, v in records_of(log)] == [
        (b"k1", b"v58"), (b"k2", b"v59"), (b"k0", b"w0"), (b"k0", b"w1")]
    assert_contiguous(log)
    expected = records_of(log)
    log.close()
    reopened = Log.open(LOG_DIR, LogConfig(segment_bytes=400), fs=fs, clock=clock)
    assert [s.base_offset for s in reopened.segments] == after
    assert records_of(reopened) == expected


@st.composite
def _txn_histories(draw: st.DrawFn) -> list[tuple[str, int]]:
    ops = st.one_of(
        st.tuples(st.just("put"), st.integers(0, 3)),
        st.tuples(st.just("delete"), st.integers(0, 3)),
        st.tuples(st.sampled_from(["tput1", "tput2"]), st.integers(0, 3)),
        st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 2)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("clean"), st.integers(0, 100)),
        st.tuples(st.just("wait"), st.integers(0, 2 * DAY)),
    )
    history = draw(st.lists(ops, min_size=1, max_size=60))
    # End every transaction left open, then clean everything: most histories
    # then have a decided transaction in a cleaned segment. A day later, with
    # something new to clean, a pass may drop the markers left with nothing.
    return [*history, ("abort", 1), ("commit", 2), ("roll", 0), ("clean", 100),
            ("wait", 2 * DAY), ("put", 0), ("roll", 0), ("clean", 100)]


@settings(max_examples=150, deadline=None)
@given(_txn_histories(), st.sampled_from([None, 1, 250, 600]))
def test_read_committed_readers_see_every_keys_last_committed_write(
    history: list[tuple[str, int]], map_bytes: int | None,
) -> None:
    """Two transactional producers and plain writes, interleaved; the cleaner
    runs below the last stable offset (the first open transaction's start),
    as the broker runs it. A reader that skips aborted and still-open
    transactions sees each key's last committed write at its offset; every
    record read is the one written there; a COMMIT marker is gone only if
    no record of its transaction is left, an ABORT marker never; nothing at
    or above the bound is removed."""
    fs, clock = FakeFileSystem(), FakeClock()
    fs.make_dirs(LOG_DIR)
    log = Log.open(LOG_DIR, LogConfig(segment_bytes=300), fs=fs, clock=clock)
    written: dict[int, tuple[bytes, bytes | None]] = {}
    outcome: dict[int, bool] = {}  # offset of a transactional write -> committed
    open_txns: dict[int, list[int]] = {1: [], 2: []}
    markers: dict[int, list[int]] = {}  # marker offset -> its transaction's writes
    abort_markers: list[int] = []
    bound = 0
    for n, (op, arg) in enumerate(history):
        if op in ("put", "delete", "tput1", "tput2"):
            key, value = b"k%d" % arg, (None if op == "delete" else b"v%d" % n)
            pid = int(op[-1]) if op.startswith("tput") else -1
            batch = keyed_batch([(key, value)], timestamp_ms=clock.wall_ms(), producer_id=pid,
                                base_sequence=0 if pid > 0 else -1, transactional=pid > 0)
            info = log.append_as_leader(batch, 0)
            written[info.first_offset] = (key, value)
            if pid > 0:
                open_txns[pid].append(info.first_offset)
        elif op in ("commit", "abort"):
            if open_txns[arg]:
                kind = ControlRecordType.COMMIT if op == "commit" else ControlRecordType.ABORT
                marker = log.append_as_leader(_marker(kind, arg), 0).first_offset
                markers[marker] = open_txns[arg]
                if op == "abort":
                    abort_markers.append(marker)
                for offset in open_txns[arg]:
                    outcome[offset] = op == "commit"
                open_txns[arg] = []
        elif op == "roll":
            log.roll()
        elif op == "wait":
            clock.advance(arg)
        else:
            lso = min([t[0] for t in open_txns.values() if t] or [log.log_end_offset])
            bound = max(bound, min(lso, log.log_end_offset * arg // 100))
            clean(log, bound, clock.wall_ms(), CompactionConfig(), max_map_bytes=map_bytes)
    got = records_of(log)
    assert_contiguous(log)
    read_data = [(o, k, v) for o, k, v in got if o in written]
    for offset, read_key, read_value in read_data:
        assert written[offset] == (read_key, read_value)
    read_markers = [o for o, _, _ in got if o not in written]
    assert set(read_markers) <= set(markers)
    assert set(abort_markers) <= set(read_markers)  # ABORT markers stay
    left = {o for o, _, _ in read_data}
    for marker, writes in markers.items():
        if marker not in read_markers:
            assert marker < bound and not left & set(writes), (marker, writes)

    def visible(offset: int) -> bool:
        return outcome.get(offset, offset not in _all(open_txns))

    last_committed: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(written):
        if visible(offset):
            key, value = written[offset]
            last_committed[key] = (offset, value)
    last_read: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, read_key, read_value in read_data:
        if visible(offset):
            assert read_key is not None
            last_read[read_key] = (offset, read_value)
    for key, (offset, value) in last_committed.items():
        if value is None:
            assert last_read.get(key, (offset, None)) == (offset, None)
        else:
            assert last_read[key] == (offset, value)
    assert [o for o, _, _ in read_data if o >= bound] == [o for o in sorted(written) if o >= bound]


def _all(open_txns: dict[int, list[int]]) -> set[int]:
    return {offset for offsets in open_txns.values() for offset in offsets}
