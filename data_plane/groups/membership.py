"""Classic-protocol membership commands of a shard: JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, with rebalances (KIP-62 timeouts, KIP-394
MEMBER_ID_REQUIRED, KIP-345 static membership)."""

from __future__ import annotations

from raftlog.net.errors import ErrorCode

from .consumer_group import ConsumerGroup
from .group import ClassicGroup, GroupState, Member
from .model import (
    UNKNOWN_MEMBER_ID,
    CoordinatorResult,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    Reply,
    RequestHandle,
    SyncGroupRequest,
    SyncGroupResponse,
)
from .shard_state import _E, ShardState, _Out


class MembershipCommands(ShardState):
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup and the rebalance they drive."""

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
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None:
            if consumer.members:
                # A KIP-848 group with members: the member joins it as a
                # classic member (`migration`).
                return self._join_consumer_group(consumer, handle, req, now_ms, out)
            # An empty consumer group becomes a classic one; its offsets stay.
            self._drop_consumer_group_records(consumer, out)
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

    # Classic requests for a KIP-848 consumer group with members; overridden by
    # `migration.MigrationCommands` (online migration), which serves them.

    def _join_consumer_group(self, group: ConsumerGroup, handle: RequestHandle,
                             req: JoinGroupRequest, now_ms: int, out: _Out) -> ErrorCode | None:
        return _E.inconsistent_group_protocol

    def _sync_consumer_group(self, group: ConsumerGroup, handle: RequestHandle,
                             req: SyncGroupRequest, now_ms: int, out: _Out) -> ErrorCode | None:
        return _E.unknown_member_id

    def _heartbeat_consumer_group(self, group: ConsumerGroup, req: HeartbeatRequest,
                                  now_ms: int) -> ErrorCode:
        return _E.unknown_member_id

    def _leave_consumer_group(self, group: ConsumerGroup, req: LeaveGroupRequest, now_ms: int,
                              out: _Out) -> LeaveGroupResponse:
        return LeaveGroupResponse(error=_E.none, members=tuple(
            LeftMember(m.member_id, m.group_instance_id, _E.unknown_member_id)
            for m in req.members))

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
        group.await_sync_from_all(now_ms + group.max_rebalance_timeout_ms())

    def _on_sync_deadline(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        """Members that joined this generation but sent no SyncGroup within the
        rebalance timeout are removed, and the group rebalances without them
        (Kafka's pending-sync expiry)."""
        missing = sorted(group.pending_sync_members)
        group.clear_pending_sync()
        for member_id in missing:
            if member_id in group.members:
                self._remove_member_and_update(group, member_id, now_ms, out)

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

    def _classic_member_of_generation(
        self, req: SyncGroupRequest | HeartbeatRequest
    ) -> tuple[ClassicGroup, Member] | ErrorCode:
        """The classic group and member a SyncGroup or Heartbeat names, or the
        error Kafka answers: no such group or member, a dead group, a fenced
        static member, another generation."""
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
        return group, member

    def _sync(
        self, handle: RequestHandle, req: SyncGroupRequest, now_ms: int, out: _Out
    ) -> ErrorCode | None:
        if not req.group_id:
            return _E.invalid_group_id
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None and consumer.members:
            return self._sync_consumer_group(consumer, handle, req, now_ms, out)
        found = self._classic_member_of_generation(req)
        if isinstance(found, ErrorCode):
            return found
        group, member = found
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return _E.inconsistent_group_protocol
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                return _E.rebalance_in_progress
            case GroupState.STABLE:
                group.synced(member.member_id)
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                out.replies.append(Reply(handle, self._sync_response(group, member)))
            case GroupState.COMPLETING_REBALANCE:
                group.synced(member.member_id)
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
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None and consumer.members:
            return self._heartbeat_consumer_group(consumer, req, now_ms)
        found = self._classic_member_of_generation(req)
        if isinstance(found, ErrorCode):
            return found
        group, member = found
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
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None and consumer.members:
            return self._leave_consumer_group(consumer, req, now_ms, out)
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

