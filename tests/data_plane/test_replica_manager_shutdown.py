"""Regression: a clean shutdown must not acknowledge un-replicated acks=all writes.

Bug (found chasing librdkafka's fatal OUT_OF_ORDER_SEQUENCE_NUMBER after a
controlled shutdown): `ReplicaManager.close` woke every waiting produce
without completing its DelayedProduce, and `append_records` then kept the
append's own success. The stopping leader answered acks=all produces whose
records no follower had, the new leader never had them, and the returning
node truncated them away: acknowledged records lost, and the idempotent
producer's next sequence looked out of order to the new leader.
"""

from __future__ import annotations

import asyncio
import tempfile

from data_plane.broker.replica_manager import ReplicaManager
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder


def _batch() -> bytes:
    builder = BatchBuilder()
    builder.append(b"v", key=b"k", timestamp_ms=1000)
    return builder.build()


async def _produce_then_close() -> tuple[ErrorCode, int]:
    cluster = FakeMetadataCluster()
    meta = cluster.view(1)
    for broker in (1, 2, 3):
        cluster.register_broker(broker, "127.0.0.1", 9000 + broker)
    cluster.create_topic("t", 1, 3, {"min.insync.replicas": "2"})
    replicas = ReplicaManager(meta, log_dirs=[tempfile.mkdtemp()])
    replicas.start()
    await asyncio.sleep(0)
    key = ("t", 0)
    assert replicas.get(key) is not None and replicas.get(key).partition.is_leader
    # Followers 2 and 3 never fetch: the write cannot commit.
    produce = asyncio.create_task(
        replicas.append_records({key: _batch()}, acks=-1, timeout_ms=60_000))
    await asyncio.sleep(0.05)
    assert not produce.done()
    hw = replicas.get(key).partition.high_watermark
    await replicas.close()
    outcome = (await asyncio.wait_for(produce, 5))[key]
    return outcome.error, hw


def test_close_answers_a_pending_acks_all_produce_with_an_error_not_success() -> None:
    error, hw = asyncio.run(_produce_then_close())
    assert hw == 0
    assert error == ErrorCode.not_leader_or_follower
