"""Scripted tests of the classic group coordinator shard: one rule per test."""

from __future__ import annotations

from data_plane.groups.group import GroupState
from data_plane.groups.model import (
    GroupConfig,
    JoinProtocol,
    LeavingMember,
    ListGroupsRequest,
)
from data_plane.groups.records import GroupMetadataKey, decode_key, decode_value
from data_plane.groups.testing import (
    REBALANCE_MS,
    SESSION_MS,
    Ctx,
    settle,
    stable_group,
    subscription,
)
from data_plane.groups.testing import round_robin_assign as _assign
from raftlog.net.errors import ErrorCode as E

# --- JoinGroup ---------------------------------------------------------------------


def test_kip394_first_join_gets_member_id_required() -> None:
    ctx = Ctx()
    h = ctx.join()
    resp = ctx.replies[h]
    assert resp.error == E.member_id_required
    assert resp.member_id.startswith("client-")
    assert ctx.shard.group("g").pending_members  # type: ignore[union-attr]


def test_join_v3_and_older_adds_the_member_directly() -> None:
    ctx = Ctx()
    h = ctx.join(require_known=False)
    resp = ctx.replies[h]
    assert resp.error == E.none and resp.generation_id == 1 and resp.leader == resp.member_id


def test_single_member_rebalance_completes_immediately_without_initial_delay() -> None:
    ctx = Ctx()
    mid, h = ctx.join_new()
    resp = ctx.replies[h]
    assert (resp.error, resp.generation_id, resp.leader, resp.protocol_name) == (
        E.none,
        1,
        mid,
        "range",
    )
    assert [m.member_id for m in resp.members] == [mid]
    assert ctx.shard.group("g").state is GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]


def test_initial_rebalance_delay_waits_and_extends_for_new_joiners() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=3000))
    a, ha = ctx.join_new()
    assert ctx.pending(ha)
    ctx.advance(2000)
    b, hb = ctx.join_new()
    ctx.advance(1000)  # first delay ends, but b joined during it: extend once more
    assert ctx.pending(ha) and ctx.pending(hb)
    ctx.advance(3000)
    assert ctx.replies[ha].generation_id == ctx.replies[hb].generation_id == 1
    assert ctx.replies[ha].leader == a
    assert {m.member_id for m in ctx.replies[ha].members} == {a, b}
    assert ctx.replies[hb].members == ()  # only the leader gets the member list


def test_second_member_joining_stable_group_triggers_rebalance_and_answers_all() -> None:
    ctx = Ctx()
    [a], gen = stable_group(ctx, 1)
    _b, hb = ctx.join_new()
    assert ctx.pending(hb)
    assert ctx.heartbeat(a, gen) == E.rebalance_in_progress
    ha = ctx.join(a)
    assert ctx.replies[ha].generation_id == ctx.replies[hb].generation_id == gen + 1
    assert ctx.replies[ha].leader == a  # leader kept


def test_protocol_selection_picks_a_protocol_all_members_support() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    _, h1 = ctx.join_new(protocols=(JoinProtocol("sticky", b"1"), JoinProtocol("range", b"1")))
    _, h2 = ctx.join_new(protocols=(JoinProtocol("roundrobin", b"2"), JoinProtocol("range", b"2")))
    ctx.advance(10)  # the delay is extended once because a member joined during it
    ctx.advance(10)
    assert ctx.replies[h1].protocol_name == ctx.replies[h2].protocol_name == "range"


def test_join_errors() -> None:
    ctx = Ctx()
    assert ctx.replies[ctx.join(group="")].error == E.invalid_group_id
    assert ctx.replies[ctx.join(session_ms=10)].error == E.invalid_session_timeout
    assert ctx.replies[ctx.join("nobody")].error == E.unknown_member_id
    assert ctx.shard.group("g") is None  # a failed first join leaves nothing behind
    stable_group(ctx, 1)
    other = ctx.join_new(protocols=(JoinProtocol("other", b""),))[1]
    assert ctx.replies[other].error == E.inconsistent_group_protocol
    wrong_type = ctx.join(protocol_type="connect")
    assert ctx.replies[wrong_type].error == E.inconsistent_group_protocol


def test_group_max_size_reached() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=0, max_size=1))
    stable_group(ctx, 1)
    _, h = ctx.join_new()
    assert ctx.replies[h].error == E.group_max_size_reached


# --- SyncGroup ---------------------------------------------------------------------


def test_followers_wait_for_the_leaders_assignment() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    a, ha = ctx.join_new()
    b, _hb = ctx.join_new()
    ctx.advance(10)
    ctx.advance(10)
    gen = ctx.replies[ha].generation_id
    sb = ctx.sync(b, gen)
    assert ctx.pending(sb)
    n_records = len(ctx.records)
    sa = ctx.sync(a, gen, ((a, b"A"), (b, b"B")))
    assert ctx.replies[sa].assignment == b"A" and ctx.replies[sb].assignment == b"B"
    # The leader's sync persisted the group; both replies travel in that result.
    last = ctx.batches[-1]
    assert len(last.records) == 1 and {r.handle for r in last.replies} == {sa, sb}
    assert len(ctx.records) == n_records + 1
    assert ctx.shard.group("g").state is GroupState.STABLE  # type: ignore[union-attr]


def test_sync_errors() -> None:
    ctx = Ctx()
    assert ctx.replies[ctx.sync("x", 1, group="")].error == E.invalid_group_id
    assert ctx.replies[ctx.sync("x", 1)].error == E.unknown_member_id
    [a], gen = stable_group(ctx, 1)
    assert ctx.replies[ctx.sync("x", gen)].error == E.unknown_member_id
    assert ctx.replies[ctx.sync(a, gen + 5)].error == E.illegal_generation
    ctx.join_new()  # rebalance begins
    assert ctx.replies[ctx.sync(a, gen)].error == E.rebalance_in_progress


def test_sync_rejects_a_different_protocol() -> None:
    from data_plane.groups.model import SyncGroupRequest

    ctx = Ctx()
    [a], gen = stable_group(ctx, 1)
    h = ctx.handle()
    ctx.absorb(
        ctx.shard.handle_sync_group(h, SyncGroupRequest("g", gen, a, protocol_name="x"), ctx.now_ms)
    )
    assert ctx.replies[h].error == E.inconsistent_group_protocol


def test_pending_sync_gets_rebalance_in_progress_when_a_rebalance_starts() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    a, ha = ctx.join_new()
    b, _ = ctx.join_new()
    ctx.advance(10)
    ctx.advance(10)
    gen = ctx.replies[ha].generation_id
    sb = ctx.sync(b, gen)
    ctx.leave(LeavingMember(a))
    assert ctx.replies[sb].error == E.rebalance_in_progress


def _joined_pair(ctx: Ctx) -> tuple[str, str, int]:
    """Two members whose join has completed (CompletingRebalance): (leader,
    follower, generation)."""
    a, ha = ctx.join_new()
    b, _ = ctx.join_new()
    ctx.advance(10)
    ctx.advance(10)
    join = ctx.replies[ha]
    assert join.leader == a and ctx.shard.group("g").state is GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]
    return a, b, join.generation_id


def test_a_leader_that_heartbeats_but_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    """Kafka's pending-sync expiry: the follower's SyncGroup is parked on the
    leader's assignment; a leader that keeps heartbeating but sends no
    SyncGroup would hold the group in CompletingRebalance for ever. After
    the rebalance timeout the leader is removed, the parked follower gets
    REBALANCE_IN_PROGRESS, and its rejoin makes a new generation it leads."""
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    a, b, gen = _joined_pair(ctx)
    sb = ctx.sync(b, gen)
    elapsed = 0
    while elapsed + SESSION_MS // 2 < REBALANCE_MS:
        ctx.advance(SESSION_MS // 2)
        elapsed += SESSION_MS // 2
        assert ctx.heartbeat(a, gen) == E.none  # alive, so the session never expires
        assert ctx.pending(sb)
    ctx.advance(REBALANCE_MS - elapsed)
    assert ctx.replies[sb].error == E.rebalance_in_progress
    group = ctx.shard.group("g")
    assert group is not None and list(group.members) == [b]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert ctx.heartbeat(a, gen) == E.unknown_member_id
    rejoin = ctx.replies[ctx.join(b)]
    assert (rejoin.generation_id, rejoin.leader) == (gen + 1, b)


def test_a_follower_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    """The leader synced (the group is Stable) but a follower never did: it
    holds an assignment it never received. At the rebalance timeout it is
    removed and the group rebalances, so the leader is told to rejoin."""
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    a, b, gen = _joined_pair(ctx)
    assert ctx.replies[ctx.sync(a, gen, _assign([a, b]))].error == E.none
    elapsed = 0
    while elapsed + SESSION_MS // 2 < REBALANCE_MS:
        ctx.advance(SESSION_MS // 2)
        elapsed += SESSION_MS // 2
        assert ctx.heartbeat(a, gen) == ctx.heartbeat(b, gen) == E.none
    ctx.advance(REBALANCE_MS - elapsed)
    group = ctx.shard.group("g")
    assert group is not None and list(group.members) == [a]
    assert ctx.heartbeat(a, gen) == E.rebalance_in_progress


def test_members_that_all_synced_outlive_the_sync_deadline() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    a, b, gen = _joined_pair(ctx)
    ctx.sync(b, gen)
    ctx.sync(a, gen, _assign([a, b]))
    group = ctx.shard.group("g")
    assert group is not None and not group.pending_sync_members
    assert group.sync_deadline_ms is None
    for _ in range(2 * REBALANCE_MS // (SESSION_MS // 2)):
        ctx.advance(SESSION_MS // 2)
        assert ctx.heartbeat(a, gen) == ctx.heartbeat(b, gen) == E.none
    assert group.state is GroupState.STABLE and group.generation_id == gen


def test_the_sync_deadline_is_reported_until_every_member_synced() -> None:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=10))
    a, b, gen = _joined_pair(ctx)
    joined_at = ctx.now_ms
    assert ctx.shard.next_deadline_ms() == joined_at + min(SESSION_MS, REBALANCE_MS)
    ctx.sync(a, gen, _assign([a, b]))  # b's session deadline moves; the sync deadline stays
    assert ctx.shard.group("g").sync_deadline_ms == joined_at + REBALANCE_MS  # type: ignore[union-attr]
    ctx.sync(b, gen)
    assert ctx.shard.group("g").sync_deadline_ms is None  # type: ignore[union-attr]


# --- Heartbeat ---------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    ctx = Ctx()
    assert ctx.heartbeat("x", 1, group="") == E.invalid_group_id
    assert ctx.heartbeat("x", 1) == E.unknown_member_id
    [a], gen = stable_group(ctx, 1)
    assert ctx.heartbeat(a, gen) == E.none
    assert ctx.heartbeat("x", gen) == E.unknown_member_id
    assert ctx.heartbeat(a, gen - 1) == E.illegal_generation


def test_session_timeout_removes_member_and_rebalances() -> None:
    ctx = Ctx()
    (a, b), gen = stable_group(ctx, 2)
    for _ in range(3):
        ctx.advance(SESSION_MS // 2)
        assert ctx.heartbeat(a, gen) in (E.none, E.rebalance_in_progress)
    group = ctx.shard.group("g")
    assert group is not None and b not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    h = ctx.join(a)
    assert ctx.replies[h].generation_id == gen + 1 and ctx.replies[h].leader == a


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    ctx = Ctx()
    (a, b), gen = stable_group(ctx, 2)
    h = ctx.join(a, topics=("t", "u"))  # a changes subscription: rebalance
    t = 0
    while t < REBALANCE_MS:  # b keeps heartbeating but never rejoins
        ctx.advance(SESSION_MS // 2)
        t += SESSION_MS // 2
        if ctx.pending(h):
            ctx.heartbeat(b, gen)
    assert ctx.replies[h].generation_id == gen + 1
    assert [m.member_id for m in ctx.replies[h].members] == [a]


def test_next_deadline_is_reported() -> None:
    ctx = Ctx()
    stable_group(ctx, 1)
    assert ctx.batches[-1].next_deadline_ms == ctx.now_ms + SESSION_MS


# --- LeaveGroup --------------------------------------------------------------------


def test_leader_leaves_new_leader_elected() -> None:
    ctx = Ctx()
    (a, b, c), gen = stable_group(ctx, 3)
    resp = ctx.leave(LeavingMember(a))
    assert resp.members[0].error == E.none
    hb, hc = ctx.join(b), ctx.join(c)
    assert ctx.replies[hb].leader == b == ctx.replies[hc].leader
    assert ctx.replies[hb].generation_id == gen + 1


def test_batch_leave_of_all_members_empties_group_and_persists_it() -> None:
    ctx = Ctx()
    (a, b), gen = stable_group(ctx, 2)
    resp = ctx.leave(LeavingMember(a), LeavingMember(b), LeavingMember("ghost"))
    assert [m.error for m in resp.members] == [E.none, E.none, E.unknown_member_id]
    group = ctx.shard.group("g")
    assert group is not None and group.state is GroupState.EMPTY and group.generation_id == gen + 1
    key = decode_key(ctx.records[-1].key)
    assert key == GroupMetadataKey("g")
    value = decode_value(key, ctx.records[-1].value)
    assert value is not None and value.members == ()  # type: ignore[union-attr]


def test_leave_errors() -> None:
    ctx = Ctx()
    assert ctx.leave(LeavingMember("x"), group="").error == E.invalid_group_id
    assert ctx.leave(LeavingMember("x")).members[0].error == E.unknown_member_id
    ctx.join(instance="i1", require_known=False)
    mid = ctx.shard.group("g").static_members["i1"]  # type: ignore[union-attr]
    assert ctx.leave(LeavingMember("", "nope")).members[0].error == E.unknown_member_id
    assert ctx.leave(LeavingMember("wrong", "i1")).members[0].error == E.fenced_instance_id
    assert ctx.leave(LeavingMember(mid, "i1")).members[0].error == E.none


def test_leaving_member_with_parked_join_gets_unknown_member_id() -> None:
    ctx = Ctx()
    (a, _b), _gen = stable_group(ctx, 2)
    ha = ctx.join(a, topics=("u",))
    assert ctx.pending(ha)
    ctx.leave(LeavingMember(a))
    assert ctx.replies[ha].error == E.unknown_member_id


# --- static membership (KIP-345) ---------------------------------------------------


def _static_group(ctx: Ctx) -> tuple[str, str, int]:
    # Static joiners skip MEMBER_ID_REQUIRED (KIP-345).
    ha = ctx.join(instance="ia")
    hb = ctx.join(instance="ib")
    a, b = ctx.shard.group("g").static_members["ia"], ctx.shard.group("g").static_members["ib"]  # type: ignore[union-attr]
    gen = settle(ctx, {a: ha, b: hb})
    leader = ctx.shard.group("g").leader_id  # type: ignore[union-attr]
    ctx.sync(a, gen, _assign([a, b]) if leader == a else ())
    ctx.sync(b, gen, _assign([a, b]) if leader == b else ())
    return a, b, gen


def test_static_member_bounce_rejoins_without_rebalance() -> None:
    ctx = Ctx()
    a, b, gen = _static_group(ctx)
    old_assignment = ctx.shard.group("g").members[b].assignment  # type: ignore[union-attr]
    h = ctx.join(instance="ib")  # b restarted: no member id, same instance id
    resp = ctx.replies[h]
    assert resp.error == E.none and resp.generation_id == gen and resp.member_id != b
    group = ctx.shard.group("g")
    assert group is not None and group.state is GroupState.STABLE
    assert group.members[resp.member_id].assignment == old_assignment
    assert len(ctx.batches[-1].records) == 1  # the new member id is persisted first
    # The old incarnation is fenced everywhere.
    assert ctx.heartbeat(b, gen, instance="ib") == E.fenced_instance_id
    assert ctx.replies[ctx.join(b, instance="ib")].error == E.fenced_instance_id
    assert ctx.replies[ctx.sync(b, gen, instance="ib")].error == E.fenced_instance_id
    assert ctx.heartbeat(a, gen) == E.none  # nobody else noticed


def test_static_leader_rejoin_gets_members_with_skip_assignment() -> None:
    ctx = Ctx()
    a, _, gen = _static_group(ctx)
    leader_instance = "ia" if ctx.shard.group("g").leader_id == a else "ib"  # type: ignore[union-attr]
    resp = ctx.replies[ctx.join(instance=leader_instance)]
    assert resp.skip_assignment and len(resp.members) == 2 and resp.generation_id == gen


def test_static_member_with_changed_subscription_triggers_rebalance() -> None:
    ctx = Ctx()
    _, _, _gen = _static_group(ctx)
    h = ctx.join(instance="ib", topics=("t", "other"))
    assert ctx.pending(h)
    assert ctx.shard.group("g").state is GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]


# --- ListGroups / DescribeGroups / DeleteGroups ------------------------------------


def test_list_groups_with_state_filter() -> None:
    ctx = Ctx()
    stable_group(ctx, 1)
    ctx.commit({("t", 0): 1}, group="simple")
    listed = ctx.shard.handle_list_groups(ListGroupsRequest())
    assert {(g.group_id, g.state) for g in listed.groups} == {("g", "Stable"), ("simple", "Empty")}
    only = ctx.shard.handle_list_groups(ListGroupsRequest(states_filter=frozenset({"stable"})))
    assert [g.group_id for g in only.groups] == ["g"]
    assert (
        ctx.shard.handle_list_groups(ListGroupsRequest(types_filter=frozenset({"consumer"}))).groups
        == ()
    )


def test_describe_groups_shows_members_and_assignments_when_stable() -> None:
    ctx = Ctx()
    (a, b), _ = stable_group(ctx, 2)
    (d, missing) = ctx.shard.handle_describe_groups(("g", "missing"))
    assert (d.state, d.protocol_type, d.protocol) == ("Stable", "consumer", "range")
    assert [m.member_id for m in d.members] == [a, b]
    assert d.members[0].metadata == subscription("t") and d.members[0].assignment
    assert (missing.state, missing.members) == ("Dead", ())


def test_delete_groups() -> None:
    ctx = Ctx()
    stable_group(ctx, 1)
    ctx.commit({("t", 0): 5}, group="empty")
    h = ctx.handle()
    ctx.absorb(ctx.shard.handle_delete_groups(h, ("g", "empty", "missing"), ctx.now_ms))
    assert [r.error for r in ctx.replies[h].results] == [
        E.non_empty_group,
        E.none,
        E.group_id_not_found,
    ]
    assert ctx.shard.group("empty") is None
    tombstones = [r for r in ctx.batches[-1].records if r.value is None]
    assert len(tombstones) == 2  # the offset and the group


def test_unload_answers_parked_calls_not_coordinator() -> None:
    ctx = Ctx()
    (a, _b), _gen = stable_group(ctx, 2)
    ha = ctx.join(a, topics=("u",))
    for r in ctx.shard.unload():
        ctx.replies[r.handle] = r.response
    assert ctx.replies[ha].error == E.not_coordinator


def test_no_partition_assigned_to_two_members_in_one_generation() -> None:
    ctx = Ctx()
    _ids, _gen = stable_group(ctx, 3)
    group = ctx.shard.group("g")
    assert group is not None
    from data_plane.groups.describe import parse_assignment

    owned = [tp for m in group.members.values() for tp in parse_assignment(m.assignment) or []]
    assert len(owned) == len(set(owned)) == 6
