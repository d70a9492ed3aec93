"""Metadata (v0-12) and DescribeCluster (v0-1): the brokers, topics,
partitions, leaders (with leader epochs, KIP-320) and topic ids of the
published image. ``auto.create.topics.enable`` is false here (Kafka's default
is true; a request for an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION)."""

from __future__ import annotations

import uuid
from typing import Any

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, UNREQUESTED_OPERATIONS, BrokerApiContext
from metadata_quorum.image import TopicImage
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("handle_describe_cluster", "handle_metadata")

_ZERO_UUID = uuid.UUID(int=0)


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
                error = (ErrorCode.unknown_topic_id if not name and topic_id not in (None, _ZERO_UUID)
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
        "is_internal": topic.name.startswith("__"),
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
