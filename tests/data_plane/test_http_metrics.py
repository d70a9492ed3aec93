"""Request metrics (`instrument_handlers`): what the wrapper counts, and when.

The counting is deferred until after the responses are on their way, and
requests answered in one event-loop turn are counted together; these tests
check that nothing is lost or counted twice on the way."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from data_plane.broker.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
    QuotaWindow,
)
from data_plane.broker.replication_quotas import ReplicationQuotas
from data_plane.groups.assignors import AssignmentTopic
from data_plane.groups.consumer_model import ConsumerGroupHeartbeatRequest, MappingTopicsView
from data_plane.groups.model import OffsetCommitPartition, OffsetCommitRequest
from data_plane.groups.shard import GroupCoordinatorShard
from data_plane.http.metrics import (
    LoopCounter,
    LoopHistogram,
    NodeMetrics,
    NodeSources,
    instrument_handlers,
)
from data_plane.http.testing import FakeBackend
from raftlog.net import EncodedBody, RequestContext
from raftlog.net.connection_quotas import ConnectionLimits, ConnectionQuotas
from raftlog.records import BatchBuilder

PRODUCE, FETCH = 0, 1
PRODUCED = EncodedBody(b"produced")


def _metrics() -> NodeMetrics:
    return NodeMetrics(NodeSources(node_id=1, cluster_id="c", image=FakeBackend().image))


def _context(api_key: int) -> RequestContext:
    return RequestContext(api_key=api_key, api_version=9, correlation_id=1, client_id="t",
                          peer=None, listener_name="PLAINTEXT")


def _sample(metrics: NodeMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _batch(records: int) -> bytes:
    builder = BatchBuilder()
    for i in range(records):
        builder.append(b"v%d" % i, timestamp_ms=1_000)
    return builder.build()


def _produce_request(topic: str, *batches: bytes) -> Any:
    return SimpleNamespace(topic_data=[SimpleNamespace(
        name=topic,
        partition_data=[SimpleNamespace(index=i, records=b) for i, b in enumerate(batches)],
    )])


def _follower_fetch() -> Any:
    return SimpleNamespace(replica_state=SimpleNamespace(replica_id=2, replica_epoch=5))


def _consumer_fetch() -> Any:
    return SimpleNamespace(replica_state=SimpleNamespace(replica_id=-1, replica_epoch=-1))


def test_requests_of_one_loop_turn_are_all_counted_after_their_responses() -> None:
    metrics = _metrics()
    seen_before_answer: list[float] = []

    async def produce(context: RequestContext, request: Any) -> EncodedBody:
        seen_before_answer.append(_sample(
            metrics, "kafka_server_brokertopicmetrics_bytesin_total", topic="orders"))
        return PRODUCED

    async def fetch(context: RequestContext, request: Any) -> EncodedBody:
        return EncodedBody(b"answer", (("orders", 100),))

    handlers = instrument_handlers({PRODUCE: produce, FETCH: fetch}, metrics)
    three, two = _batch(3), _batch(2)

    async def main() -> None:
        answer = await handlers[PRODUCE](_context(PRODUCE), _produce_request("orders", three, two))
        assert answer is PRODUCED
        # Answered, not yet counted: counting waits for a later loop turn.
        assert _sample(metrics, "kafka_server_brokertopicmetrics_bytesin_total",
                       topic="orders") == 0
        answers = await asyncio.gather(
            handlers[PRODUCE](_context(PRODUCE), _produce_request("orders", three)),
            handlers[FETCH](_context(FETCH), _follower_fetch()),
            handlers[FETCH](_context(FETCH), _consumer_fetch()),
            handlers[FETCH](_context(FETCH), _consumer_fetch()),
        )
        assert answers[0] is PRODUCED
        await asyncio.sleep(0)

    asyncio.run(main())
    # The first produce was counted before the second one ran: once per turn.
    assert seen_before_answer == [0.0, len(three) + len(two)]
    bytes_in = _sample(metrics, "kafka_server_brokertopicmetrics_bytesin_total", topic="orders")
    assert bytes_in == 2 * len(three) + len(two)
    assert _sample(metrics, "kafka_server_brokertopicmetrics_messagesin_total",
                   topic="orders") == 3 + 2 + 3
    assert _sample(metrics, "kafka_server_brokertopicmetrics_replicationbytesout_total",
                   topic="orders") == 100
    assert _sample(metrics, "kafka_server_brokertopicmetrics_bytesout_total",
                   topic="orders") == 200
    count = "kafka_network_requestmetrics_totaltimems_count"
    assert _sample(metrics, count, request="Produce", listener="PLAINTEXT") == 2
    assert _sample(metrics, count, request="FetchFollower", listener="PLAINTEXT") == 1
    assert _sample(metrics, count, request="FetchConsumer", listener="PLAINTEXT") == 2


def test_later_turns_keep_counting_and_a_failed_request_is_not_counted() -> None:
    metrics = _metrics()

    async def produce(context: RequestContext, request: Any) -> EncodedBody:
        if request is None:
            raise RuntimeError("handler failed")
        return PRODUCED

    handlers = instrument_handlers({PRODUCE: produce}, metrics)
    batch = _batch(4)

    async def main() -> None:
        for _ in range(3):
            await handlers[PRODUCE](_context(PRODUCE), _produce_request("t", batch))
            await asyncio.sleep(0)
        with contextlib.suppress(RuntimeError):
            await handlers[PRODUCE](_context(PRODUCE), None)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert _sample(metrics, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 12
    assert _sample(metrics, "kafka_network_requestmetrics_totaltimems_count",
                   request="Produce", listener="PLAINTEXT") == 3


def test_loop_metrics_expose_what_prometheus_clients_own_would() -> None:
    # The per-request counter and histogram are ours (no lock per call); the
    # exposition must match prometheus_client's, less its `_created` series.
    ours, theirs = CollectorRegistry(auto_describe=False), CollectorRegistry(auto_describe=False)
    hist = LoopHistogram("t_ms", "doc", ["request", "listener"], (0.5, 1, 2.5, 10), ours)
    their_hist = Histogram("t_ms", "doc", ["request", "listener"], buckets=(0.5, 1, 2.5, 10),
                           registry=theirs)
    counter = LoopCounter("t_bytes", "doc", ["topic"], ours)
    their_counter = Counter("t_bytes", "doc", ["topic"], registry=theirs)
    for value in (0.0, 0.5, 0.7, 1.0, 2.5, 3.0, 10.0, 11.0, 99.5):
        hist.observe(("Produce", "PLAINTEXT"), value)
        their_hist.labels("Produce", "PLAINTEXT").observe(value)
    hist.observe(("Fetch", "PLAINTEXT"), 4.0)
    their_hist.labels("Fetch", "PLAINTEXT").observe(4.0)
    for topic, size in (("a", 10), ("b", 5), ("a", 7)):
        counter.inc((topic,), size)
        their_counter.labels(topic).inc(size)

    def lines(registry: CollectorRegistry) -> list[str]:
        return [line for line in generate_latest(registry).decode().splitlines()
                if "_created" not in line]

    assert lines(ours) == lines(theirs)


def test_client_quota_gauges_are_read_from_the_quota_sensors_at_scrape_time() -> None:
    """Kafka's ``kafka.server:type=Produce|Fetch,user=...,client-id=...``
    byte-rate and throttle-time, one series per quota sensor."""
    quotas = ClientQuotas(QuotaWindow(11, 1000))
    quotas.update({(("client-id", "app"),): {PRODUCER_BYTE_RATE: 100.0},
                   (("user", "ANONYMOUS"),): {CONSUMER_BYTE_RATE: 50.0}})
    quotas.produce.record_and_get_throttle_ms("app", 2000, 0)  # 200 B/s: 10 s throttle
    quotas.fetch.record_and_get_throttle_ms("any", 300, 0)  # 30 B/s, within
    metrics = _metrics()
    metrics.sources.replicas = SimpleNamespace(
        partitions={}, client_quotas=quotas, now_ms=lambda: 0)
    assert _sample(metrics, "kafka_server_produce_byte_rate",
                   user="", client_id="app") == 200.0
    assert _sample(metrics, "kafka_server_produce_throttle_time",
                   user="", client_id="app") == 10_000.0
    # A user quota's sensor covers every client id of the user.
    assert _sample(metrics, "kafka_server_fetch_byte_rate",
                   user="ANONYMOUS", client_id="") == 30.0
    assert metrics.registry.get_sample_value(
        "kafka_server_fetch_throttle_time", {"user": "ANONYMOUS", "client_id": ""}) == 0.0
    # Without quotas there are no series (and nothing was measured).
    quotas.update({})
    assert metrics.registry.get_sample_value(
        "kafka_server_produce_byte_rate", {"user": "", "client_id": "app"}) is None


def test_replication_throttle_gauges_show_the_measured_rate_and_the_bound() -> None:
    """Kafka's ``kafka.server:type=LeaderReplication|FollowerReplication``
    byte-rate (KIP-73), and the rates in effect (-1: unbounded)."""
    quotas = ReplicationQuotas(QuotaWindow(2, 1000))
    quotas.update({"leader.replication.throttled.rate": "1000"},
                  [("t", {"leader.replication.throttled.replicas": "*"})], broker_id=1)
    quotas.leader.record_throttled([(("t", 0), 1500)], 0)
    metrics = _metrics()
    metrics.sources.replicas = SimpleNamespace(
        partitions={}, replication_quotas=quotas, now_ms=lambda: 0)
    assert _sample(metrics, "kafka_server_leader_replication_byte_rate") == 1500.0
    assert _sample(metrics, "kafka_server_leader_replication_throttled_rate") == 1000.0
    assert _sample(metrics, "kafka_server_follower_replication_byte_rate") == 0.0
    assert _sample(metrics, "kafka_server_follower_replication_throttled_rate") == -1.0


def test_connection_gauges_count_the_nodes_listeners() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=1))
    assert quotas.admit("127.0.0.1") is None
    assert quotas.admit("127.0.0.1") is not None
    metrics = _metrics()
    metrics.sources.connections = quotas
    assert _sample(metrics, "kafka_server_socket_server_metrics_connection_count") == 1.0
    assert _sample(metrics, "kafka_server_socket_server_metrics_connections_refused_total") == 1.0


def test_group_coordinator_gauges_count_groups_by_protocol_and_state() -> None:
    """Kafka's ``group-coordinator-metrics``: group-count per protocol,
    classic/consumer group counts per state, and consumer group rebalances."""
    shard = GroupCoordinatorShard(0, rng=random.Random(1))
    view = MappingTopicsView([AssignmentTopic(uuid.UUID(int=1), "t", 2)])
    for member in ("a", "b"):
        shard.handle_consumer_group_heartbeat("h", ConsumerGroupHeartbeatRequest(
            "new", member, 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",),
            owned=()), view, 0)
    shard.handle_offset_commit("c", OffsetCommitRequest(
        "simple", -1, "", (OffsetCommitPartition("t", 0, 1),)), 0)
    metrics = _metrics()
    metrics.sources.groups = SimpleNamespace(shards=lambda: [shard])
    name = "kafka_server_group_coordinator_metrics"
    assert _sample(metrics, f"{name}_group_count", protocol="consumer") == 1.0
    assert _sample(metrics, f"{name}_group_count", protocol="classic") == 1.0
    assert _sample(metrics, f"{name}_consumer_group_count", state="Reconciling") == 1.0
    assert _sample(metrics, f"{name}_classic_group_count", state="Empty") == 1.0
    assert _sample(metrics, f"{name}_consumer_group_rebalance_total") == 2.0
    assert _sample(metrics, "raftlog_group_coordinator_group_migrations_total",
                   direction="upgrade") == 0.0
    # The family shows the shards' counts (test_groups_migration counts them).
    shard.group_migrations["downgrade"] += 3
    assert _sample(metrics, "raftlog_group_coordinator_group_migrations_total",
                   direction="downgrade") == 3.0
