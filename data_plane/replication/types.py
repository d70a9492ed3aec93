"""Plain data in and out of the partition replication core.

The core takes metadata as a `PartitionState` (what a broker learns from the
metadata image: leader, epochs, replicas, ISR), and speaks in frozen
dataclasses that mirror the Kafka messages it needs: one partition of a
Fetch request/response (`FetchPartition`, `FetchPartitionResult`), a
produce append (`AppendResult`) and AlterPartition (`AlterPartitionRequest`,
`AlterPartitionResponse`). Wire encoding (kio) and the controller's own types
stay outside; the lead wires them to these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from raftlog.net.errors import ErrorCode
from raftlog.values import value

NO_LEADER = -1
CONSUMER_REPLICA_ID = -1
UNKNOWN_OFFSET = -1
UNKNOWN_BROKER_EPOCH = -1
#: Java's Long.MAX_VALUE: Kafka's "no limit" for long-valued settings.
LONG_MAX = (1 << 63) - 1

TopicPartition = tuple[str, int]


class Role(Enum):
    """What this replica currently is for its partition."""

    NONE = "none"  # no metadata applied yet, or stopped
    LEADER = "leader"
    FOLLOWER = "follower"


class Acks(IntEnum):
    """Produce ``acks`` (Kafka's ``RequiredAcks``)."""

    NONE = 0
    LEADER = 1
    ALL = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as the metadata image describes it (KRaft PartitionRecord).

    ``leader`` is ``NO_LEADER`` (-1) when the partition is offline; otherwise
    it is an ISR member. ``partition_epoch`` grows with every change of the
    record (KIP-497: it replaced the ZooKeeper znode version).
    """

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.partition < 0 or self.leader_epoch < 0 or self.partition_epoch < 0:
            raise ValueError(f"negative partition, leader epoch or partition epoch: {self}")
        if len(set(self.replicas)) != len(self.replicas) or len(set(self.isr)) != len(self.isr):
            raise ValueError(f"duplicate replica ids: {self}")
        if not set(self.isr) <= set(self.replicas):
            raise ValueError(f"ISR {self.isr} is not a subset of replicas {self.replicas}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} is not in the ISR {self.isr}")

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """Broker/topic settings the core needs, with Kafka's names and defaults.

    ``message.max.bytes`` comes from the log's own `raftlog.storage.LogConfig`.
    """

    # replica.lag.time.max.ms: a follower not caught up for this long leaves the ISR (KIP-537).
    replica_lag_time_max_ms: int = 30_000
    # min.insync.replicas: acks=all needs at least this many ISR members.
    min_insync_replicas: int = 1
    # unclean.leader.election.enable (KIP-106: false by default). The controller
    # decides elections; the core only tolerates the consequence (a follower
    # ahead of its new leader truncates to the leader's end).
    unclean_leader_election_enable: bool = False
    # replica.fetch.max.bytes: per-partition bytes a follower asks for.
    replica_fetch_max_bytes: int = 1_048_576
    # replica.fetch.backoff.ms: wait after a fetch error before fetching again.
    replica_fetch_backoff_ms: int = 1_000
    # Backoff before resending a failed AlterPartition (Kafka retries at 50 ms).
    alter_partition_retry_backoff_ms: int = 50
    # Resend an AlterPartition that got no answer in this long (request.timeout.ms).
    alter_partition_timeout_ms: int = 30_000
    # cleanup.policy includes compact: a produced record must have a key.
    compacted: bool = False
    # message.timestamp.before.max.ms / message.timestamp.after.max.ms
    # (KIP-937): how far before or after the broker's clock a CreateTime
    # record's timestamp may be. The core's defaults check nothing; the
    # broker passes Kafka's topic defaults (no bound before, one hour after).
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        for name in ("replica_lag_time_max_ms", "replica_fetch_max_bytes",
                     "replica_fetch_backoff_ms", "alter_partition_retry_backoff_ms",
                     "alter_partition_timeout_ms", "message_timestamp_before_max_ms",
                     "message_timestamp_after_max_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.min_insync_replicas < 1:
            raise ValueError("min.insync.replicas must be at least 1")


# ---- produce -----------------------------------------------------------------


@value
class AppendResult:
    """The leader's answer to one partition of a Produce (before any wait).

    On success ``base_offset``..``last_offset`` were assigned in
    ``leader_epoch``. For acks=all the caller waits (DelayedProduce) until
    the high watermark reaches `required_offset`.
    """

    error: ErrorCode
    base_offset: int = UNKNOWN_OFFSET
    last_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    leader_epoch: int = -1
    records_count: int = 0
    error_message: str | None = None
    # The leader's stamp for message.timestamp.type=LogAppendTime, else -1
    # (the produce response's log_append_time_ms).
    log_append_time_ms: int = -1

    @property
    def required_offset(self) -> int:
        """The HW that acknowledges the append: one past its last offset."""
        return self.last_offset + 1


# ---- fetch -------------------------------------------------------------------


@value
class EpochEndOffset:
    """Fetch v12+ ``DivergingEpoch``: the largest epoch <= the follower's last
    fetched epoch that the leader has, and where it ends in the leader's log."""

    epoch: int
    end_offset: int


@value
class FetchPartition:
    """One partition of a Fetch request.

    ``replica_id`` >= 0 marks a follower (Fetch ``ReplicaState.ReplicaId``),
    -1 a consumer. ``current_leader_epoch`` -1 skips epoch fencing (old
    clients). ``last_fetched_epoch`` -1 skips the divergence check (empty log).
    ``replica_epoch`` is the follower's broker epoch (KIP-903).
    """

    fetch_offset: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    max_bytes: int = 1_048_576
    replica_id: int = CONSUMER_REPLICA_ID
    replica_epoch: int = UNKNOWN_BROKER_EPOCH
    log_start_offset: int = UNKNOWN_OFFSET
    #: READ_COMMITTED (KIP-98): a consumer reads only below the last stable offset.
    read_committed: bool = False
    #: A consumer that may read from a follower (Fetch v11+, KIP-392): a
    #: follower serves it below its own high watermark.
    from_any_replica: bool = False

    def __post_init__(self) -> None:
        if self.fetch_offset < 0:
            raise ValueError(f"negative fetch offset {self.fetch_offset}")
        if self.max_bytes < 0:
            raise ValueError(f"negative max_bytes {self.max_bytes}")

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@value
class FetchPartitionResult:
    """One partition of a Fetch response (records stay opaque batch bytes).

    With ``diverging_epoch`` set, ``records`` is empty: the follower must
    truncate first (KIP-320).
    """

    error: ErrorCode
    high_watermark: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    records: bytes = b""
    diverging_epoch: EpochEndOffset | None = None
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    last_stable_offset: int = UNKNOWN_OFFSET
    #: (producer id, first offset) of aborted transactions overlapping a
    #: READ_COMMITTED read (Fetch ``AbortedTransactions``).
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    #: The replica a consumer should fetch from instead (KIP-392); -1: here.
    preferred_read_replica: int = -1


class FollowerFetchOutcome(Enum):
    """What a follower did with a fetch response."""

    STALE = "stale"  # the response answers a request we no longer stand behind; dropped
    APPENDED = "appended"
    NO_DATA = "no_data"
    TRUNCATED = "truncated"  # diverged (or out of range): fetch again from the new end
    RETRY_LATER = "retry_later"  # backing off replica.fetch.backoff.ms
    WAIT_FOR_METADATA = "wait_for_metadata"  # fenced: no fetching until a newer epoch


# ---- AlterPartition (KIP-497, KIP-903) -----------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerEpochPair:
    """``NewIsrWithEpochs`` entry: a replica and the broker epoch its fetch carried."""

    broker_id: int
    broker_epoch: int = UNKNOWN_BROKER_EPOCH


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """The leader asks the controller to change the ISR.

    ``change_id`` correlates the response with the pending change inside one
    `Partition` (the shell maps it to a Kafka correlation id).
    """

    change_id: int
    topic: str
    partition: int
    broker_id: int
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    new_isr_with_epochs: tuple[BrokerEpochPair, ...]

    def __post_init__(self) -> None:
        ids = [p.broker_id for p in self.new_isr_with_epochs]
        if self.broker_id not in ids:
            raise ValueError(f"the leader {self.broker_id} must stay in the proposed ISR {ids}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate ids in proposed ISR {ids}")

    @property
    def new_isr(self) -> tuple[int, ...]:
        return tuple(p.broker_id for p in self.new_isr_with_epochs)


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The controller's answer: the partition as it now stands, or an error."""

    change_id: int
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()
