"""Real chaos runs against real node processes (loopback proxy mode).

- smoke (default suite, < 3 min): kill + partition on 3 nodes, a few hundred
  ops; the verdict must be valid.
- unsafe mode (proof the suite can fail): nodes acknowledge acks=all before
  the HW (``RAFTLOG_UNSAFE_ACK_BEFORE_HW``); killing leaders must show lost
  writes.
- the unsafe setting is refused without its confirmation flag.
- soak (marker ``soak``): many seeds, every nemesis.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.runner import RunOptions, run

UNSAFE = {"RAFTLOG_UNSAFE_ACK_BEFORE_HW": "1", "RAFTLOG_I_KNOW_THIS_IS_UNSAFE": "1"}


def test_smoke_kill_and_partition_is_valid(tmp_path: Path) -> None:
    opts = RunOptions(seed=1, faults=("kill", "partition"), time_limit_s=30, rate_hz=40,
                      quiet_s=6, interval_s=8, duration_s=4, mode="proxy",
                      out=str(tmp_path / "run"))
    outcome = asyncio.run(run(opts))
    print(outcome.ops, outcome.counts, outcome.valid)
    assert outcome.counts["ok"] > 100
    assert outcome.valid is True, outcome.result.to_json()
    assert (tmp_path / "run" / "index.html").exists()


def test_unsafe_ack_before_hw_is_caught(tmp_path: Path) -> None:
    """Deterministic in what matters: the ``isolate-then-kill-leader``
    schedule cuts the leader of the (only) partition off from its followers,
    lets it acknowledge writes alone, kills it and elects a follower that
    never had them. Three such episodes per run; each loses every write the
    isolated leader acknowledged, so one run suffices (no lucky kills)."""
    opts = RunOptions(seed=3, faults=("isolate-then-kill-leader",), time_limit_s=26,
                      rate_hz=60, quiet_s=6, interval_s=8, duration_s=5, partitions=1,
                      mode="proxy", out=str(tmp_path / "run"), env=UNSAFE)
    outcome = asyncio.run(run(opts))
    lost = outcome.result.children["lost-writes"]
    history = (tmp_path / "run" / "history.jsonl").read_text()
    print(outcome.counts, {k: len(v) for k, v in lost.anomalies.items()})
    assert history.count('"kill-isolated-leader"') >= 4  # invoke + completion, >= 2 episodes
    assert outcome.valid is False
    assert lost.valid is False and lost.anomaly_count() > 0
    assert set(lost.anomalies) <= {"lost-write", "lost-at-end"}


@pytest.mark.long
def test_isolate_then_kill_leader_is_valid_on_the_safe_cluster(tmp_path: Path) -> None:
    """The control: the same schedule against the default (safe) cluster
    loses nothing: the isolated leader cannot reach minISR, so it
    acknowledges nothing alone."""
    opts = RunOptions(seed=3, faults=("isolate-then-kill-leader",), time_limit_s=18,
                      rate_hz=60, quiet_s=6, interval_s=8, duration_s=5, partitions=1,
                      mode="proxy", out=str(tmp_path / "run"))
    outcome = asyncio.run(run(opts))
    print(outcome.counts, outcome.valid)
    assert outcome.counts["ok"] > 50
    assert outcome.valid is True, outcome.result.to_json()


def test_unsafe_mode_is_refused_without_confirmation(tmp_path: Path) -> None:
    code = ("from data_plane.broker.replica_manager import unsafe_ack_before_hw_enabled as f\n"
            "f()")
    env = {**os.environ, "RAFTLOG_UNSAFE_ACK_BEFORE_HW": "1"}
    env.pop("RAFTLOG_I_KNOW_THIS_IS_UNSAFE", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "refusing to start" in r.stderr


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(100, 130))
def test_soak(seed: int, tmp_path: Path) -> None:
    opts = RunOptions(seed=seed, faults=("kill", "pause", "partition", "clock", "lost-writes"),
                      time_limit_s=60, rate_hz=100, mode="auto", out=str(tmp_path / "run"))
    outcome = asyncio.run(run(opts))
    assert outcome.valid is True, outcome.result.to_json()
