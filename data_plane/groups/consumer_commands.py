"""KIP-848 consumer protocol commands of a shard: ConsumerGroupHeartbeat
(join, heartbeat, leave), ConsumerGroupDescribe, and session and rebalance
timeouts (Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``).

Every change to a consumer group is made by writing a ``__consumer_offsets``
record (`consumer_records`) through `ConsumerGroupCommands._write`, which
applies it with the same code replay uses (`apply_consumer_record`). So the
state a coordinator rebuilds on failover is the state it served. Only the
session and rebalance deadlines live in memory alone; a loaded group's
members get a fresh session (`_start_consumer_sessions`), as in Kafka.

One heartbeat, in order:

1. validate the request and the member's epoch (FENCED_MEMBER_EPOCH, unless
   the member sends its previous epoch with a subset of its partitions: the
   answer that moved it on was lost);
2. write the member's subscription if it changed, and bump the group epoch
   if the member is new or its subscription, or the subscribed topics'
   metadata, changed;
3. if the group epoch moved past the assignment epoch, compute a new target
   assignment with the group's server assignor and write each member's that
   changed, then the new assignment epoch;
4. move the member one step toward its target (`consumer_group.next_assignment`)
   and write its current assignment if it changed;
5. answer with the member's epoch, and its assignment if the request was a
   full one or the assignment changed.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable

from .assignors import ASSIGNORS, AssignmentMember, AssignmentTopic
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    NextAssignment,
    assignment_equal,
    freeze_assignment,
    next_assignment,
)
from .consumer_model import (
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerMemberDescription,
    DescribedTopicPartitions,
    TopicPartitions,
    TopicsView,
)
from .consumer_records import (
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
)
from .group import ClassicGroup, GroupState
from .model import CoordinatorResult, OffsetsRecord, Reply, RequestHandle
from .records import GroupMetadataKey, encode_key
from .shard_state import _E, ShardState, _Out

__all__ = ("ConsumerGroupCommands",)

_MAX_STRING_BYTES = 0x7FFF
#: Topics a regular expression never matches (Kafka excludes internal topics).
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

class _Refused(Exception):
    """A heartbeat answered with an error; nothing was written."""

    def __init__(self, error: _E, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


def _as_pairs(assignment: Assignment) -> TopicPartitions:
    return tuple((t, tuple(sorted(p))) for t, p in sorted(assignment.items(), key=lambda kv: str(kv[0])) if p)


def _metadata_hash(topics: Iterable[AssignmentTopic]) -> int:
    """A stable 63-bit digest of the subscribed topics' ids, names and
    partition counts (stored as ConsumerGroupMetadataValue.MetadataHash; only
    this coordinator reads it, so it need not be Kafka's own digest)."""
    digest = hashlib.blake2b(digest_size=8)
    for t in sorted(topics, key=lambda t: t.name):
        digest.update(f"{t.name}\0{t.topic_id}\0{t.num_partitions}\n".encode())
    return int.from_bytes(digest.digest(), "big") >> 1


class ConsumerGroupCommands(ShardState):
    """Consumer groups (KIP-848) of one shard."""

    # --- records ---------------------------------------------------------------------

    def _write_current(self, out: _Out, group: ConsumerGroup, member_id: str,
                       nxt: NextAssignment) -> None:
        self._write_consumer(out, ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(
                        member_epoch=nxt.member_epoch,
                        previous_member_epoch=nxt.previous_member_epoch,
                        state=nxt.state.value,
                        assigned_partitions=_as_pairs(nxt.assigned),
                        partitions_pending_revocation=_as_pairs(nxt.pending_revocation)))

    def _write_member_metadata(self, out: _Out, group_id: str, m: ConsumerMember) -> None:
        self._write_consumer(out, ConsumerGroupMemberMetadataKey(group_id, m.member_id),
                    ConsumerGroupMemberMetadataValue(
                        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=m.subscribed_topic_names,
                        subscribed_topic_regex=m.subscribed_topic_regex,
                        server_assignor=m.server_assignor,
                        rebalance_timeout_ms=m.rebalance_timeout_ms,
                        classic_member_metadata=m.classic))

    def _bump_epoch(self, out: _Out, group: ConsumerGroup, metadata_hash: int) -> None:
        self.consumer_group_rebalances += 1
        self._write_consumer(out, ConsumerGroupMetadataKey(group.group_id),
                    ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash))

    def _remove_consumer_member(self, out: _Out, group: ConsumerGroup, member_id: str,
                                *, bump: bool) -> None:
        """Tombstone the member's records (current assignment, target,
        subscription, Kafka's order) and, if ``bump``, move the group epoch on."""
        gid = group.group_id
        self._write_consumer(out, ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), None)
        self._write_consumer(out, ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None)
        self._write_consumer(out, ConsumerGroupMemberMetadataKey(gid, member_id), None)
        if bump:
            self._bump_epoch(out, group, group.metadata_hash)

    def _delete_consumer_group(self, group: ConsumerGroup, out: _Out) -> None:
        """Tombstones for an empty group: its offsets, target assignment and metadata."""
        for tp in sorted(self._offsets.committed(group.group_id)):
            self._emit_offset(out, group.group_id, tp, None)
        self._drop_consumer_group_records(group, out)

    # --- ConsumerGroupHeartbeat ----------------------------------------------------------

    def handle_consumer_group_heartbeat(
        self, handle: RequestHandle, request: ConsumerGroupHeartbeatRequest,
        topics: TopicsView, now_ms: int,
    ) -> CoordinatorResult:
        """Join, heartbeat or leave a consumer group (see the module docstring)."""
        out = _Out()
        self._arm_retention(now_ms)
        try:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._consumer_leave(request, now_ms, out)
            else:
                response = self._consumer_heartbeat(request, topics, now_ms, out)
        except _Refused as refused:
            response = ConsumerGroupHeartbeatResponse(refused.error, refused.message,
                                                      member_id=request.member_id or None)
        out.replies.append(Reply(handle, response))
        return self._result(out)

    def _validate_heartbeat(self, r: ConsumerGroupHeartbeatRequest) -> None:
        def bad(message: str) -> _Refused:
            return _Refused(_E.invalid_request, message)

        if not r.group_id:
            raise bad("GroupId can't be empty.")
        strings = (r.group_id, r.member_id, r.instance_id, r.rack_id, r.client_id, r.client_host,
                   r.subscribed_topic_regex, r.server_assignor, *(r.subscribed_topic_names or ()))
        if any(s is not None and len(s.encode()) > _MAX_STRING_BYTES for s in strings):
            # Kafka's records (and its request readers) hold strings of at most 32767 bytes.
            raise bad(f"A string field is longer than {_MAX_STRING_BYTES} bytes.")
        if r.instance_id is not None and not r.instance_id:
            raise bad("InstanceId can't be empty.")
        if r.rack_id is not None and not r.rack_id:
            raise bad("RackId can't be empty.")
        if r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise bad(f"MemberEpoch {r.member_epoch} is invalid.")
        if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and r.instance_id is None:
            raise bad("InstanceId can't be null when leaving as a static member.")
        if r.member_epoch != 0 and not r.member_id:
            raise bad("MemberId can't be empty.")
        if r.member_epoch == 0:
            if not r.member_id and r.api_version >= 1:
                raise bad("MemberId can't be empty.")
            if r.rebalance_timeout_ms == -1:
                raise bad("RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or any(parts for _, parts in r.owned):
                raise bad("TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                raise bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if r.server_assignor is not None and r.server_assignor not in self._config.consumer_assignors:
            raise _Refused(_E.unsupported_assignor,
                           f"ServerAssignor {r.server_assignor} is not supported. Supported "
                           f"assignors: {', '.join(self._config.consumer_assignors)}.")
        if r.subscribed_topic_regex:
            try:
                re.compile(r.subscribed_topic_regex)
            except re.error as e:
                raise _Refused(_E.invalid_regular_expression,
                               f"SubscribedTopicRegex {r.subscribed_topic_regex!r} is not a "
                               f"valid regular expression: {e}.") from None

    def _consumer_group_for(self, r: ConsumerGroupHeartbeatRequest,
                            topics: TopicsView | None = None, now_ms: int = 0,
                            out: _Out | None = None) -> ConsumerGroup | None:
        """The consumer group ``r`` names, or None for a new one (an empty
        classic group's offsets carry over). A classic group with members is
        GROUP_ID_NOT_FOUND, unless a joining member (with ``topics`` and
        ``out`` to write with) upgrades it (`_upgrade_classic_group`)."""
        group = self._consumer_groups.get(r.group_id)
        if group is not None:
            return group
        classic = self._groups.get(r.group_id)
        if classic is not None and (classic.members or classic.pending_members
                                    or classic.state is not GroupState.EMPTY):
            if r.member_epoch == 0 and topics is not None and out is not None:
                return self._upgrade_classic_group(classic, r, topics, now_ms, out)
            raise _Refused(_E.group_id_not_found,
                           f"Group {r.group_id} is not a consumer group.")
        return None

    def _upgrade_classic_group(self, classic: ClassicGroup, r: ConsumerGroupHeartbeatRequest,
                               topics: TopicsView, now_ms: int, out: _Out) -> ConsumerGroup:
        """Overridden by `migration.MigrationCommands`: online upgrade."""
        raise _Refused(_E.group_id_not_found, f"Group {r.group_id} is not a consumer group.")

    def _fence_consumer_members(self, out: _Out, group: ConsumerGroup,
                                member_ids: Iterable[str], now_ms: int) -> None:
        """Remove members (left, or fenced by a timer) and bump the group
        epoch once. `migration.MigrationCommands` turns the group back into a
        classic one instead when only classic members would remain."""
        gone = [mid for mid in member_ids if mid in group.members]
        if not gone:
            return
        for mid in gone:
            self._remove_consumer_member(out, group, mid, bump=False)
        self._bump_epoch(out, group, group.metadata_hash)

    def _consumer_heartbeat(self, r: ConsumerGroupHeartbeatRequest, topics: TopicsView,
                            now_ms: int, out: _Out) -> ConsumerGroupHeartbeatResponse:
        self._validate_heartbeat(r)
        group = self._consumer_group_for(r, topics, now_ms, out)
        epoch = r.member_epoch
        member_id = r.member_id or self._new_uuid()
        existing = group.members.get(member_id) if group is not None else None
        replacing: ConsumerMember | None = None
        if epoch != 0:
            if existing is None:
                raise _Refused(_E.unknown_member_id,
                               f"Member {member_id} is not a member of group {r.group_id}.")
            self._check_epoch(existing, r)
        if r.instance_id is not None and group is not None:
            holder = group.static_members.get(r.instance_id)
            if epoch != 0 and holder != member_id:
                raise _Refused(_E.fenced_instance_id if holder is not None else _E.unknown_member_id,
                               f"Static member {member_id} with instance id {r.instance_id} "
                               "is not the member holding that instance id.")
            if epoch == 0 and holder is not None and holder != member_id:
                old = group.members[holder]
                if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise _Refused(_E.unreleased_instance_id,
                                   f"Static member {holder} with instance id {r.instance_id} "
                                   "is not released yet.")
                replacing = old
        if (existing is None and replacing is None and group is not None
                and len(group.members) >= self._config.consumer_max_size):
            raise _Refused(_E.group_max_size_reached,
                           f"The consumer group has reached its maximum capacity of "
                           f"{self._config.consumer_max_size} members.")
        # Nothing can be refused from here on: write.
        if group is None:
            classic = self._groups.pop(r.group_id, None)  # an empty group: offsets only
            if classic is not None and classic.last_persisted is not None:
                out.records.append(OffsetsRecord(
                    encode_key(GroupMetadataKey(r.group_id)), None))
            group = self._consumer_groups[r.group_id] = ConsumerGroup(r.group_id)
        base = existing or replacing or ConsumerMember(member_id)
        updated = ConsumerMember(
            member_id=member_id,
            instance_id=r.instance_id if r.instance_id is not None else base.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else base.rack_id,
            client_id=r.client_id, client_host=r.client_host,
            subscribed_topic_names=(tuple(r.subscribed_topic_names)
                                    if r.subscribed_topic_names is not None
                                    else base.subscribed_topic_names),
            subscribed_topic_regex=((r.subscribed_topic_regex or None)
                                    if r.subscribed_topic_regex is not None
                                    else base.subscribed_topic_regex),
            server_assignor=(r.server_assignor if r.server_assignor is not None
                             else base.server_assignor),
            rebalance_timeout_ms=(r.rebalance_timeout_ms if r.rebalance_timeout_ms != -1
                                  else base.rebalance_timeout_ms),
        )
        subscription_changed = (
            updated.subscribed_topic_names != base.subscribed_topic_names
            or updated.subscribed_topic_regex != base.subscribed_topic_regex
            or updated.server_assignor != base.server_assignor
        )
        before_assigned: Assignment = {} if existing is None else existing.assigned
        member, started_revoking = self._update_and_reconcile(
            out, group, existing, replacing, updated, subscription_changed, topics,
            None if r.owned is None else freeze_assignment(r.owned))
        if started_revoking:
            group.rebalance_deadlines_ms[member_id] = now_ms + max(0, member.rebalance_timeout_ms)
        if member.state is not MemberState.UNREVOKED_PARTITIONS:
            group.rebalance_deadlines_ms.pop(member_id, None)
        group.session_deadlines_ms[member_id] = now_ms + self._config.consumer_session_timeout_ms
        full = epoch == 0 or (r.rebalance_timeout_ms != -1
                              and r.subscribed_topic_names is not None and r.owned is not None)
        send_assignment = full or not assignment_equal(before_assigned, member.assigned)
        return ConsumerGroupHeartbeatResponse(
            _E.none, member_id=member_id, member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._config.consumer_heartbeat_interval_ms,
            assignment=_as_pairs(member.assigned) if send_assignment else None)

    def _update_and_reconcile(
        self, out: _Out, group: ConsumerGroup, existing: ConsumerMember | None,
        replacing: ConsumerMember | None, updated: ConsumerMember, subscription_changed: bool,
        topics: TopicsView, owned: Assignment | None,
    ) -> tuple[ConsumerMember, bool]:
        """Steps 2-4 of a heartbeat (or a classic member's JoinGroup): write
        the member's metadata, bump the group epoch and assign if needed, and
        move the member one step toward its target given what it ``owned``.
        Returns the member and whether it has just begun revoking."""
        if replacing is not None:
            self._replace_static_consumer(out, group, replacing, updated)
        elif existing is None or _metadata_differs(existing, updated):
            self._write_member_metadata(out, group.group_id, updated)
        metadata = self._subscribed_metadata(group, topics)
        metadata_hash = _metadata_hash(metadata.values())
        if (existing is None and replacing is None) or subscription_changed \
                or metadata_hash != group.metadata_hash:
            self._bump_epoch(out, group, metadata_hash)
        if group.group_epoch > group.assignment_epoch:
            self._assign(out, group, metadata, topics)
        member = group.members[updated.member_id]
        nxt = next_assignment(group, member, owned)
        started_revoking = False
        if nxt is not None and _changes(member, nxt):
            started_revoking = (nxt.state is MemberState.UNREVOKED_PARTITIONS
                                and member.state is not MemberState.UNREVOKED_PARTITIONS)
            self._write_current(out, group, member.member_id, nxt)
        return member, started_revoking

    @staticmethod
    def _check_epoch(member: ConsumerMember, r: ConsumerGroupHeartbeatRequest) -> None:
        """FENCED_MEMBER_EPOCH unless the epoch is the member's, or its previous
        one with no more than its current partitions (a lost response)."""
        if r.member_epoch == member.member_epoch:
            return
        if r.member_epoch < member.member_epoch and r.member_epoch == member.previous_member_epoch \
                and r.owned is not None:
            owned = freeze_assignment(r.owned)
            if all(parts <= member.assigned.get(t, frozenset()) for t, parts in owned.items()):
                return
        raise _Refused(_E.fenced_member_epoch,
                       f"The consumer group member has a smaller or larger member epoch "
                       f"({r.member_epoch}) than the one known by the group coordinator "
                       f"({member.member_epoch}). The member must abandon all its partitions "
                       "and rejoin.")

    def _replace_static_consumer(self, out: _Out, group: ConsumerGroup, old: ConsumerMember,
                               new: ConsumerMember) -> None:
        """A static member rejoins under a new member id: it takes over the
        old member's target and current assignment, without a rebalance."""
        target = group.target.get(old.member_id, {})
        current = NextAssignment(old.state, old.previous_member_epoch, old.previous_member_epoch,
                                 dict(old.assigned), dict(old.pending_revocation))
        self._remove_consumer_member(out, group, old.member_id, bump=False)
        group.session_deadlines_ms.pop(old.member_id, None)
        group.rebalance_deadlines_ms.pop(old.member_id, None)
        self._write_member_metadata(out, group.group_id, new)
        self._write_consumer(out, ConsumerGroupTargetAssignmentMemberKey(group.group_id, new.member_id),
                    ConsumerGroupTargetAssignmentMemberValue(_as_pairs(target)))
        self._write_current(out, group, new.member_id, current)

    def _subscribed_topics(self, member: ConsumerMember, topics: TopicsView) -> dict[uuid.UUID, AssignmentTopic]:
        found: dict[uuid.UUID, AssignmentTopic] = {}
        for name in member.subscribed_topic_names:
            t = topics.by_name(name)
            if t is not None:
                found[t.topic_id] = t
        if member.subscribed_topic_regex:
            try:
                pattern = re.compile(member.subscribed_topic_regex)
            except re.error:
                pattern = None
            if pattern is not None:
                for name in topics.names():
                    if name not in _INTERNAL_TOPICS and pattern.fullmatch(name):
                        t = topics.by_name(name)
                        if t is not None:
                            found[t.topic_id] = t
        return found

    def _subscribed_metadata(self, group: ConsumerGroup,
                             topics: TopicsView) -> dict[uuid.UUID, AssignmentTopic]:
        metadata: dict[uuid.UUID, AssignmentTopic] = {}
        for member in group.members.values():
            metadata.update(self._subscribed_topics(member, topics))
        return metadata

    def _assign(self, out: _Out, group: ConsumerGroup,
                metadata: dict[uuid.UUID, AssignmentTopic], topics: TopicsView) -> None:
        """A new target assignment at the group epoch."""
        assignor = ASSIGNORS[group.preferred_assignor(self._config.consumer_assignors[0])]
        members = {
            mid: AssignmentMember(
                member_id=mid, instance_id=m.instance_id, rack_id=m.rack_id,
                subscribed_topic_ids=frozenset(self._subscribed_topics(m, topics)),
                current=group.target.get(mid, {}))
            for mid, m in group.members.items()
        }
        target = assignor.assign(members, metadata)
        for mid in sorted(group.members):
            new = target.get(mid, {})
            if mid not in group.target or not assignment_equal(new, group.target[mid]):
                self._write_consumer(out, ConsumerGroupTargetAssignmentMemberKey(group.group_id, mid),
                            ConsumerGroupTargetAssignmentMemberValue(_as_pairs(new)))
        self._write_consumer(out, ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                    ConsumerGroupTargetAssignmentMetadataValue(group.group_epoch))

    def _consumer_leave(self, r: ConsumerGroupHeartbeatRequest, now_ms: int,
                        out: _Out) -> ConsumerGroupHeartbeatResponse:
        self._validate_heartbeat(r)
        group = self._consumer_group_for(r)
        member = group.members.get(r.member_id) if group is not None else None
        if group is None or member is None:
            raise _Refused(_E.unknown_member_id,
                           f"Member {r.member_id} is not a member of group {r.group_id}.")
        if r.instance_id is not None and group.static_members.get(r.instance_id) != r.member_id:
            raise _Refused(_E.fenced_instance_id,
                           f"Instance id {r.instance_id} is not held by member {r.member_id}.")
        if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Keep its partitions until it rejoins or its session ends.
            self._write_current(out, group, member.member_id, NextAssignment(
                member.state, LEAVE_GROUP_STATIC_MEMBER_EPOCH, member.member_epoch,
                dict(member.assigned), dict(member.pending_revocation)))
        else:
            self._fence_consumer_members(out, group, (member.member_id,), now_ms)
        return ConsumerGroupHeartbeatResponse(_E.none, member_id=r.member_id,
                                              member_epoch=r.member_epoch)

    # --- timers ----------------------------------------------------------------------

    def _tick_consumer_groups(self, now_ms: int, out: _Out) -> None:
        """Fence members whose session ended or who did not revoke in time."""
        for group in list(self._consumer_groups.values()):
            expired = sorted(
                {mid for mid, d in group.session_deadlines_ms.items() if d <= now_ms}
                | {mid for mid, d in group.rebalance_deadlines_ms.items() if d <= now_ms}
                | {mid for mid, d in group.classic_deadlines_ms.items() if d <= now_ms})
            for mid in expired:
                group.session_deadlines_ms.pop(mid, None)
                group.rebalance_deadlines_ms.pop(mid, None)
                group.classic_deadlines_ms.pop(mid, None)
            self._fence_consumer_members(out, group, expired, now_ms)

    def _consumer_deadlines(self) -> Iterable[int]:
        for group in self._consumer_groups.values():
            yield from group.session_deadlines_ms.values()
            yield from group.rebalance_deadlines_ms.values()
            yield from group.classic_deadlines_ms.values()

    def _start_consumer_sessions(self, now_ms: int) -> None:
        """After a load: every member gets a full session, as a new coordinator gives."""
        for group in self._consumer_groups.values():
            for mid in group.members:
                group.session_deadlines_ms[mid] = now_ms + self._config.consumer_session_timeout_ms

    # --- ConsumerGroupDescribe --------------------------------------------------------------

    def handle_consumer_group_describe(
        self, group_ids: tuple[str, ...], topics: TopicsView,
    ) -> tuple[ConsumerGroupDescription, ...]:
        return tuple(self._describe_consumer(gid, topics) for gid in group_ids)

    def _describe_consumer(self, group_id: str, topics: TopicsView) -> ConsumerGroupDescription:
        group = self._consumer_groups.get(group_id)
        if group is None:
            why = (f"Group {group_id} is not a consumer group." if group_id in self._groups
                   else f"Group {group_id} not found.")
            return ConsumerGroupDescription(group_id, _E.group_id_not_found, why)

        def described(assignment: Assignment) -> DescribedTopicPartitions:
            out = []
            for topic_id, parts in _as_pairs(assignment):
                t = topics.by_id(topic_id)
                out.append((topic_id, t.name if t is not None else "", parts))
            return tuple(out)

        members = tuple(
            ConsumerMemberDescription(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=described(m.assigned),
                target_assignment=described(group.target.get(m.member_id, {})),
                classic=m.classic is not None)
            for _, m in sorted(group.members.items()))
        return ConsumerGroupDescription(
            group_id, _E.none, state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(self._config.consumer_assignors[0]),
            members=members)


def _metadata_differs(a: ConsumerMember, b: ConsumerMember) -> bool:
    return (a.instance_id, a.rack_id, a.client_id, a.client_host, a.subscribed_topic_names,
            a.subscribed_topic_regex, a.server_assignor, a.rebalance_timeout_ms, a.classic) != (
        b.instance_id, b.rack_id, b.client_id, b.client_host, b.subscribed_topic_names,
        b.subscribed_topic_regex, b.server_assignor, b.rebalance_timeout_ms, b.classic)


def _changes(member: ConsumerMember, nxt: NextAssignment) -> bool:
    return (member.state is not nxt.state or member.member_epoch != nxt.member_epoch
            or member.previous_member_epoch != nxt.previous_member_epoch
            or not assignment_equal(member.assigned, nxt.assigned)
            or not assignment_equal(member.pending_revocation, nxt.pending_revocation))
