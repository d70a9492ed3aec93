"""Shared state and helpers of a `GroupCoordinatorShard` (groups, offsets,
record emission, results); the commands live in ``membership`` and
``offset_commands``."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from raftlog.net.errors import ErrorCode

from .consumer_group import ConsumerGroup, ConsumerValue, apply_consumer_record
from .consumer_model import MappingTopicsView, TopicsView
from .consumer_records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerKey,
    encode_consumer_key,
    encode_consumer_value,
)
from .group import ClassicGroup, GroupState
from .model import (
    CoordinatorResult,
    GroupConfig,
    OffsetsRecord,
    Reply,
    TopicPartition,
    TxnProducer,
)
from .offsets import CommittedOffset, OffsetStore
from .records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)

_E = ErrorCode


def _no_topics() -> TopicsView:
    return MappingTopicsView(())


@dataclass(slots=True)
class _Out:
    records: list[OffsetsRecord] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)


class ShardState:
    """The state every shard command reads and writes (see ``shard``)."""

    def __init__(
        self, partition: int, config: GroupConfig | None = None, *, rng: random.Random
    ) -> None:
        self.partition = partition
        self._config = config or GroupConfig()
        self._rng = rng
        # A group id is in at most one of these: classic groups (and groups
        # with only committed offsets), and KIP-848 consumer groups.
        self._groups: dict[str, ClassicGroup] = {}
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        #: Group epoch bumps this shard wrote (metrics; not replayed).
        self.consumer_group_rebalances = 0
        #: KIP-848 online migrations this shard made, by direction
        #: ("upgrade", "downgrade"; metrics, not replayed).
        self.group_migrations: dict[str, int] = {"upgrade": 0, "downgrade": 0}
        #: The metadata image's topics (the runtime sets it): what classic
        #: members of consumer groups subscribe to and are assigned by name.
        self.topics_source: Callable[[], TopicsView] = _no_topics
        self._offsets = OffsetStore()
        self._retention_deadline_ms: int | None = None

    # --- introspection (tests, describe CLI) -----------------------------------

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self._consumer_groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(set(self._groups) | set(self._consumer_groups))

    @property
    def offsets(self) -> OffsetStore:
        return self._offsets

    def check_invariants(self) -> None:
        """Raise AssertionError if any group's bookkeeping is inconsistent."""
        for group in self._groups.values():
            group.check_invariants()
            assert group.state is not GroupState.DEAD, "dead groups are removed"
        for consumer in self._consumer_groups.values():
            consumer.check_invariants()
        both = set(self._groups) & set(self._consumer_groups)
        assert not both, f"groups both classic and consumer: {sorted(both)}"

    def next_deadline_ms(self) -> int | None:
        """The earliest time ``tick`` has work: a session, join, sync or retention deadline."""
        deadlines: list[int] = []
        if self._retention_deadline_ms is not None:
            deadlines.append(self._retention_deadline_ms)
        for group in self._groups.values():
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
            deadlines.extend(group.pending_members.values())
            deadlines.extend(
                m.heartbeat_deadline_ms
                for m in group.members.values()
                if not (m.is_awaiting_join or m.is_awaiting_sync)
            )
        for consumer in self._consumer_groups.values():
            deadlines.extend(consumer.session_deadlines_ms.values())
            deadlines.extend(consumer.rebalance_deadlines_ms.values())
            deadlines.extend(consumer.classic_deadlines_ms.values())
        return min(deadlines, default=None)

    def _arm_retention(self, now_ms: int) -> None:
        if self._retention_deadline_ms is None:
            self._retention_deadline_ms = now_ms + self._config.offsets_retention_check_interval_ms

    def _delete_group(self, group: ClassicGroup, now_ms: int, out: _Out) -> None:
        for tp in sorted(self._offsets.committed(group.group_id)):
            self._emit_offset(out, group.group_id, tp, None)
        group.transition_to(GroupState.DEAD, now_ms)
        del self._groups[group.group_id]
        out.records.append(OffsetsRecord(encode_key(GroupMetadataKey(group.group_id)), None))

    # --- helpers -----------------------------------------------------------------------

    def _emit_offset(
        self,
        out: _Out,
        group_id: str,
        tp: TopicPartition,
        value: OffsetCommitValue | None,
        producer_id: int | None = None,
    ) -> None:
        self._offsets.begin_live_write()
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
        if committed is not None:
            self._ensure_group_for_offsets(group_id)

    def _ensure_group_for_offsets(self, group_id: str) -> None:
        """A group with committed offsets exists: an empty classic one unless
        it is a group already (Kafka creates a "simple" group for them)."""
        if group_id not in self._groups and group_id not in self._consumer_groups:
            self._groups[group_id] = ClassicGroup(group_id)

    # --- consumer group records ---------------------------------------------------

    def _write_consumer(self, out: _Out, key: ConsumerKey, value: ConsumerValue | None) -> None:
        """Append a consumer-group record and apply it, as replay will."""
        out.records.append(OffsetsRecord(
            encode_consumer_key(key), None if value is None else encode_consumer_value(value)))
        self._apply_consumer(key, value)

    def _apply_consumer(self, key: ConsumerKey, value: ConsumerValue | None) -> None:
        if value is not None and key.group_id in self._groups:
            # An empty classic group (committed offsets only) became a consumer group.
            del self._groups[key.group_id]
        apply_consumer_record(self._consumer_groups, key, value)
        if (value is None and isinstance(key, ConsumerGroupMetadataKey)
                and self._offsets.has_offsets(key.group_id)):
            self._ensure_group_for_offsets(key.group_id)  # offsets outlive the group

    def _drop_consumer_group_records(self, group: ConsumerGroup, out: _Out) -> None:
        """Tombstones for an empty consumer group's own records (its offsets stay)."""
        assert not group.members, "only an empty consumer group is dropped"
        self._write_consumer(out, ConsumerGroupTargetAssignmentMetadataKey(group.group_id), None)
        self._write_consumer(out, ConsumerGroupMetadataKey(group.group_id), None)

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
            write_id=self._offsets.seal_live_write(),
        )

    def mark_committed(self, write_id: int) -> None:
        """The records of the result with ``write_id`` (and all before it) are
        committed (the HW passed them): OffsetFetch may now return them."""
        self._offsets.mark_committed(write_id)

