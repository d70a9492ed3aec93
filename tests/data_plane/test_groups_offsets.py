"""Offsets: OffsetCommit, OffsetFetch, TxnOffsetCommit pending map, OffsetDelete, retention."""

from __future__ import annotations

from data_plane.groups.model import (
    GroupConfig,
    OffsetCommitPartition,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    TopicPartition,
    TxnOffsetCommitRequest,
)
from data_plane.groups.offsets import CommittedOffset, OffsetStore
from data_plane.groups.testing import Ctx, stable_group
from raftlog.net.errors import ErrorCode as E

TP0 = TopicPartition("t", 0)


def fetch(
    ctx: Ctx,
    group: str = "g",
    parts: tuple[TopicPartition, ...] | None = None,
    stable: bool = False,
):  # type: ignore[no-untyped-def]
    return ctx.shard.handle_offset_fetch(OffsetFetchRequest(group, parts, stable))


def test_simple_commit_creates_empty_group_and_is_fetchable() -> None:
    ctx = Ctx()
    resp = ctx.commit({("t", 0): 42, ("t", 1): 7}, metadata="meta")
    assert [p.error for p in resp.partitions] == [E.none, E.none]
    assert len(ctx.batches[-1].records) == 2
    got = fetch(ctx)
    assert [(p.partition, p.offset, p.leader_epoch, p.metadata) for p in got.partitions] == [
        (0, 42, 5, "meta"),
        (1, 7, 5, "meta"),
    ]
    some = fetch(ctx, parts=(TP0, TopicPartition("t", 9)))
    assert [p.offset for p in some.partitions] == [42, -1]
    assert fetch(ctx, group="missing").partitions == ()


def test_commit_with_generation_for_unknown_group_is_illegal_generation() -> None:
    ctx = Ctx()
    assert (
        ctx.commit({("t", 0): 1}, generation=3, member_id="m").partitions[0].error
        == E.illegal_generation
    )


def test_member_commit_checks() -> None:
    ctx = Ctx()
    (a,), gen = stable_group(ctx, 1)
    assert ctx.commit({("t", 0): 1}, generation=gen, member_id=a).partitions[0].error == E.none
    assert (
        ctx.commit({("t", 0): 1}, generation=gen + 1, member_id=a).partitions[0].error
        == E.illegal_generation
    )
    assert (
        ctx.commit({("t", 0): 1}, generation=gen, member_id="x").partitions[0].error
        == E.unknown_member_id
    )
    assert (
        ctx.commit({("t", 0): 1}).partitions[0].error == E.unknown_member_id
    )  # simple commit, members exist
    assert (
        ctx.commit({("t", 0): 1}, generation=gen, member_id=a, instance="nope").partitions[0].error
        == E.none  # an unregistered instance id is not fenced
    )


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    ctx = Ctx()
    mid, h = ctx.join_new()
    gen = ctx.replies[h].generation_id
    assert (
        ctx.commit({("t", 0): 1}, generation=gen, member_id=mid).partitions[0].error
        == E.rebalance_in_progress
    )


def test_fenced_static_member_commit() -> None:
    ctx = Ctx()
    ctx.join(instance="i", require_known=False)
    assert (
        ctx.commit({("t", 0): 1}, generation=1, member_id="old", instance="i").partitions[0].error
        == E.fenced_instance_id
    )


def test_metadata_too_large_is_per_partition() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=0, offset_metadata_max_bytes=3))
    resp = ctx.commit({("t", 0): 1}, metadata="toolong")
    assert resp.partitions[0].error == E.offset_metadata_too_large
    assert ctx.batches[-1].records == ()


def _txn_commit(ctx: Ctx, pid: int, offset: int, group: str = "g", **kw):  # type: ignore[no-untyped-def]
    h = ctx.handle()
    req = TxnOffsetCommitRequest(
        "tx", group, pid, 0, (OffsetCommitPartition("t", 0, offset),), **kw
    )
    result = ctx.absorb(ctx.shard.handle_txn_offset_commit(h, req, ctx.now_ms))
    return result, ctx.replies[h]


def test_txn_offsets_pending_until_commit_marker() -> None:
    ctx = Ctx()
    ctx.commit({("t", 0): 10})
    result, resp = _txn_commit(ctx, pid=77, offset=20)
    assert resp.partitions[0].error == E.none
    assert result.txn is not None and result.txn.producer_id == 77
    assert fetch(ctx, parts=(TP0,)).partitions[0].offset == 10
    assert fetch(ctx, parts=(TP0,), stable=True).partitions[0].error == E.unstable_offset_commit
    ctx.shard.replay_txn_marker(77, committed=True)
    assert fetch(ctx, parts=(TP0,), stable=True).partitions[0].offset == 20


def test_txn_offsets_dropped_on_abort() -> None:
    ctx = Ctx()
    _txn_commit(ctx, pid=5, offset=20)
    ctx.shard.replay_txn_marker(5, committed=False)
    got = fetch(ctx, parts=(TP0,), stable=True).partitions[0]
    assert (got.offset, got.error) == (-1, E.none)


def test_later_plain_commit_wins_over_earlier_txn_commit() -> None:
    ctx = Ctx()
    _txn_commit(ctx, pid=5, offset=20)
    ctx.commit({("t", 0): 30})
    ctx.shard.replay_txn_marker(5, committed=True)
    assert fetch(ctx, parts=(TP0,)).partitions[0].offset == 30


def test_txn_commit_member_checks() -> None:
    ctx = Ctx()
    (a,), gen = stable_group(ctx, 1)
    assert (
        _txn_commit(ctx, 1, 5, member_id="x", generation_id=gen)[1].partitions[0].error
        == E.unknown_member_id
    )
    assert (
        _txn_commit(ctx, 1, 5, member_id=a, generation_id=gen + 1)[1].partitions[0].error
        == E.illegal_generation
    )
    assert _txn_commit(ctx, 1, 5, member_id=a, generation_id=gen)[1].partitions[0].error == E.none


def test_offset_delete() -> None:
    ctx = Ctx()
    assert (
        ctx.shard.handle_offset_delete(1, OffsetDeleteRequest("g", (TP0,)), 0)
        .replies[0]
        .response.error
        == E.group_id_not_found
    )  # type: ignore[union-attr]
    (a,), gen = stable_group(ctx, 1)
    ctx.commit({("t", 0): 1, ("other", 0): 2}, generation=gen, member_id=a)
    h = ctx.handle()
    req = OffsetDeleteRequest("g", (TP0, TopicPartition("other", 0)))
    ctx.absorb(ctx.shard.handle_offset_delete(h, req, ctx.now_ms))
    assert [p.error for p in ctx.replies[h].partitions] == [E.group_subscribed_to_topic, E.none]
    assert [p.topic for p in fetch(ctx).partitions] == ["t"]


def test_offset_delete_non_consumer_group_with_members_is_non_empty_group() -> None:
    ctx = Ctx()
    ctx.join(require_known=False, protocol_type="connect")
    h = ctx.handle()
    ctx.absorb(ctx.shard.handle_offset_delete(h, OffsetDeleteRequest("g", (TP0,)), ctx.now_ms))
    assert ctx.replies[h].error == E.non_empty_group


def test_retention_expires_offsets_of_empty_groups_and_deletes_them() -> None:
    cfg = GroupConfig(
        initial_rebalance_delay_ms=0,
        offsets_retention_ms=60_000,
        offsets_retention_check_interval_ms=1000,
    )
    ctx = Ctx(config=cfg)
    ctx.commit({("t", 0): 1}, group="simple")
    ctx.advance(30_000)
    assert fetch(ctx, group="simple").partitions
    ctx.advance(31_000)
    assert fetch(ctx, group="simple").partitions == ()
    assert ctx.shard.group("simple") is None
    assert sum(1 for r in ctx.batches[-1].records if r.value is None) == 2


def test_retention_keeps_offsets_of_subscribed_topics() -> None:
    cfg = GroupConfig(
        initial_rebalance_delay_ms=0,
        offsets_retention_ms=60_000,
        offsets_retention_check_interval_ms=1000,
        max_session_timeout_ms=10**9,
    )
    ctx = Ctx(config=cfg)
    (a,), gen = stable_group(ctx, 1)
    ctx.commit({("t", 0): 1, ("gone", 0): 1}, generation=gen, member_id=a)
    for _ in range(14):
        ctx.advance(5000)
        ctx.heartbeat(a, gen)
    assert [p.topic for p in fetch(ctx).partitions] == ["t"]


def test_offset_store_complete_txn_respects_order() -> None:
    store = OffsetStore()
    store.put_pending(1, "g", TP0, CommittedOffset(5, -1, "", 0, store.next_seq()))
    store.put("g", TP0, CommittedOffset(9, -1, "", 0, store.next_seq()))
    assert store.complete_txn(1, committed=True) == ["g"]
    assert store.get("g", TP0) == CommittedOffset(9, -1, "", 0, 2)
    assert not store.has_pending("g")
