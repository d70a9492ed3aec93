"""Which ``__consumer_offsets`` partition owns a group (FindCoordinator key type group).

Kafka hashes with Java's ``String.hashCode`` and ``Utils.abs``:
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``
(``GroupCoordinatorService.partitionFor``). ``Utils.abs`` maps
``Integer.MIN_VALUE`` to 0, unlike ``Math.abs``. We must agree bit-for-bit, or Kafka
tools pointed at raftlog would look for a group on the wrong broker.
"""

from __future__ import annotations

from metadata_quorum.topic_names import GROUP_METADATA_TOPIC

#: ``offsets.topic.num.partitions`` default (Kafka).
DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS = 50
#: The internal topic's name.
OFFSETS_TOPIC = GROUP_METADATA_TOPIC

_INT32_MIN = -(2**31)


def java_string_hash_code(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def partition_for_group(
    group_id: str, num_partitions: int = DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS
) -> int:
    """The offsets-topic partition for ``group_id``, exactly as Kafka computes it.

    A hash of ``Integer.MIN_VALUE`` maps to partition 0 (``Utils.abs``).
    Raises ValueError if ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hash_code(group_id)
    if h == _INT32_MIN:
        return 0
    return abs(h) % num_partitions
