"""Auto topic creation (``auto.create.topics.enable``, Kafka's default true).

A librdkafka producer writing to a topic that does not exist gets it created
with the cluster's ``num.partitions`` / ``default.replication.factor`` and
its records delivered. A client that disallows auto-creation (Metadata v4+
``allow_auto_topic_creation=false``, as consumers send) creates nothing, and
a broker with ``auto.create.topics.enable=false`` answers
UNKNOWN_TOPIC_OR_PARTITION. The internal topics are never created with the
user defaults, and clients cannot produce to them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.schema.metadata.v12 import request as md12
from kio.schema.types import TopicName

from data_plane.api.common import BrokerApiContext
from data_plane.broker.coordinators import INTERNAL_TOPIC_CONFIGS, internal_topic_configs
from data_plane.kafka_api import broker_handlers
from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(),
        properties={"num.partitions": "3", "default.replication.factor": "3",
                    "min.insync.replicas": "2"})
    c = LocalCluster(str(tmp_path_factory.mktemp("auto")), layout)
    c.up(40)
    yield c
    c.stop(timeout_s=10)


@pytest.mark.slow
def test_a_producer_creates_a_missing_topic_with_the_cluster_defaults(
    cluster: LocalCluster,
) -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "error_cb": errors.append})
    delivered: list[tuple[int, int]] = []
    for i in range(30):
        producer.produce("auto-made", b"%d" % i, key=b"%d" % i,
                         on_delivery=lambda err, msg: delivered.append(
                             (msg.partition(), msg.offset())) if err is None else None)
    assert producer.flush(30) == 0
    assert len(delivered) == 30
    meta = producer.list_topics("auto-made", timeout=10).topics["auto-made"]
    assert meta.error is None
    assert sorted(meta.partitions) == [0, 1, 2]
    assert all(len(p.replicas) == 3 for p in meta.partitions.values())
    assert {p for p, _ in delivered} <= {0, 1, 2}


def test_transaction_state_takes_kafkas_min_isr_and_never_elects_unclean() -> None:
    """``transaction.state.log.min.isr`` (default 2) is the topic's
    ``min.insync.replicas``, whatever the broker default (1 here): a
    coordinator's answer stands on a record two replicas hold."""
    assert internal_topic_configs("__transaction_state", {}) == {
        "cleanup.policy": "compact", "segment.bytes": "104857600",
        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    configs = internal_topic_configs("__transaction_state", {
        "transaction.state.log.min.isr": "3", "transaction.state.log.segment.bytes": "2048",
        "min.insync.replicas": "1"})
    assert configs["min.insync.replicas"] == "3" and configs["segment.bytes"] == "2048"
    assert internal_topic_configs("__consumer_offsets", {"offsets.topic.segment.bytes": "4096"}
                                  ) == {"cleanup.policy": "compact", "segment.bytes": "4096"}


@pytest.mark.slow
def test_producing_to_an_internal_topic_is_refused_and_creates_it_as_the_coordinators_need(
    cluster: LocalCluster,
) -> None:
    """A producer naming ``__consumer_offsets`` before any group existed used
    to auto-create it with the user defaults (here 3 partitions, no
    compaction) and write its record there. The group coordinator hashes
    over ``offsets.topic.num.partitions`` (50), so every later JoinGroup
    failed (UNKNOWN_SERVER_ERROR), for good. Kafka creates it as
    FindCoordinator would and refuses the record (INVALID_TOPIC_EXCEPTION)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    outcomes: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 20_000})
    for topic in ("__consumer_offsets", "__transaction_state"):
        producer.produce(topic, b"not a coordinator record", key=b"junk", partition=0,
                         on_delivery=lambda err, msg: outcomes.append(
                             "delivered" if err is None else err.name()))
    producer.flush(30)
    assert outcomes == ["TOPIC_EXCEPTION", "TOPIC_EXCEPTION"]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for topic in ("__consumer_offsets", "__transaction_state"):
        cluster.wait_topic(topic, 50)
        resource = ConfigResource("topic", topic)
        configs = admin.describe_configs([resource])[resource].result(10)
        assert configs["cleanup.policy"].value == INTERNAL_TOPIC_CONFIGS[topic]["cleanup.policy"]
        if topic == "__transaction_state":
            assert configs["min.insync.replicas"].value == "2"
            assert configs["unclean.leader.election.enable"].value == "false"

    # A consumer group works: commit, then read the commit back.
    producer.produce("after-junk", b"v")
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g-junk",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["after-junk"])
        message = None
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None, message and message.error()
        consumer.commit(message=message, asynchronous=False)
        (committed,) = consumer.committed(
            [TopicPartition("after-junk", message.partition())], timeout=10)
        assert committed.offset == message.offset() + 1
    finally:
        consumer.close()


@pytest.mark.slow
def test_a_consumer_does_not_create_the_topic_it_subscribes_to(cluster: LocalCluster) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "none",
                         "allow.auto.create.topics": False})
    try:
        consumer.subscribe(["never-made"])
        for _ in range(10):
            consumer.poll(0.2)
        topics = consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()
    assert "never-made" not in topics or topics["never-made"].error is not None
    producer_view = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    listed = producer_view.list_topics(timeout=10).topics  # all topics: creates nothing
    assert "never-made" not in listed


def test_a_broker_with_auto_create_disabled_answers_unknown_topic(tmp_path: object) -> None:
    c = InProcessCluster(str(tmp_path), 1, {"auto.create.topics.enable": "false"})
    with ClusterThread(c) as ct:
        broker = c.brokers[1]
        api = BrokerApiContext(broker.metadata, broker.replicas, "in-process-cluster")
        handler = broker_handlers(api)[3]
        request = md12.MetadataRequest(
            topics=(md12.MetadataRequestTopic(topic_id=None, name=TopicName("nope")),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        ctx = RequestContext(3, 12, 1, "test", None, "PLAINTEXT")

        async def ask() -> object:
            return await handler(ctx, request)

        response = ct.run(ask())
        assert [t.error_code for t in response.topics] == [ErrorCode.unknown_topic_or_partition]
        assert c.controller.image.topic_by_name("nope") is None

