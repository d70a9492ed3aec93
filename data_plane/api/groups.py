"""Consumer-group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete, and KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Each handler maps the kio request to the shard's dataclasses
(`data_plane.groups.wire`), runs it on the broker's
`GroupCoordinatorRuntime` (which appends the records and holds the reply
until they are committed) and maps the answer back. A group this broker does
not coordinate is answered NOT_COORDINATOR, so the client looks the
coordinator up again with FindCoordinator.

With an authorizer (``authorizer.class.name``) each handler first checks the
request's principal as Kafka's ``KafkaApis`` does:

- JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat: READ
  on the group, else GROUP_AUTHORIZATION_FAILED. ConsumerGroupHeartbeat also
  needs DESCRIBE on every topic it subscribes to by name, else
  TOPIC_AUTHORIZATION_FAILED, and a regex subscription resolves only to
  topics the member may DESCRIBE (`AuthorizedTopicsView`; KAFKA-18813).
- OffsetCommit: READ on the group (else every partition is
  GROUP_AUTHORIZATION_FAILED), then READ on each topic (else its partitions
  are TOPIC_AUTHORIZATION_FAILED and only the others are committed).
  OffsetDelete: DELETE on the group, READ on each topic.
- OffsetFetch, for each group of the request (v8+ batches them): DESCRIBE
  on the group; named partitions of a topic the principal may not DESCRIBE
  come back TOPIC_AUTHORIZATION_FAILED, and the all-partitions form leaves
  such topics out.
- DescribeGroups, ConsumerGroupDescribe: DESCRIBE on each group (else
  GROUP_AUTHORIZATION_FAILED for it). ConsumerGroupDescribe also answers
  TOPIC_AUTHORIZATION_FAILED, without its members, for a group whose
  assignments hold a topic the principal may not DESCRIBE. Both fill in the
  authorized-operations bitfield when asked (every group operation without
  an authorizer, as Kafka).
- ListGroups: every group with DESCRIBE on the cluster, else only the
  groups the principal may DESCRIBE. DeleteGroups: DELETE on each group.

Without an authorizer a handler pays one attribute test
(``api.authorization``) for all of this.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from data_plane.api.authorization import SUPPORTED_OPERATIONS, RequestAcls
from data_plane.api.common import BrokerApiContext
from data_plane.broker.group_runtime import GroupCoordinatorRuntime, NotCoordinatorError
from data_plane.groups import consumer_wire, wire
from data_plane.groups.assignors import AssignmentTopic
from data_plane.groups.consumer_model import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatResponse,
    TopicsView,
)
from data_plane.groups.model import (
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedMember,
    FetchedOffset,
    GroupDescription,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeftMember,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    Response,
    SyncGroupResponse,
    TopicPartition,
)
from data_plane.groups.shard import GroupCoordinatorShard
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = (
    "GROUP_OPERATIONS",
    "AuthorizedTopicsView",
    "group_operations",
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
    "split_by_topic",
)

_NOT_COORDINATOR = ErrorCode.not_coordinator
_D = TypeVar("_D")
_P = TypeVar("_P", OffsetCommitPartition, TopicPartition)

_READ, _DESCRIBE, _DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
_GROUP, _TOPIC = ResourceType.GROUP, ResourceType.TOPIC
_GROUP_DENIED = ErrorCode.group_authorization_failed
_TOPIC_DENIED = ErrorCode.topic_authorization_failed
#: What a group's authorized-operations bitfield reports (Kafka 4 adds
#: DESCRIBE_CONFIGS and ALTER_CONFIGS for group configs, which this broker
#: does not have).
GROUP_OPERATIONS: Final = SUPPORTED_OPERATIONS[ResourceType.GROUP]


# ==== authorization helpers ===========================================================


def group_operations(acls: RequestAcls | None, group_id: str) -> int:
    """A group's authorized-operations bitfield (Kafka's
    ``AuthHelper.authorizedOperations``: bit ``code`` set for each allowed
    operation; every group operation without an authorizer)."""
    return sum(1 << op for op in GROUP_OPERATIONS
               if acls is None or acls.allows(op, _GROUP, group_id))


def split_by_topic(acls: RequestAcls, operation: AclOperation, partitions: Iterable[_P]
                   ) -> tuple[tuple[_P, ...], tuple[PartitionResult, ...]]:
    """(the partitions of topics the principal may do ``operation`` on, a
    TOPIC_AUTHORIZATION_FAILED result for each of the others)."""
    partitions = tuple(partitions)
    allowed = acls.allowed(operation, _TOPIC, (p.topic for p in partitions))
    return (tuple(p for p in partitions if p.topic in allowed),
            tuple(PartitionResult(p.topic, p.partition, _TOPIC_DENIED)
                  for p in partitions if p.topic not in allowed))


def split_by_existence(api: BrokerApiContext, partitions: Iterable[_P]
                       ) -> tuple[tuple[_P, ...], tuple[PartitionResult, ...]]:
    """(the partitions the metadata image holds, an UNKNOWN_TOPIC_OR_PARTITION
    result for each of the others). Kafka checks this in the broker before
    OffsetCommit, TxnOffsetCommit and OffsetDelete reach the coordinator, so
    no offset is stored for a partition that does not exist."""
    image = api.image
    known: list[_P] = []
    unknown: list[PartitionResult] = []
    for p in partitions:
        topic = image.topic_by_name(p.topic)
        if topic is not None and p.partition in topic.partitions:
            known.append(p)
        else:
            unknown.append(PartitionResult(p.topic, p.partition, ErrorCode.unknown_topic_or_partition))
    return tuple(known), tuple(unknown)


class AuthorizedTopicsView:
    """A `TopicsView` whose `names` (what a regex subscription is resolved
    against) are only the topics the principal may DESCRIBE; lookups by name
    or id are not filtered. Kafka resolves a group's regexes with the ACLs
    of the member whose heartbeat asked for it (KAFKA-18813)."""

    __slots__ = ("_acls", "_names", "_topics")

    def __init__(self, topics: TopicsView, acls: RequestAcls) -> None:
        self._topics = topics
        self._acls = acls
        self._names: list[str] | None = None

    def by_name(self, name: str) -> AssignmentTopic | None:
        return self._topics.by_name(name)

    def by_id(self, topic_id: uuid.UUID) -> AssignmentTopic | None:
        return self._topics.by_id(topic_id)

    def names(self) -> Iterable[str]:
        if self._names is None:  # on first use: most heartbeats resolve no regex
            self._names = [n for n in self._topics.names()
                           if self._acls.allows(_DESCRIBE, _TOPIC, n)]
        return self._names


def _runtime(api: BrokerApiContext) -> GroupCoordinatorRuntime:
    return api.coordinators.groups_or_start()


# ==== classic membership ==============================================================


async def handle_join_group(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    host = ctx.peer[0] if ctx.peer else ""
    core = wire.join_group_from_kio(request, api_version=ctx.api_version,
                                    client_id=ctx.client_id or "", client_host=f"/{host}")
    if api.authorization is not None and not api.authorize(ctx, _READ, _GROUP, core.group_id):
        return wire.join_group_to_kio(JoinGroupResponse(error=_GROUP_DENIED), ctx.api_version)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_join_group(h, core, now))
    except NotCoordinatorError as e:
        response = JoinGroupResponse(error=e.error, member_id=core.member_id)
    assert isinstance(response, JoinGroupResponse)
    return wire.join_group_to_kio(response, ctx.api_version)


async def handle_sync_group(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.sync_group_from_kio(request)
    if api.authorization is not None and not api.authorize(ctx, _READ, _GROUP, core.group_id):
        return wire.sync_group_to_kio(SyncGroupResponse(_GROUP_DENIED), ctx.api_version)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_sync_group(h, core, now))
    except NotCoordinatorError as e:
        response = SyncGroupResponse(error=e.error)
    assert isinstance(response, SyncGroupResponse)
    return wire.sync_group_to_kio(response, ctx.api_version)


async def handle_heartbeat(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.heartbeat_from_kio(request)
    if api.authorization is not None and not api.authorize(ctx, _READ, _GROUP, core.group_id):
        return wire.heartbeat_to_kio(HeartbeatResponse(_GROUP_DENIED), ctx.api_version)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_heartbeat(h, core, now))
    except NotCoordinatorError as e:
        response = HeartbeatResponse(e.error)
    assert isinstance(response, HeartbeatResponse)
    return wire.heartbeat_to_kio(response, ctx.api_version)


async def handle_leave_group(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.leave_group_from_kio(request)
    if api.authorization is not None and not api.authorize(ctx, _READ, _GROUP, core.group_id):
        # Kafka's error response: the top-level error, no member results.
        return wire.leave_group_to_kio(LeaveGroupResponse(_GROUP_DENIED), ctx.api_version)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_leave_group(h, core, now))
    except NotCoordinatorError as e:
        response = LeaveGroupResponse(error=e.error, members=tuple(
            LeftMember(m.member_id, m.group_instance_id, e.error) for m in core.members))
    assert isinstance(response, LeaveGroupResponse)
    return wire.leave_group_to_kio(response, ctx.api_version)


# ==== offsets =========================================================================


async def handle_offset_commit(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.offset_commit_from_kio(request)
    refused: tuple[PartitionResult, ...] = ()
    acls = RequestAcls.of(api, ctx)
    if acls is not None:
        if not acls.allows(_READ, _GROUP, core.group_id):
            return wire.offset_commit_to_kio(OffsetCommitResponse(tuple(
                PartitionResult(p.topic, p.partition, _GROUP_DENIED) for p in core.partitions)),
                ctx.api_version)
        allowed, refused = split_by_topic(acls, _READ, core.partitions)
        core = dataclasses.replace(core, partitions=allowed)
    known, unknown = split_by_existence(api, core.partitions)
    refused += unknown
    if not known:
        return wire.offset_commit_to_kio(OffsetCommitResponse(refused), ctx.api_version)
    core = dataclasses.replace(core, partitions=known)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_offset_commit(h, core, now))
    except NotCoordinatorError as e:
        response = OffsetCommitResponse(tuple(
            PartitionResult(p.topic, p.partition, e.error) for p in core.partitions))
    assert isinstance(response, OffsetCommitResponse)
    if refused:
        response = OffsetCommitResponse(refused + response.partitions)
    return wire.offset_commit_to_kio(response, ctx.api_version)


async def handle_offset_fetch(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    runtime = _runtime(api)
    acls = RequestAcls.of(api, ctx)
    answers: list[OffsetFetchResponse] = []
    for core in wire.offset_fetch_from_kio(request):
        if acls is not None:
            answers.append(_fetch_authorized(runtime, acls, core))
            continue
        try:
            shard = runtime.shard_for(core.group_id)
        except NotCoordinatorError as e:
            answers.append(OffsetFetchResponse(core.group_id, e.error, ()))
            continue
        answers.append(shard.handle_offset_fetch(core))
    return wire.offset_fetch_to_kio(tuple(answers), ctx.api_version)


def _fetch_authorized(runtime: GroupCoordinatorRuntime, acls: RequestAcls,
                      core: OffsetFetchRequest) -> OffsetFetchResponse:
    """One group's OffsetFetch under the ACLs (Kafka's ``fetchOffsetsForGroup``
    and ``fetchAllOffsetsForGroup``): clients see no offsets of topics they
    may not DESCRIBE."""
    if not acls.allows(_DESCRIBE, _GROUP, core.group_id):
        return OffsetFetchResponse(core.group_id, _GROUP_DENIED, ())
    refused: tuple[PartitionResult, ...] = ()
    if core.partitions is not None:
        allowed, refused = split_by_topic(acls, _DESCRIBE, core.partitions)
        core = dataclasses.replace(core, partitions=allowed)
    try:
        answer = runtime.shard_for(core.group_id).handle_offset_fetch(core)
    except NotCoordinatorError as e:
        return OffsetFetchResponse(core.group_id, e.error, ())
    if answer.error != ErrorCode.none:
        return answer
    if core.partitions is None:  # all partitions: leave the hidden topics out
        visible = acls.allowed(_DESCRIBE, _TOPIC, (p.topic for p in answer.partitions))
        return dataclasses.replace(answer, partitions=tuple(
            p for p in answer.partitions if p.topic in visible))
    return dataclasses.replace(answer, partitions=answer.partitions + tuple(
        FetchedOffset(r.topic, r.partition, -1, -1, "", r.error) for r in refused))


async def handle_offset_delete(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.offset_delete_from_kio(request)
    refused: tuple[PartitionResult, ...] = ()
    acls = RequestAcls.of(api, ctx)
    if acls is not None:
        if not acls.allows(_DELETE, _GROUP, core.group_id):
            return wire.offset_delete_to_kio(OffsetDeleteResponse(_GROUP_DENIED),
                                             ctx.api_version)
        # Kafka asks the coordinator even when no topic is left: the group's
        # own errors (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) still apply.
        allowed, refused = split_by_topic(acls, _READ, core.partitions)
        core = dataclasses.replace(core, partitions=allowed)
    known, unknown = split_by_existence(api, core.partitions)
    refused += unknown
    core = dataclasses.replace(core, partitions=known)
    try:
        response = await _runtime(api).write(
            core.group_id, lambda shard, h, now: shard.handle_offset_delete(h, core, now))
    except NotCoordinatorError as e:
        response = OffsetDeleteResponse(error=e.error)
    assert isinstance(response, OffsetDeleteResponse)
    if refused and response.error == ErrorCode.none:
        response = OffsetDeleteResponse(response.error, refused + response.partitions)
    return wire.offset_delete_to_kio(response, ctx.api_version)


# ==== administration ==================================================================


async def handle_list_groups(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    core = wire.list_groups_from_kio(request)
    groups: list[ListedGroup] = []
    for shard in _runtime(api).shards():
        groups.extend(shard.handle_list_groups(core).groups)
    acls = RequestAcls.of(api, ctx)
    # DESCRIBE on the cluster lists every group (Kafka keeps it for
    # compatibility); otherwise only the groups the principal may DESCRIBE.
    if acls is not None and not acls.allows(_DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        visible = acls.allowed(_DESCRIBE, _GROUP, (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id in visible]
    return wire.list_groups_to_kio(ListGroupsResponse(ErrorCode.none, tuple(groups)),
                                   ctx.api_version)


async def handle_describe_groups(api: BrokerApiContext, ctx: RequestContext,
                                 request: Any) -> Any:
    group_ids = wire.describe_groups_from_kio(request)
    acls = RequestAcls.of(api, ctx)
    refused: tuple[GroupDescription, ...] = ()
    if acls is not None:
        allowed = acls.allowed(_DESCRIBE, _GROUP, group_ids)
        refused = tuple(_undescribed(g, _GROUP_DENIED) for g in group_ids if g not in allowed)
        group_ids = tuple(g for g in group_ids if g in allowed)
    out = _per_group(_runtime(api), group_ids,
                     lambda shard, group_id: shard.handle_describe_groups((group_id,)),
                     _undescribed)
    if ctx.api_version >= 3 and getattr(request, "include_authorized_operations", False):
        out = tuple(d if d.error != ErrorCode.none else dataclasses.replace(
            d, authorized_operations=group_operations(acls, d.group_id)) for d in out)
    return wire.describe_groups_to_kio(refused + out, ctx.api_version)


async def handle_delete_groups(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    runtime = _runtime(api)
    group_ids = wire.delete_groups_from_kio(request)
    refused: tuple[DeleteGroupsResult, ...] = ()
    acls = RequestAcls.of(api, ctx)
    if acls is not None:
        allowed = acls.allowed(_DELETE, _GROUP, group_ids)
        refused = tuple(DeleteGroupsResult(g, _GROUP_DENIED) for g in group_ids
                        if g not in allowed)
        group_ids = tuple(g for g in group_ids if g in allowed)

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
    merged = tuple(r for rs in results for r in rs) + refused
    return wire.delete_groups_to_kio(DeleteGroupsResponse(merged), ctx.api_version)


# ==== KIP-848 =========================================================================


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
    topics: TopicsView = runtime.topics_view()
    acls = RequestAcls.of(api, ctx)
    if acls is not None:
        refusal = _heartbeat_refusal(acls, core.group_id, core.subscribed_topic_names)
        if refusal is not None:
            return consumer_wire.consumer_group_heartbeat_to_kio(refusal, ctx.api_version)
        topics = AuthorizedTopicsView(topics, acls)
    try:
        answer = await runtime.write(
            core.group_id,
            lambda shard, h, now: shard.handle_consumer_group_heartbeat(h, core, topics, now))
    except NotCoordinatorError as e:
        answer = ConsumerGroupHeartbeatResponse(e.error)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    return consumer_wire.consumer_group_heartbeat_to_kio(answer, ctx.api_version)


def _heartbeat_refusal(acls: RequestAcls, group_id: str, names: Iterable[str] | None
                       ) -> ConsumerGroupHeartbeatResponse | None:
    if not acls.allows(_READ, _GROUP, group_id):
        return ConsumerGroupHeartbeatResponse(
            _GROUP_DENIED, f"Not authorized to READ group {group_id}.")
    if names:
        wanted = set(names)
        if len(acls.allowed(_DESCRIBE, _TOPIC, wanted)) < len(wanted):
            # As Kafka: the code alone (the member stays; it may be granted later).
            return ConsumerGroupHeartbeatResponse(_TOPIC_DENIED)
    return None


async def handle_consumer_group_describe(api: BrokerApiContext, ctx: RequestContext,
                                         request: Any) -> Any:
    runtime = _runtime(api)
    topics = runtime.topics_view()
    group_ids = consumer_wire.consumer_group_describe_from_kio(request)
    acls = RequestAcls.of(api, ctx)
    refused: tuple[ConsumerGroupDescription, ...] = ()
    if acls is not None:
        allowed = acls.allowed(_DESCRIBE, _GROUP, group_ids)
        refused = tuple(ConsumerGroupDescription(g, _GROUP_DENIED) for g in group_ids
                        if g not in allowed)
        group_ids = tuple(g for g in group_ids if g in allowed)
    out = _per_group(
        runtime, group_ids,
        lambda shard, group_id: shard.handle_consumer_group_describe((group_id,), topics),
        ConsumerGroupDescription)
    if getattr(request, "include_authorized_operations", False):
        out = tuple(d if d.error != ErrorCode.none else dataclasses.replace(
            d, authorized_operations=group_operations(acls, d.group_id)) for d in out)
    described = refused + out
    if acls is not None:
        described = _hide_unauthorized_topics(acls, described)
    return consumer_wire.consumer_group_describe_to_kio(described, ctx.api_version)


def _hide_unauthorized_topics(acls: RequestAcls, groups: tuple[ConsumerGroupDescription, ...]
                              ) -> tuple[ConsumerGroupDescription, ...]:
    """Kafka (KAFKA-18813): a group whose members' current or target
    assignment holds a topic the principal may not DESCRIBE is answered
    TOPIC_AUTHORIZATION_FAILED, without its description."""
    def names(d: ConsumerGroupDescription) -> set[str]:
        return {name for m in d.members for assignment in (m.assignment, m.target_assignment)
                for _, name, _ in assignment if name}  # "": a topic deleted since

    visible = acls.allowed(_DESCRIBE, _TOPIC, (n for d in groups for n in names(d)))
    return tuple(
        d if names(d) <= visible else ConsumerGroupDescription(
            d.group_id, _TOPIC_DENIED,
            "The group's assignments hold topics the client may not DESCRIBE.")
        for d in groups)


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
