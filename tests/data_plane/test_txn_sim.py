"""`data_plane.testing.txn_sim`: producer state + markers under leader changes,
resends, delayed markers and coordinator failover (issue 6 §4)."""

from __future__ import annotations

import time

import pytest

from data_plane.testing.txn_sim import TxnSimulation, run_seeds

DEFAULT_SEEDS = 200


def test_no_duplicate_and_no_aborted_read_over_the_default_seeds() -> None:
    started = time.perf_counter()
    reports = run_seeds(range(DEFAULT_SEEDS))
    assert time.perf_counter() - started < 30
    assert sum(r.leader_changes for r in reports) > DEFAULT_SEEDS
    assert sum(r.commits for r in reports) > 0 and sum(r.aborts for r in reports) > 0
    assert sum(r.coordinator_failovers for r in reports) > DEFAULT_SEEDS


def test_a_seed_replays_exactly() -> None:
    assert TxnSimulation(7).run() == TxnSimulation(7).run()


@pytest.mark.soak
def test_soak_many_seeds() -> None:
    run_seeds(range(DEFAULT_SEEDS, DEFAULT_SEEDS + 3000), steps=600)
