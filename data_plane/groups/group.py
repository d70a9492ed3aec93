"""A classic group: its members, generation, selected protocol and state.

States and legal transitions (Kafka ``ClassicGroupState``; the classic
protocol; KIP-848 consumer groups are `consumer_group.ConsumerGroup`)::

    Empty               -> PreparingRebalance, Dead
    PreparingRebalance  -> CompletingRebalance, Empty, Dead
    CompletingRebalance -> Stable, PreparingRebalance, Dead
    Stable              -> PreparingRebalance, Dead
    Dead                -> Dead

- Empty: no members; may hold offsets. Becomes Dead when its offsets expire
  or it is deleted.
- PreparingRebalance: waiting for members to (re)join until every member has
  joined or the rebalance timeout passes.
- CompletingRebalance: JoinGroup answered; waiting for the leader's
  SyncGroup with the assignment.
- Stable: every member has its assignment; heartbeats keep it alive.
- Dead: removed; only kept while a caller still holds a reference.

``transition_to`` is the only way to change ``state`` and checks the table.
The coordinator logic (what triggers which transition) lives in ``shard.py``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from .consumer_protocol import MalformedConsumerProtocolError, decode_subscription
from .model import JoinProtocol, RequestHandle
from .records import GroupMetadataValue, MemberMetadataValue

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_NEXT: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset({GroupState.DEAD}),
}


class IllegalGroupTransitionError(RuntimeError):
    """A broken invariant: the coordinator tried a transition the table forbids."""


@dataclass(slots=True)
class Member:
    """A member of a classic group. Mutable; owned by its ``ClassicGroup``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    #: The assignment of the current generation; b"" until the leader's SyncGroup.
    assignment: bytes = b""
    #: Set while the member's JoinGroup waits for the rebalance to complete.
    join_handle: RequestHandle | None = None
    #: Set while the member's SyncGroup waits for the leader's assignment.
    sync_handle: RequestHandle | None = None
    #: Session expiry (KIP-62: heartbeats, not polls, keep the session alive).
    heartbeat_deadline_ms: int = 0

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_handle is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_handle is not None

    def metadata_for(self, protocol: str) -> bytes:
        """The member's metadata for ``protocol``; raises KeyError if it does not support it."""
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        raise KeyError(protocol)

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.protocols)


@dataclass(slots=True)
class ClassicGroup:
    """State of one classic group. Invariants are checked by ``check_invariants``."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    #: When ``state`` last changed (GroupMetadataValue.currentStateTimestamp).
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    #: The selected protocol; None while Empty or before the first generation.
    protocol_name: str | None = None
    leader_id: str | None = None
    #: Insertion-ordered: the first member is the leader's successor by default.
    members: dict[str, Member] = field(default_factory=dict)
    #: group.instance.id -> member id (KIP-345).
    static_members: dict[str, str] = field(default_factory=dict)
    #: KIP-394: member ids handed out with MEMBER_ID_REQUIRED -> expiry (session timeout).
    pending_members: dict[str, int] = field(default_factory=dict)
    #: Set when a member joins during the initial delay; extends the delay once more.
    new_member_added: bool = False
    #: Deadline of the pending rebalance (PreparingRebalance only).
    join_deadline_ms: int | None = None
    #: Remaining budget of the initial delayed join; None for an ordinary delayed join.
    initial_join_remaining_ms: int | None = None
    #: The last GroupMetadataValue this coordinator wrote or loaded.
    last_persisted: GroupMetadataValue | None = None
    #: Members of the current generation that have not sent SyncGroup since
    #: the join completed (Kafka's pending sync, 3.2+). At ``sync_deadline_ms``
    #: (the join plus the largest rebalance timeout) they are removed and the
    #: group rebalances, so a member that joins and never syncs cannot hold
    #: the group in CompletingRebalance, nor keep a stale assignment in Stable.
    pending_sync_members: set[str] = field(default_factory=set)
    sync_deadline_ms: int | None = None

    def transition_to(self, new_state: GroupState, now_ms: int) -> None:
        """Move to ``new_state``; raises IllegalGroupTransitionError if the table forbids it."""
        if new_state not in _VALID_NEXT[self.state]:
            raise IllegalGroupTransitionError(
                f"group {self.group_id!r}: {self.state.value} -> {new_state.value} is not legal"
            )
        self.state = new_state
        self.state_timestamp_ms = now_ms
        if new_state is not GroupState.PREPARING_REBALANCE:
            self.join_deadline_ms = None
            self.initial_join_remaining_ms = None
        if new_state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            self.clear_pending_sync()

    # --- pending sync ------------------------------------------------------------

    def await_sync_from_all(self, deadline_ms: int) -> None:
        """The join completed: every member owes a SyncGroup by ``deadline_ms``."""
        self.pending_sync_members = set(self.members)
        self.sync_deadline_ms = deadline_ms if self.pending_sync_members else None

    def synced(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)
        if not self.pending_sync_members:
            self.sync_deadline_ms = None

    def clear_pending_sync(self) -> None:
        self.pending_sync_members.clear()
        self.sync_deadline_ms = None

    # --- membership ----------------------------------------------------------

    def add_member(self, member: Member) -> None:
        if member.member_id in self.members:
            raise IllegalGroupTransitionError(f"member {member.member_id} added twice")
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        self.synced(member_id)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, old_id: str, new_member: Member) -> Member:
        """KIP-345: the same group.instance.id came back with a new member id.

        Keeps the member's position (and leadership) and its assignment.
        """
        old = self.members[old_id]
        rebuilt: dict[str, Member] = {}
        for mid, m in self.members.items():
            rebuilt[new_member.member_id if mid == old_id else mid] = (
                new_member if mid == old_id else m
            )
        self.members = rebuilt
        new_member.assignment = old.assignment
        if new_member.group_instance_id is not None:
            self.static_members[new_member.group_instance_id] = new_member.member_id
        if self.leader_id == old_id:
            self.leader_id = new_member.member_id
        if old_id in self.pending_sync_members:
            # The new incarnation owes the old one's SyncGroup.
            self.pending_sync_members.remove(old_id)
            self.pending_sync_members.add(new_member.member_id)
        return old

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """True if ``group_instance_id`` is registered to a different member id."""
        if group_instance_id is None:
            return False
        registered = self.static_members.get(group_instance_id)
        return registered is not None and registered != member_id

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols -------------------------------------------------------------

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's preference order."""
        members = list(self.members.values())
        if not members:
            return []
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return [p for p in members[0].protocol_names() if p in common]

    def supports(self, protocol_type: str, protocols: tuple[JoinProtocol, ...]) -> bool:
        """Whether a joiner fits (Kafka ``supportsProtocols``)."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {p.name for p in protocols}
        return any(p in names for p in self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes wins.

        Ties go to the candidate earlier in the first member's preference
        order, so the choice is deterministic. Raises IllegalGroupTransitionError
        if no protocol is common (``supports`` must have prevented that).
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalGroupTransitionError(f"group {self.group_id!r} has no common protocol")
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(p for p in m.protocol_names() if p in candidates)] += 1
        best = max(votes.values())
        return next(p for p in candidates if votes[p] == best)

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to, if the group runs the consumer protocol.

        None when unknown (not the consumer protocol, no selected protocol, or
        unparseable metadata). Used by OffsetDelete and offset expiry (KIP-496, KIP-211).
        """
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                parsed = parse_subscription_topics(m.metadata_for(self.protocol_name))
            except KeyError:
                return None
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    # --- persistence -------------------------------------------------------------

    def to_metadata_value(self) -> GroupMetadataValue:
        """The GroupMetadataValue for the group as it stands."""
        protocol = self.protocol_name
        members = tuple(
            MemberMetadataValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=_metadata_or_empty(m, protocol),
                assignment=m.assignment,
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type,
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=members,
        )

    def check_invariants(self) -> None:
        """Raise AssertionError if the group's bookkeeping is inconsistent (tier 3)."""
        assert (self.leader_id is None) == (not self.members), "leader iff members"
        assert self.leader_id is None or self.leader_id in self.members
        for iid, mid in self.static_members.items():
            assert self.members[mid].group_instance_id == iid
        if self.state is GroupState.EMPTY or self.state is GroupState.DEAD:
            assert not self.members, f"{self.state.value} group has members"
        if self.state is GroupState.STABLE:
            assert self.protocol_name is not None
        if self.state is not GroupState.PREPARING_REBALANCE:
            assert not any(m.is_awaiting_join for m in self.members.values())
        if self.state is not GroupState.COMPLETING_REBALANCE:
            assert not any(m.is_awaiting_sync for m in self.members.values())
        assert not set(self.pending_members) & set(self.members), "pending and member"
        assert self.pending_sync_members <= set(self.members), "pending sync of a non-member"
        assert (self.sync_deadline_ms is None) == (not self.pending_sync_members)
        if self.pending_sync_members:
            assert self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)


def _metadata_or_empty(member: Member, protocol: str | None) -> bytes:
    if protocol is None:
        return b""
    try:
        return member.metadata_for(protocol)
    except KeyError:
        return b""


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version); None if the
    bytes do not parse."""
    try:
        return list(decode_subscription(metadata).topics)
    except MalformedConsumerProtocolError:
        return None
