"""Replication throttles (KIP-73): the quota managers, the configs that set
them, and the long poll's handling of held-back bytes. The fetch paths are
exercised with real brokers in `test_inprocess_replication_throttle.py`."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import pytest

from data_plane.broker.client_quotas import QuotaWindow
from data_plane.broker.replication_quotas import (
    ALL_PARTITIONS,
    ReplicationQuotaManager,
    ReplicationQuotas,
    parse_throttled_replicas,
)
from data_plane.purgatory import DelayedFetch, FetchOutcome, Purgatory
from data_plane.replication.types import FetchPartition
from metadata_quorum.controller.configuration_control import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    ConfigOpType,
    alter_configs,
)
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.records import ConfigResourceType, MetadataRecord, TopicRecord
from raftlog.net.errors import ErrorCode

LONG_MAX = str((1 << 63) - 1)


@pytest.mark.parametrize(("value", "broker", "expected"), [
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    ("0:1,1:2,2:1", 2, frozenset({1})),
    ("0:1,1:2,2:1", 3, frozenset()),
    (" 0:1 , 4:1 ", 1, frozenset({0, 4})),
    ("", 1, frozenset()),
])
def test_throttled_replicas_name_partitions_per_broker(
    value: str, broker: int, expected: frozenset[int]
) -> None:
    assert parse_throttled_replicas(value, broker) == expected


def test_star_throttles_every_partition() -> None:
    parsed = parse_throttled_replicas(" * ", 7)
    assert parsed is ALL_PARTITIONS
    assert 0 in parsed and 12345 in parsed


def test_a_manager_is_active_only_with_a_bound_and_a_throttled_partition() -> None:
    manager = ReplicationQuotaManager("leader", QuotaWindow(2, 1000))
    assert not manager.active
    manager.update(1000, {"t": frozenset()})
    assert not manager.active, "no partition throttled"
    manager.update(None, {"t": frozenset({0})})
    assert not manager.active, "no bound"
    manager.update(int(LONG_MAX), {"t": frozenset({0})})
    assert not manager.active, "Long.MAX_VALUE is Kafka's 'unbounded'"
    manager.update(1000, {"t": frozenset({0})})
    assert manager.active
    assert manager.is_throttled(("t", 0))
    assert not manager.is_throttled(("t", 1))
    assert not manager.is_throttled(("u", 0))


def test_the_quota_is_exceeded_once_the_rate_passes_the_bound() -> None:
    # Two windows of 1 s: the rate is measured over at least 1 s.
    manager = ReplicationQuotaManager("follower", QuotaWindow(2, 1000))
    manager.update(1000, {"t": ALL_PARTITIONS})
    manager.record(1000, now_ms=0)
    assert manager.rate(0) == pytest.approx(1000.0)
    assert not manager.is_quota_exceeded(0), "at the bound is within it"
    manager.record(1, now_ms=0)
    assert manager.is_quota_exceeded(0)
    # Measured over a longer time, the same bytes are a lower rate.
    assert not manager.is_quota_exceeded(1500)
    # Past both windows the samples count for nothing.
    assert manager.rate(5000) == 0.0


def test_record_throttled_counts_only_throttled_partitions() -> None:
    manager = ReplicationQuotaManager("leader", QuotaWindow(2, 1000))
    manager.update(10, {"t": frozenset({1})})
    counted = manager.record_throttled([(("t", 0), 500), (("t", 1), 300), (("u", 1), 200)], 0)
    assert counted == 300
    assert manager.rate(0) == pytest.approx(300.0)


def test_quotas_follow_broker_and_topic_configs() -> None:
    quotas = ReplicationQuotas.from_config({"replication.quota.window.num": "3",
                                            "replication.quota.window.size.seconds": "2"})
    assert quotas.leader.stat._window == QuotaWindow(3, 2000)
    quotas.update(
        {"leader.replication.throttled.rate": "5000",
         "follower.replication.throttled.rate": LONG_MAX},
        [("t", {"leader.replication.throttled.replicas": "0:1,1:2",
                "follower.replication.throttled.replicas": "*"}),
         ("u", {"leader.replication.throttled.replicas": "*"}),
         ("v", {"retention.ms": "1"})],
        broker_id=1)
    assert quotas.leader.bound == 5000
    assert quotas.leader.throttled == {"t": frozenset({0}), "u": ALL_PARTITIONS}
    assert quotas.leader.active
    assert quotas.follower.bound is None
    assert not quotas.follower.active
    # The throttles are removed: nothing is active any more.
    quotas.update({}, [("t", {})], broker_id=1)
    assert not quotas.leader.active and not quotas.follower.active


# ---- the controller accepts and validates the configs ------------------------------


def _replay(image: MetadataImage, records: Iterable[MetadataRecord]) -> MetadataImage:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(image.provenance)


def _image_with_topic() -> MetadataImage:
    return _replay(EMPTY_IMAGE, [TopicRecord("t", uuid.uuid4())])


def _alter(image: MetadataImage, kind: ConfigResourceType, name: str,
           *ops: AlterConfigOp) -> tuple[ErrorCode, str | None]:
    result = alter_configs(image, AlterConfigsRequest((AlterConfigsResource(kind, name, ops),)))
    return result.response[0].error, result.response[0].message


@pytest.mark.parametrize("value", ["*", "0:1", "0:1,1:2,2:3", "", "0:1,,1:2"])
def test_controller_accepts_throttled_replica_lists(value: str) -> None:
    for key in ("leader.replication.throttled.replicas",
                "follower.replication.throttled.replicas"):
        error, message = _alter(_image_with_topic(), ConfigResourceType.TOPIC, "t",
                                AlterConfigOp(key, ConfigOpType.SET, value))
        assert error is ErrorCode.none, message


@pytest.mark.parametrize("value", ["all", "0", "0:x", "1:2:3", "*,0:1", "-1:2"])
def test_controller_refuses_malformed_throttled_replica_lists(value: str) -> None:
    error, message = _alter(_image_with_topic(), ConfigResourceType.TOPIC, "t",
                            AlterConfigOp("leader.replication.throttled.replicas",
                                          ConfigOpType.SET, value))
    assert error is ErrorCode.invalid_config
    assert message is not None and "[partitionId]:[brokerId]" in message


def test_throttled_replicas_are_lists_for_append_and_subtract() -> None:
    image = _image_with_topic()
    key = "follower.replication.throttled.replicas"
    result = alter_configs(image, AlterConfigsRequest((AlterConfigsResource(
        ConfigResourceType.TOPIC, "t", (AlterConfigOp(key, ConfigOpType.APPEND, "0:2,1:3"),)),)))
    assert result.response[0].error is ErrorCode.none
    image = _replay(image, result.records)
    assert image.topic_config("t")[key] == "0:2,1:3"
    result = alter_configs(image, AlterConfigsRequest((AlterConfigsResource(
        ConfigResourceType.TOPIC, "t", (AlterConfigOp(key, ConfigOpType.SUBTRACT, "0:2"),)),)))
    image = _replay(image, result.records)
    assert image.topic_config("t")[key] == "1:3"


@pytest.mark.parametrize("name", ["", "1"])
def test_controller_takes_the_rates_as_broker_configs(name: str) -> None:
    image = _image_with_topic()
    for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
        assert _alter(image, ConfigResourceType.BROKER, name,
                      AlterConfigOp(key, ConfigOpType.SET, "1048576"))[0] is ErrorCode.none
        error, message = _alter(image, ConfigResourceType.BROKER, name,
                                AlterConfigOp(key, ConfigOpType.SET, "-5"))
        assert error is ErrorCode.invalid_config and message is not None and key in message


# ---- the long poll does not count held-back bytes ----------------------------------


class _Replica:
    """A ReplicaView with ``readable`` bytes for any fetch."""

    def __init__(self, readable: int) -> None:
        self.readable = readable

    def check_enough_replicas_reach_offset(self, required_offset: int,
                                           leader_epoch: int) -> tuple[bool, ErrorCode]:
        raise AssertionError("not a produce")

    def delayed_fetch_bytes(self, request: FetchPartition) -> int | None:
        return self.readable

    def delete_records_low_watermark(self) -> int | None:
        raise AssertionError("not a DeleteRecords")


def _request() -> FetchPartition:
    return FetchPartition(fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1,
                          max_bytes=1 << 20, replica_id=3, replica_epoch=1)


def test_held_back_bytes_do_not_complete_a_long_poll() -> None:
    throttled = ("t", 0)
    free = ("t", 1)
    replicas = {throttled: _Replica(5000), free: _Replica(0)}
    held: list[tuple[str, int]] = []

    def held_back(key: tuple[str, int], request: FetchPartition) -> bool:
        held.append(key)
        return key == throttled

    purgatory: Purgatory[DelayedFetch] = Purgatory()
    op = DelayedFetch({throttled: _request(), free: _request()}, min_bytes=1,
                      deadline_ms=500, lookup=replicas.get, held_back=held_back)
    assert not purgatory.try_complete_else_watch(op, 0), "5000 bytes, all held back"
    assert held == [throttled], "asked only for partitions with readable bytes"
    # New bytes on the unthrottled partition complete it.
    replicas[free].readable = 10
    assert purgatory.check_and_complete(free, 1) == [op]
    assert op.outcome is FetchOutcome.SATISFIED
    assert op.changed_partitions() == {free}


def test_without_a_throttle_the_same_bytes_complete_it_at_once() -> None:
    key = ("t", 0)
    op = DelayedFetch({key: _request()}, min_bytes=1, deadline_ms=500,
                      lookup={key: _Replica(5000)}.get)
    assert Purgatory[DelayedFetch]().try_complete_else_watch(op, 0)
