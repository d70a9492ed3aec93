"""State and plumbing shared by the parts of `raftlog.consensus.core.KRaftCore`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from raftlog.consensus.accumulator import BatchAccumulator
from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.errors import InvariantError
from raftlog.consensus.leader import LeaderState
from raftlog.consensus.log import ReplicatedLog
from raftlog.consensus.messages import NO_LEADER, Body, Envelope, FetchRequest
from raftlog.consensus.quorum_state import QuorumState
from raftlog.consensus.ready import LeaderAndEpoch, ListenerEvent, SnapshotLoad
from raftlog.consensus.roles import ElectionState, ResignedState


@dataclass(frozen=True, slots=True)
class Outstanding:
    """A request this node sent and still waits for (by correlation id)."""

    destination: int
    correlation_id: int
    expires_ms: int


class CoreBase:
    """Fields and helpers every part of the core uses. Not used on its own."""

    def __init__(self, *, node_id: int, config: QuorumConfig, log: ReplicatedLog,
                 rng: random.Random, stored: ElectionState | None, now_ms: int,
                 recovering: bool = False) -> None:
        """``stored`` is the quorum state read from disk (None on a fresh disk).
        ``recovering`` says a voter restarted after losing its disk (the runtime
        knows: its data directory is gone but it is configured as a voter)."""
        self.node_id = node_id
        self.config = config
        self.log = log
        self._rng = rng
        self._now_ms = now_ms
        self.quorum = QuorumState(local_id=node_id, config=config, rng=rng, stored=stored,
                                  now_ms=now_ms)
        if recovering and not self.quorum.recovering:
            self.quorum.begin_recovery()
        self._recovery_floor_epoch: int | None = None
        self._outbox: list[Envelope] = []
        self._events: list[ListenerEvent] = []
        self._next_correlation_id = 1
        self._ready_in_flight = False
        # Every record below the HW is committed; on a follower it may run
        # ahead of the local log. Only ever raised.
        self._high_watermark = log.start_offset()
        # Records below this offset have been handed to the listener.
        self._applied_offset = log.start_offset()
        # (applied offset, committable end) at which no whole batch was committable.
        self._stalled_commit: tuple[int, int] | None = None
        self._accumulator: BatchAccumulator | None = None
        self._fetch: Outstanding | None = None
        self._next_fetch_ms = now_ms
        self._vote_requests: dict[int, tuple[bool, int]] = {}
        self._parked: dict[int, tuple[int, FetchRequest, int]] = {}
        # Parked fetches of a leadership that just ended: answered with
        # NOT_LEADER_OR_FOLLOWER (and the new epoch/leader hints) at the end of
        # the input that ended it, so no request is left without a response.
        self._orphaned_fetches: list[tuple[int, int]] = []
        self._last_leader: LeaderAndEpoch | None = None
        snapshot_id = log.latest_snapshot_id()
        if snapshot_id is not None:
            data = log.read_snapshot(snapshot_id)
            if data is None:
                raise InvariantError(f"snapshot {snapshot_id} listed but unreadable")
            self._events.append(SnapshotLoad(snapshot_id, data))
            self._high_watermark = max(self._high_watermark, snapshot_id.end_offset)
            self._applied_offset = max(self._applied_offset, snapshot_id.end_offset)
        self._maybe_notify_leader()

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id(), self.quorum.epoch)

    def _send(self, destination: int, body: Body) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id += 1
        self._outbox.append(Envelope(self.node_id, destination, body, cid))
        return cid

    def _respond(self, destination: int, correlation_id: int, body: Body) -> None:
        self._outbox.append(Envelope(self.node_id, destination, body, correlation_id))

    def _leader_id_or_none(self) -> int:
        leader = self.quorum.leader_id()
        return NO_LEADER if leader is None else leader

    def _maybe_notify_leader(self) -> None:
        current = self.leader_and_epoch()
        if current != self._last_leader:
            self._last_leader = current
            self._events.append(current)

    def _raise_high_watermark(self, offset: int) -> None:
        if offset > self._high_watermark:
            self._high_watermark = offset

    def _reset_leader_only_state(self) -> None:
        """Forget what only a leader keeps (on any transition away from Leader)."""
        self._accumulator = None
        # Kafka completes its fetch purgatory exceptionally when leadership
        # ends; over TCP an unanswered request would block every later
        # response on its connection (responses go in order).
        self._orphaned_fetches.extend(
            (dst, cid) for dst, (cid, _, _) in sorted(self._parked.items()))
        self._parked.clear()

    def _clear_requests(self) -> None:
        self._fetch = None
        self._vote_requests.clear()

    def _maybe_handle_common_response(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """Learn a newer epoch or leader from any message; return whether the
        role changed (the caller then stops handling the message)."""
        # A hint naming no voter (or us) is no leader we could follow.
        leader = (leader_id if leader_id in self.config.voters and leader_id != self.node_id
                  else None)
        if epoch > self.quorum.epoch:
            if leader is not None:
                self._become_follower(epoch, leader, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
            return True
        if (epoch == self.quorum.epoch and leader is not None
                and self.quorum.leader_id() is None
                and not isinstance(self.quorum.role, LeaderState | ResignedState)):
            self._become_follower(epoch, leader, now_ms)
            return True
        return False

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        self._leave_role()
        self.quorum.transition_to_unattached(epoch, now_ms)

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self._leave_role()
        self.quorum.transition_to_follower(epoch, leader_id, now_ms)
        self._next_fetch_ms = now_ms
        if self.quorum.recovering and self._recovery_floor_epoch is None:
            self._recovery_floor_epoch = epoch

    def _leave_role(self) -> None:
        if isinstance(self.quorum.role, LeaderState):
            self._reset_leader_only_state()
        self._clear_requests()

