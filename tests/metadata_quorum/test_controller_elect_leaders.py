"""controller.replication_control: ElectLeaders (KIP-183 preferred, KIP-460
unclean), with Kafka's per-partition answers."""

from __future__ import annotations

import uuid

from mq_builders import Ctx

from metadata_quorum.controller import (
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerState,
    ElectionType,
    ElectLeadersRequest,
    alter_partition,
    elect_leaders,
)
from metadata_quorum.records import NO_LEADER, LeaderRecoveryState
from raftlog.net.errors import ErrorCode


def answers(ctx: Ctx, election: ElectionType,
            partitions: tuple[tuple[str, int], ...] | None) -> list[tuple[str, int, ErrorCode]]:
    result = elect_leaders(ctx.image, ElectLeadersRequest(election, partitions))
    ctx.run(result)
    return [(r.topic, r.partition, r.error) for r in result.response]


def shrink_isr(ctx: Ctx, topic: uuid.UUID, pid: int, isr: tuple[int, ...]) -> None:
    part = ctx.image.partition(topic, pid)
    assert part is not None
    leader = ctx.image.brokers[part.leader]
    response = ctx.run(alter_partition(ctx.image, AlterPartitionRequest(
        leader.broker_id, leader.epoch, (AlterPartitionItem(
            topic, pid, part.leader_epoch, part.partition_epoch,
            tuple(BrokerState(b, ctx.image.brokers[b].epoch) for b in isr)),))))
    assert response.partitions[0].error is ErrorCode.none, response


def leader_moved_off_1() -> tuple[Ctx, uuid.UUID]:
    """Replicas (1, 2, 3) led by 1; broker 1 fenced, then back (unfenced, in the ISR)."""
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create("t", -1, -1, assignments=((1, 2, 3),))
    ctx.heartbeat(1, want_fence=True)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == 2 and part.isr == (2, 3)
    return ctx, topic


def test_preferred_moves_leadership_back_once_the_preferred_replica_is_in_the_isr() -> None:
    ctx, topic = leader_moved_off_1()
    # Broker 1 fenced: its preferred replica cannot lead; the leader stays.
    assert answers(ctx, ElectionType.PREFERRED, (("t", 0),)) == [
        ("t", 0, ErrorCode.preferred_leader_not_available)]
    ctx.now_ms += 10_000
    ctx.sessions = ctx.sessions.touched(2, ctx.now_ms).touched(3, ctx.now_ms)
    ctx.register(1, generation=1)
    ctx.heartbeat(1)
    # Unfenced but not in the ISR yet: still not available.
    assert answers(ctx, ElectionType.PREFERRED, (("t", 0),)) == [
        ("t", 0, ErrorCode.preferred_leader_not_available)]
    shrink_isr(ctx, topic, 0, (2, 3, 1))
    before = ctx.image.partition(topic, 0)
    assert before is not None
    assert answers(ctx, ElectionType.PREFERRED, (("t", 0),)) == [("t", 0, ErrorCode.none)]
    after = ctx.image.partition(topic, 0)
    assert after is not None and after.leader == 1
    assert after.leader_epoch == before.leader_epoch + 1 and after.isr == before.isr
    # And then there is nothing to do.
    assert answers(ctx, ElectionType.PREFERRED, (("t", 0),)) == [
        ("t", 0, ErrorCode.election_not_needed)]


def test_all_partitions_answers_only_those_that_needed_an_election() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create("t", -1, -1, assignments=((1, 2, 3), (2, 3, 1)))
    ctx.create("u", -1, -1, assignments=((3, 1, 2),))
    ctx.heartbeat(1, want_fence=True)
    ctx.now_ms += 10_000
    ctx.sessions = ctx.sessions.touched(2, ctx.now_ms).touched(3, ctx.now_ms)
    ctx.register(1, generation=1)
    ctx.heartbeat(1)
    shrink_isr(ctx, topic, 0, (2, 3, 1))
    # t-1 and u-0 are led by their preferred replicas: left out.
    assert answers(ctx, ElectionType.PREFERRED, None) == [("t", 0, ErrorCode.none)]
    assert answers(ctx, ElectionType.PREFERRED, None) == []


def test_unknown_topics_and_partitions() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t", 1, 1)
    result = elect_leaders(ctx.image, ElectLeadersRequest(
        ElectionType.PREFERRED, (("missing", 0), ("t", 5))))
    assert result.records == ()
    assert [(r.topic, r.partition, r.error, r.message) for r in result.response] == [
        ("missing", 0, ErrorCode.unknown_topic_or_partition, "no topic missing"),
        ("t", 5, ErrorCode.unknown_topic_or_partition, "no partition t-5"),
    ]


def test_unclean_elects_outside_the_isr_only_when_no_isr_member_can_lead() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2)
    topic = ctx.create("t", -1, -1, assignments=((1, 2),))
    # A partition with a leader needs no election.
    assert answers(ctx, ElectionType.UNCLEAN, (("t", 0),)) == [
        ("t", 0, ErrorCode.election_not_needed)]
    shrink_isr(ctx, topic, 0, (1,))
    ctx.heartbeat(1, want_fence=True)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == NO_LEADER and part.isr == (1,)
    # The topic does not allow unclean elections; the operator's request does.
    assert answers(ctx, ElectionType.UNCLEAN, (("t", 0),)) == [("t", 0, ErrorCode.none)]
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == 2 and part.isr == (2,)
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_unclean_without_a_usable_replica() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2)
    topic = ctx.create("t", -1, -1, assignments=((1, 2),))
    shrink_isr(ctx, topic, 0, (1,))
    ctx.heartbeat(2, want_fence=True)
    ctx.heartbeat(1, want_fence=True)
    assert answers(ctx, ElectionType.UNCLEAN, (("t", 0),)) == [
        ("t", 0, ErrorCode.eligible_leaders_not_available)]
    assert answers(ctx, ElectionType.PREFERRED, (("t", 0),)) == [
        ("t", 0, ErrorCode.preferred_leader_not_available)]


def test_a_partition_named_twice_is_elected_once() -> None:
    ctx, topic = leader_moved_off_1()
    ctx.now_ms += 10_000
    ctx.sessions = ctx.sessions.touched(2, ctx.now_ms).touched(3, ctx.now_ms)
    ctx.register(1, generation=1)
    ctx.heartbeat(1)
    shrink_isr(ctx, topic, 0, (2, 3, 1))
    result = elect_leaders(ctx.image, ElectLeadersRequest(
        ElectionType.PREFERRED, (("t", 0), ("t", 0))))
    assert len(result.records) == 1
    assert [(r.topic, r.partition, r.error) for r in result.response] == [
        ("t", 0, ErrorCode.none)]
