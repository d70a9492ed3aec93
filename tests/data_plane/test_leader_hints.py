"""KIP-951 leader hints: a Produce (v10+) or Fetch (v16) answered
NOT_LEADER_OR_FOLLOWER names the current leader and its epoch
(CurrentLeader) and that leader's address (NodeEndpoints), so a client can
retry there without asking for metadata first. Three brokers in one
process, raw requests at the versions under test, and librdkafka (which
negotiates Produce v10) failing over to a moved leader."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import Deliveries
from confluent_kafka import Producer
from kio.schema.fetch.v16 import request as f16
from kio.schema.produce.v9 import request as p9
from kio.schema.produce.v10 import request as p10

from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.net.client import KafkaProtocolClient
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2"})
    with ClusterThread(c) as ct:
        ct.call(c.controller.create_topic, "hinted", 1, 3, {})
        ct.run(c.wait_until(lambda: any(
            k[0] == "hinted" and h.partition.is_leader
            for b in c.brokers.values() for k, h in b.replicas.partitions.items())))
        yield ct


def _send(ct: ClusterThread, broker_id: int, request: Any) -> Any:
    async def go() -> Any:
        client = KafkaProtocolClient("127.0.0.1", ct.cluster.brokers[broker_id].server.port)
        try:
            return await client.send(request)
        finally:
            await client.close()
    return ct.run(go())


def _produce(module: Any, records: bytes) -> Any:
    return module.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(module.TopicProduceData(name="hinted", partition_data=(
            module.PartitionProduceData(index=0, records=records),)),),
    )


def _leader(ct: ClusterThread) -> tuple[int, int]:
    reg = ct.cluster.controller.image.topic_by_name("hinted").partitions[0]  # type: ignore[union-attr]
    return reg.leader, reg.leader_epoch


def test_a_produce_to_a_follower_names_the_leader_and_its_address(cluster: ClusterThread) -> None:
    leader, epoch = _leader(cluster)
    follower = next(b for b in cluster.cluster.brokers if b != leader)
    builder = BatchBuilder()
    builder.append(b"v", timestamp_ms=int(time.time() * 1000))
    batch = builder.build()

    response = _send(cluster, follower, _produce(p10, batch))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
    port = cluster.cluster.brokers[leader].server.port
    assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [
        (leader, "127.0.0.1", port)]

    # The leader itself answers without hints.
    response = _send(cluster, leader, _produce(p10, batch))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (-1, -1)
    assert response.node_endpoints == ()

    # v9 has no such fields; the answer is otherwise the same.
    response = _send(cluster, follower, _produce(p9, batch))
    assert response.responses[0].partition_responses[0].error_code == (
        ErrorCode.not_leader_or_follower)


def test_a_fetch_with_a_stale_epoch_names_the_leader_a_follower_serves_the_rest(
        cluster: ClusterThread) -> None:
    # A second leader epoch, so that the first one is stale.
    c = cluster.cluster
    first, _ = _leader(cluster)
    leader = next(b for b in c.brokers if b != first)
    cluster.call(c.controller.elect_leader, "hinted", 0, leader)
    cluster.run(c.wait_until(lambda: c.brokers[leader].replicas.is_leader(("hinted", 0))))
    _, epoch = _leader(cluster)
    assert epoch >= 1
    follower = first
    topic_id = cluster.cluster.controller.image.topic_ids["hinted"]

    def fetch(current_leader_epoch: int) -> Any:
        return f16.FetchRequest(
            replica_state=f16.ReplicaState(replica_id=-1, replica_epoch=-1),
            max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=(f16.FetchTopic(topic_id=topic_id, partitions=(f16.FetchPartition(
                partition=0, current_leader_epoch=current_leader_epoch, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id="",
        )

    port = cluster.cluster.brokers[leader].server.port
    # A consumer's v11+ fetch at the current epoch is served by a follower
    # (KIP-392, as Kafka's FetchParams.fetchOnlyLeader), without hints.
    served = _send(cluster, follower, fetch(epoch)).responses[0].partitions[0]
    assert served.error_code == ErrorCode.none
    assert served.current_leader.leader_id == -1
    for broker, request, error in (
            (follower, fetch(epoch - 1), ErrorCode.fenced_leader_epoch),
            (leader, fetch(epoch - 1), ErrorCode.fenced_leader_epoch)):
        response = _send(cluster, broker, request)
        part = response.responses[0].partitions[0]
        assert part.error_code == error
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
            leader, epoch)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(leader, port)]


def test_librdkafka_follows_a_moved_leader_and_loses_nothing(cluster: ClusterThread) -> None:
    """Leadership moves to another in-sync replica while the old leader stays
    up (a preferred election does this): the old leader answers
    NOT_LEADER_OR_FOLLOWER with the hint, librdkafka takes the new leader
    from it (its KIP-951 path logs "updated with leader"; a metadata answer
    does not), and every record is acknowledged once."""
    c = cluster.cluster
    old, _ = _leader(cluster)
    new = next(b for b in c.brokers if b != old)
    reports = Deliveries()
    lines: list[str] = []
    handler = _Collect(lines)
    logger = logging.getLogger("test_leader_hints.librdkafka")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "linger.ms": 0, "message.timeout.ms": 20_000,
                         "enable.idempotence": True, "debug": "metadata",
                         # No periodic refresh to pick the leader up instead.
                         "topic.metadata.refresh.interval.ms": 600_000},
                        logger=logger)
    for i in range(200):
        if i == 100:
            cluster.call(c.controller.elect_leader, "hinted", 0, new)
        producer.produce("hinted", b"r%d" % i, partition=0, on_delivery=reports)
        producer.poll(0)
        time.sleep(0.002)
    assert producer.flush(30) == 0
    producer.poll(0)  # the last log lines
    logger.removeHandler(handler)
    assert not reports.failed, reports.failed[:3]
    assert _leader(cluster)[0] == new
    assert sorted(reports.acked) == list(range(200))
    assert any(f"updated with leader {new} and epoch" in line for line in lines), (
        "librdkafka did not take the leader from the hint")


class _Collect(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
