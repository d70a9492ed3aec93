"""Consumer groups: the classic group coordinator and committed offsets (ARCHITECTURE.md "Groups").

Modules, by role:

- ``partitioning``: group id -> ``__consumer_offsets`` partition (Kafka's hash).
- ``records``: byte-compatible keys and values of ``__consumer_offsets``.
- ``model``: the coordinator's requests, responses and ``CoordinatorResult``.
- ``group``: one classic group's state machine and membership.
- ``offsets``: committed and pending (transactional) offsets.
- ``shard``: ``GroupCoordinatorShard``, the sans-I/O coordinator of one partition.
- ``replies``: what to answer when an append fails.
- ``wire``: kio <-> model mapping for the broker.
- ``describe``: kafka-consumer-groups.sh-style text.

Only the classic protocol is implemented (KIP-848's consumer protocol is not).
"""

from .group import ClassicGroup, GroupState, Member
from .model import CoordinatorResult, GroupConfig, OffsetsRecord, Reply, TopicPartition, TxnProducer
from .partitioning import DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS, OFFSETS_TOPIC, partition_for_group
from .replies import append_error_reply, coordinator_error_for_append
from .shard import GroupCoordinatorShard

__all__ = [
    "DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS",
    "OFFSETS_TOPIC",
    "ClassicGroup",
    "CoordinatorResult",
    "GroupConfig",
    "GroupCoordinatorShard",
    "GroupState",
    "Member",
    "OffsetsRecord",
    "Reply",
    "TopicPartition",
    "TxnProducer",
    "append_error_reply",
    "coordinator_error_for_append",
    "partition_for_group",
]
