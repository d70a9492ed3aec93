"""ListOffsets v7 MAX_TIMESTAMP (-3, KIP-734): the first record with the
largest timestamp below the high watermark. librdkafka's
``OffsetSpec.max_timestamp()`` used to get INVALID_REQUEST. Also v8-v10's
special timestamps (earliest-local, latest-tiered)."""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.delete_records.v2 import request as dr
from kio.schema.produce.v9 import request as p9
from single_broker import SingleBroker

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


@pytest.mark.parametrize("version", [8, 9, 10])
def test_list_offsets_v8_to_v10_earliest_local_and_latest_tiered(version: int) -> None:
    """v8 adds earliest-local (-4, KIP-405), v9 latest-tiered (-5, KIP-1005),
    v10 a timeout (KIP-1075). Without tiered storage -4 is the log start
    offset, as -2 is, and -5 finds no offset, as from Kafka without remote
    storage."""
    lo = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
    b = SingleBroker()
    try:
        records = _batch(1, 2, 3)
        b.call(0, p9.ProduceRequest(
            transactional_id=None, acks=1,  # type: ignore[arg-type]
            timeout=datetime.timedelta(seconds=5),  # type: ignore[arg-type]
            topic_data=(p9.TopicProduceData(name="t", partition_data=(  # type: ignore[arg-type]
                p9.PartitionProduceData(index=0, records=records),)),)))  # type: ignore[arg-type]
        deleted = b.call(21, dr.DeleteRecordsRequest(
            topics=(dr.DeleteRecordsTopic(name="t", partitions=(  # type: ignore[arg-type]
                dr.DeleteRecordsPartition(partition_index=0, offset=1),)),),  # type: ignore[arg-type]
            timeout=datetime.timedelta(seconds=5)))  # type: ignore[arg-type]
        assert int(deleted.topics[0].partitions[0].low_watermark) == 1
        extra = {"timeout": datetime.timedelta(seconds=5)} if version >= 10 else {}
        asked = [-2, -4, -1] + ([-5] if version >= 9 else [])
        response = b.call(2, lo.ListOffsetsRequest(
            replica_id=-1, isolation_level=0, **extra, topics=(lo.ListOffsetsTopic(
                name="t", partitions=tuple(lo.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=ts)
                    for ts in asked)),)))
        got = [(int(p.error_code), int(p.offset), int(p.timestamp))
               for p in response.topics[0].partitions]
        expected = [(0, 1, -1), (0, 1, -1), (0, 3, -1)] + ([(0, -1, -1)] if version >= 9 else [])
        assert got == expected
    finally:
        b.close()
