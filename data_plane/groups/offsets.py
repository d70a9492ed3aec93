"""Committed offsets and pending transactional offsets of one shard.

Plain commits land in ``committed`` directly. TxnOffsetCommit (KIP-98)
offsets wait in ``pending`` per producer id until the transaction's marker
reaches this ``__consumer_offsets`` partition: COMMIT materialises them,
ABORT drops them. A pending offset only overwrites a committed one that was
written *before* it (Kafka compares log positions; we compare ``seq``, the
order in which the shard applied offset records, which is log order because
the shard is the partition's only writer and replay follows the log).

Committed reads. A live command changes ``committed`` at once (later
commands validate against it), but its record is only committed once the
high watermark passes it. Live changes are grouped into *writes* (one per
command result, ids increasing in append order); for each offset changed by
a write not yet marked committed (`mark_committed`) the store keeps the
value from before it, and `stable_committed` answers with those: the
offsets as of the last committed write (Kafka reads at the last committed
offset through its timeline structures for the same reason).
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
        # The live write being built (None: changes come from replay, committed).
        self._live_write: int | None = None
        self._last_write = 0
        # (group, partition) -> [(write id, value before that write)], oldest first.
        self._uncommitted: dict[tuple[str, TopicPartition],
                                list[tuple[int, CommittedOffset | None]]] = {}

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # --- writes ------------------------------------------------------------

    def begin_live_write(self) -> None:
        """Following `put` calls belong to a live write (until `seal_live_write`)."""
        if self._live_write is None:
            self._live_write = self._last_write + 1

    def seal_live_write(self) -> int | None:
        """End the live write; its id (None if no live change happened)."""
        write, self._live_write = self._live_write, None
        if write is not None:
            self._last_write = write
        return write

    def mark_committed(self, write_id: int) -> None:
        """Writes up to ``write_id`` are committed: reads may show them."""
        for key in list(self._uncommitted):
            entries = [e for e in self._uncommitted[key] if e[0] > write_id]
            if entries:
                self._uncommitted[key] = entries
            else:
                del self._uncommitted[key]

    def put(self, group_id: str, tp: TopicPartition, value: CommittedOffset | None) -> None:
        """Apply a committed offset record; None is a tombstone."""
        if self._live_write is not None:
            history = self._uncommitted.setdefault((group_id, tp), [])
            if not history or history[-1][0] != self._live_write:
                history.append((self._live_write, self.get(group_id, tp)))
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
        """A copy of the group's offsets, including not yet committed writes."""
        return dict(self._committed.get(group_id, {}))

    def stable_committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's offsets as of the last committed write (for OffsetFetch)."""
        out = self.committed(group_id)
        for (gid, tp), history in self._uncommitted.items():
            if gid != group_id:
                continue
            before = history[0][1]
            if before is None:
                out.pop(tp, None)
            else:
                out[tp] = before
        return out

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
