"""The partition replica core (issue 5 §1): the public names of
`data_plane.replication`, whose modules are split by role (types, ISR maths,
leader, follower, the `Partition` that owns the role)."""

from data_plane.replication.follower import FollowerState, divergence_truncation_offset
from data_plane.replication.isr import (
    can_join_isr,
    high_watermark_candidate,
    is_caught_up,
    next_high_watermark,
    next_last_caught_up_time_ms,
)
from data_plane.replication.leader import LeaderState, PendingIsrChange, ReplicaFetchState
from data_plane.replication.partition import Partition, PartitionStateError
from data_plane.replication.types import (
    CONSUMER_REPLICA_ID,
    NO_LEADER,
    UNKNOWN_BROKER_EPOCH,
    UNKNOWN_OFFSET,
    Acks,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AppendResult,
    BrokerEpochPair,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResult,
    FollowerFetchOutcome,
    PartitionState,
    ReplicationConfig,
    Role,
    TopicPartition,
)

__all__ = [
    "CONSUMER_REPLICA_ID",
    "NO_LEADER",
    "UNKNOWN_BROKER_EPOCH",
    "UNKNOWN_OFFSET",
    "Acks",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AppendResult",
    "BrokerEpochPair",
    "EpochEndOffset",
    "FetchPartition",
    "FetchPartitionResult",
    "FollowerFetchOutcome",
    "FollowerState",
    "LeaderState",
    "Partition",
    "PartitionState",
    "PartitionStateError",
    "PendingIsrChange",
    "ReplicaFetchState",
    "ReplicationConfig",
    "Role",
    "TopicPartition",
    "can_join_isr",
    "divergence_truncation_offset",
    "high_watermark_candidate",
    "is_caught_up",
    "next_high_watermark",
    "next_last_caught_up_time_ms",
]
