"""Topics, partitions, ISR and leaders: CreateTopics, CreatePartitions,
DeleteTopics, AlterPartition, and the elections that follow broker fencing,
unfencing and controlled shutdown.

After Kafka's ``ReplicationControlManager`` (design only). Every function is
a pure function of the image (plus config and inputs) returning a
`ControllerResult` or records; nothing here changes state.

Invariants the records keep (KIP-841), checked by the tests after every
command:

- a partition's leader is -1 or a usable broker (registered, unfenced, not
  in controlled shutdown);
- ISR members are usable, except that, with KIP-966 ELR off, the *last*
  ISR member of a leaderless partition stays even when fenced (it is the
  only replica known to hold every committed record). With ELR on
  (`metadata_quorum.features`), it leaves the ISR for the ELR, which
  `partition_change` keeps;
- leader epochs and partition epochs only increase.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.records import (
    NO_LEADER,
    ConfigRecord,
    ConfigResourceType,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from metadata_quorum.topic_names import has_collision_chars, topic_name_error, unify_collision_chars
from raftlog import kafka_uuid
from raftlog.net.errors import ErrorCode

from ._replay import image_after
from .configuration_control import (
    elr_min_isr,
    topic_config_error,
    unclean_leader_election_enabled,
)
from .partition_change import Election, ElectionOutcome, elect, isr_without
from .placement import PlacementBroker, PlacementError, place_replicas
from .reassignment import finish_if_complete, is_reassigning
from .result import ControllerConfig, ControllerResult

__all__ = [
    "AlterPartitionItem",
    "AlterPartitionItemResult",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "BrokerState",
    "CreatableTopic",
    "CreatableTopicResult",
    "CreatePartitionsRequest",
    "CreatePartitionsTopic",
    "CreatePartitionsTopicResult",
    "CreateTopicsRequest",
    "DeletableTopicResult",
    "DeleteTopicsRequest",
    "ElectLeadersPartitionResult",
    "ElectLeadersRequest",
    "ElectionType",
    "PartitionChangeQuota",
    "alter_partition",
    "balance_partition_leaders",
    "create_partitions",
    "create_topics",
    "delete_topics",
    "elect_leaders",
    "elect_unclean_leaders",
    "new_topic_id",
    "records_for_broker_leaving",
    "records_for_broker_unfenced",
]

MAX_REPLICATION_FACTOR = (1 << 15) - 1
#: Kafka's ``MAX_PARTITIONS_PER_BATCH``: one CreateTopics or CreatePartitions
#: request makes at most this many partitions (a hostile count must not build
#: millions of records in the controller).
MAX_PARTITIONS_PER_BATCH = 10_000
_TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
_DELETION_DISABLED = "Topic deletion is disabled."


class PartitionChangeQuota(Protocol):
    """A request's controller mutation quota (KIP-599,
    `data_plane.controller_mutation_quota`): charged once per topic, with
    the partitions it creates or deletes, after the topic's own checks
    passed (so a topic refused for another reason costs nothing), and before
    ``validate_only`` is looked at (Kafka charges a validation too)."""

    def charge(self, partitions: int) -> bool:
        """Take the partitions; False: refuse the topic with
        THROTTLING_QUOTA_EXCEEDED (nothing taken)."""
        ...


# --------------------------------------------------------------------------
# CreateTopics
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """One topic of a CreateTopics request.

    ``num_partitions``/``replication_factor`` -1 = the cluster default.
    ``assignments``, if given, is the replica list of partitions 0..n-1 (and
    then both counts must be -1).
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, ...], ...] = ()
    configs: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    validate_only: bool = False
    #: The client's mutation quota; None: unlimited.
    quota: PartitionChangeQuota | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class CreatableTopicResult:
    """Per-topic outcome; ``topic_id`` is None on error or with validate_only."""

    name: str
    error: ErrorCode
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


def new_topic_id(
    image: MetadataImage, config: ControllerConfig, name: str, next_offset: int,
    taken: set[uuid.UUID],
) -> uuid.UUID:
    """A topic id derived from the cluster id, the log offset and the name.

    Kafka draws topic ids at random; deriving them keeps commands pure and
    simulations reproducible, and offsets never repeat in one cluster's log,
    so ids never repeat either. A collision, a reserved id or one whose text
    starts with ``-`` (see :mod:`raftlog.kafka_uuid`) re-derives with a counter.
    """
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog:{config.cluster_id}")
    attempt = 0
    while True:
        candidate = uuid.uuid5(namespace, f"{next_offset}/{name}/{attempt}")
        if (kafka_uuid.usable(candidate) and candidate not in image.topics
                and candidate not in taken):
            return candidate
        attempt += 1


def create_topics(
    image: MetadataImage,
    request: CreateTopicsRequest,
    config: ControllerConfig,
    *,
    next_offset: int,
) -> ControllerResult[tuple[CreatableTopicResult, ...]]:
    """CreateTopics: validate each topic; place replicas; Topic, Config and Partition records.

    ``next_offset`` is the metadata log offset the first record will get
    (it seeds topic ids). Per-topic errors, in the order checked:

    - INVALID_REQUEST: the name appears twice in the request; assignments
      given together with a partition count or replication factor;
    - INVALID_TOPIC_EXCEPTION: illegal name, or it collides ('.' vs '_') with
      an existing topic or one created earlier in the request;
    - TOPIC_ALREADY_EXISTS;
    - INVALID_REPLICA_ASSIGNMENT: a manual assignment that is empty, has
      duplicate or unregistered brokers, uneven lengths, or no usable broker;
    - INVALID_PARTITIONS: a partition count of 0 or below -1;
    - INVALID_REPLICATION_FACTOR: 0, below -1, above 32767, or above the
      number of usable (unfenced, not shutting down) brokers;
    - INVALID_CONFIG: an unknown topic config or a bad value.

    More than `MAX_PARTITIONS_PER_BATCH` partitions in all: POLICY_VIOLATION
    for every topic, as Kafka.
    """
    requested = sum(
        len(t.assignments) if t.assignments
        else config.default_num_partitions if t.num_partitions == -1
        else max(t.num_partitions, 0)
        for t in request.topics
    )
    if requested > MAX_PARTITIONS_PER_BATCH:
        return ControllerResult((), tuple(
            CreatableTopicResult(t.name, ErrorCode.policy_violation, _TOO_MANY_PARTITIONS)
            for t in request.topics))
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    usable = sorted(
        (b for b in image.brokers.values() if b.usable), key=lambda b: b.broker_id
    )
    placement_brokers = [PlacementBroker(b.broker_id, b.rack) for b in usable]
    accepted_classes: set[str] = set()
    existing_classes = {
        unify_collision_chars(name) for name in image.topic_ids if has_collision_chars(name)
    }
    taken_ids: set[uuid.UUID] = set()
    records: list[MetadataRecord] = []
    results = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(CreatableTopicResult(
                topic.name, ErrorCode.invalid_request, "Duplicate topic name."))
            continue
        outcome = _create_one(
            image, topic, config, placement_brokers, existing_classes | accepted_classes,
        )
        if isinstance(outcome, CreatableTopicResult):
            results.append(outcome)
            continue
        assignments, configs = outcome
        if request.quota is not None and not request.quota.charge(len(assignments)):
            results.append(CreatableTopicResult(topic.name, ErrorCode.throttling_quota_exceeded))
            continue
        accepted_classes.add(unify_collision_chars(topic.name))
        if request.validate_only:
            results.append(CreatableTopicResult(
                topic.name, ErrorCode.none, None, None, len(assignments), len(assignments[0])))
            continue
        topic_id = new_topic_id(image, config, topic.name, next_offset, taken_ids)
        taken_ids.add(topic_id)
        records.append(TopicRecord(topic.name, topic_id))
        records.extend(
            ConfigRecord(ConfigResourceType.TOPIC, topic.name, key, value)
            for key, value in configs
        )
        for partition_id, replicas in enumerate(assignments):
            isr = tuple(r for r in replicas if image.is_usable(r))
            records.append(PartitionRecord(
                partition_id=partition_id, topic_id=topic_id, replicas=replicas, isr=isr,
                leader=isr[0],  # the first usable replica: preferred when all are up
            ))
        results.append(CreatableTopicResult(
            topic.name, ErrorCode.none, None, topic_id, len(assignments), len(assignments[0])))
    return ControllerResult(tuple(records), tuple(results))


def _create_one(
    image: MetadataImage,
    topic: CreatableTopic,
    config: ControllerConfig,
    brokers: list[PlacementBroker],
    collision_classes: set[str],
) -> CreatableTopicResult | tuple[list[tuple[int, ...]], list[tuple[str, str]]]:
    def fail(code: ErrorCode, message: str) -> CreatableTopicResult:
        return CreatableTopicResult(topic.name, code, message)

    name_error = topic_name_error(topic.name)
    if name_error is not None:
        return fail(ErrorCode.invalid_topic_exception, name_error)
    if topic.name in image.topic_ids:
        return fail(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
    if has_collision_chars(topic.name) and unify_collision_chars(topic.name) in collision_classes:
        return fail(
            ErrorCode.invalid_topic_exception,
            f"Topic '{topic.name}' collides with an existing topic: '.' and '_' are "
            "interchangeable in metric names",
        )
    assignments: list[tuple[int, ...]]
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return fail(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        problem = _manual_assignment_error(image, topic.assignments)
        if problem is not None:
            return fail(ErrorCode.invalid_replica_assignment, problem)
        assignments = list(topic.assignments)
    else:
        num_partitions = topic.num_partitions
        if num_partitions == -1:
            num_partitions = config.default_num_partitions
        if num_partitions < 1:
            return fail(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
        rf = topic.replication_factor
        if rf == -1:
            rf = config.default_replication_factor
        if rf < 1 or rf > MAX_REPLICATION_FACTOR:
            return fail(
                ErrorCode.invalid_replication_factor,
                f"Replication factor must be larger than 0 and at most {MAX_REPLICATION_FACTOR}.",
            )
        if rf > len(brokers):
            return fail(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {rf} time(s): The target replication factor "
                f"of {rf} cannot be reached because only {len(brokers)} broker(s) are registered.",
            )
        seed = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog-placement:{topic.name}").int
        try:
            assignments = place_replicas(
                brokers, num_partitions, rf, start=seed & 0xFFFF_FFFF, shift=seed >> 96
            )
        except PlacementError as exc:  # unreachable after the checks above; be explicit
            return fail(ErrorCode.invalid_replication_factor, str(exc))
    configs = []
    seen: set[str] = set()
    for key, value in topic.configs:
        if key in seen:
            return fail(ErrorCode.invalid_config, f"Config {key} is given twice")
        seen.add(key)
        problem = topic_config_error(key, value)
        if problem is not None:
            return fail(ErrorCode.invalid_config, problem)
        assert value is not None  # topic_config_error rejects None
        configs.append((key, value))
    return assignments, configs


def _manual_assignment_error(
    image: MetadataImage, assignments: tuple[tuple[int, ...], ...]
) -> str | None:
    width = len(assignments[0])
    for partition_id, replicas in enumerate(assignments):
        if not replicas:
            return f"The manual partition assignment for partition {partition_id} is empty."
        if len(replicas) != width:
            return (
                "The manual partition assignment includes a partition with "
                f"{len(replicas)} replica(s), but this is not consistent with previous "
                f"partitions, which have {width} replica(s)."
            )
        if len(set(replicas)) != len(replicas):
            return f"The manual partition assignment for partition {partition_id} has duplicates."
        unknown = [r for r in replicas if r not in image.brokers]
        if unknown:
            return f"The manual partition assignment includes unregistered broker(s) {unknown}."
        if not any(image.is_usable(r) for r in replicas):
            return (
                f"All brokers specified in the manual partition assignment for partition "
                f"{partition_id} are fenced or in controlled shutdown."
            )
    return None


# --------------------------------------------------------------------------
# CreatePartitions
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """One topic of a CreatePartitions request: grow ``name`` to ``count``
    partitions; ``assignments``, if given, are the replica lists of the new
    partitions, in order."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...]
    validate_only: bool = False
    #: The client's mutation quota; None: unlimited.
    quota: PartitionChangeQuota | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopicResult:
    name: str
    error: ErrorCode
    message: str | None = None


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest
) -> ControllerResult[tuple[CreatePartitionsTopicResult, ...]]:
    """CreatePartitions (KIP-195): new partitions for existing topics.

    The new partitions get the topic's replication factor, placed over the
    usable brokers like a new topic's (or as ``assignments`` say), with the
    usable replicas as ISR and the first of them as leader. Per-topic
    errors, in the order checked:

    - INVALID_REQUEST: the topic appears twice in the request;
    - UNKNOWN_TOPIC_OR_PARTITION: no such topic;
    - INVALID_PARTITIONS: ``count`` is not above the current partition count;
    - INVALID_REPLICA_ASSIGNMENT: not one assignment per new partition, or
      one with another replication factor, duplicates, unregistered brokers
      or no usable broker;
    - INVALID_REPLICATION_FACTOR: fewer usable brokers than the topic's
      replication factor;
    - REASSIGNMENT_IN_PROGRESS: a partition of the topic is being reassigned
      (its replica count is not the topic's then).

    More than `MAX_PARTITIONS_PER_BATCH` new partitions in all:
    POLICY_VIOLATION for every topic.

    Existing partitions are not touched (Kafka does not move keys either:
    a keyed producer's partitioning changes with the count).
    """
    added = 0
    for topic in request.topics:
        found = image.topic_by_name(topic.name)
        if found is not None:
            added += max(0, topic.count - len(found.partitions))
    if added > MAX_PARTITIONS_PER_BATCH:
        return ControllerResult((), tuple(
            CreatePartitionsTopicResult(t.name, ErrorCode.policy_violation, _TOO_MANY_PARTITIONS)
            for t in request.topics))
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    usable = sorted((b for b in image.brokers.values() if b.usable), key=lambda b: b.broker_id)
    placement_brokers = [PlacementBroker(b.broker_id, b.rack) for b in usable]
    records: list[MetadataRecord] = []
    results = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(CreatePartitionsTopicResult(
                topic.name, ErrorCode.invalid_request, "Duplicate topic name."))
            continue
        outcome = _new_partitions(image, topic, placement_brokers, request.quota)
        if isinstance(outcome, CreatePartitionsTopicResult):
            results.append(outcome)
            continue
        topic_id, first, assignments = outcome
        results.append(CreatePartitionsTopicResult(topic.name, ErrorCode.none))
        if request.validate_only:
            continue
        for offset, replicas in enumerate(assignments):
            isr = tuple(r for r in replicas if image.is_usable(r))
            records.append(PartitionRecord(
                partition_id=first + offset, topic_id=topic_id, replicas=replicas, isr=isr,
                leader=isr[0],
            ))
    return ControllerResult(tuple(records), tuple(results))


def _new_partitions(
    image: MetadataImage, topic: CreatePartitionsTopic, brokers: list[PlacementBroker],
    quota: PartitionChangeQuota | None = None,
) -> CreatePartitionsTopicResult | tuple[uuid.UUID, int, list[tuple[int, ...]]]:
    def fail(code: ErrorCode, message: str) -> CreatePartitionsTopicResult:
        return CreatePartitionsTopicResult(topic.name, code, message)

    found = image.topic_by_name(topic.name)
    if found is None:
        return fail(ErrorCode.unknown_topic_or_partition,
                    f"This server does not host this topic: {topic.name}")
    current = len(found.partitions)
    if topic.count < current:
        return fail(ErrorCode.invalid_partitions,
                    f"The topic {topic.name} currently has {current} partition(s); "
                    f"{topic.count} would not be an increase.")
    if topic.count == current:
        return fail(ErrorCode.invalid_partitions,
                    f"Topic already has {current} partition(s).")
    if any(is_reassigning(p) for p in found.partitions.values()):
        return fail(ErrorCode.reassignment_in_progress,
                    f"A partition reassignment of {topic.name} is in progress; add "
                    "partitions once it has finished or been cancelled.")
    additional = topic.count - current
    rf = len(found.partitions[min(found.partitions)].replicas)
    if topic.assignments is not None and len(topic.assignments) != additional:
        return fail(ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.")
    # Charged where Kafka charges it: before the assignment and placement
    # checks, which can still refuse a topic the quota has paid for.
    if quota is not None and not quota.charge(additional):
        return CreatePartitionsTopicResult(topic.name, ErrorCode.throttling_quota_exceeded)
    if topic.assignments is not None:
        problem = _manual_assignment_error(image, topic.assignments)
        if problem is None and len(topic.assignments[0]) != rf:
            problem = (f"The manual partition assignment includes a partition with "
                       f"{len(topic.assignments[0])} replica(s), but this is not consistent "
                       f"with previous partitions, which have {rf} replica(s).")
        if problem is not None:
            return fail(ErrorCode.invalid_replica_assignment, problem)
        return found.topic_id, current, list(topic.assignments)
    if rf > len(brokers):
        return fail(ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {rf} time(s): The target replication "
                    f"factor of {rf} cannot be reached because only {len(brokers)} broker(s) "
                    "are usable.")
    # The topic's own placement sequence, continued past its current partitions.
    seed = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog-placement:{topic.name}").int
    try:
        placed = place_replicas(
            brokers, topic.count, rf, start=seed & 0xFFFF_FFFF, shift=seed >> 96)
    except PlacementError as exc:  # unreachable after the check above; be explicit
        return fail(ErrorCode.invalid_replication_factor, str(exc))
    return found.topic_id, current, placed[current:]


# --------------------------------------------------------------------------
# DeleteTopics
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    """Topics to delete, by name and/or by id (each entry resolved on its own)."""

    names: tuple[str, ...] = ()
    topic_ids: tuple[uuid.UUID, ...] = ()
    #: The client's mutation quota; None: unlimited.
    quota: PartitionChangeQuota | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class DeletableTopicResult:
    """One entry's outcome; ``name``/``topic_id`` filled in when known."""

    name: str | None
    topic_id: uuid.UUID | None
    error: ErrorCode
    message: str | None = None


def delete_topics(
    image: MetadataImage, request: DeleteTopicsRequest, config: ControllerConfig | None = None
) -> ControllerResult[tuple[DeletableTopicResult, ...]]:
    """DeleteTopics by name and id: one RemoveTopic record per topic.

    Errors per entry: UNKNOWN_TOPIC_OR_PARTITION (no topic of that name),
    UNKNOWN_TOPIC_ID (no topic with that id, or the zero id), INVALID_REQUEST
    (the same topic named more than once in the request, by name or id).
    With ``delete.topic.enable=false`` every entry is TOPIC_DELETION_DISABLED
    and nothing is deleted.
    """
    if config is not None and not config.delete_topic_enable:
        return ControllerResult((), tuple(
            [DeletableTopicResult(name, None, ErrorCode.topic_deletion_disabled,
                                  _DELETION_DISABLED) for name in request.names]
            + [DeletableTopicResult(None, topic_id, ErrorCode.topic_deletion_disabled,
                                    _DELETION_DISABLED) for topic_id in request.topic_ids]))
    resolved: list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]] = []
    for name in request.names:
        topic_id = image.topic_ids.get(name)
        if topic_id is None:
            resolved.append((name, None, ErrorCode.unknown_topic_or_partition,
                             f"no topic named {name!r}"))
        else:
            resolved.append((name, topic_id, ErrorCode.none, None))
    for topic_id in request.topic_ids:
        topic = image.topics.get(topic_id)
        if topic is None:
            resolved.append((None, topic_id, ErrorCode.unknown_topic_id,
                             f"no topic with id {topic_id}"))
        else:
            resolved.append((topic.name, topic_id, ErrorCode.none, None))
    seen: dict[uuid.UUID, int] = {}
    for _name, topic_id, error, _message in resolved:
        if error is ErrorCode.none and topic_id is not None:
            seen[topic_id] = seen.get(topic_id, 0) + 1
    records: list[MetadataRecord] = []
    results = []
    for entry_name, entry_id, error, message in resolved:
        if error is ErrorCode.none and entry_id is not None:
            if seen[entry_id] > 1:
                error = ErrorCode.invalid_request
                message = "Duplicate topic in request."
            elif request.quota is not None and not request.quota.charge(
                    len(image.topics[entry_id].partitions)):
                error = ErrorCode.throttling_quota_exceeded
            else:
                records.append(RemoveTopicRecord(entry_id))
        results.append(DeletableTopicResult(entry_name, entry_id, error, message))
    return ControllerResult(tuple(records), tuple(results))


# --------------------------------------------------------------------------
# AlterPartition (KIP-497, KIP-841, KIP-903)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerState:
    """A proposed ISR member with the broker epoch the leader saw it fetch with
    (KIP-903); -1 = unknown (older request versions), not checked."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    topic_id: uuid.UUID
    partition_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[BrokerState, ...]
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionItemResult:
    """On success: the partition's state once the change is replayed."""

    topic_id: uuid.UUID
    partition_id: int
    error: ErrorCode
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    error: ErrorCode
    partitions: tuple[AlterPartitionItemResult, ...] = ()


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest,
    config: ControllerConfig | None = None,
) -> ControllerResult[AlterPartitionResponse]:
    """AlterPartition from a partition leader: change the ISR (and recovery state).

    Top-level STALE_BROKER_EPOCH if the sender is not registered at
    ``broker_epoch``. Per partition, in the order checked:

    - UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION;
    - FENCED_LEADER_EPOCH: the leader epoch is not the current one;
    - INVALID_REQUEST: the sender is not the leader;
    - INVALID_UPDATE_VERSION: the partition epoch is not the current one
      (a concurrent change won; the leader must refresh its state);
    - INVALID_REQUEST: RECOVERED -> RECOVERING; an empty ISR or duplicates;
      a member outside the replicas; the leader not in the ISR; more than
      one member while RECOVERING (KIP-704);
    - INELIGIBLE_REPLICA: a member is unregistered, fenced or in controlled
      shutdown (KIP-841), or its broker epoch in the request is not its
      current one (KIP-903: a broker restarted with an empty disk must not
      be re-added by an old request).

    A request that changes nothing answers with the current state and no
    record. With KIP-966 ELR on, a shrink below ``min.insync.replicas``
    moves the members that leave to the ELR, and an expansion back to it
    clears the ELR (`partition_change`).
    """
    config = ControllerConfig() if config is None else config
    sender = image.brokers.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        return ControllerResult((), AlterPartitionResponse(ErrorCode.stale_broker_epoch))
    records: list[MetadataRecord] = []
    results = []
    for item in request.partitions:
        record, result = _alter_one(image, request.broker_id, item, config)
        if record is not None:
            records.append(record)
        results.append(result)
    return ControllerResult(tuple(records), AlterPartitionResponse(ErrorCode.none, tuple(results)))


def _alter_one(
    image: MetadataImage, sender: int, item: AlterPartitionItem, config: ControllerConfig
) -> tuple[PartitionChangeRecord | None, AlterPartitionItemResult]:
    def fail(code: ErrorCode) -> tuple[None, AlterPartitionItemResult]:
        return None, AlterPartitionItemResult(item.topic_id, item.partition_id, code)

    topic = image.topics.get(item.topic_id)
    if topic is None:
        return fail(ErrorCode.unknown_topic_id)
    part = topic.partitions.get(item.partition_id)
    if part is None:
        return fail(ErrorCode.unknown_topic_or_partition)
    if item.leader_epoch != part.leader_epoch:
        return fail(ErrorCode.fenced_leader_epoch)
    if sender != part.leader:
        return fail(ErrorCode.invalid_request)
    if item.partition_epoch != part.partition_epoch:
        return fail(ErrorCode.invalid_update_version)
    if (
        part.leader_recovery_state is LeaderRecoveryState.RECOVERED
        and item.leader_recovery_state is LeaderRecoveryState.RECOVERING
    ):
        return fail(ErrorCode.invalid_request)
    new_isr = tuple(m.broker_id for m in item.new_isr)
    if (
        not new_isr
        or len(set(new_isr)) != len(new_isr)
        or not set(new_isr) <= set(part.replicas)
        or part.leader not in new_isr
        or (item.leader_recovery_state is LeaderRecoveryState.RECOVERING and len(new_isr) > 1)
    ):
        return fail(ErrorCode.invalid_request)
    for member in item.new_isr:
        broker = image.brokers.get(member.broker_id)
        if broker is None or not broker.usable:
            return fail(ErrorCode.ineligible_replica)
        if member.broker_epoch != -1 and member.broker_epoch != broker.epoch:
            return fail(ErrorCode.ineligible_replica)
    record, _outcome = elect(
        item.topic_id, item.partition_id, part, is_acceptable=image.is_usable,
        target_isr=new_isr, target_recovery_state=item.leader_recovery_state,
        min_isr=elr_min_isr(image, topic.name, config),
    )
    after = part if record is None else part.merge(record)
    # The ISR change may complete a reassignment (KIP-455): one record for both.
    finished = finish_if_complete(item.topic_id, item.partition_id, part, after, image.is_usable)
    if finished is not None:
        record, after = finished, part.merge(finished)
    error = ErrorCode.none if after.leader == part.leader else ErrorCode.new_leader_elected
    return record, AlterPartitionItemResult(
        item.topic_id, item.partition_id, error, after.leader, after.leader_epoch, after.isr,
        after.partition_epoch, after.leader_recovery_state,
    )


# --------------------------------------------------------------------------
# Elections driven by broker state
# --------------------------------------------------------------------------


def records_for_broker_leaving(
    image: MetadataImage, broker_id: int, config: ControllerConfig, *,
    unclean_shutdown: bool = False,
) -> list[PartitionChangeRecord]:
    """Partition changes for a broker about to be fenced, shut down or unregistered.

    For every partition that has it as leader or in the ISR: drop it from the
    ISR (unless it is the last member and KIP-966 ELR is off) and, if it led,
    elect a new leader from the ISR among usable brokers other than it (then
    from the ELR, when the ISR is empty); when none is left and
    ``unclean.leader.election.enable`` holds for the topic, elect any usable
    replica (KIP-704 RECOVERING); otherwise the partition goes leaderless.

    ``unclean_shutdown``: the broker is registering again after a shutdown
    that was not clean (it may have lost records it had acknowledged as a
    follower), so it also leaves every ELR, and joins none (KIP-966).
    """
    def acceptable(b: int) -> bool:
        return b != broker_id and image.is_usable(b)

    out = []
    for topic, partition_id, part in image.iter_partitions():
        if part.leader != broker_id and broker_id not in part.isr and not (
                unclean_shutdown and broker_id in part.elr):
            continue
        min_isr = elr_min_isr(image, topic.name, config)
        record, _outcome = elect(
            topic.topic_id, partition_id, part, is_acceptable=acceptable,
            target_isr=isr_without(part.isr, broker_id, elr=min_isr is not None),
            unclean=unclean_leader_election_enabled(image, topic.name, config),
            min_isr=min_isr,
            unclean_shutdown=frozenset((broker_id,)) if unclean_shutdown else frozenset(),
        )
        if record is not None:
            out.append(record)
    return out


def records_for_broker_unfenced(
    image: MetadataImage, broker_id: int, config: ControllerConfig
) -> list[PartitionChangeRecord]:
    """Elections for leaderless partitions that ``broker_id`` (now usable) can lead.

    ``image`` must already show the broker unfenced. Cleanly if it is in the
    ISR (or in the ELR of an empty ISR); uncleanly only where the topic
    allows it, or as the last known leader of a partition whose ISR and ELR
    are empty (KIP-966).
    """
    out = []
    for topic, partition_id, part in image.iter_partitions():
        if part.has_leader or broker_id not in part.replicas:
            continue
        record, _outcome = elect(
            topic.topic_id, partition_id, part, is_acceptable=image.is_usable,
            unclean=unclean_leader_election_enabled(image, topic.name, config),
            min_isr=elr_min_isr(image, topic.name, config),
        )
        if record is not None:
            out.append(record)
    return out


def elect_unclean_leaders(
    image: MetadataImage, config: ControllerConfig
) -> ControllerResult[int]:
    """Periodic: elect leaders for leaderless partitions where unclean election is
    allowed (e.g. just enabled by a config change). Response: partitions changed."""
    records = []
    for topic, partition_id, part in image.iter_partitions():
        if part.has_leader or not unclean_leader_election_enabled(image, topic.name, config):
            continue
        record, _outcome = elect(
            topic.topic_id, partition_id, part, is_acceptable=image.is_usable, unclean=True,
            min_isr=elr_min_isr(image, topic.name, config),
        )
        if record is not None:
            records.append(record)
    return ControllerResult(tuple(records), len(records))


def balance_partition_leaders(
    image: MetadataImage, config: ControllerConfig, *, max_records: int = 1000
) -> ControllerResult[int]:
    """Preferred-leader rebalancing (``auto.leader.rebalance.enable``).

    A partition is imbalanced when its leader is not its preferred replica
    but the preferred replica is usable and in the ISR. For each broker,
    imbalance = imbalanced partitions it prefers / partitions it prefers;
    when that exceeds ``leader.imbalance.per.broker.percentage`` (Kafka's
    default 10%), every imbalanced partition it prefers moves back to it.
    Response: partitions moved. At most ``max_records`` records per call.
    """
    if not config.auto_leader_rebalance_enable:
        return ControllerResult((), 0)
    preferred_total: dict[int, int] = {}
    imbalanced: dict[int, list[tuple[uuid.UUID, int, PartitionRegistration, str]]] = {}
    for topic, partition_id, part in image.iter_partitions():
        preferred = part.preferred_leader
        preferred_total[preferred] = preferred_total.get(preferred, 0) + 1
        if part.leader != preferred and preferred in part.isr and image.is_usable(preferred):
            imbalanced.setdefault(preferred, []).append(
                (topic.topic_id, partition_id, part, topic.name))
    threshold = config.leader_imbalance_per_broker_percentage / 100.0
    records: list[MetadataRecord] = []
    for broker_id in sorted(imbalanced):
        if len(imbalanced[broker_id]) / preferred_total[broker_id] <= threshold:
            continue
        for topic_id, partition_id, part, name in imbalanced[broker_id]:
            if len(records) >= max_records:
                break
            record, outcome = elect(
                topic_id, partition_id, part, is_acceptable=image.is_usable,
                election=Election.PREFERRED, min_isr=elr_min_isr(image, name, config),
            )
            if record is not None and outcome is ElectionOutcome.CLEAN:
                records.append(record)
    return ControllerResult(tuple(records), len(records))


# --------------------------------------------------------------------------
# ElectLeaders
# --------------------------------------------------------------------------


class ElectionType(IntEnum):
    """ElectLeaders' ``election_type`` (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    """ElectLeaders (KIP-183, KIP-460): ``partitions`` as (topic, partition)
    pairs, or None for every partition of every topic."""

    election_type: ElectionType
    partitions: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class ElectLeadersPartitionResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None


def elect_leaders(
    image: MetadataImage, request: ElectLeadersRequest, config: ControllerConfig | None = None,
) -> ControllerResult[tuple[ElectLeadersPartitionResult, ...]]:
    """ElectLeaders (kafka-leader-election.sh), one result per partition asked for.

    PREFERRED moves leadership to the first replica when it is in the ISR
    and usable: ELECTION_NOT_NEEDED if it leads already,
    PREFERRED_LEADER_NOT_AVAILABLE if it cannot lead and the current leader
    stays. A leaderless partition gets any clean leader (Kafka's builder
    does the same). UNCLEAN elects a leader for a leaderless partition, from
    outside the ISR if no ISR member is usable (it may lack acknowledged
    records: the operator's explicit choice, whatever the topic's
    ``unclean.leader.election.enable``): ELECTION_NOT_NEEDED if it has a
    leader, ELIGIBLE_LEADERS_NOT_AVAILABLE if no replica is usable. Unknown
    topics or partitions are UNKNOWN_TOPIC_OR_PARTITION. With ``partitions``
    None every partition is tried and only those that needed an election are
    answered (Kafka's rule); a partition named twice is answered once."""
    config = ControllerConfig() if config is None else config
    records: list[MetadataRecord] = []
    results: list[ElectLeadersPartitionResult] = []
    if request.partitions is None:
        for topic, partition_id, _part in sorted(
                image.iter_partitions(), key=lambda t: (t[0].name, t[1])):
            result = _elect_one(image, request.election_type, topic.name, partition_id, records,
                                config)
            if result.error is not ErrorCode.election_not_needed:
                results.append(result)
    else:
        # A partition named twice is elected (and answered) once: both
        # elections would be computed against the same image.
        for topic_name, partition_id in dict.fromkeys(request.partitions):
            results.append(_elect_one(image, request.election_type, topic_name, partition_id,
                                      records, config))
    return ControllerResult(tuple(records), tuple(results))


def _elect_one(
    image: MetadataImage, election_type: ElectionType, topic_name: str, partition_id: int,
    records: list[MetadataRecord], config: ControllerConfig,
) -> ElectLeadersPartitionResult:
    def answer(error: ErrorCode, message: str | None = None) -> ElectLeadersPartitionResult:
        return ElectLeadersPartitionResult(topic_name, partition_id, error, message)

    topic = image.topic_by_name(topic_name)
    if topic is None:
        return answer(ErrorCode.unknown_topic_or_partition, f"no topic {topic_name}")
    part = topic.partitions.get(partition_id)
    if part is None:
        return answer(ErrorCode.unknown_topic_or_partition,
                      f"no partition {topic_name}-{partition_id}")
    preferred = election_type is ElectionType.PREFERRED
    if (part.leader == part.preferred_leader) if preferred else part.has_leader:
        return answer(ErrorCode.election_not_needed, None)
    record, _outcome = elect(
        topic.topic_id, partition_id, part, is_acceptable=image.is_usable,
        election=Election.PREFERRED if preferred else Election.ONLINE, unclean=not preferred,
        min_isr=elr_min_isr(image, topic_name, config),
    )
    if record is None:
        if preferred:
            return answer(ErrorCode.preferred_leader_not_available,
                          f"preferred replica {part.preferred_leader} of "
                          f"{topic_name}-{partition_id} is not in the ISR or not usable")
        return answer(ErrorCode.eligible_leaders_not_available,
                      f"no replica of {topic_name}-{partition_id} is usable")
    records.append(record)
    return answer(ErrorCode.none)


def records_for_brokers_leaving(
    image: MetadataImage,
    broker_ids: list[int],
    config: ControllerConfig,
    marker: Callable[[int], MetadataRecord],
) -> list[MetadataRecord]:
    """For each broker in turn: its partition changes, then ``marker(broker_id)``
    (e.g. its FenceBroker record); later brokers see the earlier records."""
    records: list[MetadataRecord] = []
    current = image
    for broker_id in broker_ids:
        step: list[MetadataRecord] = [*records_for_broker_leaving(current, broker_id, config)]
        step.append(marker(broker_id))
        current = image_after(current, step)
        records.extend(step)
    return records
