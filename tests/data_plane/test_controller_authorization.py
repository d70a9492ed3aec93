"""A controller's handlers behind the ACL checks Kafka's ControllerApis
makes (data_plane.controller_acls), with stand-in inner handlers: the
quorum's and brokers' requests need ClusterAction, describes need their
cluster operation, admin requests get the broker's per-item checks, and
DescribeConfigs and Metadata answers are filtered per resource."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import Any

import pytest
from acl_harness import acl
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.describe_configs.v4 import request as dcfg_req
from kio.schema.describe_configs.v4 import response as dcfg_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from data_plane.api.authorization import AclAuthorization
from data_plane.controller_acls import authorize_controller_handlers
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType, StandardAcl
from metadata_quorum.image import MetadataImage, frozen_mapping
from raftlog.net import KafkaApiError, RequestContext
from raftlog.net.errors import ErrorCode

VOTE, DESCRIBE_QUORUM, METADATA, DESCRIBE_CONFIGS, CREATE_TOPICS = 52, 55, 3, 32, 19


def image_with(*bindings: Any) -> MetadataImage:
    acls = {acl_id: StandardAcl(acl_id, b) for b in bindings for acl_id in [uuid.uuid4()]}
    return dataclasses.replace(FakeMetadataCluster().image, acls=frozen_mapping(acls))


def ctx(api_key: int, user: str) -> RequestContext:
    return RequestContext(api_key, 0, 1, "test", ("10.0.0.7", 5555), "CONTROLLER", user=user)


seen: list[tuple[int, Any]] = []


def inner(api_key: int, answer: Any) -> Any:
    async def handler(context: RequestContext, body: Any) -> Any:
        seen.append((api_key, body))
        return answer(body) if callable(answer) else answer
    return handler


def _topic(name: str) -> md_resp.MetadataResponseTopic:
    return md_resp.MetadataResponseTopic(error_code=ErrorCode.none, name=TopicName(name),
                                         topic_id=uuid.uuid4(), is_internal=False, partitions=())


def _config_result(name: str) -> dcfg_resp.DescribeConfigsResult:
    return dcfg_resp.DescribeConfigsResult(
        error_code=ErrorCode.none, error_message=None, resource_type=i16(2),
        resource_name=name, configs=(dcfg_resp.DescribeConfigsResourceResult(
            name="retention.ms", value="1", read_only=False, config_source=i16(1),
            is_sensitive=False, synonyms=(), config_type=i16(0), documentation=None),))


def _created(body: ct_req.CreateTopicsRequest) -> ct_resp.CreateTopicsResponse:
    return ct_resp.CreateTopicsResponse(throttle_time=datetime.timedelta(0), topics=tuple(
        ct_resp.CreatableTopicResult(name=t.name, topic_id=uuid.uuid4(), error_code=ErrorCode.none,
                                     error_message=None, topic_config_error_code=ErrorCode.none,
                                     num_partitions=i32(1), replication_factor=i16(3), configs=())
        for t in body.topics))


HANDLERS = {
    VOTE: inner(VOTE, "voted"),
    DESCRIBE_QUORUM: inner(DESCRIBE_QUORUM, "quorum"),
    METADATA: inner(METADATA, md_resp.MetadataResponse(
        throttle_time=i32(0), brokers=(), cluster_id="c", controller_id=i32(1),
        topics=(_topic("mine"), _topic("theirs")))),
    DESCRIBE_CONFIGS: inner(DESCRIBE_CONFIGS, dcfg_resp.DescribeConfigsResponse(
        throttle_time=i32(0), results=(_config_result("mine"), _config_result("theirs")))),
    CREATE_TOPICS: inner(CREATE_TOPICS, _created),
}
IMAGE = image_with(
    acl("User:alice", AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME),
    acl("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "mine"),
    acl("User:alice", AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "mine"),
    acl("User:alice", AclOperation.CREATE, ResourceType.TOPIC, "mine"),
)
GATED = authorize_controller_handlers(
    HANDLERS, AclAuthorization(frozenset({"User:broker"}), False), lambda: IMAGE)


def call(api_key: int, user: str, body: Any = None) -> Any:
    seen.clear()
    return asyncio.run(GATED[api_key](ctx(api_key, user), body))


def test_the_quorums_requests_need_cluster_action() -> None:
    assert call(VOTE, "broker") == "voted"  # a super user
    with pytest.raises(KafkaApiError) as info:
        call(VOTE, "alice")  # may DESCRIBE the cluster, not CLUSTER_ACTION it
    assert info.value.error_code == ErrorCode.cluster_authorization_failed
    assert seen == []


def test_describes_need_their_cluster_operation() -> None:
    assert call(DESCRIBE_QUORUM, "alice") == "quorum"
    with pytest.raises(KafkaApiError) as info:
        call(DESCRIBE_QUORUM, "bob")
    assert info.value.error_code == ErrorCode.cluster_authorization_failed


def test_metadata_hides_topics_the_principal_may_not_describe_and_refuses_named_ones() -> None:
    everything = call(METADATA, "alice", md_req.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert [str(t.name) for t in everything.topics] == ["mine"]
    named = call(METADATA, "alice", md_req.MetadataRequest(
        topics=(md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName("theirs")),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    theirs = named.topics[1]
    assert theirs.error_code == ErrorCode.topic_authorization_failed
    assert theirs.topic_id == uuid.UUID(int=0)  # not even its id
    assert len(call(METADATA, "broker", md_req.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)).topics) == 2


def test_describe_configs_refuses_per_resource_without_the_configs() -> None:
    answer = call(DESCRIBE_CONFIGS, "alice", dcfg_req.DescribeConfigsRequest(
        resources=(), include_synonyms=False, include_documentation=False))
    mine, theirs = answer.results
    assert mine.error_code == ErrorCode.none and mine.configs
    assert theirs.error_code == ErrorCode.topic_authorization_failed and theirs.configs == ()


def test_create_topics_forwards_only_what_the_principal_may_create() -> None:
    request = ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=TopicName(n), num_partitions=i32(1),
                              replication_factor=i16(3), assignments=(), configs=())
        for n in ("mine", "theirs")), timeout=datetime.timedelta(seconds=5), validate_only=False)
    answer = call(CREATE_TOPICS, "alice", request)
    assert [[str(t.name) for t in body.topics] for _, body in seen] == [["mine"]]
    errors = {str(t.name): t.error_code for t in answer.topics}
    assert errors == {"mine": ErrorCode.none, "theirs": ErrorCode.topic_authorization_failed}
