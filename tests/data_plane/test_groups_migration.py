"""KIP-848 online migration in the coordinator shard: a consumer-protocol
member upgrades a classic group, classic members live inside a consumer
group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timeouts), and the group
goes back to classic when its last consumer-protocol member leaves. Every
step is checked against the shard's invariants and a replay of the records
written (a coordinator failover)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from data_plane.groups.assignors import AssignmentTopic
from data_plane.groups.consumer_group import MemberState
from data_plane.groups.consumer_model import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    MappingTopicsView,
)
from data_plane.groups.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from data_plane.groups.group import GroupState
from data_plane.groups.model import GroupConfig, JoinProtocol, LeavingMember
from data_plane.groups.shard import GroupCoordinatorShard
from data_plane.groups.testing import Ctx, assignment, stable_group, subscription
from raftlog.net.errors import ErrorCode

E = ErrorCode
T = uuid.UUID(int=5)
VIEW = MappingTopicsView([AssignmentTopic(T, "t", 6)])


def make(policy: str = "bidirectional") -> Ctx:
    ctx = Ctx(config=GroupConfig(initial_rebalance_delay_ms=0, consumer_migration_policy=policy))
    ctx.shard.topics_source = lambda: VIEW
    return ctx


def hb(ctx: Ctx, member_id: str, epoch: int, owned: Any = None,
       **fields: Any) -> ConsumerGroupHeartbeatResponse:
    h = ctx.handle()
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 30_000)
        fields.setdefault("subscribed_topic_names", ("t",))
        owned = () if owned is None else owned
    ctx.absorb(ctx.shard.handle_consumer_group_heartbeat(
        h, ConsumerGroupHeartbeatRequest("g", member_id, epoch, owned=owned, **fields),
        VIEW, ctx.now_ms))
    ctx.shard.check_invariants()
    response = ctx.replies[h]
    assert isinstance(response, ConsumerGroupHeartbeatResponse)
    return response


def replayed(ctx: Ctx) -> GroupCoordinatorShard:
    fresh = GroupCoordinatorShard(7, ctx.config, rng=random.Random(1))
    for record in ctx.records:
        fresh.replay_record(record.key, record.value)
    fresh.complete_load(ctx.now_ms)
    fresh.check_invariants()
    return fresh


def consumer_state(shard: GroupCoordinatorShard) -> Any:
    g = shard.consumer_group("g")
    assert g is not None
    return (g.group_epoch, g.assignment_epoch,
            {mid: (m.member_epoch, m.state, dict(m.assigned), m.classic, m.subscribed_topic_names)
             for mid, m in g.members.items()},
            {mid: dict(a) for mid, a in g.target.items()})


def synced(ctx: Ctx, member_id: str, generation: int) -> set[int]:
    """SyncGroup as a classic follower; the partitions of t it is given."""
    h = ctx.sync(member_id, generation)
    response = ctx.replies[h]
    assert response.error is E.none, response
    parts, _ = decode_assignment(response.assignment)
    return {p for topic, ps in parts for p in ps if topic == "t"}


def rejoin(ctx: Ctx, member_id: str, owned: set[int]) -> Any:
    """A classic member's JoinGroup, reporting what it owns (subscription v1)."""
    meta = encode_subscription(Subscription(1, ("t",), None, (("t", tuple(sorted(owned))),)))
    h = ctx.join(member_id, protocols=(JoinProtocol("range", meta),))
    ctx.shard.check_invariants()
    return ctx.replies[h]


def test_embedded_protocol_round_trips() -> None:
    sub = Subscription(3, ("a", "b"), b"u", (("a", (1, 2)),), 7, "rack")
    assert decode_subscription(encode_subscription(sub)) == sub
    assert decode_subscription(subscription("t")).topics == ("t",)
    assert decode_assignment(encode_assignment({"t": [2, 0]}, 1)) == ((("t", (0, 2)),), None)
    assert decode_assignment(assignment({"t": [1]})) == ((("t", (1,)),), None)
    assert decode_assignment(b"") == ((), None)


def test_a_consumer_member_upgrades_a_classic_group_and_the_partitions_move_safely() -> None:
    ctx = make()
    (a, b), generation = stable_group(ctx, 2)  # round robin: a 0,2,4; b 1,3,5
    r = hb(ctx, "c1", 0)
    assert r.error is E.none and ctx.shard.group("g") is None
    assert ctx.shard.group_migrations == {"upgrade": 1, "downgrade": 0}
    group = ctx.shard.consumer_group("g")
    assert group is not None
    # The classic members came over at their generation, with their partitions.
    assert group.members[a].member_epoch == generation and group.members[a].classic is not None
    assert group.members[a].classic.session_timeout_ms == 10_000
    assert group.members[a].assigned == {T: frozenset({0, 2, 4})}
    assert group.group_epoch == generation + 1  # the joiner bumped it
    # The joiner gets only what nobody holds: nothing yet.
    assert not r.assignment or not any(p for _, p in r.assignment)
    assert consumer_state(replayed(ctx)) == consumer_state(ctx.shard)
    # The classic members are told to rejoin; they give up what moves.
    assert ctx.heartbeat(a, generation) is E.rebalance_in_progress
    owned = {a: {0, 2, 4}, b: {1, 3, 5}}
    for m in (a, b):
        joined = rejoin(ctx, m, owned[m])
        assert joined.error is E.none and joined.leader == "" and not joined.members
        assert joined.protocol_name == "range"
        owned[m] = synced(ctx, m, joined.generation_id)
    # Revoking took a round; rejoin again to take the new assignment.
    for _ in range(3):
        for m in (a, b):
            group = ctx.shard.consumer_group("g")
            assert group is not None
            if ctx.heartbeat(m, group.members[m].member_epoch) is E.rebalance_in_progress:
                joined = rejoin(ctx, m, owned[m])
                owned[m] = synced(ctx, m, joined.generation_id)
        r = hb(ctx, "c1", r.member_epoch, owned=((T, ()),) if r.assignment is None else r.assignment)
    group = ctx.shard.consumer_group("g")
    assert group is not None
    c1 = group.members["c1"].assigned.get(T, frozenset())
    assert c1 and owned[a] and owned[b]
    assert not (c1 & owned[a]) and not (c1 & owned[b]) and not (owned[a] & owned[b])
    assert c1 | owned[a] | owned[b] == set(range(6))
    assert all(m.state is MemberState.STABLE for m in group.members.values())
    assert consumer_state(replayed(ctx)) == consumer_state(ctx.shard)


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_without_upgrade_the_groups_do_not_mix(policy: str) -> None:
    ctx = make(policy)
    stable_group(ctx, 2)
    written = len(ctx.records)
    r = hb(ctx, "c1", 0)
    assert r.error is E.group_id_not_found
    assert r.error_message == ("Cannot upgrade classic group g to consumer group because "
                               "the online upgrade is disabled.")
    assert len(ctx.records) == written and ctx.shard.group("g") is not None


def test_a_custom_assignor_with_user_data_blocks_the_upgrade() -> None:
    ctx = make()
    (a,), _ = stable_group(ctx, 1)
    group = ctx.shard.group("g")
    assert group is not None
    group.members[a].assignment = assignment({"t": [0]})[:-4] + b"\x00\x00\x00\x01x"
    written = len(ctx.records)
    r = hb(ctx, "c1", 0)
    assert r.error is E.group_id_not_found and "unsupported custom assignor" in (r.error_message or "")
    assert len(ctx.records) == written


def test_another_protocol_type_or_a_heartbeat_with_an_epoch_is_refused() -> None:
    ctx = make()
    ctx.join_new(protocol_type="connect")
    r = hb(ctx, "c1", 0)
    assert r.error is E.group_id_not_found and "embedded protocol" in (r.error_message or "")
    assert hb(ctx, "c1", 3).error is E.group_id_not_found


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    ctx = make()
    (a, b), _ = stable_group(ctx, 2)
    assert hb(ctx, "c1", 0).error is E.none
    group = ctx.shard.consumer_group("g")
    assert group is not None
    epoch = group.group_epoch
    held_a = set(group.members[a].assigned[T])
    left = hb(ctx, "c1", -1)
    assert left.error is E.none
    assert ctx.shard.group_migrations == {"upgrade": 1, "downgrade": 1}
    assert ctx.shard.consumer_group("g") is None
    classic = ctx.shard.group("g")
    assert classic is not None
    assert classic.generation_id == epoch and classic.state is GroupState.PREPARING_REBALANCE
    assert set(classic.members) == {a, b} and classic.protocol_name == "range"
    # Each member's assignment is what it holds in the consumer group (the
    # rebalance that follows hands out c1's share).
    assert {p for _, ps in decode_assignment(classic.members[a].assignment)[0] for p in ps} \
        == held_a
    # The members learn of the rebalance and rejoin; the group settles.
    assert ctx.heartbeat(a, epoch) is E.rebalance_in_progress
    handles = {m: ctx.join(m) for m in (a, b)}
    assert classic.state is GroupState.COMPLETING_REBALANCE
    assert {ctx.replies[h].generation_id for h in handles.values()} == {epoch + 1}
    assert replayed(ctx).group("g") is not None and replayed(ctx).consumer_group("g") is None


def test_an_upgrade_right_after_a_downgrade_gives_nobody_what_a_classic_member_still_holds(
) -> None:
    """Found by the mixed-group fuzz (test_groups_mixed_stateful.py). A
    classic member that holds every partition is to give half to c1 when c1
    leaves; the group goes back to classic before the member rejoined, so it
    still holds them all. c2 joining at once upgrades the group again: c2
    must get nothing the member still holds, until the member gives it up."""
    ctx = make()
    (a,), _ = stable_group(ctx, 1)
    assert hb(ctx, "c1", 0).error is E.none
    group = ctx.shard.consumer_group("g")
    assert group is not None and set(group.members[a].assigned[T]) == set(range(6))
    assert set(group.target[a][T]) < set(range(6))  # a is to give some up
    assert hb(ctx, "c1", -1).error is E.none
    assert ctx.shard.consumer_group("g") is None  # downgraded; a has not rejoined
    r = hb(ctx, "c2", 0)
    assert r.error is E.none and r.assignment is not None
    assert {p for _, ps in r.assignment for p in ps} == set()
    # a learns of the change, gives its partitions up, and c2 gets its share.
    group = ctx.shard.consumer_group("g")
    assert group is not None
    assert ctx.heartbeat(a, group.members[a].member_epoch) is E.rebalance_in_progress
    joined = rejoin(ctx, a, set())
    assert synced(ctx, a, joined.generation_id) <= set(ctx.shard.consumer_group("g").target[a][T])
    r = hb(ctx, "c2", r.member_epoch, owned=())
    assert r.error is E.none and r.assignment is not None and {p for _, ps in r.assignment for p in ps}
    assert consumer_state(replayed(ctx)) == consumer_state(ctx.shard)


def test_an_upgrade_during_a_rebalance_by_a_member_without_the_groups_last_protocol() -> None:
    """Found by the mixed-group fuzz. a offers cooperative-sticky and range,
    and the group chose cooperative-sticky; b, offering range only, joins,
    and while that rebalance runs the group still names cooperative-sticky.
    A consumer joining then upgrades the group, reading b's subscription
    from the protocol b offers (it was refused as malformed before)."""
    ctx = make()
    both = tuple(JoinProtocol(n, subscription("t")) for n in ("cooperative-sticky", "range"))
    a, h = ctx.join_new(protocols=both)
    generation = ctx.replies[h].generation_id
    assert ctx.replies[ctx.sync(a, generation, (
        (a, assignment({"t": [0, 1, 2, 3, 4, 5]})),))].error is E.none
    classic = ctx.shard.group("g")
    assert classic is not None and classic.protocol_name == "cooperative-sticky"
    b, _ = ctx.join_new()  # range only: parked, the group rebalancing
    assert classic.state is GroupState.PREPARING_REBALANCE
    assert classic.protocol_name == "cooperative-sticky" and b in classic.members
    r = hb(ctx, "c1", 0)
    assert r.error is E.none, r
    group = ctx.shard.consumer_group("g")
    assert group is not None and set(group.members) == {a, b, "c1"}
    assert set(group.members[a].assigned[T]) == set(range(6))  # a keeps what it holds
    assert consumer_state(replayed(ctx)) == consumer_state(ctx.shard)


def test_a_classic_member_joins_a_consumer_group_and_is_assigned_by_the_coordinator() -> None:
    ctx = make()
    r = hb(ctx, "c1", 0)
    assert r.assignment is not None
    first = ctx.replies[ctx.join()]
    assert first.error is E.member_id_required
    joined = ctx.replies[ctx.join(first.member_id)]
    assert joined.error is E.none and joined.leader == ""
    member = first.member_id
    group = ctx.shard.consumer_group("g")
    assert group is not None and group.members[member].classic is not None
    (described,) = ctx.shard.handle_consumer_group_describe(("g",), VIEW)
    assert {m.member_id: m.classic for m in described.members} == {"c1": False, member: True}
    # Nothing free yet: c1 holds everything until it revokes.
    assert synced(ctx, member, joined.generation_id) == set()
    r = hb(ctx, "c1", r.member_epoch, owned=r.assignment)
    assert r.assignment is not None
    r = hb(ctx, "c1", r.member_epoch, owned=r.assignment)
    assert ctx.heartbeat(member, joined.generation_id) is E.rebalance_in_progress
    joined = rejoin(ctx, member, set())
    mine = synced(ctx, member, joined.generation_id)
    assert len(mine) == 3
    assert ctx.heartbeat(member, joined.generation_id) is E.none
    # Wrong generation and wrong protocol name are refused, as Kafka does.
    assert ctx.heartbeat(member, joined.generation_id + 5) is E.illegal_generation
    bad = ctx.commit({("t", 0): 1}, generation=joined.generation_id + 5, member_id=member)
    assert bad.partitions[0].error is E.illegal_generation
    assert consumer_state(replayed(ctx)) == consumer_state(ctx.shard)


def test_a_classic_member_that_never_syncs_is_fenced_and_the_group_stays_consumer() -> None:
    ctx = make()
    hb(ctx, "c1", 0)
    first = ctx.replies[ctx.join()]
    ctx.join(first.member_id)
    group = ctx.shard.consumer_group("g")
    assert group is not None and first.member_id in group.members
    epoch = group.group_epoch
    ctx.advance(30_001)  # its rebalance timeout: no SyncGroup came
    group = ctx.shard.consumer_group("g")
    assert group is not None and first.member_id not in group.members
    assert group.group_epoch == epoch + 1


def test_classic_members_leaving_one_by_one_keep_a_consumer_group_and_an_expired_consumer_downgrades() -> None:
    ctx = make()
    (a, b), _ = stable_group(ctx, 2)
    hb(ctx, "c1", 0)
    response = ctx.leave(LeavingMember(a, None), LeavingMember("nobody", None))
    assert [m.error for m in response.members] == [E.none, E.unknown_member_id]
    group = ctx.shard.consumer_group("g")
    assert group is not None and set(group.members) == {b, "c1"}
    # b keeps heartbeating; c1 goes silent past its session.
    for _ in range(5):
        ctx.advance(9_000)
        g = ctx.shard.consumer_group("g")
        if g is None:
            break
        error = ctx.heartbeat(b, g.members[b].member_epoch)
        if error is E.rebalance_in_progress:
            joined = rejoin(ctx, b, set())
            synced(ctx, b, joined.generation_id)
    classic = ctx.shard.group("g")
    assert ctx.shard.consumer_group("g") is None and classic is not None
    assert set(classic.members) == {b}


def _random_migration(seed: int) -> None:
    """Classic and consumer-protocol clients join, sync, heartbeat, leave and
    go silent at random; the shard must answer every request, keep its
    invariants, and be rebuilt exactly from its records."""
    rng = random.Random(seed)
    ctx = make()
    classic: dict[str, int] = {}  # member id -> generation it last got
    owned: dict[str, set[int]] = {}
    consumers: dict[str, tuple[int, Any]] = {}  # member id -> (epoch, owned pairs)
    for _ in range(120):
        op = rng.randrange(7)
        # A classic group parks JoinGroup and SyncGroup calls (answered by a
        # later step or not at all): their answers are read when present.
        if op == 0 and len(classic) < 3:
            first = ctx.replies[ctx.join()]
            if first.error is E.member_id_required:
                joined = ctx.replies.get(ctx.join(first.member_id))
                classic[first.member_id] = -1 if joined is None else joined.generation_id
                owned[first.member_id] = set()
        elif op == 1 and classic:
            m = rng.choice(sorted(classic))
            meta = encode_subscription(Subscription(1, ("t",), None, (("t", tuple(sorted(owned[m]))),)))
            joined = ctx.replies.get(ctx.join(m, protocols=(JoinProtocol("range", meta),)))
            if joined is not None and joined.error is E.none:
                classic[m] = joined.generation_id
        elif op == 2 and classic:
            m = rng.choice(sorted(classic))
            response = ctx.replies.get(ctx.sync(m, classic[m]))
            if response is not None and response.error is E.none:
                owned[m] = {p for _, ps in decode_assignment(response.assignment)[0] for p in ps}
        elif op == 3 and classic:
            m = rng.choice(sorted(classic))
            if ctx.heartbeat(m, classic[m]) is E.unknown_member_id:
                del classic[m]
        elif op == 4:
            mid = f"c{rng.randrange(2)}"
            epoch, pairs = consumers.get(mid, (0, ()))
            r = hb(ctx, mid, epoch, owned=pairs)
            if r.error is E.none:
                consumers[mid] = (r.member_epoch, r.assignment if r.assignment is not None
                                  else pairs)
            else:
                consumers.pop(mid, None)
        elif op == 5 and (classic or consumers):
            if consumers and rng.random() < 0.5:
                mid = rng.choice(sorted(consumers))
                hb(ctx, mid, -1)
                del consumers[mid]
            elif classic:
                m = rng.choice(sorted(classic))
                ctx.leave(LeavingMember(m, None))
                del classic[m]
        else:
            ctx.advance(rng.choice((1_000, 5_000, 20_000)))
        ctx.shard.check_invariants()
    fresh = replayed(ctx)
    if ctx.shard.consumer_group("g") is not None:
        assert consumer_state(fresh) == consumer_state(ctx.shard)
    else:
        live = ctx.shard.group("g")
        if live is not None and live.last_persisted is not None:
            # A classic group is persisted per generation (not its rebalance
            # in progress): the replay holds its last persisted generation.
            loaded = fresh.group("g")
            assert loaded is not None
            assert loaded.generation_id == live.last_persisted.generation
            assert set(loaded.members) == {m.member_id for m in live.last_persisted.members}


@pytest.mark.parametrize("seed", range(40))
def test_random_migration_keeps_the_shard_consistent(seed: int) -> None:
    _random_migration(seed)
