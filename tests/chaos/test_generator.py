from __future__ import annotations

import pytest

from chaos.generator import (
    FAULT_KINDS,
    NemesisConfig,
    RunConfig,
    WorkloadConfig,
    generate,
    key_of,
)
from chaos.history import NEMESIS


def cfg(seed: int, faults: tuple[str, ...] = FAULT_KINDS) -> RunConfig:
    return RunConfig(
        seed=seed,
        time_limit_s=30,
        quiet_s=5,
        workload=WorkloadConfig(partitions=3, processes=4, rate_hz=50),
        nemesis=NemesisConfig(faults=faults, interval_s=4, duration_s=2),
    )


def test_same_seed_same_plan_different_seed_different_plan() -> None:
    assert generate(cfg(7)) == generate(cfg(7))
    assert generate(cfg(7)) != generate(cfg(8))


def test_rate_values_and_ordering() -> None:
    plan = generate(cfg(1))
    main = [op for op in plan if op.f in ("send", "poll")]
    # Poisson at 50 Hz for 30 s: about 1500 ops
    assert 1300 < len(main) < 1700
    sends = [op.value for op in main if op.f == "send"]
    assert [s["value"] for s in sends] == list(range(len(sends)))  # unique, dense
    assert {s["partition"] for s in sends} == {0, 1, 2}
    times = [op.time_ns for op in plan]
    assert times == sorted(times)
    assert all(op.time_ns < 30e9 for op in main)


def test_faults_alternate_start_stop_then_heal_quiet_and_final_reads() -> None:
    plan = generate(cfg(3))
    nem = [op for op in plan if op.process == NEMESIS]
    main_nem = [op for op in nem if not (op.value or {}).get("final")]
    active: str | None = None
    for op in main_nem:
        kind = op.f.split("-", 1)[1]
        if op.f.startswith("start-"):
            assert active is None, "faults must not overlap"
            assert kind in FAULT_KINDS
            active = kind
        else:
            assert op.f == f"stop-{active}"
            active = None
    assert active is None
    assert {op.f.split("-", 1)[0] for op in main_nem} == {"start", "stop"}
    # the tail: a heal for every enabled fault, then (after quiet) final reads
    tail = plan[-(len(FAULT_KINDS) + 3) :]
    assert [op.f for op in tail[: len(FAULT_KINDS)]] == [f"stop-{k}" for k in FAULT_KINDS]
    finals = tail[len(FAULT_KINDS) :]
    assert [op.f for op in finals] == ["final-read"] * 3
    assert all(op.time_ns == 35_000_000_000 for op in finals)
    assert len({op.process for op in finals}) == 3 and all(
        isinstance(op.process, int) and op.process >= 4 for op in finals
    )
    last_client = max(op.time_ns for op in plan if op.f in ("send", "poll"))
    assert finals[0].time_ns - last_client >= 5_000_000_000  # quiet period


def test_fault_mix_uses_every_configured_kind_over_a_long_run() -> None:
    long = RunConfig(
        seed=11,
        time_limit_s=600,
        nemesis=NemesisConfig(faults=FAULT_KINDS, interval_s=5, duration_s=2),
    )
    started = {op.f for op in generate(long) if op.f.startswith("start-")}
    assert started == {f"start-{k}" for k in FAULT_KINDS}
    only_kill = {op.f for op in generate(cfg(5, ("kill",))) if op.process == NEMESIS}
    assert only_kill == {"start-kill", "stop-kill"}


@pytest.mark.parametrize("fault", ["reassign", "throttled-reassign"])
def test_reassign_faults_vary_the_replication_factor(fault: str) -> None:
    long = RunConfig(
        seed=3,
        time_limit_s=300,
        nemesis=NemesisConfig(faults=(fault,), interval_s=5, duration_s=2),
    )
    values = [op.value for op in generate(long) if op.f == f"start-{fault}"]
    assert {v["rf"] for v in values} == {1, 2, 3}  # type: ignore[index]
    if fault == "throttled-reassign":
        assert {v["throttle"] for v in values} == {1024, 65536}  # type: ignore[index]
    heals = [op for op in generate(long) if op.f == f"stop-{fault}"]
    assert len(heals) == len(values) + 1  # one per fault, and the final heal


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError):
        NemesisConfig(faults=("meteor",))
    with pytest.raises(ValueError):
        NemesisConfig(interval_s=1, duration_s=2)
    with pytest.raises(ValueError):
        WorkloadConfig(rate_hz=0)


def test_txn_workload_unique_values_some_aborted_and_plain_plans_unchanged() -> None:
    def with_txn(seed: int, txn: bool) -> RunConfig:
        c = cfg(seed)
        return RunConfig(
            seed=seed,
            time_limit_s=c.time_limit_s,
            quiet_s=c.quiet_s,
            workload=WorkloadConfig(partitions=3, processes=4, rate_hz=50, txn=txn),
            nemesis=c.nemesis,
        )

    plan = generate(with_txn(5, True))
    assert generate(with_txn(5, True)) == plan
    txns = [op.value for op in plan if op.f == "txn"]
    assert not [op for op in plan if op.f == "send"]
    values = [s["value"] for t in txns for s in t["sends"]]
    assert values == list(range(len(values)))  # unique across transactions
    assert all(1 <= len(t["sends"]) <= 4 for t in txns)
    aborted = sum(t["abort"] for t in txns)
    assert 0.15 < aborted / len(txns) < 0.35  # abort_fraction 0.25
    # Without txn the plan is exactly the plain-send plan.
    assert generate(with_txn(5, False)) == generate(cfg(5))


def test_keyed_workload_sends_each_key_to_one_partition_in_the_plain_plans_timing() -> None:
    c = cfg(5)
    keyed = RunConfig(seed=5, time_limit_s=c.time_limit_s, quiet_s=c.quiet_s,
                      workload=WorkloadConfig(partitions=3, processes=4, rate_hz=50, keys=8),
                      nemesis=c.nemesis)
    plan, plain = generate(keyed), generate(c)
    sends = [op.value for op in plan if op.f == "send"]
    assert sends and all(s["key"] == key_of(s["value"], 8) == s["value"] % 8 for s in sends)
    assert all(s["partition"] == s["key"] % 3 for s in sends)
    # Only the partitions and keys differ from the plain plan.
    assert [(op.time_ns, op.process, op.f) for op in plan] == [
        (op.time_ns, op.process, op.f) for op in plain]
    # Keyed transactions: every send of each transaction keyed the same way.
    txn_plan = generate(RunConfig(
        seed=5, time_limit_s=c.time_limit_s, quiet_s=c.quiet_s, nemesis=c.nemesis,
        workload=WorkloadConfig(partitions=3, processes=4, rate_hz=50, keys=8, txn=True)))
    txn_sends = [s for op in txn_plan if op.f == "txn" for s in op.value["sends"]]
    assert txn_sends and all(
        s["key"] == s["value"] % 8 and s["partition"] == s["key"] % 3 for s in txn_sends)
    with pytest.raises(ValueError):
        WorkloadConfig(keys=-1)
