"""kio <-> model mapping of the KIP-848 APIs: requests decoded from real wire
bytes, responses encoded and read back, at every served version."""

from __future__ import annotations

import datetime
import importlib
import io
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.serial import entity_reader, entity_writer

from data_plane.groups import consumer_wire, wire
from data_plane.groups.consumer_model import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatResponse,
    ConsumerMemberDescription,
)

T = uuid.UUID(int=5)


def through_wire(entity: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    decoded, _ = entity_reader(type(entity))(buf.getvalue(), 0)
    return decoded


def request_module(version: int) -> Any:
    return importlib.import_module(f"kio.schema.consumer_group_heartbeat.v{version}.request")


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_request_from_kio(version: int) -> None:
    mod = request_module(version)
    fields: dict[str, Any] = dict(
        group_id="g", member_id="m", member_epoch=0, instance_id="i", rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000),
        subscribed_topic_names=("a", "b"), server_assignor="range",
        topic_partitions=(mod.TopicPartitions(topic_id=T, partitions=(1, 2)),))
    if version >= 1:
        fields["subscribed_topic_regex"] = "a.*"
    req = through_wire(mod.ConsumerGroupHeartbeatRequest(**fields))
    core = consumer_wire.consumer_group_heartbeat_from_kio(
        req, api_version=version, client_id="c", client_host="/h")
    assert (core.group_id, core.member_id, core.member_epoch, core.instance_id) == ("g", "m", 0, "i")
    assert core.rebalance_timeout_ms == 30_000 and core.server_assignor == "range"
    assert core.subscribed_topic_names == ("a", "b")
    assert core.subscribed_topic_regex == ("a.*" if version >= 1 else None)
    assert core.owned == ((T, (1, 2)),)
    assert (core.client_id, core.client_host, core.api_version) == ("c", "/h", version)


@pytest.mark.parametrize("version", [0, 1])
def test_a_bare_heartbeat_leaves_everything_unchanged(version: int) -> None:
    mod = request_module(version)
    fields: dict[str, Any] = dict(
        group_id="g", member_id="m", member_epoch=4, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=-1), subscribed_topic_names=None,
        server_assignor=None, topic_partitions=None)
    if version >= 1:
        fields["subscribed_topic_regex"] = None
    core = consumer_wire.consumer_group_heartbeat_from_kio(
        through_wire(mod.ConsumerGroupHeartbeatRequest(**fields)), api_version=version,
        client_id="", client_host="")
    assert core.rebalance_timeout_ms == -1
    assert core.subscribed_topic_names is None and core.owned is None


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("assignment", [None, (), ((T, (0, 3)),)])
def test_heartbeat_response_round_trip(version: int, assignment: Any) -> None:
    core = ConsumerGroupHeartbeatResponse(E.none, None, "m", 7, 5_000, assignment)
    decoded = through_wire(consumer_wire.consumer_group_heartbeat_to_kio(core, version))
    assert (decoded.error_code, decoded.member_id, decoded.member_epoch) == (E.none, "m", 7)
    assert decoded.heartbeat_interval == datetime.timedelta(milliseconds=5_000)
    if assignment is None:
        assert decoded.assignment is None
    else:
        assert tuple((tp.topic_id, tuple(tp.partitions))
                     for tp in decoded.assignment.topic_partitions) == assignment


def test_heartbeat_error_round_trip() -> None:
    core = ConsumerGroupHeartbeatResponse(E.fenced_member_epoch, "fenced", "m")
    decoded = through_wire(consumer_wire.consumer_group_heartbeat_to_kio(core, 1))
    assert (decoded.error_code, decoded.error_message) == (E.fenced_member_epoch, "fenced")


@pytest.mark.parametrize("version", [0, 1])
def test_describe_round_trip(version: int) -> None:
    member = ConsumerMemberDescription(
        member_id="m", instance_id=None, rack_id="r", member_epoch=3, client_id="c",
        client_host="/h", subscribed_topic_names=("t",), subscribed_topic_regex=None,
        assignment=((T, "t", (0,)),), target_assignment=((T, "t", (0, 1)),))
    classic = ConsumerMemberDescription(
        member_id="k", instance_id=None, rack_id=None, member_epoch=4, client_id="c",
        client_host="/h", subscribed_topic_names=("t",), subscribed_topic_regex=None,
        assignment=(), target_assignment=(), classic=True)
    described = (
        ConsumerGroupDescription("g", E.none, None, "Reconciling", 4, 4, "uniform",
                                 (member, classic)),
        ConsumerGroupDescription("x", E.group_id_not_found, "Group x not found."),
    )
    req_mod = importlib.import_module(f"kio.schema.consumer_group_describe.v{version}.request")
    request = through_wire(req_mod.ConsumerGroupDescribeRequest(
        group_ids=("g", "x"), include_authorized_operations=False))
    assert consumer_wire.consumer_group_describe_from_kio(request) == ("g", "x")
    decoded = through_wire(consumer_wire.consumer_group_describe_to_kio(described, version))
    g, x = decoded.groups
    assert (g.group_state, g.group_epoch, g.assignor_name) == ("Reconciling", 4, "uniform")
    m, k = g.members
    assert (m.member_id, m.rack_id, m.member_epoch) == ("m", "r", 3)
    if version >= 1:  # MemberType: 1 speaks the consumer protocol, 0 the classic one
        assert (m.member_type, k.member_type) == (1, 0)
    assert [(tp.topic_id, tp.topic_name, tuple(tp.partitions))
            for tp in m.target_assignment.topic_partitions] == [(T, "t", (0, 1))]
    assert (x.error_code, x.error_message) == (E.group_id_not_found, "Group x not found.")


def test_offset_fetch_v9_carries_the_member() -> None:
    req = through_wire(OffsetFetchRequest(
        groups=(OffsetFetchRequestGroup(group_id="g", member_id="m", member_epoch=4,  # type: ignore[arg-type]
                                        topics=None),),
        require_stable=False))
    (core,) = wire.offset_fetch_from_kio(req)
    assert (core.member_id, core.member_epoch) == ("m", 4)
