"""One small class per non-leader role (Kafka `*State.java`); the leader's
lives in `raftlog.consensus.leader`.

Each role has an immutable epoch and owns its timers. Only
`raftlog.consensus.quorum_state.QuorumState` creates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftlog.consensus.snapshot import SnapshotId


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The persisted quorum state (Kafka `QuorumStateData`): written and fsynced
    before any vote is granted or any epoch change acknowledged.

    ``recovering`` marks a voter that restarted after losing its disk: it
    neither votes nor counts toward the HW until it has caught up (see
    `QuorumState`).
    """

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    recovering: bool = False

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError("epoch must be >= 0")
        if (self.leader_id is not None and self.leader_id < 0) or (
                self.voted_id is not None and self.voted_id < 0):
            raise ValueError("leader_id and voted_id are node ids (>= 0)")


class UnattachedState:
    """Knows the epoch but no leader and has not voted in it."""

    __slots__ = ("election_deadline_ms", "epoch")

    def __init__(self, epoch: int, election_deadline_ms: int) -> None:
        self.epoch = epoch
        self.election_deadline_ms = election_deadline_ms


class VotedState:
    """Has granted its (single) vote of ``epoch`` to ``voted_id``."""

    __slots__ = ("election_deadline_ms", "epoch", "voted_id")

    def __init__(self, epoch: int, voted_id: int, election_deadline_ms: int) -> None:
        self.epoch = epoch
        self.voted_id = voted_id
        self.election_deadline_ms = election_deadline_ms


@dataclass(slots=True)
class _Tally:
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)


class ProspectiveState:
    """KIP-996 pre-vote: asks whether it could win ``epoch + 1`` without
    bumping its epoch. It keeps the leader/vote of ``epoch`` (so the persisted
    state does not change) and may go back to following that leader."""

    __slots__ = ("backoff_until_ms", "election_deadline_ms", "epoch", "leader_id", "retries",
                 "tally", "voted_id")

    def __init__(self, epoch: int, *, leader_id: int | None, voted_id: int | None,
                 election_deadline_ms: int, retries: int = 0) -> None:
        self.epoch = epoch
        self.leader_id = leader_id
        self.voted_id = voted_id
        self.election_deadline_ms = election_deadline_ms
        # Rounds lost in a row (sizes the backoff); set once a majority
        # rejected this round: the next round starts then.
        self.retries = retries
        self.backoff_until_ms: int | None = None
        self.tally = _Tally()


class CandidateState:
    """Stands in ``epoch`` having voted for itself. ``backoff_until_ms`` is set
    once the election is lost or timed out; it then waits before pre-voting."""

    __slots__ = ("backoff_until_ms", "election_deadline_ms", "epoch", "retries", "tally")

    def __init__(self, epoch: int, *, local_id: int, retries: int,
                 election_deadline_ms: int) -> None:
        self.epoch = epoch
        self.retries = retries
        self.election_deadline_ms = election_deadline_ms
        self.backoff_until_ms: int | None = None
        self.tally = _Tally(granted={local_id})


class FollowerState:
    """Follows ``leader_id`` in ``epoch``. ``fetch_deadline_ms`` is the
    fetch-timeout: no successful fetch by then means the leader is gone."""

    __slots__ = ("epoch", "fetch_deadline_ms", "fetch_in_flight_until_ms",
                 "has_fetched_from_leader", "leader_id", "leader_unreachable",
                 "snapshot_buffer", "snapshot_fetching")

    def __init__(self, epoch: int, leader_id: int, fetch_deadline_ms: int) -> None:
        self.epoch = epoch
        self.leader_id = leader_id
        self.fetch_deadline_ms = fetch_deadline_ms
        # Kafka's FollowerState.hasFetchedFromLeader: until the first successful
        # fetch in this epoch the follower may grant pre-votes (KIP-996).
        self.has_fetched_from_leader = False
        # The last request to the leader failed at the transport (connection
        # refused or lost, request timed out) and no fetch succeeded since.
        self.leader_unreachable = False
        # A request (Fetch or FetchSnapshot) is outstanding until then; None if none.
        self.fetch_in_flight_until_ms: int | None = None
        self.snapshot_fetching: SnapshotId | None = None
        self.snapshot_buffer = bytearray()


class ResignedState:
    """A leader that stepped down (gracefully, or on failing check-quorum) and
    waits for a successor. It never leads ``epoch`` again."""

    __slots__ = ("election_deadline_ms", "epoch", "preferred_successors", "unacknowledged")

    def __init__(self, epoch: int, preferred_successors: tuple[int, ...],
                 election_deadline_ms: int) -> None:
        self.epoch = epoch
        self.preferred_successors = preferred_successors
        self.unacknowledged = set(preferred_successors)
        self.election_deadline_ms = election_deadline_ms
