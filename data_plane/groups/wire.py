"""Mapping between kio's Kafka-protocol entities and the coordinator's dataclasses.

The broker decodes a request with kio, calls ``*_from_kio`` to get the core
request, and turns the core response into the kio response of the version
it must answer with (``*_to_kio``). One function serves every version: kio
generates a module per version (``kio.schema.<api>.v<N>.response``) whose
classes share field names, so we look the class up by version and pass only
the fields that version has (older versions simply lack newer fields).
"""

from __future__ import annotations

import datetime
import importlib
from dataclasses import fields
from typing import Any

from .model import (
    NO_GENERATION,
    DeleteGroupsResponse,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinProtocol,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicPartition,
    TxnOffsetCommitRequest,
)

_NO_THROTTLE = datetime.timedelta(0)


def _response_module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.response")


def _make(cls: Any, **values: Any) -> Any:
    """Build a kio entity from the values its version has fields for."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------


def join_group_from_kio(
    request: Any, *, api_version: int, client_id: str, client_host: str
) -> JoinGroupRequest:
    """JoinGroup v0+. v0 has no rebalance timeout: Kafka uses the session timeout."""
    session_ms = _ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    return JoinGroupRequest(
        group_id=str(request.group_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=request.protocol_type,
        protocols=tuple(JoinProtocol(p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance is None else _ms(rebalance),
        client_id=client_id,
        client_host=client_host,
        require_known_member_id=api_version >= 4,
        reason=getattr(request, "reason", None),
    )


def join_group_to_kio(response: JoinGroupResponse, api_version: int) -> Any:
    mod = _response_module("join_group", api_version)
    members = tuple(
        _make(
            mod.JoinGroupResponseMember,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in response.members
    )
    return _make(
        mod.JoinGroupResponse,
        throttle_time=_NO_THROTTLE,
        error_code=response.error,
        generation_id=response.generation_id,
        protocol_type=response.protocol_type,
        # Before v7 the field is non-nullable.
        protocol_name=response.protocol_name
        if api_version >= 7
        else (response.protocol_name or ""),
        leader=response.leader,
        skip_assignment=response.skip_assignment,
        member_id=response.member_id,
        members=members,
    )


def sync_group_from_kio(request: Any) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=str(request.group_id),
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
    )


def sync_group_to_kio(response: SyncGroupResponse, api_version: int) -> Any:
    mod = _response_module("sync_group", api_version)
    return _make(
        mod.SyncGroupResponse,
        throttle_time=_NO_THROTTLE,
        error_code=response.error,
        protocol_type=response.protocol_type,
        protocol_name=response.protocol_name,
        assignment=response.assignment,
    )


def heartbeat_from_kio(request: Any) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=str(request.group_id),
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )


def heartbeat_to_kio(response: HeartbeatResponse, api_version: int) -> Any:
    mod = _response_module("heartbeat", api_version)
    return _make(mod.HeartbeatResponse, throttle_time=_NO_THROTTLE, error_code=response.error)


def leave_group_from_kio(request: Any) -> LeaveGroupRequest:
    """v0-v2 name one member by ``member_id``; v3+ carry a batch (KIP-345)."""
    if hasattr(request, "members"):
        members = tuple(
            LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in request.members
        )
    else:
        members = (LeavingMember(request.member_id),)
    return LeaveGroupRequest(group_id=str(request.group_id), members=members)


def leave_group_to_kio(response: LeaveGroupResponse, api_version: int) -> Any:
    """Before v3 there are no per-member errors: the single member's error is the top one."""
    mod = _response_module("leave_group", api_version)
    if api_version < 3:
        error = response.error
        if error == error.none and response.members:
            error = response.members[0].error
        return _make(mod.LeaveGroupResponse, throttle_time=_NO_THROTTLE, error_code=error)
    members = tuple(
        _make(
            mod.MemberResponse,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            error_code=m.error,
        )
        for m in response.members
    )
    return _make(
        mod.LeaveGroupResponse,
        throttle_time=_NO_THROTTLE,
        error_code=response.error,
        members=members,
    )


# --- offsets ------------------------------------------------------------------------


def _commit_partitions(topics: Any) -> tuple[OffsetCommitPartition, ...]:
    return tuple(
        OffsetCommitPartition(
            topic=str(t.name),
            partition=int(p.partition_index),
            offset=int(p.committed_offset),
            leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
            metadata=p.committed_metadata,
        )
        for t in topics
        for p in t.partitions
    )


def offset_commit_from_kio(request: Any) -> OffsetCommitRequest:
    """OffsetCommit v2+ (v0/v1 predate the broker's minimum). v9 renames the generation."""
    generation: Any = getattr(request, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = getattr(request, "generation_id", NO_GENERATION)
    return OffsetCommitRequest(
        group_id=str(request.group_id),
        generation_id=int(generation),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        partitions=_commit_partitions(request.topics),
    )


def txn_offset_commit_from_kio(request: Any) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(
        transactional_id=str(request.transactional_id),
        group_id=str(request.group_id),
        producer_id=int(request.producer_id),
        producer_epoch=int(request.producer_epoch),
        partitions=_commit_partitions(request.topics),
        generation_id=int(getattr(request, "generation_id", NO_GENERATION)),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
    )


def _by_topic(results: tuple[PartitionResult, ...]) -> dict[str, list[PartitionResult]]:
    grouped: dict[str, list[PartitionResult]] = {}
    for r in results:
        grouped.setdefault(r.topic, []).append(r)
    return grouped


def _commit_response(api: str, prefix: str, response: OffsetCommitResponse, version: int) -> Any:
    mod = _response_module(api, version)
    partition_cls = getattr(mod, f"{prefix}ResponsePartition")
    topic_cls = getattr(mod, f"{prefix}ResponseTopic")
    topics = tuple(
        _make(
            topic_cls,
            name=topic,
            partitions=tuple(
                _make(partition_cls, partition_index=r.partition, error_code=r.error) for r in rs
            ),
        )
        for topic, rs in _by_topic(response.partitions).items()
    )
    return _make(getattr(mod, f"{prefix}Response"), throttle_time=_NO_THROTTLE, topics=topics)


def offset_commit_to_kio(response: OffsetCommitResponse, api_version: int) -> Any:
    return _commit_response("offset_commit", "OffsetCommit", response, api_version)


def txn_offset_commit_to_kio(response: OffsetCommitResponse, api_version: int) -> Any:
    return _commit_response("txn_offset_commit", "TxnOffsetCommit", response, api_version)


def _fetch_partitions(topics: Any) -> tuple[TopicPartition, ...] | None:
    if topics is None:
        return None
    return tuple(TopicPartition(str(t.name), int(p)) for t in topics for p in t.partition_indexes)


def offset_fetch_from_kio(request: Any) -> tuple[OffsetFetchRequest, ...]:
    """OffsetFetch v1+: one group before v8, a batch of groups from v8 (KIP-709)."""
    stable = bool(getattr(request, "require_stable", False))
    if hasattr(request, "groups"):
        return tuple(
            OffsetFetchRequest(str(g.group_id), _fetch_partitions(g.topics), stable,
                               member_id=getattr(g, "member_id", None),
                               member_epoch=int(getattr(g, "member_epoch", -1)))
            for g in request.groups
        )
    return (OffsetFetchRequest(str(request.group_id), _fetch_partitions(request.topics), stable),)


def offset_fetch_to_kio(responses: tuple[OffsetFetchResponse, ...], api_version: int) -> Any:
    """Before v8 exactly one group is answered, with topics at the top level."""
    mod = _response_module("offset_fetch", api_version)
    batched = api_version >= 8
    part_cls = mod.OffsetFetchResponsePartitions if batched else mod.OffsetFetchResponsePartition
    topic_cls = mod.OffsetFetchResponseTopics if batched else mod.OffsetFetchResponseTopic

    def topics(resp: OffsetFetchResponse) -> tuple[Any, ...]:
        grouped: dict[str, list[Any]] = {}
        for p in resp.partitions:
            grouped.setdefault(p.topic, []).append(
                _make(
                    part_cls,
                    partition_index=p.partition,
                    committed_offset=p.offset,
                    committed_leader_epoch=p.leader_epoch,
                    metadata=p.metadata,
                    error_code=p.error,
                )
            )
        return tuple(_make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in grouped.items())

    if batched:
        groups = tuple(
            _make(
                mod.OffsetFetchResponseGroup,
                group_id=r.group_id,
                topics=topics(r),
                error_code=r.error,
            )
            for r in responses
        )
        return _make(mod.OffsetFetchResponse, throttle_time=_NO_THROTTLE, groups=groups)
    if len(responses) != 1:
        raise ValueError(f"OffsetFetch v{api_version} answers exactly one group")
    (only,) = responses
    return _make(
        mod.OffsetFetchResponse,
        throttle_time=_NO_THROTTLE,
        topics=topics(only),
        error_code=only.error,
    )


def offset_delete_from_kio(request: Any) -> OffsetDeleteRequest:
    return OffsetDeleteRequest(
        group_id=str(request.group_id),
        partitions=tuple(
            TopicPartition(str(t.name), int(p.partition_index))
            for t in request.topics
            for p in t.partitions
        ),
    )


def offset_delete_to_kio(response: OffsetDeleteResponse, api_version: int) -> Any:
    mod = _response_module("offset_delete", api_version)
    topics = tuple(
        _make(
            mod.OffsetDeleteResponseTopic,
            name=topic,
            partitions=tuple(
                _make(
                    mod.OffsetDeleteResponsePartition,
                    partition_index=r.partition,
                    error_code=r.error,
                )
                for r in rs
            ),
        )
        for topic, rs in _by_topic(response.partitions).items()
    )
    return _make(
        mod.OffsetDeleteResponse,
        error_code=response.error,
        throttle_time=_NO_THROTTLE,
        topics=topics,
    )


# --- administration -----------------------------------------------------------------


def list_groups_from_kio(request: Any) -> ListGroupsRequest:
    return ListGroupsRequest(
        states_filter=frozenset(getattr(request, "states_filter", ())),
        types_filter=frozenset(getattr(request, "types_filter", ())),
    )


def list_groups_to_kio(response: ListGroupsResponse, api_version: int) -> Any:
    mod = _response_module("list_groups", api_version)
    groups = tuple(
        _make(
            mod.ListedGroup,
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.state,
            group_type=g.group_type,
        )
        for g in response.groups
    )
    return _make(
        mod.ListGroupsResponse, throttle_time=_NO_THROTTLE, error_code=response.error, groups=groups
    )


def describe_groups_from_kio(request: Any) -> tuple[str, ...]:
    return tuple(str(g) for g in request.groups)


def describe_groups_to_kio(descriptions: tuple[GroupDescription, ...], api_version: int) -> Any:
    """From v6 an unknown group is GROUP_ID_NOT_FOUND instead of a Dead, empty
    group; so is a consumer (KIP-848) group, which DescribeGroups does not
    describe. Before v6 both are Dead, empty and without an error, as in Kafka."""
    mod = _response_module("describe_groups", api_version)
    groups = []
    for d in descriptions:
        error, operations, message = d.error, d.authorized_operations, d.error_message
        if api_version >= 6 and d.state == "Dead" and not d.members:
            error, operations = error.group_id_not_found, -(2**31)  # not described
            message = message or f"Group {d.group_id} not found."  # Kafka's words (KIP-1043)
        elif d.state == "Dead" and not d.members and error == error.group_id_not_found:
            error, message = error.none, None
        members = tuple(
            _make(
                mod.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in d.members
        )
        groups.append(
            _make(
                mod.DescribedGroup,
                error_code=error,
                error_message=message,
                group_id=d.group_id,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol,
                members=members,
                authorized_operations=operations,
            )
        )
    return _make(mod.DescribeGroupsResponse, throttle_time=_NO_THROTTLE, groups=tuple(groups))


def delete_groups_from_kio(request: Any) -> tuple[str, ...]:
    return tuple(str(g) for g in request.groups_names)


def delete_groups_to_kio(response: DeleteGroupsResponse, api_version: int) -> Any:
    mod = _response_module("delete_groups", api_version)
    results = tuple(
        _make(mod.DeletableGroupResult, group_id=r.group_id, error_code=r.error)
        for r in response.results
    )
    return _make(mod.DeleteGroupsResponse, throttle_time=_NO_THROTTLE, results=results)
