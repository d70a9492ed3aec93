"""controller.replication_control: CreateTopics, DeleteTopics, AlterPartition, elections."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mq_builders import Ctx, random_step

from metadata_quorum.controller import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerState,
    ConfigOpType,
    ControllerConfig,
    ControllerResult,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    alter_configs,
    alter_partition,
    balance_partition_leaders,
    create_topics,
    delete_topics,
    elect_unclean_leaders,
    fence_stale_brokers,
)
from metadata_quorum.records import (
    NO_LEADER,
    ConfigRecord,
    ConfigResourceType,
    LeaderRecoveryState,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftlog.net.errors import ErrorCode


def create(ctx: Ctx, *topics: CreatableTopic, validate_only: bool = False):  # type: ignore[no-untyped-def]
    return create_topics(ctx.image, CreateTopicsRequest(topics, validate_only), ctx.config,
                         next_offset=ctx.next_offset)


def cluster(*brokers: int, racks: dict[int, str] | None = None,
            config: ControllerConfig | None = None) -> Ctx:
    ctx = Ctx(config)
    ctx.add_brokers(*brokers, racks=racks)
    return ctx


# --- CreateTopics ------------------------------------------------------------------------


def test_create_topic_writes_topic_configs_and_partitions() -> None:
    ctx = cluster(1, 2, 3)
    result = create(ctx, CreatableTopic("orders", 3, 2, configs=(("retention.ms", "1000"),)))
    [topic_result] = result.response
    assert topic_result.error is ErrorCode.none
    assert (topic_result.num_partitions, topic_result.replication_factor) == (3, 2)
    assert isinstance(result.records[0], TopicRecord)
    assert result.records[0].topic_id == topic_result.topic_id
    assert result.records[1] == ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms",
                                             "1000")
    parts = [r for r in result.records if isinstance(r, PartitionRecord)]
    assert [p.partition_id for p in parts] == [0, 1, 2]
    for p in parts:
        assert len(p.replicas) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    ctx.run(result)
    assert ctx.image.topic_config("orders") == {"retention.ms": "1000"}


def test_defaults_apply_for_minus_one() -> None:
    ctx = cluster(1, 2, config=ControllerConfig(default_num_partitions=4,
                                                default_replication_factor=2))
    [res] = create(ctx, CreatableTopic("t")).response
    assert (res.num_partitions, res.replication_factor) == (4, 2)


def test_validate_only_writes_nothing() -> None:
    ctx = cluster(1)
    result = create(ctx, CreatableTopic("t", 2, 1), validate_only=True)
    assert result.records == () and result.response[0].error is ErrorCode.none
    assert result.response[0].topic_id is None


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (CreatableTopic("", 1, 1), ErrorCode.invalid_topic_exception),
        (CreatableTopic(".", 1, 1), ErrorCode.invalid_topic_exception),
        (CreatableTopic("..", 1, 1), ErrorCode.invalid_topic_exception),
        (CreatableTopic("a" * 250, 1, 1), ErrorCode.invalid_topic_exception),
        (CreatableTopic("bad/name", 1, 1), ErrorCode.invalid_topic_exception),
        (CreatableTopic("spaced name", 1, 1), ErrorCode.invalid_topic_exception),
        (CreatableTopic("existing", 1, 1), ErrorCode.topic_already_exists),
        (CreatableTopic("dot_ted", 1, 1), ErrorCode.invalid_topic_exception),  # vs dot.ted
        (CreatableTopic("t", 0, 1), ErrorCode.invalid_partitions),
        (CreatableTopic("t", -2, 1), ErrorCode.invalid_partitions),
        (CreatableTopic("t", 1, 0), ErrorCode.invalid_replication_factor),
        (CreatableTopic("t", 1, -2), ErrorCode.invalid_replication_factor),
        (CreatableTopic("t", 1, 4), ErrorCode.invalid_replication_factor),  # 3 usable brokers
        (CreatableTopic("t", 1, 40_000), ErrorCode.invalid_replication_factor),
        (CreatableTopic("t", 1, 1, configs=(("no.such.config", "1"),)), ErrorCode.invalid_config),
        (CreatableTopic("t", 1, 1, configs=(("retention.ms", "abc"),)), ErrorCode.invalid_config),
        (CreatableTopic("t", 1, 1, configs=(("min.insync.replicas", "0"),)),
         ErrorCode.invalid_config),
        (CreatableTopic("t", 1, 1, configs=(("cleanup.policy", "shred"),)),
         ErrorCode.invalid_config),
        (CreatableTopic("t", 1, 1, configs=(("retention.ms", None),)), ErrorCode.invalid_config),
        (CreatableTopic("t", 1, 1, configs=(("retention.ms", "1"), ("retention.ms", "2"))),
         ErrorCode.invalid_config),
        (CreatableTopic("t", 2, -1, assignments=((1,), (2,))), ErrorCode.invalid_request),
        (CreatableTopic("t", assignments=((1,), ())), ErrorCode.invalid_replica_assignment),
        (CreatableTopic("t", assignments=((1, 1),)), ErrorCode.invalid_replica_assignment),
        (CreatableTopic("t", assignments=((1, 9),)), ErrorCode.invalid_replica_assignment),
        (CreatableTopic("t", assignments=((1, 2), (3,))), ErrorCode.invalid_replica_assignment),
        (CreatableTopic("t", assignments=((4,),)), ErrorCode.invalid_replica_assignment),  # fenced
    ],
)
def test_create_topic_errors(topic: CreatableTopic, code: ErrorCode) -> None:
    ctx = cluster(1, 2, 3)
    ctx.register(4)  # registered but fenced
    ctx.create("existing")
    ctx.create("dot.ted")
    result = create(ctx, topic)
    assert result.response[0].error is code, result.response[0].message
    assert result.records == ()


def test_replication_factor_counts_only_usable_brokers() -> None:
    ctx = cluster(1, 2)
    ctx.heartbeat(2, want_shutdown=True)
    assert create(ctx, CreatableTopic("t", 1, 2)).response[0].error is (
        ErrorCode.invalid_replication_factor)


def test_duplicates_in_one_request_fail_every_copy_but_not_others() -> None:
    ctx = cluster(1)
    result = create(ctx, CreatableTopic("a", 1, 1), CreatableTopic("b", 1, 1),
                    CreatableTopic("a", 1, 1))
    assert [r.error for r in result.response] == [
        ErrorCode.invalid_request, ErrorCode.none, ErrorCode.invalid_request]
    assert [r.name for r in result.records if isinstance(r, TopicRecord)] == ["b"]


def test_collision_within_one_request_is_rejected() -> None:
    ctx = cluster(1)
    result = create(ctx, CreatableTopic("x.y", 1, 1), CreatableTopic("x_y", 1, 1))
    assert [r.error for r in result.response] == [
        ErrorCode.none, ErrorCode.invalid_topic_exception]


def test_manual_assignment_puts_only_usable_replicas_in_isr() -> None:
    ctx = cluster(1, 2)
    ctx.register(3)
    result = create(ctx, CreatableTopic("t", assignments=((3, 1), (2, 3))))
    assert result.response[0].error is ErrorCode.none
    parts = [r for r in result.records if isinstance(r, PartitionRecord)]
    assert [(p.replicas, p.isr, p.leader) for p in parts] == [
        ((3, 1), (1,), 1), ((2, 3), (2,), 2)]


def test_topic_ids_are_distinct_and_not_zero() -> None:
    ctx = cluster(1)
    result = create(ctx, *(CreatableTopic(f"t{i}", 1, 1) for i in range(20)))
    ids = [r.topic_id for r in result.response]
    assert len(set(ids)) == 20 and uuid.UUID(int=0) not in ids


# --- DeleteTopics -----------------------------------------------------------------------


def test_delete_by_name_and_by_id() -> None:
    ctx = cluster(1)
    a, b = ctx.create("a"), ctx.create("b")
    result = delete_topics(ctx.image, DeleteTopicsRequest(names=("a",), topic_ids=(b,)))
    assert [r.error for r in result.response] == [ErrorCode.none, ErrorCode.none]
    assert result.records == (RemoveTopicRecord(a), RemoveTopicRecord(b))
    assert result.response[1].name == "b"
    ctx.run(result)
    assert ctx.image.topics == {}


def test_delete_errors() -> None:
    ctx = cluster(1)
    a = ctx.create("a")
    result = delete_topics(ctx.image, DeleteTopicsRequest(
        names=("missing", "a"), topic_ids=(uuid.UUID(int=5), a)))
    assert [r.error for r in result.response] == [
        ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request,
        ErrorCode.unknown_topic_id, ErrorCode.invalid_request]
    assert result.records == ()


def test_delete_topic_enable_false_refuses_every_entry_and_deletes_nothing() -> None:
    ctx = cluster(1)
    a = ctx.create("a")
    ctx.create("b")
    result = delete_topics(ctx.image, DeleteTopicsRequest(names=("b", "missing"), topic_ids=(a,)),
                           ControllerConfig(delete_topic_enable=False))
    assert [r.error for r in result.response] == [ErrorCode.topic_deletion_disabled] * 3
    assert [(r.name, r.topic_id) for r in result.response] == [
        ("b", None), ("missing", None), (None, a)]
    assert result.records == ()
    # The default (Kafka's, true) deletes.
    assert delete_topics(ctx.image, DeleteTopicsRequest(names=("b",)),
                         ControllerConfig()).records != ()


# --- AlterPartition -------------------------------------------------------------------------


def setup_partition() -> tuple[Ctx, uuid.UUID]:
    ctx = cluster(1, 2, 3)
    topic = ctx.create("t", 1, 3)
    return ctx, topic


def alter(ctx: Ctx, topic: uuid.UUID, isr: tuple[int, ...], *, sender: int | None = None,
          sender_epoch: int | None = None, leader_epoch: int | None = None,
          partition_epoch: int | None = None, epochs: dict[int, int] | None = None,
          state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED,
          partition_id: int = 0):  # type: ignore[no-untyped-def]
    part = ctx.image.partition(topic, 0)
    assert part is not None
    sender = part.leader if sender is None else sender
    broker = ctx.image.brokers.get(sender)
    members = tuple(
        BrokerState(b, (epochs or {}).get(b, ctx.image.brokers[b].epoch
                                          if b in ctx.image.brokers else -1))
        for b in isr
    )
    return alter_partition(ctx.image, AlterPartitionRequest(
        sender, sender_epoch if sender_epoch is not None else (broker.epoch if broker else 0),
        (AlterPartitionItem(
            topic, partition_id,
            part.leader_epoch if leader_epoch is None else leader_epoch,
            part.partition_epoch if partition_epoch is None else partition_epoch,
            members, state),),
    ))


def test_alter_partition_shrinks_isr_and_answers_new_partition_epoch() -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    result = alter(ctx, topic, (part.leader,))
    [item] = result.response.partitions
    assert result.response.error is ErrorCode.none and item.error is ErrorCode.none
    assert (item.isr, item.partition_epoch, item.leader_epoch) == ((part.leader,), 1, 0)
    ctx.run(result)
    after = ctx.image.partition(topic, 0)
    assert after is not None and after.partition_epoch == item.partition_epoch
    # ...and expand again
    result = alter(ctx, topic, part.replicas)
    assert result.response.partitions[0].partition_epoch == 2


def test_alter_partition_noop_answers_current_state_without_records() -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    result = alter(ctx, topic, part.isr)
    assert result.records == () and result.response.partitions[0].partition_epoch == 0


def test_alter_partition_from_unknown_or_stale_broker_is_stale_broker_epoch() -> None:
    ctx, topic = setup_partition()
    assert alter(ctx, topic, (1,), sender=9).response.error is ErrorCode.stale_broker_epoch
    part = ctx.image.partition(topic, 0)
    assert part is not None
    stale = alter(ctx, topic, (part.leader,), sender_epoch=ctx.image.brokers[part.leader].epoch - 1)
    assert stale.response.error is ErrorCode.stale_broker_epoch and stale.records == ()


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"leader_epoch": 5}, ErrorCode.fenced_leader_epoch),
        ({"partition_epoch": 3}, ErrorCode.invalid_update_version),
        ({"partition_id": 7}, ErrorCode.unknown_topic_or_partition),
        ({"state": LeaderRecoveryState.RECOVERING}, ErrorCode.invalid_request),
    ],
)
def test_alter_partition_epoch_and_identity_errors(kwargs: dict[str, object], code: ErrorCode) -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    result = alter(ctx, topic, (part.leader,), **kwargs)  # type: ignore[arg-type]
    assert result.response.partitions[0].error is code and result.records == ()


def test_alter_partition_unknown_topic_id() -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    sender = ctx.image.brokers[part.leader]
    result = alter_partition(ctx.image, AlterPartitionRequest(sender.broker_id, sender.epoch, (
        AlterPartitionItem(uuid.UUID(int=77), 0, 0, 0, (BrokerState(part.leader),)),)))
    assert result.response.partitions[0].error is ErrorCode.unknown_topic_id


def test_alter_partition_from_a_non_leader_is_invalid() -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    follower = next(r for r in part.replicas if r != part.leader)
    result = alter(ctx, topic, (follower,), sender=follower)
    assert result.response.partitions[0].error is ErrorCode.invalid_request


@pytest.mark.parametrize("shape", ["empty", "dupes", "outsider", "no_leader"])
def test_alter_partition_malformed_isr_is_invalid_request(shape: str) -> None:
    ctx, topic = setup_partition()
    ctx.add_brokers(4)
    part = ctx.image.partition(topic, 0)
    assert part is not None
    other = next(r for r in part.replicas if r != part.leader)
    isr = {"empty": (), "dupes": (part.leader, part.leader), "outsider": (part.leader, 4),
           "no_leader": (other,)}[shape]
    result = alter(ctx, topic, isr)
    assert result.response.partitions[0].error is ErrorCode.invalid_request


def test_kip_841_fenced_or_shutting_down_broker_cannot_join_isr() -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    followers = [r for r in part.replicas if r != part.leader]
    ctx.heartbeat(followers[0], want_fence=True)
    ctx.heartbeat(followers[1], want_shutdown=True)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.isr == (part.leader,)
    for follower in followers:
        result = alter(ctx, topic, (part.leader, follower))
        assert result.response.partitions[0].error is ErrorCode.ineligible_replica


def test_kip_903_member_with_stale_broker_epoch_is_ineligible() -> None:
    ctx, topic = setup_partition()
    part = ctx.image.partition(topic, 0)
    assert part is not None
    follower = next(r for r in part.replicas if r != part.leader)
    old_epoch = ctx.image.brokers[follower].epoch
    ctx.run(alter(ctx, topic, (part.leader,)))
    # The follower restarts with an empty disk: new incarnation, new epoch.
    ctx.now_ms += 10_000
    ctx.sessions = ctx.sessions.touched(part.leader, ctx.now_ms)
    ctx.register(follower, generation=1)
    ctx.heartbeat(follower)
    stale = alter(ctx, topic, (part.leader, follower), epochs={follower: old_epoch})
    assert stale.response.partitions[0].error is ErrorCode.ineligible_replica
    fresh = alter(ctx, topic, (part.leader, follower))
    assert fresh.response.partitions[0].error is ErrorCode.none
    unknown = alter(ctx, topic, (part.leader, follower), epochs={follower: -1})
    assert unknown.response.partitions[0].error is ErrorCode.none  # pre-KIP-903 request


def test_recovering_leader_reports_recovery_then_expands() -> None:
    config = ControllerConfig(cluster_id="test-cluster", unclean_leader_election_enable=True)
    ctx = cluster(1, 2, config=config)
    topic = ctx.create("t", 1, 2)
    part = ctx.image.partition(topic, 0)
    assert part is not None
    leader, follower = part.replicas
    ctx.run(alter(ctx, topic, (leader,)))
    ctx.heartbeat(leader, want_fence=True)  # the last ISR member goes; unclean election
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == follower
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING
    ctx.now_ms += 10_000
    ctx.register(leader, generation=1)
    ctx.heartbeat(leader)
    too_big = alter(ctx, topic, (follower, leader), state=LeaderRecoveryState.RECOVERING)
    assert too_big.response.partitions[0].error is ErrorCode.invalid_request
    done = ctx.run(alter(ctx, topic, (follower,), state=LeaderRecoveryState.RECOVERED))
    assert done.partitions[0].leader_recovery_state is LeaderRecoveryState.RECOVERED


# --- elections ------------------------------------------------------------------------------


def test_fenced_leader_is_replaced_from_the_isr_with_a_leader_epoch_bump() -> None:
    ctx = cluster(1, 2, 3)
    topic = ctx.create("t", 3, 3)
    before = {pid: ctx.image.partition(topic, pid) for pid in range(3)}
    ctx.heartbeat(1, want_fence=True)
    for pid in range(3):
        old, new = before[pid], ctx.image.partition(topic, pid)
        assert old is not None and new is not None
        assert new.leader in old.isr and new.leader != 1 and 1 not in new.isr
        if old.leader == 1:
            assert new.leader_epoch == old.leader_epoch + 1
        else:
            assert new.leader == old.leader and new.leader_epoch == old.leader_epoch


def test_no_unclean_election_by_default() -> None:
    ctx = cluster(1, 2)
    topic = ctx.create("t", 1, 2)
    part = ctx.image.partition(topic, 0)
    assert part is not None
    leader, _follower = part.replicas
    ctx.run(alter(ctx, topic, (leader,)))
    ctx.heartbeat(leader, want_fence=True)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == NO_LEADER and part.isr == (leader,)
    assert elect_unclean_leaders(ctx.image, ctx.config).records == ()


def test_unclean_election_after_topic_config_enables_it() -> None:
    ctx = cluster(1, 2)
    topic = ctx.create("t", 1, 2)
    part = ctx.image.partition(topic, 0)
    assert part is not None
    leader, follower = part.replicas
    ctx.run(alter(ctx, topic, (leader,)))
    ctx.heartbeat(leader, want_fence=True)
    ctx.run(alter_configs(ctx.image, AlterConfigsRequest((AlterConfigsResource(
        ConfigResourceType.TOPIC, "t",
        (AlterConfigOp("unclean.leader.election.enable", ConfigOpType.SET, "true"),)),))))
    result = elect_unclean_leaders(ctx.image, ctx.config)
    assert result.response == 1
    ctx.run(result)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == follower and part.isr == (follower,)
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_cluster_default_config_overrides_static_unclean_setting() -> None:
    ctx = cluster(1, 2, config=ControllerConfig(unclean_leader_election_enable=True))
    topic = ctx.create("t", 1, 2)
    part = ctx.image.partition(topic, 0)
    assert part is not None
    ctx.run(alter(ctx, topic, (part.leader,)))
    ctx.run(alter_configs(ctx.image, AlterConfigsRequest((AlterConfigsResource(
        ConfigResourceType.BROKER, "",
        (AlterConfigOp("unclean.leader.election.enable", ConfigOpType.SET, "false"),)),))))
    ctx.heartbeat(part.leader, want_fence=True)
    after = ctx.image.partition(topic, 0)
    assert after is not None and after.leader == NO_LEADER


def test_preferred_leader_rebalance_over_threshold() -> None:
    ctx = cluster(1, 2, 3)
    topic = ctx.create("t", 6, 3)
    ctx.heartbeat(1, want_fence=True)
    ctx.now_ms += 10_000
    ctx.sessions = ctx.sessions.touched(2, ctx.now_ms).touched(3, ctx.now_ms)
    ctx.register(1, generation=1)
    ctx.heartbeat(1)
    for pid in range(6):
        part = ctx.image.partition(topic, pid)
        assert part is not None
        leader = ctx.image.brokers[part.leader]
        ctx.run(alter_partition(ctx.image, AlterPartitionRequest(leader.broker_id, leader.epoch, (
            AlterPartitionItem(topic, pid, part.leader_epoch, part.partition_epoch,
                               tuple(BrokerState(b) for b in part.replicas)),))))
    parts = {pid: ctx.image.partition(topic, pid) for pid in range(6)}
    moved_away = [pid for pid, p in parts.items() if p is not None and p.preferred_leader == 1]
    assert moved_away
    assert all((p := parts[pid]) is not None and p.leader != 1 for pid in moved_away)
    result = balance_partition_leaders(ctx.image, ctx.config)
    assert result.response == len(moved_away)
    ctx.run(result)
    for pid in range(6):
        part = ctx.image.partition(topic, pid)
        assert part is not None and part.leader == part.preferred_leader


def test_rebalance_respects_threshold_and_switch() -> None:
    # 1 imbalanced partition out of 11 preferred by a broker = 9% <= 10%: no move.
    ctx = cluster(1, 2)
    topic = ctx.create("t", 22, 2)
    part0 = next(pid for pid in range(22)
                 if (p := ctx.image.partition(topic, pid)) and p.preferred_leader == 1)
    part = ctx.image.partition(topic, part0)
    assert part is not None
    leader = ctx.image.brokers[1]
    from metadata_quorum.controller.partition_change import build_partition_change
    change = build_partition_change(topic, part0, part, is_acceptable=lambda b: b == 2)
    assert change is not None
    ctx.run(ControllerResult((change,), None))
    assert balance_partition_leaders(ctx.image, ctx.config).records == ()
    low = ControllerConfig(cluster_id="test-cluster", leader_imbalance_per_broker_percentage=5)
    assert balance_partition_leaders(ctx.image, low).response == 1
    off = ControllerConfig(cluster_id="test-cluster", auto_leader_rebalance_enable=False)
    assert balance_partition_leaders(ctx.image, off).records == ()
    assert leader.usable


# --- properties --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_command_sequences_keep_kip_841_invariants(data: st.DataObject) -> None:
    """No fenced/shutting-down leader; no such ISR member except a leaderless last one
    (none at all with KIP-966 ELR on); leader and partition epochs only increase
    (checked by Ctx.run after every command)."""
    ctx = Ctx(ControllerConfig(cluster_id="test-cluster",
                               unclean_leader_election_enable=data.draw(st.booleans()),
                               min_insync_replicas=data.draw(st.integers(1, 3))),
              elr=data.draw(st.booleans()))
    for _ in range(data.draw(st.integers(1, 50))):
        random_step(ctx, data)
    ctx.now_ms += 100_000
    ctx.run(fence_stale_brokers(ctx.image, ctx.sessions, ctx.config, ctx.now_ms))
    for _topic, _pid, part in ctx.image.iter_partitions():
        assert part.leader == NO_LEADER
