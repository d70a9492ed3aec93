"""DescribeTopicPartitions v0 (API 75, KIP-966's paged describe), as Kafka's
DescribeTopicPartitionsRequestHandler answers it: called through a broker's
handler table and read back off the wire (`acl_harness.AclBroker`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from acl_harness import AclBroker, acl
from kio.schema.describe_topic_partitions.v0 import request as dtp

from data_plane.kafka_api import BROKER_API_VERSIONS
from metadata_quorum.acls import AclOperation, ResourceType
from raftlog.net.errors import ErrorCode

DESCRIBE_TOPIC_PARTITIONS = 75
UNREQUESTED = -(2 ** 31)


def describe(b: AclBroker, *names: str, limit: int = 2000,
             cursor: tuple[str, int] | None = None, user: str = "admin") -> Any:
    return b.call(DESCRIBE_TOPIC_PARTITIONS, dtp.DescribeTopicPartitionsRequest(
        topics=tuple(dtp.TopicRequest(name=n) for n in names),  # type: ignore[arg-type]
        response_partition_limit=limit,  # type: ignore[arg-type]
        cursor=None if cursor is None else dtp.Cursor(
            topic_name=cursor[0], partition_index=cursor[1]),  # type: ignore[arg-type]
    ), user=user)


def pages(b: AclBroker, *names: str, limit: int, user: str = "admin") -> list[list[tuple[str, int]]]:
    """Every page a client paging with ``limit`` gets: (topic, partition) each."""
    out: list[list[tuple[str, int]]] = []
    cursor: tuple[str, int] | None = None
    while True:
        response = describe(b, *names, limit=limit, cursor=cursor, user=user)
        out.append([(str(t.name), int(p.partition_index))
                    for t in response.topics for p in t.partitions])
        if response.next_cursor is None:
            return out
        cursor = (str(response.next_cursor.topic_name), int(response.next_cursor.partition_index))
        assert len(out) < 20, "the cursor never ended"


def _no_id(topic_id: uuid.UUID | None) -> bool:
    """The zero id (kio reads it as None)."""
    return topic_id is None or topic_id.int == 0


@pytest.fixture
def open_broker() -> Iterator[AclBroker]:
    """Three registered brokers, no authorizer; topics b (2 partitions, RF 3),
    a (3), c (1)."""
    b = AclBroker(brokers=3, authorizer=False)
    b.create_topic("b", 2, 3)
    b.create_topic("a", 3, 1)
    b.create_topic("c", 1, 1)
    yield b
    b.close()


def test_it_is_advertised_at_v0() -> None:
    assert BROKER_API_VERSIONS[DESCRIBE_TOPIC_PARTITIONS] == (0, 0)


def test_every_topic_sorted_by_name_with_the_metadata_of_each_partition(
        open_broker: AclBroker) -> None:
    response = describe(open_broker)
    assert [str(t.name) for t in response.topics] == ["a", "b", "c"]
    assert response.next_cursor is None
    image = open_broker.cluster.image
    for topic in response.topics:
        assert topic.error_code == ErrorCode.none
        assert topic.topic_id == image.topic_ids[str(topic.name)]
        assert not topic.is_internal
        assert topic.topic_authorized_operations != UNREQUESTED  # always filled in
        registered = image.topics[topic.topic_id].partitions
        assert [int(p.partition_index) for p in topic.partitions] == sorted(registered)
        for p in topic.partitions:
            reg = registered[int(p.partition_index)]
            assert p.error_code == ErrorCode.none
            assert (p.leader_id, p.leader_epoch) == (reg.leader, reg.leader_epoch)
            assert (tuple(p.replica_nodes), tuple(p.isr_nodes)) == (reg.replicas, reg.isr)
            assert tuple(p.offline_replicas) == ()
            # No ELR kept (KIP-966 off): empty lists, not null, as Kafka sends.
            assert p.eligible_leader_replicas == () and p.last_known_elr == ()
    assert [len(t.partitions[0].replica_nodes) for t in response.topics] == [1, 3, 1]


def test_pages_cut_inside_a_topic_and_at_a_topic_boundary(open_broker: AclBroker) -> None:
    # a0 a1 a2 | b0 b1 | c0: a page of 2 ends inside a, a page of 3 right after a.
    assert pages(open_broker, limit=2) == [
        [("a", 0), ("a", 1)], [("a", 2), ("b", 0)], [("b", 1), ("c", 0)]]
    assert pages(open_broker, limit=3) == [[("a", 0), ("a", 1), ("a", 2)],
                                           [("b", 0), ("b", 1), ("c", 0)]]
    boundary = describe(open_broker, limit=3)
    assert (str(boundary.next_cursor.topic_name), int(boundary.next_cursor.partition_index)) \
        == ("b", 0)
    inside = describe(open_broker, limit=2)
    assert (str(inside.next_cursor.topic_name), int(inside.next_cursor.partition_index)) \
        == ("a", 2)
    # Named topics page the same way, in name order whatever the request's order.
    assert pages(open_broker, "c", "a", limit=2) == [[("a", 0), ("a", 1)], [("a", 2), ("c", 0)]]


def test_the_broker_caps_the_page_at_max_request_partition_size_limit() -> None:
    b = AclBroker(authorizer=False, config={"max.request.partition.size.limit": "2"})
    try:
        b.create_topic("a", 3, 1)
        response = describe(b, limit=100)
        assert [int(p.partition_index) for p in response.topics[0].partitions] == [0, 1]
        assert (str(response.next_cursor.topic_name), int(response.next_cursor.partition_index)) \
            == ("a", 2)
    finally:
        b.close()


def test_a_cursor_topic_not_named_is_an_invalid_request(open_broker: AclBroker) -> None:
    response = describe(open_broker, "a", "b", cursor=("c", 0))
    assert [(str(t.name), t.error_code) for t in response.topics] == [
        ("a", ErrorCode.invalid_request), ("b", ErrorCode.invalid_request)]
    assert all(not t.partitions for t in response.topics)


def test_unknown_and_illegal_named_topics_are_said_and_the_others_answered(
        open_broker: AclBroker) -> None:
    response = describe(open_broker, "nope", "c", "bad/name")
    assert [(str(t.name), t.error_code) for t in response.topics] == [
        ("bad/name", ErrorCode.invalid_topic_exception), ("c", ErrorCode.none),
        ("nope", ErrorCode.unknown_topic_or_partition)]
    missing = response.topics[2]
    assert _no_id(missing.topic_id) and missing.partitions == ()
    # Asking for everything never names a topic that is not there.
    assert all(t.error_code == ErrorCode.none for t in describe(open_broker).topics)


def test_a_named_topic_that_is_not_there_asks_nothing_of_the_controller(
        open_broker: AclBroker) -> None:
    # Unlike Metadata, DescribeTopicPartitions never auto-creates.
    describe(open_broker, "unseen")
    assert open_broker.forwarded_keys() == []
    assert "unseen" not in open_broker.cluster.image.topic_ids


def test_acls_list_only_describable_topics_and_refuse_named_ones_last() -> None:
    b = AclBroker(brokers=1)
    try:
        b.create_topic("a", 2, 1)
        b.create_topic("b", 1, 1)
        b.create_topic("secret", 1, 1)
        b.set_acls(acl("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "a"),
                   acl("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "b"))
        listing = describe(b, user="alice")
        assert [str(t.name) for t in listing.topics] == ["a", "b"]
        named = describe(b, "secret", "a", "missing", user="alice")
        assert [(str(t.name), t.error_code) for t in named.topics] == [
            ("a", ErrorCode.none),
            ("missing", ErrorCode.topic_authorization_failed),
            ("secret", ErrorCode.topic_authorization_failed)]
        refused = [t for t in named.topics if t.error_code != ErrorCode.none]
        assert all(_no_id(t.topic_id) and t.partitions == () for t in refused)
        assert all(t.topic_authorized_operations == UNREQUESTED for t in refused)
        # The operations alice may do on a: DESCRIBE only.
        assert named.topics[0].topic_authorized_operations == 1 << AclOperation.DESCRIBE
        # A cursor into a topic alice may not describe starts it at partition 0:
        # nothing about its partitions is told.
        paged = describe(b, "a", "secret", cursor=("secret", 5), user="alice")
        assert [(str(t.name), t.error_code) for t in paged.topics] == [
            ("secret", ErrorCode.topic_authorization_failed)]
    finally:
        b.close()
