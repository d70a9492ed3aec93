"""Partition reassignment (KIP-455): AlterPartitionReassignments,
ListPartitionReassignments, and finishing a reassignment once its target
replicas are all in sync.

After Kafka's ``PartitionReassignmentReplicas``, ``PartitionReassignmentRevert``
and the reassignment steps of ``PartitionChangeBuilder`` (design only). Every
function is pure: it reads the image and returns records.

A partition with replicas ``R`` moved to a target ``T``:

1. **Start.** replicas = ``T`` then ``R - T`` (the target first, so the
   preferred leader is ``T``'s first broker), adding = ``T - R``, removing =
   ``R - T``. Leader and ISR stay. A broker in adding opens the replica and
   fetches from the leader like any follower; the leader adds it to the ISR
   once it has caught up (AlterPartition).
2. **Finish**, as soon as every broker of ``T`` is in the ISR (at the start
   already, or in the AlterPartition that adds the last): replicas = ``T``,
   ISR = ISR ∩ ``T``, adding = removing = (). The leader stays if it is in
   ``T``; otherwise the first usable broker of ``T`` in the ISR leads. If
   any replica is removed the leader epoch is bumped, even with the same
   leader, so that a removed replica is fenced (Kafka's rule). Brokers no
   longer assigned delete their replica when they see the record.
3. **Cancel** (a null target): replicas = the current list minus adding
   (so ``R``'s brokers, in the order step 1 gave them: the list encodes the
   target's order, not the old one; Kafka's revert does the same), ISR minus
   adding, adding = removing = (); a leader from the adding brokers hands
   over to the first usable ISR member left. Refused when no broker of the
   original assignment is in the ISR: cancelling then could only elect a
   replica that may lack acknowledged records.

A new target while one is in progress starts from the current replicas
(adding and removing brokers included), as Kafka's does; so naming the
original replicas again is another way to cancel. Acks=all produce keeps
its meaning throughout: the high watermark is the minimum over the ISR, and
a broker joins the ISR only by catching up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
)
from raftlog.net.errors import ErrorCode

from .result import ControllerResult

__all__ = [
    "AlterReassignmentsRequest",
    "ListReassignmentsRequest",
    "OngoingReassignment",
    "ReassignmentResult",
    "alter_partition_reassignments",
    "finish_if_complete",
    "is_reassigning",
    "list_partition_reassignments",
]


@dataclass(frozen=True, slots=True)
class AlterReassignmentsRequest:
    """``partitions``: (topic, partition, target replicas or None to cancel).

    ``allow_replication_factor_change`` False (KIP-860) refuses a target of
    another size than the partition's assignment."""

    partitions: tuple[tuple[str, int, tuple[int, ...] | None], ...]
    allow_replication_factor_change: bool = True


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ListReassignmentsRequest:
    """``topics``: (topic, partitions) pairs, or None for every partition."""

    topics: tuple[tuple[str, tuple[int, ...]], ...] | None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def is_reassigning(part: PartitionRegistration) -> bool:
    return bool(part.adding_replicas or part.removing_replicas)


def _original(part: PartitionRegistration) -> tuple[int, ...]:
    """The assignment the reassignment started from (replicas minus adding)."""
    adding = set(part.adding_replicas)
    return tuple(b for b in part.replicas if b not in adding)


def _target(part: PartitionRegistration) -> tuple[int, ...]:
    removing = set(part.removing_replicas)
    return tuple(b for b in part.replicas if b not in removing)


def _record(
    topic_id: uuid.UUID,
    partition_id: int,
    before: PartitionRegistration,
    *,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    leader: int,
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    bump_leader_epoch: bool,
    recovery: LeaderRecoveryState | None = None,
) -> PartitionChangeRecord | None:
    """The record taking ``before`` to the given state (only changed fields),
    or None if nothing changes. Setting the leader field bumps the leader
    epoch on replay, so it is set when the leader changes or when
    ``bump_leader_epoch``."""
    set_leader = leader != before.leader or bump_leader_epoch
    set_recovery = recovery is not None and recovery != before.leader_recovery_state
    # KIP-966 sets keep to the replicas (and the ELR out of the ISR).
    kept, in_isr = set(replicas), set(isr)
    elr = tuple(b for b in before.elr if b in kept and b not in in_isr)
    last_known_elr = tuple(b for b in before.last_known_elr if b in kept)
    fields_changed = (
        replicas != before.replicas or isr != before.isr or set_leader or set_recovery
        or adding != before.adding_replicas or removing != before.removing_replicas
        or elr != before.elr or last_known_elr != before.last_known_elr
    )
    if not fields_changed:
        return None
    return PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        isr=isr if isr != before.isr else None,
        leader=leader if set_leader else NO_LEADER_CHANGE,
        replicas=replicas if replicas != before.replicas else None,
        adding_replicas=adding if adding != before.adding_replicas else None,
        removing_replicas=removing if removing != before.removing_replicas else None,
        leader_recovery_state=int(recovery) if set_recovery and recovery is not None else -1,
        eligible_leader_replicas=elr if elr != before.elr else None,
        last_known_elr=last_known_elr if last_known_elr != before.last_known_elr else None,
    )


def finish_if_complete(
    topic_id: uuid.UUID,
    partition_id: int,
    before: PartitionRegistration,
    during: PartitionRegistration,
    is_acceptable: Callable[[int], bool],
) -> PartitionChangeRecord | None:
    """If ``during`` (``before`` with a change applied, e.g. an ISR
    expansion) is reassigning and its whole target is in the ISR: the one
    record taking ``before`` to the finished assignment (step 2). None if it
    is not reassigning, not complete, or no target broker in the ISR can
    lead."""
    if not is_reassigning(during):
        return None
    target = _target(during)
    in_isr = set(during.isr)
    if not all(b in in_isr for b in target):
        return None
    in_target = set(target)
    isr = tuple(b for b in during.isr if b in in_target)
    leader = during.leader
    if leader not in in_target or not is_acceptable(leader):
        leader = next((b for b in target if b in in_isr and is_acceptable(b)), NO_LEADER)
        if leader == NO_LEADER:
            return None
    return _record(
        topic_id, partition_id, before, replicas=target, isr=isr, leader=leader,
        adding=(), removing=(), bump_leader_epoch=bool(during.removing_replicas),
        recovery=during.leader_recovery_state,
    )


def alter_partition_reassignments(
    image: MetadataImage, request: AlterReassignmentsRequest
) -> ControllerResult[tuple[ReassignmentResult, ...]]:
    """AlterPartitionReassignments (kafka-reassign-partitions.sh --execute
    and --cancel), one result per partition, in request order. Errors:

    - UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition;
    - INVALID_REPLICA_ASSIGNMENT: an empty target, a broker named twice, a
      negative id, a broker that is not registered; or a partition named
      twice in the request (each is answered);
    - INVALID_REPLICATION_FACTOR: the target's size differs from the
      assignment's while ``allow_replication_factor_change`` is false;
    - NO_REASSIGNMENT_IN_PROGRESS: a cancel for a partition not being
      reassigned;
    - INVALID_REPLICA_ASSIGNMENT: a cancel that no broker of the original
      assignment in the ISR could survive (see the module docstring).
    """
    counts: dict[tuple[str, int], int] = {}
    for topic_name, partition_id, _target_replicas in request.partitions:
        counts[(topic_name, partition_id)] = counts.get((topic_name, partition_id), 0) + 1
    records: list[MetadataRecord] = []
    results: list[ReassignmentResult] = []
    for topic_name, partition_id, target in request.partitions:
        record, result = _reassign_one(
            image, topic_name, partition_id, target, request.allow_replication_factor_change,
            named_twice=counts[(topic_name, partition_id)] > 1)
        if record is not None:
            records.append(record)
        results.append(result)
    return ControllerResult(tuple(records), tuple(results))


def _reassign_one(
    image: MetadataImage, topic_name: str, partition_id: int, target: tuple[int, ...] | None,
    allow_rf_change: bool, *, named_twice: bool,
) -> tuple[PartitionChangeRecord | None, ReassignmentResult]:
    def fail(error: ErrorCode, message: str) -> tuple[None, ReassignmentResult]:
        return None, ReassignmentResult(topic_name, partition_id, error, message)

    if named_twice:
        return fail(ErrorCode.invalid_replica_assignment,
                    f"{topic_name}-{partition_id} is named more than once")
    topic = image.topic_by_name(topic_name)
    part = None if topic is None else topic.partitions.get(partition_id)
    if topic is None or part is None:
        return fail(ErrorCode.unknown_topic_or_partition,
                    f"no partition {topic_name}-{partition_id}")
    if target is None:
        return _cancel(image, topic.topic_id, topic_name, partition_id, part)
    error = _target_error(image, part, target, allow_rf_change)
    if error is not None:
        return fail(*error)
    return _start(image, topic.topic_id, topic_name, partition_id, part, target)


def _target_error(
    image: MetadataImage, part: PartitionRegistration, target: tuple[int, ...],
    allow_rf_change: bool,
) -> tuple[ErrorCode, str] | None:
    if not target:
        return ErrorCode.invalid_replica_assignment, "the target replica list is empty"
    if len(set(target)) != len(target):
        return ErrorCode.invalid_replica_assignment, (
            f"the target replica list {list(target)} names a broker twice")
    for broker_id in target:
        if broker_id < 0 or broker_id not in image.brokers:
            return ErrorCode.invalid_replica_assignment, (
                f"the target replica list {list(target)} includes broker {broker_id}, "
                "but no such broker is registered")
    current_size = len(_original(part)) if is_reassigning(part) else len(part.replicas)
    if not allow_rf_change and len(target) != current_size:
        return ErrorCode.invalid_replication_factor, (
            f"the target replica list {list(target)} changes the replication factor "
            f"from {current_size} to {len(target)}, and the request does not allow it")
    return None


def _start(
    image: MetadataImage, topic_id: uuid.UUID, topic_name: str, partition_id: int,
    part: PartitionRegistration, target: tuple[int, ...],
) -> tuple[PartitionChangeRecord | None, ReassignmentResult]:
    in_target = set(target)
    current = set(part.replicas)
    removing = tuple(b for b in part.replicas if b not in in_target)
    adding = tuple(b for b in target if b not in current)
    replicas = (*target, *removing)
    # The ISR can only hold current replicas, all still in `replicas`.
    during = PartitionRegistration(
        replicas=replicas, isr=part.isr, leader=part.leader,
        leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch,
        removing_replicas=removing, adding_replicas=adding,
        leader_recovery_state=part.leader_recovery_state,
    )
    record = finish_if_complete(topic_id, partition_id, part, during, image.is_usable)
    if record is None:
        record = _record(
            topic_id, partition_id, part, replicas=replicas, isr=part.isr, leader=part.leader,
            adding=adding, removing=removing, bump_leader_epoch=False,
        )
    return record, ReassignmentResult(topic_name, partition_id, ErrorCode.none)


def _cancel(
    image: MetadataImage, topic_id: uuid.UUID, topic_name: str, partition_id: int,
    part: PartitionRegistration,
) -> tuple[PartitionChangeRecord | None, ReassignmentResult]:
    if not is_reassigning(part):
        return None, ReassignmentResult(
            topic_name, partition_id, ErrorCode.no_reassignment_in_progress,
            f"no reassignment of {topic_name}-{partition_id} is in progress")
    replicas = _original(part)
    adding = set(part.adding_replicas)
    isr = tuple(b for b in part.isr if b not in adding)
    if not isr:
        return None, ReassignmentResult(
            topic_name, partition_id, ErrorCode.invalid_replica_assignment,
            f"cannot cancel the reassignment of {topic_name}-{partition_id}: no broker of "
            f"its original replicas {list(replicas)} is in the ISR {list(part.isr)}")
    leader = part.leader
    if leader == NO_LEADER or leader in adding or not image.is_usable(leader):
        leader = next((b for b in replicas if b in isr and image.is_usable(b)), NO_LEADER)
    record = _record(
        topic_id, partition_id, part, replicas=replicas, isr=isr, leader=leader,
        adding=(), removing=(), bump_leader_epoch=bool(part.adding_replicas),
    )
    return record, ReassignmentResult(topic_name, partition_id, ErrorCode.none)


def list_partition_reassignments(
    image: MetadataImage, request: ListReassignmentsRequest
) -> tuple[OngoingReassignment, ...]:
    """The partitions being reassigned, among those asked for (all with
    ``topics`` None), sorted by topic and partition. Unknown topics or
    partitions, and partitions not being reassigned, are left out (Kafka's
    answer)."""
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for name, partitions in request.topics:
            wanted.setdefault(name, set()).update(partitions)
    out = []
    for topic, partition_id, part in image.iter_partitions():
        if wanted is not None and partition_id not in wanted.get(topic.name, ()):
            continue
        if is_reassigning(part):
            out.append(OngoingReassignment(
                topic.name, partition_id, part.replicas, part.adding_replicas,
                part.removing_replicas))
    return tuple(sorted(out, key=lambda r: (r.topic, r.partition)))
