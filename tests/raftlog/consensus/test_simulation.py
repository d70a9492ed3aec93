"""Deterministic simulation: many seeds, replay, and the self-test that a
broken core is caught (KIP-595 invariants, Kafka RaftEventSimulationTest)."""

from __future__ import annotations

import functools
import heapq
import os

import pytest

from raftlog.testing.broken import GrantVoteToShorterLogCore, PreVoteIgnoresHigherEpochCore
from raftlog.testing.simulator import CoreFactory, Simulation, SimulationFailure, main, run_seed

CI_SEEDS = 300
SEEDS_PER_CHUNK = 50


@functools.cache
def ci_run(seed: int) -> dict[str, object]:
    """A CI seed's summary, with what the coverage tests below count
    (``stranded``, ``wiped``): each seed runs once per test process,
    however many tests read it (a failing seed raises each time)."""
    sim = Simulation(seed)
    summary = sim.run()
    return {**summary, "stranded": bool(sim.stranded), "wiped": bool(sim.wiped_voters)}


@pytest.mark.parametrize("chunk", range(CI_SEEDS // SEEDS_PER_CHUNK))
def test_simulation_invariants_hold_for_ci_seeds(chunk: int) -> None:
    """Safety (one leader per epoch, monotonic epochs and HW, majority holds
    every commit, identical committed prefixes) after every event, then
    liveness after the heal, for 300 seeds of 3- and 5-voter clusters."""
    first = chunk * SEEDS_PER_CHUNK
    for seed in range(first, first + SEEDS_PER_CHUNK):
        summary = ci_run(seed)
        assert summary["recovered_ms"] is not None


def test_simulation_covers_every_fault_kind() -> None:
    seen: set[str] = set()
    for seed in range(60):
        seen.update(str(f) for f in ci_run(seed)["faults"])  # type: ignore[attr-defined]
    assert seen >= {"partition_halves", "isolate_leader", "bridge", "one_way", "crash",
                    "pause", "disk_loss", "heal_network", "strand_candidate"}


def test_ci_seeds_cover_the_leader_sending_before_its_own_fsync() -> None:
    """Half the seeds run the real driver's order for a leader's Fetch
    answers (`Ready.send_before_persist`: send and apply, then fsync); the
    invariants above then also hold for that order, crashes included."""
    early = [ci_run(seed) for seed in range(40)]
    assert {s["early_send"] for s in early} == {True, False}
    assert sum(int(s["sent_before_fsync"]) for s in early if s["early_send"]) > 100  # type: ignore[call-overload]
    assert all(s["sent_before_fsync"] == 0 for s in early if not s["early_send"])


def test_kip996_ci_seeds_strand_candidates_above_a_live_leaders_epoch() -> None:
    """The "strand_candidate" family does produce its shape in the CI seeds: a
    voter becomes a candidate (epoch E+1) and is cut off while the leader of
    E keeps a majority; every such seed still passes liveness."""
    stranded = sum(bool(ci_run(seed)["stranded"]) for seed in range(CI_SEEDS))
    assert stranded >= 20


def test_simulator_reschedules_a_tick_skipped_during_an_fsync_ending_in_the_same_ms() -> None:
    """A tick that falls during an fsync is consumed; when the fsync ends in
    the same virtual millisecond the node must still get a next tick (else an
    observer, which only hears answers to its own fetches, stalls for good)."""
    sim = Simulation(3)
    observer = sim.observers[0]
    node = sim.nodes[observer]
    while not (node.core is not None and node.io is None and node.tick_at > sim.now):
        at, _, kind, nid, payload = heapq.heappop(sim._queue)
        sim.now = at
        sim._dispatch(kind, nid, payload)
    assert node.core is not None
    sim.now = node.tick_at
    sim._queue = [e for e in sim._queue if (e[0], e[2], e[3]) != (sim.now, "tick", observer)]
    heapq.heapify(sim._queue)
    ready = node.core.ready()  # an fsync is in progress at the tick's time...
    node.io = ready
    sim._dispatch("tick", observer, None)
    sim._finish_io(node, (node.incarnation, ready))  # ...and ends in the same ms
    ticks = {at for at, _, kind, nid, _ in sim._queue if kind == "tick" and nid == observer}
    assert node.tick_at >= sim.now and node.tick_at in ticks


def test_kafka14077_committed_data_survives_disk_loss_of_one_voter() -> None:
    """Seeds whose schedule wiped a voter's disk still pass every invariant."""
    wiped = 0
    for seed in range(200):
        summary = ci_run(seed)
        if summary["wiped"]:
            wiped += 1
            assert int(summary["committed_offset"]) > 0  # type: ignore[call-overload]
    assert wiped >= 10


def test_simulation_replays_a_seed_exactly() -> None:
    first, second = Simulation(42), Simulation(42)
    assert first.run() == second.run()
    assert first.trace == second.trace


def test_simulator_cli_replays_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "7"]) == 0
    assert "seed=7" in capsys.readouterr().out


def _first_failing_seed(core_factory: CoreFactory) -> SimulationFailure:
    """The first CI seed on which ``core_factory`` fails, checked to replay."""
    for seed in range(CI_SEEDS):
        try:
            run_seed(seed, core_factory=core_factory)
        except SimulationFailure as failure:
            print(f"broken variant caught by seed {failure.seed}: {failure.reason}")
            assert failure.seed == seed
            # Replaying the seed reproduces the same failure.
            with pytest.raises(SimulationFailure) as again:
                run_seed(seed, core_factory=core_factory)
            assert again.value.reason == failure.reason
            return failure
    pytest.fail(f"{core_factory.__name__} survived {CI_SEEDS} seeds")


def test_self_test_broken_vote_rule_is_caught_within_ci_seeds() -> None:
    """A core that grants votes to candidates with shorter logs must fail the
    simulation within the CI seed count; report the first failing seed."""
    _first_failing_seed(GrantVoteToShorterLogCore)


def test_self_test_kip996_pre_vote_ignoring_a_higher_epoch_is_caught_within_ci_seeds() -> None:
    """A core whose voters ignore the epoch of a pre-voting voter leaves a
    stranded candidate Prospective above the leader's epoch for good: the
    liveness phase (every node applies a commit made after the heal) fails."""
    failure = _first_failing_seed(PreVoteIgnoresHigherEpochCore)
    assert failure.reason.startswith("liveness: nodes [")
    assert "did not apply" in failure.reason


@pytest.mark.soak
def test_simulation_soak() -> None:
    """RAFTLOG_SIM_SEEDS seeds (default 10,000), from RAFTLOG_SIM_FIRST_SEED
    (default: after the CI ones)."""
    count = int(os.environ.get("RAFTLOG_SIM_SEEDS", "10000"))
    first = int(os.environ.get("RAFTLOG_SIM_FIRST_SEED", CI_SEEDS))
    failures = []
    for seed in range(first, first + count):
        try:
            run_seed(seed)
        except SimulationFailure as failure:
            failures.append(str(failure))
    assert not failures, "\n\n".join(failures[:3])
