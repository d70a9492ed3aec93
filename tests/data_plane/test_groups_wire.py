"""kio <-> core mapping: requests decoded from real wire bytes, responses re-read after encoding."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.serial import entity_reader, entity_writer

from data_plane.groups import wire
from data_plane.groups.model import (
    DescribedMember,
    FetchedOffset,
    GroupDescription,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeftMember,
    OffsetCommitResponse,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupResponse,
    TopicPartition,
)


def through_wire(entity: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    decoded, _ = entity_reader(type(entity))(buf.getvalue(), 0)
    return decoded


def test_join_group_request_from_kio() -> None:
    req = through_wire(
        JoinGroupRequest(
            group_id="g",  # type: ignore[arg-type]
            session_timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
            rebalance_timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
            member_id="",
            group_instance_id="i",
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),),
            reason=None,
        )
    )
    core = wire.join_group_from_kio(req, api_version=9, client_id="c", client_host="/h")
    assert (core.session_timeout_ms, core.rebalance_timeout_ms, core.group_instance_id) == (
        10_000,
        30_000,
        "i",
    )
    assert core.protocols[0].metadata == b"m" and core.require_known_member_id


@pytest.mark.parametrize("version", [0, 5, 7, 9])
def test_join_group_response_round_trip(version: int) -> None:
    core = JoinGroupResponse(
        E.none, 3, "consumer", "range", "a", "a", (JoinGroupMember("a", None, b"x"),)
    )
    decoded = through_wire(wire.join_group_to_kio(core, version))
    assert (decoded.error_code, decoded.generation_id, decoded.leader, decoded.member_id) == (
        E.none,
        3,
        "a",
        "a",
    )
    assert decoded.protocol_name == "range" and decoded.members[0].metadata == b"x"


@pytest.mark.parametrize("version", [0, 3, 5])
def test_sync_and_heartbeat_responses(version: int) -> None:
    decoded = through_wire(
        wire.sync_group_to_kio(SyncGroupResponse(E.none, "consumer", "range", b"A"), version)
    )
    assert decoded.assignment == b"A"


def test_leave_group_batch_and_legacy() -> None:
    req = through_wire(
        LeaveGroupRequest(
            group_id="g",
            members=(MemberIdentity(member_id="m", group_instance_id="i", reason=None),),
        )
    )  # type: ignore[arg-type]
    core = wire.leave_group_from_kio(req)
    assert core.members[0].member_id == "m" and core.members[0].group_instance_id == "i"
    resp = LeaveGroupResponse(E.none, (LeftMember("m", None, E.unknown_member_id),))
    assert through_wire(wire.leave_group_to_kio(resp, 0)).error_code == E.unknown_member_id
    assert (
        through_wire(wire.leave_group_to_kio(resp, 5)).members[0].error_code == E.unknown_member_id
    )


def test_offset_commit_round_trip() -> None:
    req = through_wire(
        OffsetCommitRequest(
            group_id="g",  # type: ignore[arg-type]
            generation_id_or_member_epoch=4,  # type: ignore[arg-type]
            member_id="m",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name="t",  # type: ignore[arg-type]
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=1,
                            committed_offset=9,
                            committed_leader_epoch=2,
                            committed_metadata="x",
                        ),
                    ),  # type: ignore[arg-type]
                ),
            ),
        )
    )
    core = wire.offset_commit_from_kio(req)
    assert (
        core.generation_id == 4
        and core.partitions[0].offset == 9
        and core.partitions[0].metadata == "x"
    )
    resp = OffsetCommitResponse(
        (PartitionResult("t", 1, E.none), PartitionResult("t", 2, E.offset_metadata_too_large))
    )
    decoded = through_wire(wire.offset_commit_to_kio(resp, 9))
    assert [p.error_code for p in decoded.topics[0].partitions] == [
        E.none,
        E.offset_metadata_too_large,
    ]


@pytest.mark.parametrize("version", [1, 7, 9])
def test_offset_fetch_response_round_trip(version: int) -> None:
    core = OffsetFetchResponse("g", E.none, (FetchedOffset("t", 0, 42, 3, "m", E.none),))
    decoded = through_wire(wire.offset_fetch_to_kio((core,), version))
    topics = decoded.groups[0].topics if version >= 8 else decoded.topics
    assert topics[0].partitions[0].committed_offset == 42


def test_offset_fetch_batched_request() -> None:
    req = through_wire(
        OffsetFetchRequest(
            groups=(
                OffsetFetchRequestGroup(group_id="a", member_id=None, member_epoch=-1, topics=None),  # type: ignore[arg-type]
                OffsetFetchRequestGroup(
                    group_id="b",
                    member_id=None,
                    member_epoch=-1,
                    topics=(OffsetFetchRequestTopics(name="t", partition_indexes=(0, 1)),),
                ),  # type: ignore[arg-type]
            ),
            require_stable=True,
        )
    )
    a, b = wire.offset_fetch_from_kio(req)
    assert a.partitions is None and b.partitions == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert a.require_stable


@pytest.mark.parametrize("version", [0, 5, 6])
def test_describe_groups_unknown_group_by_version(version: int) -> None:
    dead = GroupDescription("x", E.none, "Dead", "", "")
    live = GroupDescription(
        "g",
        E.none,
        "Stable",
        "consumer",
        "range",
        (DescribedMember("m", None, "c", "/h", b"s", b"a"),),
    )
    decoded = through_wire(wire.describe_groups_to_kio((dead, live), version))
    assert decoded.groups[0].error_code == (E.group_id_not_found if version >= 6 else E.none)
    if version >= 6:  # KIP-1043: with Kafka's message
        assert decoded.groups[0].error_message == "Group x not found."
    assert decoded.groups[1].members[0].member_assignment == b"a"


@pytest.mark.parametrize("version", [0, 5, 6])
def test_describe_groups_of_a_consumer_protocol_group_by_version(version: int) -> None:
    """A KIP-848 group is not described by DescribeGroups: from v6
    GROUP_ID_NOT_FOUND with the coordinator's message, before v6 Dead and
    no error (Kafka's GroupMetadataManager.describeGroups)."""
    shown = GroupDescription("k", E.group_id_not_found, "Dead", "", "",
                             error_message="Group k is not a classic group.")
    decoded = through_wire(wire.describe_groups_to_kio((shown,), version))
    group = decoded.groups[0]
    assert group.group_state == "Dead" and group.members == ()
    if version >= 6:
        assert group.error_code == E.group_id_not_found
        assert group.error_message == "Group k is not a classic group."
    else:
        assert group.error_code == E.none
