"""Consumer groups: the group coordinator (classic and KIP-848 protocols) and committed offsets (ARCHITECTURE.md "Groups").

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

KIP-848 consumer groups (``group.protocol=consumer``):

- ``consumer_records``: their ``__consumer_offsets`` records (types 3-8).
- ``consumer_group``: one group's members, epochs, target assignment and
  each member's reconciliation; replay of the records.
- ``assignors``: the server-side ``uniform`` and ``range`` assignors.
- ``consumer_model``, ``consumer_commands``, ``consumer_wire``: the
  heartbeat and describe commands, and their kio mapping.
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
