"""One KIP-848 consumer group: members, epochs, the target assignment, and
each member's reconciliation toward it (Kafka's ``ConsumerGroup``,
``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``).

In the consumer protocol the coordinator assigns partitions itself. Three
epochs order what happens:

- the **group epoch** rises whenever what the assignment depends on changes:
  a member joins or leaves, a subscription changes, or a subscribed topic's
  partition count changes;
- the **assignment epoch** is the group epoch the current *target*
  assignment was computed at (by a server-side assignor, `assignors`);
- each **member epoch** is the assignment epoch the member has reconciled to.

A member moves toward its target in steps (`next_assignment`): it first gives
up (revokes) partitions that are no longer its own, keeping its epoch
(`MemberState.UNREVOKED_PARTITIONS`); it is only handed a partition once no
other member still holds it (`MemberState.UNRELEASED_PARTITIONS` while it
waits); once it holds exactly its target it is `MemberState.STABLE` at the
assignment epoch. So no partition is ever owned by two members at once. Who
owns what is kept in ``owners`` (partition -> member id), from each member's
assigned and pending-revocation partitions.

This module is data and pure functions. The commands that change a group
(`consumer_commands`) do it only by writing ``__consumer_offsets`` records,
which `apply_*` here replay the same way live and on coordinator failover.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from .consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
)

__all__ = (
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "ConsumerValue",
    "MemberState",
    "NextAssignment",
    "apply_consumer_record",
    "assignment_equal",
    "freeze_assignment",
    "next_assignment",
)

#: topic id -> partition indexes.
Assignment = Mapping[uuid.UUID, frozenset[int]]

#: Member epoch of a static member that left for a while (``LeaveGroup`` of
#: the consumer protocol, epoch -2): it keeps its partitions until its
#: session expires or it rejoins with the same instance id.
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: Member epoch a member sends to leave for good.
LEAVE_GROUP_MEMBER_EPOCH = -1


class MemberState(Enum):
    """Where a member is in reconciling to its target (Kafka's
    ``MemberState``; the value is the int8 ``State`` of the
    ConsumerGroupCurrentMemberAssignment record)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    """The group's state as ListGroups and ConsumerGroupDescribe show it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def freeze_assignment(pairs: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment from (topic id, partitions) pairs, without empty topics."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in pairs:
        merged = out.get(topic_id, frozenset()) | frozenset(partitions)
        if merged:
            out[topic_id] = merged
    return out


def assignment_equal(a: Assignment, b: Assignment) -> bool:
    """Equal as sets of partitions (empty topics do not count)."""
    return {k: v for k, v in a.items() if v} == {k: v for k, v in b.items() if v}


def _subset(a: Assignment, b: Assignment) -> bool:
    return all(parts <= b.get(topic_id, frozenset()) for topic_id, parts in a.items())


@dataclass(slots=True)
class ConsumerMember:
    """One member: what it subscribes to (ConsumerGroupMemberMetadata) and
    what it holds (ConsumerGroupCurrentMemberAssignment)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    #: Set for a member that speaks the classic protocol (JoinGroup,
    #: SyncGroup, Heartbeat) inside this group: KIP-848's online migration.
    classic: ClassicMemberMetadata | None = None

    def owned(self) -> Iterable[tuple[uuid.UUID, int]]:
        """Every partition this member holds or has yet to give up."""
        for source in (self.assigned, self.pending_revocation):
            for topic_id, partitions in source.items():
                for p in partitions:
                    yield topic_id, p


@dataclass(slots=True)
class ConsumerGroup:
    """A consumer group's replayed state, plus timers kept only in memory."""

    group_id: str
    group_epoch: int = 0
    #: Hash of the subscribed topics' metadata the group epoch was last
    #: bumped for (ConsumerGroupMetadataValue.MetadataHash).
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: member id -> its target assignment.
    target: dict[str, Assignment] = field(default_factory=dict)
    #: partition -> the member holding it (assigned or pending revocation).
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    #: instance id -> member id, for static members.
    static_members: dict[str, str] = field(default_factory=dict)
    # --- not persisted ---
    #: member id -> session deadline (``group.consumer.session.timeout.ms``).
    session_deadlines_ms: dict[str, int] = field(default_factory=dict)
    #: member id -> deadline to finish revoking (its rebalance timeout).
    rebalance_deadlines_ms: dict[str, int] = field(default_factory=dict)
    #: Classic members: member id -> deadline for the SyncGroup after a
    #: JoinGroup, or for the JoinGroup after a heartbeat asked for one (its
    #: rebalance timeout); missed, the member is fenced.
    classic_deadlines_ms: dict[str, int] = field(default_factory=dict)

    # --- derived views -----------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            reconciled = m.state is MemberState.STABLE and m.member_epoch == self.assignment_epoch
            if not reconciled and m.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topic_names(self) -> frozenset[str]:
        """Names subscribed to by name (regex subscriptions are resolved by the caller)."""
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
        return frozenset(names)

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (``default`` if none does)."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return min(counts, key=lambda name: (-counts[name], name))

    def is_free_for(self, topic_id: uuid.UUID, partition: int, member_id: str) -> bool:
        owner = self.owners.get((topic_id, partition))
        return owner is None or owner == member_id

    # --- replay (records -> state) ----------------------------------------------------

    def member_or_create(self, member_id: str) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None:
            member = self.members[member_id] = ConsumerMember(member_id)
        return member

    def apply_member_metadata(self, member_id: str, *, instance_id: str | None,
                              rack_id: str | None, client_id: str, client_host: str,
                              subscribed_topic_names: tuple[str, ...],
                              subscribed_topic_regex: str | None,
                              server_assignor: str | None, rebalance_timeout_ms: int,
                              classic: ClassicMemberMetadata | None = None) -> None:
        member = self.member_or_create(member_id)
        old = member.instance_id
        if old is not None and old != instance_id and self.static_members.get(old) == member_id:
            del self.static_members[old]
        member.instance_id = instance_id
        member.rack_id = rack_id
        member.client_id = client_id
        member.client_host = client_host
        member.subscribed_topic_names = subscribed_topic_names
        member.subscribed_topic_regex = subscribed_topic_regex
        member.server_assignor = server_assignor
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.classic = classic
        if instance_id is not None:
            self.static_members[instance_id] = member_id

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.session_deadlines_ms.pop(member_id, None)
        self.rebalance_deadlines_ms.pop(member_id, None)
        self.classic_deadlines_ms.pop(member_id, None)

    def apply_current_assignment(self, member_id: str, *, member_epoch: int,
                                 previous_member_epoch: int, state: MemberState,
                                 assigned: Assignment, pending_revocation: Assignment) -> None:
        member = self.member_or_create(member_id)
        self._release(member)
        member.member_epoch = member_epoch
        member.previous_member_epoch = previous_member_epoch
        member.state = state
        member.assigned = dict(assigned)
        member.pending_revocation = dict(pending_revocation)
        for key in member.owned():
            self.owners[key] = member_id

    def clear_current_assignment(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is None:
            return
        self._release(member)
        member.assigned, member.pending_revocation = {}, {}
        member.member_epoch = member.previous_member_epoch = 0
        member.state = MemberState.STABLE

    def _release(self, member: ConsumerMember) -> None:
        for key in member.owned():
            if self.owners.get(key) == member.member_id:
                del self.owners[key]

    # --- invariants (tests, simulation) ------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent: every owned
        partition is owned by exactly one member, ``owners`` is exactly the
        members' holdings, and static members map both ways."""
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for member in self.members.values():
            for key in member.owned():
                assert key not in seen, f"{key} held by {seen[key]} and {member.member_id}"
                seen[key] = member.member_id
            overlap = [
                (t, p & member.pending_revocation.get(t, frozenset()))
                for t, p in member.assigned.items()
            ]
            assert all(not both for _, both in overlap), "assigned and pending overlap"
            if member.instance_id is not None:
                assert self.static_members.get(member.instance_id) == member.member_id
        assert seen == self.owners, "owners out of step with the members"
        for instance_id, member_id in self.static_members.items():
            assert self.members[member_id].instance_id == instance_id
        assert self.assignment_epoch <= self.group_epoch


@dataclass(frozen=True, slots=True)
class NextAssignment:
    """A member's next step toward its target."""

    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: dict[uuid.UUID, frozenset[int]]
    pending_revocation: dict[uuid.UUID, frozenset[int]]


def next_assignment(group: ConsumerGroup, member: ConsumerMember,
                    owned: Assignment | None) -> NextAssignment | None:
    """The member's next state toward ``group.target`` at
    ``group.assignment_epoch`` given what it reported owning (``owned``,
    None if the heartbeat did not say); None when it stays as it is.

    - STABLE at an older epoch, or UNRELEASED_PARTITIONS: recompute.
    - UNREVOKED_PARTITIONS: wait until the member reports it no longer owns
      any partition pending revocation, then recompute.

    Partitions to revoke that ``owned`` shows the member no longer holds (a
    classic member that revoked them all before rejoining) need no wait, as
    in Kafka's ``CurrentAssignmentBuilder``.
    """
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or not _subset(owned, member.assigned):
            return None
    elif member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
        return None
    return _compute(group, member, owned)


def _owns_any(owned: Assignment, partitions: Assignment) -> bool:
    return any(parts & owned.get(topic_id, frozenset()) for topic_id, parts in partitions.items())


def _compute(group: ConsumerGroup, member: ConsumerMember,
             owned: Assignment | None = None) -> NextAssignment:
    target = group.target.get(member.member_id, {})
    current = member.assigned
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(current):
        mine = current.get(topic_id, frozenset())
        wanted = target.get(topic_id, frozenset())
        if keep := mine & wanted:
            kept[topic_id] = keep
        if gone := mine - wanted:
            revoking[topic_id] = gone
        free = set()
        for p in wanted - mine:
            if group.is_free_for(topic_id, p, member.member_id):
                free.add(p)
            else:
                unreleased = True
        if free:
            adding[topic_id] = frozenset(free)
    if revoking and (owned is None or _owns_any(owned, revoking)):
        # Give up first, at the same epoch, and take nothing new meanwhile.
        return NextAssignment(MemberState.UNREVOKED_PARTITIONS, member.member_epoch,
                              member.member_epoch, kept, revoking)
    assigned = dict(kept)
    for topic_id, partitions in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return NextAssignment(state, group.assignment_epoch, member.member_epoch, assigned, {})


def apply_consumer_record(groups: dict[str, ConsumerGroup], key: ConsumerKey,
                          value: ConsumerValue | None) -> None:
    """Apply one consumer-group record to ``groups`` (live and on replay)."""
    group_id = key.group_id
    group = groups.get(group_id)
    if value is None:  # tombstones
        if group is None:
            return
        if isinstance(key, ConsumerGroupMetadataKey):
            del groups[group_id]
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            group.remove_member(key.member_id)
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            group.target.pop(key.member_id, None)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            group.clear_current_assignment(key.member_id)
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = 0
        return
    if group is None:
        group = groups[group_id] = ConsumerGroup(group_id)
    if isinstance(value, ConsumerGroupMetadataValue):
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        assert isinstance(key, ConsumerGroupMemberMetadataKey)
        group.apply_member_metadata(
            key.member_id, instance_id=value.instance_id, rack_id=value.rack_id,
            client_id=value.client_id, client_host=value.client_host,
            subscribed_topic_names=tuple(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex,
            server_assignor=value.server_assignor,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            classic=value.classic_member_metadata)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        group.assignment_epoch = value.assignment_epoch
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        assert isinstance(key, ConsumerGroupTargetAssignmentMemberKey)
        group.target[key.member_id] = freeze_assignment(value.topic_partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        assert isinstance(key, ConsumerGroupCurrentMemberAssignmentKey)
        group.apply_current_assignment(
            key.member_id, member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=_member_state(value.state),
            assigned=freeze_assignment(value.assigned_partitions),
            pending_revocation=freeze_assignment(value.partitions_pending_revocation))


def _member_state(code: int) -> MemberState:
    try:
        return MemberState(code)
    except ValueError:
        return MemberState.UNKNOWN
