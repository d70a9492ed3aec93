"""`raftlog get-offsets`'s argument parsing (kafka-get-offsets.sh's rules);
the command itself runs against a cluster in test_cluster_admin.py."""

from __future__ import annotations

import pytest

from data_plane.admin_cli import CliError
from data_plane.offsets_cli import format_offsets, parse_time, parse_topic_partitions


def matching(spec: str, candidates: list[tuple[str, int]]) -> list[tuple[str, int]]:
    rules = parse_topic_partitions(spec)
    return [tp for tp in candidates if any(r.matches(*tp) for r in rules)]


TPS = [(t, p) for t in ("orders", "orders-eu", "audit") for p in range(6)]


def test_topic_partition_patterns() -> None:
    assert matching("orders:1", TPS) == [("orders", 1)]
    assert matching("orders:2-4", TPS) == [("orders", 2), ("orders", 3)]  # upper exclusive
    assert matching("audit:4-", TPS) == [("audit", 4), ("audit", 5)]
    assert matching("audit:-2", TPS) == [("audit", 0), ("audit", 1)]
    assert matching("orders.*:5", TPS) == [("orders", 5), ("orders-eu", 5)]
    assert matching(":0", TPS) == [("orders", 0), ("orders-eu", 0), ("audit", 0)]
    assert matching("audit", TPS) == [("audit", p) for p in range(6)]
    assert matching("orders:0,audit:1", TPS) == [("orders", 0), ("audit", 1)]
    assert matching("ord", TPS) == []  # the whole name must match
    for bad in ("orders:x", "orders:1:2", "(:1"):
        with pytest.raises(CliError):
            parse_topic_partitions(bad)


def test_times() -> None:
    assert [parse_time(t) for t in ("latest", "earliest", "max-timestamp", "earliest-local",
                                    "latest-tiered")] == [-1, -2, -3, -4, -5]
    assert [parse_time(t) for t in ("-1", "-5", "0", "1700000000000")] \
        == [-1, -5, 0, 1_700_000_000_000]
    for bad in ("-6", "soon", "1.5", ""):
        with pytest.raises(CliError, match="Malformed time argument"):
            parse_time(bad)


def test_lines_are_sorted_as_kafka_sorts_topic_partitions_and_skip_missing_offsets() -> None:
    offsets = {("t", 10): 4, ("t", 2): 7, ("t", 1): -1, ("s", 3): 0}
    assert format_offsets(offsets) == ["s:3:0", "t:10:4", "t:2:7"]
