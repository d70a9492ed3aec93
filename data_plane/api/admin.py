"""CreateTopics (v2-7), CreatePartitions (v0-3), DeleteTopics (v1-6),
IncrementalAlterConfigs (v0-1), AlterConfigs (v0-2), ElectLeaders (v0-2),
AlterPartitionReassignments (v0-1), ListPartitionReassignments (v0),
AlterClientQuotas (v0-1), AlterUserScramCredentials (v0), DescribeQuorum
(v0-2) and UnregisterBroker (v0), forwarded to the active controller (KIP-590) at the controller's versions and
answered at the client's; DescribeConfigs (v1-4) for topics and this broker, with Kafka's
defaults and config sources; DeleteRecords (v0-2), served by the leaders
(`ReplicaManager.delete_records`); DescribeLogDirs (v1-4), this broker's
directories."""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.create_topics.v7 import request as ct7
from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.elect_leaders.v2 import request as el2
from kio.static.primitive import i8

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from data_plane.api.scram_credentials import alter_failed, alter_response_values
from data_plane.broker.log_configs import (
    DYNAMIC_BROKER,
    DYNAMIC_DEFAULT,
    STATIC,
    broker_config_sources,
    effective_topic_config,
    topic_config_sources,
)
from metadata_quorum.controller.configuration_control import BROKER_CONFIG_VALIDATORS
from metadata_quorum.image import CLUSTER_DEFAULT_RESOURCE
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request

__all__ = (
    "MAX_DELETE_RECORDS_TIMEOUT_MS",
    "handle_alter_client_quotas",
    "handle_alter_configs",
    "handle_alter_partition_reassignments",
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
_CONTROLLER_VERSIONS: Final = {ALTER_CONFIGS_KEY: 2, CREATE_PARTITIONS_KEY: 3,
                               INCREMENTAL_ALTER_CONFIGS_KEY: 1,
                               ALTER_PARTITION_REASSIGNMENTS_KEY: 1,
                               LIST_PARTITION_REASSIGNMENTS_KEY: 0,
                               ALTER_CLIENT_QUOTAS_KEY: 1,
                               ALTER_USER_SCRAM_CREDENTIALS_KEY: 0,
                               DESCRIBE_QUORUM_KEY: 2,
                               UNREGISTER_BROKER_KEY: 0}
_ZERO_UUID: Final = uuid.UUID(int=0)
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
# DescribeConfigs ConfigSource ids.
_DYNAMIC_TOPIC: Final = 1
_DYNAMIC_BROKER: Final = 2
_DYNAMIC_DEFAULT_BROKER: Final = 3
_STATIC_BROKER: Final = 4
_DEFAULT: Final = 5
_SOURCE_IDS: Final = {"topic": _DYNAMIC_TOPIC, DYNAMIC_BROKER: _DYNAMIC_BROKER,
                      DYNAMIC_DEFAULT: _DYNAMIC_DEFAULT_BROKER, STATIC: _STATIC_BROKER}


def _as_values(entity: object) -> object:
    """A kio entity as nested dicts (for `build` at another version)."""
    if dataclasses.is_dataclass(entity) and not isinstance(entity, type):
        return {f.name: _as_values(getattr(entity, f.name)) for f in dataclasses.fields(entity)}
    if isinstance(entity, tuple):
        return [_as_values(v) for v in entity]
    return entity


async def handle_create_topics(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    del ctx
    forwarded = convert_request(request, 7)
    assert isinstance(forwarded, ct7.CreateTopicsRequest)
    try:
        response = await api.metadata.forward(CREATE_TOPICS_KEY, forwarded)
    except Exception as e:  # the forwarding channel failed: outcome unknown
        log.warning("CreateTopics forward failed: %r", e)
        return build(response_class(request), {"throttle_time": NO_THROTTLE, "topics": [
            {"name": t.name, "error_code": ErrorCode.request_timed_out, "error_message": str(e)}
            for t in request.topics
        ]})
    return build(response_class(request), _as_values(response))  # type: ignore[arg-type]


async def _forward(
    api: BrokerApiContext, request: Any, api_key: int, failed: Mapping[str, object]
) -> Any:
    """``request`` forwarded to the active controller at its version and the
    answer rebuilt at the client's; ``failed`` (the answer's body) when the
    forwarding channel fails, so the outcome is unknown."""
    forwarded = convert_request(request, _CONTROLLER_VERSIONS[api_key])
    try:
        response = await api.metadata.forward(api_key, forwarded)
    except Exception as e:
        log.warning("forwarding api key %d failed: %r", api_key, e)
        return build(response_class(request), failed)
    return build(response_class(request), _as_values(response))  # type: ignore[arg-type]


async def handle_create_partitions(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    del ctx
    return await _forward(api, request, CREATE_PARTITIONS_KEY, {
        "throttle_time": NO_THROTTLE, "results": [
            {"name": t.name, "error_code": ErrorCode.request_timed_out} for t in request.topics
        ]})


async def handle_elect_leaders(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """ElectLeaders (kafka-leader-election.sh, ``AdminClient.elect_leaders``):
    forwarded at v2 (v0 has no election type: preferred). v0 has no
    top-level error either, so there every partition asked for carries it."""
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
        values = dict(_as_values(response))  # type: ignore[call-overload]
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


async def handle_alter_partition_reassignments(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterPartitionReassignments (kafka-reassign-partitions.sh --execute and
    --cancel; KIP-455, KIP-860 at v1): answered once the controller has
    committed the change, not when the replicas have moved (follow that
    with ListPartitionReassignments)."""
    failed: dict[str, object] = {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.request_timed_out,
        "error_message": "forwarding to the controller failed; the outcome is unknown",
        "responses": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": ErrorCode.request_timed_out, "error_message": None}
                for p in t.partitions]}
            for t in request.topics]}
    del ctx
    return await _forward(api, request, ALTER_PARTITION_REASSIGNMENTS_KEY, failed)


async def handle_list_partition_reassignments(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """ListPartitionReassignments (kafka-reassign-partitions.sh --verify and
    --list): the partitions being reassigned, from the controller."""
    del ctx
    return await _forward(api, request, LIST_PARTITION_REASSIGNMENTS_KEY, {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.request_timed_out,
        "error_message": "forwarding to the controller failed", "topics": []})


async def handle_alter_client_quotas(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterClientQuotas (kafka-configs.sh --entity-type users/clients;
    KIP-546): answered once the controller has committed the change. Brokers
    apply it when their metadata image reaches it."""
    del ctx
    return await _forward(api, request, ALTER_CLIENT_QUOTAS_KEY, {
        "throttle_time": NO_THROTTLE, "entries": [
            {"error_code": ErrorCode.request_timed_out,
             "error_message": "forwarding to the controller failed; the outcome is unknown",
             "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                        for e in entry.entity]}
            for entry in request.entries]})


async def handle_alter_user_scram_credentials(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """AlterUserScramCredentials (kafka-configs.sh --entity-type users
    --add-config 'SCRAM-SHA-256=[...]'; KIP-554): answered once the
    controller has committed the credentials. Brokers serve them from their
    metadata image once it reaches them."""
    del ctx
    return await _forward(api, request, ALTER_USER_SCRAM_CREDENTIALS_KEY, alter_response_values(
        alter_failed(request, ErrorCode.request_timed_out,
                     "forwarding to the controller failed; the outcome is unknown")))


async def handle_describe_quorum(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DescribeQuorum (v0-2; ``kafka-metadata-quorum.sh --bootstrap-server``):
    forwarded to the active controller, which leads the metadata quorum, as
    Kafka's brokers forward it. A controller that lost the lead meanwhile
    answers NOT_LEADER_OR_FOLLOWER, for the client to retry."""
    del ctx
    return await _forward(api, request, DESCRIBE_QUORUM_KEY, {
        "error_code": ErrorCode.request_timed_out,
        "error_message": "forwarding to the controller failed", "topics": [], "nodes": []})


async def handle_unregister_broker(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """UnregisterBroker (v0; ``kafka-cluster.sh unregister --id N``):
    forwarded to the active controller, which removes the registration."""
    del ctx
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
    del ctx
    return await _forward(api, request, INCREMENTAL_ALTER_CONFIGS_KEY, _config_failures(request))


async def handle_alter_configs(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    del ctx
    return await _forward(api, request, ALTER_CONFIGS_KEY, _config_failures(request))


async def handle_delete_topics(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 6:
        forwarded = request
    else:
        forwarded = dt6.DeleteTopicsRequest(
            topics=tuple(dt6.DeleteTopicState(name=n, topic_id=_ZERO_UUID)
                         for n in request.topic_names),
            timeout=request.timeout,
        )
    try:
        response = await api.metadata.forward(DELETE_TOPICS_KEY, forwarded)
    except Exception as e:
        log.warning("DeleteTopics forward failed: %r", e)
        names = ([t.name for t in request.topics] if ctx.api_version >= 6
                 else list(request.topic_names))
        return build(response_class(request), {"throttle_time": NO_THROTTLE, "responses": [
            {"name": n, "error_code": ErrorCode.request_timed_out} for n in names
        ]})
    return build(response_class(request), _as_values(response))  # type: ignore[arg-type]


async def handle_describe_log_dirs(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """DescribeLogDirs (kafka-log-dirs.sh, ``KafkaAdminClient.describe_log_dirs``):
    each of this broker's ``log.dirs`` with the partitions it holds (all of
    them when ``topics`` is null), their size on disk and offset lag (Kafka's
    ``max(HW - LEO, 0)`` for a current log; there are no future logs here),
    and, from v4, the directory's total and usable bytes."""
    del ctx
    wanted = None if request.topics is None else {
        (str(t.topic), int(p)) for t in request.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list[dict[str, object]]]] = {
        os.path.abspath(d): {} for d in api.replicas.log_dirs}
    for (topic, index), hosted in sorted(api.replicas.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        p = hosted.partition
        directory = os.path.dirname(os.path.abspath(p.log.directory))
        by_dir.setdefault(directory, {}).setdefault(topic, []).append({
            "partition_index": index, "partition_size": p.log.size_in_bytes,
            "offset_lag": max(p.high_watermark - p.log_end_offset, 0), "is_future_key": False})
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


# Clamp for a hostile DeleteRecords timeout (as for Produce's).
MAX_DELETE_RECORDS_TIMEOUT_MS: Final = 300_000


async def handle_delete_records(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DeleteRecords (kafka-delete-records.sh, ``AdminClient.delete_records``):
    per partition, the low watermark once every replica deleted below the
    offset (-1: the high watermark), or NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT."""
    del ctx
    timeout_ms = min(max(int(request.timeout.total_seconds() * 1000), 0),
                     MAX_DELETE_RECORDS_TIMEOUT_MS)
    offsets: dict[tuple[str, int], int] = {}
    duplicates: set[tuple[str, int]] = set()
    for topic in request.topics:
        for part in topic.partitions:
            key = (str(topic.name), int(part.partition_index))
            if key in offsets:
                duplicates.add(key)
            offsets[key] = int(part.offset)
    for key in duplicates:
        del offsets[key]
    results = await api.replicas.delete_records(offsets, timeout_ms=timeout_ms)
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
    del ctx
    results = []
    for resource in request.resources:
        rtype, name = int(resource.resource_type), str(resource.resource_name)
        keys = resource.configuration_keys
        error, configs = ErrorCode.none, []
        if rtype == TOPIC_RESOURCE:
            if api.image.topic_by_name(name) is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                own = api.image.topic_config(name)
                merged = effective_topic_config(api.replicas.broker_config, own)
                sources = topic_config_sources(_broker_sources(api), own)
                configs = [_entry(k, v, _SOURCE_IDS.get(sources.get(k, ""), _DEFAULT),
                                  read_only=False)
                           for k, v in sorted(merged.items())]
        elif rtype == BROKER_RESOURCE and name == "":
            # The cluster default (kafka-configs --entity-default): what is set there.
            configs = [_entry(k, v, _DYNAMIC_DEFAULT_BROKER, read_only=False)
                       for k, v in sorted(api.image.config(CLUSTER_DEFAULT_RESOURCE).items())]
        elif rtype == BROKER_RESOURCE and name == str(api.metadata.broker_id):
            sources = _broker_sources(api)
            configs = [_entry(k, v, _SOURCE_IDS.get(sources.get(k, ""), _DEFAULT),
                              read_only=k not in BROKER_CONFIG_VALIDATORS)
                       for k, v in sorted(api.replicas.broker_config.items())]
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


def _entry(name: str, value: str, source: int, *, read_only: bool) -> Mapping[str, object]:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == _DEFAULT, "is_sensitive": False, "synonyms": [],
            "config_type": 0, "documentation": None}
