"""ACLs on the admin APIs a broker answers or forwards (Kafka's KafkaApis and
ControllerApis rules). The broker checks before forwarding (our forwarding
carries no principal): what it refuses never reaches the controller, and
its refusals are merged into the controller's answer."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from acl_harness import AclBroker, acl
from kio.schema.alter_client_quotas.v1 import request as acq1
from kio.schema.alter_configs.v2 import request as ac2
from kio.schema.alter_partition_reassignments.v1 import request as apr1
from kio.schema.alter_user_scram_credentials.v0 import request as aus0
from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.delete_records.v2 import request as dr2
from kio.schema.delete_topics.v5 import request as dt5
from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.describe_client_quotas.v1 import request as dcq1
from kio.schema.describe_configs.v4 import request as dcf4
from kio.schema.describe_log_dirs.v1 import request as dld1
from kio.schema.describe_log_dirs.v4 import request as dld4
from kio.schema.describe_quorum.v2 import request as dq2
from kio.schema.describe_user_scram_credentials.v0 import request as dus0
from kio.schema.elect_leaders.v2 import request as el2
from kio.schema.incremental_alter_configs.v1 import request as iac1
from kio.schema.list_partition_reassignments.v0 import request as lpr0
from kio.schema.metadata.v12 import request as md12
from kio.schema.unregister_broker.v0 import request as ub0

from data_plane.api.build import build, response_class
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, PatternType, ResourceType
from raftlog.net.errors import ErrorCode

Op, RT = AclOperation, ResourceType
OK = ErrorCode.none
TAF = ErrorCode.topic_authorization_failed
CAF = ErrorCode.cluster_authorization_failed
ALICE = "User:alice"
SECOND = datetime.timedelta(seconds=5)
TOPIC_TYPE, BROKER_TYPE = 2, 4


@pytest.fixture
def broker() -> Iterator[AclBroker]:
    b = AclBroker()
    b.create_topic("t", 2, 1)
    b.create_topic("u", 1, 1)
    yield b
    b.close()


def answer_ok(field: str, entries: Any = None) -> Any:
    """A canned controller answer: ``field`` built from the request."""
    def answer(request: Any) -> Any:
        values: dict[str, Any] = {"error_code": OK}
        if field:
            values[field] = entries(request)
        return build(response_class(request), values)
    return answer


# ---- CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords ------------------------


def create_topics(b: AclBroker, *names: str, user: str = "alice") -> dict[str, Any]:
    response = b.call(19, ct7.CreateTopicsRequest(
        topics=tuple(ct7.CreatableTopic(name=n, num_partitions=1, replication_factor=1,  # type: ignore[arg-type]
                                        assignments=(), configs=()) for n in names),
        timeout=SECOND, validate_only=False), user=user)  # type: ignore[arg-type]
    return {str(t.name): t for t in response.topics}


def test_create_topics_needs_create_on_the_cluster_or_each_topic(broker: AclBroker) -> None:
    got = create_topics(broker, "a1", "b1")
    assert {n: t.error_code for n, t in got.items()} == {"a1": TAF, "b1": TAF}
    assert broker.forwarded_keys() == [] and "a1" not in broker.cluster.image.topic_ids
    broker.set_acls(acl(ALICE, Op.CREATE, RT.TOPIC, "a", pattern=PatternType.PREFIXED))
    got = create_topics(broker, "a1", "b1")
    assert {n: t.error_code for n, t in got.items()} == {"a1": OK, "b1": TAF}
    assert [str(t.name) for _, r in broker.forwarded for t in r.topics] == ["a1"]
    # Created, but not described: no configs, counts or factor (Kafka's controller).
    assert (got["a1"].topic_config_error_code, got["a1"].num_partitions,
            got["a1"].replication_factor) == (TAF, -1, -1)
    assert got["a1"].topic_id is not None
    broker.set_acls(acl(ALICE, Op.CREATE, RT.CLUSTER, CLUSTER_NAME),
                    acl(ALICE, Op.ALTER_CONFIGS, RT.TOPIC, "*"))  # implies DESCRIBE_CONFIGS
    got = create_topics(broker, "a2", "b2")
    assert {n: (t.error_code, t.topic_config_error_code, t.num_partitions)
            for n, t in got.items()} == {"a2": (OK, OK, 1), "b2": (OK, OK, 1)}


def test_a_refused_topic_named_twice_is_a_duplicate_first(broker: AclBroker) -> None:
    response = broker.call(19, ct7.CreateTopicsRequest(topics=tuple(
        ct7.CreatableTopic(name="dup", num_partitions=1, replication_factor=1,  # type: ignore[arg-type]
                           assignments=(), configs=()) for _ in range(2)),
        timeout=SECOND, validate_only=False))  # type: ignore[arg-type]
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("dup", ErrorCode.invalid_request)]
    assert broker.forwarded_keys() == []


def delete_topics(b: AclBroker, names: list[str] = (), ids: list[Any] = (),  # type: ignore[assignment]
                  user: str = "alice") -> list[tuple[str | None, Any, ErrorCode]]:
    response = b.call(20, dt6.DeleteTopicsRequest(timeout=SECOND, topics=tuple(  # type: ignore[arg-type]
        [dt6.DeleteTopicState(name=n, topic_id=None) for n in names]  # type: ignore[arg-type]
        + [dt6.DeleteTopicState(name=None, topic_id=i) for i in ids])), user=user)
    return sorted(((r.name, r.topic_id, r.error_code) for r in response.responses),
                  key=lambda e: (str(e[0]), str(e[1])))


def test_delete_topics_by_name_hides_what_is_not_describable(broker: AclBroker) -> None:
    zero = None  # the zero id, as kio reads it
    assert delete_topics(broker, ["t", "missing"]) == [("missing", zero, TAF), ("t", zero, TAF)]
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "*"))
    assert delete_topics(broker, ["t", "missing"]) == [
        ("missing", zero, ErrorCode.unknown_topic_or_partition), ("t", zero, TAF)]
    assert broker.forwarded_keys() == [] and "t" in broker.cluster.image.topic_ids
    broker.set_acls(acl(ALICE, Op.DELETE, RT.TOPIC, "t"))
    assert delete_topics(broker, ["t", "u"]) == [("t", zero, OK), ("u", zero, TAF)]
    assert broker.forwarded_keys() == [20]
    broker.settle()
    assert "t" not in broker.cluster.image.topic_ids and "u" in broker.cluster.image.topic_ids


def test_delete_topics_by_id_tells_the_name_only_if_describable(broker: AclBroker) -> None:
    tid, uid, unknown = (broker.cluster.image.topic_ids["t"],
                         broker.cluster.image.topic_ids["u"], uuid.uuid4())
    got = delete_topics(broker, ids=[tid, unknown])
    assert set(got) == {(None, tid, TAF), (None, unknown, ErrorCode.unknown_topic_id)}
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "t"), acl(ALICE, Op.DELETE, RT.TOPIC, "u"))
    broker.answers[20] = answer_ok("responses", lambda r: [  # the fake deletes by name only
        {"name": "u", "topic_id": t.topic_id, "error_code": OK} for t in r.topics])
    got = delete_topics(broker, ids=[tid, uid])
    assert set(got) == {("t", tid, TAF), ("u", uid, OK)}
    assert [t.topic_id for _, r in broker.forwarded for t in r.topics] == [uid]


def test_delete_on_the_cluster_deletes_any_topic_and_v5_names_are_checked(
        broker: AclBroker) -> None:
    response = broker.call(20, dt5.DeleteTopicsRequest(topic_names=("t",), timeout=SECOND))  # type: ignore[arg-type]
    assert [(r.name, r.error_code) for r in response.responses] == [("t", TAF)]
    broker.set_acls(acl(ALICE, Op.DELETE, RT.CLUSTER, CLUSTER_NAME))
    response = broker.call(20, dt5.DeleteTopicsRequest(topic_names=("t", "u"), timeout=SECOND))  # type: ignore[arg-type]
    assert sorted((r.name, r.error_code) for r in response.responses) == [("t", OK), ("u", OK)]


def test_create_partitions_needs_alter_on_each_topic(broker: AclBroker) -> None:
    broker.answers[37] = answer_ok("results", lambda r: [
        {"name": t.name, "error_code": OK} for t in r.topics])
    broker.set_acls(acl(ALICE, Op.ALTER, RT.TOPIC, "t"))
    response = broker.call(37, cp3.CreatePartitionsRequest(topics=tuple(
        cp3.CreatePartitionsTopic(name=n, count=3, assignments=None) for n in ("t", "u")),  # type: ignore[arg-type]
        timeout=SECOND, validate_only=True))  # type: ignore[arg-type]
    assert sorted((r.name, r.error_code) for r in response.results) == [("t", OK), ("u", TAF)]
    assert [str(t.name) for _, r in broker.forwarded for t in r.topics] == ["t"]


def test_delete_records_needs_delete_on_each_topic_before_existence(broker: AclBroker) -> None:
    broker.set_acls(acl(ALICE, Op.DELETE, RT.TOPIC, "t"))
    response = broker.call(21, dr2.DeleteRecordsRequest(timeout=SECOND, topics=tuple(  # type: ignore[arg-type]
        dr2.DeleteRecordsTopic(name=n, partitions=(dr2.DeleteRecordsPartition(  # type: ignore[arg-type]
            partition_index=0, offset=0),)) for n in ("t", "u", "nope"))))  # type: ignore[arg-type]
    assert [(t.name, t.partitions[0].error_code, t.partitions[0].low_watermark)
            for t in response.topics] == [("t", OK, 0), ("u", TAF, -1), ("nope", TAF, -1)]


# ---- Configs -----------------------------------------------------------------------------


def describe_configs(b: AclBroker, *resources: tuple[int, str]) -> list[tuple[str, ErrorCode, int]]:
    response = b.call(32, dcf4.DescribeConfigsRequest(resources=tuple(
        dcf4.DescribeConfigsResource(resource_type=t, resource_name=n,  # type: ignore[arg-type]
                                     configuration_keys=None) for t, n in resources),
        include_synonyms=False, include_documentation=False))
    return [(r.resource_name, r.error_code, len(r.configs)) for r in response.results]


def test_describe_configs_needs_describe_configs_on_the_topic_or_cluster(
        broker: AclBroker) -> None:
    resources = [(TOPIC_TYPE, "t"), (TOPIC_TYPE, "u"), (BROKER_TYPE, "1")]
    assert [(n, e) for n, e, _ in describe_configs(broker, *resources)] == [
        ("t", TAF), ("u", TAF), ("1", CAF)]
    broker.set_acls(acl(ALICE, Op.ALTER_CONFIGS, RT.TOPIC, "t"),  # implies DESCRIBE_CONFIGS
                    acl(ALICE, Op.DESCRIBE_CONFIGS, RT.CLUSTER, CLUSTER_NAME))
    got = describe_configs(broker, *resources)
    assert [(n, e) for n, e, _ in got] == [("t", OK), ("u", TAF), ("1", OK)]
    assert got[0][2] > 0 and got[1][2] == 0 and got[2][2] > 0


def test_alter_configs_refuses_per_resource_and_forwards_the_rest(broker: AclBroker) -> None:
    def results(r: Any) -> list[dict[str, Any]]:
        return [{"resource_type": x.resource_type, "resource_name": x.resource_name,
                 "error_code": OK} for x in r.resources]
    broker.answers[33] = answer_ok("responses", results)
    broker.answers[44] = answer_ok("responses", results)
    broker.set_acls(acl(ALICE, Op.ALTER_CONFIGS, RT.TOPIC, "t"))
    legacy = broker.call(33, ac2.AlterConfigsRequest(validate_only=False, resources=tuple(
        ac2.AlterConfigsResource(resource_type=t, resource_name=n, configs=(  # type: ignore[arg-type]
            ac2.AlterableConfig(name="retention.ms", value="1"),))
        for t, n in [(TOPIC_TYPE, "t"), (TOPIC_TYPE, "u"), (BROKER_TYPE, "1")])))
    incremental = broker.call(44, iac1.IncrementalAlterConfigsRequest(
        validate_only=False, resources=tuple(
            iac1.AlterConfigsResource(resource_type=t, resource_name=n, configs=(  # type: ignore[arg-type]
                iac1.AlterableConfig(name="retention.ms", config_operation=0, value="1"),))  # type: ignore[arg-type]
            for t, n in [(TOPIC_TYPE, "t"), (TOPIC_TYPE, "u"), (BROKER_TYPE, "")])))
    assert sorted((r.resource_name, r.error_code) for r in legacy.responses) == [
        ("1", CAF), ("t", OK), ("u", TAF)]
    assert sorted((r.resource_name, r.error_code) for r in incremental.responses) == [
        ("", CAF), ("t", OK), ("u", TAF)]
    assert [(key, [str(r.resource_name) for r in req.resources]) for key, req in broker.forwarded] \
        == [(33, ["t"]), (44, ["t"])]


# ---- Cluster-level admin APIs ---------------------------------------------------------


def test_elect_leaders_needs_alter_on_the_cluster(broker: AclBroker) -> None:
    request = el2.ElectLeadersRequest(election_type=0, timeout=SECOND, topic_partitions=(  # type: ignore[arg-type]
        el2.TopicPartitions(topic="t", partitions=(0, 1)),))  # type: ignore[arg-type]
    refused = broker.call(43, request)
    assert refused.error_code == CAF
    assert [(p.partition_id, p.error_code) for r in refused.replica_election_results
            for p in r.partition_result] == [(0, CAF), (1, CAF)]
    broker.answers[43] = answer_ok("replica_election_results", lambda r: [])
    broker.set_acls(acl(ALICE, Op.ALTER, RT.CLUSTER, CLUSTER_NAME))
    assert broker.call(43, request).error_code == OK
    assert broker.forwarded_keys() == [43]


def test_partition_reassignments_need_alter_and_describe_on_the_cluster(
        broker: AclBroker) -> None:
    alter = apr1.AlterPartitionReassignmentsRequest(
        timeout=SECOND, allow_replication_factor_change=True, topics=(  # type: ignore[arg-type]
            apr1.ReassignableTopic(name="t", partitions=(apr1.ReassignablePartition(  # type: ignore[arg-type]
                partition_index=0, replicas=(1,)),)),))  # type: ignore[arg-type]
    listing = lpr0.ListPartitionReassignmentsRequest(timeout=SECOND, topics=(  # type: ignore[arg-type]
        lpr0.ListPartitionReassignmentsTopics(name="t", partition_indexes=(0,)),))  # type: ignore[arg-type]
    refused = broker.call(45, alter)
    assert refused.error_code == CAF and refused.responses[0].partitions[0].error_code == CAF
    refused = broker.call(46, listing)
    assert refused.error_code == CAF
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in refused.topics] == [
        ("t", [0])]
    assert broker.forwarded_keys() == []
    broker.answers[45] = answer_ok("responses", lambda r: [])
    broker.answers[46] = answer_ok("topics", lambda r: [])
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME))
    assert broker.call(45, alter).error_code == CAF and broker.call(46, listing).error_code == OK
    broker.set_acls(acl(ALICE, Op.ALTER, RT.CLUSTER, CLUSTER_NAME))  # implies DESCRIBE
    assert broker.call(45, alter).error_code == OK and broker.call(46, listing).error_code == OK
    assert broker.forwarded_keys() == [46, 45, 46]


def test_describe_log_dirs_needs_describe_on_the_cluster(broker: AclBroker) -> None:
    refused = broker.call(35, dld4.DescribeLogDirsRequest(topics=None))
    assert refused.error_code == CAF and refused.results == ()
    assert broker.call(35, dld1.DescribeLogDirsRequest(topics=None)).results == ()  # no error field
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME))
    allowed = broker.call(35, dld4.DescribeLogDirsRequest(topics=None))
    assert allowed.error_code == OK and len(allowed.results) == 1


def test_client_quotas_need_describe_configs_and_alter_configs_on_the_cluster(
        broker: AclBroker) -> None:
    describe = dcq1.DescribeClientQuotasRequest(components=(), strict=False)
    alter = acq1.AlterClientQuotasRequest(validate_only=True, entries=(acq1.EntryData(
        entity=(acq1.EntityData(entity_type="user", entity_name="bob"),),
        ops=(acq1.OpData(key="producer_byte_rate", value=1.0, remove=False),)),))  # type: ignore[arg-type]
    refused = broker.call(48, describe)
    assert (refused.error_code, refused.entries) == (CAF, None)
    refused = broker.call(49, alter)
    assert [(e.error_code, [x.entity_name for x in e.entity]) for e in refused.entries] == [
        (CAF, ["bob"])]
    broker.answers[49] = answer_ok("entries", lambda r: [])
    broker.set_acls(acl(ALICE, Op.ALTER_CONFIGS, RT.CLUSTER, CLUSTER_NAME))  # implies DESCRIBE_CONFIGS
    assert broker.call(48, describe).error_code == OK
    assert broker.call(49, alter).entries == ()
    assert broker.forwarded_keys() == [49]


def test_scram_credentials_need_describe_and_alter_on_the_cluster(broker: AclBroker) -> None:
    describe = dus0.DescribeUserScramCredentialsRequest(users=(
        dus0.UserName(name="bob"), dus0.UserName(name="carol")))
    alter = aus0.AlterUserScramCredentialsRequest(upsertions=(), deletions=(
        aus0.ScramCredentialDeletion(name="zed", mechanism=1),  # type: ignore[arg-type]
        aus0.ScramCredentialDeletion(name="bob", mechanism=1)))  # type: ignore[arg-type]
    refused = broker.call(50, describe)
    assert refused.error_code == CAF
    assert [(r.user, r.error_code) for r in refused.results] == [("", CAF), ("", CAF)]
    refused = broker.call(51, alter)
    assert [(r.user, r.error_code) for r in refused.results] == [("bob", CAF), ("zed", CAF)]
    assert broker.forwarded_keys() == []
    broker.set_acls(acl(ALICE, Op.ALTER, RT.CLUSTER, CLUSTER_NAME))  # implies DESCRIBE
    assert broker.call(50, describe).error_code == OK
    assert [r.error_code for r in broker.call(51, alter).results] != [CAF, CAF]
    assert broker.forwarded_keys() == [51]


def test_describe_quorum_and_unregister_broker_need_describe_and_alter(
        broker: AclBroker) -> None:
    quorum = dq2.DescribeQuorumRequest(topics=(dq2.TopicData(
        topic_name="__cluster_metadata", partitions=(dq2.PartitionData(partition_index=0),)),))  # type: ignore[arg-type]
    unregister = ub0.UnregisterBrokerRequest(broker_id=9)  # type: ignore[arg-type]
    assert broker.call(55, quorum).error_code == CAF
    assert broker.call(64, unregister).error_code == CAF
    broker.answers[55] = answer_ok("topics", lambda r: [])
    broker.answers[64] = answer_ok("", None)
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME))
    assert broker.call(55, quorum).error_code == OK
    assert broker.call(64, unregister).error_code == CAF
    broker.set_acls(acl(ALICE, Op.ALTER, RT.CLUSTER, CLUSTER_NAME))
    assert broker.call(64, unregister).error_code == OK
    assert broker.call(64, unregister, user="admin").error_code == OK
    assert broker.forwarded_keys() == [55, 64, 64]


def test_metadata_for_an_internal_topic_needs_create_only_where_kafka_creates(
        broker: AclBroker) -> None:
    broker.set_acls(acl(ALICE, Op.DESCRIBE, RT.TOPIC, "*"))

    def ask(auto: bool) -> ErrorCode:
        return broker.call(3, md12.MetadataRequest(topics=(md12.MetadataRequestTopic(
            topic_id=None, name="__transaction_state"),), allow_auto_topic_creation=auto,  # type: ignore[arg-type]
            include_topic_authorized_operations=False)).topics[0].error_code

    assert ask(True) == TAF
    assert ask(False) == ErrorCode.unknown_topic_or_partition
    assert "__transaction_state" not in broker.cluster.image.topic_ids
