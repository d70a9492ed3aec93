"""Offset commands of a shard: OffsetCommit, TxnOffsetCommit, OffsetFetch,
OffsetDelete and offset expiry (KIP-211)."""

from __future__ import annotations

import re

from raftlog.net.errors import ErrorCode

from .consumer_group import ConsumerGroup
from .group import ClassicGroup, GroupState
from .model import (
    UNKNOWN_MEMBER_ID,
    CoordinatorResult,
    FetchedOffset,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    Reply,
    RequestHandle,
    TopicPartition,
    TxnOffsetCommitRequest,
    TxnProducer,
)
from .records import (
    OffsetCommitValue,
)
from .shard_state import _E, ShardState, _Out


class OffsetCommands(ShardState):
    """Committed offsets: commits, fetches, deletes and retention."""

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
        for group_id in sorted(set(self._offsets.group_ids()) | set(self._groups)
                               | set(self._consumer_groups)):
            consumer = self._consumer_groups.get(group_id)
            if consumer is not None:
                self._expire_consumer_offsets(consumer, now_ms, out)
                continue
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

    def _expire_consumer_offsets(self, group: ConsumerGroup, now_ms: int, out: _Out) -> None:
        """A consumer group's offset expires a retention period after its
        commit unless a member subscribes to its topic (Kafka's rule for
        consumer groups); an empty group left without offsets is deleted."""
        retention = self._config.offsets_retention_ms
        for tp, value in sorted(self._offsets.committed(group.group_id).items()):
            if self._offsets.has_pending(group.group_id, tp):
                continue
            if not _subscribes(group, tp.topic) and value.commit_timestamp_ms + retention <= now_ms:
                self._emit_offset(out, group.group_id, tp, None)
        if (not group.members and not self._offsets.has_offsets(group.group_id)
                and not self._offsets.has_pending(group.group_id)):
            self._drop_consumer_group_records(group, out)

    def _validate_consumer_commit(self, group: ConsumerGroup, member_id: str, epoch: int,
                                  *, transactional: bool) -> ErrorCode:
        """KIP-848: a commit names a member and its current member epoch, or
        (no member id, epoch -1) comes from outside a group with no members."""
        if epoch < 0 and member_id == UNKNOWN_MEMBER_ID and (transactional or not group.members):
            return _E.none
        member = group.members.get(member_id)
        if member is None:
            return _E.unknown_member_id
        if epoch != member.member_epoch:
            # TxnOffsetCommit has no STALE_MEMBER_EPOCH: Kafka answers
            # ILLEGAL_GENERATION, as it does to a classic member (whose
            # generation is its member epoch), which knows no other.
            if transactional or member.classic is not None:
                return _E.illegal_generation
            return _E.stale_member_epoch
        return _E.none

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
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None:
            return self._validate_consumer_commit(consumer, req.member_id, req.generation_id,
                                                  transactional=False)
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
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None:
            return self._validate_consumer_commit(consumer, req.member_id, req.generation_id,
                                                  transactional=True)
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
        consumer = self._consumer_groups.get(request.group_id)
        if consumer is not None and (request.member_id or request.member_epoch >= 0):
            # OffsetFetch v9 from a KIP-848 member: it must be one, at its epoch.
            member = consumer.members.get(request.member_id or "")
            if member is None:
                return OffsetFetchResponse(request.group_id, _E.unknown_member_id, ())
            if request.member_epoch != member.member_epoch:
                return OffsetFetchResponse(request.group_id, _E.stale_member_epoch, ())
        # Only offsets whose records are committed: a commit still waiting for
        # the HW could be lost on failover and must not be seen meanwhile.
        committed = self._offsets.stable_committed(request.group_id)
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
        consumer = self._consumer_groups.get(req.group_id)
        if consumer is not None:
            results = []
            for tp in req.partitions:
                if _subscribes(consumer, tp.topic):
                    results.append(
                        PartitionResult(tp.topic, tp.partition, _E.group_subscribed_to_topic))
                    continue
                if self._offsets.get(req.group_id, tp) is not None:
                    self._emit_offset(out, req.group_id, tp, None)
                results.append(PartitionResult(tp.topic, tp.partition, _E.none))
            return OffsetDeleteResponse(error=_E.none, partitions=tuple(results))
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


def _subscribes(group: ConsumerGroup, topic: str) -> bool:
    """Whether a member of the consumer group subscribes to ``topic`` (by name or regex)."""
    for member in group.members.values():
        if topic in member.subscribed_topic_names:
            return True
        if member.subscribed_topic_regex:
            try:
                if re.fullmatch(member.subscribed_topic_regex, topic):
                    return True
            except re.error:
                continue
    return False
