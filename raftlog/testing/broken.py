"""Deliberately broken cores for the simulator's self-test (never used by
default): if the simulation cannot catch these, it cannot catch much."""

from __future__ import annotations

from raftlog.consensus.core import KRaftCore
from raftlog.consensus.leader import LeaderState


class GrantVoteToShorterLogCore(KRaftCore):
    """Breaks the Raft election restriction (thesis 3.6.1, KIP-595 Vote):
    votes for candidates whose log is behind ours."""

    _vote_requires_up_to_date_log = False


class PreVoteIgnoresHigherEpochCore(KRaftCore):
    """Drops the KIP-996 liveness rule (Kafka's handleVoteRequest): a pre-vote
    from a voter in a higher epoch leaves the receiver's epoch alone, so a
    voter that lost an election while cut off stays Prospective above the
    leader's epoch for good. Safe, but not live."""

    _pre_vote_from_higher_epoch_moves_epoch = False


class _PreviousEpochHighWatermarkLeader(LeaderState):
    require_own_epoch_entry = False


class PreviousEpochHighWatermarkCore(KRaftCore):
    """Breaks "commit an entry of your own epoch first" (thesis 3.6.2): the
    leader's HW may advance over entries of earlier epochs only."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.quorum._make_leader_class = _PreviousEpochHighWatermarkLeader


BROKEN_VARIANTS: dict[str, type[KRaftCore]] = {
    "grant_vote_to_shorter_log": GrantVoteToShorterLogCore,
    "hw_on_previous_epoch_entry": PreviousEpochHighWatermarkCore,
    "pre_vote_ignores_higher_epoch": PreVoteIgnoresHigherEpochCore,
}
