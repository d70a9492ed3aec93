"""The KRaft RPCs as plain, validated data (KIP-595, KIP-630, KIP-836, KIP-996, KIP-1166).

Field names follow Kafka's JSON message specs so the kio mapping is one to
one. Every request and response travels inside an `Envelope` naming its
source and destination; the transport turns envelopes into Kafka frames and
back (pairing responses with requests by correlation id).
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.consensus.errors import Errors
from raftlog.consensus.snapshot import SnapshotId

NO_LEADER = -1
"""Kafka's wire sentinel for "no leader known" (LeaderId = -1)."""

ANONYMOUS_REPLICA = -1
"""ReplicaId of an observer that must not be counted as a voter (KAFKA-12161)."""

HIGH_WATERMARK_UNKNOWN = -1
"""A fetcher's HighWatermark when it knows none yet (KIP-1166)."""

HIGH_WATERMARK_UNSUPPORTED = 2**63 - 1
"""A fetcher's HighWatermark when it does not send one (Fetch v17 and older,
KIP-1166's default): the leader parks its empty fetches as before."""


def _check_epoch(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _check_offset(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote (API 52). With ``pre_vote`` (KIP-996) the sender keeps its epoch;
    ``candidate_epoch`` is then the epoch it would stand in."""

    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int  # epoch of the candidate's last log entry
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False

    def __post_init__(self) -> None:
        _check_epoch("candidate_epoch", self.candidate_epoch)
        _check_epoch("last_offset_epoch", self.last_offset_epoch)
        _check_offset("last_offset", self.last_offset)
        if self.last_offset_epoch > self.candidate_epoch:
            raise ValueError("a candidate's last epoch cannot exceed its candidate epoch")


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """Reply to `VoteRequest`. ``leader_epoch``/``leader_id`` are the voter's view.

    Like Kafka's, it does not say whether it answers a pre-vote: the candidate
    knows from the correlation id of its request.
    """

    error: Errors
    leader_epoch: int
    leader_id: int
    vote_granted: bool

    def __post_init__(self) -> None:
        _check_epoch("leader_epoch", self.leader_epoch)
        if self.vote_granted and self.error is not Errors.NONE:
            raise ValueError("a granted vote carries no error")


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """BeginQuorumEpoch (API 53): the new leader announces itself."""

    leader_epoch: int
    leader_id: int

    def __post_init__(self) -> None:
        _check_epoch("leader_epoch", self.leader_epoch)
        if self.leader_id < 0:
            raise ValueError("leader_id must be >= 0")


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    """Acknowledges `BeginQuorumEpochRequest` (only liveness depends on it)."""

    error: Errors
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """EndQuorumEpoch (API 54): a resigning leader asks voters to elect now.

    ``preferred_successors`` is ordered best first (by replication progress);
    a voter further down the list waits longer before standing.
    """

    leader_epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_epoch("leader_epoch", self.leader_epoch)
        if len(set(self.preferred_successors)) != len(self.preferred_successors):
            raise ValueError("preferred_successors has duplicates")


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    """Acknowledges `EndQuorumEpochRequest`."""

    error: Errors
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """The largest (epoch, end offset) at which the leader's log may match the
    follower's; the follower truncates to ``end_offset`` (KIP-595)."""

    epoch: int
    end_offset: int

    def __post_init__(self) -> None:
        _check_epoch("epoch", self.epoch)
        _check_offset("end_offset", self.end_offset)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Fetch (API 1, v13+ shape) from a follower or observer to the leader.

    ``fetch_offset`` doubles as the acknowledgement that everything below it
    is durable on the fetcher, which is why followers fsync before fetching.
    ``high_watermark`` is the HW the fetcher knows (KIP-1166, Fetch v18): a
    leader that knows a higher one answers at once instead of parking the
    fetch, so a committed change reaches every replica without waiting out
    ``max_wait_ms``.
    """

    replica_id: int  # ANONYMOUS_REPLICA for an observer that must not count
    leader_epoch: int  # the fetcher's current epoch (CurrentLeaderEpoch)
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int
    high_watermark: int = HIGH_WATERMARK_UNSUPPORTED

    def __post_init__(self) -> None:
        _check_epoch("leader_epoch", self.leader_epoch)
        _check_offset("fetch_offset", self.fetch_offset)
        _check_epoch("last_fetched_epoch", self.last_fetched_epoch)
        if self.max_wait_ms < 0 or self.max_bytes <= 0:
            raise ValueError("max_wait_ms must be >= 0 and max_bytes > 0")
        if self.replica_id < ANONYMOUS_REPLICA:
            raise ValueError(f"bad replica_id {self.replica_id}")
        if self.high_watermark < HIGH_WATERMARK_UNKNOWN:
            raise ValueError(f"high_watermark must be >= -1, got {self.high_watermark}")


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """Reply to `FetchRequest`. At most one of records, ``diverging_epoch`` and
    ``snapshot_id`` is meaningful; ``high_watermark`` is -1 when unknown."""

    error: Errors
    leader_epoch: int
    leader_id: int
    high_watermark: int
    log_start_offset: int
    records: bytes = b""
    diverging_epoch: DivergingEpoch | None = None
    snapshot_id: SnapshotId | None = None

    def __post_init__(self) -> None:
        _check_epoch("leader_epoch", self.leader_epoch)
        if self.high_watermark < -1:
            raise ValueError("high_watermark must be >= -1")
        kinds = sum((bool(self.records), self.diverging_epoch is not None,
                     self.snapshot_id is not None))
        if kinds > 1:
            raise ValueError("a fetch response carries records, a divergence or a snapshot id")
        if self.error is not Errors.NONE and kinds:
            raise ValueError("an error response carries no data")


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """FetchSnapshot (API 59, KIP-630): read ``snapshot_id`` from ``position``."""

    replica_id: int
    leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int

    def __post_init__(self) -> None:
        _check_epoch("leader_epoch", self.leader_epoch)
        if self.position < 0 or self.max_bytes <= 0:
            raise ValueError("position must be >= 0 and max_bytes > 0")


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """One chunk of a snapshot; ``size`` is the whole snapshot's size."""

    error: Errors
    leader_epoch: int
    leader_id: int
    snapshot_id: SnapshotId | None = None
    size: int = 0
    position: int = 0
    unaligned_records: bytes = b""

    def __post_init__(self) -> None:
        if self.error is Errors.NONE:
            if self.snapshot_id is None:
                raise ValueError("a successful FetchSnapshot response names its snapshot")
            if not 0 <= self.position <= self.size:
                raise ValueError("position outside the snapshot")
            if self.position + len(self.unaligned_records) > self.size:
                raise ValueError("chunk runs past the end of the snapshot")


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    """DescribeQuorum (API 55, KIP-836)."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica as the leader sees it (KIP-836). -1 means unknown."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    """The leader's view of the quorum; an error from any other node."""

    error: Errors
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
)
Body = Request | Response


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message on the way from ``source`` to ``destination`` (node ids)."""

    source: int
    destination: int
    body: Body
    # Set by the sender of a request; a response echoes its request's id. The
    # transport maps it to Kafka's correlation id. A node accepts a response
    # only for a request it still has outstanding (duplicates and stale
    # replies are dropped, as a real connection would never deliver them).
    correlation_id: int = 0

    def __post_init__(self) -> None:
        if self.source < 0 or self.destination < 0:
            raise ValueError("envelope endpoints are node ids (>= 0)")
        if self.correlation_id < 0:
            raise ValueError("correlation_id must be >= 0")
