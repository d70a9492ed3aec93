"""controller.replication_control: CreatePartitions (KIP-195) and the
per-request partition cap shared with CreateTopics."""

from __future__ import annotations

import pytest
from mq_builders import Ctx

from metadata_quorum.controller import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    create_partitions,
    create_topics,
)
from metadata_quorum.controller.replication_control import MAX_PARTITIONS_PER_BATCH
from metadata_quorum.records import PartitionRecord
from raftlog.net.errors import ErrorCode


def grow(ctx: Ctx, *topics: CreatePartitionsTopic, validate_only: bool = False):  # type: ignore[no-untyped-def]
    return create_partitions(ctx.image, CreatePartitionsRequest(topics, validate_only))


def test_new_partitions_get_the_topics_replication_factor_and_a_leader() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic_id = ctx.create("t", 2, 3)
    result = grow(ctx, CreatePartitionsTopic("t", 5))
    assert [r.error for r in result.response] == [ErrorCode.none]
    assert [type(r) for r in result.records] == [PartitionRecord] * 3
    ctx.run(result)
    topic = ctx.image.topics[topic_id]
    assert sorted(topic.partitions) == [0, 1, 2, 3, 4]
    for pid in (2, 3, 4):
        part = topic.partitions[pid]
        assert len(part.replicas) == 3 and set(part.isr) == set(part.replicas)
        assert part.leader == part.replicas[0]
    # Existing partitions are untouched.
    assert all(topic.partitions[p].leader_epoch == 0 for p in (0, 1))


def test_the_new_partitions_continue_the_topics_placement() -> None:
    # Growing 2 -> 6 places partitions 2..5 as creating 6 at once would.
    grown, direct = Ctx(), Ctx()
    for c in (grown, direct):
        c.add_brokers(1, 2, 3, 4)
    grown_id = grown.create("t", 2, 2)
    grown.run(grow(grown, CreatePartitionsTopic("t", 6)))
    direct_id = direct.create("t", 6, 2)
    assert ({p: r.replicas for p, r in grown.image.topics[grown_id].partitions.items()}
            == {p: r.replicas for p, r in direct.image.topics[direct_id].partitions.items()})


def test_manual_assignments() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic_id = ctx.create("t", 1, 2)
    ctx.run(grow(ctx, CreatePartitionsTopic("t", 3, ((3, 1), (2, 3)))))
    parts = ctx.image.topics[topic_id].partitions
    assert (parts[1].replicas, parts[1].leader) == ((3, 1), 3)
    assert (parts[2].replicas, parts[2].leader) == ((2, 3), 2)


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (CreatePartitionsTopic("missing", 3), ErrorCode.unknown_topic_or_partition, "missing"),
        (CreatePartitionsTopic("t", 2), ErrorCode.invalid_partitions, "already has 2"),
        (CreatePartitionsTopic("t", 1), ErrorCode.invalid_partitions, "not be an increase"),
        (CreatePartitionsTopic("t", 4, ((1, 2),)), ErrorCode.invalid_replica_assignment,
         "only 1 assignment"),
        (CreatePartitionsTopic("t", 3, ((1,),)), ErrorCode.invalid_replica_assignment,
         "previous partitions, which have 2"),
        (CreatePartitionsTopic("t", 3, ((1, 1),)), ErrorCode.invalid_replica_assignment,
         "duplicates"),
        (CreatePartitionsTopic("t", 3, ((1, 9),)), ErrorCode.invalid_replica_assignment,
         "unregistered"),
    ],
)
def test_errors(topic: CreatePartitionsTopic, code: ErrorCode, message: str) -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    ctx.create("t", 2, 2)
    result = grow(ctx, topic)
    assert result.records == ()
    assert result.response[0].error is code
    assert message in (result.response[0].message or ""), result.response[0].message


def test_replication_factor_above_the_usable_brokers() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    ctx.create("t", 1, 3)
    ctx.heartbeat(3, want_fence=True)
    result = grow(ctx, CreatePartitionsTopic("t", 2))
    assert result.response[0].error is ErrorCode.invalid_replication_factor
    assert result.records == ()


def test_duplicate_topic_and_validate_only() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    dup = grow(ctx, CreatePartitionsTopic("t", 2), CreatePartitionsTopic("t", 3))
    assert [r.error for r in dup.response] == [ErrorCode.invalid_request] * 2
    checked = grow(ctx, CreatePartitionsTopic("t", 2), validate_only=True)
    assert checked.response[0].error is ErrorCode.none and checked.records == ()


def test_a_hostile_count_is_a_policy_violation_not_a_million_records() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.create("t")
    result = grow(ctx, CreatePartitionsTopic("t", (1 << 31) - 1))
    assert result.response[0].error is ErrorCode.policy_violation and result.records == ()
    assert grow(ctx, CreatePartitionsTopic("t", MAX_PARTITIONS_PER_BATCH + 1)).records


def test_create_topics_has_the_same_cap_for_the_whole_request() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    request = CreateTopicsRequest((
        CreatableTopic("a", MAX_PARTITIONS_PER_BATCH, 1), CreatableTopic("b", 1, 1)))
    result = create_topics(ctx.image, request, ctx.config, next_offset=ctx.next_offset)
    assert [r.error for r in result.response] == [ErrorCode.policy_violation] * 2
    assert result.records == ()
    huge = CreateTopicsRequest((CreatableTopic("c", (1 << 31) - 1, 1),))
    result = create_topics(ctx.image, huge, ctx.config, next_offset=ctx.next_offset)
    assert result.response[0].error is ErrorCode.policy_violation
