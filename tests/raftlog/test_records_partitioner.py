"""Kafka's default partitioner: murmur2 against Java's own test vectors
(``UtilsTest.testMurmur2``) and the partition it picks for a key."""

from __future__ import annotations

import pytest

from raftlog.records.partitioner import murmur2, partition_for_key

JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS)
def test_murmur2_matches_java(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_the_positive_hash_modulo_the_partition_count() -> None:
    # -973932308 & 0x7fffffff = 1173551340; 1173551340 % 5 = 0
    assert partition_for_key(b"21", 5) == (-973932308 & 0x7FFFFFFF) % 5
    assert all(0 <= partition_for_key(k, 7) < 7 for k, _ in JAVA_VECTORS)
    assert partition_for_key(b"", 3) == (murmur2(b"") & 0x7FFFFFFF) % 3


def test_a_topic_without_partitions_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)
