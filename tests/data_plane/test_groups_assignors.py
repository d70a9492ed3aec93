"""KIP-848 server-side assignors: Hypothesis properties against naive checkers, plus worked examples."""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Mapping
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.groups.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    AssignmentMember,
    AssignmentTopic,
    MemberAssignment,
    RangeAssignor,
    ServerAssignor,
    UniformAssignor,
)

Members = dict[str, AssignmentMember]
Topics = dict[uuid.UUID, AssignmentTopic]
Result = dict[str, MemberAssignment]

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
BOTH = pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])

_T = TypeVar("_T")

#: A topic id that members may subscribe to (or hold in ``current``) but that does not exist.
DELETED = uuid.UUID(int=999)


def tid(i: int) -> uuid.UUID:
    return uuid.UUID(int=i)


def topic(i: int, num_partitions: int) -> AssignmentTopic:
    return AssignmentTopic(tid(i), f"t{i}", num_partitions)


def member(
    member_id: str,
    subscribed: set[uuid.UUID] | frozenset[uuid.UUID],
    current: Mapping[uuid.UUID, set[int] | frozenset[int]] | None = None,
    instance_id: str | None = None,
) -> AssignmentMember:
    return AssignmentMember(
        member_id,
        instance_id,
        None,
        frozenset(subscribed),
        {t: frozenset(ps) for t, ps in (current or {}).items()},
    )


def with_current(members: Members, result: Result) -> Members:
    """The same members, each now holding its part of ``result`` as its current target."""
    return {
        m: member(a.member_id, a.subscribed_topic_ids, result.get(m, {}), a.instance_id)
        for m, a in members.items()
    }


def loads(result: Result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def owners(result: Result) -> dict[tuple[uuid.UUID, int], str]:
    return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}


def valid_subscriptions(members: Members, topics: Topics) -> dict[str, set[uuid.UUID]]:
    return {m: {t for t in a.subscribed_topic_ids if t in topics} for m, a in members.items()}


def assert_complete_and_exclusive(members: Members, topics: Topics, result: Result) -> None:
    """The contract both assignors share (see the module docstring)."""
    assert set(result) == set(members)
    subs = valid_subscriptions(members, topics)
    subscribed = set().union(*subs.values()) if subs else set()
    seen: dict[uuid.UUID, list[int]] = {}
    for m, assignment in result.items():
        for t, ps in assignment.items():
            assert t in subs[m], f"{m} got topic {t} it does not subscribe to (or that is gone)"
            assert ps, f"{m} has an empty entry for {t}"
            assert all(0 <= p < topics[t].num_partitions for p in ps)
            seen.setdefault(t, []).extend(ps)
    for t in topics:
        got = sorted(seen.get(t, []))
        if t in subscribed:
            assert got == list(range(topics[t].num_partitions)), f"topic {t}: {got}"
        else:
            assert got == []


def has_cost_reducing_path(members: Members, topics: Topics, result: Result) -> bool:
    """Naive check: can a chain of legal single moves shift load from a member to one 2+ lighter?

    A move hands one partition of topic t from its owner to another subscriber
    of t. No such chain <=> the assignment is as balanced as the subscriptions
    allow (Harvey et al. 2003, optimal semi-matchings).
    """
    subs = valid_subscriptions(members, topics)
    load = loads(result)
    for start in members:
        reached = {start}
        queue = deque([start])
        while queue:
            a = queue.popleft()
            for t in result[a]:
                for b in members:
                    if b not in reached and t in subs[b]:
                        if load[b] <= load[start] - 2:
                            return True
                        reached.add(b)
                        queue.append(b)
    return False


def shuffled(members: Members, topics: Topics, rnd: random.Random) -> tuple[Members, Topics]:
    """Equal input with every mapping and set rebuilt in another order."""

    def shuffle(items: list[_T]) -> list[_T]:
        items = list(items)
        rnd.shuffle(items)
        return items

    new_members = {
        m: AssignmentMember(
            a.member_id,
            a.instance_id,
            a.rack_id,
            frozenset(shuffle(list(a.subscribed_topic_ids))),
            {t: frozenset(shuffle(list(a.current[t]))) for t in shuffle(list(a.current))},
        )
        for m, a in ((m, members[m]) for m in shuffle(list(members)))
    }
    return new_members, {t: topics[t] for t in shuffle(list(topics))}


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool = False) -> tuple[Members, Topics]:
    """Random topics and members; subscriptions and ``current`` may name deleted topics,
    partitions past the end, unsubscribed topics, and partitions another member also claims."""
    topics = {
        tid(i): topic(i, n) for i, n in enumerate(draw(st.lists(st.integers(0, 9), max_size=4)), 1)
    }
    candidates = [*sorted(topics), DELETED]
    member_ids = draw(
        st.lists(st.text("abmxz", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)
    )
    shared = draw(st.frozensets(st.sampled_from(candidates)))
    members: Members = {}
    for m in member_ids:
        subscribed = shared if homogeneous else draw(st.frozensets(st.sampled_from(candidates)))
        current = draw(
            st.dictionaries(
                st.sampled_from(candidates),
                st.frozensets(st.integers(-1, 11), max_size=6),
                max_size=4,
            )
        )
        instance_id = draw(st.none() | st.sampled_from(["i1", "i2", "i3", "i4"]))
        members[m] = member(m, subscribed, current, instance_id)
    return members, topics


any_group = st.one_of(groups(homogeneous=True), groups())


# --- properties of both assignors --------------------------------------------


@BOTH
@settings(deadline=None)
@given(group=any_group)
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
    assignor: ServerAssignor, group: tuple[Members, Topics]
) -> None:
    members, topics = group
    assert_complete_and_exclusive(members, topics, assignor.assign(members, topics))


@BOTH
@settings(deadline=None)
@given(group=any_group, rnd=st.randoms(use_true_random=False))
def test_same_input_in_any_order_gives_the_same_assignment(
    assignor: ServerAssignor, group: tuple[Members, Topics], rnd: random.Random
) -> None:
    members, topics = group
    first = assignor.assign(members, topics)
    assert assignor.assign(members, topics) == first
    assert assignor.assign(*shuffled(members, topics, rnd)) == first


@BOTH
@settings(deadline=None)
@given(group=any_group)
def test_reassigning_from_its_own_output_changes_nothing(
    assignor: ServerAssignor, group: tuple[Members, Topics]
) -> None:
    members, topics = group
    first = assignor.assign(members, topics)
    assert assignor.assign(with_current(members, first), topics) == first


def test_registry() -> None:
    assert DEFAULT_ASSIGNOR == "uniform"
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert all(a.name == name for name, a in ASSIGNORS.items())


@BOTH
def test_no_members_no_assignment(assignor: ServerAssignor) -> None:
    assert assignor.assign({}, {tid(1): topic(1, 3)}) == {}


@BOTH
def test_mismatched_keys_are_caller_errors(assignor: ServerAssignor) -> None:
    with pytest.raises(ValueError, match="member_id"):
        assignor.assign({"a": member("b", set())}, {})
    with pytest.raises(ValueError, match="topic_id"):
        assignor.assign({}, {tid(1): topic(2, 1)})


def test_negative_partition_count_is_rejected() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        topic(1, -1)


# --- uniform -------------------------------------------------------------------


@settings(deadline=None)
@given(group=groups(homogeneous=True))
def test_uniform_homogeneous_member_counts_differ_by_at_most_one(
    group: tuple[Members, Topics],
) -> None:
    members, topics = group
    sizes = loads(UNIFORM.assign(members, topics)).values()
    assert max(sizes) - min(sizes) <= 1


@settings(deadline=None)
@given(group=any_group)
def test_uniform_is_as_balanced_as_the_subscriptions_allow(group: tuple[Members, Topics]) -> None:
    members, topics = group
    assert not has_cost_reducing_path(members, topics, UNIFORM.assign(members, topics))


@st.composite
def balanced_groups(draw: st.DrawFn, size: int) -> tuple[Members, Topics]:
    """``size`` members with identical subscriptions and a random balanced current assignment."""
    topics = {
        tid(i): topic(i, n)
        for i, n in enumerate(draw(st.lists(st.integers(0, 12), min_size=1, max_size=4)), 1)
    }
    partitions = [(t, p) for t in topics for p in range(topics[t].num_partitions)]
    dealt = draw(st.permutations(partitions))
    names = [f"m{i}" for i in range(size)]
    # Dealing in a random member order puts the one-extra holders anywhere in id order.
    dealing_order = draw(st.permutations(names))
    current: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in names}
    for k, (t, p) in enumerate(dealt):
        current[dealing_order[k % size]].setdefault(t, set()).add(p)
    return {m: member(m, set(topics), current[m]) for m in names}, topics


@settings(deadline=None)
@given(
    st.integers(1, 6).flatmap(lambda n: balanced_groups(n)),
    st.sampled_from(["a-new", "m3-new", "new"]),  # sorts first, in the middle, last
)
def test_uniform_join_moves_only_the_new_members_share(
    group: tuple[Members, Topics], newcomer: str
) -> None:
    members, topics = group
    before = {m: dict(a.current) for m, a in members.items()}
    total = sum(t.num_partitions for t in topics.values())
    share = total // (len(members) + 1)
    joined = {**members, newcomer: member(newcomer, set(topics))}

    after = UNIFORM.assign(joined, topics)

    assert_complete_and_exclusive(joined, topics, after)
    moved = {tp for tp, m in owners(after).items() if owners(before).get(tp) != m}
    # Balance forces the newcomer to take at least `share`; every move beyond that is waste.
    assert len(moved) == share
    assert loads(after)[newcomer] == share
    for m in members:
        assert all(after[m][t] <= before[m].get(t, frozenset()) for t in after[m])
    sizes = loads(after).values()
    assert max(sizes) - min(sizes) <= 1


@settings(deadline=None)
@given(st.integers(2, 7).flatmap(lambda n: balanced_groups(n)), st.integers(0, 6))
def test_uniform_leave_moves_only_the_leavers_partitions(
    group: tuple[Members, Topics], leaver_index: int
) -> None:
    members, topics = group
    leaver = sorted(members)[leaver_index % len(members)]
    staying = {m: a for m, a in members.items() if m != leaver}

    after = UNIFORM.assign(staying, topics)

    assert_complete_and_exclusive(staying, topics, after)
    for m, a in staying.items():
        for t, ps in a.current.items():
            assert ps <= after[m].get(t, frozenset()), f"{m} lost part of {t}"
    sizes = loads(after).values()
    assert max(sizes) - min(sizes) <= 1


def test_uniform_fresh_group_fills_members_in_id_order() -> None:
    t1 = tid(1)
    members = {m: member(m, {t1}) for m in ("c", "a", "b")}
    assert UNIFORM.assign(members, {t1: topic(1, 7)}) == {
        "a": {t1: frozenset({0, 1, 2})},
        "b": {t1: frozenset({3, 4})},
        "c": {t1: frozenset({5, 6})},
    }


def test_uniform_drops_stale_current_partitions() -> None:
    """Deleted topics, partitions past the end and unsubscribed topics go; the rest stay."""
    t1, t2 = tid(1), tid(2)
    topics = {t1: topic(1, 4), t2: topic(2, 2)}
    members = {
        "a": member("a", {t1, DELETED}, {t1: {2, 3, 7}, t2: {0, 1}, DELETED: {0}}),
        "b": member("b", {t1, t2}),
    }
    result = UNIFORM.assign(members, topics)
    # a keeps t1-2 and t1-3; b takes all of t2, which only b reads; t1-0 and t1-1 then
    # split the load 3/3.
    assert result == {
        "a": {t1: frozenset({0, 2, 3})},
        "b": {t1: frozenset({1}), t2: frozenset({0, 1})},
    }


def test_uniform_heterogeneous_closes_the_gap_kafkas_sweeps_leave() -> None:
    """Kafka's UniformHeterogeneousAssignmentBuilder javadoc: members 1 and 2 read t1, 2 and 3
    read t2, loads 9/10/11. Each topic alone looks balanced, but moving one t2 partition 3->2
    and one t1 partition 2->1 gives 10/10/10."""
    t1, t2 = tid(1), tid(2)
    topics = {t1: topic(1, 10), t2: topic(2, 20)}
    members = {
        "m1": member("m1", {t1}, {t1: set(range(9))}),
        "m2": member("m2", {t1, t2}, {t1: {9}, t2: set(range(9))}),
        "m3": member("m3", {t2}, {t2: set(range(9, 20))}),
    }
    result = UNIFORM.assign(members, topics)
    assert loads(result) == {"m1": 10, "m2": 10, "m3": 10}
    before = owners({m: dict(a.current) for m, a in members.items()})
    assert sum(1 for tp, m in owners(result).items() if before[tp] != m) == 2


def test_uniform_heterogeneous_only_subscribers_share_a_topic() -> None:
    t1, t2 = tid(1), tid(2)
    topics = {t1: topic(1, 6), t2: topic(2, 2)}
    members = {"a": member("a", {t1}), "b": member("b", {t1, t2}), "c": member("c", {t2})}
    result = UNIFORM.assign(members, topics)
    assert_complete_and_exclusive(members, topics, result)
    assert loads(result) == {"a": 3, "b": 3, "c": 2}


# --- range ---------------------------------------------------------------------


def range_order(members: Members) -> list[str]:
    """Kafka's order: static members by instance id, then dynamic ones by member id."""
    static = sorted((a.instance_id, m) for m, a in members.items() if a.instance_id is not None)
    return [m for _, m in static] + sorted(m for m, a in members.items() if a.instance_id is None)


@settings(deadline=None)
@given(group=any_group)
def test_range_gives_each_subscriber_its_contiguous_quota_in_member_order(
    group: tuple[Members, Topics],
) -> None:
    members, topics = group
    result = RANGE.assign(members, topics)
    subs = valid_subscriptions(members, topics)
    for t, info in topics.items():
        subscribers = [m for m in range_order(members) if t in subs[m]]
        if not subscribers:
            continue
        base, extras = divmod(info.num_partitions, len(subscribers))
        start = 0
        for rank, m in enumerate(subscribers):
            size = base + (1 if rank < extras else 0)
            assert result[m].get(t, frozenset()) == frozenset(range(start, start + size))
            start += size


@settings(deadline=None)
@given(group=any_group)
def test_range_co_partitions_topics_with_equal_subscribers_and_sizes(
    group: tuple[Members, Topics],
) -> None:
    members, topics = group
    result = RANGE.assign(members, topics)
    subs = valid_subscriptions(members, topics)
    for t1 in topics:
        for t2 in topics:
            same_readers = {m for m in members if t1 in subs[m]} == {
                m for m in members if t2 in subs[m]
            }
            if same_readers and topics[t1].num_partitions == topics[t2].num_partitions:
                for m in members:
                    assert result[m].get(t1) == result[m].get(t2)


@settings(deadline=None)
@given(group=any_group)
def test_range_ignores_current_assignment(group: tuple[Members, Topics]) -> None:
    """Kafka 3.9+ (KAFKA-16944) recomputes range assignments; stability comes from the order."""
    members, topics = group
    empty = {m: member(m, a.subscribed_topic_ids, {}, a.instance_id) for m, a in members.items()}
    assert RANGE.assign(members, topics) == RANGE.assign(empty, topics)


def test_range_two_members_two_co_partitioned_topics() -> None:
    t1, t2 = tid(1), tid(2)
    topics = {t1: topic(1, 3), t2: topic(2, 3)}
    members = {m: member(m, {t1, t2}) for m in ("m2", "m1")}
    assert RANGE.assign(members, topics) == {
        "m1": {t1: frozenset({0, 1}), t2: frozenset({0, 1})},
        "m2": {t1: frozenset({2}), t2: frozenset({2})},
    }


def test_range_static_members_first_by_instance_id() -> None:
    t1 = tid(1)
    members = {
        "a": member("a", {t1}, instance_id="i2"),
        "b": member("b", {t1}, instance_id="i1"),
        "0": member("0", {t1}),
    }
    assert RANGE.assign(members, {t1: topic(1, 7)}) == {
        "b": {t1: frozenset({0, 1, 2})},
        "a": {t1: frozenset({3, 4})},
        "0": {t1: frozenset({5, 6})},
    }


def test_range_heterogeneous_subscriptions_split_each_topic_among_its_readers() -> None:
    t1, t2 = tid(1), tid(2)
    topics = {t1: topic(1, 3), t2: topic(2, 2)}
    members = {"m1": member("m1", {t1, t2}), "m2": member("m2", {t1})}
    assert RANGE.assign(members, topics) == {
        "m1": {t1: frozenset({0, 1}), t2: frozenset({0, 1})},
        "m2": {t1: frozenset({2})},
    }


def test_range_more_members_than_partitions_and_a_deleted_topic() -> None:
    t1 = tid(1)
    members = {m: member(m, {t1, DELETED}) for m in ("m1", "m2", "m3")}
    assert RANGE.assign(members, {t1: topic(1, 2)}) == {
        "m1": {t1: frozenset({0})},
        "m2": {t1: frozenset({1})},
        "m3": {},
    }


# --- scale -----------------------------------------------------------------------


@BOTH
def test_three_hundred_members_three_thousand_partitions(assignor: ServerAssignor) -> None:
    """Size check only (no timing assertion): homogeneous, a join, and heterogeneous."""
    rnd = random.Random(848)
    topics = {tid(i): topic(i, 100) for i in range(1, 31)}
    ids = sorted(topics)
    names = [f"member-{i:03d}" for i in range(300)]

    members = {m: member(m, set(ids)) for m in names[:299]}
    first = assignor.assign(members, topics)
    assert_complete_and_exclusive(members, topics, first)
    joined = {**with_current(members, first), names[299]: member(names[299], set(ids))}
    assert_complete_and_exclusive(joined, topics, assignor.assign(joined, topics))

    skewed = {t: set(range(100)) for t in ids}
    hetero = {
        m: member(m, set(rnd.sample(ids, rnd.randint(1, 5))), skewed if i == 0 else None)
        for i, m in enumerate(names)
    }
    assert_complete_and_exclusive(hetero, topics, assignor.assign(hetero, topics))
