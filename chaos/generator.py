"""Pure, seeded generators: the plan of a run as data.

Jepsen's generators are pure values that yield ops given a context; ours are
simpler: `generate` maps ``(seed, config)`` to a finite, time-ordered sequence
of `PlannedOp`s. It uses one `random.Random(seed)` per stream and never reads
a clock (STYLE.md sections 5 and 10), so the same seed gives the same plan,
and a run replays from its seed up to the timing noise of real processes.

A plan has three phases, as in Jepsen's Kafka test (``gen/phases``):

1. **Main phase** (``0 .. time_limit``): client ops at ``rate_hz`` (Poisson
   arrivals): ``send`` of a unique int value to a random partition, or
   ``poll``; interleaved with nemesis ops from the fault schedule: every
   ``interval_s`` a fault chosen from ``faults`` starts and stops
   ``duration_s`` later (``start-kill`` / ``stop-kill`` ...).
2. **Heal**: at ``time_limit`` a ``stop-*`` for every enabled fault kind (each
   fault has a healing step; healing what is not active is a no-op), then a
   quiet period of ``quiet_s`` with no faults and no ops, so the cluster can
   settle (elect, catch up, advance the HW).
3. **Final reads**: one ``final-read`` per partition, each on a fresh process,
   reading from 0 to the end offset.

Targets (which node to kill, which grudge) are chosen here as *kinds* (e.g.
``"leader"``, ``"majority-ring"``); the nemesis resolves them against cluster
state at invoke time, like Jepsen's ``:targeter``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from chaos.history import JSON, NEMESIS, Process

FAULT_KINDS: tuple[str, ...] = (
    "kill", "restart", "pause", "partition", "clock", "lost-writes", "disk-full", "reassign",
    "throttled-reassign")

# Purpose-built schedules: deterministic in what matters, for proofs that the
# suite can fail. ``isolate-then-kill-leader``: cut the leader of partition 0
# off from every other node (replica and controller traffic; clients still
# reach it), let it take writes alone for half the fault window, SIGKILL it,
# then heal and restart it. A correct cluster acknowledges none of those
# writes (acks=all cannot reach minISR); an unsafe one loses them.
SCHEDULES: tuple[str, ...] = ("isolate-then-kill-leader",)
ALL_KINDS: tuple[str, ...] = FAULT_KINDS + SCHEDULES

# Node choices resolved at invoke time by the nemesis.
NODE_TARGETS: tuple[str, ...] = ("one", "leader", "controller", "minority")
GRUDGES: tuple[str, ...] = (
    "halves",
    "majority-ring",
    "bridge",
    "isolate-leader",
    "isolate-controller",
    "one-way",
)
CLOCK_OFFSETS_S: tuple[int, ...] = (-3600, -60, -1, 1, 60, 3600, 86400)


@dataclass(frozen=True, slots=True)
class PlannedOp:
    """An op to invoke at ``time_ns`` after the run starts."""

    time_ns: int
    process: Process
    f: str
    value: JSON = None


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """Client ops: ``rate_hz`` total, ``send_fraction`` of them sends.

    With ``txn`` every send is instead a ``txn`` op (Jepsen's ``:txn``): 1 to
    ``txn_max_sends`` sends of unique values to random partitions, in one
    transaction, which the client commits, or, for ``abort_fraction`` of
    them (``"abort": true`` in the plan), deliberately aborts after the
    records reached the log.

    With ``keys`` (> 0; the compacted-topic workload) each send carries a
    key, ``value % keys`` (`key_of`), and goes to the key's partition,
    ``key % partitions``, as a keyed producer's partitioner would send it:
    each key's writes are ordered in one partition, and a reader can check
    from a value which key it must be stored under.
    """

    partitions: int = 3
    processes: int = 4
    rate_hz: float = 100.0
    send_fraction: float = 0.6
    txn: bool = False
    txn_max_sends: int = 4
    abort_fraction: float = 0.25
    keys: int = 0

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.processes < 1:
            raise ValueError("need at least one partition and one process")
        if self.rate_hz <= 0 or not 0.0 <= self.send_fraction <= 1.0:
            raise ValueError("rate_hz > 0 and 0 <= send_fraction <= 1")
        if self.txn_max_sends < 1 or not 0.0 <= self.abort_fraction <= 1.0:
            raise ValueError("txn_max_sends >= 1 and 0 <= abort_fraction <= 1")
        if self.keys < 0:
            raise ValueError("keys >= 0")


def key_of(value: int, keys: int) -> int:
    """The key a keyed workload's send of ``value`` carries."""
    return value % keys


@dataclass(frozen=True, slots=True)
class NemesisConfig:
    """Which faults, how often (``interval_s``) and for how long (``duration_s``)."""

    faults: tuple[str, ...] = ("kill", "partition")
    interval_s: float = 10.0
    duration_s: float = 5.0
    start_s: float = 2.0

    def __post_init__(self) -> None:
        unknown = set(self.faults) - set(ALL_KINDS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {ALL_KINDS}")
        if self.duration_s <= 0 or self.interval_s < self.duration_s:
            raise ValueError("need 0 < duration_s <= interval_s (faults do not overlap)")


@dataclass(frozen=True, slots=True)
class RunConfig:
    seed: int
    time_limit_s: float = 60.0
    quiet_s: float = 10.0
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    nemesis: NemesisConfig = field(default_factory=NemesisConfig)


def _s_to_ns(s: float) -> int:
    return round(s * 1e9)


def workload_ops(cfg: RunConfig) -> Iterator[PlannedOp]:
    """Main-phase client ops; values are 0, 1, 2... in send order (unique).
    Without ``txn`` the draws are exactly those of plain sends: a seed's
    plain-send plan does not depend on the transaction settings."""
    rng = random.Random(f"workload:{cfg.seed}")
    w = cfg.workload
    t = 0.0
    value = 0
    while True:
        t += rng.expovariate(w.rate_hz)
        if t >= cfg.time_limit_s:
            return
        proc = rng.randrange(w.processes)
        is_send = rng.random() < w.send_fraction
        if is_send and w.txn:
            n = rng.randint(1, w.txn_max_sends)
            sends: list[dict[str, JSON]] = [
                {"partition": rng.randrange(w.partitions), "value": value + k} for k in range(n)
            ]
            if w.keys:
                sends = [_keyed(int(s["value"]), w) for s in sends]
            value += n
            yield PlannedOp(
                _s_to_ns(t), proc, "txn", {"sends": sends, "abort": rng.random() < w.abort_fraction}
            )
        elif is_send:
            send: dict[str, JSON] = {"partition": rng.randrange(w.partitions), "value": value}
            if w.keys:
                send = _keyed(value, w)
            yield PlannedOp(_s_to_ns(t), proc, "send", send)
            value += 1
        else:
            yield PlannedOp(_s_to_ns(t), proc, "poll", None)


def _keyed(value: int, w: WorkloadConfig) -> dict[str, JSON]:
    key = key_of(value, w.keys)
    return {"partition": key % w.partitions, "value": value, "key": key}


def fault_value(kind: str, rng: random.Random) -> JSON:
    """The data of one fault: what the nemesis resolves at invoke time."""
    if kind == "partition":
        return {"grudge": rng.choice(GRUDGES)}
    if kind == "clock":
        return {"target": rng.choice(NODE_TARGETS), "offset_s": rng.choice(CLOCK_OFFSETS_S)}
    if kind == "isolate-then-kill-leader":
        return {"target": "leader"}
    if kind == "reassign":
        # Down to one replica (acks=all cannot succeed then), two, or a new
        # order of three (the preferred leader moves).
        return {"rf": rng.choice((1, 2, 3))}
    if kind == "throttled-reassign":
        # The same moves with the added replicas' catch-up bounded (KIP-73):
        # 1 KiB/s, below the workload's write rate (a fetch that starts
        # under the bound still carries up to replica.fetch.max.bytes per
        # partition, so the catch-up comes in bursts), or 64 KiB/s.
        return {"rf": rng.choice((1, 2, 3)), "throttle": rng.choice((1024, 65536))}
    return {"target": rng.choice(NODE_TARGETS)}


def nemesis_ops(cfg: RunConfig) -> Iterator[PlannedOp]:
    """Start/stop pairs on the schedule; never overlapping; all within the main phase."""
    n = cfg.nemesis
    if not n.faults:
        return
    rng = random.Random(f"nemesis:{cfg.seed}")
    t = n.start_s
    while t + n.duration_s < cfg.time_limit_s:
        kind = rng.choice(n.faults)
        yield PlannedOp(_s_to_ns(t), NEMESIS, f"start-{kind}", fault_value(kind, rng))
        if kind == "isolate-then-kill-leader":
            yield PlannedOp(_s_to_ns(t + n.duration_s / 2), NEMESIS, "kill-isolated-leader", None)
        yield PlannedOp(_s_to_ns(t + n.duration_s), NEMESIS, f"stop-{kind}", None)
        t += n.interval_s


def final_ops(cfg: RunConfig) -> Iterator[PlannedOp]:
    """Heal everything, stay quiet, then one final read per partition."""
    t_heal = _s_to_ns(cfg.time_limit_s)
    for kind in cfg.nemesis.faults:
        yield PlannedOp(t_heal, NEMESIS, f"stop-{kind}", {"final": True})
    t_read = _s_to_ns(cfg.time_limit_s + cfg.quiet_s)
    first = cfg.workload.processes  # fresh process ids, never used by the workload
    for p in range(cfg.workload.partitions):
        yield PlannedOp(t_read, first + p, "final-read", {"partitions": [p]})


def generate(cfg: RunConfig) -> list[PlannedOp]:
    """The whole plan, ordered by time (ties: nemesis first, then by process).

    Pure: depends only on ``cfg``. The runner invokes each op when its time
    comes, but a client process that is still busy with its previous op skips
    ahead (Jepsen processes are single-threaded), so the history may contain
    fewer ops than the plan.
    """
    main = sorted(
        [*workload_ops(cfg), *nemesis_ops(cfg)],
        key=lambda op: (op.time_ns, op.process != NEMESIS, str(op.process)),
    )
    return [*main, *final_ops(cfg)]
