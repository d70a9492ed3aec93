"""Server-side partition assignors of the KIP-848 consumer group protocol: ``uniform`` and ``range``.

Under KIP-848 the group coordinator computes each member's *target*
assignment itself, with the assignor the group selected (``uniform`` unless a
member asks for another). Both assignors here are pure functions of their
input: no I/O, no clock, no randomness. The same members and topics give the
same result however the input mappings and sets are ordered, because every
choice is broken by sorted member id, topic id or partition number.

Rules common to both (the coordinator relies on them):

- the result has an entry for every member, possibly an empty dict; a member's
  dict holds only topics it is assigned at least one partition of;
- a member only gets partitions of topics it subscribes to;
- a subscribed topic id missing from ``topics`` (deleted) is ignored, and so
  are partitions in ``current`` that no longer exist;
- every partition of every topic with at least one subscriber goes to exactly
  one subscriber; topics without subscribers are left out.

``rack_id`` is carried for the coordinator's sake but unused: ``AssignmentTopic``
has no replica racks, so there is nothing to align with (Kafka's rack-aware
paths fall back to the same plain algorithms when racks are unknown).
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """One group member as an assignor sees it."""

    member_id: str
    #: ``group.instance.id`` of a static member (KIP-345), else None.
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    #: The member's current *target* assignment (stickiness input): topic id -> partitions.
    #: It may name deleted topics, unsubscribed topics and partitions past the
    #: topic's end; the assignors drop those.
    current: Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentTopic:
    """A topic that exists now, as the metadata image describes it."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int

    def __post_init__(self) -> None:
        if self.num_partitions < 0:
            raise ValueError(f"num_partitions must be >= 0, got {self.num_partitions}")


#: Topic id -> the partitions of that topic assigned to one member.
MemberAssignment = dict[uuid.UUID, frozenset[int]]


class ServerAssignor(Protocol):
    """A KIP-848 server-side assignor (Kafka ``ConsumerGroupPartitionAssignor``)."""

    #: The name members select it by (``group.remote.assignor``).
    name: str

    def assign(
        self,
        members: Mapping[str, AssignmentMember],
        topics: Mapping[uuid.UUID, AssignmentTopic],
    ) -> dict[str, MemberAssignment]:
        """Return the new target assignment of every member, keyed by member id.

        Raises ``ValueError`` if a key of ``members`` or ``topics`` differs from
        the id inside its value.
        """
        ...


# --- uniform -------------------------------------------------------------------


class UniformAssignor:
    """Kafka's ``UniformAssignor``: balance first, then stickiness.

    **Homogeneous groups** (every member subscribes to the same existing
    topics): with T partitions and M members, ``T % M`` members may hold
    ``T // M + 1`` partitions and the rest ``T // M``, so any two members differ
    by at most one. The extra slots go to the members that currently hold the
    most, which makes the number of moved partitions the least any balanced
    assignment allows: when a member joins a balanced group only its share
    moves, and when one leaves only its partitions move. A member over its quota
    keeps its lowest (topic id, partition) pairs; freed and new partitions fill
    the members under quota in member-id order. This is Kafka's
    ``UniformHomogeneousAssignmentBuilder`` except that Kafka hands the extra
    slots out in map iteration order rather than to the largest holders.

    **Heterogeneous groups** follow the shape of Kafka's
    ``UniformHeterogeneousAssignmentBuilder``:

    1. keep every current partition whose topic the owner still subscribes to;
    2. give each unowned partition to the least-loaded subscriber of its topic,
       topics taken in Kafka's order (most partitions per subscriber first, then
       fewest subscribers, then topic id);
    3. per topic, move partitions from its most-loaded owner to its least-loaded
       subscriber while their loads differ by two or more, sweeping the topics
       until a sweep moves nothing (at most 16 sweeps, as in Kafka);
    4. then, where Kafka stops, remove every remaining *cost-reducing path*: a
       chain of single-partition moves from a member with load L to one with load
       L - 2 or less, each move handing a partition to a subscriber of its topic.
       Intermediate members keep their load. An assignment with no such path is
       optimal in the sense of Harvey et al., "Semi-matchings for bipartite
       graphs and load balancing" (2003): it minimises the largest load and the
       sum of squared loads together, i.e. it is as balanced as the
       subscriptions allow. Kafka documents the 9/10/11 case its sweeps leave;
       this step turns it into 10/10/10.

    Moves in steps 3 and 4 prefer partitions the giver did not hold before this
    call, so partitions that had to move anyway move again rather than settled
    ones. Load is a member's total partition count over all topics.
    """

    name = "uniform"

    def assign(
        self,
        members: Mapping[str, AssignmentMember],
        topics: Mapping[uuid.UUID, AssignmentTopic],
    ) -> dict[str, MemberAssignment]:
        """See ``ServerAssignor.assign``."""
        _check_keys(members, topics)
        group = _Group.build(members, topics)
        if not group.member_ids:
            return {}
        if all(subs == group.subscriptions[0] for subs in group.subscriptions):
            owned = _assign_homogeneous(group)
        else:
            owned = _HeterogeneousBalancer(group).run()
        return {
            member_id: {t: frozenset(owned[i][t]) for t in sorted(owned[i]) if owned[i][t]}
            for i, member_id in enumerate(group.member_ids)
        }


#: Kafka's ``MAX_ITERATION_COUNT`` for the per-topic sweeps; step 4 finishes the job.
_MAX_SWEEPS = 16


@dataclass(slots=True)
class _Group:
    """The assignor input with every stale or ambiguous part removed.

    Members are numbered 0..M-1 in member-id order; all later tie-breaks use
    these numbers.
    """

    member_ids: list[str]
    #: Per member: its subscribed topics that exist.
    subscriptions: list[frozenset[uuid.UUID]]
    #: Every existing topic with at least one subscriber -> its partition count.
    num_partitions: dict[uuid.UUID, int]
    #: Per topic: its subscribers, ascending.
    subscribers: dict[uuid.UUID, list[int]]
    #: Per member: the current partitions it may keep (subscribed, existing, and
    #: not claimed by a member with a smaller id; targets never overlap, so that
    #: last rule only guards against a corrupt input).
    kept: list[dict[uuid.UUID, set[int]]]

    @classmethod
    def build(
        cls,
        members: Mapping[str, AssignmentMember],
        topics: Mapping[uuid.UUID, AssignmentTopic],
    ) -> _Group:
        member_ids = sorted(members)
        subscriptions = [
            frozenset(t for t in members[m].subscribed_topic_ids if t in topics) for m in member_ids
        ]
        subscribers: dict[uuid.UUID, list[int]] = {}
        for i, subs in enumerate(subscriptions):
            for t in subs:
                subscribers.setdefault(t, []).append(i)
        ordered = sorted(subscribers)
        num_partitions = {t: topics[t].num_partitions for t in ordered}
        claimed: dict[uuid.UUID, set[int]] = {t: set() for t in ordered}
        kept: list[dict[uuid.UUID, set[int]]] = []
        for i, member_id in enumerate(member_ids):
            current = members[member_id].current
            mine: dict[uuid.UUID, set[int]] = {}
            for t in sorted(t for t in current if t in subscriptions[i]):
                n = num_partitions[t]
                ps = {p for p in current[t] if 0 <= p < n} - claimed[t]
                if ps:
                    claimed[t] |= ps
                    mine[t] = ps
            kept.append(mine)
        return cls(
            member_ids,
            subscriptions,
            num_partitions,
            {t: subscribers[t] for t in ordered},
            kept,
        )


def _assign_homogeneous(group: _Group) -> list[dict[uuid.UUID, set[int]]]:
    """Quota-based assignment for a group whose members all subscribe alike."""
    member_count = len(group.member_ids)
    total = sum(group.num_partitions.values())
    base, extras = divmod(total, member_count)
    holdings = [sum(len(ps) for ps in mine.values()) for mine in group.kept]
    # The extra slots go to the largest holders: that keeps the most partitions in place.
    quota = [base] * member_count
    for i in sorted(range(member_count), key=lambda i: (-holdings[i], i))[:extras]:
        quota[i] += 1

    owned: list[dict[uuid.UUID, set[int]]] = []
    placed: dict[uuid.UUID, set[int]] = {t: set() for t in group.num_partitions}
    for i, mine in enumerate(group.kept):
        keep = sorted((t, p) for t, ps in mine.items() for p in ps)[: quota[i]]
        assignment: dict[uuid.UUID, set[int]] = {}
        for t, p in keep:
            assignment.setdefault(t, set()).add(p)
            placed[t].add(p)
        owned.append(assignment)

    unplaced = [
        (t, p) for t, n in group.num_partitions.items() for p in range(n) if p not in placed[t]
    ]
    cursor = 0
    for i, assignment in enumerate(owned):
        room = quota[i] - sum(len(ps) for ps in assignment.values())
        for t, p in unplaced[cursor : cursor + room]:
            assignment.setdefault(t, set()).add(p)
        cursor += room
    if cursor != len(unplaced):
        raise AssertionError("homogeneous quotas do not cover every partition")
    return owned


class _HeterogeneousBalancer:
    """Steps 1-4 of ``UniformAssignor``'s heterogeneous algorithm, over one ``_Group``."""

    def __init__(self, group: _Group) -> None:
        self._subscribers = group.subscribers
        self._num_partitions = group.num_partitions
        self._kept = group.kept
        # Step 1: start from everything each member may keep.
        self._owned = [{t: set(ps) for t, ps in mine.items()} for mine in group.kept]
        self._load = [sum(len(ps) for ps in mine.values()) for mine in group.kept]
        # Kafka's topic order: the topics hardest to balance are placed first.
        self._topic_order = sorted(
            group.subscribers,
            key=lambda t: (
                -group.num_partitions[t] / len(group.subscribers[t]),
                len(group.subscribers[t]),
                t,
            ),
        )

    def run(self) -> list[dict[uuid.UUID, set[int]]]:
        self._place_unowned()
        movable = [t for t in self._topic_order if len(self._subscribers[t]) >= 2]
        for _ in range(_MAX_SWEEPS):
            if sum(self._balance_topic(t) for t in movable) == 0:
                break
        while self._maybe_apply_cost_reducing_path():
            pass
        return self._owned

    def _place_unowned(self) -> None:
        """Step 2: each unowned partition to the least-loaded subscriber of its topic."""
        for t in self._topic_order:
            owned_now: set[int] = set()
            for m in self._subscribers[t]:
                owned_now |= self._owned[m].get(t, set())
            heap = [(self._load[m], m) for m in self._subscribers[t]]
            heapq.heapify(heap)
            for p in range(self._num_partitions[t]):
                if p in owned_now:
                    continue
                load, m = heapq.heappop(heap)
                self._owned[m].setdefault(t, set()).add(p)
                self._load[m] = load + 1
                heapq.heappush(heap, (load + 1, m))

    def _balance_topic(self, t: uuid.UUID) -> int:
        """Step 3 for one topic; returns how many partitions moved.

        Two heaps with lazy deletion: an entry whose recorded load is no longer
        the member's load (or, for givers, whose member no longer owns part of
        ``t``) is stale and skipped. Every move lowers the sum of squared
        loads, so the loop ends.
        """
        load, owned = self._load, self._owned
        takers = [(load[m], m) for m in self._subscribers[t]]
        givers = [(-load[m], m) for m in self._subscribers[t] if t in owned[m]]
        heapq.heapify(takers)
        heapq.heapify(givers)
        moved = 0
        while givers and takers:
            neg_load, giver = givers[0]
            if -neg_load != load[giver] or t not in owned[giver]:
                heapq.heappop(givers)
                continue
            taker_load, taker = takers[0]
            if taker_load != load[taker]:
                heapq.heappop(takers)
                continue
            if load[giver] - load[taker] <= 1:
                break
            heapq.heappop(givers)
            heapq.heappop(takers)
            self._move(t, giver, taker)
            moved += 1
            for m in (giver, taker):
                heapq.heappush(takers, (load[m], m))
                if t in owned[m]:
                    heapq.heappush(givers, (-load[m], m))
        return moved

    def _maybe_apply_cost_reducing_path(self) -> bool:
        """Step 4: find one cost-reducing path and apply it; False if none exists.

        One breadth-first search over members, seeded level by level from the
        most loaded down: from member a there is an edge to every subscriber of
        a topic a owns part of. While seeding level L, reaching a member with
        load <= L - 2 closes a path. Members reached at an earlier (higher)
        level have load >= that level - 1, so they cannot close a path for a
        lower level and the search never needs restarting. Each topic is
        expanded once: a second owner of it reaches no one new.
        """
        load, owned, subscribers = self._load, self._owned, self._subscribers
        by_load = sorted(range(len(load)), key=lambda m: (-load[m], m))
        parent: dict[int, tuple[int, uuid.UUID] | None] = {}
        expanded: set[uuid.UUID] = set()
        queue: deque[int] = deque()
        i = 0
        while i < len(by_load):
            level = load[by_load[i]]
            while i < len(by_load) and load[by_load[i]] == level:
                if by_load[i] not in parent:
                    parent[by_load[i]] = None
                    queue.append(by_load[i])
                i += 1
            while queue:
                giver = queue.popleft()
                for t in sorted(owned[giver]):
                    if t in expanded:
                        continue
                    expanded.add(t)
                    for taker in subscribers[t]:
                        if taker in parent:
                            continue
                        parent[taker] = (giver, t)
                        if load[taker] <= level - 2:
                            self._apply_path(parent, taker)
                            return True
                        queue.append(taker)
        return False

    def _apply_path(self, parent: dict[int, tuple[int, uuid.UUID] | None], end: int) -> None:
        # Walk back from the end: each giver still owns the partition of t it
        # was reached through, since only the move to its own child takes one.
        step = parent[end]
        while step is not None:
            giver, t = step
            self._move(t, giver, end)
            end = giver
            step = parent[end]

    def _move(self, t: uuid.UUID, giver: int, taker: int) -> None:
        ps = self._owned[giver][t]
        fresh = ps - self._kept[giver].get(t, set())
        p = max(fresh) if fresh else max(ps)
        ps.discard(p)
        if not ps:
            del self._owned[giver][t]
        self._owned[taker].setdefault(t, set()).add(p)
        self._load[giver] -= 1
        self._load[taker] += 1


# --- range ---------------------------------------------------------------------


class RangeAssignor:
    """Kafka's server-side ``RangeAssignor`` (the rewrite in KAFKA-16944).

    Members are ordered static first, by instance id, then dynamic, by member
    id (ties between equal instance ids, which a valid group never has, by
    member id). For each topic its subscribers, in that order, take
    consecutive ranges of partitions; with n partitions and m subscribers the
    first ``n % m`` take ``n // m + 1`` and the rest ``n // m`` (so with more
    subscribers than partitions the last ones get none of that topic). Topics
    with the same subscribers and the same partition count are therefore
    co-partitioned: each member gets the same partition numbers of each, which
    joins need.

    ``current`` is ignored: the assignment is recomputed from scratch each
    time, as Kafka does since KAFKA-16944 (apache/kafka#16504, July 2024),
    which dropped the earlier sticky variant because stickiness and
    co-partitioning could not both be kept. Stability comes from the member
    order: static members keep their ranges across restarts as long as the
    membership, subscriptions and partition counts stay the same.
    """

    name = "range"

    def assign(
        self,
        members: Mapping[str, AssignmentMember],
        topics: Mapping[uuid.UUID, AssignmentTopic],
    ) -> dict[str, MemberAssignment]:
        """See ``ServerAssignor.assign``."""
        _check_keys(members, topics)
        ordered = sorted(members.values(), key=_range_order)
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member in ordered:
            for t in member.subscribed_topic_ids:
                if t in topics:
                    subscribers.setdefault(t, []).append(member.member_id)
        result: dict[str, MemberAssignment] = {m.member_id: {} for m in ordered}
        for t in sorted(subscribers):
            base, extras = divmod(topics[t].num_partitions, len(subscribers[t]))
            start = 0
            for rank, member_id in enumerate(subscribers[t]):
                end = start + base + (1 if rank < extras else 0)
                if end > start:
                    result[member_id][t] = frozenset(range(start, end))
                start = end
        return result


def _range_order(member: AssignmentMember) -> tuple[int, str, str]:
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


# --- registry ------------------------------------------------------------------


def _check_keys(
    members: Mapping[str, AssignmentMember], topics: Mapping[uuid.UUID, AssignmentTopic]
) -> None:
    for member_id, member in members.items():
        if member_id != member.member_id:
            raise ValueError(f"members key {member_id!r} != member_id {member.member_id!r}")
    for topic_id, topic in topics.items():
        if topic_id != topic.topic_id:
            raise ValueError(f"topics key {topic_id} != topic_id {topic.topic_id}")


#: The server-side assignors by name (Kafka ``group.consumer.assignors``).
ASSIGNORS: Mapping[str, ServerAssignor] = MappingProxyType(
    {"uniform": UniformAssignor(), "range": RangeAssignor()}
)
#: The assignor of a group whose members name none (Kafka's first configured one).
DEFAULT_ASSIGNOR = "uniform"
