"""CreateTopics (v2-7), CreatePartitions (v0-3), DeleteTopics (v1-6),
IncrementalAlterConfigs (v0-1), AlterConfigs (v0-2), ElectLeaders (v0-2),
AlterPartitionReassignments (v0-1), ListPartitionReassignments (v0),
AlterClientQuotas (v0-1), AlterUserScramCredentials (v0), DescribeQuorum
(v0-2) and UnregisterBroker (v0), forwarded to the active controller (KIP-590) at the controller's versions and
answered at the client's (CreateTopics, CreatePartitions and DeleteTopics in
an Envelope as the client, for its controller mutation quota, KIP-599:
`data_plane.api.envelope`); DescribeConfigs (v1-4) for topics and this broker, with Kafka's
defaults and config sources; DeleteRecords (v0-2), served by the leaders
(`ReplicaManager.delete_records`); DescribeLogDirs (v1-4), this broker's
directories.

ACLs (with an authorizer), as Kafka's KafkaApis and ControllerApis check
them. Deviation: Kafka's controller checks the forwarded requests itself
(the forwarding envelope carries the principal); here the broker checks
before forwarding and forwards only what is allowed, merging
its refusals into the controller's answer:
- CreateTopics: CREATE on the cluster, else on each topic
  (TOPIC_AUTHORIZATION_FAILED); a created topic's configs, partition count
  and replication factor only with DESCRIBE_CONFIGS on it (else
  ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED, v5+);
- DeleteTopics: DELETE on the cluster, else on each topic. By name, a topic
  the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether or not
  it exists; by id, the id is answered (ids are not secret, as in Kafka),
  with the name only if describable;
- CreatePartitions: ALTER on each topic; DeleteRecords: DELETE on each topic
  (TOPIC_AUTHORIZATION_FAILED before any check that it exists);
- DescribeConfigs: DESCRIBE_CONFIGS, AlterConfigs and IncrementalAlterConfigs:
  ALTER_CONFIGS, on the topic (TOPIC_AUTHORIZATION_FAILED) or the cluster for
  broker resources (CLUSTER_AUTHORIZATION_FAILED), per resource;
- ElectLeaders, AlterPartitionReassignments, UnregisterBroker and
  AlterUserScramCredentials: ALTER on the cluster; ListPartitionReassignments,
  DescribeQuorum and DescribeLogDirs: DESCRIBE on it; AlterClientQuotas:
  ALTER_CONFIGS on it. Refused: CLUSTER_AUTHORIZATION_FAILED in the places
  Kafka's error answer for that request puts it (DescribeLogDirs: no
  directories).
A name or id refused and also given twice is INVALID_REQUEST, as Kafka finds
duplicates before it checks ACLs."""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Final

from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.elect_leaders.v2 import request as el2
from kio.static.primitive import i8

from data_plane.api.build import as_values as _as_values
from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from data_plane.api.envelope import forward_enveloped
from data_plane.api.scram_credentials import alter_failed, alter_response_values
from data_plane.broker.log_configs import (
    DYNAMIC_BROKER,
    DYNAMIC_DEFAULT,
    STATIC,
    broker_config_sources,
    effective_topic_config,
    topic_config_sources,
)
from data_plane.broker_loggers import BROKER_LOGGER_RESOURCE, alter_levels, describe_levels
from data_plane.controller_mutation_quota import STRICT_SINCE
from data_plane.tls_reload import DYNAMIC_KEYSTORE, is_sensitive
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_quorum.controller.configuration_control import BROKER_CONFIG_VALIDATORS
from metadata_quorum.image import CLUSTER_DEFAULT_RESOURCE, ConfigResource
from metadata_quorum.records.types import ConfigResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request

__all__ = (
    "MAX_DELETE_RECORDS_TIMEOUT_MS",
    "handle_alter_client_quotas",
    "handle_alter_configs",
    "handle_alter_partition_reassignments",
    "handle_alter_replica_log_dirs",
    "handle_alter_user_scram_credentials",
    "handle_create_partitions",
    "handle_create_topics",
    "handle_delete_records",
    "handle_delete_topics",
    "handle_describe_configs",
    "handle_describe_log_dirs",
    "handle_elect_leaders",
    "handle_incremental_alter_configs",
    "handle_list_partition_reassignments",
)

log = logging.getLogger(__name__)

CREATE_TOPICS_KEY: Final = 19
DELETE_TOPICS_KEY: Final = 20
ALTER_CONFIGS_KEY: Final = 33
CREATE_PARTITIONS_KEY: Final = 37
INCREMENTAL_ALTER_CONFIGS_KEY: Final = 44
ELECT_LEADERS_KEY: Final = 43
ALTER_PARTITION_REASSIGNMENTS_KEY: Final = 45
LIST_PARTITION_REASSIGNMENTS_KEY: Final = 46
ALTER_CLIENT_QUOTAS_KEY: Final = 49
ALTER_USER_SCRAM_CREDENTIALS_KEY: Final = 51
DESCRIBE_QUORUM_KEY: Final = 55
UNREGISTER_BROKER_KEY: Final = 64
# The versions the controller listener serves (data_plane.controller_api).
CREATE_ACLS_KEY: Final = 30
DELETE_ACLS_KEY: Final = 31
_CONTROLLER_VERSIONS: Final = {ALTER_CONFIGS_KEY: 2, CREATE_PARTITIONS_KEY: 3,
                               INCREMENTAL_ALTER_CONFIGS_KEY: 1,
                               ALTER_PARTITION_REASSIGNMENTS_KEY: 1,
                               LIST_PARTITION_REASSIGNMENTS_KEY: 0,
                               ALTER_CLIENT_QUOTAS_KEY: 1,
                               ALTER_USER_SCRAM_CREDENTIALS_KEY: 0,
                               DESCRIBE_QUORUM_KEY: 2,
                               UNREGISTER_BROKER_KEY: 0,
                               CREATE_ACLS_KEY: 3, DELETE_ACLS_KEY: 3}
#: The versions CreatePartitions goes to the controller at in an Envelope
#: (`_forward_values`): (for a client whose quota is strict, for an older one).
_ENVELOPED_AT: Final = {CREATE_PARTITIONS_KEY: (3, 2)}
_NO_CONTROLLER_ANSWER: Final = "The controller did not answer; the outcome is unknown."
_ZERO_UUID: Final = uuid.UUID(int=0)
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
# Config resource types an ACL on the cluster covers (Kafka's BROKER,
# BROKER_LOGGER, CLIENT_METRICS).
CLIENT_METRICS_RESOURCE: Final = 16
GROUP_RESOURCE: Final = 32
_CLUSTER_CONFIG_RESOURCES: Final = frozenset({BROKER_RESOURCE, BROKER_LOGGER_RESOURCE,
                                              CLIENT_METRICS_RESOURCE})
#: ListConfigResources v1's types, in the order Kafka's broker answers them.
LISTED_CONFIG_RESOURCES: Final = (GROUP_RESOURCE, CLIENT_METRICS_RESOURCE,
                                  BROKER_LOGGER_RESOURCE, BROKER_RESOURCE, TOPIC_RESOURCE)
# DescribeConfigs ConfigSource ids.
_DYNAMIC_TOPIC: Final = 1
_DYNAMIC_BROKER: Final = 2
_DYNAMIC_DEFAULT_BROKER: Final = 3
_STATIC_BROKER: Final = 4
_DEFAULT: Final = 5
_DYNAMIC_BROKER_LOGGER: Final = 6
_SOURCE_IDS: Final = {"topic": _DYNAMIC_TOPIC, DYNAMIC_BROKER: _DYNAMIC_BROKER,
                      DYNAMIC_DEFAULT: _DYNAMIC_DEFAULT_BROKER, STATIC: _STATIC_BROKER}


async def handle_create_topics(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    refused: list[dict[str, object]] = []
    if api.authorization is not None:
        may_create = _cluster_or_topic(api, ctx, AclOperation.CREATE)
        allowed, refused = _refuse_topics(
            [str(t.name) for t in request.topics], may_create,
            lambda name: _denied(AclOperation.CREATE, "topic " + name))
        if not allowed:
            return build(response_class(request), {"throttle_time": NO_THROTTLE,
                                                   "topics": refused})
        request = dataclasses.replace(request, topics=tuple(
            t for t in request.topics if str(t.name) in allowed))
    # In an Envelope, as the client: the controller applies its mutation
    # quota (KIP-599), strict from v6, so an older client's goes at v5.
    forwarded = convert_request(request, 7 if ctx.api_version >= STRICT_SINCE[19] else 5)
    values: dict[str, Any]
    response = await forward_enveloped(api, ctx, forwarded)
    if response is not None:
        values = dict(_as_values(response))
    else:  # the forwarding channel failed: outcome unknown
        values = {"throttle_time": NO_THROTTLE, "topics": [
            {"name": t.name, "error_code": ErrorCode.request_timed_out,
             "error_message": _NO_CONTROLLER_ANSWER}
            for t in request.topics
        ]}
    if api.authorization is not None:
        values["topics"] = [_hide_configs(api, ctx, t) for t in values["topics"]] + refused
    return build(response_class(request), values)


def _hide_configs(api: BrokerApiContext, ctx: RequestContext,
                  result: dict[str, Any]) -> dict[str, Any]:
    """A created topic's answer without its configs, partition count and
    replication factor unless the principal may DESCRIBE_CONFIGS it (Kafka's
    controller answers ``topic_config_error_code`` instead)."""
    if result.get("error_code") != ErrorCode.none or api.authorize(
            ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, str(result["name"])):
        return result
    return {**result, "configs": [], "num_partitions": -1, "replication_factor": -1,
            "topic_config_error_code": ErrorCode.topic_authorization_failed}


def _denied(operation: AclOperation, what: str) -> str:
    return f"not authorized to {operation.name} {what}"


def _cluster_denied(api: BrokerApiContext, ctx: RequestContext,
                    operation: AclOperation) -> bool:
    """Whether the principal may not do ``operation`` on the cluster (never
    without an authorizer)."""
    return not api.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _cluster_or_topic(api: BrokerApiContext, ctx: RequestContext,
                      operation: AclOperation) -> Callable[[str], bool]:
    """Whether the principal may do ``operation`` on a topic: on the cluster
    (asked once) or on the topic."""
    if api.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return lambda name: True
    return lambda name: api.authorize(ctx, operation, ResourceType.TOPIC, name)


def _refuse_topics(
    names: list[str], may: Callable[[str], bool], message: Callable[[str], str | None],
) -> tuple[frozenset[str], list[dict[str, object]]]:
    """The names that may go on (one check per name) and the answers for the
    others, once each in request order: TOPIC_AUTHORIZATION_FAILED, or
    INVALID_REQUEST for one given twice (Kafka finds duplicates first)."""
    counts = Counter(names)
    allowed = frozenset(name for name in counts if may(name))
    refused: list[dict[str, object]] = []
    for name in counts:
        if name in allowed:
            continue
        if counts[name] > 1:
            refused.append({"name": name, "error_code": ErrorCode.invalid_request,
                            "error_message": "Duplicate topic name."})
        else:
            refused.append({"name": name, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": message(name)})
    return allowed, refused


async def _forward(
    api: BrokerApiContext, request: Any, api_key: int, failed: Mapping[str, object]
) -> Any:
    """``request`` forwarded to the active controller at its version and the
    answer rebuilt at the client's; ``failed`` (the answer's body) when the
    forwarding channel fails, so the outcome is unknown."""
    return build(response_class(request), await _forward_values(api, request, api_key, failed))


async def _forward_values(
    api: BrokerApiContext, request: Any, api_key: int, failed: Mapping[str, object],
    ctx: RequestContext | None = None,
) -> dict[str, Any]:
    """`_forward`'s answer as values for `build`. With ``ctx``, in an
    Envelope as that client, at the version `_ENVELOPED_AT` picks for it."""
    if ctx is not None:
        strict, lenient = _ENVELOPED_AT[api_key]
        version = strict if ctx.api_version >= STRICT_SINCE[api_key] else lenient
        response = await forward_enveloped(api, ctx, convert_request(request, version))
        return dict(failed) if response is None else dict(_as_values(response))
    forwarded = convert_request(request, _CONTROLLER_VERSIONS[api_key])
    try:
        response = await api.metadata.forward(api_key, forwarded)
    except Exception as e:
        log.warning("forwarding api key %d failed: %r", api_key, e)
        return dict(failed)
    values: dict[str, Any] = dict(_as_values(response))
    return values


async def _forward_allowed(
    api: BrokerApiContext, request: Any, api_key: int, field: str,
    allowed: Any | None, refused: list[dict[str, object]],
    failed: Callable[[Any], Mapping[str, object]], ctx: RequestContext | None = None,
) -> Any:
    """``allowed`` (``request`` without what the ACLs refused; None: nothing
    left) forwarded as `_forward_values` does, and the answer's ``field``
    list completed with ``refused``."""
    if allowed is None:
        values: dict[str, Any] = {"throttle_time": NO_THROTTLE, field: []}
    else:
        values = await _forward_values(api, allowed, api_key, failed(allowed), ctx)
    values[field] = [*values.get(field, ()), *refused]
    return build(response_class(request), values)


async def handle_create_partitions(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    def failed(body: Any) -> Mapping[str, object]:
        return {"throttle_time": NO_THROTTLE, "results": [
            {"name": t.name, "error_code": ErrorCode.request_timed_out} for t in body.topics]}

    # In an Envelope, as the client (its KIP-599 quota; `_forward_values`).
    if api.authorization is None:
        return await _forward_allowed(api, request, CREATE_PARTITIONS_KEY, "results", request,
                                      [], failed, ctx)
    allowed, refused = _refuse_topics(
        [str(t.name) for t in request.topics],
        lambda name: api.authorize(ctx, AclOperation.ALTER, ResourceType.TOPIC, name),
        lambda name: None)  # Kafka gives no message
    rest = dataclasses.replace(request, topics=tuple(
        t for t in request.topics if str(t.name) in allowed)) if allowed else None
    return await _forward_allowed(api, request, CREATE_PARTITIONS_KEY, "results", rest,
                                  refused, failed, ctx)


async def handle_elect_leaders(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """ElectLeaders (kafka-leader-election.sh, ``AdminClient.elect_leaders``):
    forwarded at v2 (v0 has no election type: preferred). v0 has no
    top-level error either, so there every partition asked for carries it."""
    if _cluster_denied(api, ctx, AclOperation.ALTER):
        return _elect_leaders_refused(request)
    forwarded = el2.ElectLeadersRequest(
        election_type=i8(int(getattr(request, "election_type", 0))),
        topic_partitions=None if request.topic_partitions is None else tuple(
            el2.TopicPartitions(topic=t.topic, partitions=tuple(t.partitions))
            for t in request.topic_partitions),
        timeout=request.timeout,
    )
    values: dict[str, object]
    try:
        response = await api.metadata.forward(ELECT_LEADERS_KEY, forwarded)
        values = dict(_as_values(response))
    except Exception as e:
        log.warning("ElectLeaders forward failed: %r", e)
        values = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.request_timed_out,
                  "replica_election_results": []}
    error = values["error_code"]
    if ctx.api_version == 0 and error != ErrorCode.none and request.topic_partitions:
        values["replica_election_results"] = [
            {"topic": t.topic, "partition_result": [
                {"partition_id": p, "error_code": error, "error_message": None}
                for p in t.partitions]}
            for t in request.topic_partitions]
    return build(response_class(request), values)


def _elect_leaders_refused(request: Any) -> Any:
    """Kafka's error answer to ElectLeaders: the error at the top and on
    every partition asked for."""
    error = ErrorCode.cluster_authorization_failed
    message = _denied(AclOperation.ALTER, "the cluster")
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE, "error_code": error,
        "replica_election_results": [
            {"topic": t.topic, "partition_result": [
                {"partition_id": p, "error_code": error, "error_message": message}
                for p in t.partitions]}
            for t in request.topic_partitions or ()]})


async def handle_alter_partition_reassignments(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterPartitionReassignments (kafka-reassign-partitions.sh --execute and
    --cancel; KIP-455, KIP-860 at v1): answered once the controller has
    committed the change, not when the replicas have moved (follow that
    with ListPartitionReassignments)."""
    if _cluster_denied(api, ctx, AclOperation.ALTER):
        message = _denied(AclOperation.ALTER, "the cluster")
        return build(response_class(request), _every_partition_failed(
            request, ErrorCode.cluster_authorization_failed, message, message))
    return await _forward(api, request, ALTER_PARTITION_REASSIGNMENTS_KEY, _every_partition_failed(
        request, ErrorCode.request_timed_out,
        "forwarding to the controller failed; the outcome is unknown", None))


def _every_partition_failed(request: Any, error: ErrorCode, message: str,
                            partition_message: str | None) -> dict[str, object]:
    """An AlterPartitionReassignments answer with ``error`` at the top and on
    every partition (the shape of Kafka's error answer)."""
    return {
        "throttle_time": NO_THROTTLE, "error_code": error, "error_message": message,
        "responses": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": error,
                 "error_message": partition_message}
                for p in t.partitions]}
            for t in request.topics]}


async def handle_list_partition_reassignments(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """ListPartitionReassignments (kafka-reassign-partitions.sh --verify and
    --list): the partitions being reassigned, from the controller."""
    if _cluster_denied(api, ctx, AclOperation.DESCRIBE):
        # Kafka's error answer names the partitions asked for, with no replicas.
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": _denied(AclOperation.DESCRIBE, "the cluster"),
            "topics": [{"name": t.name, "partitions": [
                {"partition_index": p} for p in t.partition_indexes]}
                for t in request.topics or ()]})
    return await _forward(api, request, LIST_PARTITION_REASSIGNMENTS_KEY, {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.request_timed_out,
        "error_message": "forwarding to the controller failed", "topics": []})


async def handle_alter_client_quotas(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterClientQuotas (kafka-configs.sh --entity-type users/clients;
    KIP-546): answered once the controller has committed the change. Brokers
    apply it when their metadata image reaches it."""
    if _cluster_denied(api, ctx, AclOperation.ALTER_CONFIGS):
        return build(response_class(request), _every_entry_failed(
            request, ErrorCode.cluster_authorization_failed,
            _denied(AclOperation.ALTER_CONFIGS, "the cluster")))
    return await _forward(api, request, ALTER_CLIENT_QUOTAS_KEY, _every_entry_failed(
        request, ErrorCode.request_timed_out,
        "forwarding to the controller failed; the outcome is unknown"))


def _every_entry_failed(request: Any, error: ErrorCode, message: str) -> dict[str, object]:
    """An AlterClientQuotas answer with ``error`` for every entry."""
    return {"throttle_time": NO_THROTTLE, "entries": [
        {"error_code": error, "error_message": message,
         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                    for e in entry.entity]}
        for entry in request.entries]}


async def handle_alter_user_scram_credentials(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterUserScramCredentials (kafka-configs.sh --entity-type users
    --add-config 'SCRAM-SHA-256=[...]'; KIP-554): answered once the
    controller has committed the credentials. Brokers serve them from their
    metadata image once it reaches them."""
    if _cluster_denied(api, ctx, AclOperation.ALTER):
        # Kafka's error answer: every user named, once each, sorted.
        refused = alter_failed(request, ErrorCode.cluster_authorization_failed,
                               _denied(AclOperation.ALTER, "the cluster"))
        return build(response_class(request), alter_response_values(
            sorted(refused, key=lambda r: r.user)))
    return await _forward(api, request, ALTER_USER_SCRAM_CREDENTIALS_KEY, alter_response_values(
        alter_failed(request, ErrorCode.request_timed_out,
                     "forwarding to the controller failed; the outcome is unknown")))


async def handle_describe_quorum(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DescribeQuorum (v0-2; ``kafka-metadata-quorum.sh --bootstrap-server``):
    forwarded to the active controller, which leads the metadata quorum, as
    Kafka's brokers forward it. A controller that lost the lead meanwhile
    answers NOT_LEADER_OR_FOLLOWER, for the client to retry."""
    if _cluster_denied(api, ctx, AclOperation.DESCRIBE):
        return build(response_class(request), {  # Kafka's: the top-level error only
            "error_code": ErrorCode.cluster_authorization_failed, "topics": [], "nodes": []})
    return await _forward(api, request, DESCRIBE_QUORUM_KEY, {
        "error_code": ErrorCode.request_timed_out,
        "error_message": "forwarding to the controller failed", "topics": [], "nodes": []})


async def handle_unregister_broker(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """UnregisterBroker (v0; ``kafka-cluster.sh unregister --id N``):
    forwarded to the active controller, which removes the registration."""
    if _cluster_denied(api, ctx, AclOperation.ALTER):
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": _denied(AclOperation.ALTER, "the cluster")})
    return await _forward(api, request, UNREGISTER_BROKER_KEY, {
        "error_code": ErrorCode.request_timed_out,
        "error_message": "forwarding to the controller failed; the outcome is unknown"})


def _config_failures(request: Any) -> Mapping[str, object]:
    return {"throttle_time": NO_THROTTLE, "responses": [
        {"error_code": ErrorCode.request_timed_out, "error_message": None,
         "resource_type": r.resource_type, "resource_name": r.resource_name}
        for r in request.resources
    ]}


async def handle_incremental_alter_configs(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    return await _alter_configs(api, ctx, request, INCREMENTAL_ALTER_CONFIGS_KEY)


async def handle_alter_configs(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    return await _alter_configs(api, ctx, request, ALTER_CONFIGS_KEY)


async def _alter_configs(api: BrokerApiContext, ctx: RequestContext, request: Any,
                         api_key: int) -> Any:
    """AlterConfigs or IncrementalAlterConfigs: forwarded, but answered here
    for the resources the principal may not ALTER_CONFIGS and for keystore
    changes of this broker's TLS listeners that would not load
    (`data_plane.tls_reload`)."""
    counts = Counter((int(r.resource_type), str(r.resource_name)) for r in request.resources)
    refused: list[dict[str, object]] = []
    kept = []
    answered: set[tuple[int, str]] = set()
    for resource in request.resources:
        key = (int(resource.resource_type), str(resource.resource_name))
        error, message = _alter_refusal(api, ctx, resource, key, api_key)
        if error is None and key[0] == BROKER_LOGGER_RESOURCE and counts[key] == 1:
            # This broker's own: answered here, never forwarded (KIP-412).
            error, message = _alter_loggers(api, request, resource, key[1], api_key)
        if error is None:
            kept.append(resource)
            continue
        if key in answered:
            continue
        answered.add(key)
        duplicate = counts[key] > 1  # Kafka finds duplicates first
        refused.append({
            "resource_type": key[0], "resource_name": key[1],
            "error_code": ErrorCode.invalid_request if duplicate else error,
            "error_message": "Duplicate resource." if duplicate else message})
    if not refused:
        return await _forward(api, request, api_key, _config_failures(request))
    rest = dataclasses.replace(request, resources=tuple(kept)) if kept else None
    return await _forward_allowed(api, request, api_key, "responses", rest, refused,
                                  _config_failures)


def _alter_loggers(api: BrokerApiContext, request: Any, resource: Any, name: str,
                   api_key: int) -> tuple[ErrorCode, str | None]:
    """A BROKER_LOGGER alteration of this broker (`data_plane.broker_loggers`)."""
    if name != str(api.metadata.broker_id):
        return (ErrorCode.invalid_request,
                f"Unexpected broker id, expected {api.metadata.broker_id}, but received {name}")
    if api_key != INCREMENTAL_ALTER_CONFIGS_KEY:
        return (ErrorCode.invalid_request,
                "broker loggers change with IncrementalAlterConfigs, not AlterConfigs")
    return alter_levels([(str(c.name), int(c.config_operation), c.value)
                         for c in resource.configs],
                        validate_only=bool(request.validate_only))


def _alter_refusal(api: BrokerApiContext, ctx: RequestContext, resource: Any,
                   key: tuple[int, str], api_key: int) -> tuple[ErrorCode | None, str | None]:
    """Why this broker answers ``resource``'s alteration itself: not
    authorized, or a keystore change it cannot load; (None, None) to forward it."""
    if api.authorization is not None:
        error = _config_access_error(api, ctx, AclOperation.ALTER_CONFIGS, *key)
        if error is not None:
            return error, _denied(AclOperation.ALTER_CONFIGS, _config_resource_text(*key))
    keystores = api.keystores
    if keystores is None or key != (BROKER_RESOURCE, str(api.metadata.broker_id)):
        return None, None
    deleting = api_key == INCREMENTAL_ALTER_CONFIGS_KEY
    changes = {str(c.name): (None if deleting and int(c.config_operation) == 1 else c.value)
               for c in resource.configs if DYNAMIC_KEYSTORE.fullmatch(str(c.name))}
    if not changes:
        return None, None
    problem = keystores.check(api.image, changes)
    return (None, None) if problem is None else (ErrorCode.invalid_config, problem)


def _config_access_error(api: BrokerApiContext, ctx: RequestContext, operation: AclOperation,
                         resource_type: int, name: str) -> ErrorCode | None:
    """None if the principal may do ``operation`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) on a config resource, else Kafka's error for it. A type
    ACLs do not cover is left to the handler (it is refused there anyway)."""
    if resource_type == TOPIC_RESOURCE:
        if api.authorize(ctx, operation, ResourceType.TOPIC, name):
            return None
        return ErrorCode.topic_authorization_failed
    if resource_type in _CLUSTER_CONFIG_RESOURCES:
        if api.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return ErrorCode.cluster_authorization_failed
    return None


def _config_resource_text(resource_type: int, name: str) -> str:
    return f"topic {name}" if resource_type == TOPIC_RESOURCE else "the cluster"


async def handle_delete_topics(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    by_id = ctx.api_version >= 6
    refused: list[dict[str, object]] = []
    if api.authorization is not None:
        kept, refused = _authorize_deletions(api, ctx, request, by_id)
        if not kept:
            return build(response_class(request), {"throttle_time": NO_THROTTLE,
                                                   "responses": refused})
        request = (dataclasses.replace(request, topics=tuple(kept)) if by_id
                   else dataclasses.replace(request, topic_names=tuple(kept)))
    # In an Envelope, as the client: the controller applies its mutation
    # quota (KIP-599), strict from v5, so an older client's goes at v4.
    forwarded: Any
    if by_id:
        forwarded = request
    elif ctx.api_version >= STRICT_SINCE[DELETE_TOPICS_KEY]:
        forwarded = dt6.DeleteTopicsRequest(
            topics=tuple(dt6.DeleteTopicState(name=n, topic_id=_ZERO_UUID)
                         for n in request.topic_names),
            timeout=request.timeout,
        )
    else:
        forwarded = convert_request(request, 4)
    values: dict[str, Any]
    response = await forward_enveloped(api, ctx, forwarded)
    if response is not None:
        values = dict(_as_values(response))
    else:  # the forwarding channel failed: outcome unknown
        names = [t.name for t in request.topics] if by_id else list(request.topic_names)
        values = {"throttle_time": NO_THROTTLE, "responses": [
            {"name": n, "error_code": ErrorCode.request_timed_out} for n in names
        ]}
    if ctx.api_version < 3:  # TOPIC_DELETION_DISABLED is v3+: older clients get INVALID_REQUEST
        values["responses"] = [
            {**r, "error_code": ErrorCode.invalid_request}
            if r["error_code"] == ErrorCode.topic_deletion_disabled else r
            for r in values["responses"]]
    values["responses"] = [*values["responses"], *refused]
    return build(response_class(request), values)


def _authorize_deletions(
    api: BrokerApiContext, ctx: RequestContext, request: Any, by_id: bool,
) -> tuple[list[Any], list[dict[str, object]]]:
    """The DeleteTopics entries to forward (the request's own entries: names
    before v6, topic states from v6) and the answers for the others, as
    Kafka's ControllerApis.deleteTopics decides them:
    - DELETE on the cluster allows all;
    - by name: TOPIC_AUTHORIZATION_FAILED without DESCRIBE (whether or not it
      exists), UNKNOWN_TOPIC_OR_PARTITION if it does not exist, else
      TOPIC_AUTHORIZATION_FAILED without DELETE;
    - by id: UNKNOWN_TOPIC_ID if no topic has it, else TOPIC_AUTHORIZATION_FAILED
      without DELETE, with the name only if describable.
    What this broker's image does not show existing is answered here, never
    forwarded (the controller would delete a topic created meanwhile
    unchecked). A refused name or id given twice is INVALID_REQUEST.
    An entry with neither name nor id is forwarded (the controller ignores it);
    one with both is checked by name, which is what the controller deletes."""
    image = api.image
    everything = api.authorize(ctx, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME)
    entries = list(request.topics) if by_id else list(request.topic_names)

    def name_and_id(entry: Any) -> tuple[str, uuid.UUID]:
        if not by_id:
            return str(entry), _ZERO_UUID
        return str(entry.name or ""), entry.topic_id or _ZERO_UUID

    counts = Counter(name_and_id(e)[0] or name_and_id(e)[1] for e in entries)
    decided: dict[str, tuple[bool, bool]] = {}  # name -> (deletable, describable)

    def rights(name: str) -> tuple[bool, bool]:
        found = decided.get(name)
        if found is None:
            deletable = everything or api.authorize(ctx, AclOperation.DELETE,
                                                    ResourceType.TOPIC, name)
            found = decided[name] = (deletable, deletable or api.authorize(
                ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name))
        return found

    kept: list[Any] = []
    refused: list[dict[str, object]] = []
    answered: set[str | uuid.UUID] = set()
    for entry in entries:
        name, topic_id = name_and_id(entry)
        key: str | uuid.UUID = name or topic_id
        answer: dict[str, object] | None = None
        if name:
            deletable, describable = rights(name)
            if not describable:
                answer = {"name": name, "topic_id": _ZERO_UUID,
                          "error_code": ErrorCode.topic_authorization_failed}
            elif name not in image.topic_ids:
                answer = {"name": name, "topic_id": _ZERO_UUID,
                          "error_code": ErrorCode.unknown_topic_or_partition}
            elif not deletable:
                answer = {"name": name, "topic_id": _ZERO_UUID,
                          "error_code": ErrorCode.topic_authorization_failed}
        elif topic_id != _ZERO_UUID:
            topic = image.topics.get(topic_id)
            if topic is None:
                answer = {"name": None, "topic_id": topic_id,
                          "error_code": ErrorCode.unknown_topic_id}
            else:
                deletable, describable = rights(topic.name)
                if not deletable:
                    answer = {"name": topic.name if describable else None,
                              "topic_id": topic_id,
                              "error_code": ErrorCode.topic_authorization_failed}
        if answer is None:
            kept.append(entry)
            continue
        if key in answered:
            continue
        answered.add(key)
        if counts[key] > 1:
            answer.update(error_code=ErrorCode.invalid_request,
                          error_message="Duplicate topic in request.")
        elif answer["error_code"] == ErrorCode.topic_authorization_failed:
            answer["error_message"] = _denied(AclOperation.DELETE, "this topic")
        refused.append(answer)
    return kept, refused


async def handle_describe_log_dirs(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """DescribeLogDirs (kafka-log-dirs.sh, ``KafkaAdminClient.describe_log_dirs``):
    each of this broker's ``log.dirs`` with the partitions it holds (all of
    them when ``topics`` is null), their size on disk and offset lag (Kafka's
    ``max(HW - LEO, 0)`` for a current log), a replica moving to another
    directory (AlterReplicaLogDirs) listed there too as a future log
    (``is_future_key``, lag: the current log's end offset minus its own),
    and, from v4, the directory's total and usable bytes. Without DESCRIBE on
    the cluster: no directories and (v3+) CLUSTER_AUTHORIZATION_FAILED."""
    if _cluster_denied(api, ctx, AclOperation.DESCRIBE):
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
            "results": []})
    wanted = None if request.topics is None else {
        (str(t.topic), int(p)) for t in request.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list[dict[str, object]]]] = {
        os.path.abspath(d): {} for d in api.replicas.log_dirs}
    moves = api.replicas.moves.moves
    for (topic, index), hosted in sorted(api.replicas.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        p = hosted.partition
        directory = os.path.dirname(os.path.abspath(p.log.directory))
        by_dir.setdefault(directory, {}).setdefault(topic, []).append({
            "partition_index": index, "partition_size": p.log.size_in_bytes,
            "offset_lag": max(p.high_watermark - p.log_end_offset, 0), "is_future_key": False})
        move = moves.get((topic, index))
        if move is not None:
            # A move in progress (AlterReplicaLogDirs): its future log, in the
            # destination, with Kafka's lag for one (current LEO - future LEO).
            by_dir.setdefault(os.path.abspath(move.destination), {}).setdefault(
                topic, []).append({
                    "partition_index": index, "partition_size": move.future_log.size_in_bytes,
                    "offset_lag": max(p.log_end_offset - move.future_end_offset, 0),
                    "is_future_key": True})
    results = []
    for directory, topics in by_dir.items():
        try:
            stats = os.statvfs(directory)
            total, usable = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
            error = ErrorCode.none
        except OSError:
            total = usable = -1
            error = ErrorCode.kafka_storage_error
        results.append({"error_code": error, "log_dir": directory, "total_bytes": total,
                        "usable_bytes": usable, "topics": [
                            {"name": name, "partitions": parts} for name, parts in topics.items()]})
    return build(response_class(request), {"throttle_time": NO_THROTTLE,
                                           "error_code": ErrorCode.none, "results": results})


async def handle_alter_replica_log_dirs(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterReplicaLogDirs (kafka-reassign-partitions.sh with ``log_dirs``,
    ``Admin.alterReplicaLogDirs``): move this broker's replicas to other
    ``log.dirs`` (`ReplicaManager.move_replica`, copied in the background;
    DescribeLogDirs shows the future log until it is swapped in). Per
    partition: NONE once the move has begun (or the replica is there
    already), LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR, REPLICA_NOT_AVAILABLE;
    CLUSTER_AUTHORIZATION_FAILED for every one without ALTER on the cluster.
    A partition named under two directories goes to the last."""
    denied = _cluster_denied(api, ctx, AclOperation.ALTER)
    answers: dict[str, dict[int, ErrorCode]] = {}
    for entry in request.dirs:
        for topic in entry.topics:
            for index in topic.partitions:
                key = (str(topic.name), int(index))
                error = (ErrorCode.cluster_authorization_failed if denied
                         else api.replicas.move_replica(key, str(entry.path)))
                answers.setdefault(key[0], {})[key[1]] = error
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "results": [
        {"topic_name": name, "partitions": [
            {"partition_index": index, "error_code": error}
            for index, error in partitions.items()]}
        for name, partitions in answers.items()]})


# Clamp for a hostile DeleteRecords timeout (as for Produce's).
MAX_DELETE_RECORDS_TIMEOUT_MS: Final = 300_000


async def handle_delete_records(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DeleteRecords (kafka-delete-records.sh, ``AdminClient.delete_records``):
    per partition, the low watermark once every replica deleted below the
    offset (-1: the high watermark), or NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT; and
    TOPIC_AUTHORIZATION_FAILED without DELETE on the topic (checked first)."""
    timeout_ms = min(max(int(request.timeout.total_seconds() * 1000), 0),
                     MAX_DELETE_RECORDS_TIMEOUT_MS)
    offsets: dict[tuple[str, int], int] = {}
    duplicates: set[tuple[str, int]] = set()
    denied: set[str] = set()
    if api.authorization is not None:
        denied = {name for name in {str(t.name) for t in request.topics}
                  if not api.authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)}
    for topic in request.topics:
        if str(topic.name) in denied:
            continue
        for part in topic.partitions:
            key = (str(topic.name), int(part.partition_index))
            if key in offsets:
                duplicates.add(key)
            offsets[key] = int(part.offset)
    for key in duplicates:
        del offsets[key]
    results = await api.replicas.delete_records(offsets, timeout_ms=timeout_ms)
    for topic in request.topics:
        if str(topic.name) in denied:
            results.update({(str(topic.name), int(p.partition_index)):
                            (ErrorCode.topic_authorization_failed, -1, None)
                            for p in topic.partitions})
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": part.partition_index,
             "low_watermark": -1 if key in duplicates else results[key][1],
             "error_code": ErrorCode.invalid_request if key in duplicates else results[key][0]}
            for part in topic.partitions
            for key in [(str(topic.name), int(part.partition_index))]
        ]}
        for topic in request.topics
    ]})


async def handle_describe_configs(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    checked = api.authorization is not None
    results = []
    for resource in request.resources:
        rtype, name = int(resource.resource_type), str(resource.resource_name)
        keys = resource.configuration_keys
        error, configs = ErrorCode.none, []
        denied = _config_access_error(
            api, ctx, AclOperation.DESCRIBE_CONFIGS, rtype, name) if checked else None
        if denied is not None:
            error = denied
        elif rtype == TOPIC_RESOURCE:
            if api.image.topic_by_name(name) is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                own = api.image.topic_config(name)
                merged = effective_topic_config(api.replicas.broker_config, own)
                sources = topic_config_sources(_broker_sources(api), own)
                configs = [_entry(k, v, _SOURCE_IDS.get(sources.get(k, ""), _DEFAULT),
                                  read_only=False)
                           for k, v in sorted(merged.items())]
        elif rtype == BROKER_LOGGER_RESOURCE:
            if name != str(api.metadata.broker_id):
                error = ErrorCode.invalid_request
            else:
                configs = [_entry(k, v, _DYNAMIC_BROKER_LOGGER, read_only=False)
                           for k, v in describe_levels()]
        elif rtype == BROKER_RESOURCE and name == "":
            # The cluster default (kafka-configs --entity-default): what is set there.
            configs = [_entry(k, v, _DYNAMIC_DEFAULT_BROKER, read_only=False)
                       for k, v in sorted(api.image.config(CLUSTER_DEFAULT_RESOURCE).items())]
        elif rtype == BROKER_RESOURCE and name == str(api.metadata.broker_id):
            sources = _broker_sources(api)
            configs = [_entry(k, v, _SOURCE_IDS.get(sources.get(k, ""), _DEFAULT),
                              read_only=k not in BROKER_CONFIG_VALIDATORS)
                       for k, v in sorted(api.replicas.broker_config.items())
                       if not DYNAMIC_KEYSTORE.fullmatch(k)]
            # KIP-226 keystores: set per broker, secrets shown without their value.
            configs += [_entry(k, None if is_sensitive(k) else v, _DYNAMIC_BROKER,
                               read_only=False, sensitive=is_sensitive(k))
                        for k, v in sorted(api.image.config(ConfigResource(
                            ConfigResourceType.BROKER, name)).items())
                        if DYNAMIC_KEYSTORE.fullmatch(k)]
        else:
            error = ErrorCode.invalid_request
        if keys is not None:
            configs = [c for c in configs if c["name"] in set(keys)]
        results.append({
            "error_code": error, "error_message": None if error == ErrorCode.none else error.name,
            "resource_type": rtype, "resource_name": name, "configs": configs,
        })
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "results": results})


def _broker_sources(api: BrokerApiContext) -> dict[str, str]:
    return broker_config_sources(api.replicas.static_config, api.image, api.metadata.broker_id)


def _entry(name: str, value: str | None, source: int, *, read_only: bool,
           sensitive: bool = False) -> Mapping[str, object]:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == _DEFAULT, "is_sensitive": sensitive, "synonyms": [],
            "config_type": 0, "documentation": None}


async def handle_list_config_resources(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """ListConfigResources v0-1 (KIP-1142; v0 is KIP-714's
    ListClientMetricsResources): the names of the config resources of the
    types asked for, as Kafka's broker lists them.

    - v0 asks for client-metrics resources only; v1 names its types, none
      meaning all five (group, client metrics, broker logger, broker,
      topic). A type outside those five makes the whole answer
      UNSUPPORTED_VERSION.
    - Groups and client-metrics subscriptions are listed when they have
      dynamic configs. This cluster has neither kind of config, so those
      lists are empty.
    - Brokers and broker loggers: every registered broker with an endpoint
      on this listener, fenced or not. Topics: every topic in the metadata
      image, internal ones included.
    - It needs DESCRIBE_CONFIGS on the cluster (else
      CLUSTER_AUTHORIZATION_FAILED).
    """
    def answer(error: ErrorCode, resources: list[dict[str, object]]) -> Any:
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE, "error_code": error, "config_resources": resources})

    if not api.authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return answer(ErrorCode.cluster_authorization_failed, [])
    if ctx.api_version == 0:
        wanted = {CLIENT_METRICS_RESOURCE}
    else:
        wanted = {int(t) for t in request.resource_types} or set(LISTED_CONFIG_RESOURCES)
        if not wanted <= set(LISTED_CONFIG_RESOURCES):
            return answer(ErrorCode.unsupported_version, [])
    image = api.image
    resources: list[dict[str, object]] = []
    for resource_type in LISTED_CONFIG_RESOURCES:
        if resource_type not in wanted:
            continue
        names: list[str]
        if resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE):
            names = [str(b.broker_id) for b, _, _, _ in api.registered_brokers(ctx.listener_name)]
        elif resource_type == TOPIC_RESOURCE:
            names = sorted(topic.name for topic in image.topics.values())
        else:
            names = []  # no group or client-metrics configs exist here
        resources += ({"resource_name": name, "resource_type": resource_type} for name in names)
    return answer(ErrorCode.none, resources)
