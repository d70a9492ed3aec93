"""ACLs on consumer groups and transactional ids, end to end: confluent-kafka
(librdkafka) clients against an in-process broker with the standard
authorizer on.

The in-process cluster has no SASL, so the clients and the broker's own
inter-broker requests (transaction markers) are all ``User:ANONYMOUS``; it
gets what a broker needs (CLUSTER_ACTION on the cluster) and every topic
operation, but nothing on groups or transactional ids until a test grants it.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from data_plane.security_config import STANDARD_AUTHORIZER
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from metadata_quorum.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from metadata_quorum.image import frozen_mapping

pytestmark = pytest.mark.timeout(180)

ANONYMOUS = "User:ANONYMOUS"
TOPIC = "acl-orders"


def _acl(resource_type: ResourceType, name: str, operation: AclOperation) -> StandardAcl:
    return StandardAcl(uuid.uuid4(), AclBinding(
        resource_type, name, PatternType.LITERAL, ANONYMOUS, "*", operation,
        AclPermissionType.ALLOW))


BASE_ACLS = (
    _acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CLUSTER_ACTION),
    _acl(ResourceType.TOPIC, "*", AclOperation.ALL),
)


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 1, {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    })
    with ClusterThread(c) as ct:
        _set_acls(ct, *BASE_ACLS)
        ct.call(c.controller.create_topic, TOPIC, 1, 1)
        ct.run(c.wait_until(lambda: all(
            b.replicas.get((TOPIC, 0)) is not None for b in c.brokers.values())))
        yield ct


def _set_acls(ct: ClusterThread, *acls: StandardAcl) -> None:
    """Put ``acls`` in the metadata image, as the controller would."""
    controller = ct.cluster.controller

    def publish() -> None:
        controller._publish(dataclasses.replace(
            controller.image, acls=frozen_mapping({a.acl_id: a for a in acls})))
    ct.call(publish)


def _poll_until(consumer: Consumer, wanted: int | None, timeout_s: float = 30) -> object:
    """Poll until an error with code ``wanted`` (None: until a record) and return it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        error = msg.error()
        if wanted is None and error is None:
            return msg
        if error is not None and error.code() == wanted:
            return error
    raise AssertionError(f"no {'record' if wanted is None else wanted} within {timeout_s} s")


def test_a_consumer_group_is_refused_until_read_on_the_group_is_granted(
        cluster: ClusterThread) -> None:
    bootstrap = cluster.cluster.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(TOPIC, b"hello")
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "acl-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        _poll_until(consumer, KafkaError.GROUP_AUTHORIZATION_FAILED)

        _set_acls(cluster, *BASE_ACLS, _acl(ResourceType.GROUP, "acl-group", AclOperation.READ))
        msg = _poll_until(consumer, None)
        assert msg.value() == b"hello"  # type: ignore[attr-defined]
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed(consumer.assignment(), 10)
        assert committed.offset == 1
    finally:
        consumer.close()


def test_a_transactional_producer_is_refused_until_write_on_its_id_is_granted(
        cluster: ClusterThread) -> None:
    bootstrap = cluster.cluster.bootstrap_servers
    refused = Producer({"bootstrap.servers": bootstrap, "transactional.id": "acl-tx"})
    with pytest.raises(KafkaException) as raised:
        refused.init_transactions(20)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    del raised, refused  # its fatal error stays; a new producer is needed

    _set_acls(cluster, *BASE_ACLS, _acl(ResourceType.TRANSACTIONAL_ID, "acl-tx",
                                        AclOperation.WRITE))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "acl-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"committed")
    producer.commit_transaction(30)
    del producer

    # The commit's markers went broker to broker (CLUSTER_ACTION): a
    # read_committed consumer sees the record.
    _set_acls(cluster, *BASE_ACLS, _acl(ResourceType.GROUP, "acl-reader", AclOperation.READ))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "acl-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        consumer.subscribe([TOPIC])
        msg = _poll_until(consumer, None)
        assert msg.value() == b"committed"  # type: ignore[attr-defined]
    finally:
        consumer.close()
