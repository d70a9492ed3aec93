"""Group -> __consumer_offsets partition must match Kafka's (Utils.abs(String.hashCode) % 50)."""

from __future__ import annotations

import pytest

from data_plane.groups.partitioning import java_string_hash_code, partition_for_group


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),  # Java: "hello".hashCode()
        ("Aa", 2112),  # the classic collision pair
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
        ("\u00e9t\u00e9", 0xE9 * 31 * 31 + 0x74 * 31 + 0xE9),
    ],
)
def test_java_string_hash_code(text: str, expected: int) -> None:
    assert java_string_hash_code(text) == expected


def test_partition_for_group_is_abs_hash_mod_partitions() -> None:
    assert partition_for_group("hello") == 99162322 % 50
    assert partition_for_group("hello", 7) == 99162322 % 7


def test_utils_abs_maps_min_value_to_partition_zero() -> None:
    assert partition_for_group("polygenelubricants") == 0


def test_negative_hash_uses_absolute_value() -> None:
    text = next(f"group-{i}" for i in range(1000) if java_string_hash_code(f"group-{i}") < 0)
    h = java_string_hash_code(text)
    assert partition_for_group(text) == (-h) % 50


def test_non_bmp_characters_hash_as_utf16_surrogates() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in Java's UTF-16.
    assert java_string_hash_code("\U0001f600") == 0xD83D * 31 + 0xDE00


def test_rejects_non_positive_partition_count() -> None:
    with pytest.raises(ValueError):
        partition_for_group("g", 0)
