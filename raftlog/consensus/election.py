"""Elections: Vote (with KIP-996 pre-vote), BeginQuorumEpoch, EndQuorumEpoch,
becoming leader and resigning."""

from __future__ import annotations

from raftlog.consensus.accumulator import BatchAccumulator
from raftlog.consensus.base import CoreBase
from raftlog.consensus.control import LeaderChangeMessage, build_leader_change_batch
from raftlog.consensus.errors import Errors
from raftlog.consensus.leader import LeaderState
from raftlog.consensus.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.roles import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    UnattachedState,
    VotedState,
)


class ElectionMixin(CoreBase):
    """Vote handling and role changes driven by elections."""

    # Self-test switch for the simulator (never off by default): grant votes
    # without comparing logs (the Raft election restriction, thesis 3.6.1).
    _vote_requires_up_to_date_log: bool = True
    # Self-test switch for the simulator (never off by default): a pre-vote
    # from a voter in a higher epoch leaves our epoch alone (the liveness
    # stall `handle_vote_request` documents).
    _pre_vote_from_higher_epoch_moves_epoch: bool = True

    # -- Vote ----------------------------------------------------------------

    def handle_vote_request(self, src: int, cid: int, req: VoteRequest, now_ms: int) -> None:
        """KIP-595 Vote: grant at most one vote per epoch, only to a candidate
        whose log is at least as up to date as ours, and only once that vote
        is durable (it is in the Ready's election state, fsynced before send).

        Epochs: a request from a voter in a higher epoch than ours moves us to
        Unattached in that epoch before we answer, whether it is a real vote
        or a pre-vote (KIP-996). A real vote carries the candidate's (bumped)
        epoch; a pre-vote carries ``epoch + 1`` of the prospective node, whose
        own epoch is therefore ``candidate_epoch - 1``. This is Kafka 4.x
        (``KafkaRaftClient.handleVoteRequest``: ``if (replicaEpoch >
        quorum.epoch()) transitionToUnattached(replicaEpoch)`` for both kinds,
        a pre-vote's ``replicaEpoch`` being the prospective's current epoch).

        Why a pre-vote must move epochs too (liveness): a voter can become a
        candidate of epoch E+1 (a majority granted its pre-vote), be cut off
        before its vote requests arrive, lose, and fall back to Prospective
        in E+1, while the leader of E keeps a majority (check-quorum holds).
        Its pre-votes are vetoed by the leader and by followers that fetch from
        it, and it cannot follow a leader of a lower epoch: without this rule
        it stays outside the quorum forever (and any observer that learned E+1
        from it can follow nobody). With it, the leader of E steps down, the
        voters meet in E+1 and elect a leader of E+2.

        Safety is unchanged: learning a higher epoch never grants a vote,
        never lowers an epoch, and is durable before the answer is sent; a
        pre-vote still records no vote. The cost is one election, and only a
        voter that is already in a higher epoch can cause it: pre-votes of a
        voter in our epoch or below still change nothing (KIP-996's point).
        """
        if req.candidate_id not in self.config.voters:
            self._reply_vote(src, cid, granted=False, error=Errors.INCONSISTENT_VOTER_SET)
            return
        if req.candidate_id == self.node_id:
            # Nobody else stands in our name: a confused or hostile peer.
            self._reply_vote(src, cid, granted=False, error=Errors.INVALID_REQUEST)
            return
        if not self.quorum.is_voter:
            # Observers and voters recovering from disk loss (KAFKA-14077)
            # have no vote to give.
            self._reply_vote(src, cid, granted=False)
            return
        if req.candidate_epoch < self.quorum.epoch:
            self._reply_vote(src, cid, granted=False)
            return
        requester_epoch = req.candidate_epoch - 1 if req.pre_vote else req.candidate_epoch
        if requester_epoch > self.quorum.epoch and (
                not req.pre_vote or self._pre_vote_from_higher_epoch_moves_epoch):
            self._become_unattached(requester_epoch, now_ms)
        log_ok = self._candidate_log_is_up_to_date(req)
        if req.pre_vote:
            granted = log_ok and not self._has_live_leader(now_ms) and (
                req.candidate_epoch > self.quorum.epoch
                or self._may_vote_in_current_epoch(req.candidate_id))
        else:
            granted = log_ok and self._may_vote_in_current_epoch(req.candidate_id)
            if granted and self.quorum.voted_id() != req.candidate_id:
                self.quorum.transition_to_voted(req.candidate_epoch, req.candidate_id, now_ms)
        self._reply_vote(src, cid, granted=granted)

    def _candidate_log_is_up_to_date(self, req: VoteRequest) -> bool:
        if not self._vote_requires_up_to_date_log:
            return True
        ours = (self.log.last_fetched_epoch(), self.log.end_offset())
        return (req.last_offset_epoch, req.last_offset) >= ours

    def _may_vote_in_current_epoch(self, candidate_id: int) -> bool:
        role = self.quorum.role
        if isinstance(role, UnattachedState):
            return True
        if isinstance(role, VotedState):
            return role.voted_id == candidate_id
        if isinstance(role, ProspectiveState):
            if role.leader_id is not None:
                return False
            return role.voted_id is None or role.voted_id == candidate_id
        return False

    def _has_live_leader(self, now_ms: int) -> bool:
        """KIP-996: reject pre-votes while we still hear from a leader.

        As Kafka's ``FollowerState.canGrantVote``, a follower vetoes only once
        it has fetched from the leader in this epoch. Beyond Kafka, it stops
        vetoing as soon as its fetches to that leader fail at the transport
        (BROKER_NOT_AVAILABLE, REQUEST_TIMED_OUT) or the leader says it no
        longer leads: a dead leader then costs one fetch timeout, not a fetch
        timeout plus an election timeout. Pre-votes change no state, so this
        only affects liveness.
        """
        role = self.quorum.role
        if isinstance(role, LeaderState):
            return True
        return (isinstance(role, FollowerState) and role.has_fetched_from_leader
                and not role.leader_unreachable and now_ms < role.fetch_deadline_ms)

    def _reply_vote(self, src: int, cid: int, *, granted: bool,
                    error: Errors = Errors.NONE) -> None:
        self._respond(src, cid, VoteResponse(error, self.quorum.epoch,
                                             self._leader_id_or_none(), granted))

    def handle_vote_response(self, src: int, cid: int, resp: VoteResponse, now_ms: int) -> None:
        asked = self._vote_requests.pop(cid, None)
        if asked is None:
            return  # duplicate, or from a round we already left
        pre_vote, epoch = asked
        if self._maybe_handle_common_response(resp.leader_epoch, resp.leader_id, now_ms):
            return
        role = self.quorum.role
        if (pre_vote and isinstance(role, ProspectiveState) and role.epoch == epoch) or (not pre_vote and isinstance(role, CandidateState) and role.epoch == epoch):
            tally = role.tally
        else:
            return
        if src not in self.config.voters or src == self.node_id:
            return
        if resp.error is Errors.NONE:
            (tally.granted if resp.vote_granted else tally.rejected).add(src)
        elif resp.error in (Errors.BROKER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT):
            # An unreachable voter will not grant in this round: counting it
            # lets a round that can no longer win end now instead of at the
            # election timeout. Losing only ever backs off, so this is safe.
            tally.rejected.add(src)
        else:
            return
        self._maybe_finish_election(now_ms)

    # -- standing ------------------------------------------------------------

    def _start_prospective(self, now_ms: int) -> None:
        """Begin a pre-vote round (KIP-996) for epoch + 1."""
        self._leave_role()
        self.quorum.transition_to_prospective(now_ms)
        epoch = self.quorum.epoch
        request = VoteRequest(epoch + 1, self.node_id, self.log.last_fetched_epoch(),
                              self.log.end_offset(), pre_vote=True)
        for voter in self.config.sorted_voters():
            if voter != self.node_id:
                self._vote_requests[self._send(voter, request)] = (True, epoch)
        self._maybe_finish_election(now_ms)

    def _start_candidate(self, now_ms: int) -> None:
        self._leave_role()
        self.quorum.transition_to_candidate(now_ms)
        epoch = self.quorum.epoch
        request = VoteRequest(epoch, self.node_id, self.log.last_fetched_epoch(),
                              self.log.end_offset(), pre_vote=False)
        for voter in self.config.sorted_voters():
            if voter != self.node_id:
                self._vote_requests[self._send(voter, request)] = (False, epoch)
        self._maybe_finish_election(now_ms)

    def _maybe_finish_election(self, now_ms: int) -> None:
        role = self.quorum.role
        majority = self.config.majority
        if isinstance(role, ProspectiveState):
            if len(role.tally.granted) >= majority:
                self._start_candidate(now_ms)
            elif (role.backoff_until_ms is None
                  and len(role.tally.rejected) > len(self.config.voters) - majority):
                self._lose_pre_vote(role, now_ms)
        elif isinstance(role, CandidateState) and role.backoff_until_ms is None:
            if len(role.tally.granted) >= majority:
                self._become_leader(now_ms)
            elif len(role.tally.rejected) > len(self.config.voters) - majority:
                self._lose_election(role, now_ms)

    def _lose_pre_vote(self, role: ProspectiveState, now_ms: int) -> None:
        """KIP-996 as Kafka 4.x: a pre-vote round rejected by a majority goes
        back to following the leader it still knows (it may well be alive);
        without one it backs off (randomised, exponential, like a candidate's
        backoff) and pre-votes again, rather than waiting out a whole new
        election timeout."""
        self._vote_requests.clear()
        if role.leader_id is not None:
            self._become_follower(role.epoch, role.leader_id, now_ms)
            return
        role.backoff_until_ms = now_ms + self.quorum.election_backoff_ms(role.retries + 1)

    def _lose_election(self, role: CandidateState, now_ms: int) -> None:
        """Back off (randomised, exponential) before the next pre-vote round."""
        role.backoff_until_ms = now_ms + self.quorum.election_backoff_ms(role.retries + 1)
        self._vote_requests.clear()

    def _become_leader(self, now_ms: int) -> None:
        role = self.quorum.role
        assert isinstance(role, CandidateState)
        granting = tuple(sorted(role.tally.granted))
        self._clear_requests()
        epoch_start = self.log.end_offset()
        leader = self.quorum.transition_to_leader(epoch_start_offset=epoch_start,
                                                  high_watermark=self._high_watermark,
                                                  now_ms=now_ms)
        # KIP-595: the first entry of every epoch is a LEADER_CHANGE control
        # batch, so the leader has an entry of its own epoch to commit.
        message = LeaderChangeMessage(self.node_id, self.config.sorted_voters(), granting)
        batch = build_leader_change_batch(message, epoch=leader.epoch, base_offset=epoch_start,
                                          now_ms=now_ms)
        self.log.append_as_leader(batch, leader.epoch, now_ms)
        self._accumulator = BatchAccumulator(
            epoch=leader.epoch, next_offset=self.log.end_offset(),
            linger_ms=self.config.append_linger_ms,
            max_batch_bytes=self.config.append_max_batch_bytes)
        for voter in self.config.sorted_voters():
            if voter != self.node_id:
                self._send(voter, BeginQuorumEpochRequest(leader.epoch, self.node_id))
        leader.begin_quorum_resend_ms = now_ms + self.config.request_timeout_ms
        if leader.update_local(self.log.flushed_offset(), now_ms):
            self._raise_high_watermark(leader.high_watermark)

    def _resign(self, role: LeaderState, now_ms: int) -> None:
        """Leader -> Resigned, telling voters to elect now (EndQuorumEpoch)."""
        successors = role.preferred_successors()
        self._reset_leader_only_state()
        self._clear_requests()
        self.quorum.transition_to_resigned(successors, now_ms)
        request = EndQuorumEpochRequest(role.epoch, self.node_id, successors)
        for voter in successors:
            self._send(voter, request)

    # -- BeginQuorumEpoch / EndQuorumEpoch -------------------------------------

    def handle_begin_quorum_epoch_request(self, src: int, cid: int,
                                          req: BeginQuorumEpochRequest, now_ms: int) -> None:
        if req.leader_id not in self.config.voters:
            self._respond(src, cid, BeginQuorumEpochResponse(
                Errors.INCONSISTENT_VOTER_SET, self.quorum.epoch, self._leader_id_or_none()))
            return
        if req.leader_id == self.node_id:
            # Only we announce our own leadership.
            self._respond(src, cid, BeginQuorumEpochResponse(
                Errors.INVALID_REQUEST, self.quorum.epoch, self._leader_id_or_none()))
            return
        if req.leader_epoch < self.quorum.epoch:
            self._respond(src, cid, BeginQuorumEpochResponse(
                Errors.FENCED_LEADER_EPOCH, self.quorum.epoch, self._leader_id_or_none()))
            return
        known = self.quorum.leader_id()
        if req.leader_epoch > self.quorum.epoch or known is None:
            self._become_follower(req.leader_epoch, req.leader_id, now_ms)
        elif known != req.leader_id:
            # Two leaders in one epoch would be a safety bug elsewhere; refuse.
            self._respond(src, cid, BeginQuorumEpochResponse(
                Errors.INVALID_REQUEST, self.quorum.epoch, known))
            return
        # The acknowledgement promises the epoch change is durable: it goes out
        # in a Ready whose election state is fsynced first.
        self._respond(src, cid, BeginQuorumEpochResponse(
            Errors.NONE, self.quorum.epoch, self._leader_id_or_none()))

    def handle_begin_quorum_epoch_response(self, src: int, resp: BeginQuorumEpochResponse,
                                           now_ms: int) -> None:
        if self._maybe_handle_common_response(resp.leader_epoch, resp.leader_id, now_ms):
            return
        role = self.quorum.role
        if (isinstance(role, LeaderState) and resp.error is Errors.NONE
                and resp.leader_epoch == role.epoch):
            role.unacknowledged.discard(src)

    def handle_end_quorum_epoch_request(self, src: int, cid: int, req: EndQuorumEpochRequest,
                                        now_ms: int) -> None:
        """A resigning leader asks us to elect: the earlier we appear in its
        preferred successors, the sooner we stand (Kafka's strict exponential
        backoff by position)."""
        if req.leader_epoch < self.quorum.epoch:
            self._respond(src, cid, EndQuorumEpochResponse(
                Errors.FENCED_LEADER_EPOCH, self.quorum.epoch, self._leader_id_or_none()))
            return
        if req.leader_epoch > self.quorum.epoch:
            self._become_unattached(req.leader_epoch, now_ms)
        role = self.quorum.role
        if self.quorum.is_voter and self.node_id in req.preferred_successors:
            position = req.preferred_successors.index(self.node_id)
            delay = min(self.config.election_backoff_max_ms,
                        self.config.retry_backoff_ms * (1 << min(position, 20)))
            if isinstance(role, FollowerState) and role.leader_id == req.leader_id:
                role.fetch_deadline_ms = min(role.fetch_deadline_ms, now_ms + delay)
            elif isinstance(role, UnattachedState | VotedState):
                role.election_deadline_ms = min(role.election_deadline_ms, now_ms + delay)
        leader = self.quorum.leader_id()
        self._respond(src, cid, EndQuorumEpochResponse(
            Errors.NONE, self.quorum.epoch, NO_LEADER if leader is None else leader))
