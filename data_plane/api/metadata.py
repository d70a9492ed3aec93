"""Metadata (v0-12) and DescribeCluster (v0-1): the brokers, topics,
partitions, leaders (with leader epochs, KIP-320) and topic ids of the
published image.

Auto topic creation, as Kafka: a topic asked for by name that does not exist
is created when the broker's ``auto.create.topics.enable`` is true (Kafka's
default) and the request allows it (``allow_auto_topic_creation``, v4+;
always before v4). The broker forwards a CreateTopics with
``num.partitions`` / ``default.replication.factor`` (-1: the controller's
defaults) and answers LEADER_NOT_AVAILABLE for it (the client retries until
the topic is in this broker's image); a refused creation (bad name, too few
brokers) answers the controller's error instead. Otherwise an unknown topic
is UNKNOWN_TOPIC_OR_PARTITION. The internal topics are created the way the
coordinators need them, whatever ``auto.create.topics.enable`` says.

ACLs (with an authorizer), as Kafka's KafkaApis.handleTopicMetadataRequest:
- a topic asked for needs DESCRIBE, checked before whether it exists: else
  it is answered TOPIC_AUTHORIZATION_FAILED with no partitions and no topic
  id (asked for by id: no name), so the answer does not tell whether it
  exists; an all-topics request lists only the describable topics;
- creating a missing topic needs CREATE on the cluster or on the topic,
  else TOPIC_AUTHORIZATION_FAILED (an internal topic Kafka would not have
  auto-created is UNKNOWN_TOPIC_OR_PARTITION, as there);
- ``include_topic_authorized_operations`` (v8+) and
  ``include_cluster_authorized_operations`` (v8-10, and DescribeCluster) get
  the bitfield of the operations allowed among those the resource type
  supports (`authorized_operations`; every one without an authorizer); the
  cluster's is 0 without DESCRIBE on it. Not asked for: Kafka's "not
  requested" value.
DescribeCluster itself needs no ACL, as in Kafka.

DescribeTopicPartitions (v0, KIP-966's paged describe, which Kafka's admin
client and ``kafka-topics.sh --describe`` use from 3.8): the same partition
facts as Metadata, topics sorted by name and cut after
``min(response_partition_limit, max.request.partition.size.limit)``
partitions, with a cursor (topic, partition) where the next page starts
(Kafka's DescribeTopicPartitionsRequestHandler):
- no topics named: every topic the principal may describe, from the
  cursor's topic on; topics named: those at or after the cursor's topic,
  which must be one of them (else INVALID_REQUEST on each);
- a named topic without DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED
  (zero id, no partitions) after the others, by name; a named topic that does not
  exist, UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
  illegal name);
- the cursor's partition index applies to its own topic only, and only when
  the principal may describe it;
- partitions carry no error, replicas and ISR unfiltered, the leader -1
  when no registered broker leads; the eligible leader replicas and last
  known ELR (KIP-966) as the controller keeps them (empty while ELR is off);
- each topic's authorized operations are always filled in.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Any, Final

from kio.schema.create_topics.v7 import request as ct7
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from data_plane.api.authorization import authorized_operations
from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, UNREQUESTED_OPERATIONS, BrokerApiContext
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_quorum.image import PartitionRegistration, TopicImage
from metadata_quorum.topic_names import INTERNAL_TOPICS, topic_name_error
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("handle_describe_cluster", "handle_describe_topic_partitions", "handle_metadata")

log = logging.getLogger(__name__)

_ZERO_UUID = uuid.UUID(int=0)
_CREATE_TOPICS_KEY: Final = 19
# How long a Metadata request waits for the controller to create a topic.
_AUTO_CREATE_TIMEOUT_MS: Final = 5_000


async def handle_metadata(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    image = api.image
    requested = request.topics
    version = ctx.api_version
    checked = api.authorization is not None
    topic_ops = version >= 8 and bool(getattr(request, "include_topic_authorized_operations",
                                              False))
    topics: list[dict[str, object]] = []
    if requested is None or (version == 0 and not requested):
        # Every topic the principal may describe; the others are not named.
        topics = [_topic(api, t, ctx if topic_ops else None) for t in image.topics.values()
                  if not checked or _may_describe(api, ctx, t.name)]
    else:
        may_create: _MayCreate | None = None
        for item in requested:
            raw = getattr(item, "name", item if isinstance(item, str) else None)
            name = str(raw) if raw else ""
            topic_id = getattr(item, "topic_id", None)
            topic = None
            if name:
                topic = image.topic_by_name(name)
            elif topic_id is not None and topic_id != _ZERO_UUID:
                topic = image.topics.get(topic_id)
                if topic is None:  # ids are not secret: unknown is said first (Kafka)
                    topics.append(_missing(ErrorCode.unknown_topic_id, "", topic_id))
                    continue
                if checked and not _may_describe(api, ctx, topic.name):
                    # No name: the id may be told, what it names not.
                    topics.append(_missing(ErrorCode.topic_authorization_failed,
                                           None if version >= 12 else "", topic_id))
                    continue
            if name and checked and not _may_describe(api, ctx, name):
                # Whether or not it exists (no id, no partitions).
                topics.append(_missing(ErrorCode.topic_authorization_failed, name, _ZERO_UUID))
                continue
            if topic is not None:
                topics.append(_topic(api, topic, ctx if topic_ops else None))
                continue
            internal = name in INTERNAL_TOPICS
            auto = bool(name) and _may_auto_create(api, ctx, request)
            if checked and (internal or auto):
                may_create = may_create or _MayCreate(api, ctx)
                if not may_create(name):
                    topics.append(_missing(
                        ErrorCode.topic_authorization_failed if auto
                        else ErrorCode.unknown_topic_or_partition,  # Kafka would not create it
                        name, _ZERO_UUID, is_internal=internal))
                    continue
            if internal:
                # Created only as the coordinators need them (partitions,
                # replication factor, compaction), never with the user
                # defaults (Kafka's AutoTopicCreationManager does the same).
                error = _create_internal(api, name)
            elif auto:
                error = await _auto_create(api, name)
            else:
                error = ErrorCode.unknown_topic_or_partition
            entry = _missing(error, name, topic_id or _ZERO_UUID)
            if topic_ops and name:
                entry["topic_authorized_operations"] = authorized_operations(
                    api, ctx, ResourceType.TOPIC, name)
            topics.append(entry)
    cluster_ops = UNREQUESTED_OPERATIONS
    if 8 <= version <= 10 and getattr(request, "include_cluster_authorized_operations", False):
        cluster_ops = _cluster_operations(api, ctx)
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE,
        "brokers": [
            {"node_id": b.broker_id, "host": host, "port": port, "rack": b.rack}
            for b, host, port in api.live_brokers(ctx.listener_name)
        ],
        "cluster_id": api.cluster_id,
        "controller_id": api.metadata.broker_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_ops,
        "error_code": ErrorCode.none,  # v13 (KIP-1102): no REBOOTSTRAP_REQUIRED here
    })


def _endpoint_type_name(endpoint_type: int) -> str:
    return {1: "BROKER", 2: "CONTROLLER"}.get(endpoint_type, "UNKNOWN")


def _may_describe(api: BrokerApiContext, ctx: RequestContext, name: str) -> bool:
    return api.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)


class _MayCreate:
    """Whether the principal may create a topic (by auto-creation): CREATE on
    the cluster (asked once) or on the topic."""

    __slots__ = ("api", "cluster", "ctx")

    def __init__(self, api: BrokerApiContext, ctx: RequestContext) -> None:
        self.api = api
        self.ctx = ctx
        self.cluster = api.authorize(ctx, AclOperation.CREATE, ResourceType.CLUSTER,
                                     CLUSTER_NAME)

    def __call__(self, name: str) -> bool:
        return self.cluster or self.api.authorize(self.ctx, AclOperation.CREATE,
                                                  ResourceType.TOPIC, name)


def _missing(error: ErrorCode, name: str | None, topic_id: uuid.UUID | None, *,
             is_internal: bool = False) -> dict[str, object]:
    """A topic entry with no partitions (an error, or one being created)."""
    return {"error_code": error, "name": name, "topic_id": topic_id,
            "is_internal": is_internal, "partitions": [],
            "topic_authorized_operations": UNREQUESTED_OPERATIONS}


def _cluster_operations(api: BrokerApiContext, ctx: RequestContext) -> int:
    """The cluster's authorized operations: 0 without DESCRIBE on it (Kafka)."""
    if not api.authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(api, ctx, ResourceType.CLUSTER, CLUSTER_NAME)


def _create_internal(api: BrokerApiContext, name: str) -> ErrorCode:
    """Start creating the internal topic ``name`` as FindCoordinator would;
    LEADER_NOT_AVAILABLE meanwhile (clients retry)."""
    api.coordinators.ensure_internal_topic(name)
    return ErrorCode.leader_not_available


def _may_auto_create(api: BrokerApiContext, ctx: RequestContext, request: Any) -> bool:
    if api.replicas.broker_config.get("auto.create.topics.enable", "true") != "true":
        return False
    return ctx.api_version < 4 or bool(getattr(request, "allow_auto_topic_creation", True))


async def _auto_create(api: BrokerApiContext, name: str) -> ErrorCode:
    """Ask the controller to create ``name`` with the cluster defaults; the
    error the Metadata response shows for it."""
    request = ct7.CreateTopicsRequest(
        topics=(ct7.CreatableTopic(
            name=TopicName(name), num_partitions=i32(-1), replication_factor=i16(-1),
            assignments=(), configs=()),),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=_AUTO_CREATE_TIMEOUT_MS)),
        validate_only=False,
    )
    try:
        response = await asyncio.wait_for(
            api.metadata.forward(_CREATE_TOPICS_KEY, request), _AUTO_CREATE_TIMEOUT_MS / 1000)
    except Exception as e:  # no controller reachable now: the client retries
        log.info("auto-creating topic %r: %r", name, e)
        return ErrorCode.leader_not_available
    results = getattr(response, "topics", ())
    error = ErrorCode(results[0].error_code) if results else ErrorCode.none
    if error in (ErrorCode.none, ErrorCode.topic_already_exists):
        log.info("auto-created topic %r", name)
        return ErrorCode.leader_not_available
    return error


def _topic(api: BrokerApiContext, topic: TopicImage,
           ops_for: RequestContext | None = None) -> dict[str, object]:
    """``topic``'s entry; with ``ops_for``, its authorized operations for
    that request's principal."""
    partitions = []
    for pid in sorted(topic.partitions):
        reg = topic.partitions[pid]
        partitions.append({
            "error_code": ErrorCode.none if reg.leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": pid,
            "leader_id": reg.leader,
            "leader_epoch": reg.leader_epoch,
            "replica_nodes": reg.replicas,
            "isr_nodes": reg.isr,
            "offline_replicas": _offline(api, reg.replicas),
        })
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": UNREQUESTED_OPERATIONS if ops_for is None
        else authorized_operations(api, ops_for, ResourceType.TOPIC, topic.name),
    }


def _offline(api: BrokerApiContext, replicas: tuple[int, ...]) -> tuple[int, ...]:
    """The replicas on brokers that are not registered or are fenced."""
    brokers = api.image.brokers
    return tuple(r for r in replicas if r not in brokers or brokers[r].fenced)


async def handle_describe_topic_partitions(api: BrokerApiContext, ctx: RequestContext,
                                           request: Any) -> Any:
    image = api.image
    cursor = request.cursor
    cursor_topic = "" if cursor is None else str(cursor.topic_name)
    named = [str(t.name) for t in request.topics]
    every = not named
    if every:
        candidates = [t.name for t in image.topics.values() if t.name >= cursor_topic]
    else:
        candidates = list(dict.fromkeys(n for n in named if n >= cursor_topic))
        if cursor is not None and cursor_topic not in candidates:
            # Kafka answers the InvalidRequestException on every named topic.
            return build(response_class(request), {
                "throttle_time": NO_THROTTLE,
                "topics": [_missing(ErrorCode.invalid_request, n, _ZERO_UUID)
                           for n in dict.fromkeys(named)],
            })
    checked = api.authorization is not None
    refused: list[dict[str, object]] = []
    allowed: list[str] = []
    for name in candidates:
        if checked and not _may_describe(api, ctx, name):
            if not every:  # named: refused without saying whether it exists
                refused.append(_missing(ErrorCode.topic_authorization_failed, name, _ZERO_UUID))
            continue
        allowed.append(name)
    allowed.sort()
    first_index = (int(cursor.partition_index) if cursor is not None
                   and (not checked or _may_describe(api, ctx, cursor_topic)) else 0)
    limit = min(int(api.replicas.broker_config["max.request.partition.size.limit"]),
                int(request.response_partition_limit))
    topics: list[dict[str, object]] = []
    next_cursor: dict[str, object] | None = None
    remaining = limit
    for name in allowed:
        if remaining == 0:
            # The page is full and ends with a whole topic: the next one
            # starts at this topic (which may not even exist).
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if remaining < 0:
            break
        topic = image.topic_by_name(name)
        if topic is None:
            if not every:
                error = (ErrorCode.unknown_topic_or_partition if topic_name_error(name) is None
                         else ErrorCode.invalid_topic_exception)
                entry = _missing(error, name, _ZERO_UUID, is_internal=name in INTERNAL_TOPICS)
                entry["topic_authorized_operations"] = authorized_operations(
                    api, ctx, ResourceType.TOPIC, name)
                topics.append(entry)
            continue
        start = first_index if name == cursor_topic else 0
        count = len(topic.partitions)
        upper = min(count, start + remaining)
        partitions = [_described_partition(api, pid, topic.partitions[pid])
                      for pid in range(start, upper) if pid in topic.partitions]
        topics.append({
            "error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
            "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
            "topic_authorized_operations": authorized_operations(
                api, ctx, ResourceType.TOPIC, name),
        })
        if upper < count:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE,
        "topics": topics + sorted(refused, key=lambda t: str(t["name"])),
        "next_cursor": next_cursor,
    })


def _described_partition(api: BrokerApiContext, pid: int,
                         reg: PartitionRegistration) -> dict[str, object]:
    leader = reg.leader if reg.leader in api.image.brokers else -1
    return {
        "error_code": ErrorCode.none,
        "partition_index": pid,
        "leader_id": leader,
        "leader_epoch": reg.leader_epoch,
        "replica_nodes": reg.replicas,
        "isr_nodes": reg.isr,
        "eligible_leader_replicas": reg.elr,  # KIP-966
        "last_known_elr": reg.last_known_elr,
        "offline_replicas": _offline(api, reg.replicas),
    }


_BROKER_ENDPOINT: Final = 1  # DescribeCluster's EndpointType (KIP-919): 1 brokers, 2 controllers


async def handle_describe_cluster(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DescribeCluster v0-2: the live brokers' addresses on this listener;
    with v2's ``include_fenced_brokers`` (KIP-1073) the fenced ones too,
    marked ``is_fenced``. A request for another endpoint type (v1+, KIP-919:
    controllers) is MISMATCHED_ENDPOINT_TYPE, as Kafka's broker answers."""
    if ctx.api_version >= 1 and int(request.endpoint_type) != _BROKER_ENDPOINT:
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE,
            "error_code": ErrorCode.mismatched_endpoint_type,
            "error_message": "The request was sent to an endpoint of type BROKER, but we wanted "
                             f"an endpoint of type {_endpoint_type_name(int(request.endpoint_type))}",
            "endpoint_type": _BROKER_ENDPOINT,
            "cluster_id": api.cluster_id,
            "brokers": [],
        })
    include_fenced = ctx.api_version >= 2 and bool(request.include_fenced_brokers)
    brokers = [{"broker_id": b.broker_id, "host": host, "port": port, "rack": b.rack,
                "is_fenced": fenced}
               for b, host, port, fenced in api.registered_brokers(ctx.listener_name)
               if include_fenced or not fenced]
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE,
        "error_code": ErrorCode.none,
        "endpoint_type": _BROKER_ENDPOINT,
        "cluster_id": api.cluster_id,
        "controller_id": api.metadata.broker_id,
        "brokers": brokers,
        "cluster_authorized_operations": _cluster_operations(api, ctx)
        if getattr(request, "include_cluster_authorized_operations", False)
        else UNREQUESTED_OPERATIONS,
    })
