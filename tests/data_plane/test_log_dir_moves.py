"""Moving a replica between log dirs (AlterReplicaLogDirs,
`data_plane.broker.log_dir_moves`): the copy follows appends and
truncations, the swap keeps every record and the producer state, a restart
finds the replica where it went, and an interrupted move resumes after a
restart (or its future log is deleted when it cannot)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from pathlib import Path

from data_plane.broker.log_dir_moves import agreed_end_offset, recover_moves
from data_plane.broker.log_dirs import write_topic_id
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.clock import SystemClock
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, parse_header
from raftlog.storage import RealFileSystem
from raftlog.storage.epoch_cache import EpochEntry
from raftlog.storage.log import Log, LogConfig

KEY = ("t", 0)
NOW_MS = int(time.time() * 1000)


def _batch(i: int, *, producer_id: int = -1, sequence: int = -1) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=sequence)
    # Now-ish timestamps: retention (7 days) must not delete what the test reads.
    builder.append(b"v%d" % i + b"x" * 200, key=b"k%d" % (i % 7), timestamp_ms=NOW_MS + i)
    return builder.build()


def _records(log: Log) -> bytes:
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out += data.records
        offset = _next_offset(data.records)
    return bytes(out)


def _next_offset(records: bytes) -> int:
    position, last = 0, -1
    while position < len(records):
        header = parse_header(records, position)
        last = header.last_offset
        position += header.size_in_bytes
    return last + 1


def _cluster() -> FakeMetadataCluster:
    cluster = FakeMetadataCluster()
    cluster.register_broker(1, "127.0.0.1", 9001)
    cluster.create_topic("t", 1, 1, {"min.insync.replicas": "1", "segment.bytes": "20000"})
    return cluster


async def _started(tmp_path: Path) -> tuple[FakeMetadataCluster, ReplicaManager, str, str]:
    """A broker with two log dirs hosting ``t-0`` (in the first)."""
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    cluster = _cluster()
    replicas = ReplicaManager(cluster.view(1), log_dirs=[first, second])
    replicas.start()
    await asyncio.sleep(0)
    return cluster, replicas, first, second


async def _until_moved(replicas: ReplicaManager, timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while replicas.moves.moves:
            await asyncio.sleep(0.01)


def test_agreed_end_offset_stops_at_the_first_epoch_difference() -> None:
    def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in pairs]

    same = entries((1, 0), (3, 40))
    assert agreed_end_offset(same, 60, same, 90) == 60  # a prefix of the current
    assert agreed_end_offset(same, 90, same, 60) == 60  # the current was cut back
    # The current was truncated to 50 and epoch 4 wrote from there.
    assert agreed_end_offset(same, 70, entries((1, 0), (3, 40), (4, 50)), 80) == 50
    # Epoch 3 began earlier in the copy than in the current (it never can, but
    # the rule holds): they differ from 30.
    assert agreed_end_offset(entries((1, 0), (3, 30)), 70, same, 80) == 30
    assert agreed_end_offset([], 0, same, 80) == 0


def test_a_leader_moves_while_producing_and_keeps_records_and_producer_state(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        cluster, replicas, first, second = await _started(tmp_path)
        hosted = replicas.get(KEY)
        assert hosted is not None and hosted.directory == os.path.join(first, "t-0")
        partition = hosted.partition
        for i in range(300):  # several segments
            assert partition.append_records(_batch(i), 1, NOW_MS).error == ErrorCode.none
        assert partition.append_records(_batch(999, producer_id=7, sequence=0), 1, NOW_MS).error \
            == ErrorCode.none
        assert replicas.move_replica(KEY, second) == ErrorCode.none
        assert len(replicas.moves.moves) == 1
        future_dir = replicas.moves.moves[KEY].future_dir
        assert future_dir.startswith(os.path.join(second, "t-0.")) and future_dir.endswith(
            "-future")
        for i in range(300, 400):  # appends go on during the copy
            assert partition.append_records(_batch(i), 1, NOW_MS).error == ErrorCode.none
            await asyncio.sleep(0)
        await _until_moved(replicas)
        assert hosted.directory == os.path.join(second, "t-0")
        assert partition.log.directory == hosted.directory
        assert partition.log.log_end_offset == 401
        async with asyncio.timeout(5):
            while os.path.exists(os.path.join(first, "t-0")) or any(
                    n.startswith("t-0.") for n in os.listdir(first)):
                await asyncio.sleep(0.01)
        # The producer state came along: a resend of the idempotent batch is a
        # duplicate, answered with its original offset; the next sequence goes on.
        resend = partition.append_records(_batch(999, producer_id=7, sequence=0), 1, NOW_MS)
        assert (resend.error, resend.base_offset) == (ErrorCode.none, 300)
        assert partition.log.log_end_offset == 401
        assert partition.append_records(_batch(1000, producer_id=7, sequence=1), 1, NOW_MS).error \
            == ErrorCode.none
        assert replicas.moves.completed == 1
        records = _records(partition.log)
        await replicas.close()

        # A restart finds the replica in its new directory, whole.
        again = ReplicaManager(cluster.view(1), log_dirs=[first, second])
        again.start()
        await asyncio.sleep(0)
        moved = again.get(KEY)
        assert moved is not None and moved.directory == os.path.join(second, "t-0")
        assert moved.partition.log.log_end_offset == 402
        assert _records(moved.partition.log) == records
        await again.close()

    asyncio.run(main())


def test_the_copy_follows_a_truncation_of_the_current_log(tmp_path: Path) -> None:
    async def main() -> None:
        _, replicas, _, second = await _started(tmp_path)
        hosted = replicas.get(KEY)
        assert hosted is not None
        current = hosted.partition.log
        for i in range(100):
            current.append_as_leader(_batch(i), leader_epoch=1)
        moves = replicas.moves
        moves.start(KEY, hosted, second)
        move = moves.moves[KEY]
        assert move.task is not None
        move.task.cancel()  # stepped by hand below
        while move.future_end_offset < 70:  # part of the way
            assert not moves.step(move, max_bytes=4000)
        assert move.future_end_offset < 100
        # As a follower would after a leader change: cut back to 60, then
        # the new leader's epoch-3 records from there.
        current.truncate_to(60)
        for i in range(60, 90):
            current.append_as_leader(_batch(1000 + i), leader_epoch=3)
        while KEY in moves.moves:
            moves.step(move, max_bytes=4000)
        new = hosted.partition.log
        assert new is not current and new.log_end_offset == 90
        assert [(e.epoch, e.start_offset) for e in new.epoch_entries] == [(1, 0), (3, 60)]
        assert new.read(60, 1 << 20).records.find(b"v1060") >= 0
        assert new.read(0, 1 << 20).records.find(b"v0x") >= 0
        await replicas.close()

    asyncio.run(main())


def test_move_requests_are_checked_and_a_removed_replica_cancels_its_move(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        cluster, replicas, first, second = await _started(tmp_path)
        assert replicas.move_replica(KEY, str(tmp_path / "elsewhere")) \
            == ErrorCode.log_dir_not_found
        assert replicas.move_replica(("nope", 0), second) == ErrorCode.replica_not_available
        assert replicas.move_replica(KEY, first + "/") == ErrorCode.none  # already there
        assert replicas.moves.moves == {}
        hosted = replicas.get(KEY)
        assert hosted is not None
        for i in range(50):
            hosted.partition.append_records(_batch(i), 1, NOW_MS)
        assert replicas.move_replica(KEY, second) == ErrorCode.none
        future_dir = replicas.moves.moves[KEY].future_dir
        assert os.path.isdir(future_dir)
        cluster.delete_topic("t")
        await asyncio.sleep(0.05)
        assert replicas.get(KEY) is None and replicas.moves.moves == {}
        assert not os.path.exists(future_dir)
        await replicas.close()

    asyncio.run(main())


def test_recover_moves_sets_future_logs_aside_and_settles_swaps(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    token, older = "0123456789abcdef0123456789abcdef", "f" * 32
    for path in (a / "t-0", a / f"u-1.{token}-delete", a / f"t-0.{older}-future",
                 b / f"t-0.{token}-future", b / f"v-2.{token}-delete",
                 a / "w-3.not-a-move-future"):
        path.mkdir(parents=True)
        (path / "00000000000000000000.log").write_bytes(b"")
    os.utime(a / f"t-0.{older}-future", (1, 1))  # the older of t-0's two future logs
    (a / "t-0" / "kept").write_bytes(b"")
    pending = recover_moves(RealFileSystem(), [str(a), str(b)])
    assert pending == {"t-0": str(b / f"t-0.{token}-future")}
    # Neither u-1 nor v-2 has its own directory: a swap was cut between its
    # renames, and the old one is put back.
    assert sorted(os.listdir(a)) == ["t-0", "u-1", "w-3.not-a-move-future"]
    assert sorted(os.listdir(b)) == [f"t-0.{token}-future", "v-2"]
    assert (a / "t-0" / "kept").exists()


async def _interrupted(tmp_path: Path, copied: int) -> tuple[
        FakeMetadataCluster, str, str, bytes, str]:
    """A broker stopped while ``t-0`` (100 records, epoch 1) was moving to
    the second log dir, with at least ``copied`` records copied."""
    cluster, replicas, first, second = await _started(tmp_path)
    hosted = replicas.get(KEY)
    assert hosted is not None
    for i in range(100):
        hosted.partition.log.append_as_leader(_batch(i), leader_epoch=1)
    replicas.moves.start(KEY, hosted, second)
    move = replicas.moves.moves[KEY]
    assert move.task is not None
    move.task.cancel()  # stepped by hand
    while move.future_end_offset < copied:
        assert not replicas.moves.step(move, max_bytes=4000)
    assert copied <= move.future_end_offset < 100
    records = _records(hosted.partition.log)
    await replicas.close()
    assert os.path.isdir(move.future_dir)
    return cluster, first, second, records, move.future_dir


def test_an_interrupted_move_resumes_after_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        cluster, first, second, records, future_dir = await _interrupted(tmp_path, 40)
        again = ReplicaManager(cluster.view(1), log_dirs=[first, second])
        again.start()
        move = again.moves.moves[KEY]
        assert move.future_dir == future_dir
        assert move.future_end_offset >= 40  # resumed, not started over
        await _until_moved(again)
        moved = again.get(KEY)
        assert moved is not None and moved.directory == os.path.join(second, "t-0")
        assert _records(moved.partition.log) == records
        assert again.moves.completed == 1 and not os.path.exists(future_dir)
        await again.close()

    asyncio.run(main())


def test_a_resumed_move_follows_a_truncation_made_while_the_broker_was_down(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        cluster, first, second, _, _ = await _interrupted(tmp_path, 70)
        # What a follower's next start does after a leader change: cut back
        # to 50, then the new leader's epoch-3 records.
        current = Log.open(os.path.join(first, "t-0"), LogConfig(segment_bytes=20000),
                           fs=RealFileSystem(), clock=SystemClock())
        current.truncate_to(50)
        for i in range(50, 80):
            current.append_as_leader(_batch(1000 + i), leader_epoch=3)
        records = _records(current)
        current.close()
        again = ReplicaManager(cluster.view(1), log_dirs=[first, second])
        again.start()
        assert again.moves.moves[KEY].future_end_offset <= 50  # cut back to the agreed prefix
        await _until_moved(again)
        moved = again.get(KEY)
        assert moved is not None and moved.directory == os.path.join(second, "t-0")
        assert _records(moved.partition.log) == records
        assert [(e.epoch, e.start_offset) for e in moved.partition.log.epoch_entries] \
            == [(1, 0), (3, 50)]
        await again.close()

    asyncio.run(main())


def test_a_future_log_that_cannot_resume_is_deleted(tmp_path: Path) -> None:
    async def main() -> None:
        # A future log of another topic of the same name (one deleted and
        # created again while the broker was down) is not this replica's.
        cluster, first, second, _, future_dir = await _interrupted(tmp_path, 10)
        write_topic_id(RealFileSystem(), future_dir, uuid.uuid4())
        again = ReplicaManager(cluster.view(1), log_dirs=[first, second])
        again.start()
        assert again.moves.moves == {} and not os.path.exists(future_dir)
        await again.close()

        # The second log dir is no longer configured: nothing resumes, the
        # future log is left alone there.
        shutil.rmtree(tmp_path / "a")
        shutil.rmtree(tmp_path / "b")
        cluster, first, second, _, future_dir = await _interrupted(tmp_path, 10)
        alone = ReplicaManager(cluster.view(1), log_dirs=[first])
        alone.start()
        assert alone.moves.moves == {} and os.path.exists(future_dir)
        await alone.close()

    asyncio.run(main())


def test_a_future_log_of_a_replica_no_longer_assigned_goes_with_the_strays(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        cluster, first, second, _, future_dir = await _interrupted(tmp_path, 10)
        # While the broker was down, its topic is deleted and created again
        # on another broker: the replayed images open t-0 (and resume its
        # move), then delete it; the new t-0 is not assigned here.
        cluster.register_broker(2, "127.0.0.1", 9002)
        cluster.fence_broker(1)
        cluster.delete_topic("t")
        cluster.create_topic("t", 1, 1, {})
        again = ReplicaManager(cluster.view(1), log_dirs=[first, second])
        again.start()
        async with asyncio.timeout(5):
            while os.path.exists(future_dir):
                await asyncio.sleep(0.01)
        assert again.moves.moves == {} and again.get(KEY) is None
        assert not os.path.exists(os.path.join(first, "t-0"))
        await again.close()

    asyncio.run(main())


def test_the_moves_wait_while_their_io_bound_is_exceeded(tmp_path: Path) -> None:
    async def main() -> None:
        cluster, replicas, _, second = await _started(tmp_path)
        hosted = replicas.get(KEY)
        assert hosted is not None
        for i in range(200):
            hosted.partition.log.append_as_leader(_batch(i), leader_epoch=1)
        # 1 byte/s: the first step copies one batch (a batch always goes
        # whole) and the bound is then exceeded for the whole window.
        cluster.set_broker_config(None, "replica.alter.log.dirs.io.max.bytes.per.second", "1")
        await asyncio.sleep(0)
        quota = replicas.replication_quotas.alter_log_dirs
        assert quota.active and quota.bound == 1
        assert replicas.move_replica(KEY, second) == ErrorCode.none
        move = replicas.moves.moves[KEY]
        await asyncio.sleep(0.5)
        assert 0 < move.future_end_offset < 5 and KEY in replicas.moves.moves
        assert quota.rate(replicas.now_ms()) > 1
        # The bound deleted (kafka-configs --delete-config): the move finishes.
        cluster.set_broker_config(None, "replica.alter.log.dirs.io.max.bytes.per.second", None)
        await _until_moved(replicas)
        assert not quota.active
        moved = replicas.get(KEY)
        assert moved is not None and moved.directory == os.path.join(second, "t-0")
        assert moved.partition.log.log_end_offset == 200
        await replicas.close()

    asyncio.run(main())
