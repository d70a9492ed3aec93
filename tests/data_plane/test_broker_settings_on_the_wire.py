"""Broker settings with Kafka's names, parsed and checked with the rest of
server.properties and obeyed on the wire (a single in-process broker): the
group coordinator's, and delete.topic.enable's answer to old clients."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.join_group.v3 import request as jg3
from kio.schema.offset_commit.v2 import request as oc2
from single_broker import SingleBroker

from data_plane.config import KNOWN_SETTINGS, ConfigError, parse_config
from data_plane.groups.model import GroupConfig, GroupConfigError, group_config

BROKER = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
}

GROUP_SETTINGS = {
    "group.min.session.timeout.ms": "100",
    "group.max.session.timeout.ms": "2000",
    "group.max.size": "1",
    "offsets.retention.minutes": "3",
    "offsets.retention.check.interval.ms": "250",
    "offset.metadata.max.bytes": "4",
    "offsets.commit.timeout.ms": "300",
}


def test_the_settings_pass_through_and_reach_the_coordinator_config() -> None:
    config = parse_config({**BROKER, **GROUP_SETTINGS}, {})
    assert dict(config.broker_settings) == GROUP_SETTINGS
    group = group_config(dict(config.broker_settings))
    assert (group.min_session_timeout_ms, group.max_session_timeout_ms) == (100, 2000)
    assert group.max_size == 1
    assert group.offsets_retention_ms == 3 * 60_000
    assert group.offsets_retention_check_interval_ms == 250
    assert group.offset_metadata_max_bytes == 4
    assert group.offsets_commit_timeout_ms == 300
    # Left out: Kafka's defaults.
    assert group_config({}) == GroupConfig()
    assert GroupConfig().offsets_retention_ms == 10_080 * 60_000


@pytest.mark.parametrize(("props", "setting"), [
    ({"group.min.session.timeout.ms": "7000", "group.max.session.timeout.ms": "6000"},
     "group.max.session.timeout.ms"),
    ({"group.min.session.timeout.ms": "1900000"}, "group.max.session.timeout.ms"),
    ({"group.consumer.session.timeout.ms": "3000"}, "group.consumer.heartbeat.interval.ms"),
    ({"group.max.size": "0"}, "group.max.size"),
    ({"offsets.retention.minutes": "0"}, "offsets.retention.minutes"),
    ({"offsets.retention.check.interval.ms": "soon"}, "offsets.retention.check.interval.ms"),
    ({"offset.metadata.max.bytes": "-1"}, "offset.metadata.max.bytes"),
    ({"offsets.commit.timeout.ms": "0"}, "offsets.commit.timeout.ms"),
])
def test_bad_or_conflicting_settings_are_refused_by_name(props: dict[str, str],
                                                        setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BROKER, **props}, {})
    assert info.value.setting == setting


@pytest.mark.parametrize(("field", "value", "setting"), [
    ("initial_rebalance_delay_ms", -1, "group.initial.rebalance.delay.ms"),
    ("min_session_timeout_ms", 0, "group.min.session.timeout.ms"),
    ("max_session_timeout_ms", 5999, "group.max.session.timeout.ms"),
    ("max_size", 0, "group.max.size"),
    ("offsets_retention_ms", 0, "offsets.retention.minutes"),
    ("offsets_retention_check_interval_ms", 0, "offsets.retention.check.interval.ms"),
    ("offsets_commit_timeout_ms", 0, "offsets.commit.timeout.ms"),
    ("offset_metadata_max_bytes", -1, "offset.metadata.max.bytes"),
    ("consumer_session_timeout_ms", 0, "group.consumer.session.timeout.ms"),
    ("consumer_heartbeat_interval_ms", 45_000, "group.consumer.heartbeat.interval.ms"),
    ("consumer_max_size", 0, "group.consumer.max.size"),
    ("consumer_assignors", (), "group.consumer.assignors"),
    ("consumer_migration_policy", "sideways", "group.consumer.migration.policy"),
])
def test_every_group_config_check_names_a_broker_setting(field: str, value: object,
                                                        setting: str) -> None:
    """Each of `GroupConfig`'s checks names the Kafka setting at fault, so a
    new check reaches the operator as a named ConfigError, never as a bare
    ValueError at start-up."""
    with pytest.raises(GroupConfigError) as info:
        GroupConfig(**{field: value})  # type: ignore[arg-type]
    assert info.value.setting == setting
    assert setting in KNOWN_SETTINGS


def _join(broker: SingleBroker, member: str, session_ms: int) -> Any:
    return broker.call(11, jg3.JoinGroupRequest(
        group_id="g", session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=50), member_id=member,
        protocol_type="consumer",
        protocols=(jg3.JoinGroupRequestProtocol(name="range", metadata=b""),)))


@pytest.fixture
def broker() -> Iterator[SingleBroker]:
    single = SingleBroker({**GROUP_SETTINGS, "group.initial.rebalance.delay.ms": "0"})
    yield single
    single.close()


def test_the_coordinator_answers_by_the_settings(broker: SingleBroker) -> None:
    # Session timeouts outside 100-2000 ms: INVALID_SESSION_TIMEOUT (26).
    assert _join(broker, "", 99).error_code.value == 26
    assert _join(broker, "", 2001).error_code.value == 26
    # Inside: the first member joins and leads (the Kafka default range,
    # 6000-1800000, would refuse 150 ms).
    first = _join(broker, "", 150)
    assert first.error_code.value == 0 and first.leader == first.member_id
    # group.max.size=1: a second member is refused GROUP_MAX_SIZE_REACHED (81).
    assert _join(broker, "", 150).error_code.value == 81
    # offset.metadata.max.bytes=4: OFFSET_METADATA_TOO_LARGE (12) above it
    # (a group without members: simple commits).
    commit = broker.call(8, oc2.OffsetCommitRequest(
        group_id="simple", generation_id_or_member_epoch=-1, member_id="",
        retention_time=datetime.timedelta(milliseconds=-1), topics=(oc2.OffsetCommitRequestTopic(
            name="t", partitions=(
                oc2.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                 committed_metadata="four"),
                oc2.OffsetCommitRequestPartition(partition_index=1, committed_offset=0,
                                                 committed_metadata="fives"))),)))
    assert [p.error_code.value for p in commit.topics[0].partitions] == [0, 12]


def _simple_commit(broker: SingleBroker, offset: int) -> int:
    """A commit outside the group protocol (no members); its error code."""
    answer = broker.call(8, oc2.OffsetCommitRequest(
        group_id="simple", generation_id_or_member_epoch=-1, member_id="",
        retention_time=datetime.timedelta(milliseconds=-1), topics=(
            oc2.OffsetCommitRequestTopic(name="t", partitions=(
                oc2.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                 committed_metadata=""),)),)))
    return int(answer.topics[0].partitions[0].error_code.value)


def test_a_commit_that_cannot_reach_the_isr_is_answered_after_offsets_commit_timeout() -> None:
    """``offsets.commit.timeout.ms``: the offsets partition has a second
    in-sync replica that never fetches, so the commit's records never reach
    the high watermark. It is answered COORDINATOR_NOT_AVAILABLE (15) once
    the setting's 300 ms pass, well inside `SingleBroker.call`'s 5 s limit,
    which Kafka's default of 5000 ms would overrun."""
    broker = SingleBroker({"offsets.commit.timeout.ms": "300"})
    try:
        assert _simple_commit(broker, 1) == 0  # one replica: committed at once
        cluster = broker.cluster
        assert cluster.delete_topic("__consumer_offsets") == 0
        cluster.register_broker(2, "127.0.0.1", 10)
        assert cluster.create_topic("__consumer_offsets", 1, 2, {"cleanup.policy": "compact"}) == 0
        assert cluster.image.topic_by_name("__consumer_offsets") is not None
        assert _simple_commit(broker, 2) == 15
    finally:
        broker.close()


# ------------------------------------------------- delete.topic.enable=false

def test_deletion_disabled_is_invalid_request_before_v3(broker: SingleBroker,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller answers TOPIC_DELETION_DISABLED (73); a client below
    DeleteTopics v3 does not know that code and gets INVALID_REQUEST (42),
    as Kafka's ControllerApis."""
    from kio.schema.delete_topics.v1 import request as dt1
    from kio.schema.delete_topics.v6 import request as dt6

    from raftlog.net.errors import ErrorCode
    monkeypatch.setattr(broker.cluster, "delete_topic",
                        lambda name: ErrorCode.topic_deletion_disabled)
    old = broker.call(20, dt1.DeleteTopicsRequest(
        topic_names=("t",), timeout=datetime.timedelta(seconds=1)))
    assert [r.error_code.value for r in old.responses] == [42]
    new = broker.call(20, dt6.DeleteTopicsRequest(
        topics=(dt6.DeleteTopicState(name="t", topic_id=uuid.UUID(int=0)),),
        timeout=datetime.timedelta(seconds=1)))
    assert [r.error_code.value for r in new.responses] == [73]
    assert broker.cluster.image.topic_by_name("t") is not None
