"""Named known-anomaly scenarios (chaos.scenarios) on a real cluster; each
asserts the verdict its docstring promises. Marked slow (about 30-60 s each)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chaos.scenarios import run_scenario

# About five minutes together: behind --long (the default suite keeps the
# chaos smoke run and the unsafe-mode run, tests/chaos/test_runs.py).
pytestmark = [pytest.mark.slow, pytest.mark.long]


def _run(name: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    outcome = asyncio.run(run_scenario(name, tmp_path / name))
    print(name, outcome.valid, outcome.notes)
    return outcome


def test_isr_shrink_then_leader_dies_refuses_and_loses_nothing(tmp_path: Path) -> None:
    o = _run("isr-shrink-leader-dies", tmp_path)
    assert o.valid is True, o.result.to_json()
    assert o.result.children["isr-shrink"].stats["refused"] > 0


def test_fast_leader_changes_do_not_diverge(tmp_path: Path) -> None:
    o = _run("fast-leader-changes", tmp_path)
    assert o.valid is True, o.result.to_json()
    assert o.result.children["replica-divergence"].valid is True


def test_isolated_controller_resigns(tmp_path: Path) -> None:
    o = _run("controller-isolated", tmp_path)
    assert o.valid is True, o.result.to_json()
    assert o.result.children["controller-split-brain"].stats["new"]


def test_indefinite_sends_across_failover(tmp_path: Path) -> None:
    o = _run("indefinite-across-failover", tmp_path)
    assert o.valid is True, o.result.to_json()
    assert o.result.children["indefinite"].stats["indefinite"] > 0


def test_last_replica_standing_loses_nothing_with_elr(tmp_path: Path) -> None:
    """KIP-966's scenario: the ISR shrinks to the leader, which is then
    power-cut (its un-fsynced bytes lost) and restarted. The follower that
    left the ISR below min.insync.replicas is elected from the ELR; no
    acknowledged write is lost."""
    o = _run("last-replica-standing", tmp_path)
    assert o.valid is True, o.result.to_json()


def test_wiped_follower_rejoins_isr_only_when_caught_up(tmp_path: Path) -> None:
    o = _run("disk-wipe-rejoin", tmp_path)
    assert o.valid is True, o.result.to_json()


def test_zombie_transactional_producer_is_fenced(tmp_path: Path) -> None:
    o = _run("zombie-producer", tmp_path)
    assert o.valid is True, o.result.to_json()
