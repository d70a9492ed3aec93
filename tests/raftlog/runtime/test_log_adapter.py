"""raftlog.runtime.log_adapter: the ReplicatedLog port over segment storage.

One contract suite runs against the real adapter and the in-memory fake
(`raftlog.testing.memory_log.MemoryLog`), so the core sees the same log from
both (STYLE.md section 5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raftlog.consensus.log import OffsetAndEpoch, ReplicatedLog
from raftlog.consensus.snapshot import SnapshotId, snapshot_filename
from raftlog.records import BatchBuilder, RecordError, iter_batches
from raftlog.runtime.log_adapter import SegmentReplicatedLog
from raftlog.storage import LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem
from raftlog.testing.memory_log import MemoryLog


def _batch(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(value, timestamp_ms=1)
    return builder.build()


@pytest.fixture(params=["memory", "segments"])
def make_log(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], ReplicatedLog]]:
    opened: list[SegmentReplicatedLog] = []

    def make() -> ReplicatedLog:
        if request.param == "memory":
            return MemoryLog()
        adapter = SegmentReplicatedLog.open(str(tmp_path / f"log{len(opened)}"))
        opened.append(adapter)
        return adapter

    yield make
    for adapter in opened:
        adapter.close()


def _fill(log: ReplicatedLog) -> None:
    """Offsets 0-1 epoch 1, 2-4 epoch 1, 5 epoch 3, 6-7 epoch 4."""
    log.append_as_leader(_batch(b"a", b"b"), 1, 0)
    log.append_as_leader(_batch(b"c", b"d", b"e"), 1, 0)
    log.append_as_leader(_batch(b"f"), 3, 0)
    log.append_as_leader(_batch(b"g", b"h"), 4, 0)


def test_empty_log(make_log: Callable[[], ReplicatedLog]) -> None:
    log = make_log()
    assert (log.start_offset(), log.end_offset(), log.flushed_offset()) == (0, 0, 0)
    assert log.last_fetched_epoch() == 0
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(0, 0)
    assert log.read(0, 100) == b""
    assert log.latest_snapshot_id() is None


def test_leader_appends_assign_offsets_and_epochs(make_log: Callable[[], ReplicatedLog]) -> None:
    log = make_log()
    _fill(log)
    assert log.end_offset() == 8
    assert log.last_fetched_epoch() == 4
    headers = [h for h, _ in iter_batches(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [
        (0, 1),
        (2, 1),
        (5, 3),
        (6, 4),
    ]
    assert log.flushed_offset() == 0
    log.flush()
    assert log.flushed_offset() == 8


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [(0, (0, 0)), (1, (5, 1)), (2, (5, 1)), (3, (6, 3)), (4, (8, 4)), (9, (8, 4))],
)
def test_end_offset_for_epoch(
    make_log: Callable[[], ReplicatedLog], epoch: int, expected: tuple[int, int]
) -> None:
    log = make_log()
    _fill(log)
    assert log.end_offset_for_epoch(epoch) == OffsetAndEpoch(*expected)


def test_follower_append_verbatim_and_rejects_gaps(make_log: Callable[[], ReplicatedLog]) -> None:
    leader, follower = make_log(), make_log()
    _fill(leader)
    data = leader.read(0, 1 << 20)
    info = follower.append_as_follower(data)
    assert (info.first_offset, follower.end_offset()) == (0, leader.end_offset())
    assert follower.read(0, 1 << 20) == data
    with pytest.raises(ValueError):
        follower.append_as_follower(data)  # starts at 0, not at the LEO
    corrupt = bytearray(leader.read(6, 1 << 20))
    corrupt[-1] ^= 0xFF
    other = make_log()
    other.append_as_follower(leader.read(0, 1 << 20)[: len(data) - len(corrupt)])
    # The port says ValueError; the in-memory fake raises the records
    # package's CrcMismatchError (reported to the consensus owner).
    with pytest.raises((ValueError, RecordError)):
        other.append_as_follower(bytes(corrupt))


def test_truncate_to_drops_the_tail(make_log: Callable[[], ReplicatedLog]) -> None:
    log = make_log()
    _fill(log)
    log.flush()
    log.truncate_to(5)
    assert log.end_offset() == 5
    assert log.last_fetched_epoch() == 1
    assert log.flushed_offset() == 5
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(5, 1)


def test_snapshot_moves_the_log_start(make_log: Callable[[], ReplicatedLog]) -> None:
    log = make_log()
    _fill(log)
    sid = SnapshotId(5, 1)
    log.store_snapshot(sid, b"state")
    assert not log.delete_before_snapshot(sid)  # not flushed yet
    log.flush()
    assert log.delete_before_snapshot(sid)
    assert (log.start_offset(), log.end_offset()) == (5, 8)
    assert log.latest_snapshot_id() == sid
    assert log.read_snapshot(sid) == b"state"
    assert log.read(0, 100) == b""
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(5, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(6, 3)


def test_truncate_to_snapshot_replaces_the_log(make_log: Callable[[], ReplicatedLog]) -> None:
    log = make_log()
    _fill(log)
    sid = SnapshotId(100, 7)
    log.store_snapshot(sid, b"big state")
    log.truncate_to_snapshot(sid)
    assert (log.start_offset(), log.end_offset(), log.flushed_offset()) == (100, 100, 100)
    assert log.last_fetched_epoch() == 7
    assert log.end_offset_for_epoch(7) == OffsetAndEpoch(100, 7)
    follower_batch = bytearray(_batch(b"z"))
    from raftlog.records import rewrite_base_offset_and_epoch

    rewrite_base_offset_and_epoch(follower_batch, 0, 100, 8)
    log.append_as_follower(bytes(follower_batch))
    assert (log.end_offset(), log.last_fetched_epoch()) == (101, 8)


# --- the real adapter only: files and recovery ---------------------------------------


def test_snapshot_files_are_named_like_kafkas(tmp_path: Path) -> None:
    log = SegmentReplicatedLog.open(str(tmp_path))
    log.store_snapshot(SnapshotId(100, 3), b"x")
    assert (tmp_path / "00000000000000000100-0000000003.checkpoint").read_bytes() == b"x"
    log.close()


def test_reopen_keeps_flushed_log_and_snapshots(tmp_path: Path) -> None:
    log = SegmentReplicatedLog.open(str(tmp_path), config=LogConfig(segment_bytes=300))
    _fill(log)
    log.flush()
    log.store_snapshot(SnapshotId(5, 1), b"s1")
    log.delete_before_snapshot(SnapshotId(5, 1))
    log.close()
    again = SegmentReplicatedLog.open(str(tmp_path), config=LogConfig(segment_bytes=300))
    assert (again.start_offset(), again.end_offset()) == (5, 8)
    assert again.latest_snapshot_id() == SnapshotId(5, 1)
    assert again.read_snapshot(SnapshotId(5, 1)) == b"s1"
    again.close()


def test_crash_loses_only_unflushed_records() -> None:
    fs, clock = FakeFileSystem(), FakeClock()
    log = SegmentReplicatedLog.open("/d", fs=fs, clock=clock)
    log.append_as_leader(_batch(b"a"), 1, 0)
    log.flush()
    log.append_as_leader(_batch(b"b"), 1, 0)
    fs.crash()
    again = SegmentReplicatedLog.open("/d", fs=fs, clock=clock)
    assert again.end_offset() == 1


def test_crash_inside_truncate_to_snapshot_is_finished_on_open(tmp_path: Path) -> None:
    log = SegmentReplicatedLog.open(str(tmp_path))
    _fill(log)
    log.flush()
    # The snapshot is durable but the process died before the log was emptied.
    log.store_snapshot(SnapshotId(50, 6), b"s")
    log.close()
    again = SegmentReplicatedLog.open(str(tmp_path))
    assert (again.start_offset(), again.end_offset()) == (50, 50)
    assert again.last_fetched_epoch() == 6
    again.close()


def test_older_snapshots_are_deleted_once_a_newer_one_is_the_start(tmp_path: Path) -> None:
    log = SegmentReplicatedLog.open(str(tmp_path))
    _fill(log)
    log.flush()
    log.store_snapshot(SnapshotId(2, 1), b"old")
    log.delete_before_snapshot(SnapshotId(2, 1))
    log.store_snapshot(SnapshotId(5, 1), b"new")
    log.delete_before_snapshot(SnapshotId(5, 1))
    assert not (tmp_path / snapshot_filename(SnapshotId(2, 1))).exists()
    assert log.read_snapshot(SnapshotId(2, 1)) is None
    log.close()
