"""Classic consumer-group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete.

Each handler maps the kio request to the shard's dataclasses
(`data_plane.groups.wire`), runs it on the broker's
`GroupCoordinatorRuntime` (which appends the records and holds the reply
until they are committed) and maps the answer back. A group this broker does
not coordinate is answered NOT_COORDINATOR, so the client looks the
coordinator up again with FindCoordinator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from data_plane.api.common import BrokerApiContext
from data_plane.broker.group_runtime import GroupCoordinatorRuntime, NotCoordinatorError
from data_plane.groups import consumer_wire, wire
from data_plane.groups.consumer_model import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatResponse,
)
from data_plane.groups.model import (
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedMember,
    GroupDescription,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeftMember,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    PartitionResult,
    Response,
    SyncGroupResponse,
)
from data_plane.groups.shard import GroupCoordinatorShard
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = (
    "handle_consumer_group_describe",
    "handle_consumer_group_heartbeat",
    "handle_delete_groups",
    "handle_describe_groups",
    "handle_heartbeat",
    "handle_join_group",
    "handle_leave_group",
    "handle_list_groups",
    "handle_offset_commit",
    "handle_offset_delete",
    "handle_offset_fetch",
    "handle_sync_group",
)

_NOT_COORDINATOR = ErrorCode.not_coordinator
_D = TypeVar("_D")


def _runtime(api: BrokerApiContext) -> GroupCoordinatorRuntime:
    return api.coordinators.groups_or_start()


async def handle_join_group(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    host = ctx.peer[0] if ctx.peer else ""
    core = wire.join_group_from_kio(request, api_version=ctx.api_version,
                                    client_id=ctx.client_id or "", client_host=f"/{host}")
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_join_group(h, core, now))
    except NotCoordinatorError as e:
        response = JoinGroupResponse(error=e.error, member_id=core.member_id)
    assert isinstance(response, JoinGroupResponse)
    return wire.join_group_to_kio(response, ctx.api_version)


async def handle_sync_group(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.sync_group_from_kio(request)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_sync_group(h, core, now))
    except NotCoordinatorError as e:
        response = SyncGroupResponse(error=e.error)
    assert isinstance(response, SyncGroupResponse)
    return wire.sync_group_to_kio(response, ctx.api_version)


async def handle_heartbeat(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.heartbeat_from_kio(request)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_heartbeat(h, core, now))
    except NotCoordinatorError as e:
        response = HeartbeatResponse(e.error)
    assert isinstance(response, HeartbeatResponse)
    return wire.heartbeat_to_kio(response, ctx.api_version)


async def handle_leave_group(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.leave_group_from_kio(request)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_leave_group(h, core, now))
    except NotCoordinatorError as e:
        response = LeaveGroupResponse(error=e.error, members=tuple(
            LeftMember(m.member_id, m.group_instance_id, e.error) for m in core.members))
    assert isinstance(response, LeaveGroupResponse)
    return wire.leave_group_to_kio(response, ctx.api_version)


async def handle_offset_commit(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.offset_commit_from_kio(request)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_offset_commit(h, core, now))
    except NotCoordinatorError as e:
        response = OffsetCommitResponse(tuple(
            PartitionResult(p.topic, p.partition, e.error) for p in core.partitions))
    assert isinstance(response, OffsetCommitResponse)
    return wire.offset_commit_to_kio(response, ctx.api_version)


async def handle_offset_fetch(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    runtime = _runtime(api)
    answers: list[OffsetFetchResponse] = []
    for core in wire.offset_fetch_from_kio(request):
        try:
            shard = runtime.shard_for(core.group_id)
        except NotCoordinatorError as e:
            answers.append(OffsetFetchResponse(core.group_id, e.error, ()))
            continue
        answers.append(shard.handle_offset_fetch(core))
    return wire.offset_fetch_to_kio(tuple(answers), ctx.api_version)


async def handle_offset_delete(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.offset_delete_from_kio(request)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_offset_delete(h, core, now))
    except NotCoordinatorError as e:
        response = OffsetDeleteResponse(error=e.error)
    assert isinstance(response, OffsetDeleteResponse)
    return wire.offset_delete_to_kio(response, ctx.api_version)


async def handle_list_groups(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.list_groups_from_kio(request)
    groups: list[ListedGroup] = []
    for shard in _runtime(api).shards():
        groups.extend(shard.handle_list_groups(core).groups)
    return wire.list_groups_to_kio(ListGroupsResponse(ErrorCode.none, tuple(groups)),
                                   ctx.api_version)


async def handle_describe_groups(api: BrokerApiContext, ctx: RequestContext,
                                 request: Any) -> Any:
    out = _per_group(_runtime(api), wire.describe_groups_from_kio(request),
                     lambda shard, group_id: shard.handle_describe_groups((group_id,)),
                     _undescribed)
    return wire.describe_groups_to_kio(out, ctx.api_version)


async def handle_delete_groups(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    runtime = _runtime(api)
    group_ids = wire.delete_groups_from_kio(request)

    async def delete_one(group_id: str) -> tuple[DeleteGroupsResult, ...]:
        def command(shard: GroupCoordinatorShard, handle: object, now: int) -> Any:
            return shard.handle_delete_groups(handle, (group_id,), now)
        try:
            response: Response = await runtime.write(group_id, command)
        except NotCoordinatorError as e:
            return (DeleteGroupsResult(group_id, e.error),)
        assert isinstance(response, DeleteGroupsResponse)
        return response.results

    results = await asyncio.gather(*(delete_one(g) for g in group_ids))
    merged = tuple(r for rs in results for r in rs)
    return wire.delete_groups_to_kio(DeleteGroupsResponse(merged), ctx.api_version)


async def handle_consumer_group_heartbeat(api: BrokerApiContext, ctx: RequestContext,
                                          request: Any) -> Any:
    """ConsumerGroupHeartbeat (KIP-848): join, heartbeat and leave in one API."""
    host = ctx.peer[0] if ctx.peer else ""
    core = consumer_wire.consumer_group_heartbeat_from_kio(
        request, api_version=ctx.api_version, client_id=ctx.client_id or "",
        client_host=f"/{host}")
    if not api.coordinators.consumer_protocol_enabled:
        response = ConsumerGroupHeartbeatResponse(
            ErrorCode.unsupported_version,
            "The consumer group protocol is disabled (group.coordinator.rebalance.protocols).")
        return consumer_wire.consumer_group_heartbeat_to_kio(response, ctx.api_version)
    runtime = _runtime(api)
    try:
        topics = runtime.topics_view()
        answer = await runtime.write(
            core.group_id,
            lambda shard, h, now: shard.handle_consumer_group_heartbeat(h, core, topics, now))
    except NotCoordinatorError as e:
        answer = ConsumerGroupHeartbeatResponse(e.error)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    return consumer_wire.consumer_group_heartbeat_to_kio(answer, ctx.api_version)


async def handle_consumer_group_describe(api: BrokerApiContext, ctx: RequestContext,
                                         request: Any) -> Any:
    runtime = _runtime(api)
    topics = runtime.topics_view()
    out = _per_group(
        runtime, consumer_wire.consumer_group_describe_from_kio(request),
        lambda shard, group_id: shard.handle_consumer_group_describe((group_id,), topics),
        ConsumerGroupDescription)
    return consumer_wire.consumer_group_describe_to_kio(out, ctx.api_version)


def _per_group(runtime: GroupCoordinatorRuntime, group_ids: Iterable[str],
               describe: Callable[[GroupCoordinatorShard, str], Iterable[_D]],
               elsewhere: Callable[[str, ErrorCode], _D]) -> tuple[_D, ...]:
    """Each group's description from the shard coordinating it here, or
    ``elsewhere(group_id, NOT_COORDINATOR)`` (the client looks it up again)."""
    out: list[_D] = []
    for group_id in group_ids:
        try:
            shard = runtime.shard_for(group_id)
        except NotCoordinatorError as e:
            out.append(elsewhere(group_id, e.error))
            continue
        out.extend(describe(shard, group_id))
    return tuple(out)


def _undescribed(group_id: str, error: ErrorCode) -> GroupDescription:
    members: tuple[DescribedMember, ...] = ()
    return GroupDescription(group_id=group_id, error=error, state="", protocol_type="",
                            protocol="", members=members)
