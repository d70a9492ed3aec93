"""Committed offsets and pending transactional offsets of one shard.

Plain commits land in ``committed`` directly. TxnOffsetCommit (KIP-98)
offsets wait in ``pending`` per producer id until the transaction's marker
reaches this ``__consumer_offsets`` partition: COMMIT materialises them,
ABORT drops them. A pending offset only overwrites a committed one that was
written *before* it (Kafka compares log positions; we compare ``seq``, the
order in which the shard applied offset records, which is log order because
the shard is the partition's only writer and replay follows the log).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    #: Application order of the record that carried it (log order).
    seq: int


class OffsetStore:
    """Offsets per group; pure bookkeeping, no validation (the shard validates)."""

    def __init__(self) -> None:
        self._committed: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        #: producer id -> group id -> partition -> offset.
        self._pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._seq = 0

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # --- writes ------------------------------------------------------------

    def put(self, group_id: str, tp: TopicPartition, value: CommittedOffset | None) -> None:
        """Apply a committed offset record; None is a tombstone."""
        if value is None:
            offsets = self._committed.get(group_id)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._committed[group_id]
            return
        self._committed.setdefault(group_id, {})[tp] = value

    def put_pending(
        self, producer_id: int, group_id: str, tp: TopicPartition, value: CommittedOffset | None
    ) -> None:
        """Apply a transactional offset record (a tombstone drops the pending entry)."""
        groups = self._pending.setdefault(producer_id, {})
        if value is None:
            groups.get(group_id, {}).pop(tp, None)
            return
        groups.setdefault(group_id, {})[tp] = value

    def complete_txn(self, producer_id: int, committed: bool) -> list[str]:
        """Materialise (COMMIT) or drop (ABORT) the producer's pending offsets.

        Returns the group ids that had pending offsets from this producer.
        """
        groups = self._pending.pop(producer_id, {})
        if committed:
            for group_id, offsets in groups.items():
                current = self._committed.setdefault(group_id, {})
                for tp, value in offsets.items():
                    existing = current.get(tp)
                    if existing is None or existing.seq < value.seq:
                        current[tp] = value
        return [g for g, offsets in groups.items() if offsets]

    def delete_group(self, group_id: str) -> list[TopicPartition]:
        """Forget every committed offset of the group; returns the partitions removed."""
        return sorted(self._committed.pop(group_id, {}))

    # --- reads ---------------------------------------------------------------

    def get(self, group_id: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._committed.get(group_id, {}).get(tp)

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """A copy of the group's committed offsets."""
        return dict(self._committed.get(group_id, {}))

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._committed.get(group_id))

    def has_pending(self, group_id: str, tp: TopicPartition | None = None) -> bool:
        """Whether a transaction holds an uncommitted offset for the group (or one partition)."""
        for groups in self._pending.values():
            offsets = groups.get(group_id)
            if offsets and (tp is None or tp in offsets):
                return True
        return False

    def pending_producers(self) -> list[int]:
        return sorted(pid for pid, groups in self._pending.items() if any(groups.values()))

    def group_ids(self) -> list[str]:
        return sorted(self._committed)

    def snapshot(self) -> dict[str, dict[TopicPartition, tuple[int, int, str, int]]]:
        """Committed offsets without ``seq``: for comparing a live shard with a replayed one."""
        return {
            g: {
                tp: (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms)
                for tp, v in offsets.items()
            }
            for g, offsets in self._committed.items()
        }

    def pending_snapshot(self) -> dict[int, dict[str, dict[TopicPartition, int]]]:
        return {
            pid: {g: {tp: v.offset for tp, v in o.items()} for g, o in groups.items() if o}
            for pid, groups in self._pending.items()
            if any(groups.values())
        }
