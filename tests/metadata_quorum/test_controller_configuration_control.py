"""controller.configuration_control: topic config validation and IncrementalAlterConfigs."""

from __future__ import annotations

import pytest
from mq_builders import Ctx

from metadata_quorum.controller import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    ConfigOpType,
    alter_configs,
)
from metadata_quorum.controller.configuration_control import (
    topic_config_error,
    unclean_leader_election_enabled,
)
from metadata_quorum.image import ConfigResource
from metadata_quorum.records import ConfigRecord, ConfigResourceType
from raftlog.net.errors import ErrorCode

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("retention.ms", "-1", True), ("retention.ms", "-2", False),
        ("segment.bytes", "14", True), ("segment.bytes", "13", False),
        ("cleanup.policy", "compact,delete", True), ("cleanup.policy", "x", False),
        ("compression.type", "zstd", True), ("compression.type", "brotli", False),
        ("min.cleanable.dirty.ratio", "0.5", True), ("min.cleanable.dirty.ratio", "2", False),
        ("preallocate", "TRUE", True), ("preallocate", "yes", False),
        ("message.timestamp.type", "LogAppendTime", True), ("max.message.bytes", "x", False),
        ("message.timestamp.before.max.ms", "60000", True),
        ("message.timestamp.after.max.ms", "-1", False),
        ("unknown.key", "1", False), ("retention.ms", None, False),
    ],
)
def test_topic_config_validation(key: str, value: str | None, ok: bool) -> None:
    assert (topic_config_error(key, value) is None) == ok


def alter(ctx: Ctx, rtype: ConfigResourceType, name: str, *ops: AlterConfigOp,
          validate_only: bool = False):  # type: ignore[no-untyped-def]
    return alter_configs(ctx.image, AlterConfigsRequest(
        (AlterConfigsResource(rtype, name, ops),), validate_only))


def test_set_and_delete_topic_configs() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    result = alter(ctx, TOPIC, "t", AlterConfigOp("retention.ms", ConfigOpType.SET, "5"))
    assert result.records == (ConfigRecord(TOPIC, "t", "retention.ms", "5"),)
    ctx.run(result)
    assert alter(ctx, TOPIC, "t", AlterConfigOp("retention.ms", ConfigOpType.SET, "5")).records == ()
    result = alter(ctx, TOPIC, "t", AlterConfigOp("retention.ms", ConfigOpType.DELETE))
    assert result.records == (ConfigRecord(TOPIC, "t", "retention.ms", None),)
    ctx.run(result)
    assert ctx.image.topic_config("t") == {}
    assert alter(ctx, TOPIC, "t", AlterConfigOp("retention.ms", ConfigOpType.DELETE)).records == ()


def test_validate_only_writes_nothing() -> None:
    ctx = Ctx()
    result = alter(ctx, BROKER, "", AlterConfigOp("min.insync.replicas", ConfigOpType.SET, "2"),
                   validate_only=True)
    assert result.records == () and result.response[0].error is ErrorCode.none


@pytest.mark.parametrize(
    ("rtype", "name", "ops", "code"),
    [
        (TOPIC, "missing", (AlterConfigOp("retention.ms", ConfigOpType.SET, "1"),),
         ErrorCode.unknown_topic_or_partition),
        (BROKER, "x", (AlterConfigOp("min.insync.replicas", ConfigOpType.SET, "1"),),
         ErrorCode.invalid_request),
        (TOPIC, "t", (AlterConfigOp("retention.ms", ConfigOpType.SET, "1"),
                      AlterConfigOp("retention.ms", ConfigOpType.DELETE)),
         ErrorCode.invalid_request),
        (TOPIC, "t", (AlterConfigOp("nope", ConfigOpType.SET, "1"),), ErrorCode.invalid_config),
        (TOPIC, "t", (AlterConfigOp("retention.ms", ConfigOpType.SET, "x"),),
         ErrorCode.invalid_config),
        (BROKER, "", (AlterConfigOp("retention.ms", ConfigOpType.SET, "1"),),
         ErrorCode.invalid_config),
    ],
)
def test_alter_config_errors(rtype: ConfigResourceType, name: str,
                             ops: tuple[AlterConfigOp, ...], code: ErrorCode) -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    result = alter(ctx, rtype, name, *ops)
    assert result.response[0].error is code and result.records == ()


def test_append_and_subtract_start_from_the_default_list() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    result = alter(ctx, TOPIC, "t", AlterConfigOp("cleanup.policy", ConfigOpType.APPEND, "compact"))
    assert result.records == (ConfigRecord(TOPIC, "t", "cleanup.policy", "delete,compact"),)
    ctx.run(result)
    # Already there: nothing to write.
    assert alter(ctx, TOPIC, "t", AlterConfigOp(
        "cleanup.policy", ConfigOpType.APPEND, "delete")).records == ()
    result = alter(ctx, TOPIC, "t", AlterConfigOp("cleanup.policy", ConfigOpType.SUBTRACT, "delete"))
    assert result.records == (ConfigRecord(TOPIC, "t", "cleanup.policy", "compact"),)
    ctx.run(result)
    assert ctx.image.topic_config("t") == {"cleanup.policy": "compact"}


def test_append_to_a_config_that_is_not_a_list_is_invalid() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    for op in (ConfigOpType.APPEND, ConfigOpType.SUBTRACT):
        result = alter(ctx, TOPIC, "t", AlterConfigOp("retention.ms", op, "5"))
        assert result.response[0].error is ErrorCode.invalid_config and result.records == ()
        assert "not LIST" in (result.response[0].message or "")
    result = alter(ctx, TOPIC, "t", AlterConfigOp("cleanup.policy", ConfigOpType.APPEND, "x"))
    assert result.response[0].error is ErrorCode.invalid_config


def test_legacy_alter_configs_replaces_the_whole_dynamic_config() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t", configs=(("retention.ms", "5"), ("segment.ms", "60000")))
    result = alter_configs(ctx.image, AlterConfigsRequest((AlterConfigsResource(
        TOPIC, "t", (AlterConfigOp("retention.ms", ConfigOpType.SET, "7"),), replace=True),)))
    assert result.records == (
        ConfigRecord(TOPIC, "t", "retention.ms", "7"),
        ConfigRecord(TOPIC, "t", "segment.ms", None),
    )
    ctx.run(result)
    assert ctx.image.topic_config("t") == {"retention.ms": "7"}


def test_set_needs_a_value() -> None:
    with pytest.raises(ValueError):
        AlterConfigOp("k", ConfigOpType.SET)


def test_unclean_resolution_order_topic_then_cluster_then_static() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    assert unclean_leader_election_enabled(ctx.image, "t", ctx.config) is False
    ctx.run(alter(ctx, BROKER, "", AlterConfigOp(
        "unclean.leader.election.enable", ConfigOpType.SET, "true")))
    assert unclean_leader_election_enabled(ctx.image, "t", ctx.config) is True
    ctx.run(alter(ctx, TOPIC, "t", AlterConfigOp(
        "unclean.leader.election.enable", ConfigOpType.SET, "false")))
    assert unclean_leader_election_enabled(ctx.image, "t", ctx.config) is False


def test_a_broker_and_the_cluster_default_take_dynamic_log_configs() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    result = alter(ctx, BROKER, "3", AlterConfigOp("message.max.bytes", ConfigOpType.SET, "300"),
                   AlterConfigOp("log.cleaner.min.cleanable.ratio", ConfigOpType.SET, "0.1"))
    assert result.response[0].error is ErrorCode.none
    assert result.records == (ConfigRecord(BROKER, "3", "message.max.bytes", "300"),
                              ConfigRecord(BROKER, "3", "log.cleaner.min.cleanable.ratio", "0.1"))
    ctx.run(result)
    assert ctx.image.config(ConfigResource(BROKER, "3")) == {
        "message.max.bytes": "300", "log.cleaner.min.cleanable.ratio": "0.1"}
    ok = alter(ctx, BROKER, "", AlterConfigOp("log.retention.ms", ConfigOpType.SET, "60000"),
               AlterConfigOp("transaction.partition.verification.enable", ConfigOpType.SET,
                             "false"))
    assert [r.error for r in ok.response] == [ErrorCode.none]
    for name, op, code in (
        ("", AlterConfigOp("transaction.partition.verification.enable", ConfigOpType.SET,
                           "maybe"), ErrorCode.invalid_config),
        ("3", AlterConfigOp("log.retention.ms", ConfigOpType.SET, "-2"), ErrorCode.invalid_config),
        ("3", AlterConfigOp("log.cleaner.min.cleanable.ratio", ConfigOpType.SET, "2"),
         ErrorCode.invalid_config),
        ("-1", AlterConfigOp("log.retention.ms", ConfigOpType.SET, "1"), ErrorCode.invalid_request),
    ):
        bad = alter(ctx, BROKER, name, op)
        assert bad.response[0].error is code and bad.records == ()


def test_a_listeners_keystore_is_a_per_broker_config_only() -> None:
    """KIP-226: ``listener.name.<l>.ssl.keystore.*`` for one broker; as a
    cluster default Kafka's message refuses it."""
    ctx = Ctx()
    ctx.add_brokers(1)
    key = "listener.name.internal.ssl.keystore.location"
    result = alter(ctx, BROKER, "1", AlterConfigOp(key, ConfigOpType.SET, "/etc/k.p12"))
    assert result.records == (ConfigRecord(BROKER, "1", key, "/etc/k.p12"),)
    refused = alter(ctx, BROKER, "", AlterConfigOp(key, ConfigOpType.SET, "/etc/k.p12"))
    assert refused.records == ()
    assert refused.response[0].error is ErrorCode.invalid_request
    assert "broker id must be specified" in (refused.response[0].message or "")
    # Not a keystore setting, and not a bare ssl.* one: unknown, as before.
    for other in ("listener.name.internal.ssl.truststore.location", "ssl.keystore.location"):
        unknown = alter(ctx, BROKER, "1", AlterConfigOp(other, ConfigOpType.SET, "x"))
        assert unknown.response[0].error is ErrorCode.invalid_config
