"""Deterministic simulation: many seeds, replay, and the self-test that a
broken core is caught (KIP-595 invariants, Kafka RaftEventSimulationTest)."""

from __future__ import annotations

import os

import pytest

from raftlog.testing.broken import GrantVoteToShorterLogCore
from raftlog.testing.simulator import Simulation, SimulationFailure, main, run_seed

CI_SEEDS = 300
SEEDS_PER_CHUNK = 50


@pytest.mark.parametrize("chunk", range(CI_SEEDS // SEEDS_PER_CHUNK))
def test_simulation_invariants_hold_for_ci_seeds(chunk: int) -> None:
    """Safety (one leader per epoch, monotonic epochs and HW, majority holds
    every commit, identical committed prefixes) after every event, then
    liveness after the heal, for 300 seeds of 3- and 5-voter clusters."""
    first = chunk * SEEDS_PER_CHUNK
    for seed in range(first, first + SEEDS_PER_CHUNK):
        summary = run_seed(seed)
        assert summary["recovered_ms"] is not None


def test_simulation_covers_every_fault_kind() -> None:
    seen: set[str] = set()
    for seed in range(60):
        seen.update(str(f) for f in run_seed(seed)["faults"])  # type: ignore[attr-defined]
    assert seen >= {"partition_halves", "isolate_leader", "bridge", "one_way", "crash",
                    "pause", "disk_loss", "heal_network"}


def test_kafka14077_committed_data_survives_disk_loss_of_one_voter() -> None:
    """Seeds whose schedule wiped a voter's disk still pass every invariant."""
    wiped = 0
    for seed in range(200):
        sim = Simulation(seed)
        sim.run()
        if sim.wiped_voters:
            wiped += 1
            assert sim.max_committed > 0
    assert wiped >= 10


def test_simulation_replays_a_seed_exactly() -> None:
    first, second = Simulation(42), Simulation(42)
    assert first.run() == second.run()
    assert first.trace == second.trace


def test_simulator_cli_replays_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "7"]) == 0
    assert "seed=7" in capsys.readouterr().out


def test_self_test_broken_vote_rule_is_caught_within_ci_seeds() -> None:
    """A core that grants votes to candidates with shorter logs must fail the
    simulation within the CI seed count; report the first failing seed."""
    for seed in range(CI_SEEDS):
        try:
            run_seed(seed, core_factory=GrantVoteToShorterLogCore)
        except SimulationFailure as failure:
            print(f"broken variant caught by seed {failure.seed}: {failure.reason}")
            assert failure.seed == seed
            # Replaying the seed reproduces the same failure.
            with pytest.raises(SimulationFailure) as again:
                run_seed(seed, core_factory=GrantVoteToShorterLogCore)
            assert again.value.reason == failure.reason
            return
    pytest.fail(f"broken vote rule survived {CI_SEEDS} seeds")


@pytest.mark.soak
def test_simulation_soak() -> None:
    """RAFTLOG_SIM_SEEDS seeds (default 10,000), after the CI ones."""
    count = int(os.environ.get("RAFTLOG_SIM_SEEDS", "10000"))
    failures = []
    for seed in range(CI_SEEDS, CI_SEEDS + count):
        try:
            run_seed(seed)
        except SimulationFailure as failure:
            failures.append(str(failure))
    assert not failures, "\n\n".join(failures[:3])
