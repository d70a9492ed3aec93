"""A follower's long-polling fetch (`ReplicaManager.fetch` with a
DelayedFetch): when new records complete it, the answer's other partitions
carry their current high watermark, not the one read when the fetch was
parked, as Kafka's DelayedFetch re-reads every partition on completion."""

from __future__ import annotations

import asyncio
import time

from data_plane.broker.replica_manager import FetchParams, ReplicaManager
from data_plane.replication.types import FetchPartition
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder

NOW_MS = int(time.time() * 1000)


def _batch(i: int) -> bytes:
    builder = BatchBuilder()
    builder.append(b"v%d" % i, timestamp_ms=NOW_MS + i)
    return builder.build()


def test_a_completed_long_poll_carries_the_current_high_watermarks(tmp_path: object) -> None:
    async def main() -> None:
        cluster = FakeMetadataCluster()
        epochs = {b: cluster.register_broker(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
        cluster.create_topic("t", 2, 3, {"min.insync.replicas": "2"})
        for pid in range(2):
            if cluster.image.topic_by_name("t").partitions[pid].leader != 1:  # type: ignore[union-attr]
                cluster.elect_leader("t", pid, 1)
        topic = cluster.image.topic_by_name("t")
        assert topic is not None
        epoch = {pid: topic.partitions[pid].leader_epoch for pid in range(2)}
        replicas = ReplicaManager(cluster.view(1), log_dirs=[f"{tmp_path}/d"])
        replicas.start()
        await asyncio.sleep(0)
        params = FetchParams(max_wait_ms=5_000, min_bytes=1, max_bytes=1 << 20,
                             from_follower=True)

        def fetch(follower: int, offsets: dict[int, int]) -> asyncio.Task[dict]:  # type: ignore[type-arg]
            return asyncio.ensure_future(replicas.fetch({
                ("t", pid): FetchPartition(
                    fetch_offset=offset, current_leader_epoch=epoch[pid],
                    last_fetched_epoch=epoch[pid] if offset else -1,
                    replica_id=follower, replica_epoch=epochs[follower], log_start_offset=0)
                for pid, offset in offsets.items()}, params))

        outcome = await replicas.append_records({("t", 0): _batch(0)}, acks=1, timeout_ms=1000)
        assert outcome[("t", 0)].error == ErrorCode.none
        for follower in (2, 3):  # both copy t-0's record
            got = await fetch(follower, {0: 0})
            assert got[("t", 0)].records
        # Follower 2 acknowledges it and waits for more (nothing readable):
        # its first read sees t-0's HW at 0, since follower 3 has not.
        waiting = fetch(2, {0: 1, 1: 0})
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert replicas.get(("t", 0)).partition.high_watermark == 0  # type: ignore[union-attr]
        # Follower 3's acknowledgement moves the HW; its own fetch waits too.
        also_waiting = fetch(3, {0: 1, 1: 0})
        await asyncio.sleep(0.05)
        assert replicas.get(("t", 0)).partition.high_watermark == 1  # type: ignore[union-attr]
        assert not waiting.done()
        # A record on t-1 completes both: follower 2's answer has it, and
        # t-0's HW as it is now.
        await replicas.append_records({("t", 1): _batch(1)}, acks=1, timeout_ms=1000)
        answer = await asyncio.wait_for(waiting, 5)
        assert answer[("t", 1)].records
        assert answer[("t", 0)].high_watermark == 1
        assert (await asyncio.wait_for(also_waiting, 5))[("t", 0)].high_watermark == 1
        await replicas.close()

    asyncio.run(main())
