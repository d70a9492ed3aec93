"""`KRaftCore`: the sans-I/O KRaft state machine (KIP-595, KIP-630, KIP-996).

Inputs are method calls carrying ``now_ms``; outputs are collected into a
`Ready`. The core writes to the injected `ReplicatedLog` (appends land in
the log at once, durability comes from the runtime's flush) and never sends
anything itself.

Driving it (one thread, no awaits inside the core)::

    core.step(envelope, now_ms)          # inbound message
    core.propose([b"v1", b"v2"], now_ms)  # leader only
    deadline = core.tick(now_ms)         # timers; call again at `deadline`
    if core.has_ready():
        ready = core.ready()
        persist + fsync (ready.election_state, ready.flush_log_to)
        send ready.messages
        ready.deliver(listener)
        core.advance(ready)

Leader-side fetch handling lives in `raftlog.consensus.replication`, the
election in `raftlog.consensus.election`; this module holds the shared
plumbing and the public API.
"""

from __future__ import annotations

from collections.abc import Sequence

from raftlog.consensus.base import CoreBase
from raftlog.consensus.election import ElectionMixin
from raftlog.consensus.errors import Errors, InvariantError, NotLeaderError, RaftError
from raftlog.consensus.leader import LeaderState
from raftlog.consensus.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.ready import CommittedBatch, Ready
from raftlog.consensus.replication import ReplicationMixin
from raftlog.consensus.roles import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    VotedState,
)
from raftlog.consensus.snapshot import SnapshotId
from raftlog.records import iter_batches

_FAR_FUTURE_MS = 1 << 62
# Messages that promise nothing about this node's unflushed log or unwritten
# election state (see `Ready.send_before_persist`): answers that carry the
# leader's records, its high watermark (counted from flushed offsets only) or
# an error with the already-durable epoch and leader.
_PROMISE_FREE = (FetchResponse, FetchSnapshotResponse, DescribeQuorumResponse)


class KRaftCore(ElectionMixin, ReplicationMixin, CoreBase):
    """One KRaft replica (voter or observer) as a pure state machine.

    Raises `NotLeaderError` from `propose` on a non-leader, `InvariantError`
    (stop the node) when a safety invariant would break, and
    `raftlog.consensus.errors.IllegalTransitionError` on an impossible role
    change. Bad or stale peer input never raises: it is answered with an
    error code or dropped.
    """

    # ------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def applied_offset(self) -> int:
        """Records below this offset were delivered to the listener."""
        return self._applied_offset

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.role, LeaderState)

    @property
    def role_name(self) -> str:
        return type(self.quorum.role).__name__.removesuffix("State")

    def step(self, envelope: Envelope, now_ms: int) -> None:
        """Handle one inbound message addressed to this node."""
        if envelope.destination != self.node_id:
            raise RaftError(f"message for {envelope.destination} stepped into {self.node_id}")
        self._advance_time(now_ms)
        src, cid = envelope.source, envelope.correlation_id
        match envelope.body:
            case VoteRequest() as req:
                self.handle_vote_request(src, cid, req, now_ms)
            case VoteResponse() as resp:
                self.handle_vote_response(src, cid, resp, now_ms)
            case BeginQuorumEpochRequest() as req:
                self.handle_begin_quorum_epoch_request(src, cid, req, now_ms)
            case BeginQuorumEpochResponse() as resp:
                self.handle_begin_quorum_epoch_response(src, resp, now_ms)
            case EndQuorumEpochRequest() as req:
                self.handle_end_quorum_epoch_request(src, cid, req, now_ms)
            case EndQuorumEpochResponse() as resp:
                self._maybe_handle_common_response(resp.leader_epoch, resp.leader_id, now_ms)
            case FetchRequest() as req:
                self.handle_fetch_request(src, cid, req, now_ms)
            case FetchResponse() as resp:
                self.handle_fetch_response(src, cid, resp, now_ms)
            case FetchSnapshotRequest() as req:
                self.handle_fetch_snapshot_request(src, cid, req, now_ms)
            case FetchSnapshotResponse() as resp:
                self.handle_fetch_snapshot_response(src, cid, resp, now_ms)
            case DescribeQuorumRequest():
                self._respond(src, cid, self.describe_quorum())
            case DescribeQuorumResponse():
                pass  # this core never asks; an admin client does
        self._after_input(now_ms)

    def tick(self, now_ms: int) -> int:
        """Run the timers due at ``now_ms``; return when to tick next."""
        self._advance_time(now_ms)
        role = self.quorum.role
        if isinstance(role, LeaderState):
            self._tick_leader(role, now_ms)
        elif isinstance(role, FollowerState):
            self._tick_follower(role, now_ms)
        else:
            self._tick_electing(now_ms)
        self._after_input(now_ms)
        return self._next_deadline_ms(now_ms)

    def propose(self, values: Sequence[bytes], now_ms: int) -> int:
        """Queue records for the log; return the offset the last one will get.

        They are appended as one batch (with other proposals) when
        ``append.linger.ms`` expires or the batch is full; the offset is
        committed once `Ready.high_watermark` passes it. Raises
        `NotLeaderError(leader_id, epoch)` unless this node leads.
        """
        self._advance_time(now_ms)
        role = self.quorum.role
        if not isinstance(role, LeaderState) or self._accumulator is None:
            raise NotLeaderError(self.quorum.leader_id(), self.quorum.epoch)
        offset = self._accumulator.append(values, now_ms)
        self._append_batches(role, self._accumulator.drain(now_ms), now_ms)
        return offset

    def resign(self, now_ms: int) -> None:
        """Step down gracefully: send EndQuorumEpoch so a successor stands at once.
        Raises `NotLeaderError` unless this node leads."""
        self._advance_time(now_ms)
        role = self.quorum.role
        if not isinstance(role, LeaderState):
            raise NotLeaderError(self.quorum.leader_id(), self.quorum.epoch)
        self._resign(role, now_ms)
        self._after_input(now_ms)

    def create_snapshot(self, end_offset: int, data: bytes, epoch: int) -> SnapshotId:
        """Store a snapshot of the state the listener has applied up to
        ``end_offset`` (exclusive), whose last record has ``epoch``, and let the
        log drop the records below it (KIP-630).

        Raises RaftError if ``end_offset`` was not applied yet (it must be
        committed and delivered) or is not above the current log start.
        """
        if end_offset > self._applied_offset:
            raise RaftError(f"snapshot at {end_offset} beyond applied {self._applied_offset}")
        if end_offset <= self.log.start_offset():
            raise RaftError(f"snapshot at {end_offset} not above log start")
        snapshot_id = SnapshotId(end_offset, epoch)
        self.log.store_snapshot(snapshot_id, data)
        self.log.delete_before_snapshot(snapshot_id)
        return snapshot_id

    def has_ready(self) -> bool:
        """Whether `ready` would return work."""
        if self._ready_in_flight:
            return False
        return bool(
            self._outbox
            or self._events
            or self.quorum.has_unpersisted()
            or self.log.end_offset() > self.log.flushed_offset()
            or self._has_committable_batch()
        )

    def ready(self) -> Ready:
        """Take the pending work. Call `advance` with it before the next `ready`."""
        if self._ready_in_flight:
            raise RaftError("ready() called again before advance()")
        self._ready_in_flight = True
        election = self.quorum.take_unpersisted()
        end = self.log.end_offset()
        flush_to = end if end > self.log.flushed_offset() else None
        self._collect_committed()
        messages = tuple(self._outbox)
        early = election is None and flush_to is not None and all(
            isinstance(m.body, _PROMISE_FREE) for m in messages)
        ready = Ready(election_state=election, flush_log_to=flush_to,
                      messages=messages, events=tuple(self._events),
                      high_watermark=self._high_watermark, send_before_persist=early)
        self._outbox = []
        self._events = []
        return ready

    def advance(self, ready: Ready) -> None:
        """The runtime has persisted, sent and applied ``ready``."""
        if not self._ready_in_flight:
            raise RaftError("advance() without ready()")
        self._ready_in_flight = False
        if ready.flush_log_to is not None and self.log.flushed_offset() < min(
                ready.flush_log_to, self.log.end_offset()):
            raise InvariantError("advance() before the log was flushed as Ready asked")
        role = self.quorum.role
        if isinstance(role, LeaderState) and role.update_local(self.log.flushed_offset(),
                                                               self._now_ms):
            self._on_high_watermark_change(role, self._now_ms)

    def describe_quorum(self) -> DescribeQuorumResponse:
        """KIP-836 DescribeQuorum, answered by the leader only."""
        role = self.quorum.role
        if not isinstance(role, LeaderState):
            leader = self.quorum.leader_id()
            return DescribeQuorumResponse(Errors.NOT_LEADER_OR_FOLLOWER,
                                          NO_LEADER if leader is None else leader,
                                          self.quorum.epoch, -1)
        return DescribeQuorumResponse(Errors.NONE, self.node_id, role.epoch,
                                      self._high_watermark, role.describe_voters(),
                                      role.describe_observers())

    # ------------------------------------------------------------------
    # Shared plumbing (used by the mixins)
    # ------------------------------------------------------------------

    def _advance_time(self, now_ms: int) -> None:
        if now_ms < self._now_ms:
            raise RaftError(f"time went backwards: {now_ms} < {self._now_ms}")
        self._now_ms = now_ms

    def _after_input(self, now_ms: int) -> None:
        self._answer_orphaned_fetches()
        self._maybe_send_fetch(now_ms)
        self._maybe_notify_leader()

    def _committable_end(self) -> int:
        return min(self._high_watermark, self.log.flushed_offset())

    def _has_committable_batch(self) -> bool:
        # A high watermark inside a batch (a peer's HW need not fall on our
        # batch boundaries) commits nothing until it passes the batch's end:
        # without the stall marker has_ready() would stay true forever.
        end = self._committable_end()
        return end > self._applied_offset and self._stalled_commit != (self._applied_offset, end)

    def _collect_committed(self) -> None:
        end = self._committable_end()
        while self._applied_offset < end:
            if self._applied_offset < self.log.start_offset():
                raise InvariantError(
                    f"applied offset {self._applied_offset} below log start "
                    f"{self.log.start_offset()} without a snapshot load")
            data = self.log.read(self._applied_offset, self.config.fetch_max_bytes)
            progressed = False
            view = memoryview(data)
            for header, pos in iter_batches(data, validate_crc=False):
                if header.next_offset > end:
                    break
                if header.base_offset != self._applied_offset:
                    raise InvariantError(
                        f"log read at {self._applied_offset} returned batch {header.base_offset}")
                self._events.append(CommittedBatch(
                    header.base_offset, header.last_offset, header.partition_leader_epoch,
                    header.is_control, bytes(view[pos:pos + header.size_in_bytes])))
                self._applied_offset = header.next_offset
                progressed = True
            if not progressed:
                self._stalled_commit = (self._applied_offset, end)
                break

    def _next_deadline_ms(self, now_ms: int) -> int:
        role = self.quorum.role
        deadlines = [_FAR_FUTURE_MS]
        if isinstance(role, LeaderState):
            deadlines.append(role.check_quorum_deadline_ms())
            deadlines.append(role.begin_quorum_resend_ms if role.unacknowledged
                             else _FAR_FUTURE_MS)
            if self._accumulator is not None:
                linger = self._accumulator.deadline_ms()
                if linger is not None:
                    deadlines.append(linger)
            deadlines.extend(deadline for _, _, deadline in self._parked.values())
        elif isinstance(role, FollowerState):
            deadlines.append(role.fetch_deadline_ms)
            deadlines.append(self._fetch.expires_ms if self._fetch is not None
                             else self._next_fetch_ms)
        elif isinstance(role, CandidateState):
            deadlines.append(role.backoff_until_ms if role.backoff_until_ms is not None
                             else role.election_deadline_ms)
        elif isinstance(role, UnattachedState | VotedState | ProspectiveState | ResignedState):
            if self.quorum.is_voter:
                deadlines.append(role.election_deadline_ms)
                if isinstance(role, ProspectiveState) and role.backoff_until_ms is not None:
                    deadlines.append(role.backoff_until_ms)
            else:
                deadlines.append(self._fetch.expires_ms if self._fetch is not None
                                 else self._next_fetch_ms)
        return max(now_ms, min(deadlines))

    def _tick_leader(self, role: LeaderState, now_ms: int) -> None:
        if self._accumulator is not None:
            self._append_batches(role, self._accumulator.drain(now_ms), now_ms)
        if not role.maybe_check_quorum(now_ms):
            # KIP-595 check-quorum (KAFKA-15489): a leader cut off from a
            # majority must stop acting as leader.
            self._resign(role, now_ms)
            return
        self._expire_parked_fetches(role, now_ms)
        if role.unacknowledged and now_ms >= role.begin_quorum_resend_ms:
            for voter in sorted(role.unacknowledged):
                self._send(voter, BeginQuorumEpochRequest(role.epoch, self.node_id))
            role.begin_quorum_resend_ms = now_ms + self.config.request_timeout_ms
        role.expire_observers(now_ms, self.config.fetch_timeout_ms * 2)

    def _tick_follower(self, role: FollowerState, now_ms: int) -> None:
        if now_ms >= role.fetch_deadline_ms:
            if self.quorum.is_voter:
                self._start_prospective(now_ms)
            else:
                # An observer lost its leader: look for one again (it never stands).
                self._leave_role()
                self.quorum.transition_to_unattached(role.epoch, now_ms)
                self._next_fetch_ms = now_ms
            return
        if self._fetch is not None and now_ms >= self._fetch.expires_ms:
            # No answer within the request timeout: as good as REQUEST_TIMED_OUT.
            self._note_fetch_failure(self._fetch.destination, Errors.REQUEST_TIMED_OUT)
            self._fetch = None
            self._next_fetch_ms = now_ms

    def _tick_electing(self, now_ms: int) -> None:
        role = self.quorum.role
        if not self.quorum.is_voter:
            if self._fetch is not None and now_ms >= self._fetch.expires_ms:
                self._fetch = None
                self._next_fetch_ms = now_ms
            return
        if isinstance(role, CandidateState):
            if role.backoff_until_ms is not None:
                if now_ms >= role.backoff_until_ms:
                    self._start_prospective(now_ms)
            elif now_ms >= role.election_deadline_ms:
                self._lose_election(role, now_ms)
            return
        if isinstance(role, ProspectiveState) and role.backoff_until_ms is not None \
                and now_ms >= role.backoff_until_ms:
            self._start_prospective(now_ms)
            return
        if isinstance(role, UnattachedState | VotedState | ProspectiveState | ResignedState) \
                and now_ms >= role.election_deadline_ms:
            self._start_prospective(now_ms)


__all__ = ["KRaftCore"]
