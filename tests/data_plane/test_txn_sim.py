"""`data_plane.testing.txn_sim`: producer state + markers under leader changes,
resends, delayed markers and coordinator failover (issue 6 §4)."""

from __future__ import annotations

import os
import time

import pytest

from data_plane.testing.txn_sim import SimulationFailure, TxnSimulation, run_seeds
from data_plane.txn.producer_state import ALL_FORGOTTEN, ProducerStateManager

DEFAULT_SEEDS = 200


def test_no_duplicate_and_no_aborted_read_over_the_default_seeds() -> None:
    started = time.perf_counter()
    reports = run_seeds(range(DEFAULT_SEEDS))
    assert time.perf_counter() - started < 30
    assert sum(r.leader_changes for r in reports) > DEFAULT_SEEDS
    assert sum(r.commits for r in reports) > 0 and sum(r.aborts for r in reports) > 0
    assert sum(r.coordinator_failovers for r in reports) > DEFAULT_SEEDS
    assert sum(r.reordered_resends for r in reports) > DEFAULT_SEEDS


class _AcceptsAnyFirstSequence(ProducerStateManager):
    """Kafka 2.5+'s rule: a producer the partition has not seen is accepted at
    any sequence, even when the partition cannot have forgotten it."""

    @property
    def max_forgotten_producer_id(self) -> int:
        return ALL_FORGOTTEN


def test_accepting_a_new_producer_above_sequence_zero_is_caught_as_a_gap() -> None:
    """The issue-6 lost write: a resend that reaches the new leader before an
    older batch. The simulation must catch the permissive rule."""
    failures = []
    for seed in range(DEFAULT_SEEDS):
        try:
            TxnSimulation(seed, psm_factory=_AcceptsAnyFirstSequence).run()
        except SimulationFailure as e:
            failures.append(str(e))
    assert failures, "the simulation no longer catches the permissive first-sequence rule"
    assert all("sequences" in f for f in failures), failures[:3]


def test_a_seed_replays_exactly() -> None:
    assert TxnSimulation(7).run() == TxnSimulation(7).run()


@pytest.mark.soak
def test_soak_many_seeds() -> None:
    """3,000 seeds from RAFTLOG_SIM_FIRST_SEED (default: after the CI ones)."""
    first = int(os.environ.get("RAFTLOG_SIM_FIRST_SEED", DEFAULT_SEEDS))
    run_seeds(range(first, first + 3000), steps=600)
