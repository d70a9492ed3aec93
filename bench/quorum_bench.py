"""KRaft quorum benchmark: raftlog's 3-voter quorum vs pysyncobj 0.3.17.

    .venv/bin/python bench/quorum_bench.py [--quick]

Everything runs as separate processes on loopback. raftlog nodes fsync every
Ready (group commit); pysyncobj does not fsync at all. Values are 100 bytes.

Measured (prints a table and a summary of ratios; asserts nothing):

- pipelined commits/s: many proposals in flight for a fixed time.
  raftlog, two client shapes: one proposal per Produce request (each waits
  for its own commit), and Kafka-producer style with up to 100 proposals per
  Produce request. pysyncobj: a ``@replicated`` append called with a callback
  (non-blocking) by the leader process, up to N in flight, with its batching
  on (``appendEntriesUseBatch``) and a 5 ms tick.
  raftlog, third shape, like-for-like with pysyncobj: the proposer runs in
  the leader's process (``driver.submit([value])`` with a done-callback, one
  proposal and one commit future per call, up to 1000 in flight). Its row
  is labelled "in-leader proposer"; the over-the-wire rows stay.
- one-at-a-time commit latency p50/p99: raftlog, one proposal per request,
  the next sent after the previous committed.
- failover: SIGKILL the leader while one-at-a-time proposals run; time from
  the kill to the first new commit. With Kafka's default timeouts (election
  1000 ms, fetch 2000 ms, request 2000 ms) and tuned ones (election 150 ms,
  fetch 300 ms, fetch max wait 100 ms, request 300 ms).

pysyncobj is a ``bench`` extra: ``pip install pysyncobj==0.3.17``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raftlog.runtime import event_loop
from raftlog.runtime.local_quorum import LocalQuorum, free_ports
from raftlog.runtime.quorum_client import QuorumClient

VALUE = b"v" * 100
LINGER = ("--append-linger-ms", "0")
DEFAULT_TIMEOUTS = (
    "--election-timeout-ms",
    "1000",
    "--fetch-timeout-ms",
    "2000",
    "--request-timeout-ms",
    "2000",
    "--fetch-max-wait-ms",
    "500",
)
TUNED_TIMEOUTS = (
    "--election-timeout-ms",
    "150",
    "--election-backoff-max-ms",
    "100",
    "--fetch-timeout-ms",
    "300",
    "--request-timeout-ms",
    "300",
    "--fetch-max-wait-ms",
    "100",
)


@dataclass
class Results:
    rows: list[tuple[str, str, str]]

    def add(self, system: str, metric: str, value: str) -> None:
        self.rows.append((system, metric, value))
        print(f"  {system:10s} {metric:60s} {value}", flush=True)


# --------------------------------------------------------------------- raftlog


async def _leader_id(client: QuorumClient, q: LocalQuorum) -> int:
    while True:
        for node_id in q.voter_ids:
            if not q.is_running(node_id):
                continue
            try:
                described = await client.describe_quorum(node_id)
            except Exception:
                continue
            if described.error == 0:
                return described.leader_id
        await asyncio.sleep(0.02)


async def raftlog_pipelined(
    q: LocalQuorum, seconds: float, inflight: int, per_request: int
) -> float:
    client = QuorumClient(q.addresses, connections=8)
    await client.propose([VALUE])
    committed = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal committed
        values = [VALUE] * per_request
        while time.perf_counter() < stop_at:
            await client.propose(values)
            committed += per_request

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    elapsed = time.perf_counter() - started
    await client.close()
    return committed / elapsed


async def raftlog_latency(q: LocalQuorum, count: int) -> list[float]:
    client = QuorumClient(q.addresses)
    for _ in range(20):  # warm up connections and the leader hint
        await client.propose([VALUE])
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await client.propose([VALUE])
        samples.append((time.perf_counter() - started) * 1000)
    await client.close()
    return samples


async def raftlog_failover(q: LocalQuorum) -> float:
    client = QuorumClient(q.addresses, request_timeout_ms=3000, retry_backoff_ms=5)
    for _ in range(50):
        await client.propose([VALUE])
    leader = await _leader_id(client, q)
    killed_at = time.perf_counter()
    q.kill(leader, signal.SIGKILL)
    await client.propose([VALUE], deadline_ms=30_000)
    elapsed = time.perf_counter() - killed_at
    await client.close()
    return elapsed


def inprocess_node(argv: list[str]) -> int:
    """One raftlog node whose leader also runs the pipelined workload in-process.

    argv: seconds, in-flight count, output path, then the node's own
    arguments. Like-for-like with `pysyncobj_node`: the leader calls
    ``driver.submit([value])`` (one proposal per call, one commit future each,
    as pysyncobj's ``append(value, callback=...)``) and keeps ``inflight`` of
    them outstanding; a proposal counts once its own future says committed.
    Only completions inside the window count.
    """
    from raftlog.runtime import node

    seconds, inflight, out = float(argv[0]), int(argv[1]), argv[2]

    async def workload(driver: Any) -> None:
        while driver.leader.leader_id is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        if driver.leader.leader_id != driver.node_id:
            return
        await driver.propose([VALUE])
        loop = asyncio.get_running_loop()
        done = failed = 0
        stop_at = loop.time() + seconds

        def on_done(future: asyncio.Future[int]) -> None:
            nonlocal done, failed
            if future.cancelled() or future.exception() is not None:
                failed += 1
            elif loop.time() <= stop_at:
                done += 1
            if loop.time() < stop_at:
                driver.submit([VALUE]).add_done_callback(on_done)

        started = loop.time()
        hw_start = driver.high_watermark
        for _ in range(inflight):
            driver.submit([VALUE]).add_done_callback(on_done)
        await asyncio.sleep(max(0.0, stop_at - loop.time()))
        elapsed = loop.time() - started
        committed = done
        # Cross-check: the high watermark moved over at least that many offsets.
        hw_advance = driver.high_watermark - hw_start
        with open(out + ".tmp", "w") as f:
            json.dump(
                {
                    "rate": committed / elapsed,
                    "failed": failed,
                    "committed": committed,
                    "hw_advance": hw_advance,
                },
                f,
            )
        os.rename(out + ".tmp", out)

    return node.main(argv[3:], workload=workload)


def raftlog_inprocess(base: str, seconds: float, inflight: int) -> float:
    out = os.path.join(base, "inprocess.json")
    command = (
        sys.executable,
        __file__,
        "--raftlog-inprocess-node",
        str(seconds),
        str(inflight),
        out,
    )
    with LocalQuorum(
        os.path.join(base, "inproc"), node_args=LINGER + DEFAULT_TIMEOUTS, command=command
    ) as q:
        q.start_all()
        deadline = time.time() + seconds + 60
        while not os.path.exists(out) and time.time() < deadline:
            time.sleep(0.1)
        with open(out) as f:
            result = json.load(f)
    if result["committed"] > result["hw_advance"] or result["failed"]:
        print(f"  WARNING: in-process run inconsistent: {result}", flush=True)
    return float(result["rate"])


def run_raftlog(args: argparse.Namespace, results: Results, base: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    with LocalQuorum(os.path.join(base, "tput"), node_args=LINGER + DEFAULT_TIMEOUTS) as q:
        q.start_all()
        rate1 = asyncio.run(raftlog_pipelined(q, args.seconds, 256, 1))
        results.add(
            "raftlog", "pipelined commits/s, over the wire, 1 proposal/request", f"{rate1:,.0f}"
        )
        rate100 = asyncio.run(raftlog_pipelined(q, args.seconds, 32, 100))
        results.add(
            "raftlog",
            "pipelined commits/s, over the wire, 100 proposals/request",
            f"{rate100:,.0f}",
        )
        samples = asyncio.run(raftlog_latency(q, args.latency_count))
        p50 = statistics.median(samples)
        p99 = statistics.quantiles(samples, n=100)[98]
        results.add(
            "raftlog", "one-at-a-time commit latency p50 / p99 (ms)", f"{p50:.2f} / {p99:.2f}"
        )
        figures.update(rate1=rate1, rate100=rate100, p50=p50, p99=p99)
    rate_in = raftlog_inprocess(base, args.seconds, 1000)
    results.add(
        "raftlog", "pipelined commits/s, in-leader proposer, 1 proposal/call", f"{rate_in:,.0f}"
    )
    figures["rate_inprocess"] = rate_in
    for name, timeouts in (("default", DEFAULT_TIMEOUTS), ("tuned", TUNED_TIMEOUTS)):
        runs = []
        for i in range(args.failovers):
            with LocalQuorum(
                os.path.join(base, f"fo-{name}-{i}"), node_args=LINGER + timeouts
            ) as q:
                q.start_all()
                runs.append(asyncio.run(raftlog_failover(q)))
        worst, median = max(runs), statistics.median(runs)
        results.add(
            "raftlog",
            f"failover to first commit, {name} timeouts (s)",
            f"median {median:.3f}, max {worst:.3f} over {len(runs)}",
        )
        figures[f"failover_{name}"] = median
        figures[f"failover_{name}_max"] = worst
    return figures


# -------------------------------------------------------------------- pysyncobj


def pysyncobj_node(args: argparse.Namespace) -> None:
    """One pysyncobj process; the leader runs the pipelined workload."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class Log(SyncObj):  # type: ignore[misc]
        def __init__(self, me: str, partners: list[str], conf: SyncObjConf) -> None:
            super().__init__(me, partners, conf)
            self.values: list[bytes] = []

        @replicated  # type: ignore[misc]
        def append(self, value: bytes) -> int:
            self.values.append(value)
            return len(self.values)

    conf = SyncObjConf(
        appendEntriesUseBatch=True,
        autoTickPeriod=0.005,
        appendEntriesBatchSizeBytes=2**20,
        commandsQueueSize=1_000_000,
    )
    node = Log(args.self_address, args.partners.split(","), conf)
    deadline = time.time() + 30
    while node._getLeader() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    if not node._isLeader():
        time.sleep(args.seconds + 30)  # the bench kills us
        return
    done = 0
    outstanding = 0

    def callback(result: object, error: object) -> None:
        nonlocal done, outstanding
        outstanding -= 1
        if error == 0:
            done += 1

    stop_at = time.perf_counter() + args.seconds
    started = time.perf_counter()
    while time.perf_counter() < stop_at:
        if outstanding < args.inflight:
            outstanding += 1
            node.append(VALUE, callback=callback)
        else:
            time.sleep(0.0005)
    elapsed = time.perf_counter() - started
    while outstanding > 0 and time.perf_counter() < stop_at + 5:
        time.sleep(0.01)
    with open(args.out, "w") as f:
        json.dump({"rate": done / elapsed}, f)


def run_pysyncobj(args: argparse.Namespace, results: Results, base: str) -> float | None:
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        results.add("pysyncobj", "not installed (pip install pysyncobj==0.3.17)", "-")
        return None
    ports = free_ports(3)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    out = os.path.join(base, "pysyncobj.json")
    processes = []
    try:
        for i, me in enumerate(addresses):
            partners = ",".join(a for j, a in enumerate(addresses) if j != i)
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--pysyncobj-node",
                        "--self-address",
                        me,
                        "--partners",
                        partners,
                        "--seconds",
                        str(args.seconds),
                        "--inflight",
                        "1000",
                        "--out",
                        out,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.time() + args.seconds + 60
        while not os.path.exists(out) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)
        with open(out) as f:
            rate = float(json.load(f)["rate"])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    results.add(
        "pysyncobj", "pipelined commits/s, in-leader proposer, 1/call, no fsync", f"{rate:,.0f}"
    )
    return rate


# ------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    parser.add_argument("--pysyncobj-node", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--self-address", help=argparse.SUPPRESS)
    parser.add_argument("--partners", help=argparse.SUPPRESS)
    parser.add_argument("--inflight", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=None)
    if len(sys.argv) > 1 and sys.argv[1] == "--raftlog-inprocess-node":
        sys.exit(inprocess_node(sys.argv[2:]))
    args = parser.parse_args()
    if args.pysyncobj_node:
        pysyncobj_node(args)
        return
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.latency_count = 300 if args.quick else 2000
    args.failovers = 1 if args.quick else 3
    results = Results([])
    started_load = os.getloadavg()
    print(
        f"quorum bench: 3 voters on loopback, {len(VALUE)}-byte values, "
        f"{args.seconds:.0f} s throughput runs, cpus={os.cpu_count()}, "
        f"node event loop: {event_loop.describe()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="quorum-bench-") as base:
        ours = run_raftlog(args, results, base)
        theirs = run_pysyncobj(args, results, base)
    print()
    print(f"| {'system':10s} | {'metric':60s} | value |")
    print(f"|{'-' * 12}|{'-' * 62}|-------|")
    for system, metric, value in results.rows:
        print(f"| {system:10s} | {metric:60s} | {value} |")
    print()
    print("load average (1, 5, 15 min) at start:", " ".join(f"{x:.2f}" for x in started_load))
    print("load average (1, 5, 15 min) at end:  ", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if theirs:
        print(
            "ratio vs pysyncobj (pipelined commits/s, both proposers in the leader "
            f"process, 1 proposal per call): {ours['rate_inprocess'] / theirs:.1f} (goal >= 5)"
        )
        print(
            "ratio vs pysyncobj (pipelined commits/s, raftlog over the wire, "
            f"1 proposal/request): {ours['rate1'] / theirs:.1f}"
        )
        print(
            "ratio vs pysyncobj (pipelined commits/s, raftlog over the wire, "
            f"100 proposals/request): {ours['rate100'] / theirs:.1f}"
        )
    print(f"one-at-a-time p50: {ours['p50']:.2f} ms (goal <= 2 ms); p99 {ours['p99']:.2f} ms")
    print(
        f"failover default timeouts: {ours['failover_default']:.3f} s median, "
        f"{ours['failover_default_max']:.3f} s max (goal <= 2.5 s)"
    )
    print(
        f"failover tuned timeouts: {ours['failover_tuned']:.3f} s median, "
        f"{ours['failover_tuned_max']:.3f} s max (goal <= 0.5 s)"
    )


if __name__ == "__main__":
    main()
