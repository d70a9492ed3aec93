"""``GroupCoordinatorShard``: the group coordinator for one offsets partition.

One shard per owned ``__consumer_offsets`` partition (``partitioning.py``
picks it). It is sans-I/O (STYLE.md section 1): every command carries
``now_ms``, nothing reads a clock, and member ids come from an injected
``random.Random``. Both protocols: the classic one (JoinGroup/SyncGroup/
Heartbeat, KIP-62 session vs rebalance timeouts, KIP-394 MEMBER_ID_REQUIRED,
KIP-345 static membership; ``membership``) and KIP-848's consumer protocol
(ConsumerGroupHeartbeat, server-side assignment; ``consumer_commands``). A
group id names one group of one protocol at a time.

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

from raftlog.records import (
    ControlRecordType,
    decode_records,
    parse_control_record_key,
    parse_header,
)

from .consumer_records import decode_consumer_key, decode_consumer_value
from .group import ClassicGroup, GroupState, Member
from .migration import MigrationCommands
from .model import (
    CoordinatorResult,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedMember,
    GroupDescription,
    JoinGroupResponse,
    JoinProtocol,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    Reply,
    RequestHandle,
    SyncGroupResponse,
    TopicPartition,
)
from .offset_commands import OffsetCommands
from .records import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from .shard_state import _E, ShardState, _Out

__all__ = ("GroupCoordinatorShard", "ShardState")


class GroupCoordinatorShard(MigrationCommands, OffsetCommands):
    """Groups and offsets of one ``__consumer_offsets`` partition.

    Write commands (``handle_join_group`` ... ``tick``) return a
    ``CoordinatorResult``; reads (``handle_offset_fetch``,
    ``handle_list_groups``, ``handle_describe_groups``) answer directly.
    Bad client input is answered with a Kafka error code; a broken internal
    invariant raises (STYLE.md section 8).
    """

    def tick(self, now_ms: int) -> CoordinatorResult:
        """Expire sessions, pending members and pending syncs, complete due
        joins, expire offsets."""
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
            if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
                self._on_sync_deadline(group, now_ms, out)
            if (
                group.state is GroupState.PREPARING_REBALANCE
                and group.join_deadline_ms is not None
                and group.join_deadline_ms <= now_ms
            ):
                self._on_join_deadline(group, now_ms, out)
        self._tick_consumer_groups(now_ms, out)
        if self._retention_deadline_ms is not None and self._retention_deadline_ms <= now_ms:
            self._expire_offsets(now_ms, out)
            self._retention_deadline_ms = now_ms + self._config.offsets_retention_check_interval_ms
        return self._result(out)

    def handle_list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        """ListGroups with the KIP-518 state filter and KIP-848 type filter."""
        states = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        listed: list[ListedGroup] = []
        if not types or "classic" in types:
            listed.extend(
                ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
                for gid, g in self._groups.items()
                if not states or g.state.value.lower() in states
            )
        if not types or "consumer" in types:
            listed.extend(
                ListedGroup(g.group_id, "consumer", g.state.value, group_type="consumer")
                for g in self._consumer_groups.values()
                if not states or g.state.value.lower() in states
            )
        return ListGroupsResponse(error=_E.none, groups=tuple(sorted(listed, key=lambda g: g.group_id)))

    def handle_describe_groups(self, group_ids: tuple[str, ...]) -> tuple[GroupDescription, ...]:
        """DescribeGroups: member metadata and assignments are shown only when Stable."""
        return tuple(self._describe(gid) for gid in group_ids)

    def _describe(self, group_id: str) -> GroupDescription:
        group = self._groups.get(group_id)
        if group_id in self._consumer_groups:
            # Kafka: DescribeGroups is the classic API; ConsumerGroupDescribe shows these.
            return GroupDescription(group_id, _E.group_id_not_found, GroupState.DEAD.value, "", "",
                                    error_message=f"Group {group_id} is not a classic group.")
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
            consumer = self._consumer_groups.get(gid)
            if consumer is not None:
                if consumer.members:
                    error = _E.non_empty_group
                else:
                    self._delete_consumer_group(consumer, out)
                    error = _E.none
                results.append(DeleteGroupsResult(gid, error))
                continue
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
        consumer_key = decode_consumer_key(key)
        if consumer_key is not None:
            consumer_value = None if value is None else decode_consumer_value(consumer_key, value)
            if value is None or consumer_value is not None:
                self._apply_consumer(consumer_key, consumer_value)
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
            if committed:
                self._ensure_group_for_offsets(group_id)

    def load_batch(self, batch: bytes) -> list[str]:
        """Replay every record of one v2 batch read from the partition.

        A record that does not parse is skipped, as Kafka's loader skips keys
        it does not know, and why is returned for the shell to log: it
        cannot be a coordinator's own record (clients could write there
        before produce to internal topics was refused), and a broker that
        stopped at it would stop again at every restart."""
        skipped: list[str] = []
        header = parse_header(batch)
        for record in decode_records(batch):
            if header.is_control:
                _, kind = parse_control_record_key(record.key)
                if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    self.replay_txn_marker(header.producer_id, kind is ControlRecordType.COMMIT)
                continue
            pid = header.producer_id if header.is_transactional else None
            try:
                self.replay_record(record.key, record.value, producer_id=pid)
            except CorruptOffsetsRecordError as e:
                skipped.append(f"offset {record.offset}: {e}")
        return skipped

    def complete_load(self, now_ms: int) -> int | None:
        """After replay: start every loaded member's session clock. Returns the next deadline."""
        for group in self._groups.values():
            for m in group.members.values():
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        self._start_consumer_sessions(now_ms)
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

