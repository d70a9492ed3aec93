"""kio <-> model mapping for the KIP-848 consumer protocol APIs:
ConsumerGroupHeartbeat (68, v0-1) and ConsumerGroupDescribe (69, v0-1)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from .consumer_model import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedTopicPartitions,
    TopicPartitions,
)

# The kio helpers of the classic APIs' mapping (one package, one way to build kio entities).
from .wire import _NO_THROTTLE, _make, _ms, _response_module

__all__ = (
    "consumer_group_describe_from_kio",
    "consumer_group_describe_to_kio",
    "consumer_group_heartbeat_from_kio",
    "consumer_group_heartbeat_to_kio",
)

#: ConsumerGroupDescribe v1 ``MemberType``: the member speaks the classic
#: protocol (JoinGroup, SyncGroup) or the consumer protocol (heartbeats).
_CLASSIC_MEMBER_TYPE, _CONSUMER_MEMBER_TYPE = 0, 1


def consumer_group_heartbeat_from_kio(request: Any, *, api_version: int, client_id: str,
                                      client_host: str) -> ConsumerGroupHeartbeatRequest:
    owned: TopicPartitions | None = None
    if request.topic_partitions is not None:
        owned = tuple(
            (tp.topic_id or uuid.UUID(int=0), tuple(int(p) for p in tp.partitions))
            for tp in request.topic_partitions
        )
    names = request.subscribed_topic_names
    return ConsumerGroupHeartbeatRequest(
        group_id=str(request.group_id),
        member_id=str(request.member_id),
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(str(n) for n in names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=client_id,
        client_host=client_host,
        api_version=api_version,
    )


def consumer_group_heartbeat_to_kio(response: ConsumerGroupHeartbeatResponse,
                                    api_version: int) -> Any:
    mod = _response_module("consumer_group_heartbeat", api_version)
    assignment = None
    if response.assignment is not None:
        assignment = mod.Assignment(topic_partitions=tuple(
            mod.TopicPartitions(topic_id=topic_id, partitions=parts)
            for topic_id, parts in response.assignment))
    return mod.ConsumerGroupHeartbeatResponse(
        throttle_time=_NO_THROTTLE,
        error_code=response.error,
        error_message=response.error_message,
        member_id=response.member_id,
        member_epoch=response.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=response.heartbeat_interval_ms),
        assignment=assignment,
    )


def consumer_group_describe_from_kio(request: Any) -> tuple[str, ...]:
    return tuple(str(g) for g in request.group_ids)


def consumer_group_describe_to_kio(descriptions: tuple[ConsumerGroupDescription, ...],
                                   api_version: int) -> Any:
    mod = _response_module("consumer_group_describe", api_version)

    def assignment(parts: DescribedTopicPartitions) -> Any:
        return mod.Assignment(topic_partitions=tuple(
            mod.TopicPartitions(topic_id=topic_id, topic_name=name, partitions=partitions)
            for topic_id, name, partitions in parts))

    groups = tuple(
        mod.DescribedGroup(
            error_code=d.error,
            error_message=d.error_message,
            group_id=d.group_id,
            group_state=d.state,
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name,
            members=tuple(
                _make(
                    mod.Member,
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=assignment(m.assignment),
                    target_assignment=assignment(m.target_assignment),
                    member_type=_CLASSIC_MEMBER_TYPE if m.classic else _CONSUMER_MEMBER_TYPE,
                )
                for m in d.members
            ),
            authorized_operations=d.authorized_operations,
        )
        for d in descriptions
    )
    return mod.ConsumerGroupDescribeResponse(throttle_time=_NO_THROTTLE, groups=groups)
