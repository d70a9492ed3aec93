"""`raftlog producer-perf-test` / `consumer-perf-test`: the parts that need
no cluster (the cluster run is in test_cluster_clients.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from data_plane.admin_cli import CliError
from data_plane.perf_cli import _payloads, latency_summary


def test_latency_summary_is_kafkas_whole_millisecond_percentiles() -> None:
    latencies = [float(i) for i in range(1, 1001)]  # 1..1000 ms
    avg, worst, p50, p95, p99, p999 = latency_summary(latencies)
    assert (avg, worst) == (500.5, 1000.0)
    assert (p50, p95, p99, p999) == (501, 951, 991, 1000)
    assert latency_summary([]) == (0.0, 0.0, 0, 0, 0, 0)
    assert latency_summary([2.7]) == (2.7, 2.7, 2, 2, 2, 2)


def _args(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**{"payload_file": None, "record_size": None,
                                 "payload_delimiter": "\\n", **values})


def test_payloads_of_a_size_or_from_a_file(tmp_path: Path) -> None:
    (one,) = _payloads(_args(record_size=64))
    assert len(one) == 64 and set(one) <= set(range(65, 91))  # uppercase letters
    path = tmp_path / "payloads.txt"
    path.write_bytes(b"alpha\nbeta\n\ngamma")
    assert _payloads(_args(payload_file=str(path))) == [b"alpha", b"beta", b"gamma"]
    path.write_bytes(b"a|b")
    assert _payloads(_args(payload_file=str(path), payload_delimiter="|")) == [b"a", b"b"]
    path.write_bytes(b"")
    with pytest.raises(CliError, match="has no payloads"):
        _payloads(_args(payload_file=str(path)))
    with pytest.raises(CliError, match="cannot read"):
        _payloads(_args(payload_file=str(tmp_path / "nowhere")))
