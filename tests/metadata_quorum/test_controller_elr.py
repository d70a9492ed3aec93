"""KIP-966 eligible leader replicas in the controller: the ELR follows the
ISR below ``min.insync.replicas``, an empty ISR elects from it, an unclean
shutdown takes a broker out of it, and the last known leader is the last
resort. The scenario KIP-966 was written for is the first test."""

from __future__ import annotations

import uuid

from mq_builders import Ctx

from metadata_quorum.controller import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerState,
    ConfigOpType,
    ControllerConfig,
    alter_configs,
    alter_partition,
)
from metadata_quorum.image import PartitionRegistration
from metadata_quorum.records import NO_LEADER, ConfigResourceType, LeaderRecoveryState
from raftlog.net.errors import ErrorCode


def cluster(*, elr: bool = True) -> tuple[Ctx, uuid.UUID]:
    """Brokers 1-3, topic ``t`` with replicas (1, 2, 3) led by 1, min ISR 2."""
    ctx = Ctx(ControllerConfig(cluster_id="test-cluster", min_insync_replicas=2), elr=elr)
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create("t", -1, -1, assignments=((1, 2, 3),))
    return ctx, topic


def part(ctx: Ctx, topic: uuid.UUID) -> PartitionRegistration:
    p = ctx.image.partition(topic, 0)
    assert p is not None
    return p


def set_isr(ctx: Ctx, topic: uuid.UUID, isr: tuple[int, ...]) -> None:
    p = part(ctx, topic)
    leader = ctx.image.brokers[p.leader]
    response = ctx.run(alter_partition(ctx.image, AlterPartitionRequest(
        leader.broker_id, leader.epoch, (AlterPartitionItem(
            topic, 0, p.leader_epoch, p.partition_epoch,
            tuple(BrokerState(b, ctx.image.brokers[b].epoch) for b in isr)),)), ctx.config))
    assert response.partitions[0].error is ErrorCode.none, response


def fence(ctx: Ctx, broker_id: int) -> None:
    """The broker's session ends (or it asks to be fenced)."""
    assert ctx.heartbeat(broker_id, want_fence=True).is_fenced


def restart(ctx: Ctx, broker_id: int, generation: int, *, clean: bool) -> None:
    """A new process registers, saying whether it shut down cleanly
    (``previous_broker_epoch``), then catches up and is unfenced."""
    old = ctx.image.brokers[broker_id].epoch
    ctx.now_ms += 10_000
    ctx.sessions = ctx.sessions.touched(1, ctx.now_ms).touched(2, ctx.now_ms).touched(
        3, ctx.now_ms)
    ctx.register(broker_id, generation=generation, previous_broker_epoch=old if clean else -1)
    assert ctx.heartbeat(broker_id).is_fenced is False


def test_the_kip_966_scenario_elects_the_replica_that_has_the_data() -> None:
    """The ISR shrinks to the leader; the leader crashes, loses its page cache
    and comes back first. Without ELR it is the only ISR member and is
    elected, so the follower that had every committed record truncates to it.
    With ELR the follower that left the ISR below the minimum is elected."""
    ctx, topic = cluster()
    set_isr(ctx, topic, (1, 2))  # 3 falls behind: the ISR is still at the minimum
    assert part(ctx, topic).elr == ()
    set_isr(ctx, topic, (1,))  # 2 falls behind too: below the minimum, 2 is eligible
    p = part(ctx, topic)
    assert (p.isr, p.elr, p.last_known_elr) == ((1,), (2,), ())
    fence(ctx, 1)  # the leader crashes; 2 leads, from the ELR, cleanly
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr) == (2, (2,), (1,))
    assert p.leader_recovery_state is LeaderRecoveryState.RECOVERED
    restart(ctx, 1, 1, clean=False)  # 1 lost its page cache: no longer eligible
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2,), (), ())


def test_without_elr_the_last_isr_member_stays_and_is_elected_again() -> None:
    ctx, topic = cluster(elr=False)
    set_isr(ctx, topic, (1, 2))
    set_isr(ctx, topic, (1,))
    fence(ctx, 1)
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (1,), ())
    restart(ctx, 1, 1, clean=False)
    assert (part(ctx, topic).leader, part(ctx, topic).isr) == (1, (1,))


def test_an_empty_isr_waits_for_an_eligible_replica_and_keeps_the_last_leader() -> None:
    ctx, topic = cluster()
    set_isr(ctx, topic, (1, 2))
    fence(ctx, 3)
    set_isr(ctx, topic, (1,))
    fence(ctx, 2)
    fence(ctx, 1)  # every replica fenced: no leader, the ISR empty
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (), (1, 2), (1,))
    # 3 comes back: it left the ISR while it was at the minimum, so it may
    # lack committed records; it must not lead.
    restart(ctx, 3, 1, clean=True)
    assert part(ctx, topic).leader == NO_LEADER
    # 2 comes back after a clean shutdown: still eligible; it leads.
    restart(ctx, 2, 1, clean=True)
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2,), (1,), ())
    assert p.leader_recovery_state is LeaderRecoveryState.RECOVERED


def test_the_last_known_leader_is_the_last_resort_after_unclean_restarts() -> None:
    ctx, topic = cluster()
    set_isr(ctx, topic, (1,))  # 2 and 3 fall behind together: both eligible
    assert part(ctx, topic).elr == (2, 3)
    for broker_id in (2, 3, 1):
        fence(ctx, broker_id)
    assert part(ctx, topic).last_known_elr == (1,)
    restart(ctx, 2, 1, clean=False)
    restart(ctx, 3, 1, clean=False)
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (), (1,))
    # 1, the last leader, restarts uncleanly too. Nobody is sure to hold
    # every committed record; the last leader most likely does, and is
    # elected uncleanly (RECOVERING), as Kafka does by default.
    restart(ctx, 1, 1, clean=False)
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (), ())
    assert p.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_growing_back_to_the_minimum_clears_the_elr() -> None:
    ctx, topic = cluster()
    set_isr(ctx, topic, (1,))
    assert part(ctx, topic).elr == (2, 3)
    set_isr(ctx, topic, (1, 3))
    assert (part(ctx, topic).isr, part(ctx, topic).elr) == ((1, 3), ())


def test_a_clean_restart_keeps_a_broker_eligible() -> None:
    ctx, topic = cluster()
    set_isr(ctx, topic, (1,))
    fence(ctx, 2)
    restart(ctx, 2, 1, clean=True)
    assert part(ctx, topic).elr == (2, 3)
    fence(ctx, 3)
    restart(ctx, 3, 1, clean=False)
    assert part(ctx, topic).elr == (2,)


def test_changing_min_insync_replicas_clears_the_elr() -> None:
    """A lower minimum would let the HW move without the ELR members."""
    ctx, topic = cluster()
    ctx.create("u", -1, -1, assignments=((2, 3, 1),))
    set_isr(ctx, topic, (1,))
    assert part(ctx, topic).elr == (2, 3)
    result = alter_configs(ctx.image, AlterConfigsRequest((AlterConfigsResource(
        ConfigResourceType.TOPIC, "t",
        (AlterConfigOp("min.insync.replicas", ConfigOpType.SET, "1"),)),)))
    ctx.run(result)
    assert (part(ctx, topic).isr, part(ctx, topic).elr) == ((1,), ())
    assert len(result.records) == 2  # the config, then one partition change


def test_the_effective_minimum_is_at_most_the_replica_count() -> None:
    ctx, _topic = cluster()
    two = ctx.create("two", -1, -1, assignments=((1, 2),))
    # min.insync.replicas 2 (the cluster's) on two replicas: ISR (1,) is below it.
    p = ctx.image.partition(two, 0)
    assert p is not None
    ctx.run(alter_partition(ctx.image, AlterPartitionRequest(1, ctx.image.brokers[1].epoch, (
        AlterPartitionItem(two, 0, p.leader_epoch, p.partition_epoch,
                           (BrokerState(1, ctx.image.brokers[1].epoch),)),)), ctx.config))
    assert ctx.image.partition(two, 0).elr == (2,)  # type: ignore[union-attr]
    one = ctx.create("one", -1, -1, assignments=((3,),))
    fence(ctx, 3)  # one replica: the minimum is 1; the ISR empties into the ELR
    p = ctx.image.partition(one, 0)
    assert p is not None and (p.leader, p.isr, p.elr, p.last_known_elr) == (
        NO_LEADER, (), (3,), (3,))
    restart(ctx, 3, 1, clean=True)
    p = ctx.image.partition(one, 0)
    assert p is not None and (p.leader, p.isr, p.elr) == (3, (3,), ())
