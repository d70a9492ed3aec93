"""Kafka's default partitioner: which partition a keyed record goes to.

A client-side helper (the broker never partitions): the REST API's
produce, the Spark sink and tests use it, so that a record lands where a
Kafka producer would put it. Kafka's ``BuiltInPartitioner`` hashes a
non-null key with ``Utils.murmur2`` and takes ``toPositive(hash) %
numPartitions``; librdkafka's ``murmur2_random`` partitioner does the same.
"""

from __future__ import annotations

__all__ = ("murmur2", "partition_for_key")

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as a signed 32-bit int (Java's)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``toPositive(murmur2(key)) % num_partitions``. Raises ValueError for
    ``num_partitions < 1``."""
    if num_partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
