"""`QuorumState`: the one owner of the node's current role."""

from __future__ import annotations

import random

from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.errors import IllegalTransitionError
from raftlog.consensus.leader import LeaderState
from raftlog.consensus.roles import (
    CandidateState,
    ElectionState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    VotedState,
)

Role = (
    UnattachedState
    | VotedState
    | ProspectiveState
    | CandidateState
    | LeaderState
    | FollowerState
    | ResignedState
)


class QuorumState:
    """Owns the current role and the persisted `ElectionState`.

    Legal transitions (E is the current epoch, E' any larger epoch):

    ============== ==========================================================
    from           to
    ============== ==========================================================
    Unattached(E)  Unattached(E'), Voted(E), Voted(E'), Prospective(E),
                   Follower(E), Follower(E')
    Voted(E)       Unattached(E'), Voted(E'), Prospective(E), Follower(E),
                   Follower(E')
    Prospective(E) Unattached(E'), Voted(E) (if it neither voted nor knew a
                   leader in E), Voted(E'), Prospective(E) (new round),
                   Candidate(E+1), Follower(E) (its retained leader or a new
                   one if it knew none), Follower(E')
    Candidate(E)   Unattached(E'), Voted(E'), Leader(E), Prospective(E)
                   (after losing, once its backoff ends), Follower(E),
                   Follower(E')
    Leader(E)      Resigned(E), Unattached(E'), Voted(E'), Follower(E')
    Follower(E)    Unattached(E'), Voted(E'), Prospective(E) (fetch timeout),
                   Follower(E'); observers only: Unattached(E) (fetch timeout)
    Resigned(E)    Unattached(E'), Voted(E'), Prospective(E), Follower(E')
    ============== ==========================================================

    What moves a node to a higher epoch E': a BeginQuorumEpoch, a response
    or a fetch answer naming E' (Follower(E') with a leader, else
    Unattached(E')), an EndQuorumEpoch of E', and a Vote request from a voter
    in E' -- a real vote of a candidate of E', and equally a pre-vote of a
    Prospective(E') voter (Kafka 4.x ``KafkaRaftClient.handleVoteRequest``).
    The latter is the only way out of a stall where a voter that lost an
    election sits Prospective in an epoch above the leader's (see
    `raftlog.consensus.election.ElectionMixin.handle_vote_request`): a
    Leader(E) or Follower(E) that hears it goes to Unattached(E').

    A node that is not a voter (an observer, or a voter recovering from disk
    loss) only ever is Unattached or Follower. Every transition that changes
    (epoch, leader id, voted id) marks the election state as unpersisted; the
    core puts it in the next `Ready` and sends nothing before it is fsynced.
    """

    def __init__(self, *, local_id: int, config: QuorumConfig, rng: random.Random,
                 stored: ElectionState | None, now_ms: int) -> None:
        self.local_id = local_id
        self.config = config
        self._rng = rng
        # The leader role's class; only the simulator's self-test swaps it.
        self._make_leader_class: type[LeaderState] = LeaderState
        state = stored if stored is not None else ElectionState(epoch=0)
        self._election = state
        self._unpersisted: ElectionState | None = None if stored is not None else state
        self.recovering = state.recovering
        epoch = state.epoch
        # After a restart a node never resumes leadership: Kafka starts a
        # former leader as Resigned, a former candidate as Unattached-with-vote.
        deadline = now_ms + self.random_election_timeout_ms()
        self.role: Role
        if state.voted_id is not None:
            self.role = VotedState(epoch, state.voted_id, deadline)
        else:
            self.role = UnattachedState(epoch, deadline)
        if state.leader_id is not None and state.leader_id == local_id and self.is_voter:
            self.role = ResignedState(epoch, (), deadline)
        elif state.leader_id is not None and state.leader_id != local_id:
            self.role = FollowerState(epoch, state.leader_id, now_ms + config.fetch_timeout_ms)

    # -- queries -------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.role.epoch

    @property
    def is_voter(self) -> bool:
        """Whether this node may vote, stand and count toward the HW."""
        return self.local_id in self.config.voters and not self.recovering

    @property
    def election_state(self) -> ElectionState:
        return self._election

    def leader_id(self) -> int | None:
        """The leader of the current epoch, if known."""
        role = self.role
        if isinstance(role, LeaderState | ResignedState):
            return self.local_id
        if isinstance(role, FollowerState):
            return role.leader_id
        if isinstance(role, ProspectiveState):
            return role.leader_id
        return None

    def voted_id(self) -> int | None:
        role = self.role
        if isinstance(role, VotedState | ProspectiveState):
            return role.voted_id
        if isinstance(role, CandidateState | LeaderState | ResignedState):
            return self.local_id
        return self._election.voted_id if self._election.epoch == role.epoch else None

    def has_unpersisted(self) -> bool:
        return self._unpersisted is not None

    def take_unpersisted(self) -> ElectionState | None:
        """The election state to fsync before the next send, once."""
        pending, self._unpersisted = self._unpersisted, None
        return pending

    def random_election_timeout_ms(self) -> int:
        """Kafka's randomised election timeout: [T, 2T)."""
        timeout = self.config.election_timeout_ms
        return timeout + self._rng.randrange(timeout)

    def election_backoff_ms(self, retries: int) -> int:
        """Randomised binary-exponential backoff, capped at election.backoff.max.ms."""
        cap = min(self.config.election_backoff_max_ms,
                  self.config.retry_backoff_ms * (1 << min(retries, 20)))
        return self._rng.randrange(cap + 1)

    # -- transitions -----------------------------------------------------------

    def transition_to_unattached(self, epoch: int, now_ms: int) -> None:
        """Learn a higher epoch with no leader and no vote; or, for an observer
        whose leader stopped answering, forget the leader of this epoch."""
        same_epoch_observer = (epoch == self.epoch and not self.is_voter
                               and isinstance(self.role, FollowerState))
        if epoch <= self.epoch and not same_epoch_observer:
            raise IllegalTransitionError(
                f"Unattached({epoch}) from {self._describe()}: epoch must grow")
        self.role = UnattachedState(epoch, now_ms + self.random_election_timeout_ms())
        self._persist(ElectionState(epoch, None, None, self.recovering))

    def transition_to_voted(self, epoch: int, candidate_id: int, now_ms: int) -> None:
        """Grant this epoch's one vote to ``candidate_id``."""
        if not self.is_voter:
            raise IllegalTransitionError("a non-voter cannot vote")
        if candidate_id == self.local_id:
            raise IllegalTransitionError("voting for oneself goes through Candidate")
        role = self.role
        if epoch < role.epoch:
            raise IllegalTransitionError(f"Voted({epoch}) from {self._describe()}")
        if epoch == role.epoch:
            fresh_unattached = isinstance(role, UnattachedState)
            fresh_prospective = (isinstance(role, ProspectiveState)
                                 and role.voted_id is None and role.leader_id is None)
            if not (fresh_unattached or fresh_prospective):
                raise IllegalTransitionError(
                    f"Voted({epoch}, {candidate_id}) from {self._describe()}: "
                    "one vote per epoch")
        self.role = VotedState(epoch, candidate_id, now_ms + self.random_election_timeout_ms())
        self._persist(ElectionState(epoch, None, candidate_id, self.recovering))

    def transition_to_prospective(self, now_ms: int) -> None:
        """Start (or restart) a pre-vote round for epoch + 1 (KIP-996)."""
        if not self.is_voter:
            raise IllegalTransitionError("a non-voter cannot stand")
        role = self.role
        if isinstance(role, LeaderState):
            raise IllegalTransitionError("a leader resigns before it stands again")
        if isinstance(role, CandidateState) and role.backoff_until_ms is None:
            raise IllegalTransitionError("a candidate pre-votes again only after losing")
        leader_id = role.leader_id if isinstance(role, FollowerState | ProspectiveState) else None
        if isinstance(role, ResignedState):
            leader_id = None
        voted_id = self.voted_id()
        deadline = now_ms + self.random_election_timeout_ms()
        retries = role.retries + 1 if isinstance(role, ProspectiveState) else 0
        self.role = ProspectiveState(role.epoch, leader_id=leader_id, voted_id=voted_id,
                                     election_deadline_ms=deadline, retries=retries)
        self.role.tally.granted.add(self.local_id)
        # Same epoch, leader and vote: nothing new to persist (that is the
        # point of pre-vote: a failed round leaves no trace).

    def transition_to_candidate(self, now_ms: int) -> None:
        """Bump the epoch and vote for oneself (after winning a pre-vote)."""
        role = self.role
        if not isinstance(role, ProspectiveState):
            raise IllegalTransitionError(f"Candidate from {self._describe()}")
        if not self.is_voter:
            raise IllegalTransitionError("a non-voter cannot stand")
        retries = 0
        self.role = CandidateState(role.epoch + 1, local_id=self.local_id, retries=retries,
                                   election_deadline_ms=now_ms + self.random_election_timeout_ms())
        self._persist(ElectionState(role.epoch + 1, None, self.local_id, self.recovering))

    def transition_to_leader(self, *, epoch_start_offset: int, high_watermark: int,
                             now_ms: int) -> LeaderState:
        """Become leader after a majority granted their votes."""
        role = self.role
        if not isinstance(role, CandidateState):
            raise IllegalTransitionError(f"Leader from {self._describe()}")
        if len(role.tally.granted) < self.config.majority:
            raise IllegalTransitionError("leader without a majority of votes")
        leader = self._make_leader(role.epoch, epoch_start_offset, high_watermark, now_ms)
        self.role = leader
        self._persist(ElectionState(role.epoch, self.local_id, self.local_id, self.recovering))
        return leader

    def _make_leader(self, epoch: int, epoch_start_offset: int, high_watermark: int,
                     now_ms: int) -> LeaderState:
        return self._make_leader_class(local_id=self.local_id, epoch=epoch, voters=self.config.voters,
                           epoch_start_offset=epoch_start_offset,
                           high_watermark=high_watermark, now_ms=now_ms,
                           check_quorum_timeout_ms=self.config.fetch_timeout_ms)

    def transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        """Follow ``leader_id``, the leader of ``epoch``."""
        role = self.role
        if leader_id == self.local_id:
            raise IllegalTransitionError("cannot follow oneself")
        if epoch < role.epoch:
            raise IllegalTransitionError(f"Follower({epoch}) from {self._describe()}")
        if epoch == role.epoch:
            if isinstance(role, LeaderState | ResignedState):
                raise IllegalTransitionError(
                    f"Follower({epoch}, {leader_id}) from {self._describe()}: "
                    "two leaders in one epoch")
            known = self.leader_id()
            if known is not None and known != leader_id:
                raise IllegalTransitionError(
                    f"Follower({epoch}, {leader_id}) from {self._describe()}: "
                    "two leaders in one epoch")
            if isinstance(role, FollowerState):
                raise IllegalTransitionError("already following this leader")
        voted = self.voted_id() if epoch == role.epoch else None
        self.role = FollowerState(epoch, leader_id, now_ms + self.config.fetch_timeout_ms)
        self._persist(ElectionState(epoch, leader_id, voted, self.recovering))

    def transition_to_resigned(self, preferred_successors: tuple[int, ...], now_ms: int) -> None:
        """Step down from leadership of this epoch (graceful or check-quorum)."""
        role = self.role
        if not isinstance(role, LeaderState):
            raise IllegalTransitionError(f"Resigned from {self._describe()}")
        self.role = ResignedState(role.epoch, preferred_successors,
                                  now_ms + self.random_election_timeout_ms())

    def begin_recovery(self) -> None:
        """Mark a voter that restarted on an empty disk (KAFKA-14077): until it
        has caught up it neither votes, stands, nor counts toward the HW."""
        if self.local_id not in self.config.voters:
            raise IllegalTransitionError("only a voter recovers from disk loss")
        if isinstance(self.role, LeaderState | CandidateState | ProspectiveState | ResignedState):
            raise IllegalTransitionError(f"cannot begin recovery as {self._describe()}")
        self.recovering = True
        e = self._election
        self._persist(ElectionState(e.epoch, e.leader_id, e.voted_id, True))

    def finish_recovery(self) -> None:
        """A voter that lost its disk has caught up: it votes again from now on."""
        if not self.recovering:
            raise IllegalTransitionError("not recovering")
        if not isinstance(self.role, FollowerState):
            raise IllegalTransitionError("recovery ends while following a leader")
        self.recovering = False
        e = self._election
        self._persist(ElectionState(e.epoch, e.leader_id, e.voted_id, False))

    # -- helpers -----------------------------------------------------------------

    def _persist(self, state: ElectionState) -> None:
        if state != self._election:
            self._election = state
            self._unpersisted = state

    def _describe(self) -> str:
        return f"{type(self.role).__name__}({self.role.epoch})"
