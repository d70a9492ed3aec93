"""``GroupCoordinatorShard``: the classic group coordinator for one offsets partition.

One shard per owned ``__consumer_offsets`` partition (``partitioning.py``
picks it). It is sans-I/O (STYLE.md section 1): every command carries
``now_ms``, nothing reads a clock, and member ids come from an injected
``random.Random``. Only the classic protocol (JoinGroup/SyncGroup/Heartbeat,
KIP-62 session vs rebalance timeouts, KIP-394 MEMBER_ID_REQUIRED, KIP-345
static membership) is implemented; KIP-848's consumer protocol is not.

Outputs (``CoordinatorResult``): records to append, replies keyed by
``RequestHandle`` -- including *delayed* replies to other members' parked
JoinGroup/SyncGroup calls -- and the next timer deadline. The shard updates
its memory as it decides, like Kafka's coordinator runtime; the broker holds
the replies until the records are committed, and on an append failure
reloads the shard from the log (see ``CoordinatorResult``).

Replay (``replay_record``, ``replay_txn_marker``, ``load_batch``, then
``complete_load``) rebuilds groups and offsets from the partition: this is
coordinator failover.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from raftlog.net.errors import ErrorCode
from raftlog.records import (
    ControlRecordType,
    decode_records,
    parse_control_record_key,
    parse_header,
)

from .group import ClassicGroup, GroupState, Member
from .model import (
    UNKNOWN_MEMBER_ID,
    CoordinatorResult,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedMember,
    FetchedOffset,
    GroupConfig,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinProtocol,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetsRecord,
    PartitionResult,
    Reply,
    RequestHandle,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicPartition,
    TxnOffsetCommitRequest,
    TxnProducer,
)
from .offsets import CommittedOffset, OffsetStore
from .records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)

_E = ErrorCode


@dataclass(slots=True)
class _Out:
    records: list[OffsetsRecord] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)


class GroupCoordinatorShard:
    """Groups and offsets of one ``__consumer_offsets`` partition.

    Write commands (``handle_join_group`` ... ``tick``) return a
    ``CoordinatorResult``; reads (``handle_offset_fetch``,
    ``handle_list_groups``, ``handle_describe_groups``) answer directly.
    Bad client input is answered with a Kafka error code; a broken internal
    invariant raises (STYLE.md section 8).
    """

    def __init__(
        self, partition: int, config: GroupConfig | None = None, *, rng: random.Random
    ) -> None:
        self.partition = partition
        self._config = config or GroupConfig()
        self._rng = rng
        self._groups: dict[str, ClassicGroup] = {}
        self._offsets = OffsetStore()
        self._retention_deadline_ms: int | None = None

    # --- introspection (tests, describe CLI) -----------------------------------

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    @property
    def offsets(self) -> OffsetStore:
        return self._offsets

    def check_invariants(self) -> None:
        """Raise AssertionError if any group's bookkeeping is inconsistent."""
        for group in self._groups.values():
            group.check_invariants()
            assert group.state is not GroupState.DEAD, "dead groups are removed"

    def next_deadline_ms(self) -> int | None:
        """The earliest time ``tick`` has work: a session, join or retention deadline."""
        deadlines: list[int] = []
        if self._retention_deadline_ms is not None:
            deadlines.append(self._retention_deadline_ms)
        for group in self._groups.values():
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            deadlines.extend(group.pending_members.values())
            deadlines.extend(
                m.heartbeat_deadline_ms
                for m in group.members.values()
                if not (m.is_awaiting_join or m.is_awaiting_sync)
            )
        return min(deadlines, default=None)

    # --- JoinGroup -------------------------------------------------------------

    def handle_join_group(
        self, handle: RequestHandle, request: JoinGroupRequest, now_ms: int
    ) -> CoordinatorResult:
        """JoinGroup. The reply may be immediate (errors, MEMBER_ID_REQUIRED, no-op
        rejoins) or delayed until the rebalance completes (via this or a later call)."""
        out = _Out()
        self._arm_retention(now_ms)
        error = self._join(handle, request, now_ms, out)
        if error is not None:
            out.replies.append(
                Reply(handle, JoinGroupResponse(error=error, member_id=request.member_id))
            )
        group = self._groups.get(request.group_id)
        if group is not None:
            self._maybe_drop_unused(group)
        return self._result(out)

    def _join(
        self, handle: RequestHandle, req: JoinGroupRequest, now_ms: int, out: _Out
    ) -> ErrorCode | None:
        cfg = self._config
        if not req.group_id:
            return _E.invalid_group_id
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return _E.invalid_session_timeout
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id != UNKNOWN_MEMBER_ID:
                return _E.unknown_member_id
            group = self._groups[req.group_id] = ClassicGroup(
                req.group_id, state_timestamp_ms=now_ms
            )
        if group.state is GroupState.DEAD:
            return _E.coordinator_not_available
        if not group.supports(req.protocol_type, req.protocols):
            return _E.inconsistent_group_protocol
        is_new = req.member_id == UNKNOWN_MEMBER_ID or req.member_id in group.pending_members
        static_known = req.group_instance_id in group.static_members
        if is_new and not static_known and not self._accept_joining_member(group, req.member_id):
            return _E.group_max_size_reached
        if req.member_id == UNKNOWN_MEMBER_ID:
            return self._join_unknown_member(group, handle, req, now_ms, out)
        return self._join_known_member(group, handle, req, now_ms, out)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """``group.max.size`` (Kafka ``acceptJoiningMember``)."""
        limit = self._config.max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            if member is not None and member.is_awaiting_join:
                return True
            return sum(m.is_awaiting_join for m in group.members.values()) < limit
        return member_id in group.members or len(group.members) < limit

    def _join_unknown_member(
        self,
        group: ClassicGroup,
        handle: RequestHandle,
        req: JoinGroupRequest,
        now_ms: int,
        out: _Out,
    ) -> ErrorCode | None:
        new_id = f"{req.group_instance_id or req.client_id}-{self._new_uuid()}"
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None:
                self._replace_static_member(group, old_id, new_id, handle, req, now_ms, out)
                return None
            self._add_member_and_rebalance(group, new_id, handle, req, now_ms, out)
            return None
        if req.require_known_member_id:
            # KIP-394: the member must come back with this id; until then it only
            # counts as pending, and expires after its session timeout.
            group.pending_members[new_id] = now_ms + req.session_timeout_ms
            out.replies.append(
                Reply(handle, JoinGroupResponse(error=_E.member_id_required, member_id=new_id))
            )
            return None
        self._add_member_and_rebalance(group, new_id, handle, req, now_ms, out)
        return None

    def _join_known_member(
        self,
        group: ClassicGroup,
        handle: RequestHandle,
        req: JoinGroupRequest,
        now_ms: int,
        out: _Out,
    ) -> ErrorCode | None:
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            self._add_member_and_rebalance(group, req.member_id, handle, req, now_ms, out)
            return None
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return _E.fenced_instance_id
        member = group.members.get(req.member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return _E.unknown_member_id
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                self._update_member_and_rebalance(group, member, handle, req, now_ms, out)
            case GroupState.COMPLETING_REBALANCE:
                if member.protocols == req.protocols:
                    # A retried JoinGroup: answer with the current generation again.
                    out.replies.append(Reply(handle, self._join_response(group, member)))
                else:
                    self._update_member_and_rebalance(group, member, handle, req, now_ms, out)
            case GroupState.STABLE:
                if member.member_id == group.leader_id or member.protocols != req.protocols:
                    # The leader rejoins to force a rebalance (e.g. metadata changed).
                    self._update_member_and_rebalance(group, member, handle, req, now_ms, out)
                else:
                    out.replies.append(Reply(handle, self._join_response(group, member)))
        return None

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        member_id: str,
        handle: RequestHandle,
        req: JoinGroupRequest,
        now_ms: int,
        out: _Out,
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            join_handle=handle,
            heartbeat_deadline_ms=now_ms + req.session_timeout_ms,
        )
        if group.state is GroupState.PREPARING_REBALANCE:
            group.new_member_added = True
        group.add_member(member)
        self._maybe_prepare_rebalance(group, now_ms, out)
        self._maybe_complete_join(group, now_ms, out)

    def _update_member_and_rebalance(
        self,
        group: ClassicGroup,
        member: Member,
        handle: RequestHandle,
        req: JoinGroupRequest,
        now_ms: int,
        out: _Out,
    ) -> None:
        if member.join_handle is not None and member.join_handle != handle:
            # The client gave up on its earlier JoinGroup; release that handle.
            out.replies.append(
                Reply(
                    member.join_handle,
                    JoinGroupResponse(error=_E.rebalance_in_progress, member_id=member.member_id),
                )
            )
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id = req.client_id
        member.client_host = req.client_host
        member.join_handle = handle
        self._maybe_prepare_rebalance(group, now_ms, out)
        self._maybe_complete_join(group, now_ms, out)

    def _replace_static_member(
        self,
        group: ClassicGroup,
        old_id: str,
        new_id: str,
        handle: RequestHandle,
        req: JoinGroupRequest,
        now_ms: int,
        out: _Out,
    ) -> None:
        """KIP-345: a known group.instance.id rejoins with an unknown member id.

        The old member id is fenced (its parked calls get FENCED_INSTANCE_ID).
        In Stable, if the member's protocols would not change the selected
        protocol or its metadata, there is no rebalance: the new id is persisted
        and the member gets the current generation (the leader gets the member
        list with ``skip_assignment``, KIP-814). Otherwise a rebalance starts.
        """
        old = group.members[old_id]
        new = Member(
            member_id=new_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            heartbeat_deadline_ms=now_ms + req.session_timeout_ms,
        )
        group.replace_static_member(old_id, new)
        if old.join_handle is not None:
            out.replies.append(
                Reply(
                    old.join_handle,
                    JoinGroupResponse(error=_E.fenced_instance_id, member_id=old_id),
                )
            )
        if old.sync_handle is not None:
            out.replies.append(
                Reply(old.sync_handle, SyncGroupResponse(error=_E.fenced_instance_id))
            )
        match group.state:
            case GroupState.STABLE if self._static_rejoin_is_noop(group, old, new):
                self._persist_group(group, out)
                out.replies.append(
                    Reply(handle, self._join_response(group, new, static_rejoin=True))
                )
            case GroupState.PREPARING_REBALANCE:
                new.join_handle = handle
                self._maybe_complete_join(group, now_ms, out)
            case _:
                # Stable with a changed subscription, or CompletingRebalance: the
                # leader may be assigning to the old member id, so rebalance.
                new.join_handle = handle
                self._prepare_rebalance(group, now_ms, out)
                self._maybe_complete_join(group, now_ms, out)

    @staticmethod
    def _static_rejoin_is_noop(group: ClassicGroup, old: Member, new: Member) -> bool:
        protocol = group.protocol_name
        if protocol is None or protocol not in new.protocol_names():
            return False
        if group.select_protocol() != protocol:
            return False
        return old.metadata_for(protocol) == new.metadata_for(protocol)

    def _join_response(
        self, group: ClassicGroup, member: Member, *, static_rejoin: bool = False
    ) -> JoinGroupResponse:
        protocol = group.protocol_name
        is_leader = member.member_id == group.leader_id
        members: tuple[JoinGroupMember, ...] = ()
        if is_leader and protocol is not None:
            members = tuple(
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata_for(protocol))
                for m in group.members.values()
            )
        return JoinGroupResponse(
            error=_E.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=protocol,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members,
            skip_assignment=static_rejoin and is_leader,
        )

    # --- rebalance machinery -------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, now_ms, out)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        """Enter PreparingRebalance and arm the join deadline.

        A new (Empty) group waits ``group.initial.rebalance.delay.ms`` for more
        joiners, extended while members keep arriving, within the rebalance
        timeout (Kafka ``InitialDelayedJoin``); otherwise the rebalance waits
        for every member up to the largest rebalance timeout (KIP-62).
        """
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_handle is not None:
                    out.replies.append(
                        Reply(m.sync_handle, SyncGroupResponse(error=_E.rebalance_in_progress))
                    )
                    m.sync_handle = None
        initial_delay = self._config.initial_rebalance_delay_ms
        initial = group.state is GroupState.EMPTY and initial_delay > 0
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        group.new_member_added = False
        timeout = group.max_rebalance_timeout_ms()
        if initial:
            group.join_deadline_ms = now_ms + initial_delay
            group.initial_join_remaining_ms = max(timeout - initial_delay, 0)
        else:
            group.join_deadline_ms = now_ms + timeout
            group.initial_join_remaining_ms = None

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_join_remaining_ms is None
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms, out)

    def _on_join_deadline(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        remaining = group.initial_join_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay = min(self._config.initial_rebalance_delay_ms, remaining)
            group.join_deadline_ms = now_ms + delay
            group.initial_join_remaining_ms = remaining - delay
            return
        self._complete_join(group, now_ms, out)

    def _complete_join(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        """Members that did not rejoin are removed; the next generation starts."""
        for m in list(group.members.values()):
            if not m.is_awaiting_join:
                group.remove_member(m.member_id)
        group.new_member_added = False
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition_to(GroupState.EMPTY, now_ms)
            self._persist_group(group, out)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        for m in group.members.values():
            assert m.join_handle is not None
            out.replies.append(Reply(m.join_handle, self._join_response(group, m)))
            m.join_handle = None
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms

    def _remove_member_and_update(
        self, group: ClassicGroup, member_id: str, now_ms: int, out: _Out
    ) -> None:
        member = group.remove_member(member_id)
        if member.join_handle is not None:
            out.replies.append(
                Reply(
                    member.join_handle,
                    JoinGroupResponse(error=_E.unknown_member_id, member_id=member_id),
                )
            )
        if member.sync_handle is not None:
            out.replies.append(
                Reply(member.sync_handle, SyncGroupResponse(error=_E.unknown_member_id))
            )
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, out)
        self._maybe_complete_join(group, now_ms, out)

    # --- SyncGroup / Heartbeat / LeaveGroup -----------------------------------------

    def handle_sync_group(
        self, handle: RequestHandle, request: SyncGroupRequest, now_ms: int
    ) -> CoordinatorResult:
        """SyncGroup. Followers park until the leader's SyncGroup brings the assignment;
        the leader's call persists the group and releases every parked follower."""
        out = _Out()
        error = self._sync(handle, request, now_ms, out)
        if error is not None:
            out.replies.append(Reply(handle, SyncGroupResponse(error=error)))
        return self._result(out)

    def _sync(
        self, handle: RequestHandle, req: SyncGroupRequest, now_ms: int, out: _Out
    ) -> ErrorCode | None:
        if not req.group_id:
            return _E.invalid_group_id
        group = self._groups.get(req.group_id)
        if group is None:
            return _E.unknown_member_id
        if group.state is GroupState.DEAD:
            return _E.coordinator_not_available
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return _E.fenced_instance_id
        member = group.members.get(req.member_id)
        if member is None:
            return _E.unknown_member_id
        if req.generation_id != group.generation_id:
            return _E.illegal_generation
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return _E.inconsistent_group_protocol
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                return _E.rebalance_in_progress
            case GroupState.STABLE:
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                out.replies.append(Reply(handle, self._sync_response(group, member)))
            case GroupState.COMPLETING_REBALANCE:
                if member.sync_handle is not None:
                    out.replies.append(
                        Reply(member.sync_handle, SyncGroupResponse(error=_E.rebalance_in_progress))
                    )
                member.sync_handle = handle
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                if member.member_id == group.leader_id:
                    self._complete_sync(group, dict(req.assignments), now_ms, out)
            case _:
                return _E.unknown_member_id
        return None

    def _complete_sync(
        self, group: ClassicGroup, assignments: dict[str, bytes], now_ms: int, out: _Out
    ) -> None:
        # Members the leader left out get an empty assignment (Kafka does the same).
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        group.transition_to(GroupState.STABLE, now_ms)
        self._persist_group(group, out)
        for m in group.members.values():
            if m.sync_handle is not None:
                out.replies.append(Reply(m.sync_handle, self._sync_response(group, m)))
                m.sync_handle = None

    @staticmethod
    def _sync_response(group: ClassicGroup, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(
            error=_E.none,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    def handle_heartbeat(
        self, handle: RequestHandle, request: HeartbeatRequest, now_ms: int
    ) -> CoordinatorResult:
        """Heartbeat: resets the session; REBALANCE_IN_PROGRESS tells the member to rejoin."""
        error = self._heartbeat(request, now_ms)
        return self._result(_Out(replies=[Reply(handle, HeartbeatResponse(error))]))

    def _heartbeat(self, req: HeartbeatRequest, now_ms: int) -> ErrorCode:
        if not req.group_id:
            return _E.invalid_group_id
        group = self._groups.get(req.group_id)
        if group is None:
            return _E.unknown_member_id
        if group.state is GroupState.DEAD:
            return _E.coordinator_not_available
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return _E.fenced_instance_id
        member = group.members.get(req.member_id)
        if member is None:
            return _E.unknown_member_id
        if req.generation_id != group.generation_id:
            return _E.illegal_generation
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return _E.rebalance_in_progress
        return _E.none

    def handle_leave_group(
        self, handle: RequestHandle, request: LeaveGroupRequest, now_ms: int
    ) -> CoordinatorResult:
        """LeaveGroup (v3+ batch, KIP-345): members leave at once and a rebalance starts."""
        out = _Out()
        response = self._leave(request, now_ms, out)
        out.replies.append(Reply(handle, response))
        return self._result(out)

    def _leave(self, req: LeaveGroupRequest, now_ms: int, out: _Out) -> LeaveGroupResponse:
        if not req.group_id:
            return LeaveGroupResponse(error=_E.invalid_group_id)
        group = self._groups.get(req.group_id)
        if group is not None and group.state is GroupState.DEAD:
            return LeaveGroupResponse(error=_E.coordinator_not_available)
        results = []
        for lm in req.members:
            error = _E.unknown_member_id
            if group is not None:
                error = self._leave_one(group, lm.member_id, lm.group_instance_id, now_ms, out)
            results.append(LeftMember(lm.member_id, lm.group_instance_id, error))
        return LeaveGroupResponse(error=_E.none, members=tuple(results))

    def _leave_one(
        self,
        group: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        now_ms: int,
        out: _Out,
    ) -> ErrorCode:
        if instance_id is not None:
            registered = group.static_members.get(instance_id)
            if registered is None:
                return _E.unknown_member_id
            if member_id != UNKNOWN_MEMBER_ID and member_id != registered:
                return _E.fenced_instance_id
            self._remove_member_and_update(group, registered, now_ms, out)
            return _E.none
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(group, now_ms, out)
            return _E.none
        if member_id not in group.members:
            return _E.unknown_member_id
        self._remove_member_and_update(group, member_id, now_ms, out)
        return _E.none

    # --- timers ------------------------------------------------------------------------

    def tick(self, now_ms: int) -> CoordinatorResult:
        """Expire sessions and pending members, complete due joins, expire offsets."""
        out = _Out()
        self._arm_retention(now_ms)
        for group in list(self._groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now_ms:
                    del group.pending_members[member_id]
                    self._maybe_complete_join(group, now_ms, out)
            if group.group_id in self._groups:
                self._maybe_drop_unused(group)
            if group.group_id not in self._groups:
                continue
            for m in list(group.members.values()):
                if m.member_id not in group.members:
                    continue
                if (
                    not (m.is_awaiting_join or m.is_awaiting_sync)
                    and m.heartbeat_deadline_ms <= now_ms
                ):
                    self._remove_member_and_update(group, m.member_id, now_ms, out)
            if (
                group.state is GroupState.PREPARING_REBALANCE
                and group.join_deadline_ms is not None
                and group.join_deadline_ms <= now_ms
            ):
                self._on_join_deadline(group, now_ms, out)
        if self._retention_deadline_ms is not None and self._retention_deadline_ms <= now_ms:
            self._expire_offsets(now_ms, out)
            self._retention_deadline_ms = now_ms + self._config.offsets_retention_check_interval_ms
        return self._result(out)

    def _arm_retention(self, now_ms: int) -> None:
        if self._retention_deadline_ms is None:
            self._retention_deadline_ms = now_ms + self._config.offsets_retention_check_interval_ms

    def _expire_offsets(self, now_ms: int, out: _Out) -> None:
        """``offsets.retention.minutes`` (KIP-211).

        An Empty group's offsets expire a retention period after it became
        Empty; a group without a protocol type (simple commits) expires each
        offset a retention period after its commit; a consumer group with
        members expires offsets of topics no member subscribes to. Offsets with
        a pending transactional commit never expire. An Empty group left with
        no offsets is deleted (group tombstone).
        """
        retention = self._config.offsets_retention_ms
        for group_id in sorted(set(self._offsets.group_ids()) | set(self._groups)):
            group = self._groups.get(group_id)
            subscribed: frozenset[str] | None = None
            if group is not None and group.state is not GroupState.EMPTY:
                subscribed = group.subscribed_topics()
                if subscribed is None:
                    continue
            for tp, value in sorted(self._offsets.committed(group_id).items()):
                if self._offsets.has_pending(group_id, tp):
                    continue
                if subscribed is not None:
                    expired = (
                        tp.topic not in subscribed
                        and value.commit_timestamp_ms + retention <= now_ms
                    )
                elif group is not None and group.protocol_type is not None:
                    expired = group.state_timestamp_ms + retention <= now_ms
                else:
                    expired = value.commit_timestamp_ms + retention <= now_ms
                if expired:
                    self._emit_offset(out, group_id, tp, None)
            if (
                group is not None
                and group.state is GroupState.EMPTY
                and not self._offsets.has_offsets(group_id)
                and not self._offsets.has_pending(group_id)
            ):
                self._delete_group(group, now_ms, out)

    # --- offsets ---------------------------------------------------------------------

    def handle_offset_commit(
        self, handle: RequestHandle, request: OffsetCommitRequest, now_ms: int
    ) -> CoordinatorResult:
        """OffsetCommit: a member of the current generation, or a simple consumer
        (generation -1) of a group with no members."""
        out = _Out()
        self._arm_retention(now_ms)
        error = self._validate_commit(request, now_ms)
        results = self._commit(request.group_id, request.partitions, error, now_ms, out, None)
        out.replies.append(Reply(handle, OffsetCommitResponse(results)))
        return self._result(out)

    def _validate_commit(self, req: OffsetCommitRequest, now_ms: int) -> ErrorCode:
        group = self._groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                # Not a simple consumer, and the group is gone: its generation is stale.
                return _E.illegal_generation
            self._groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
            return _E.none
        if group.state is GroupState.DEAD:
            return _E.coordinator_not_available
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return _E.fenced_instance_id
        if req.generation_id < 0 and group.state is GroupState.EMPTY:
            return _E.none
        if group.state is GroupState.COMPLETING_REBALANCE:
            return _E.rebalance_in_progress
        member = group.members.get(req.member_id)
        if member is None:
            return _E.unknown_member_id
        if req.generation_id != group.generation_id:
            return _E.illegal_generation
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return _E.none

    def handle_txn_offset_commit(
        self, handle: RequestHandle, request: TxnOffsetCommitRequest, now_ms: int
    ) -> CoordinatorResult:
        """TxnOffsetCommit: offsets wait, pending, for the transaction's marker.

        The result's ``txn`` says the records must be written as a
        transactional batch of that producer. Producer-epoch fencing is the
        partition's producer state's job (the append fails with
        PRODUCER_FENCED / INVALID_PRODUCER_EPOCH), not the coordinator's.
        """
        out = _Out()
        self._arm_retention(now_ms)
        error = self._validate_txn_commit(request, now_ms)
        results = self._commit(
            request.group_id, request.partitions, error, now_ms, out, request.producer_id
        )
        out.replies.append(Reply(handle, OffsetCommitResponse(results)))
        return self._result(out, TxnProducer(request.producer_id, request.producer_epoch))

    def _validate_txn_commit(self, req: TxnOffsetCommitRequest, now_ms: int) -> ErrorCode:
        group = self._groups.get(req.group_id)
        if group is None:
            group = self._groups[req.group_id] = ClassicGroup(
                req.group_id, state_timestamp_ms=now_ms
            )
        if group.state is GroupState.DEAD:
            return _E.coordinator_not_available
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return _E.fenced_instance_id
        if req.member_id != UNKNOWN_MEMBER_ID and req.member_id not in group.members:
            return _E.unknown_member_id
        if req.generation_id >= 0 and req.generation_id != group.generation_id:
            return _E.illegal_generation
        return _E.none

    def _commit(
        self,
        group_id: str,
        partitions: tuple[OffsetCommitPartition, ...],
        error: ErrorCode,
        now_ms: int,
        out: _Out,
        producer_id: int | None,
    ) -> tuple[PartitionResult, ...]:
        results = []
        for p in partitions:
            metadata = p.metadata or ""
            code = error
            if (
                code is _E.none
                and len(metadata.encode("utf-8")) > self._config.offset_metadata_max_bytes
            ):
                code = _E.offset_metadata_too_large
            if code is _E.none:
                value = OffsetCommitValue(p.offset, p.leader_epoch, metadata, now_ms)
                self._emit_offset(
                    out, group_id, TopicPartition(p.topic, p.partition), value, producer_id
                )
            results.append(PartitionResult(p.topic, p.partition, code))
        group = self._groups.get(group_id)
        if group is not None:
            self._maybe_drop_unused(group)
        return tuple(results)

    def handle_offset_fetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        """OffsetFetch: committed offsets (-1 where none); with ``require_stable``,
        UNSTABLE_OFFSET_COMMIT for partitions with a pending transactional commit."""
        committed = self._offsets.committed(request.group_id)
        wanted = sorted(committed) if request.partitions is None else list(request.partitions)
        fetched = []
        for tp in wanted:
            if request.require_stable and self._offsets.has_pending(request.group_id, tp):
                fetched.append(
                    FetchedOffset(tp.topic, tp.partition, -1, -1, "", _E.unstable_offset_commit)
                )
                continue
            v = committed.get(tp)
            if v is None:
                fetched.append(FetchedOffset(tp.topic, tp.partition, -1, -1, "", _E.none))
            else:
                fetched.append(
                    FetchedOffset(
                        tp.topic, tp.partition, v.offset, v.leader_epoch, v.metadata, _E.none
                    )
                )
        return OffsetFetchResponse(request.group_id, _E.none, tuple(fetched))

    def handle_offset_delete(
        self, handle: RequestHandle, request: OffsetDeleteRequest, now_ms: int
    ) -> CoordinatorResult:
        """OffsetDelete (KIP-496): not for topics the group's members subscribe to."""
        out = _Out()
        response = self._offset_delete(request, out)
        out.replies.append(Reply(handle, response))
        return self._result(out)

    def _offset_delete(self, req: OffsetDeleteRequest, out: _Out) -> OffsetDeleteResponse:
        group = self._groups.get(req.group_id)
        if group is None or group.state is GroupState.DEAD:
            return OffsetDeleteResponse(error=_E.group_id_not_found)
        subscribed: frozenset[str] = frozenset()
        if group.state is not GroupState.EMPTY:
            topics = group.subscribed_topics()
            if topics is None:
                return OffsetDeleteResponse(error=_E.non_empty_group)
            subscribed = topics
        results = []
        for tp in req.partitions:
            if tp.topic in subscribed:
                results.append(
                    PartitionResult(tp.topic, tp.partition, _E.group_subscribed_to_topic)
                )
                continue
            if self._offsets.get(req.group_id, tp) is not None:
                self._emit_offset(out, req.group_id, tp, None)
            results.append(PartitionResult(tp.topic, tp.partition, _E.none))
        return OffsetDeleteResponse(error=_E.none, partitions=tuple(results))

    # --- administration ---------------------------------------------------------------

    def handle_list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        """ListGroups with the KIP-518 state filter and KIP-848 type filter."""
        states = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        if types and "classic" not in types:
            return ListGroupsResponse(error=_E.none)
        listed = tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for gid, g in sorted(self._groups.items())
            if not states or g.state.value.lower() in states
        )
        return ListGroupsResponse(error=_E.none, groups=listed)

    def handle_describe_groups(self, group_ids: tuple[str, ...]) -> tuple[GroupDescription, ...]:
        """DescribeGroups: member metadata and assignments are shown only when Stable."""
        return tuple(self._describe(gid) for gid in group_ids)

    def _describe(self, group_id: str) -> GroupDescription:
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, _E.none, GroupState.DEAD.value, "", "")
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name if stable else None
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(protocol) if protocol is not None else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id=group_id,
            error=_E.none,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol=protocol or "",
            members=members,
        )

    def handle_delete_groups(
        self, handle: RequestHandle, group_ids: tuple[str, ...], now_ms: int
    ) -> CoordinatorResult:
        """DeleteGroups: only Empty groups; writes tombstones for offsets and metadata."""
        out = _Out()
        results = []
        for gid in group_ids:
            group = self._groups.get(gid)
            if group is None or group.state is GroupState.DEAD:
                error = _E.group_id_not_found
            elif group.state is not GroupState.EMPTY:
                error = _E.non_empty_group
            else:
                self._delete_group(group, now_ms, out)
                error = _E.none
            results.append(DeleteGroupsResult(gid, error))
        out.replies.append(Reply(handle, DeleteGroupsResponse(tuple(results))))
        return self._result(out)

    def _delete_group(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        for tp in sorted(self._offsets.committed(group.group_id)):
            self._emit_offset(out, group.group_id, tp, None)
        group.transition_to(GroupState.DEAD, now_ms)
        del self._groups[group.group_id]
        out.records.append(OffsetsRecord(encode_key(GroupMetadataKey(group.group_id)), None))

    # --- unload ------------------------------------------------------------------------

    def unload(self) -> tuple[Reply, ...]:
        """The shard's partition moved away: answer every parked call NOT_COORDINATOR
        so clients look the coordinator up again. The shard must not be used after."""
        replies = []
        for group in self._groups.values():
            for m in group.members.values():
                if m.join_handle is not None:
                    replies.append(
                        Reply(
                            m.join_handle,
                            JoinGroupResponse(error=_E.not_coordinator, member_id=m.member_id),
                        )
                    )
                    m.join_handle = None
                if m.sync_handle is not None:
                    replies.append(
                        Reply(m.sync_handle, SyncGroupResponse(error=_E.not_coordinator))
                    )
                    m.sync_handle = None
        self._groups.clear()
        return tuple(replies)

    def parked_handles(self) -> frozenset[RequestHandle]:
        """Handles still waiting for a delayed reply."""
        handles: set[RequestHandle] = set()
        for group in self._groups.values():
            for m in group.members.values():
                if m.join_handle is not None:
                    handles.add(m.join_handle)
                if m.sync_handle is not None:
                    handles.add(m.sync_handle)
        return frozenset(handles)

    # --- replay (coordinator failover) -------------------------------------------------

    def replay_record(
        self, key: bytes | None, value: bytes | None, *, producer_id: int | None = None
    ) -> None:
        """Apply one ``__consumer_offsets`` record, in log order.

        ``producer_id`` is set for records of a transactional batch: their
        offsets stay pending until ``replay_txn_marker``. Raises
        CorruptOffsetsRecordError for a record that does not parse: the
        partition is corrupt (tier 3).
        """
        if key is None:
            return
        parsed = decode_key(key)
        if isinstance(parsed, OffsetCommitKey):
            offset_value = None if value is None else decode_offset_commit_value(value)
            tp = TopicPartition(parsed.topic, parsed.partition)
            self._apply_offset(parsed.group_id, tp, offset_value, producer_id)
        elif isinstance(parsed, GroupMetadataKey):
            if value is None:
                self._groups.pop(parsed.group_id, None)
            else:
                self._load_group(parsed.group_id, decode_group_metadata_value(value))

    def replay_txn_marker(self, producer_id: int, committed: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` reached this partition.

        Called on replay and, live, by the broker once the marker written by
        WriteTxnMarkers is appended: COMMIT materialises the producer's
        pending offsets, ABORT drops them.
        """
        for group_id in self._offsets.complete_txn(producer_id, committed):
            if committed and group_id not in self._groups:
                self._groups[group_id] = ClassicGroup(group_id)

    def load_batch(self, batch: bytes) -> None:
        """Replay every record of one v2 batch read from the partition."""
        header = parse_header(batch)
        for record in decode_records(batch):
            if header.is_control:
                _, kind = parse_control_record_key(record.key)
                if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    self.replay_txn_marker(header.producer_id, kind is ControlRecordType.COMMIT)
                continue
            pid = header.producer_id if header.is_transactional else None
            self.replay_record(record.key, record.value, producer_id=pid)

    def complete_load(self, now_ms: int) -> int | None:
        """After replay: start every loaded member's session clock. Returns the next deadline."""
        for group in self._groups.values():
            for m in group.members.values():
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        self._arm_retention(now_ms)
        return self.next_deadline_ms()

    def _load_group(self, group_id: str, value: GroupMetadataValue) -> None:
        group = ClassicGroup(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=value.current_state_timestamp_ms,
            generation_id=value.generation,
            protocol_type=value.protocol_type,
            protocol_name=value.protocol,
            leader_id=value.leader,
            last_persisted=value,
        )
        for mv in value.members:
            protocols = (JoinProtocol(value.protocol or "", mv.subscription),)
            member = Member(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                session_timeout_ms=mv.session_timeout_ms,
                rebalance_timeout_ms=mv.rebalance_timeout_ms,
                protocol_type=value.protocol_type or "",
                protocols=protocols,
                assignment=mv.assignment,
            )
            group.members[mv.member_id] = member
            if mv.group_instance_id is not None:
                group.static_members[mv.group_instance_id] = mv.member_id
        self._groups[group_id] = group

    # --- helpers -----------------------------------------------------------------------

    def _emit_offset(
        self,
        out: _Out,
        group_id: str,
        tp: TopicPartition,
        value: OffsetCommitValue | None,
        producer_id: int | None = None,
    ) -> None:
        key = encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition))
        out.records.append(
            OffsetsRecord(key, None if value is None else encode_offset_commit_value(value))
        )
        self._apply_offset(group_id, tp, value, producer_id)

    def _apply_offset(
        self,
        group_id: str,
        tp: TopicPartition,
        value: OffsetCommitValue | None,
        producer_id: int | None,
    ) -> None:
        # Live commands and replay share this path, so ``seq`` follows log order.
        seq = self._offsets.next_seq()
        committed = (
            None
            if value is None
            else CommittedOffset(
                value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms, seq
            )
        )
        if producer_id is not None:
            self._offsets.put_pending(producer_id, group_id, tp, committed)
            return
        self._offsets.put(group_id, tp, committed)
        if committed is not None and group_id not in self._groups:
            self._groups[group_id] = ClassicGroup(group_id)

    def _persist_group(self, group: ClassicGroup, out: _Out) -> None:
        value = group.to_metadata_value()
        group.last_persisted = value
        out.records.append(
            OffsetsRecord(
                encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value)
            )
        )

    def _maybe_drop_unused(self, group: ClassicGroup) -> None:
        """Forget a group that a failed first JoinGroup created and nothing refers to."""
        if (
            group.state is GroupState.EMPTY
            and not group.members
            and not group.pending_members
            and group.last_persisted is None
            and not self._offsets.has_offsets(group.group_id)
            and not self._offsets.has_pending(group.group_id)
        ):
            del self._groups[group.group_id]

    def _new_uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _result(self, out: _Out, txn: TxnProducer | None = None) -> CoordinatorResult:
        return CoordinatorResult(
            records=tuple(out.records),
            replies=tuple(out.replies),
            next_deadline_ms=self.next_deadline_ms(),
            txn=txn if out.records else None,
        )
