"""Configs: the known topic configs, their validation, and IncrementalAlterConfigs.

After Kafka's ``ConfigurationControlManager``. Config values are stored as
strings in ConfigRecords. A broker resolves its settings as: its own
dynamic configs (resource ``(BROKER, "<id>")``), the cluster default
(``(BROKER, "")``), ``server.properties``, Kafka's defaults; a topic's
configs come first for the topic. The controller's own decisions
(`unclean_leader_election_enabled`) read the topic, the cluster default,
then the static `ControllerConfig` value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from metadata_quorum.features import elr_enabled
from metadata_quorum.image import CLUSTER_DEFAULT_RESOURCE, ConfigResource, MetadataImage
from metadata_quorum.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
)
from raftlog.net.errors import ErrorCode

from .result import ControllerConfig, ControllerResult

__all__ = [
    "ALTER_LOG_DIRS_IO_MAX_RATE",
    "BROKER_CONFIG_VALIDATORS",
    "FOLLOWER_THROTTLED_RATE",
    "FOLLOWER_THROTTLED_REPLICAS",
    "LEADER_THROTTLED_RATE",
    "LEADER_THROTTLED_REPLICAS",
    "LIST_CONFIG_DEFAULTS",
    "TOPIC_CONFIG_VALIDATORS",
    "AlterConfigOp",
    "AlterConfigsRequest",
    "AlterConfigsResource",
    "AlterConfigsResourceResult",
    "ConfigOpType",
    "alter_configs",
    "elr_min_isr",
    "min_insync_replicas",
    "topic_config_error",
    "unclean_leader_election_enabled",
]

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS = "min.insync.replicas"

Validator = Callable[[str], str | None]  # returns an error message or None


def _integer(lo: int, hi: int) -> Validator:
    def check(value: str) -> str | None:
        try:
            number = int(value.strip())
        except ValueError:
            return f"value {value!r} is not an integer"
        if not lo <= number <= hi:
            return f"value {number} is outside [{lo}, {hi}]"
        return None

    return check


def _boolean(value: str) -> str | None:
    if value.strip().lower() not in ("true", "false"):
        return f"value {value!r} is not true or false"
    return None


def _ratio(value: str) -> str | None:
    try:
        number = float(value)
    except ValueError:
        return f"value {value!r} is not a number"
    if not 0.0 <= number <= 1.0:
        return f"value {number} is outside [0, 1]"
    return None


def _one_of(*choices: str) -> Validator:
    def check(value: str) -> str | None:
        return None if value.strip() in choices else f"value {value!r} is not one of {choices}"

    return check


def _throttled_replicas(value: str) -> str | None:
    """``leader.replication.throttled.replicas`` / ``follower...``: ``*``, or
    ``partition:broker`` pairs separated by commas (Kafka's
    ``ThrottledReplicaListValidator``; empty items are allowed)."""
    items = [v.strip() for v in value.split(",")]
    if value.strip() == "*" or all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_IO_MAX_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"


def _list_of(*choices: str) -> Validator:
    def check(value: str) -> str | None:
        items = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in items if v not in choices]
        return f"values {bad} are not in {choices}" if bad else None

    return check


#: Topic configs and their validators (names, types and bounds from Kafka's
#: ``TopicConfig``/``LogConfig``).
TOPIC_CONFIG_VALIDATORS: Mapping[str, Validator] = {
    "cleanup.policy": _list_of("delete", "compact"),
    "compression.type": _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "delete.retention.ms": _integer(0, INT64_MAX),
    "file.delete.delay.ms": _integer(0, INT64_MAX),
    "flush.messages": _integer(1, INT64_MAX),
    "flush.ms": _integer(0, INT64_MAX),
    FOLLOWER_THROTTLED_REPLICAS: _throttled_replicas,
    "index.interval.bytes": _integer(0, INT32_MAX),
    LEADER_THROTTLED_REPLICAS: _throttled_replicas,
    "max.compaction.lag.ms": _integer(1, INT64_MAX),
    "max.message.bytes": _integer(0, INT32_MAX),
    "message.downconversion.enable": _boolean,
    "message.timestamp.after.max.ms": _integer(0, INT64_MAX),
    "message.timestamp.before.max.ms": _integer(0, INT64_MAX),
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _integer(0, INT64_MAX),
    MIN_INSYNC_REPLICAS: _integer(1, INT32_MAX),
    "preallocate": _boolean,
    "retention.bytes": _integer(-(1 << 63), INT64_MAX),
    "retention.ms": _integer(-1, INT64_MAX),
    "segment.bytes": _integer(14, INT32_MAX),  # LegacyRecord.RECORD_OVERHEAD_V0
    "segment.index.bytes": _integer(4, INT32_MAX),
    "segment.jitter.ms": _integer(0, INT64_MAX),
    "segment.ms": _integer(1, INT64_MAX),
    UNCLEAN_LEADER_ELECTION_ENABLE: _boolean,
}

#: Dynamic broker configs, for the cluster default (``BROKER ""``) and for
#: one broker (``BROKER "<id>"``): Kafka's dynamic log configs (the broker
#: synonyms of the topic configs a broker honours, which become the
#: defaults of every topic that sets none), the log cleaner's backoff, and
#: the replication throttles (KIP-73, bytes per second) and the bound on
#: copying replicas between log dirs (AlterReplicaLogDirs).
BROKER_CONFIG_VALIDATORS: Mapping[str, Validator] = {
    LEADER_THROTTLED_RATE: _integer(0, INT64_MAX),
    FOLLOWER_THROTTLED_RATE: _integer(0, INT64_MAX),
    ALTER_LOG_DIRS_IO_MAX_RATE: _integer(0, INT64_MAX),
    UNCLEAN_LEADER_ELECTION_ENABLE: _boolean,
    MIN_INSYNC_REPLICAS: _integer(1, INT32_MAX),
    "compression.type": TOPIC_CONFIG_VALIDATORS["compression.type"],
    "log.cleanup.policy": TOPIC_CONFIG_VALIDATORS["cleanup.policy"],
    "log.cleaner.backoff.ms": _integer(0, INT64_MAX),
    "log.cleaner.dedupe.buffer.size": _integer(1, INT64_MAX),
    "log.cleaner.delete.retention.ms": TOPIC_CONFIG_VALIDATORS["delete.retention.ms"],
    "log.cleaner.max.compaction.lag.ms": TOPIC_CONFIG_VALIDATORS["max.compaction.lag.ms"],
    "log.cleaner.min.cleanable.ratio": _ratio,
    "log.cleaner.min.compaction.lag.ms": TOPIC_CONFIG_VALIDATORS["min.compaction.lag.ms"],
    "log.flush.interval.messages": TOPIC_CONFIG_VALIDATORS["flush.messages"],
    "log.flush.interval.ms": TOPIC_CONFIG_VALIDATORS["flush.ms"],
    "log.index.interval.bytes": TOPIC_CONFIG_VALIDATORS["index.interval.bytes"],
    "log.index.size.max.bytes": TOPIC_CONFIG_VALIDATORS["segment.index.bytes"],
    "log.message.timestamp.after.max.ms":
        TOPIC_CONFIG_VALIDATORS["message.timestamp.after.max.ms"],
    "log.message.timestamp.before.max.ms":
        TOPIC_CONFIG_VALIDATORS["message.timestamp.before.max.ms"],
    "log.message.timestamp.type": TOPIC_CONFIG_VALIDATORS["message.timestamp.type"],
    "log.retention.bytes": TOPIC_CONFIG_VALIDATORS["retention.bytes"],
    "log.retention.hours": _integer(-1, INT32_MAX),
    "log.retention.minutes": _integer(-1, INT32_MAX),
    "log.retention.ms": TOPIC_CONFIG_VALIDATORS["retention.ms"],
    "log.roll.hours": _integer(1, INT32_MAX),
    "log.roll.ms": TOPIC_CONFIG_VALIDATORS["segment.ms"],
    "log.segment.bytes": TOPIC_CONFIG_VALIDATORS["segment.bytes"],
    "message.max.bytes": TOPIC_CONFIG_VALIDATORS["max.message.bytes"],
    "transaction.partition.verification.enable": _boolean,
}


#: KIP-226's dynamic keystore of one broker's TLS listener:
#: ``listener.name.<listener>.ssl.keystore.*`` and ``...ssl.key.password``.
#: Per broker only (a keystore is one broker's); the broker named checks that
#: it loads before the change is forwarded (data_plane.tls_reload).
LISTENER_KEYSTORE_CONFIG: Final = re.compile(
    r"listener\.name\.([a-z0-9_-]+)\."
    r"(ssl\.keystore\.(?:type|location|password|key|certificate\.chain)|ssl\.key\.password)")


def _not_empty(value: str) -> str | None:
    return None if value.strip() else "value is empty"


def topic_config_error(key: str, value: str | None) -> str | None:
    """Why ``key=value`` is not a valid topic config, or None."""
    validator = TOPIC_CONFIG_VALIDATORS.get(key)
    if validator is None:
        return f"Unknown topic config name: {key}"
    if value is None:
        return f"Null value not supported for topic config: {key}"
    return validator(value)


def unclean_leader_election_enabled(
    image: MetadataImage, topic_name: str, config: ControllerConfig
) -> bool:
    """``unclean.leader.election.enable`` for ``topic_name``: topic, cluster default, static."""
    for entries in (image.topic_config(topic_name), image.config(CLUSTER_DEFAULT_RESOURCE)):
        value = entries.get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if value is not None:
            return value.strip().lower() == "true"
    return config.unclean_leader_election_enable


def min_insync_replicas(image: MetadataImage, topic_name: str, config: ControllerConfig) -> int:
    """``min.insync.replicas`` for ``topic_name``: topic, cluster default, static."""
    for entries in (image.topic_config(topic_name), image.config(CLUSTER_DEFAULT_RESOURCE)):
        value = entries.get(MIN_INSYNC_REPLICAS)
        if value is not None:
            try:
                return max(1, int(value.strip()))
            except ValueError:
                break  # validated on the way in; an odd old value falls back
    return config.min_insync_replicas


def elr_min_isr(image: MetadataImage, topic_name: str, config: ControllerConfig) -> int | None:
    """What `partition_change.elect` takes as ``min_isr``: the topic's
    ``min.insync.replicas`` while KIP-966 ELR is on
    (``eligible.leader.replicas.version`` >= 1), else None."""
    if not elr_enabled(image):
        return None
    return min_insync_replicas(image, topic_name, config)


#: List-type topic configs (APPEND/SUBTRACT work on these) and the default
#: value an APPEND or SUBTRACT starts from when the topic sets none.
LIST_CONFIG_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    LEADER_THROTTLED_REPLICAS: "",
    FOLLOWER_THROTTLED_REPLICAS: "",
}


class ConfigOpType(Enum):
    """IncrementalAlterConfigs operations (Kafka's ``AlterConfigOp.OpType`` ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2  # add comma-separated values to a list config
    SUBTRACT = 3  # remove them


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    key: str
    op: ConfigOpType
    value: str | None = None

    def __post_init__(self) -> None:
        if self.op is not ConfigOpType.DELETE and self.value is None:
            raise ValueError(f"{self.op.name} needs a value")


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    """``replace``: the legacy AlterConfigs, whose request is the resource's
    whole dynamic config: every key it does not SET is deleted."""

    type: ConfigResourceType
    name: str
    ops: tuple[AlterConfigOp, ...]
    replace: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsResourceResult:
    type: ConfigResourceType
    name: str
    error: ErrorCode
    message: str | None = None


def alter_configs(
    image: MetadataImage, request: AlterConfigsRequest
) -> ControllerResult[tuple[AlterConfigsResourceResult, ...]]:
    """IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and the legacy
    AlterConfigs (``replace``) on topics and the cluster default.

    Per resource, all-or-nothing: UNKNOWN_TOPIC_OR_PARTITION for a missing
    topic, INVALID_REQUEST for a broker resource named neither "" (the
    cluster default) nor a broker id, or a key given twice, INVALID_CONFIG for an unknown key, a bad
    value, or APPEND/SUBTRACT on a config that is not a list. APPEND adds
    the values not there yet to the current list (the default when the
    resource sets none); SUBTRACT removes them, as Kafka's
    ``ConfigurationControlManager``. ``validate_only`` answers without records.

    With KIP-966 ELR on, a change of ``min.insync.replicas`` clears the ELR
    and last known ELR of the partitions it governs (the topic's, or every
    partition for a cluster-level change), as Kafka's ClearElrRecord does: a
    lower minimum lets the HW move without the ELR members, so they may no
    longer hold every committed record. And, as in Kafka, the ELR rules read
    one minimum for the whole cluster: setting ``min.insync.replicas`` on one
    broker, or deleting the cluster-level one, is INVALID_CONFIG.
    """
    records: list[MetadataRecord] = []
    results = []
    elr = elr_enabled(image)
    for resource in request.resources:
        error, message, produced = _alter_one(image, resource, elr=elr)
        results.append(AlterConfigsResourceResult(resource.type, resource.name, error, message))
        if error is ErrorCode.none and not request.validate_only:
            records.extend(produced)
            if elr and any(r.name == MIN_INSYNC_REPLICAS for r in produced):
                records.extend(_clear_elr(image, resource))
    return ControllerResult(tuple(records), tuple(results))


def _clear_elr(image: MetadataImage, resource: AlterConfigsResource) -> list[MetadataRecord]:
    out: list[MetadataRecord] = []
    for topic, partition_id, part in image.iter_partitions():
        if resource.type is ConfigResourceType.TOPIC and topic.name != resource.name:
            continue
        if part.elr or part.last_known_elr:
            out.append(PartitionChangeRecord(
                partition_id=partition_id, topic_id=topic.topic_id,
                eligible_leader_replicas=() if part.elr else None,
                last_known_elr=() if part.last_known_elr else None))
    return out


def _alter_one(
    image: MetadataImage, resource: AlterConfigsResource, *, elr: bool = False
) -> tuple[ErrorCode, str | None, list[ConfigRecord]]:
    validators: Mapping[str, Validator]
    if resource.type is ConfigResourceType.TOPIC:
        if resource.name not in image.topic_ids:
            return ErrorCode.unknown_topic_or_partition, f"no topic {resource.name!r}", []
        validators = TOPIC_CONFIG_VALIDATORS
    else:
        if resource.name != "" and not (resource.name.isdigit() and resource.name.isascii()):
            return ErrorCode.invalid_request, f"Illegal broker ID: {resource.name!r}", []
        validators = BROKER_CONFIG_VALIDATORS
    keys = [op.key for op in resource.ops]
    if len(set(keys)) != len(keys):
        return ErrorCode.invalid_request, "a config key appears twice", []
    current = image.config(ConfigResource(resource.type, resource.name))
    produced = []
    for op in resource.ops:
        validator = validators.get(op.key)
        if validator is None and resource.type is ConfigResourceType.BROKER \
                and LISTENER_KEYSTORE_CONFIG.fullmatch(op.key):
            if resource.name == "":
                return (ErrorCode.invalid_request, "Cannot update these configs at default "
                        f"cluster level, broker id must be specified: {op.key}", [])
            validator = _not_empty
        if validator is None:
            return ErrorCode.invalid_config, f"Unknown config name: {op.key}", []
        if op.op is ConfigOpType.DELETE:
            if op.key in current:
                produced.append(ConfigRecord(resource.type, resource.name, op.key, None))
            continue
        assert op.value is not None  # AlterConfigOp.__post_init__
        value = op.value
        if op.op in (ConfigOpType.APPEND, ConfigOpType.SUBTRACT):
            if resource.type is not ConfigResourceType.TOPIC or op.key not in LIST_CONFIG_DEFAULTS:
                return (ErrorCode.invalid_config,
                        f"Can't {op.op.name} to key {op.key} because its type is not LIST.", [])
            value = _list_op(current.get(op.key, LIST_CONFIG_DEFAULTS[op.key]), op)
        problem = validator(value)
        if problem is not None:
            return ErrorCode.invalid_config, f"{op.key}: {problem}", []
        if current.get(op.key) != value:
            produced.append(ConfigRecord(resource.type, resource.name, op.key, value))
    if resource.replace:
        kept = set(keys)
        produced.extend(ConfigRecord(resource.type, resource.name, key, None)
                        for key in sorted(current) if key not in kept)
    if elr and resource.type is ConfigResourceType.BROKER:
        problem = _elr_min_isr_refusal(resource, produced)
        if problem is not None:
            return ErrorCode.invalid_config, problem, []
    return ErrorCode.none, None, produced


def _elr_min_isr_refusal(resource: AlterConfigsResource,
                         produced: list[ConfigRecord]) -> str | None:
    """With KIP-966 ELR on: why a broker resource's change of
    ``min.insync.replicas`` is refused, or None."""
    if resource.name != "":
        if any(op.key == MIN_INSYNC_REPLICAS for op in resource.ops):
            return (f"{MIN_INSYNC_REPLICAS} cannot be set for one broker while eligible "
                    "leader replicas are enabled (KIP-966); set it cluster-wide")
    elif any(r.name == MIN_INSYNC_REPLICAS and r.value is None for r in produced):
        return (f"the cluster-level {MIN_INSYNC_REPLICAS} cannot be removed while eligible "
                "leader replicas are enabled (KIP-966)")
    return None


def _list_op(current: str, op: AlterConfigOp) -> str:
    """APPEND or SUBTRACT ``op``'s comma-separated values on the list ``current``."""
    assert op.value is not None
    parts = [v for v in current.split(",") if v]
    for item in op.value.split(","):
        if op.op is ConfigOpType.APPEND and item not in parts:
            parts.append(item)
        elif op.op is ConfigOpType.SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)
