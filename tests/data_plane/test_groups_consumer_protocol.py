"""KIP-848 consumer groups in the shard: heartbeats, reconciliation, fencing,
static members, timeouts, offsets, and replay (coordinator failover)."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.groups.assignors import AssignmentTopic
from data_plane.groups.consumer_group import (
    ConsumerGroupState,
    MemberState,
    freeze_assignment,
)
from data_plane.groups.consumer_model import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    MappingTopicsView,
)
from data_plane.groups.model import (
    CoordinatorResult,
    GroupConfig,
    JoinGroupRequest,
    JoinProtocol,
    ListGroupsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)
from data_plane.groups.shard import GroupCoordinatorShard
from raftlog.net.errors import ErrorCode

E = ErrorCode
SESSION_MS = 45_000
REBALANCE_MS = 30_000
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def topics(**counts: int) -> MappingTopicsView:
    ids = {"t1": T1, "t2": T2}
    return MappingTopicsView(
        AssignmentTopic(ids.get(name, uuid.uuid5(uuid.NAMESPACE_OID, name)), name, n)
        for name, n in counts.items())


@dataclass
class Ctx:
    """One shard, the topics it sees, a clock, and every record written."""

    view: MappingTopicsView = field(default_factory=lambda: topics(t1=6))
    config: GroupConfig = field(default_factory=GroupConfig)
    now_ms: int = 1_000_000
    shard: GroupCoordinatorShard = field(init=False)
    results: list[CoordinatorResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.shard = GroupCoordinatorShard(0, self.config, rng=random.Random(7))

    def run(self, result: CoordinatorResult) -> CoordinatorResult:
        self.results.append(result)
        self.shard.check_invariants()
        return result

    def hb(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        result = self.run(self.shard.handle_consumer_group_heartbeat(
            "h", request, self.view, self.now_ms))
        (reply,) = result.replies
        assert isinstance(reply.response, ConsumerGroupHeartbeatResponse)
        return reply.response

    def join(self, member_id: str, *names: str, instance_id: str | None = None,
             group: str = "g", assignor: str | None = None) -> ConsumerGroupHeartbeatResponse:
        return self.hb(ConsumerGroupHeartbeatRequest(
            group, member_id, 0, instance_id=instance_id, rebalance_timeout_ms=REBALANCE_MS,
            subscribed_topic_names=names or ("t1",), server_assignor=assignor, owned=()))

    def beat(self, member_id: str, epoch: int, owned: Any = None, group: str = "g",
             **fields: Any) -> ConsumerGroupHeartbeatResponse:
        return self.hb(ConsumerGroupHeartbeatRequest(group, member_id, epoch, owned=owned, **fields))

    def tick(self, advance_ms: int = 0) -> CoordinatorResult:
        self.now_ms += advance_ms
        return self.run(self.shard.tick(self.now_ms))

    def replayed(self) -> GroupCoordinatorShard:
        """A fresh shard that replayed every record written so far."""
        fresh = GroupCoordinatorShard(0, self.config, rng=random.Random(7))
        for result in self.results:
            for record in result.records:
                fresh.replay_record(record.key, record.value)
        fresh.complete_load(self.now_ms)
        fresh.check_invariants()
        return fresh


def snapshot(shard: GroupCoordinatorShard) -> dict[str, Any]:
    """What replay must rebuild exactly (timers excluded)."""
    out: dict[str, Any] = {}
    for gid in shard.group_ids():
        g = shard.consumer_group(gid)
        if g is None:
            out[gid] = "classic"
            continue
        out[gid] = (
            g.group_epoch, g.assignment_epoch, g.metadata_hash,
            {mid: (m.instance_id, m.rack_id, m.client_id, m.subscribed_topic_names,
                   m.subscribed_topic_regex, m.server_assignor, m.rebalance_timeout_ms,
                   m.state, m.member_epoch, m.previous_member_epoch, dict(m.assigned),
                   dict(m.pending_revocation))
             for mid, m in g.members.items()},
            {mid: dict(a) for mid, a in g.target.items()}, dict(g.owners), dict(g.static_members))
    return out


def parts(response: ConsumerGroupHeartbeatResponse) -> dict[uuid.UUID, frozenset[int]]:
    assert response.assignment is not None
    return freeze_assignment(response.assignment)


def pairs(assignment: dict[uuid.UUID, frozenset[int]]) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    return tuple((t, tuple(sorted(p))) for t, p in assignment.items())


# --- joining, reconciling, leaving --------------------------------------------------


def test_first_member_gets_every_partition_at_the_new_epoch() -> None:
    ctx = Ctx()
    r = ctx.join("m1")
    assert r.error is E.none and r.member_id == "m1"
    assert r.member_epoch == 1
    assert parts(r) == {T1: frozenset(range(6))}
    assert r.heartbeat_interval_ms == 5_000
    group = ctx.shard.consumer_group("g")
    assert group is not None and group.state is ConsumerGroupState.STABLE


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    ctx = Ctx()
    r1 = ctx.join("m1")
    r2 = ctx.join("m2")
    # m2 is at the new epoch but gets nothing yet: m1 still holds everything.
    assert r2.member_epoch == 2 and parts(r2) == {}
    group = ctx.shard.consumer_group("g")
    assert group is not None
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    # m1 learns it must give up three partitions, keeping its epoch.
    r1 = ctx.beat("m1", 1, owned=pairs(parts(r1)))
    kept = parts(r1)
    assert r1.member_epoch == 1 and len(kept[T1]) == 3
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    # Until m1 says it revoked them, m2 still gets nothing.
    r2 = ctx.beat("m2", 2, owned=())
    assert r2.assignment is None and group.members["m2"].assigned == {}
    r1 = ctx.beat("m1", 1, owned=pairs(kept))
    assert r1.member_epoch == 2 and r1.assignment is None
    r2 = ctx.beat("m2", 2, owned=())
    assert parts(r2) == {T1: frozenset(range(6)) - kept[T1]}
    assert group.state is ConsumerGroupState.STABLE


def test_server_generates_a_member_id_for_v0_and_refuses_an_empty_one_on_v1() -> None:
    ctx = Ctx()
    r = ctx.hb(ConsumerGroupHeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, api_version=0,
                                             subscribed_topic_names=("t1",), owned=()))
    assert r.error is E.none and r.member_id
    r = ctx.hb(ConsumerGroupHeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, api_version=1,
                                             subscribed_topic_names=("t1",), owned=()))
    assert r.error is E.invalid_request


@pytest.mark.parametrize(("request_", "error"), [
    (ConsumerGroupHeartbeatRequest("", "m", 0, rebalance_timeout_ms=1,
                                   subscribed_topic_names=("t1",), owned=()), E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_names=("t1",), owned=()),
     E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, owned=()),
     E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1,
                                   subscribed_topic_names=("t1",), owned=((T1, (0,)),)),
     E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", -3), E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", -2), E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, instance_id="",
                                   subscribed_topic_names=("t1",), owned=()), E.invalid_request),
    (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, server_assignor="sticky",
                                   subscribed_topic_names=("t1",), owned=()), E.unsupported_assignor),
    (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(",
                                   owned=()), E.invalid_regular_expression),
    (ConsumerGroupHeartbeatRequest("g", "m", 3, owned=()), E.unknown_member_id),
    (ConsumerGroupHeartbeatRequest("g", "m", -1), E.unknown_member_id),
])
def test_bad_heartbeats_are_refused_and_write_nothing(
        request_: ConsumerGroupHeartbeatRequest, error: ErrorCode) -> None:
    ctx = Ctx()
    r = ctx.hb(request_)
    assert r.error is error and r.error_message
    assert not ctx.results[-1].records
    assert ctx.shard.consumer_group("g") is None


def test_member_epoch_fencing_and_the_lost_response_exception() -> None:
    ctx = Ctx()
    r1 = ctx.join("m1")
    ctx.join("m2")
    r1 = ctx.beat("m1", 1, owned=pairs(parts(r1)))  # told to revoke
    kept = parts(r1)
    r1 = ctx.beat("m1", 1, owned=pairs(kept))  # now at epoch 2
    assert r1.member_epoch == 2
    # A heartbeat from the future, or from long ago, is fenced.
    assert ctx.beat("m1", 3, owned=pairs(kept)).error is E.fenced_member_epoch
    assert ctx.beat("m1", 0 + 1, owned=pairs({T1: frozenset(range(6))})).error \
        is E.fenced_member_epoch
    # The previous epoch with a subset of its partitions: the answer was lost.
    r = ctx.beat("m1", 1, owned=pairs(kept))
    assert r.error is E.none and r.member_epoch == 2


def test_leaving_releases_partitions_to_the_others() -> None:
    ctx = Ctx()
    r1 = ctx.join("m1")
    ctx.join("m2")
    r1 = ctx.beat("m1", 1, owned=pairs(parts(r1)))  # told to revoke three
    mine = parts(r1)
    r1 = ctx.beat("m1", 1, owned=pairs(mine))  # revoked: epoch 2
    r2 = ctx.beat("m2", 2, owned=())
    assert parts(r2)[T1] == frozenset(range(6)) - mine[T1]
    left = ctx.beat("m2", -1)
    assert left.error is E.none and left.member_epoch == -1
    group = ctx.shard.consumer_group("g")
    assert group is not None and "m2" not in group.members and group.group_epoch == 3
    r1 = ctx.beat("m1", 2, owned=pairs(mine))
    assert r1.member_epoch == 3 and parts(r1) == {T1: frozenset(range(6))}
    assert group.state is ConsumerGroupState.STABLE
    ctx.beat("m1", -1)
    assert not group.members
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)


def test_new_partitions_bump_the_epoch_and_are_assigned() -> None:
    ctx = Ctx()
    r = ctx.join("m1")
    ctx.view = topics(t1=8)
    r = ctx.beat("m1", 1, owned=pairs(parts(r)))
    assert r.member_epoch == 2 and parts(r) == {T1: frozenset(range(8))}


def test_regex_subscription_excludes_internal_topics() -> None:
    ctx = Ctx(view=topics(t1=2, t2=3, other=1, __consumer_offsets=50))
    r = ctx.hb(ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1,
                                             subscribed_topic_regex="t.*|__.*", owned=()))
    assert parts(r) == {T1: frozenset({0, 1}), T2: frozenset({0, 1, 2})}


def test_the_range_assignor_when_members_ask_for_it() -> None:
    ctx = Ctx(view=topics(t1=4, t2=4))
    ctx.join("a", "t1", "t2", assignor="range")
    ctx.join("b", "t1", "t2", assignor="range")
    group = ctx.shard.consumer_group("g")
    assert group is not None
    assert group.target["a"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert group.target["b"] == {T1: frozenset({2, 3}), T2: frozenset({2, 3})}


def test_max_size() -> None:
    ctx = Ctx(config=GroupConfig(consumer_max_size=1))
    ctx.join("m1")
    assert ctx.join("m2").error is E.group_max_size_reached


# --- static members -------------------------------------------------------------------


def test_static_member_leaves_and_comes_back_under_a_new_id_without_a_rebalance() -> None:
    ctx = Ctx()
    r = ctx.join("a", instance_id="i1")
    ctx.join("b")
    r = ctx.beat("a", 1, owned=pairs(parts(r)))
    r = ctx.beat("a", 1, owned=pairs(parts(r)))
    held = ctx.shard.consumer_group("g").members["a"].assigned  # type: ignore[union-attr]
    epoch_before = ctx.shard.consumer_group("g").group_epoch  # type: ignore[union-attr]
    assert ctx.hb(ConsumerGroupHeartbeatRequest("g", "a", -2, instance_id="i1")).member_epoch == -2
    # Its partitions stay reserved for it.
    group = ctx.shard.consumer_group("g")
    assert group is not None and group.members["a"].assigned == held
    back = ctx.join("a2", instance_id="i1")
    assert back.error is E.none and back.member_epoch == 2
    assert parts(back) == held
    assert "a" not in group.members and group.static_members["i1"] == "a2"
    assert group.group_epoch == epoch_before
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)


def test_an_unreleased_instance_id_is_refused() -> None:
    ctx = Ctx()
    ctx.join("a", instance_id="i1")
    assert ctx.join("b", instance_id="i1").error is E.unreleased_instance_id
    assert ctx.beat("b", 1, instance_id="i1", owned=()).error is E.unknown_member_id


# --- timers ---------------------------------------------------------------------------


def test_a_silent_member_is_fenced_after_its_session() -> None:
    ctx = Ctx()
    ctx.join("m1")
    ctx.join("m2")
    ctx.now_ms += SESSION_MS - 1
    ctx.beat("m2", 2, owned=())
    assert ctx.shard.next_deadline_ms() == ctx.now_ms - (SESSION_MS - 1) + SESSION_MS
    result = ctx.tick(1)
    assert result.records  # m1's tombstones and the epoch bump
    group = ctx.shard.consumer_group("g")
    assert group is not None and set(group.members) == {"m2"}
    assert ctx.beat("m1", 1, owned=()).error is E.unknown_member_id


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    ctx = Ctx()
    r1 = ctx.join("m1")
    ctx.join("m2")
    ctx.beat("m1", 1, owned=pairs(parts(r1)))  # told to revoke; does not
    ctx.now_ms += REBALANCE_MS
    ctx.beat("m2", 2, owned=())  # m2 keeps its session
    ctx.tick()
    group = ctx.shard.consumer_group("g")
    assert group is not None and set(group.members) == {"m2"}


# --- offsets ----------------------------------------------------------------------------


def commit(ctx: Ctx, member_id: str, epoch: int, offset: int = 5) -> ErrorCode:
    result = ctx.run(ctx.shard.handle_offset_commit("c", OffsetCommitRequest(
        "g", epoch, member_id, (OffsetCommitPartition("t1", 0, offset),)), ctx.now_ms))
    (reply,) = result.replies
    (p,) = reply.response.partitions  # type: ignore[union-attr]
    return p.error


def test_offset_commits_need_the_current_member_epoch() -> None:
    ctx = Ctx()
    ctx.join("m1")
    assert commit(ctx, "m1", 1) is E.none
    assert commit(ctx, "m1", 0) is E.stale_member_epoch
    assert commit(ctx, "nobody", 1) is E.unknown_member_id
    assert commit(ctx, "", -1) is E.unknown_member_id  # the group has members
    ctx.shard.mark_committed(10**9)
    fetched = ctx.shard.handle_offset_fetch(OffsetFetchRequest("g", member_id="m1", member_epoch=1))
    assert fetched.error is E.none and fetched.partitions[0].offset == 5
    stale = ctx.shard.handle_offset_fetch(OffsetFetchRequest("g", member_id="m1", member_epoch=0))
    assert stale.error is E.stale_member_epoch
    ctx.beat("m1", -1)
    assert commit(ctx, "", -1, 9) is E.none  # an admin commit to the empty group


def test_transactional_commits_from_a_consumer_group() -> None:
    ctx = Ctx()
    ctx.join("m1")

    def txn(member_id: str, epoch: int) -> ErrorCode:
        result = ctx.run(ctx.shard.handle_txn_offset_commit("t", TxnOffsetCommitRequest(
            "tx", "g", 1, 0, (OffsetCommitPartition("t1", 0, 3),), epoch, member_id), ctx.now_ms))
        return result.replies[0].response.partitions[0].error  # type: ignore[union-attr]

    assert txn("m1", 1) is E.none
    assert txn("m1", 7) is E.illegal_generation
    assert txn("", -1) is E.none


# --- classic and consumer groups side by side ----------------------------------------------


def classic_join(ctx: Ctx, group: str = "g") -> ErrorCode:
    result = ctx.run(ctx.shard.handle_join_group("j", JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        group_instance_id=None, protocol_type="consumer", protocols=(JoinProtocol("range", b""),),
        client_id="c", client_host="/h", require_known_member_id=False), ctx.now_ms))
    return result.replies[0].response.error if result.replies else E.none  # type: ignore[union-attr]


def test_malformed_classic_metadata_keeps_the_groups_apart() -> None:
    """Online migration (test_groups_migration) needs the consumer's embedded
    protocol: a classic member whose metadata is not a subscription cannot
    join a consumer group, and a classic group whose members' is not cannot
    be upgraded."""
    ctx = Ctx()
    ctx.join("m1")
    assert classic_join(ctx) is E.inconsistent_group_protocol
    assert classic_join(ctx, "classic") is not E.inconsistent_group_protocol
    r = ctx.join("m1", group="classic")
    assert r.error is E.group_id_not_found
    assert "malformed" in (r.error_message or "")


def test_an_empty_group_changes_protocol_and_keeps_its_offsets() -> None:
    ctx = Ctx()
    assert commit(ctx, "", -1, 42) is E.none  # offsets only: an empty classic group
    ctx.join("m1")
    assert ctx.shard.group("g") is None and ctx.shard.consumer_group("g") is not None
    ctx.beat("m1", -1)
    classic_join(ctx)
    assert ctx.shard.consumer_group("g") is None and ctx.shard.group("g") is not None
    ctx.shard.mark_committed(10**9)
    assert ctx.shard.handle_offset_fetch(OffsetFetchRequest("g")).partitions[0].offset == 42
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)


def test_list_describe_and_delete() -> None:
    ctx = Ctx()
    ctx.join("m1")
    listed = ctx.shard.handle_list_groups(ListGroupsRequest(types_filter=frozenset({"consumer"})))
    assert [(g.group_id, g.group_type, g.state) for g in listed.groups] == [("g", "consumer", "Stable")]
    assert not ctx.shard.handle_list_groups(
        ListGroupsRequest(types_filter=frozenset({"classic"}))).groups
    (classic,) = ctx.shard.handle_describe_groups(("g",))
    assert classic.error is E.group_id_not_found
    (d,) = ctx.shard.handle_consumer_group_describe(("g",), ctx.view)
    assert d.error is E.none and d.state == "Stable" and d.group_epoch == 1
    assert d.assignor_name == "uniform"
    (m,) = d.members
    assert m.assignment == ((T1, "t1", (0, 1, 2, 3, 4, 5)),) == m.target_assignment
    (missing,) = ctx.shard.handle_consumer_group_describe(("nope",), ctx.view)
    assert missing.error is E.group_id_not_found
    result = ctx.run(ctx.shard.handle_delete_groups("d", ("g",), ctx.now_ms))
    assert result.replies[0].response.results[0].error is E.non_empty_group  # type: ignore[union-attr]
    ctx.beat("m1", -1)
    commit(ctx, "", -1)
    result = ctx.run(ctx.shard.handle_delete_groups("d", ("g",), ctx.now_ms))
    assert result.replies[0].response.results[0].error is E.none  # type: ignore[union-attr]
    assert ctx.shard.group_ids() == []
    assert ctx.replayed().group_ids() == []


def test_offsets_of_an_empty_consumer_group_expire_and_then_the_group_goes() -> None:
    config = GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=500)
    ctx = Ctx(config=config)
    ctx.join("m1")
    commit(ctx, "m1", 1)
    ctx.tick(2000)
    assert ctx.shard.offsets.committed("g")  # m1 subscribes to t1: kept
    ctx.beat("m1", -1)
    ctx.tick(2000)
    assert not ctx.shard.offsets.committed("g")
    assert ctx.shard.group_ids() == []


# --- failover ----------------------------------------------------------------------------------


def test_replay_rebuilds_the_group_and_members_keep_their_epochs() -> None:
    ctx = Ctx()
    r1 = ctx.join("m1", instance_id="s1")
    r2 = ctx.join("m2")
    ctx.beat("m1", 1, owned=pairs(parts(r1)))
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)
    # The new coordinator answers m2 as the old one would have.
    ctx.shard = ctx.replayed()
    r2 = ctx.beat("m2", r2.member_epoch, owned=())
    assert r2.error is E.none
    group = ctx.shard.consumer_group("g")
    assert group is not None and set(group.session_deadlines_ms) == {"m1", "m2"}


# --- many clients, random events --------------------------------------------------------------


@dataclass
class Client:
    """A consumer that follows the protocol: it owns what its last answer
    assigned, drops what it was not given, and rejoins when fenced."""

    member_id: str
    names: tuple[str, ...]
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last_heartbeat_ms: int = 0

    def heartbeat(self, ctx: Ctx) -> ConsumerGroupHeartbeatResponse:
        joining = self.epoch == 0
        r = ctx.hb(ConsumerGroupHeartbeatRequest(
            "g", self.member_id, self.epoch,
            rebalance_timeout_ms=REBALANCE_MS if joining else -1,
            subscribed_topic_names=self.names if joining else None,
            owned=pairs(self.owned)))
        self.last_heartbeat_ms = ctx.now_ms
        if r.error is E.none:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = freeze_assignment(r.assignment)
        elif r.error in (E.fenced_member_epoch, E.unknown_member_id):
            self.owned, self.epoch = {}, 0
        else:
            raise AssertionError(f"unexpected {r}")
        return r


def assert_disjoint(clients: list[Client], now_ms: int) -> None:
    """No partition is held by two clients, except by one whose session has
    ended since its last heartbeat: the coordinator has fenced it and handed
    its partitions on, and it learns so on its next heartbeat (as in Kafka,
    where its commits are refused meanwhile)."""
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        if now_ms - c.last_heartbeat_ms >= SESSION_MS:
            continue
        for t, ps in c.owned.items():
            for p in ps:
                assert (t, p) not in seen, f"{(t, p)} owned by {seen[(t, p)]} and {c.member_id}"
                seen[(t, p)] = c.member_id


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_membership_never_gives_a_partition_to_two_clients(seed: int) -> None:
    random_membership(seed)


@pytest.mark.soak
def test_random_membership_soak() -> None:
    """``--soak``: 3,000 seeds of the scenario above."""
    for seed in range(3_000):
        random_membership(seed)


def random_membership(seed: int) -> None:
    """Clients join, heartbeat, leave and crash, sessions expire, topics grow
    and the coordinator fails over, at random: no partition is ever held by
    two live clients, replay rebuilds the state, and once quiet every
    subscribed partition is held."""
    rng = random.Random(seed)
    counts = {"t1": 6, "t2": 3}
    ctx = Ctx(view=topics(**counts))
    live: list[Client] = []
    next_id = 0
    for _ in range(60):
        action = rng.random()
        if action < 0.2 or not live:
            next_id += 1
            c = Client(f"m{next_id}", rng.choice((("t1",), ("t2",), ("t1", "t2"))))
            live.append(c)
            c.heartbeat(ctx)
        elif action < 0.7:
            rng.choice(live).heartbeat(ctx)
        elif action < 0.8:
            c = live.pop(rng.randrange(len(live)))
            assert ctx.hb(ConsumerGroupHeartbeatRequest("g", c.member_id, -1)).error in (
                E.none, E.unknown_member_id)
        elif action < 0.88:
            live.pop(rng.randrange(len(live)))  # crashes: its session must expire
        elif action < 0.93:
            ctx.tick(rng.choice((1_000, 20_000, SESSION_MS)))
            for c in live:  # the coordinator may have fenced a slow one
                c.heartbeat(ctx)
        elif action < 0.97:
            counts[rng.choice(("t1", "t2"))] += 1
            ctx.view = topics(**counts)
        else:
            # Coordinator failover: a new shard replays the partition and
            # carries on; the clients keep heartbeating as before.
            replayed = ctx.replayed()
            assert snapshot(replayed) == snapshot(ctx.shard)
            ctx.shard = replayed
        assert_disjoint(live, ctx.now_ms)
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)
    # Quiet: crashed members expire, the live ones converge on everything.
    ctx.tick(SESSION_MS + 1)
    for _ in range(8):
        for c in live:
            c.heartbeat(ctx)
            assert_disjoint(live, ctx.now_ms)
    group = ctx.shard.consumer_group("g")
    if live:
        assert group is not None and group.state is ConsumerGroupState.STABLE
        wanted = {n for c in live for n in c.names}
        covered = {(t, p) for c in live for t, ps in c.owned.items() for p in ps}
        ids = {"t1": T1, "t2": T2}
        assert covered == {(ids[n], p) for n in wanted for p in range(counts[n])}
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)


# --- hostile input --------------------------------------------------------------------------

hostile_heartbeats = st.builds(
    ConsumerGroupHeartbeatRequest,
    group_id=st.sampled_from(["g", "", "h"]),
    member_id=st.sampled_from(["m1", "m2", "", "x" * 40_000]),
    member_epoch=st.integers(-5, 8),
    instance_id=st.one_of(st.none(), st.sampled_from(["", "i1", "i2"])),
    rack_id=st.one_of(st.none(), st.sampled_from(["", "r1"])),
    rebalance_timeout_ms=st.integers(-5, 100_000),
    subscribed_topic_names=st.one_of(
        st.none(), st.lists(st.sampled_from(["t1", "t2", "nope", "", "é" * 20_000]),
                            max_size=3).map(tuple)),
    subscribed_topic_regex=st.one_of(st.none(), st.sampled_from(["", "t.*", "(", "[", ".*"])),
    server_assignor=st.one_of(st.none(), st.sampled_from(["uniform", "range", "x", ""])),
    owned=st.one_of(st.none(), st.lists(
        st.tuples(st.sampled_from([T1, T2, uuid.UUID(int=9)]),
                  st.lists(st.integers(-3, 10), max_size=4).map(tuple)),
        max_size=3).map(tuple)),
    api_version=st.integers(0, 1),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(hostile_heartbeats, st.sampled_from([0, 0, 0, 10_000, SESSION_MS])),
                max_size=25))
def test_hostile_heartbeats_get_answers_and_leave_a_replayable_state(
        steps: list[tuple[ConsumerGroupHeartbeatRequest, int]]) -> None:
    ctx = Ctx(view=topics(t1=4, t2=2))
    for request, advance_ms in steps:
        r = ctx.hb(request)  # check_invariants runs after every command
        assert isinstance(r.error, ErrorCode)
        if r.error is not E.none:
            assert not ctx.results[-1].records
        ctx.tick(advance_ms)
    assert snapshot(ctx.replayed()) == snapshot(ctx.shard)
