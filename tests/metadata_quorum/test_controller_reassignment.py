"""controller.reassignment: AlterPartitionReassignments and
ListPartitionReassignments (KIP-455), finished by the AlterPartition that
brings the last target replica into the ISR."""

from __future__ import annotations

import uuid

from mq_builders import Ctx

from metadata_quorum.controller import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterReassignmentsRequest,
    BrokerState,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    ListReassignmentsRequest,
    alter_partition,
    alter_partition_reassignments,
    create_partitions,
    list_partition_reassignments,
)
from metadata_quorum.image import PartitionRegistration
from raftlog.net.errors import ErrorCode


def part_of(ctx: Ctx, topic: uuid.UUID, pid: int = 0) -> PartitionRegistration:
    part = ctx.image.partition(topic, pid)
    assert part is not None
    return part


def reassign(ctx: Ctx, *items: tuple[str, int, tuple[int, ...] | None],
             allow_rf_change: bool = True) -> list[tuple[ErrorCode, str | None]]:
    result = alter_partition_reassignments(
        ctx.image, AlterReassignmentsRequest(tuple(items), allow_rf_change))
    ctx.run(result)
    return [(r.error, r.message) for r in result.response]


def set_isr(ctx: Ctx, topic: uuid.UUID, isr: tuple[int, ...], pid: int = 0) -> tuple[
        ErrorCode, int, int]:
    """AlterPartition from the leader: (error, leader, leader epoch) of the answer."""
    part = part_of(ctx, topic, pid)
    leader = ctx.image.brokers[part.leader]
    response = ctx.run(alter_partition(ctx.image, AlterPartitionRequest(
        leader.broker_id, leader.epoch, (AlterPartitionItem(
            topic, pid, part.leader_epoch, part.partition_epoch,
            tuple(BrokerState(b, ctx.image.brokers[b].epoch) for b in isr)),))))
    item = response.partitions[0]
    return item.error, item.leader, item.leader_epoch


def ongoing(ctx: Ctx, topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None) -> list[
        tuple[str, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    return [(r.topic, r.partition, r.replicas, r.adding_replicas, r.removing_replicas)
            for r in list_partition_reassignments(ctx.image, ListReassignmentsRequest(topics))]


def cluster(*assignment: int, brokers: tuple[int, ...] = (1, 2, 3, 4)) -> tuple[Ctx, uuid.UUID]:
    ctx = Ctx()
    ctx.add_brokers(*brokers)
    return ctx, ctx.create("t", -1, -1, assignments=(assignment,))


def test_moving_a_replica_finishes_when_the_new_one_joins_the_isr() -> None:
    ctx, topic = cluster(1)
    assert reassign(ctx, ("t", 0, (2,))) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    # The target first (preferred leader 2); the old leader keeps leading.
    assert (part.replicas, part.adding_replicas, part.removing_replicas) == ((2, 1), (2,), (1,))
    assert (part.leader, part.isr, part.leader_epoch) == (1, (1,), 0)
    assert ongoing(ctx) == [("t", 0, (2, 1), (2,), (1,))]
    # Broker 2 caught up: the leader adds it, and that finishes the move.
    error, leader, epoch = set_isr(ctx, topic, (1, 2))
    part = part_of(ctx, topic)
    assert (part.replicas, part.isr, part.leader) == ((2,), (2,), 2)
    assert (part.adding_replicas, part.removing_replicas) == ((), ())
    assert part.leader_epoch == 1 and (error, leader, epoch) == (ErrorCode.new_leader_elected, 2, 1)
    assert ongoing(ctx) == []


def test_raising_the_replication_factor_keeps_the_leader_and_its_epoch() -> None:
    ctx, topic = cluster(1)
    assert reassign(ctx, ("t", 0, (1, 2, 3))) == [(ErrorCode.none, None)]
    assert ongoing(ctx) == [("t", 0, (1, 2, 3), (2, 3), ())]
    assert set_isr(ctx, topic, (1, 2)) == (ErrorCode.none, 1, 0)
    assert ongoing(ctx) == [("t", 0, (1, 2, 3), (2, 3), ())]  # 3 not in sync yet
    assert set_isr(ctx, topic, (1, 2, 3)) == (ErrorCode.none, 1, 0)
    part = part_of(ctx, topic)
    assert (part.replicas, part.isr, part.leader, part.leader_epoch) == ((1, 2, 3), (1, 2, 3), 1, 0)
    assert ongoing(ctx) == []


def test_lowering_the_replication_factor_in_sync_finishes_at_once_and_fences_the_removed() -> None:
    ctx, topic = cluster(1, 2, 3)
    before = part_of(ctx, topic)
    assert reassign(ctx, ("t", 0, (2, 3))) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    # The leader (1) is removed: the first target broker in the ISR leads.
    assert (part.replicas, part.isr, part.leader) == ((2, 3), (2, 3), 2)
    assert part.leader_epoch == before.leader_epoch + 1
    assert part.partition_epoch == before.partition_epoch + 1  # one record
    assert ongoing(ctx) == []


def test_removing_a_follower_bumps_the_leader_epoch_with_the_same_leader() -> None:
    ctx, topic = cluster(1, 2, 3)
    assert reassign(ctx, ("t", 0, (1, 2))) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    assert (part.replicas, part.isr, part.leader, part.leader_epoch) == ((1, 2), (1, 2), 1, 1)


def test_a_reorder_moves_only_the_preferred_leader() -> None:
    ctx, topic = cluster(1, 2, 3)
    assert reassign(ctx, ("t", 0, (3, 1, 2))) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    assert (part.replicas, part.leader, part.leader_epoch) == ((3, 1, 2), 1, 0)
    assert reassign(ctx, ("t", 0, (3, 1, 2))) == [(ErrorCode.none, None)]
    assert part_of(ctx, topic) == part  # the same target again writes nothing


def test_cancel_restores_the_original_replicas() -> None:
    ctx, topic = cluster(1, 2, 3)
    assert reassign(ctx, ("t", 0, (2, 3, 4))) == [(ErrorCode.none, None)]
    assert ongoing(ctx) == [("t", 0, (2, 3, 4, 1), (4,), (1,))]
    assert reassign(ctx, ("t", 0, None)) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    # The original brokers, in the order the reassignment gave them (Kafka's
    # revert too: the replica list encodes the target's order, not the old one).
    assert (part.replicas, part.isr, part.leader) == ((2, 3, 1), (1, 2, 3), 1)
    assert (part.adding_replicas, part.removing_replicas) == ((), ())
    assert part.leader_epoch == 1  # broker 4 was removed: fenced
    assert reassign(ctx, ("t", 0, None))[0][0] is ErrorCode.no_reassignment_in_progress


def test_cancel_hands_leadership_back_from_an_adding_replica() -> None:
    ctx, topic = cluster(1, 2)
    assert reassign(ctx, ("t", 0, (3, 4))) == [(ErrorCode.none, None)]
    set_isr(ctx, topic, (1, 2, 3))  # 4 not yet in sync: not finished
    # Broker 1 goes; the first in-sync replica in replica order takes over:
    # 3, a broker being added.
    ctx.heartbeat(1, want_fence=True)
    assert part_of(ctx, topic).leader == 3
    epoch = part_of(ctx, topic).leader_epoch
    assert reassign(ctx, ("t", 0, None)) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    assert (part.replicas, part.isr, part.leader) == ((1, 2), (2,), 2)
    assert part.leader_epoch == epoch + 1


def test_cancel_is_refused_when_only_adding_replicas_are_in_sync() -> None:
    ctx, topic = cluster(1)
    assert reassign(ctx, ("t", 0, (3, 4))) == [(ErrorCode.none, None)]
    set_isr(ctx, topic, (1, 3))
    ctx.heartbeat(1, want_fence=True)
    part = part_of(ctx, topic)
    assert (part.leader, part.isr) == (3, (3,))
    [(error, message)] = reassign(ctx, ("t", 0, None))
    assert error is ErrorCode.invalid_replica_assignment
    assert message is not None and "original replicas [1]" in message
    assert part_of(ctx, topic) == part
    # Finishing still works: 4 joins the ISR.
    set_isr(ctx, topic, (3, 4))
    part = part_of(ctx, topic)
    assert (part.replicas, part.isr, part.leader) == ((3, 4), (3, 4), 3)


def test_a_new_target_during_a_reassignment_starts_from_the_current_replicas() -> None:
    ctx, topic = cluster(1)
    assert reassign(ctx, ("t", 0, (2,))) == [(ErrorCode.none, None)]
    assert reassign(ctx, ("t", 0, (3,))) == [(ErrorCode.none, None)]
    assert ongoing(ctx) == [("t", 0, (3, 2, 1), (3,), (2, 1))]
    # Naming the original again finishes at once (it is in sync): a cancel.
    assert reassign(ctx, ("t", 0, (1,))) == [(ErrorCode.none, None)]
    part = part_of(ctx, topic)
    assert (part.replicas, part.isr, part.leader, part.adding_replicas) == ((1,), (1,), 1, ())


def test_invalid_targets() -> None:
    ctx, _topic = cluster(1, 2)
    bad = reassign(
        ctx, ("t", 0, ()), ("t", 1, (1,)), ("nope", 0, (1,)),
    )
    assert [e for e, _ in bad] == [ErrorCode.invalid_replica_assignment,
                                   ErrorCode.unknown_topic_or_partition,
                                   ErrorCode.unknown_topic_or_partition]
    [(error, message)] = reassign(ctx, ("t", 0, (1, 1)))
    assert error is ErrorCode.invalid_replica_assignment and "twice" in (message or "")
    [(error, message)] = reassign(ctx, ("t", 0, (1, 9)))
    assert error is ErrorCode.invalid_replica_assignment and "broker 9" in (message or "")
    [(error, _)] = reassign(ctx, ("t", 0, (1, -1)))
    assert error is ErrorCode.invalid_replica_assignment
    [(error, _)] = reassign(ctx, ("t", 0, (1, 2, 3)), allow_rf_change=False)
    assert error is ErrorCode.invalid_replication_factor
    assert reassign(ctx, ("t", 0, (2, 3)), allow_rf_change=False) == [(ErrorCode.none, None)]
    both = reassign(ctx, ("t", 0, (1, 2)), ("t", 0, (3, 4)))
    assert [e for e, _ in both] == [ErrorCode.invalid_replica_assignment] * 2
    assert ongoing(ctx) == [("t", 0, (2, 3, 1), (3,), (1,))]  # unchanged by the refusals


def test_list_filters_by_topic_and_partition() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    ctx.create("a", -1, -1, assignments=((1,), (2,)))
    ctx.create("b", -1, -1, assignments=((1,),))
    assert reassign(ctx, ("a", 0, (3,)), ("a", 1, (3,)), ("b", 0, (2,))) == [
        (ErrorCode.none, None)] * 3
    assert [(t, p) for t, p, *_ in ongoing(ctx)] == [("a", 0), ("a", 1), ("b", 0)]
    assert [(t, p) for t, p, *_ in ongoing(ctx, (("a", (1,)), ("zz", (0,))))] == [("a", 1)]


def test_create_partitions_waits_for_the_reassignment() -> None:
    ctx, _topic = cluster(1)
    reassign(ctx, ("t", 0, (1, 2)))
    result = ctx.run(create_partitions(ctx.image, CreatePartitionsRequest(
        (CreatePartitionsTopic("t", 2),))))
    assert result[0].error is ErrorCode.reassignment_in_progress
