"""Hypothesis: random join/leave/heartbeat/sync/commit/time schedules keep the group invariants,
and replaying the records they produced rebuilds the same durable state (failover)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.groups.describe import parse_assignment
from data_plane.groups.group import GroupState
from data_plane.groups.model import (
    GroupConfig,
    LeavingMember,
    OffsetCommitPartition,
    TxnOffsetCommitRequest,
)
from data_plane.groups.records import GroupMetadataKey, decode_key, decode_value
from data_plane.groups.shard import GroupCoordinatorShard
from data_plane.groups.testing import SESSION_MS, Ctx, round_robin_assign

_steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["join", "rejoin", "static", "leave", "hb", "sync", "commit", "txn", "marker", "time"]
        ),
        st.integers(0, 4),
        st.integers(0, SESSION_MS * 2),
    ),
    max_size=40,
)


def _run(ctx: Ctx, steps: list[tuple[str, int, int]]) -> None:
    generations: list[int] = []
    known: list[str] = []
    for op, i, n in steps:
        group = ctx.shard.group("g")
        members = list(group.members) if group is not None else []
        mid = members[i % len(members)] if members else (known[i % len(known)] if known else "")
        gen = group.generation_id if group is not None else 0
        if op == "join":
            known.append(ctx.join_new()[0])
        elif op == "rejoin" and mid:
            ctx.join(
                mid,
                instance=group.members[mid].group_instance_id
                if group and mid in group.members
                else None,
            )
        elif op == "static":
            ctx.join(instance=f"i{i}")
        elif op == "leave" and mid:
            ctx.leave(LeavingMember(mid))
        elif op == "hb" and mid:
            ctx.heartbeat(mid, gen)
        elif op == "sync" and mid and group is not None:
            leader = group.leader_id
            ctx.sync(mid, gen, round_robin_assign(members) if mid == leader else ())
        elif op == "commit":
            ctx.commit({("t", i): n}, generation=gen if mid else -1, member_id=mid)
        elif op == "txn":
            h = ctx.handle()
            req = TxnOffsetCommitRequest(
                "tx", "g", 100 + i % 2, 0, (OffsetCommitPartition("t", i, n),)
            )
            ctx.absorb(ctx.shard.handle_txn_offset_commit(h, req, ctx.now_ms))
        elif op == "marker":
            ctx.shard.replay_txn_marker(100 + i % 2, committed=n % 2 == 0)
            ctx.records.append(("marker", 100 + i % 2, n % 2 == 0))
        elif op == "time":
            ctx.advance(n)
        _check(ctx, generations)


def _check(ctx: Ctx, generations: list[int]) -> None:
    ctx.shard.check_invariants()
    group = ctx.shard.group("g")
    if group is None:
        return
    # Generation ids never go backwards (a group deleted and recreated restarts; not here: "g" has offsets).
    if generations and group.generation_id < generations[-1]:
        assert group.state is GroupState.EMPTY and group.generation_id == 0
    generations.append(group.generation_id)
    if group.state is GroupState.STABLE:
        assert all(m.assignment for m in group.members.values()), (
            "Stable: everyone has an assignment"
        )
        owned = [tp for m in group.members.values() for tp in parse_assignment(m.assignment) or []]
        assert len(owned) == len(set(owned)), "a partition owned twice in one generation"
    assert not (set(group.pending_members) & set(group.members))


def _replay(ctx: Ctx) -> GroupCoordinatorShard:
    replayed = GroupCoordinatorShard(7, ctx.config, rng=random.Random(0))
    # Records of txn results carry the producer; markers were interleaved in log order.
    txn_of = {}
    for result in ctx.batches:
        for r in result.records:
            txn_of[id(r)] = result.txn.producer_id if result.txn else None
    for rec in ctx.records:
        if isinstance(rec, tuple):
            replayed.replay_txn_marker(rec[1], rec[2])
        else:
            replayed.replay_record(rec.key, rec.value, producer_id=txn_of[id(rec)])
    replayed.complete_load(ctx.now_ms)
    return replayed


@settings(max_examples=120, deadline=None)
@given(_steps, st.integers(0, 2**32))
def test_random_schedules_keep_invariants_and_replay_rebuilds_state(
    steps: list[tuple[str, int, int]], seed: int
) -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=0), seed=seed)
    _run(ctx, steps)
    # Every handle was answered once, or is still parked in the shard.
    issued = set(range(1, ctx._next_handle + 1))
    assert issued == set(ctx.replies) | ctx.shard.parked_handles()
    assert not set(ctx.replies) & ctx.shard.parked_handles()
    replayed = _replay(ctx)
    replayed.check_invariants()
    assert replayed.offsets.snapshot() == ctx.shard.offsets.snapshot()
    assert replayed.offsets.pending_snapshot() == ctx.shard.offsets.pending_snapshot()
    live_persisted = {
        gid: g.last_persisted
        for gid in ctx.shard.group_ids()
        if (g := ctx.shard.group(gid)) and g.last_persisted
    }
    last_written = {}
    for rec in ctx.records:
        if not isinstance(rec, tuple) and isinstance(key := decode_key(rec.key), GroupMetadataKey):
            last_written[key.group_id] = decode_value(key, rec.value)
    assert {
        g: v for g, v in last_written.items() if v is not None and g in live_persisted
    } == live_persisted
    for gid, value in live_persisted.items():
        loaded = replayed.group(gid)
        assert loaded is not None and loaded.to_metadata_value() == value
