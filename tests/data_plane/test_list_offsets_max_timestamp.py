"""ListOffsets v7 MAX_TIMESTAMP (-3, KIP-734): the first record with the
largest timestamp below the high watermark. librdkafka's
``OffsetSpec.max_timestamp()`` used to get INVALID_REQUEST."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from data_plane.api.offsets import offset_of_max_timestamp
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.clock import SystemClock
from raftlog.records import BatchBuilder
from raftlog.storage import Log, LogConfig
from raftlog.storage.files import RealFileSystem


def _batch(*timestamps: int) -> bytes:
    builder = BatchBuilder()
    for ts in timestamps:
        builder.append(b"v", timestamp_ms=ts)
    return builder.build()


def test_the_first_record_with_the_largest_timestamp_below_the_bound(tmp_path: object) -> None:
    log = Log.open(str(tmp_path), LogConfig(segment_bytes=200), fs=RealFileSystem(),
                   clock=SystemClock())
    for batch in (_batch(100, 500, 300), _batch(500, 200), _batch(400), _batch(900)):
        log.append_as_leader(batch, leader_epoch=0)
    assert len(log.segments) > 1  # the answer spans segment summaries
    assert offset_of_max_timestamp(log, log.log_end_offset) == (6, 900)
    # Below a bound that excludes the 900 batch (an uncommitted tail): the
    # first 500, not the later one.
    assert offset_of_max_timestamp(log, 6) == (1, 500)
    assert offset_of_max_timestamp(log, 3) == (1, 500)
    # A bound inside a batch: that batch is not readable yet (as for fetches).
    assert offset_of_max_timestamp(log, 1) is None
    log.close()


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2"})
    with ClusterThread(c) as ct:
        yield ct


def test_confluent_lists_the_max_timestamp_offset(cluster: ClusterThread) -> None:
    cluster.call(cluster.cluster.controller.create_topic, "ts", 1, 3, {"min.insync.replicas": "2"})
    cluster.run(cluster.cluster.wait_until(lambda: any(
        k[0] == "ts" and h.partition.is_leader
        for b in cluster.cluster.brokers.values() for k, h in b.replicas.partitions.items())))
    bootstrap = cluster.cluster.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    base = 1_700_000_000_000
    for delta in (100, 700, 300, 700, 200):
        producer.produce("ts", b"v", partition=0, timestamp=base + delta)
        producer.flush(10)  # one batch each
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition("ts", 0)
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(10)
    assert (info.offset, info.timestamp) == (1, base + 700)
