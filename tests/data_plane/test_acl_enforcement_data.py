"""ACLs on the data path (Kafka's KafkaApis rules, KIP-801 authorizer):
Produce, Fetch (consumers, followers, KIP-227 sessions), ListOffsets,
OffsetForLeaderEpoch, Metadata and DescribeCluster, called through a
broker's handler table as chosen principals and read back off the wire;
and one end-to-end run with kafka-python against an in-process cluster."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from acl_harness import HOST, AclBroker, acl
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError
from kio.schema.describe_cluster.v1 import request as dc1
from kio.schema.fetch.v12 import request as f12
from kio.schema.fetch.v16 import request as f16
from kio.schema.list_offsets.v7 import request as lo7
from kio.schema.metadata.v10 import request as md10
from kio.schema.metadata.v12 import request as md12
from kio.schema.offset_for_leader_epoch.v4 import request as ofle4
from kio.schema.produce.v9 import request as p9

from data_plane.api.common import UNREQUESTED_OPERATIONS
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, PatternType, ResourceType, StandardAcl
from metadata_quorum.image import frozen_mapping
from raftlog.net import NO_RESPONSE
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder

Op, RT = AclOperation, ResourceType
OK = ErrorCode.none
TAF = ErrorCode.topic_authorization_failed
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CLUSTER = (
    0, 1, 2, 3, 23, 60)
ALICE = "User:alice"


@pytest.fixture
def broker() -> Iterator[AclBroker]:
    b = AclBroker()
    b.create_topic("t", 2, 1)
    b.create_topic("u", 1, 1)
    yield b
    b.close()


def batch(*values: bytes, transactional: bool = False) -> bytes:
    builder = BatchBuilder(producer_id=7 if transactional else -1,
                           producer_epoch=0 if transactional else -1,
                           base_sequence=0 if transactional else -1,
                           is_transactional=transactional)
    for v in values:
        builder.append(v, timestamp_ms=1000)
    return builder.build()


def produce(b: AclBroker, parts: dict[tuple[str, int], bytes], user: str = "alice", *,
            acks: int = 1, transactional_id: str | None = None) -> Any:
    topics: dict[str, list[Any]] = {}
    for (name, index), data in parts.items():
        topics.setdefault(name, []).append(p9.PartitionProduceData(index=index, records=data))  # type: ignore[arg-type]
    return b.call(PRODUCE, p9.ProduceRequest(
        transactional_id=transactional_id, acks=acks,  # type: ignore[arg-type]
        timeout=datetime.timedelta(seconds=5),  # type: ignore[arg-type]
        topic_data=tuple(p9.TopicProduceData(name=n, partition_data=tuple(ps))  # type: ignore[arg-type]
                         for n, ps in topics.items())), user=user)


def produce_errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(str(t.name), int(p.index)): p.error_code
            for t in response.responses for p in t.partition_responses}


# ---- Produce ---------------------------------------------------------------------------


def test_produce_needs_write_on_each_topic_and_the_others_proceed(broker: AclBroker) -> None:
    data = {("t", 0): batch(b"a"), ("u", 0): batch(b"b")}
    assert produce_errors(produce(broker, data)) == {("t", 0): TAF, ("u", 0): TAF}
    assert broker.log_end("t") == 0 and broker.log_end("u") == 0
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "t"))
    assert produce_errors(produce(broker, data)) == {("t", 0): OK, ("u", 0): TAF}
    assert broker.log_end("t") == 1 and broker.log_end("u") == 0


def test_produce_to_an_unknown_topic_says_unauthorized_before_unknown(broker: AclBroker) -> None:
    data = {("nope", 0): batch(b"a"), ("t", 9): batch(b"b")}
    assert produce_errors(produce(broker, data)) == {("nope", 0): TAF, ("t", 9): TAF}
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "*"))
    assert produce_errors(produce(broker, data)) == {
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
        ("t", 9): ErrorCode.unknown_topic_or_partition}


def test_a_super_user_produces_without_any_acl(broker: AclBroker) -> None:
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "t", deny=True))
    assert produce_errors(produce(broker, {("t", 0): batch(b"a")}, user="admin")) == {
        ("t", 0): OK}


def test_deny_beats_allow_and_prefixed_wildcard_and_host_acls_apply(broker: AclBroker) -> None:
    broker.set_acls(acl("User:*", Op.WRITE, RT.TOPIC, "*"),
                    acl(ALICE, Op.WRITE, RT.TOPIC, "t", deny=True))
    data = {("t", 0): batch(b"a")}
    assert produce_errors(produce(broker, data)) == {("t", 0): TAF}
    assert produce_errors(produce(broker, data, user="bob")) == {("t", 0): OK}
    # A prefixed DENY covers every topic starting with it; ALL covers WRITE.
    broker.set_acls(acl(ALICE, Op.ALL, RT.TOPIC, "*"),
                    acl(ALICE, Op.WRITE, RT.TOPIC, "u", deny=True, pattern=PatternType.PREFIXED))
    assert produce_errors(produce(broker, {("t", 0): batch(b"a"), ("u", 0): batch(b"b")})) == {
        ("t", 0): OK, ("u", 0): TAF}
    # An ACL for another host does not apply; one for ours does.
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "t", host="10.9.9.9"))
    assert produce_errors(produce(broker, data)) == {("t", 0): TAF}
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "t", host=HOST))
    assert produce_errors(produce(broker, data)) == {("t", 0): OK}


def test_allow_everyone_if_no_acl_only_where_a_resource_has_none() -> None:
    b = AclBroker(allow_if_no_acl=True)
    try:
        b.create_topic("t")
        b.create_topic("u")
        b.set_acls(acl("User:bob", Op.WRITE, RT.TOPIC, "u"))
        assert produce_errors(produce(b, {("t", 0): batch(b"a"), ("u", 0): batch(b"b")})) == {
            ("t", 0): OK, ("u", 0): TAF}
    finally:
        b.close()


def test_internal_topics_need_write_like_any_other(broker: AclBroker) -> None:
    broker.create_topic("__consumer_offsets")
    data = {("__consumer_offsets", 0): batch(b"a")}
    assert produce_errors(produce(broker, data)) == {("__consumer_offsets", 0): TAF}
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "__consumer_offsets"))
    assert produce_errors(produce(broker, data)) == {
        ("__consumer_offsets", 0): ErrorCode.invalid_topic_exception}


def test_transactional_batches_need_write_on_the_transactional_id(broker: AclBroker) -> None:
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "*"))
    data = {("t", 0): batch(b"a", transactional=True), ("u", 0): batch(b"b")}
    refused = produce(broker, data, transactional_id="tx")
    assert produce_errors(refused) == {("t", 0): ErrorCode.transactional_id_authorization_failed,
                                       ("u", 0): ErrorCode.transactional_id_authorization_failed}
    assert all(p.base_offset == -1 and p.error_message
               for t in refused.responses for p in t.partition_responses)
    assert broker.log_end("u") == 0  # nothing appended
    # No transactional id at all: refused the same way.
    assert set(produce_errors(produce(broker, data)).values()) == {
        ErrorCode.transactional_id_authorization_failed}
    assert produce(broker, data, acks=0, transactional_id="tx") is NO_RESPONSE
    # A transactional id on plain batches is not checked (Kafka looks at the batches).
    assert produce_errors(produce(broker, {("u", 0): batch(b"b")}, transactional_id="tx")) == {
        ("u", 0): OK}
    broker.set_acls(acl(ALICE, Op.WRITE, RT.TOPIC, "*"),
                    acl(ALICE, Op.WRITE, RT.TRANSACTIONAL_ID, "tx"))
    errors = produce_errors(produce(broker, data, transactional_id="tx"))
    assert ErrorCode.transactional_id_authorization_failed not in errors.values()


# ---- Fetch -------------------------------------------------------------------------------


def consumer_fetch(b: AclBroker, topics: dict[str, list[int]], user: str = "alice", *,
                   session_id: int = 0, epoch: int = -1) -> Any:
    return b.call(FETCH, f12.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,  # type: ignore[arg-type]
        max_bytes=1 << 20, isolation_level=0, session_id=session_id,  # type: ignore[arg-type]
        session_epoch=epoch, rack_id="", forgotten_topics_data=(),  # type: ignore[arg-type]
        topics=tuple(f12.FetchTopic(topic=name, partitions=tuple(  # type: ignore[arg-type]
            f12.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,  # type: ignore[arg-type]
                               last_fetched_epoch=-1, log_start_offset=-1,  # type: ignore[arg-type]
                               partition_max_bytes=1 << 16) for p in parts))  # type: ignore[arg-type]
                     for name, parts in topics.items())), user=user)


def fetched(response: Any) -> dict[tuple[str, int], tuple[ErrorCode, bool]]:
    """(topic or id, partition) -> (error, whether records came)."""
    return {(str(t.topic if hasattr(t, "topic") else t.topic_id), int(p.partition_index)):
            (p.error_code, bool(p.records)) for t in response.responses for p in t.partitions}


def test_a_consumer_needs_read_and_an_unauthorized_partition_gets_no_records(
        broker: AclBroker) -> None:
    produce(broker, {("t", 0): batch(b"secret"), ("u", 0): batch(b"public")}, user="admin")
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "u"))
    got = fetched(consumer_fetch(broker, {"t": [0, 7], "u": [0], "nope": [0]}))
    assert got == {("t", 0): (TAF, False), ("t", 7): (TAF, False), ("u", 0): (OK, True),
                   ("nope", 0): (TAF, False)}
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "*"),
                    acl(ALICE, Op.READ, RT.TOPIC, "t", deny=True))
    assert fetched(consumer_fetch(broker, {"t": [0]})) == {("t", 0): (TAF, False)}
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "t"))
    assert fetched(consumer_fetch(broker, {"t": [0, 7]})) == {
        ("t", 0): (OK, True), ("t", 7): (ErrorCode.unknown_topic_or_partition, False)}


def test_an_unknown_topic_id_is_said_before_authorization(broker: AclBroker) -> None:
    tid, unknown = broker.cluster.image.topic_ids["t"], uuid.uuid4()
    response = broker.call(FETCH, f16.FetchRequest(
        replica_state=f16.ReplicaState(replica_id=-1, replica_epoch=-1),  # type: ignore[arg-type]
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,  # type: ignore[arg-type]
        isolation_level=0, session_id=0, session_epoch=-1, rack_id="",  # type: ignore[arg-type]
        forgotten_topics_data=(), topics=tuple(f16.FetchTopic(topic_id=i, partitions=(  # type: ignore[arg-type]
            f16.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,  # type: ignore[arg-type]
                               last_fetched_epoch=-1, log_start_offset=-1,  # type: ignore[arg-type]
                               partition_max_bytes=100),)) for i in (tid, unknown))))  # type: ignore[arg-type]
    assert fetched(response) == {(str(tid), 0): (TAF, False),
                                 (str(unknown), 0): (ErrorCode.unknown_topic_id, False)}


def follower_fetch(b: AclBroker, tid: uuid.UUID, parts: list[int], user: str, *,
                   session_id: int = 0, epoch: int = -1) -> Any:
    broker_epoch = b.cluster.image.brokers[2].epoch
    return b.call(FETCH, f16.FetchRequest(
        replica_state=f16.ReplicaState(replica_id=2, replica_epoch=broker_epoch),  # type: ignore[arg-type]
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,  # type: ignore[arg-type]
        isolation_level=0, session_id=session_id, session_epoch=epoch,  # type: ignore[arg-type]
        rack_id="", forgotten_topics_data=(),
        topics=(f16.FetchTopic(topic_id=tid, partitions=tuple(  # type: ignore[arg-type]
            f16.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,  # type: ignore[arg-type]
                               last_fetched_epoch=-1, log_start_offset=-1,  # type: ignore[arg-type]
                               partition_max_bytes=1 << 16) for p in parts)),)  # type: ignore[arg-type]
        if parts else ()), user=user)


def test_a_follower_needs_cluster_action_and_is_refused_on_every_partition() -> None:
    b = AclBroker(brokers=2)
    try:
        tid = b.create_topic("r", 3, 2)  # broker 1 leads 0 and 2, follows 1
        produce(b, {("r", 0): batch(b"x")}, user="admin")
        # READ on the topic is not what a follower needs.
        b.set_acls(acl("User:broker", Op.READ, RT.TOPIC, "*"))
        got = fetched(follower_fetch(b, tid, [0, 2, 9], "broker"))
        assert got == {(str(tid), p): (TAF, False) for p in (0, 2, 9)}
        b.set_acls(acl("User:broker", Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME))
        got = fetched(follower_fetch(b, tid, [0, 2], "broker"))
        assert got == {(str(tid), 0): (OK, True), (str(tid), 2): (OK, False)}
    finally:
        b.close()


def test_a_consumer_session_partition_answers_the_refusal_once_read_is_revoked(
        broker: AclBroker) -> None:
    produce(broker, {("t", 0): batch(b"a")}, user="admin")
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "t"))
    first = consumer_fetch(broker, {"t": [0, 1]}, epoch=0)
    sid = first.session_id
    assert sid != 0 and fetched(first) == {("t", 0): (OK, True), ("t", 1): (OK, False)}
    assert fetched(consumer_fetch(broker, {}, session_id=sid, epoch=1)) == {
        ("t", 0): (OK, True)}  # fetch offset 0 again: the records, again
    broker.set_acls()
    assert fetched(consumer_fetch(broker, {}, session_id=sid, epoch=2)) == {
        ("t", 0): (TAF, False), ("t", 1): (TAF, False)}
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "t"))
    got = fetched(consumer_fetch(broker, {}, session_id=sid, epoch=3))
    assert got[("t", 0)] == (OK, True)


def test_a_parked_follower_session_is_refused_whole_to_another_principal() -> None:
    b = AclBroker(brokers=2)
    try:
        tid = b.create_topic("r", 3, 2)
        b.set_acls(acl("User:broker", Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME))
        sid = follower_fetch(b, tid, [0, 2], "broker", epoch=0).session_id
        for epoch in (1, 2, 3):  # idle: the partitions get parked
            assert fetched(follower_fetch(b, tid, [], "broker", session_id=sid, epoch=epoch)) == {}
        session = b.api.fetch_sessions.get(sid)
        assert session is not None and all(c.parked for c in session.partitions.values())
        # The same image, the same session, another principal: every partition refused.
        got = fetched(follower_fetch(b, tid, [], "mallory", session_id=sid, epoch=4))
        assert got == {(str(tid), 0): (TAF, False), (str(tid), 2): (TAF, False)}
        # The follower is answered afresh (the session last sent errors).
        got = fetched(follower_fetch(b, tid, [], "broker", session_id=sid, epoch=5))
        assert got == {(str(tid), 0): (OK, False), (str(tid), 2): (OK, False)}
    finally:
        b.close()


# ---- ListOffsets and OffsetForLeaderEpoch -------------------------------------------------


def list_offsets(b: AclBroker, names: list[str], user: str = "alice") -> dict[str, Any]:
    response = b.call(LIST_OFFSETS, lo7.ListOffsetsRequest(
        replica_id=-1, isolation_level=0, topics=tuple(  # type: ignore[arg-type]
            lo7.ListOffsetsTopic(name=n, partitions=(lo7.ListOffsetsPartition(  # type: ignore[arg-type]
                partition_index=0, current_leader_epoch=-1, timestamp=-1),))  # type: ignore[arg-type]
            for n in names)), user=user)
    return {str(t.name): (t.partitions[0].error_code, int(t.partitions[0].offset))
            for t in response.topics}


def test_list_offsets_needs_describe_which_read_and_write_imply(broker: AclBroker) -> None:
    produce(broker, {("t", 0): batch(b"a", b"b")}, user="admin")
    assert list_offsets(broker, ["t", "u", "nope"]) == {"t": (TAF, -1), "u": (TAF, -1),
                                                       "nope": (TAF, -1)}
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "t"), acl(ALICE, Op.WRITE, RT.TOPIC, "u"))
    assert list_offsets(broker, ["t", "u"]) == {"t": (OK, 2), "u": (OK, 0)}
    # A DENY implies nothing: DESCRIBE denied, READ still allowed.
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "t"),
                    acl(ALICE, Op.DESCRIBE, RT.TOPIC, "t", deny=True))
    assert list_offsets(broker, ["t"]) == {"t": (TAF, -1)}


def offsets_for_epoch(b: AclBroker, names: list[str], user: str) -> dict[str, ErrorCode]:
    response = b.call(OFFSET_FOR_LEADER_EPOCH, ofle4.OffsetForLeaderEpochRequest(
        replica_id=-1, topics=tuple(ofle4.OffsetForLeaderTopic(  # type: ignore[arg-type]
            topic=n, partitions=(ofle4.OffsetForLeaderPartition(  # type: ignore[arg-type]
                partition=0, current_leader_epoch=-1, leader_epoch=0),))  # type: ignore[arg-type]
            for n in names)), user=user)
    return {str(t.topic): t.partitions[0].error_code for t in response.topics}


def test_offset_for_leader_epoch_takes_cluster_action_or_describe_per_topic(
        broker: AclBroker) -> None:
    assert offsets_for_epoch(broker, ["t", "u"], "alice") == {"t": TAF, "u": TAF}
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "t"),
                    acl("User:broker", Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME))
    assert offsets_for_epoch(broker, ["t", "u"], "alice") == {"t": OK, "u": TAF}
    assert offsets_for_epoch(broker, ["t", "u"], "broker") == {"t": OK, "u": OK}


# ---- Metadata and DescribeCluster --------------------------------------------------------


def metadata(b: AclBroker, names: list[str] | None = None, *, ids: list[uuid.UUID] = (),  # type: ignore[assignment]
             user: str = "alice", auto: bool = False, ops: bool = False) -> Any:
    topics = None
    if names is not None or ids:
        topics = tuple(md12.MetadataRequestTopic(topic_id=None, name=n) for n in names or ()) + \
            tuple(md12.MetadataRequestTopic(topic_id=i, name=None) for i in ids)
    return b.call(METADATA, md12.MetadataRequest(
        topics=topics, allow_auto_topic_creation=auto,  # type: ignore[arg-type]
        include_topic_authorized_operations=ops), user=user)


def entries(response: Any) -> list[tuple[str | None, ErrorCode, int, bool]]:
    """(name, error, partition count, whether a topic id is told)."""
    return [(t.name, t.error_code, len(t.partitions),
             t.topic_id not in (None, uuid.UUID(int=0))) for t in response.topics]


def test_an_all_topics_request_lists_only_describable_topics(broker: AclBroker) -> None:
    assert entries(metadata(broker)) == []
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "u"))
    assert entries(metadata(broker)) == [("u", OK, 1, True)]
    assert {t.name for t in metadata(broker, user="admin").topics} == {"t", "u"}


def test_a_named_topic_without_describe_tells_nothing_about_it(broker: AclBroker) -> None:
    tid = broker.cluster.image.topic_ids["t"]
    response = metadata(broker, ["t", "missing"], ids=[tid])
    assert entries(response) == [("t", TAF, 0, False), ("missing", TAF, 0, False),
                                 (None, TAF, 0, True)]
    assert response.topics[2].topic_id == tid  # ids are not secret (Kafka)
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "*"))
    assert entries(metadata(broker, ["t", "missing"], ids=[tid, uuid.uuid4()])) == [
        ("t", OK, 2, True), ("missing", ErrorCode.unknown_topic_or_partition, 0, False),
        ("t", OK, 2, True), ("", ErrorCode.unknown_topic_id, 0, True)]


def test_auto_creation_needs_create_on_the_cluster_or_the_topic(broker: AclBroker) -> None:
    def asked_to_create() -> list[str]:
        names = [str(t.name) for key, r in broker.forwarded if key == 19 for t in r.topics]
        broker.forwarded.clear()
        return names

    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "*"))
    assert entries(metadata(broker, ["new1"], auto=True)) == [("new1", TAF, 0, False)]
    broker.set_acls(acl(ALICE, Op.CREATE, RT.TOPIC, "new", pattern=PatternType.PREFIXED))
    # CREATE implies no DESCRIBE: still refused.
    assert entries(metadata(broker, ["new1"], auto=True)) == [("new1", TAF, 0, False)]
    assert asked_to_create() == []
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "*"),
                    acl(ALICE, Op.CREATE, RT.TOPIC, "new", pattern=PatternType.PREFIXED))
    got = entries(metadata(broker, ["new1", "other"], auto=True))
    assert got[1] == ("other", TAF, 0, False) and got[0][1] != TAF
    assert asked_to_create() == ["new1"]
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "*"),
                    acl(ALICE, Op.CREATE, RT.CLUSTER, CLUSTER_NAME))
    metadata(broker, ["other"], auto=True)
    assert asked_to_create() == ["other"]
    # Not asked to create: unknown, whatever the ACLs.
    assert entries(metadata(broker, ["third"]))[0][1] == ErrorCode.unknown_topic_or_partition
    assert asked_to_create() == []


def bits(*operations: AclOperation) -> int:
    return sum(1 << op for op in operations)


def test_topic_authorized_operations_are_filled_only_when_asked(broker: AclBroker) -> None:
    broker.set_acls(acl(ALICE, Op.READ, RT.TOPIC, "t"), acl(ALICE, Op.ALTER_CONFIGS, RT.TOPIC, "t"))
    response = metadata(broker, ["t"], ops=True)
    assert response.topics[0].topic_authorized_operations == bits(
        Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
    assert metadata(broker, ["t"]).topics[0].topic_authorized_operations == UNREQUESTED_OPERATIONS
    # A refused topic keeps "not requested"; a super user has every topic operation.
    assert metadata(broker, ["u"], ops=True).topics[0].topic_authorized_operations == \
        UNREQUESTED_OPERATIONS
    assert metadata(broker, ["u"], ops=True, user="admin").topics[0] \
        .topic_authorized_operations == bits(Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE,
                                             Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                                             Op.ALTER_CONFIGS)


CLUSTER_OPS = bits(Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                   Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE)


def test_cluster_authorized_operations_need_describe_on_the_cluster(broker: AclBroker) -> None:
    def v10(user: str = "alice") -> int:
        return int(broker.call(METADATA, md10.MetadataRequest(
            topics=(), allow_auto_topic_creation=False,  # type: ignore[arg-type]
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=False), user=user).cluster_authorized_operations)

    def describe_cluster(include: bool, user: str = "alice") -> Any:
        return broker.call(DESCRIBE_CLUSTER, dc1.DescribeClusterRequest(
            include_cluster_authorized_operations=include, endpoint_type=1), user=user)  # type: ignore[arg-type]

    broker.set_acls(acl(ALICE, Op.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME))
    assert v10() == 0 and describe_cluster(True).cluster_authorized_operations == 0
    broker.set_acls(acl(ALICE, Op.ALTER, RT.CLUSTER, CLUSTER_NAME))
    assert v10() == bits(Op.ALTER, Op.DESCRIBE)
    answer = describe_cluster(True)
    assert answer.error_code == OK and answer.cluster_authorized_operations == bits(
        Op.ALTER, Op.DESCRIBE)
    # DescribeCluster needs no ACL; not asked: "not requested".
    broker.set_acls()
    answer = describe_cluster(False)
    assert answer.error_code == OK and [b.broker_id for b in answer.brokers] == [1]
    assert answer.cluster_authorized_operations == UNREQUESTED_OPERATIONS
    assert describe_cluster(True, user="admin").cluster_authorized_operations == CLUSTER_OPS


def test_without_an_authorizer_everything_is_allowed_and_every_operation_listed() -> None:
    b = AclBroker(authorizer=False)
    try:
        b.create_topic("t")
        assert b.api.authorization is None
        assert produce_errors(produce(b, {("t", 0): batch(b"a")}, user="ANONYMOUS")) == {
            ("t", 0): OK}
        assert fetched(consumer_fetch(b, {"t": [0]})) == {("t", 0): (OK, True)}
        assert metadata(b, ["t"], ops=True).topics[0].topic_authorized_operations == bits(
            Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
            Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
    finally:
        b.close()


# ---- End to end: kafka-python against an in-process cluster -------------------------------


def test_kafka_python_produce_is_refused_then_allowed_once_the_acl_is_added(
        tmp_path: object) -> None:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    # In-process brokers have no SASL: the client is User:ANONYMOUS.
    cluster = InProcessCluster(str(tmp_path), 1, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    anonymous = "User:ANONYMOUS"

    def set_acls(*bindings: Any) -> None:
        controller = cluster.controller
        acls = {i: StandardAcl(i, b) for b in bindings for i in [uuid.uuid4()]}
        controller._publish(dataclasses.replace(controller.image, acls=frozen_mapping(acls)))

    with ClusterThread(cluster) as ct:
        ct.call(cluster.controller.create_topic, "acl-e2e", 1, 1)
        ct.run(cluster.wait_until(lambda: cluster.brokers[1].replicas.get(("acl-e2e", 0))
                                  is not None))
        describe = acl(anonymous, Op.DESCRIBE, RT.TOPIC, "acl-e2e")
        ct.call(set_acls, describe)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1,
                                 enable_idempotence=False, retries=0)
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send("acl-e2e", b"refused").get(timeout=30)
            ct.call(set_acls, describe, acl(anonymous, Op.WRITE, RT.TOPIC, "acl-e2e"))
            sent = producer.send("acl-e2e", b"allowed").get(timeout=30)
            assert sent.offset == 0
        finally:
            producer.close(timeout=5)
        hosted = cluster.brokers[1].replicas.get(("acl-e2e", 0))
        assert hosted is not None and hosted.partition.log_end_offset == 1
