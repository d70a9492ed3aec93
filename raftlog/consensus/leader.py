"""The leader's bookkeeping: replica progress, high watermark, check-quorum.

High watermark (KIP-595, Kafka `LeaderState.maybeUpdateHighWatermark`):
- it is the largest offset that a majority of *voters* hold durably: the
  leader counts its own *flushed* offset, a follower counts the fetch offset
  of its latest fetch in this epoch (a follower fsyncs before fetching);
- it may only move past ``epoch_start_offset``: the leader must commit one
  entry of its own epoch (its LEADER_CHANGE batch) before it exposes any
  entry from an earlier epoch (Raft thesis 3.6.2, "Figure 8");
- it never goes backwards; observers never count.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.consensus.messages import ReplicaState


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica in this epoch. -1 means unknown."""

    replica_id: int
    end_offset: int = -1  # fetch offset of the latest fetch in this epoch
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1

    def describe(self) -> ReplicaState:
        return ReplicaState(self.replica_id, self.end_offset, self.last_fetch_ms,
                            self.last_caught_up_ms)


class LeaderState:
    """Role state of the leader of ``epoch``.

    ``epoch_start_offset`` is the LEO when leadership began: the offset of
    this epoch's LEADER_CHANGE control batch.
    """

    # Self-test switch for the simulator (never on by default): when False the
    # high watermark may advance over entries of earlier epochs only.
    require_own_epoch_entry: bool = True

    def __init__(self, *, local_id: int, epoch: int, voters: frozenset[int],
                 epoch_start_offset: int, high_watermark: int, now_ms: int,
                 check_quorum_timeout_ms: int) -> None:
        self.local_id = local_id
        self._epoch = epoch
        self.voters = voters
        self.epoch_start_offset = epoch_start_offset
        # The HW this node already knew as a follower is committed; keep it so
        # the value never drops (it is only raised below).
        self._high_watermark = high_watermark
        self.voter_progress: dict[int, ReplicaProgress] = {
            v: ReplicaProgress(v) for v in sorted(voters)
        }
        self.observer_progress: dict[int, ReplicaProgress] = {}
        # Voters still to acknowledge this epoch (by BeginQuorumEpoch response or a fetch).
        self.unacknowledged: set[int] = set(voters) - {local_id}
        self.begin_quorum_resend_ms = now_ms
        self._check_quorum_timeout_ms = check_quorum_timeout_ms
        self._check_quorum_deadline_ms = now_ms + check_quorum_timeout_ms
        self._fetched_since_check: set[int] = {local_id}
        self.resigning = False

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def high_watermark(self) -> int:
        """The committed offset: every record below it is committed."""
        return self._high_watermark

    # -- progress ---------------------------------------------------------

    def update_local(self, flushed_offset: int, now_ms: int) -> bool:
        """Record the leader's own durable offset. Returns whether the HW moved."""
        progress = self.voter_progress[self.local_id]
        progress.end_offset = max(progress.end_offset, flushed_offset)
        progress.last_fetch_ms = now_ms
        progress.last_caught_up_ms = now_ms
        return self._maybe_update_high_watermark()

    def update_replica(self, replica_id: int, fetch_offset: int, leader_end_offset: int,
                       now_ms: int) -> bool:
        """Record a fetch; returns whether the HW moved (voters only move it)."""
        if replica_id in self.voters:
            progress = self.voter_progress[replica_id]
            self.unacknowledged.discard(replica_id)
            self._fetched_since_check.add(replica_id)
        else:
            progress = self.observer_progress.setdefault(replica_id, ReplicaProgress(replica_id))
        # A follower can truncate (after a divergence), so its offset may go down.
        progress.end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        if fetch_offset >= leader_end_offset:
            progress.last_caught_up_ms = now_ms
        if replica_id not in self.voters:
            return False
        return self._maybe_update_high_watermark()

    def record_contact(self, voter_id: int) -> None:
        """A voter reached us without a Fetch (FetchSnapshot): it counts for check-quorum."""
        if voter_id in self.voters:
            self._fetched_since_check.add(voter_id)
            self.unacknowledged.discard(voter_id)

    def _maybe_update_high_watermark(self) -> bool:
        offsets = sorted((p.end_offset for p in self.voter_progress.values()), reverse=True)
        majority = len(self.voters) // 2 + 1
        candidate = offsets[majority - 1]
        if candidate < 0:
            return False
        if self.require_own_epoch_entry and candidate <= self.epoch_start_offset:
            return False
        if candidate > self._high_watermark:
            self._high_watermark = candidate
            return True
        # A majority below the current HW is possible (the HW came from the
        # previous leader, or a follower truncated): keep the old value.
        return False

    # -- check-quorum (KIP-595; KAFKA-15489) ------------------------------

    def check_quorum_deadline_ms(self) -> int:
        return self._check_quorum_deadline_ms

    def maybe_check_quorum(self, now_ms: int) -> bool:
        """At the check-quorum deadline, return False if a majority of voters
        (the leader included) did not fetch in the last window, else start a
        new window and return True. Before the deadline return True."""
        if now_ms < self._check_quorum_deadline_ms:
            return True
        majority = len(self.voters) // 2 + 1
        if len(self._fetched_since_check) < majority:
            return False
        self._fetched_since_check = {self.local_id}
        self._check_quorum_deadline_ms = now_ms + self._check_quorum_timeout_ms
        return True

    # -- describe ----------------------------------------------------------

    def preferred_successors(self) -> tuple[int, ...]:
        """Other voters, most caught up first, ties by id (deterministic)."""
        others = [p for v, p in self.voter_progress.items() if v != self.local_id]
        others.sort(key=lambda p: (-p.end_offset, p.replica_id))
        return tuple(p.replica_id for p in others)

    def describe_voters(self) -> tuple[ReplicaState, ...]:
        return tuple(self.voter_progress[v].describe() for v in sorted(self.voter_progress))

    def describe_observers(self) -> tuple[ReplicaState, ...]:
        return tuple(self.observer_progress[o].describe() for o in sorted(self.observer_progress))

    def expire_observers(self, now_ms: int, session_timeout_ms: int) -> None:
        """Forget observers that have not fetched for ``session_timeout_ms``."""
        stale = [o for o, p in self.observer_progress.items()
                 if now_ms - p.last_fetch_ms > session_timeout_ms]
        for o in stale:
            del self.observer_progress[o]
