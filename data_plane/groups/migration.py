"""KIP-848 online migration between classic groups and consumer groups
(Kafka's ``group.consumer.migration.policy``, ``bidirectional`` by default
since Kafka 4.0), so an application can roll its consumers from
``group.protocol=classic`` to ``consumer`` (and back) without stopping the
group.

- **Upgrade.** A consumer-protocol member joining a classic group that has
  members converts it: each classic member becomes a consumer-group member
  that still speaks the classic protocol (`ConsumerMember.classic`), keeping
  its generation as its member epoch, its subscription (decoded from its
  JoinGroup metadata) and its assignment (decoded from its SyncGroup bytes)
  as both current and target assignment. Then the joiner goes through the
  ordinary heartbeat, which bumps the group epoch and assigns.
- **Classic members in a consumer group.** The coordinator assigns; a
  classic member's JoinGroup is answered at once as a follower's (no
  leader, no member list), with its member epoch as the generation; its
  SyncGroup gets its current assignment; its Heartbeat answers
  REBALANCE_IN_PROGRESS while it is behind the group or has partitions to
  give up or to take, so it rejoins and reconciles one step (`next_assignment`).
  Its JoinGroup metadata's owned partitions count as what it holds.
- **Downgrade.** When members leave or are fenced and only classic members
  remain, the group is written back as a classic group at the group epoch,
  each member assigned what it holds (Kafka writes its target; see
  `_downgrade`), and a rebalance starts.

Conversions write the same records Kafka's coordinator does, in its order,
and apply them as they are written; a group that fails a check is left as
it was (nothing is written before the last check). Messages follow Kafka's.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable

from .consumer_commands import (
    ConsumerGroupCommands,
    _as_pairs,
    _metadata_hash,
    _Refused,
)
from .consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    freeze_assignment,
)
from .consumer_model import ConsumerGroupHeartbeatRequest, TopicsView
from .consumer_protocol import (
    MalformedConsumerProtocolError,
    TopicPartitionsByName,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from .consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from .group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from .membership import MembershipCommands
from .model import (
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinProtocol,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    OffsetsRecord,
    Reply,
    RequestHandle,
    SyncGroupRequest,
    SyncGroupResponse,
)
from .records import GroupMetadataKey, encode_key
from .shard_state import _E, _Out

__all__ = ("MigrationCommands",)


class MigrationCommands(MembershipCommands, ConsumerGroupCommands):
    """Online upgrade and downgrade, and classic members in consumer groups."""

    # --- upgrade ------------------------------------------------------------------------

    def _upgrade_classic_group(self, classic: ClassicGroup, r: ConsumerGroupHeartbeatRequest,
                               topics: TopicsView, now_ms: int, out: _Out) -> ConsumerGroup:
        gid = classic.group_id
        cfg = self._config

        def refuse(why: str) -> _Refused:
            return _Refused(_E.group_id_not_found,
                            f"Cannot upgrade classic group {gid} to consumer group because {why}.")

        if not cfg.online_upgrade:
            raise refuse("the online upgrade is disabled")
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise refuse("it is not using the consumer embedded protocol")
        if len(classic.members) > cfg.consumer_max_size:
            raise refuse("its size exceeds the consumer group maximum size")
        # What the joiner's own heartbeat would refuse once converted: refused
        # now, before anything is written.
        if len(classic.members) >= cfg.consumer_max_size:
            raise _Refused(_E.group_max_size_reached,
                           f"The consumer group has reached its maximum capacity of "
                           f"{cfg.consumer_max_size} members.")
        if r.instance_id is not None and r.instance_id in classic.static_members:
            holder = classic.static_members[r.instance_id]
            raise _Refused(_E.unreleased_instance_id,
                           f"Static member {holder} with instance id {r.instance_id} "
                           "is not released yet.")
        converted: list[ConsumerMember] = []
        for m in classic.members.values():
            try:
                # The group's protocol, or, for a member that joined a
                # rebalance of a group whose last protocol it does not offer,
                # its own first one (each carries its subscription). Kafka
                # fails the upgrade there until the rebalance ends.
                protocol = classic.protocol_name or m.protocols[0].name
                if protocol not in m.protocol_names():
                    protocol = m.protocols[0].name
                subscription = decode_subscription(m.metadata_for(protocol))
                partitions, user_data = decode_assignment(m.assignment)
            except (MalformedConsumerProtocolError, KeyError, IndexError):
                raise refuse("the embedded consumer protocol is malformed") from None
            if user_data:
                raise refuse("an unsupported custom assignor is in use. Please refer to the "
                             "documentation or switch to a default assignor before "
                             "re-attempting the upgrade")
            member = ConsumerMember(
                member_id=m.member_id, instance_id=m.group_instance_id,
                rack_id=subscription.rack_id, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=subscription.topics,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                member_epoch=classic.generation_id,
                previous_member_epoch=classic.generation_id,
                assigned=_by_id(partitions, topics),
                classic=ClassicMemberMetadata(
                    m.session_timeout_ms, tuple((p.name, p.metadata) for p in m.protocols)))
            converted.append(member)
        # Nothing is refused from here on: write, in Kafka's order.
        for m in classic.members.values():
            # Parked JoinGroup and SyncGroup calls rejoin the new group.
            if m.join_handle is not None:
                out.replies.append(Reply(m.join_handle, JoinGroupResponse(
                    error=_E.rebalance_in_progress, member_id=m.member_id)))
                m.join_handle = None
            if m.sync_handle is not None:
                out.replies.append(Reply(m.sync_handle,
                                         SyncGroupResponse(error=_E.rebalance_in_progress)))
                m.sync_handle = None
        self.group_migrations["upgrade"] += 1
        out.records.append(OffsetsRecord(encode_key(GroupMetadataKey(gid)), None))
        del self._groups[gid]
        group = self._consumer_groups[gid] = ConsumerGroup(gid)
        epoch = classic.generation_id
        for member in converted:
            self._write_member_metadata(out, gid, member)
        self._write_consumer(out, ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(
            epoch, _metadata_hash(self._subscribed_metadata(group, topics).values())))
        for member in converted:
            self._write_consumer(out, ConsumerGroupTargetAssignmentMemberKey(gid, member.member_id),
                                 ConsumerGroupTargetAssignmentMemberValue(
                                     _as_pairs(member.assigned)))
        self._write_consumer(out, ConsumerGroupTargetAssignmentMetadataKey(gid),
                             ConsumerGroupTargetAssignmentMetadataValue(epoch))
        for member in converted:
            self._write_consumer(
                out, ConsumerGroupCurrentMemberAssignmentKey(gid, member.member_id),
                ConsumerGroupCurrentMemberAssignmentValue(
                    member_epoch=epoch, previous_member_epoch=epoch,
                    state=MemberState.STABLE.value,
                    assigned_partitions=_as_pairs(member.assigned),
                    partitions_pending_revocation=()))
            assert member.classic is not None
            group.session_deadlines_ms[member.member_id] = now_ms + member.classic.session_timeout_ms
        return group

    # --- classic members in a consumer group ------------------------------------------

    def _join_consumer_group(self, group: ConsumerGroup, handle: RequestHandle,
                             req: JoinGroupRequest, now_ms: int, out: _Out) -> _E | None:
        cfg = self._config
        topics = self.topics_source()
        member_id = req.member_id
        replacing: ConsumerMember | None = None
        instance_id = req.group_instance_id
        if instance_id is not None:
            holder = group.static_members.get(instance_id)
            if member_id == UNKNOWN_MEMBER_ID:
                member_id = f"{instance_id}-{self._new_uuid()}"
                if holder is not None:
                    replacing = group.members[holder]
            elif holder is None:
                return _E.unknown_member_id
            elif holder != member_id:
                return _E.fenced_instance_id
        elif member_id == UNKNOWN_MEMBER_ID:
            member_id = f"{req.client_id}-{self._new_uuid()}"
        existing = group.members.get(member_id)
        if existing is None and replacing is None \
                and len(group.members) >= cfg.consumer_max_size:
            return _E.group_max_size_reached
        if not self._classic_protocols_fit(group, member_id, req):
            return _E.inconsistent_group_protocol
        if req.member_id == UNKNOWN_MEMBER_ID and instance_id is None \
                and req.require_known_member_id:
            # KIP-394: come back with this id (nothing is registered meanwhile).
            out.replies.append(Reply(handle, JoinGroupResponse(
                error=_E.member_id_required, member_id=member_id)))
            return None
        try:
            subscription = decode_subscription(req.protocols[0].metadata)
        except MalformedConsumerProtocolError:
            return _E.inconsistent_group_protocol
        base = existing or replacing or ConsumerMember(member_id)
        updated = ConsumerMember(
            member_id=member_id, instance_id=instance_id, rack_id=subscription.rack_id,
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=subscription.topics, subscribed_topic_regex=None,
            server_assignor=base.server_assignor,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            classic=ClassicMemberMetadata(
                req.session_timeout_ms, tuple((p.name, p.metadata) for p in req.protocols)))
        subscription_changed = (updated.subscribed_topic_names != base.subscribed_topic_names
                                or base.subscribed_topic_regex is not None)
        member, _ = self._update_and_reconcile(
            out, group, existing, replacing, updated, subscription_changed, topics,
            _by_id(subscription.owned_partitions, topics))
        group.session_deadlines_ms[member_id] = now_ms + req.session_timeout_ms
        # The SyncGroup must follow within the rebalance timeout.
        group.classic_deadlines_ms[member_id] = now_ms + max(0, req.rebalance_timeout_ms)
        group.rebalance_deadlines_ms.pop(member_id, None)
        out.replies.append(Reply(handle, JoinGroupResponse(
            error=_E.none, generation_id=member.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=req.protocols[0].name,
            leader="", member_id=member_id)))
        return None

    @staticmethod
    def _classic_protocols_fit(group: ConsumerGroup, member_id: str,
                               req: JoinGroupRequest) -> bool:
        """The consumer protocol type, and a protocol every other classic
        member supports (Kafka's ``supportsClassicProtocols``)."""
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
            return False
        names = {p.name for p in req.protocols}
        for m in group.members.values():
            if m.classic is not None and m.member_id != member_id:
                names &= {name for name, _ in m.classic.supported_protocols}
        return bool(names)

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation_id: int) -> tuple[_E, ConsumerMember | None]:
        """The classic member a SyncGroup or Heartbeat names, at its member
        epoch (the generation it was given), or the error to answer."""
        if instance_id is not None:
            holder = group.static_members.get(instance_id)
            if holder is None:
                return _E.unknown_member_id, None
            if holder != member_id:
                return _E.fenced_instance_id, None
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            # Not a member, or one that speaks the consumer protocol.
            return _E.unknown_member_id, None
        if generation_id != member.member_epoch:
            return _E.illegal_generation, None
        return _E.none, member

    def _needs_rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Kafka's rule for a classic member: behind the group epoch, partitions
        to give up, or partitions it waits for that are free by now."""
        if member.member_epoch < group.group_epoch:
            return True
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            return True
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            target = group.target.get(member.member_id, {})
            waiting = any(
                not group.is_free_for(topic_id, p, member.member_id)
                for topic_id, parts in target.items()
                for p in parts - member.assigned.get(topic_id, frozenset()))
            return not waiting
        return False

    def _ask_rejoin(self, group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> _E:
        # Fenced if it does not rejoin within its rebalance timeout.
        group.classic_deadlines_ms.setdefault(
            member.member_id, now_ms + max(0, member.rebalance_timeout_ms))
        return _E.rebalance_in_progress

    def _sync_consumer_group(self, group: ConsumerGroup, handle: RequestHandle,
                             req: SyncGroupRequest, now_ms: int, out: _Out) -> _E | None:
        error, member = self._classic_member(group, req.member_id, req.group_instance_id,
                                             req.generation_id)
        if member is None or member.classic is None:
            return error
        first = member.classic.supported_protocols[0][0] if member.classic.supported_protocols \
            else None
        if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                req.protocol_name is not None and req.protocol_name != first):
            return _E.inconsistent_group_protocol
        if group.group_epoch > member.member_epoch \
                and member.state is not MemberState.UNREVOKED_PARTITIONS:
            return self._ask_rejoin(group, member, now_ms)
        group.classic_deadlines_ms.pop(member.member_id, None)
        group.session_deadlines_ms[member.member_id] = now_ms + member.classic.session_timeout_ms
        out.replies.append(Reply(handle, SyncGroupResponse(
            error=_E.none, protocol_type=req.protocol_type or CONSUMER_PROTOCOL_TYPE,
            protocol_name=req.protocol_name or first,
            assignment=self._classic_assignment(member, member.assigned))))
        return None

    def _classic_assignment(self, member: ConsumerMember, assignment: Assignment,
                            protocol: str | None = None) -> bytes:
        """``assignment`` as a ConsumerProtocolAssignment at the version of the
        member's subscription (of ``protocol``, else its first)."""
        assert member.classic is not None
        topics = self.topics_source()
        by_name: dict[str, list[int]] = {}
        for topic_id, parts in assignment.items():
            topic = topics.by_id(topic_id)
            if topic is not None and parts:
                by_name[topic.name] = sorted(parts)
        version = 0
        for name, metadata in member.classic.supported_protocols:
            if protocol is None or name == protocol:
                with contextlib.suppress(MalformedConsumerProtocolError):
                    version = decode_subscription(metadata).version
                break
        return encode_assignment(by_name, version)

    def _heartbeat_consumer_group(self, group: ConsumerGroup, req: HeartbeatRequest,
                                  now_ms: int) -> _E:
        error, member = self._classic_member(group, req.member_id, req.group_instance_id,
                                             req.generation_id)
        if member is None or member.classic is None:
            return error
        group.session_deadlines_ms[member.member_id] = now_ms + member.classic.session_timeout_ms
        if self._needs_rejoin(group, member):
            return self._ask_rejoin(group, member, now_ms)
        return _E.none

    def _leave_consumer_group(self, group: ConsumerGroup, req: LeaveGroupRequest, now_ms: int,
                              out: _Out) -> LeaveGroupResponse:
        results = []
        leaving: list[str] = []
        for lm in req.members:
            error = _E.none
            if lm.group_instance_id is not None:
                holder = group.static_members.get(lm.group_instance_id)
                if holder is None:
                    error = _E.unknown_member_id
                elif lm.member_id != UNKNOWN_MEMBER_ID and lm.member_id != holder:
                    error = _E.fenced_instance_id
                else:
                    leaving.append(holder)
            elif lm.member_id in group.members:
                leaving.append(lm.member_id)
            else:
                error = _E.unknown_member_id
            results.append(LeftMember(lm.member_id, lm.group_instance_id, error))
        self._fence_consumer_members(out, group, leaving, now_ms)
        return LeaveGroupResponse(error=_E.none, members=tuple(results))

    # --- downgrade ------------------------------------------------------------------------

    def _fence_consumer_members(self, out: _Out, group: ConsumerGroup,
                                member_ids: Iterable[str], now_ms: int) -> None:
        gone = {mid for mid in member_ids if mid in group.members}
        if not gone:
            return
        remaining = [m for mid, m in group.members.items() if mid not in gone]
        if (remaining and all(m.classic is not None for m in remaining)
                and self._config.online_downgrade and len(remaining) <= self._config.max_size
                and self._downgrade(out, group, remaining, now_ms)):
            return
        super()._fence_consumer_members(out, group, sorted(gone), now_ms)

    def _downgrade(self, out: _Out, group: ConsumerGroup, remaining: list[ConsumerMember],
                   now_ms: int) -> bool:
        """Write ``group`` back as a classic group of ``remaining`` (all classic
        members) and start a rebalance; False (nothing written) if they share
        no protocol."""
        gid = group.group_id
        classic = ClassicGroup(gid, state=GroupState.STABLE, state_timestamp_ms=now_ms,
                               generation_id=group.group_epoch)
        for m in remaining:
            assert m.classic is not None
            classic.add_member(Member(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, session_timeout_ms=m.classic.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=tuple(JoinProtocol(n, md) for n, md in m.classic.supported_protocols),
                heartbeat_deadline_ms=now_ms + m.classic.session_timeout_ms))
        if not classic.candidate_protocols():
            return False
        classic.protocol_name = classic.select_protocol()
        for m in remaining:
            # What the member holds, not its target (Kafka writes the target):
            # until it rejoins it still consumes what it was last given, and
            # an upgrade before the rebalance ends takes these bytes as what
            # it owns. With the target there, partitions it still held but
            # was to give up went at once to the upgrading member.
            classic.members[m.member_id].assignment = self._classic_assignment(
                m, m.assigned, classic.protocol_name)
        self.group_migrations["downgrade"] += 1
        # The whole consumer group's tombstones, in Kafka's order.
        ids = sorted(group.members)
        for mid in ids:
            self._write_consumer(out, ConsumerGroupCurrentMemberAssignmentKey(gid, mid), None)
        for mid in ids:
            self._write_consumer(out, ConsumerGroupTargetAssignmentMemberKey(gid, mid), None)
        self._write_consumer(out, ConsumerGroupTargetAssignmentMetadataKey(gid), None)
        for mid in ids:
            self._write_consumer(out, ConsumerGroupMemberMetadataKey(gid, mid), None)
        self._write_consumer(out, ConsumerGroupMetadataKey(gid), None)
        self._groups[gid] = classic
        self._persist_group(classic, out)
        self._prepare_rebalance(classic, now_ms, out)
        return True


def _by_id(partitions: TopicPartitionsByName, topics: TopicsView) -> dict[uuid.UUID, frozenset[int]]:
    """Named partitions by topic id; topics the metadata does not know are dropped."""
    pairs = []
    for name, parts in partitions:
        topic = topics.by_name(name)
        if topic is not None:
            pairs.append((topic.topic_id, parts))
    return freeze_assignment(pairs)

