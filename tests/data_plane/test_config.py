"""data_plane.config: server.properties parsing, validation and env overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_plane.broker.log_configs import (
    broker_config,
    compaction_config,
    effective_topic_config,
    replication_config,
)
from data_plane.config import ConfigError, env_name, load_config, parse_config, parse_properties
from metadata_quorum.image import EMPTY_IMAGE
from raftlog.storage.cleaner import CompactionConfig

BASE = {
    "node.id": "1",
    "process.roles": "controller",
    "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095",
    "listeners": "CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a,/data/b",
}


def test_valid_controller_config_with_kafka_defaults() -> None:
    config = parse_config(BASE, {})
    assert config.node_id == 1
    assert config.process_roles == frozenset({"controller"})
    assert [v.node_id for v in config.voters] == [1, 2, 3]
    assert config.controller_listener.port == 9093
    assert config.log_dirs == ("/data/a", "/data/b")
    assert config.metadata_log_dir == "/data/a"
    assert config.broker_session_timeout_ms == 9000
    assert config.metadata_max_bytes_between_snapshots == 20 * 1024 * 1024
    assert config.unclean_leader_election_enable is False


def test_combined_mode_and_typed_settings() -> None:
    config = parse_config(
        {
            **BASE,
            "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093",
            "advertised.listeners": "PLAINTEXT://host1:9092",
            "metadata.log.dir": "/meta",
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "TRUE",
            "num.partitions": "3",
        },
        {},
    )
    assert config.is_broker and config.is_controller
    assert config.advertised_listeners[0].host == "host1"
    assert config.metadata_log_dir == "/meta"
    assert config.min_insync_replicas == 2
    assert config.unclean_leader_election_enable is True
    assert config.num_partitions == 3


@pytest.mark.parametrize(
    "missing",
    ["node.id", "process.roles", "controller.quorum.voters", "listeners",
     "controller.listener.names", "log.dirs"],
)
def test_missing_required_setting_is_named(missing: str) -> None:
    props = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigError) as info:
        parse_config(props, {})
    assert info.value.setting == missing
    assert "required" in str(info.value)


def test_log_dir_is_accepted_when_log_dirs_is_absent() -> None:
    props = {k: v for k, v in BASE.items() if k != "log.dirs"}
    props["log.dir"] = "/single"
    assert parse_config(props, {}).log_dirs == ("/single",)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("node.id", "x"),
        ("node.id", "-1"),
        ("process.roles", "zookeeper"),
        ("process.roles", "controller,controller"),
        ("controller.quorum.voters", "1@hostnoport"),
        ("controller.quorum.voters", "1@h:1,1@h:2"),
        ("listeners", "CONTROLLER:127.0.0.1:9093"),
        ("listeners", "CONTROLLER://127.0.0.1:port"),
        ("listeners", "CONTROLLER://127.0.0.1:70000"),
        ("listeners", "CONTROLLER://a:1,CONTROLLER://a:2"),
        ("log.dirs", "/a,/a"),
        ("min.insync.replicas", "0"),
        ("broker.session.timeout.ms", "soon"),
        ("controller.quorum.election.timeout.ms", "0"),
        ("metadata.log.max.record.bytes.between.snapshots", "0"),
        ("num.partitions", "0"),
        ("default.replication.factor", "0"),
        ("auto.create.topics.enable", "yes"),
        ("unclean.leader.election.enable", "1"),
        ("advertised.listeners", "nonsense"),
        ("log.cleaner.enable", "maybe"),
        ("transaction.partition.verification.enable", "sometimes"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.min.cleanable.ratio", "half"),
        ("log.cleaner.max.compaction.lag.ms", "0"),
        ("group.consumer.migration.policy", "sideways"),
    ],
)
def test_invalid_value_is_named(setting: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, setting: value}, {})
    assert info.value.setting == setting
    assert str(info.value).startswith(f"{setting}: ")


def test_the_migration_policy_is_read_case_blind() -> None:
    config = parse_config({**BASE, "group.consumer.migration.policy": "Upgrade"}, {})
    assert ("group.consumer.migration.policy", "upgrade") in config.broker_settings


def test_unknown_setting_in_file_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, "node.idd": "1"}, {})
    assert info.value.setting == "node.idd"


def test_controller_must_be_a_voter() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, "node.id": "7"}, {})
    assert info.value.setting == "controller.quorum.voters"


def test_voter_without_controller_role_is_rejected() -> None:
    props = {**BASE, "process.roles": "broker", "listeners": "PLAINTEXT://h:9092"}
    with pytest.raises(ConfigError) as info:
        parse_config(props, {})
    assert info.value.setting == "process.roles"


def test_controller_needs_a_controller_listener() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, "listeners": "PLAINTEXT://h:9092"}, {})
    assert info.value.setting == "listeners"


def test_broker_needs_a_non_controller_listener() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, "process.roles": "broker,controller"}, {})
    assert info.value.setting == "listeners"


def test_heartbeat_interval_must_be_below_session_timeout() -> None:
    props = {**BASE, "broker.heartbeat.interval.ms": "9000", "broker.session.timeout.ms": "9000"}
    with pytest.raises(ConfigError) as info:
        parse_config(props, {})
    assert info.value.setting == "broker.heartbeat.interval.ms"


def test_env_overrides_win_and_are_validated() -> None:
    assert env_name("node.id") == "RAFTLOG_NODE_ID"
    assert env_name("controller.quorum.voters") == "RAFTLOG_CONTROLLER_QUORUM_VOTERS"
    config = parse_config(BASE, {"RAFTLOG_NODE_ID": "2", "RAFTLOG_NUM_PARTITIONS": "6",
                                 "RAFTLOG_HOME": "/ignored"})
    assert config.node_id == 2
    assert config.num_partitions == 6
    with pytest.raises(ConfigError) as info:
        parse_config(BASE, {"RAFTLOG_MIN_INSYNC_REPLICAS": "many"})
    assert info.value.setting == "min.insync.replicas"


def test_env_can_supply_a_setting_missing_from_the_file() -> None:
    props = {k: v for k, v in BASE.items() if k != "node.id"}
    assert parse_config(props, {"RAFTLOG_NODE_ID": "3"}).node_id == 3


def test_properties_syntax() -> None:
    text = "# comment\n! also\n\nnode.id = 1\nlog.dirs: /a\nlisteners=CONTROLLER://h:1,\\\n   X://h:2\n"
    assert parse_properties(text) == {
        "node.id": "1", "log.dirs": "/a", "listeners": "CONTROLLER://h:1,X://h:2"
    }


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("\n".join(f"{k}={v}" for k, v in BASE.items()))
    assert load_config(str(path), {}).node_id == 1
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "missing.properties"), {})
    assert info.value.setting == "config"


def test_broker_data_plane_settings_pass_through_with_kafka_names() -> None:
    config = parse_config({**BASE, "process.roles": "broker,controller",
                           "listeners": "PLAINTEXT://h:9092,CONTROLLER://h:9093",
                           "replica.lag.time.max.ms": "1500", "log.retention.hours": "1",
                           "group.initial.rebalance.delay.ms": "0"}, {})
    assert dict(config.broker_settings) == {"replica.lag.time.max.ms": "1500",
                                            "log.retention.hours": "1",
                                            "group.initial.rebalance.delay.ms": "0"}
    merged = broker_config(dict(config.broker_settings), EMPTY_IMAGE, 1)
    assert merged["replica.lag.time.max.ms"] == "1500"
    assert merged["log.retention.ms"] == "3600000"
    assert replication_config(merged, effective_topic_config(merged, {})).replica_lag_time_max_ms \
        == 1500
    # An environment override wins, and a bad value is named.
    env = parse_config({**BASE, "replica.fetch.wait.max.ms": "500"},
                       {"RAFTLOG_REPLICA_FETCH_WAIT_MAX_MS": "50"})
    assert dict(env.broker_settings) == {"replica.fetch.wait.max.ms": "50"}
    with pytest.raises(ConfigError, match=r"replica\.lag\.time\.max\.ms"):
        parse_config({**BASE, "replica.lag.time.max.ms": "0"}, {})
    with pytest.raises(ConfigError, match=r"log\.retention\.ms"):
        parse_config({**BASE, "log.retention.ms": "soon"}, {})


def test_log_cleaner_settings_reach_each_compacted_topic() -> None:
    config = parse_config({**BASE, "log.cleaner.enable": "FALSE",
                           "log.cleaner.min.cleanable.ratio": "0.1",
                           "log.cleaner.delete.retention.ms": "1000",
                           "log.cleaner.backoff.ms": "50"}, {})
    merged = broker_config(dict(config.broker_settings), EMPTY_IMAGE, 1)
    assert (merged["log.cleaner.enable"], merged["log.cleaner.backoff.ms"]) == ("false", "50")
    assert compaction_config(effective_topic_config(merged, {})) is None  # cleanup.policy=delete
    compacted = compaction_config(effective_topic_config(
        merged, {"cleanup.policy": "compact,delete", "min.compaction.lag.ms": "5"}))
    assert compacted == CompactionConfig(delete_retention_ms=1000, min_compaction_lag_ms=5,
                                         min_cleanable_dirty_ratio=0.1)
    # Kafka's defaults when nothing is set.
    defaults = compaction_config(effective_topic_config(
        broker_config({}, EMPTY_IMAGE, 1), {"cleanup.policy": "compact"}))
    assert defaults == CompactionConfig()


def test_listener_max_connections_names_a_listener_of_the_node() -> None:
    combined = {**BASE, "process.roles": "broker,controller",
                "listeners": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093"}
    config = parse_config({**combined, "listener.name.plaintext.max.connections": "50"}, {})
    assert ("listener.name.plaintext.max.connections", "50") in config.broker_settings
    with pytest.raises(ConfigError, match="no listener named 'external'"):
        parse_config({**combined, "listener.name.external.max.connections": "5"}, {})
    with pytest.raises(ConfigError, match=r"listener\.name\.plaintext\.max\.connections"):
        parse_config({**combined, "listener.name.plaintext.max.connections": "-1"}, {})
    with pytest.raises(ConfigError, match="unknown setting"):
        parse_config({**combined, "listener.name.plaintext.max.connexions": "5"}, {})


def test_listener_max_connections_has_an_environment_override() -> None:
    combined = {**BASE, "process.roles": "broker,controller",
                "listeners": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093",
                "listener.name.plaintext.max.connections": "50"}
    config = parse_config(combined, {"RAFTLOG_LISTENER_NAME_PLAINTEXT_MAX_CONNECTIONS": "7"})
    assert ("listener.name.plaintext.max.connections", "7") in config.broker_settings


def test_kafkas_sample_server_properties_load() -> None:
    """The settings of Kafka's sample server.properties: thread and queue
    sizes are accepted (checked, then warned about at start), the socket
    buffers and broker defaults of topic configs are honoured, and
    ``broker.id`` must agree with ``node.id``."""
    sample = {**BASE, "process.roles": "broker,controller",
              "listeners": "PLAINTEXT://h:9092,CONTROLLER://h:9093",
              "broker.id": "1", "num.network.threads": "3", "num.io.threads": "8",
              "num.recovery.threads.per.data.dir": "1", "num.replica.fetchers": "2",
              "queued.max.requests": "500", "background.threads": "10",
              "socket.send.buffer.bytes": "102400", "socket.receive.buffer.bytes": "102400",
              "socket.request.max.bytes": "104857600", "delete.topic.enable": "false",
              "compression.type": "zstd", "log.cleanup.policy": "compact,delete",
              "log.message.timestamp.type": "LogAppendTime"}
    config = parse_config(sample, {})
    assert config.no_effect_settings == (
        "background.threads", "num.io.threads", "num.network.threads",
        "num.recovery.threads.per.data.dir", "num.replica.fetchers", "queued.max.requests")
    assert config.delete_topic_enable is False
    settings = dict(config.broker_settings)
    assert settings["socket.send.buffer.bytes"] == "102400"
    assert settings["log.message.timestamp.type"] == "LogAppendTime"  # case kept
    merged = broker_config(settings, EMPTY_IMAGE, 1)
    topic = effective_topic_config(merged, {})
    assert (topic["compression.type"], topic["cleanup.policy"],
            topic["message.timestamp.type"]) == ("zstd", "compact,delete", "LogAppendTime")
    assert merged["socket.receive.buffer.bytes"] == "102400"
    assert broker_config({}, EMPTY_IMAGE, 1)["socket.send.buffer.bytes"] == "-1"


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("broker.id", "2", r"must be node.id \(1\)"),
    ("num.io.threads", "0", "must be >= 1"),
    ("socket.send.buffer.bytes", "-2", "must be >= -1"),
    ("compression.type", "brotli", "brotli"),
    ("log.message.timestamp.type", "WallTime", "CreateTime"),
    ("zookeeper.connect", "zk:2181", "no ZooKeeper"),
    ("controller.quorum.bootstrap.servers", "h:9093", "controller.quorum.voters"),
    ("delete.topic.enable", "maybe", "true or false"),
])
def test_kafka_settings_refused_with_a_reason(setting: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_config({**BASE, setting: value}, {})
    assert info.value.setting == setting
