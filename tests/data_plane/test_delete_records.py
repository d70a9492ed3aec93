"""DeleteRecords: the leader moves its log start, followers follow it from
fetch answers (Kafka's ``maybeIncrementLogStartOffset``), and the low
watermark (the lowest log start over the eligible replicas) is what the
request waits for."""

from __future__ import annotations

import asyncio
import tempfile

from data_plane.broker.replica_manager import ReplicaManager
from data_plane.partition import Acks, Partition, PartitionState, ReplicationConfig
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder
from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

REPLICAS = (1, 2, 3)


def batch(i: int) -> bytes:
    b = BatchBuilder()
    b.append(str(i).encode(), timestamp_ms=1_700_000_000_000)
    return b.build()


def replicas() -> dict[int, Partition]:
    clock = FakeClock()
    config = ReplicationConfig(replica_lag_time_max_ms=1_000, min_insync_replicas=2)
    parts = {}
    for r in REPLICAS:
        log = Log.open(f"/d{r}", LogConfig(segment_bytes=200), fs=FakeFileSystem(), clock=clock)
        parts[r] = Partition("t", 0, local_id=r, log=log, config=config, broker_epoch=100 + r)
    state = PartitionState("t", 0, leader=1, leader_epoch=1, partition_epoch=1,
                           replicas=REPLICAS, isr=REPLICAS)
    for r, p in parts.items():
        (p.become_leader if r == 1 else p.become_follower)(state, 0)
    return parts


def fetch_once(parts: dict[int, Partition], follower: int) -> None:
    f = parts[follower]
    request = f.fetch_request(0)
    assert request is not None
    f.handle_fetch_response(request, parts[1].handle_fetch(request, 0), 0)


def test_followers_follow_the_leaders_log_start_and_the_low_watermark_reaches_it() -> None:
    parts = replicas()
    leader = parts[1]
    for i in range(10):
        assert leader.append_records(batch(i), Acks.ALL, 0).error == ErrorCode.none
        for f in (2, 3):
            fetch_once(parts, f)
            fetch_once(parts, f)
    assert leader.high_watermark == 10
    error, target, _ = leader.delete_records(6)
    assert (error, target) == (ErrorCode.none, 6)
    assert leader.log.log_start_offset == 6 and len(leader.log.segments) < 10
    assert leader.delete_records_low_watermark() == 0  # the followers have not heard yet
    fetch_once(parts, 2)
    assert parts[2].log.log_start_offset == 6
    fetch_once(parts, 2)  # its next fetch tells the leader
    assert leader.delete_records_low_watermark() == 0  # follower 3 still at 0
    fetch_once(parts, 3)
    fetch_once(parts, 3)
    assert leader.delete_records_low_watermark() == 6
    assert parts[3].log.read(6, 1 << 20).records  # what is left is still readable


def test_delete_records_bounds_and_roles() -> None:
    parts = replicas()
    leader = parts[1]
    leader.append_records(batch(0), Acks.ALL, 0)
    for f in (2, 3):
        fetch_once(parts, f)
        fetch_once(parts, f)
    assert leader.delete_records(2)[0] == ErrorCode.offset_out_of_range  # above the HW (1)
    assert leader.delete_records(-2)[0] == ErrorCode.offset_out_of_range
    assert leader.delete_records(-1)[:2] == (ErrorCode.none, 1)  # -1: the high watermark
    assert parts[2].delete_records(0)[0] == ErrorCode.not_leader_or_follower
    assert parts[2].delete_records_low_watermark() is None


def test_a_follower_behind_the_deleted_offset_restarts_at_the_leaders_log_start() -> None:
    parts = replicas()
    leader = parts[1]
    leader.become_leader(PartitionState("t", 0, leader=1, leader_epoch=1, partition_epoch=2,
                                        replicas=REPLICAS, isr=(1, 2)), 0)
    for i in range(10):
        leader.append_records(batch(i), Acks.ALL, 0)
        fetch_once(parts, 2)
        fetch_once(parts, 2)
    assert leader.high_watermark == 10
    assert leader.delete_records(6)[:2] == (ErrorCode.none, 6)
    for _ in range(6):
        fetch_once(parts, 3)  # out of range at 0: it restarts empty at 6, then catches up
    assert parts[3].log.log_start_offset == 6 and parts[3].log.log_end_offset == 10
    fetch_once(parts, 2)
    fetch_once(parts, 2)
    assert leader.delete_records_low_watermark() == 6


async def _wait_through_the_replica_manager() -> None:
    cluster = FakeMetadataCluster()
    cluster.register_broker(1, "127.0.0.1", 9001)
    cluster.create_topic("t", 1, 1)
    manager = ReplicaManager(cluster.view(1), log_dirs=[tempfile.mkdtemp()])
    manager.start()
    await asyncio.sleep(0)
    key = ("t", 0)
    for i in range(3):
        out = await manager.append_records({key: batch(i)}, acks=-1, timeout_ms=1000)
        assert out[key].error == ErrorCode.none
    results = await manager.delete_records(
        {key: 2, ("t", 7): 1, ("nope", 0): 1, ("__consumer_offsets", 0): 1}, timeout_ms=1000)
    assert results[key][:2] == (ErrorCode.none, 2)
    assert results[("t", 7)][0] == ErrorCode.unknown_topic_or_partition
    assert results[("nope", 0)][0] == ErrorCode.unknown_topic_or_partition
    # The coordinators' state is not the user's to delete (Kafka's rule).
    assert results[("__consumer_offsets", 0)] == (
        ErrorCode.invalid_topic_exception, -1,
        "Cannot delete records of internal topic __consumer_offsets")
    hosted = manager.get(key)
    assert hosted is not None and hosted.partition.log.log_start_offset == 2
    assert (await manager.delete_records({key: 9}, timeout_ms=1000))[key][0] \
        == ErrorCode.offset_out_of_range
    await manager.close()


def test_the_replica_manager_answers_with_the_low_watermark() -> None:
    asyncio.run(_wait_through_the_replica_manager())
