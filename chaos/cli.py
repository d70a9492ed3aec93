"""``raftlog chaos run | soak``: the chaos suite's command line.

``scenario NAME`` plays one named known-anomaly scenario (`chaos.scenarios`).
``run`` plays one seeded run and exits 0 (valid), 1 (anomalies found) or 2
(unknown); ``soak`` repeats runs with new seeds (seed, seed+1, ...) and sums
up (exit: the worst run's code). Reached from ``data_plane.cli`` through a
lazy import, so the node's CLI never loads chaos/ unless asked.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from chaos.generator import ALL_KINDS
from chaos.runner import RunOptions, exit_code, faults_arg, run, summarize


def _progress_bar() -> object:
    state = {"last": -1}

    def show(fraction: float, what: str) -> None:
        pct = int(fraction * 100)
        if pct == state["last"]:
            return
        state["last"] = pct
        bar = "#" * (pct // 4) + "-" * (25 - pct // 4)
        sys.stderr.write(f"\r[{bar}] {pct:3d}% {what:<16}")
        sys.stderr.flush()

    return show


def _options(a: argparse.Namespace, seed: int, out: str) -> RunOptions:
    faults = faults_arg(a.nemesis)
    unknown = set(faults) - set(ALL_KINDS)
    if unknown:
        raise SystemExit(f"unknown nemesis {sorted(unknown)}; known: {', '.join(ALL_KINDS)}")
    return RunOptions(
        seed=seed,
        nodes=a.nodes,
        faults=faults,
        time_limit_s=a.time_limit,
        rate_hz=a.rate,
        quiet_s=a.quiet,
        interval_s=a.interval,
        duration_s=a.duration,
        idempotent=not a.no_idempotence,
        mode=a.mode,
        workload=a.workload,
        group_protocol=a.group_protocol or "",
        tls=a.tls,
        out=out,
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument(
        "--nemesis", default="kill,partition", help=f"comma-separated faults: {','.join(ALL_KINDS)}"
    )
    p.add_argument("--time-limit", type=float, default=60.0, help="main phase, seconds")
    p.add_argument("--rate", type=float, default=100.0, help="client ops per second")
    p.add_argument("--quiet", type=float, default=10.0, help="quiet period after the heal")
    p.add_argument("--interval", type=float, default=10.0, help="a fault starts every N s")
    p.add_argument("--duration", type=float, default=5.0, help="each fault lasts N s")
    p.add_argument("--no-idempotence", action="store_true")
    p.add_argument(
        "--workload",
        choices=("send", "txn", "compact", "compact-txn"),
        default="send",
        help="send: one record per op; txn: transactional producers writing "
        "1-4 records per transaction, a quarter of them aborted on purpose; "
        "compact: keyed sends to a compacted topic whose segments roll every "
        "2 s and are cleaned all through the run; compact-txn: the txn "
        "workload's transactions, keyed, to such a topic",
    )
    p.add_argument(
        "--group-protocol",
        choices=("classic", "consumer", "mixed"),
        default=None,
        help="poll as members of one consumer group with this protocol (consumer: "
        "KIP-848; mixed: half of each, so the group migrates between the two) "
        "instead of assign-based consumers; adds the committed-unread check "
        "(send workload only)",
    )
    p.add_argument(
        "--tls", action="store_true",
        help="every listener SSL with client certificates required (a throwaway CA "
        "under the run's directory); the workload's clients connect over mutual TLS")
    p.add_argument(
        "--mode",
        choices=("auto", "proxy", "netns"),
        default="auto",
        help="auto: netns when root and namespaces work, else proxy (says which)",
    )
    p.add_argument("--out", default="chaos-out")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftlog chaos", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="one seeded chaos run")
    _common(r)
    r.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    s = sub.add_parser("soak", help="many runs with new seeds")
    _common(s)
    s.add_argument("--runs", type=int, default=30)
    s.add_argument("--seed", type=int, default=1, help="first seed")
    from chaos.scenarios import SCENARIOS

    sc = sub.add_parser("scenario", help="a named known-anomaly scenario (kraft.md section 4)")
    sc.add_argument("name", choices=sorted(SCENARIOS))
    sc.add_argument("--out", default="chaos-scenario")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    # SIGTERM (a timeout, a CI cancel) unwinds like Ctrl-C, so every run's
    # finally stops its nodes and removes its namespaces, proxies and mounts.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # kafka-python logs every refused connection at ERROR; under faults that
    # is expected and the history has every outcome, so keep the terminal
    # for the progress bar and the verdicts.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if a.action == "scenario":
        from chaos.scenarios import run_scenario
        from chaos.scenarios import summarize as summarize_scenario

        result = asyncio.run(run_scenario(a.name, a.out))
        print("\n".join(summarize_scenario(result)))
        return exit_code(result.valid)
    if a.action == "run":
        opts = _options(a, a.seed, a.out)
        print(
            f"raftlog chaos run: seed {a.seed}, nemesis {a.nemesis}, workload {a.workload}",
            file=sys.stderr,
        )
        outcome = asyncio.run(run(opts, _progress_bar()))  # type: ignore[arg-type]
        sys.stderr.write("\n")
        print("\n".join(summarize(outcome)))
        return exit_code(outcome.valid)
    worst = 0
    shown_mode = False
    tally: dict[str, int] = {}
    for i in range(a.runs):
        seed = a.seed + i
        opts = replace(_options(a, seed, f"{a.out}/run-{seed}"))
        try:
            outcome = asyncio.run(run(opts))
        except Exception as exc:  # one broken run (set-up failed...) does not end a soak
            worst = max(worst, 2)
            tally["error"] = tally.get("error", 0) + 1
            print(f"run {i + 1}/{a.runs} seed {seed}: error {exc!r}", flush=True)
            continue
        if not shown_mode:
            print(f"mode: {outcome.mode} ({outcome.mode_reason})", flush=True)
            shown_mode = True
        code = exit_code(outcome.valid)
        worst = max(worst, code)
        tally[str(outcome.valid)] = tally.get(str(outcome.valid), 0) + 1
        unknown = [
            f"{name}: {r.reason}"
            for name, r in outcome.result.children.items()
            if r.valid == "unknown" and r.reason
        ]
        print(
            f"run {i + 1}/{a.runs} seed {seed}: valid={outcome.valid} ops={outcome.ops} "
            f"anomalies={outcome.result.anomaly_count()} {outcome.counts}"
            + (f" ({'; '.join(unknown)[:300]})" if unknown else "")
            + (f" clients left behind: {len(outcome.abandoned)}" if outcome.abandoned else ""),
            flush=True,
        )
    print(
        f"soak: {a.runs} runs, verdicts {tally}; reproduce one: raftlog chaos run --seed N "
        f"--nemesis {a.nemesis} --time-limit {a.time_limit:g} --rate {a.rate:g} "
        f"--workload {a.workload} --mode {a.mode}"
        + (f" --group-protocol {a.group_protocol}" if a.group_protocol else "")
        + (" --tls" if a.tls else "")
    )
    return worst
