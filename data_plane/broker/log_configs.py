"""Effective topic configs: Kafka's topic defaults, overridden by broker
settings (static ``server.properties``, then the cluster-wide and per-broker
dynamic configs in the metadata image), overridden by the topic's own configs.

Pure functions; the replica manager opens logs with `log_config` and the
DescribeConfigs handler shows `effective_topic_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from data_plane.replication.types import ReplicationConfig
from metadata_quorum.image import CLUSTER_DEFAULT_RESOURCE, ConfigResource, MetadataImage
from metadata_quorum.records.types import ConfigResourceType
from raftlog.storage import LogConfig
from raftlog.storage.cleaner import CompactionConfig

__all__ = (
    "BROKER_CONFIG_DEFAULTS",
    "TOPIC_CONFIG_DEFAULTS",
    "broker_config",
    "broker_config_sources",
    "compaction_config",
    "effective_topic_config",
    "is_compacted",
    "log_config",
    "replication_config",
    "topic_config_sources",
)

_LONG_MAX = str((1 << 63) - 1)

#: Topic config name -> Kafka's default (the ones this broker honours or shows).
TOPIC_CONFIG_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "flush.messages": _LONG_MAX,
    "flush.ms": _LONG_MAX,
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "max.message.bytes": "1048588",
    "max.compaction.lag.ms": _LONG_MAX,
    # KIP-937; Kafka 4.0 made one hour the default of the "after" bound.
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": _LONG_MAX,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

#: Broker setting -> the topic config it supplies the default of (Kafka's
#: ``ServerTopicConfigSynonyms``).
_BROKER_SYNONYMS: Mapping[str, str] = {
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "compression.type": "compression.type",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.index.interval.bytes": "index.interval.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "log.segment.bytes": "segment.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.roll.ms": "segment.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

#: ``replica.selector.class`` for fetching from the closest replica (KIP-392).
RACK_AWARE_REPLICA_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

#: Broker-only settings the data plane reads, with Kafka's defaults.
BROKER_CONFIG_DEFAULTS: Mapping[str, str] = {
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.backoff.ms": "1000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "max.incremental.fetch.session.cache.slots": "1000",
    "min.incremental.fetch.session.eviction.ms": "120000",
    "log.retention.check.interval.ms": "300000",
    "log.cleaner.enable": "true",
    # KIP-890: a partition leader checks a transaction's first batch with
    # the coordinator (data_plane.broker.txn_verification).
    "transaction.partition.verification.enable": "true",
    # KIP-392: unset, consumers read from leaders only; Kafka's
    # RackAwareReplicaSelector sends them to an in-sync replica in their rack.
    "replica.selector.class": "",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.flush.scheduler.interval.ms": _LONG_MAX,
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "socket.request.max.bytes": "104857600",
    # SO_SNDBUF / SO_RCVBUF of accepted connections. Kafka's default is
    # 102400; here -1, the OS's autotuned buffers (what the benchmarks ran).
    "socket.send.buffer.bytes": "-1",
    "socket.receive.buffer.bytes": "-1",
    # The most partitions a DescribeTopicPartitions answer holds (KIP-966).
    "max.request.partition.size.limit": "2000",
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
    # Replication throttles (KIP-73): bytes per second, dynamic per broker.
    "leader.replication.throttled.rate": _LONG_MAX,
    "follower.replication.throttled.rate": _LONG_MAX,
    # Bytes per second copied by the broker's log-dir moves (AlterReplicaLogDirs).
    "replica.alter.log.dirs.io.max.bytes.per.second": _LONG_MAX,
    "replication.quota.window.num": "11",
    "replication.quota.window.size.seconds": "1",
    # The node's listeners (`raftlog.net.connection_quotas`).
    "connections.max.idle.ms": "600000",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "max.connections": "2147483647",
    **{broker: TOPIC_CONFIG_DEFAULTS[topic] for broker, topic in _BROKER_SYNONYMS.items()},
}


def broker_config(
    static: Mapping[str, str], image: MetadataImage, broker_id: int
) -> dict[str, str]:
    """Broker settings: defaults < server.properties < cluster-wide dynamic <
    per-broker dynamic (Kafka's precedence). ``log.retention.hours`` /
    ``log.retention.minutes`` / ``log.roll.hours`` feed the ``*.ms`` keys
    when those are unset."""
    merged = dict(BROKER_CONFIG_DEFAULTS)
    layers = (
        static,
        image.config(CLUSTER_DEFAULT_RESOURCE),
        image.config(ConfigResource(ConfigResourceType.BROKER, str(broker_id))),
    )
    for layer in layers:
        for key, unit_ms, target in (
            ("log.retention.hours", 3_600_000, "log.retention.ms"),
            ("log.retention.minutes", 60_000, "log.retention.ms"),
            ("log.roll.hours", 3_600_000, "log.roll.ms"),
        ):
            if key in layer and target not in layer:
                merged[target] = str(int(layer[key]) * unit_ms)
        merged.update(layer)
    return merged


#: Where a broker setting's value comes from (DescribeConfigs' config sources).
DYNAMIC_BROKER = "dynamic_broker"
DYNAMIC_DEFAULT = "dynamic_default"
STATIC = "static"
DEFAULT = "default"


def broker_config_sources(
    static: Mapping[str, str], image: MetadataImage, broker_id: int
) -> dict[str, str]:
    """For each `broker_config` key, the layer its value comes from: this
    broker's dynamic configs, the cluster default, server.properties, or
    Kafka's default (``log.retention.hours`` counts for ``log.retention.ms``)."""
    sources = dict.fromkeys(BROKER_CONFIG_DEFAULTS, DEFAULT)
    derived = {"log.retention.hours": "log.retention.ms",
               "log.retention.minutes": "log.retention.ms", "log.roll.hours": "log.roll.ms"}
    for source, layer in (
        (STATIC, static),
        (DYNAMIC_DEFAULT, image.config(CLUSTER_DEFAULT_RESOURCE)),
        (DYNAMIC_BROKER, image.config(ConfigResource(ConfigResourceType.BROKER, str(broker_id)))),
    ):
        for key in layer:
            sources[key] = source
            if key in derived and derived[key] not in layer:
                sources[derived[key]] = source
    return sources


def topic_config_sources(
    broker_sources: Mapping[str, str], topic: Mapping[str, str]
) -> dict[str, str]:
    """For each `effective_topic_config` key: ``"topic"`` when the topic sets
    it, else the source of the broker setting it inherits (`broker_config_sources`)."""
    sources = dict.fromkeys(TOPIC_CONFIG_DEFAULTS, DEFAULT)
    for broker_key, topic_key in _BROKER_SYNONYMS.items():
        sources[topic_key] = broker_sources.get(broker_key, DEFAULT)
    for key in topic:
        sources[key] = "topic"
    return sources


def effective_topic_config(broker: Mapping[str, str], topic: Mapping[str, str]) -> dict[str, str]:
    """Every topic config: the broker's synonym (or Kafka's default), then the topic's own."""
    merged = dict(TOPIC_CONFIG_DEFAULTS)
    for broker_key, topic_key in _BROKER_SYNONYMS.items():
        if broker_key in broker:
            merged[topic_key] = broker[broker_key]
    merged.update(topic)
    return merged


def log_config(topic_config: Mapping[str, str]) -> LogConfig:
    """The segment log's settings from an effective topic config. Raises
    `raftlog.storage.ConfigError` for a bad value.

    Retention deletes only when ``cleanup.policy`` includes ``delete``, as
    in Kafka. A compacted-only topic (``__consumer_offsets``, a changelog)
    keeps every segment to the log cleaner (`compaction_config`): deleting by
    age would drop the latest value of a key (a group's last commit, a
    transactional id's epoch)."""
    deletes = "delete" in {p.strip() for p in topic_config["cleanup.policy"].split(",")}
    return LogConfig.from_properties({
        "segment.bytes": topic_config["segment.bytes"],
        "segment.ms": topic_config["segment.ms"],
        "index.interval.bytes": topic_config["index.interval.bytes"],
        "segment.index.bytes": topic_config["segment.index.bytes"],
        "retention.ms": topic_config["retention.ms"] if deletes else "-1",
        "retention.bytes": topic_config["retention.bytes"] if deletes else "-1",
        "flush.messages": topic_config["flush.messages"],
        "flush.ms": topic_config["flush.ms"],
        "message.max.bytes": topic_config["max.message.bytes"],
        "message.timestamp.type": topic_config["message.timestamp.type"],
    })


def is_compacted(topic_config: Mapping[str, str]) -> bool:
    """``cleanup.policy`` includes ``compact``."""
    return "compact" in {p.strip() for p in topic_config["cleanup.policy"].split(",")}


def compaction_config(topic_config: Mapping[str, str]) -> CompactionConfig | None:
    """The log cleaner's settings for a compacted topic; None if the topic is
    not compacted. Raises ``ValueError`` for a value that does not parse
    (the controller validates topic configs, so only a bad static default)."""
    if not is_compacted(topic_config):
        return None
    return CompactionConfig(
        delete_retention_ms=int(topic_config["delete.retention.ms"]),
        min_compaction_lag_ms=int(topic_config["min.compaction.lag.ms"]),
        min_cleanable_dirty_ratio=float(topic_config["min.cleanable.dirty.ratio"]),
        max_compaction_lag_ms=int(topic_config["max.compaction.lag.ms"]),
    )


def replication_config(
    broker: Mapping[str, str], topic_config: Mapping[str, str]
) -> ReplicationConfig:
    """The partition core's settings from broker and effective topic configs."""
    return ReplicationConfig(
        replica_lag_time_max_ms=int(broker["replica.lag.time.max.ms"]),
        min_insync_replicas=max(1, int(topic_config["min.insync.replicas"])),
        unclean_leader_election_enable=topic_config["unclean.leader.election.enable"] == "true",
        replica_fetch_max_bytes=int(broker["replica.fetch.max.bytes"]),
        replica_fetch_backoff_ms=int(broker["replica.fetch.backoff.ms"]),
        compacted=is_compacted(topic_config),
        message_timestamp_before_max_ms=int(topic_config["message.timestamp.before.max.ms"]),
        message_timestamp_after_max_ms=int(topic_config["message.timestamp.after.max.ms"]),
    )
