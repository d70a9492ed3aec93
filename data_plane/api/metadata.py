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

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, UNREQUESTED_OPERATIONS, BrokerApiContext
from metadata_quorum.image import TopicImage
from metadata_quorum.topic_names import INTERNAL_TOPICS
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("handle_describe_cluster", "handle_metadata")

log = logging.getLogger(__name__)

_ZERO_UUID = uuid.UUID(int=0)
_CREATE_TOPICS_KEY: Final = 19
# How long a Metadata request waits for the controller to create a topic.
_AUTO_CREATE_TIMEOUT_MS: Final = 5_000


async def handle_metadata(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    image = api.image
    requested = request.topics
    topics: list[dict[str, object]] = []
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [_topic(api, t) for t in image.topics.values()]
    else:
        for item in requested:
            name = getattr(item, "name", item if isinstance(item, str) else None)
            topic_id = getattr(item, "topic_id", None)
            topic = None
            if name:
                topic = image.topic_by_name(str(name))
            elif topic_id is not None and topic_id != _ZERO_UUID:
                topic = image.topics.get(topic_id)
            if topic is None:
                if name and str(name) in INTERNAL_TOPICS:
                    # Created only as the coordinators need them (partitions,
                    # replication factor, compaction), never with the user
                    # defaults (Kafka's AutoTopicCreationManager does the same).
                    error = _create_internal(api, str(name))
                elif name and _may_auto_create(api, ctx, request):
                    error = await _auto_create(api, str(name))
                else:
                    error = (ErrorCode.unknown_topic_id
                             if not name and topic_id not in (None, _ZERO_UUID)
                             else ErrorCode.unknown_topic_or_partition)
                topics.append({"error_code": error, "name": name or "", "topic_id": topic_id or
                               _ZERO_UUID, "partitions": []})
            else:
                topics.append(_topic(api, topic))
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE,
        "brokers": [
            {"node_id": b.broker_id, "host": host, "port": port, "rack": b.rack}
            for b, host, port in api.live_brokers(ctx.listener_name)
        ],
        "cluster_id": api.cluster_id,
        "controller_id": api.metadata.broker_id,
        "topics": topics,
        "cluster_authorized_operations": UNREQUESTED_OPERATIONS,
    })


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


def _topic(api: BrokerApiContext, topic: TopicImage) -> dict[str, object]:
    image = api.image
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
            "offline_replicas": tuple(r for r in reg.replicas if r not in image.brokers
                                      or image.brokers[r].fenced),
        })
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": UNREQUESTED_OPERATIONS,
    }


async def handle_describe_cluster(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE,
        "error_code": ErrorCode.none,
        "endpoint_type": 1,
        "cluster_id": api.cluster_id,
        "controller_id": api.metadata.broker_id,
        "brokers": [
            {"broker_id": b.broker_id, "host": host, "port": port, "rack": b.rack}
            for b, host, port in api.live_brokers(ctx.listener_name)
        ],
        "cluster_authorized_operations": UNREQUESTED_OPERATIONS,
    })
