"""One chaos run: db + nemeses + workload clients + checkers + report.

`run` sets up a `chaos.db.ChaosDB`, creates the topic (RF 3, minISR 2),
plays the seeded plan from `chaos.generator.generate` in real time and
records every op in ``<out>/history.jsonl``:

- each logical client process runs its ops one at a time in a worker thread
  (a process still busy when its next op is due skips it, as in Jepsen); a
  process whose op ended ``info`` is crashed: it continues under a fresh id
  with fresh clients. Process ``i`` uses confluent-kafka (idempotence as
  configured), every third one kafka-python; in the ``txn`` workload every
  process is a confluent-kafka transactional producer (``transactional.id``
  per process slot) whose ``txn`` ops commit or deliberately abort; in the
  ``compact`` workload the topic is compacted (segments roll every 2 s, the
  cleaners run every 500 ms) and every send carries a key (`workload_keys`);
  ``compact-txn`` is the ``txn`` workload, keyed, on such a topic;
- nemesis ops go to a `Compose` of the partition, process (kill, pause,
  lost-writes), clock, disk-full and reassign (KIP-455) nemeses, with targets resolved from live
  cluster state (leader of partition 0, active controller);
- after the final heal and the quiet period, final reads read each partition
  to its end;
- then the nodes are stopped and each partition's replicas are compared
  below the final high watermark (`ReplicaDivergence`).

The run's verdict composes the Kafka checkers and the divergence checker;
``results.json`` + ``index.html`` + plots go to ``out``. Never block the event
loop: the link proxies live on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import compose
from chaos.checker.base import Checker, Result, make_result
from chaos.checker.kafka import kafka_checkers
from chaos.checker.replicas import ReplicaDivergence, read_log_below_hw
from chaos.client import (
    ConfluentGroupPoller,
    ConfluentPoller,
    ConfluentProducer,
    Endpoint,
    KafkaPythonProducer,
    SendClient,
    final_read,
    group_offsets,
)
from chaos.db import ChaosDB, pick_mode
from chaos.generator import NemesisConfig, PlannedOp, RunConfig, WorkloadConfig, generate
from chaos.history import JSON, NEMESIS, HistoryRecorder, OpType, end_offsets_of
from chaos.nemesis import process
from chaos.nemesis.core import (
    ClusterState,
    Compose,
    DiskFullNemesis,
    IsolateThenKillLeader,
    PartitionNemesis,
    ProcessNemesis,
    resolve_targets,
)
from chaos.nemesis.process import LOSSY_ENV, faketime_env, set_clock_offset
from chaos.nemesis.reassign import ReassignNemesis
from chaos.report import write_report
from data_plane.local_cluster import LocalClusterError, Timeouts

TOPIC = "chaos"
WORKLOADS = ("send", "txn", "compact", "compact-txn")
GROUP_PROPERTIES = {
    # A short run's group must rebalance in about a second, not Kafka's
    # 5 s heartbeats (KIP-848) or 3 s first-join delay (classic); sessions
    # end in 6 s, as the classic members' do (`chaos.client.ConfluentGroupPoller`).
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
    "group.initial.rebalance.delay.ms": "0",
}
COMPACT_KEYS = 24
"""Keys of the ``compact`` workload (8 per partition with 3 partitions): few
enough that most writes are superseded within a run."""
COMPACT_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    # Segments roll every 2 s of message time (or 16 KiB), and the cleaner
    # cleans whatever is dirty: compaction runs all through the faults.
    "segment.ms": "2000",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
    # Markers of emptied transactions (and tombstones) go 5 s after the pass
    # that empties them, within a run.
    "delete.retention.ms": "5000",
}
COMPACT_PROPERTIES = {"log.cleaner.backoff.ms": "500"}
TXN_PROPERTIES = {
    # A transaction a crashed or cut-off client left open holds the last
    # stable offset, and so the read_committed final reads, until its
    # coordinator aborts it: transaction.timeout.ms (10 s, the chaos
    # clients') after it began, at the next check. Kafka checks every 10 s,
    # which let such a transaction outlive a run's quiet period; every second
    # here, an open transaction is gone about 11 s after it began, so one
    # still holding the final reads back is an anomaly of the cluster's.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
DISK_BYTES = 256 << 20
"""Size of each node's tmpfs data dir in a disk-full run (RAM is used only as
written; the fault fills it with a ballast file)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    seed: int = 0
    nodes: int = 3
    faults: tuple[str, ...] = ("kill", "partition")
    time_limit_s: float = 60.0
    rate_hz: float = 100.0
    quiet_s: float = 10.0
    interval_s: float = 10.0
    duration_s: float = 5.0
    partitions: int = 3
    processes: int = 4
    idempotent: bool = True
    # "send" (one record per op), "txn" (transactions, some aborted),
    # "compact" (keyed sends to a compacted topic, cleaned during the run) or
    # "compact-txn" (keyed transactions to a compacted topic).
    workload: str = "send"
    mode: str = "auto"
    out: str = "chaos-out"
    # Polls as members of one consumer group ("classic" or "consumer", the
    # KIP-848 protocol) instead of assign-based consumers: rebalances and
    # coordinator failovers under the faults, and the committed-unread check.
    group_protocol: str = ""
    # Every listener SSL with client certificates (`chaos.db`, TLS), the
    # workload's clients too.
    tls: bool = False
    # Extra server.properties and node env (the unsafe test-only mode uses these).
    properties: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class RunOutcome:
    valid: bool | str
    result: Result
    out: Path
    ops: int
    mode: str
    mode_reason: str
    counts: dict[str, int]
    tls: bool = False
    #: Clients whose close did not return within `CLIENT_CLOSE_TIMEOUT_S`
    #: and were left behind (see `_Worker.close`).
    abandoned: tuple[str, ...] = ()


#: How long a worker waits for one client's close before it leaves the client
#: behind. A librdkafka consumer of the KIP-848 protocol once blocked in
#: close for minutes after a node kill, and the run, Ctrl-C included,
#: waited for it. Not traced to raftlog; it matches librdkafka's open issues
#: of a group consumer whose close or destroy hangs after a broker went down
#: and came back (confluentinc/librdkafka#4674, #4131, #4519).
CLIENT_CLOSE_TIMEOUT_S = 20.0


def close_within(client: Any, timeout_s: float) -> bool:
    """Close ``client`` on a daemon thread; whether it returned in time (a
    close that raised counts as returned). A close still blocked is left
    running: the thread cannot be stopped, and being a daemon thread it does
    not hold up the process's exit."""
    def close() -> None:
        with contextlib.suppress(Exception):
            client.close()

    thread = threading.Thread(target=close, name="chaos-client-close", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive()


class ClockNemesis:
    """``start-clock {"target", "offset_s"}`` skews the wall clock of the
    targets live (every node runs under libfaketime, monotonic untouched);
    ``stop-clock`` sets every node back to +0."""

    fs = frozenset({"start-clock", "stop-clock"})

    def __init__(self, files: dict[str, Path], rng: random.Random) -> None:
        self.files = files
        self.rng = rng

    async def setup(self) -> None:
        return None

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        if f == "stop-clock":
            for path in self.files.values():
                set_clock_offset(path, 0)
            return "reset"
        targets = resolve_targets(value["target"], state, self.rng)
        for n in targets:
            set_clock_offset(self.files[n], float(value["offset_s"]))
        return {"nodes": targets, "offset_s": value["offset_s"]}

    async def teardown(self) -> None:
        for path in self.files.values():
            set_clock_offset(path, 0)


class _Worker:
    """One logical client process (its clients are made lazily, in its thread)."""

    def __init__(self, index: int, endpoint: Endpoint, opts: RunOptions,
                 abandoned: list[str] | None = None) -> None:
        self.index = index
        self.process = index
        self.endpoint = endpoint
        self.opts = opts
        self.abandoned = abandoned if abandoned is not None else []
        self.busy = False
        self.producer: SendClient | None = None
        self.poller: ConfluentPoller | ConfluentGroupPoller | None = None

    def crash(self) -> None:
        """After an info: fresh clients under a fresh process id (Jepsen)."""
        self.close()
        self.process += 1000

    def close(self) -> None:
        """Close this worker's clients. A client left open outlives its
        cluster: kafka-python's network thread keeps reconnecting to the
        dead brokers (and draws its backoff jitter from the global
        `random`, which a later Hypothesis test reports). A close that
        blocks past `CLIENT_CLOSE_TIMEOUT_S` is left behind and listed in
        ``abandoned`` (the run's outcome and report name it)."""
        for c in (self.producer, self.poller):
            if c is not None and not close_within(c, CLIENT_CLOSE_TIMEOUT_S):
                self.abandoned.append(f"process {self.process}: {type(c).__name__}")
        self.producer = None
        self.poller = None

    def do(self, op: PlannedOp) -> tuple[OpType, JSON]:
        if op.f == "txn":
            if self.producer is None:
                # One transactional.id per worker slot: a crashed client's
                # successor fences it (InitProducerId bumps the epoch) and its
                # open transaction is aborted, as with a restarted Kafka app.
                self.producer = ConfluentProducer(
                    self.endpoint,
                    TOPIC,
                    idempotent=True,
                    transactional_id=f"chaos-txn-{self.opts.seed}-{self.index}",
                )
            assert isinstance(self.producer, ConfluentProducer)
            sends = [(int(s["partition"]), int(s["value"]),
                      None if s.get("key") is None else int(s["key"]))
                     for s in op.value["sends"]]
            return self.producer.txn(sends, abort=bool(op.value["abort"]))
        if op.f == "send":
            if self.producer is None:
                if self.index % 3 == 2:
                    self.producer = KafkaPythonProducer(self.endpoint, TOPIC)
                else:
                    self.producer = ConfluentProducer(
                        self.endpoint, TOPIC, idempotent=self.opts.idempotent
                    )
            key = op.value.get("key")
            return self.producer.send(int(op.value["partition"]), int(op.value["value"]),
                                      None if key is None else int(key))
        if op.f == "poll":
            if self.poller is None:
                if self.opts.group_protocol:
                    protocol = self.opts.group_protocol
                    if protocol == "mixed":
                        # Half the members of each protocol: the group is
                        # converted back and forth (KIP-848 online migration)
                        # as members of one kind come, go and are fenced.
                        protocol = ("consumer", "classic")[self.index % 2]
                    self.poller = ConfluentGroupPoller(
                        self.endpoint, TOPIC, group_id(self.opts), protocol,
                        keys=workload_keys(self.opts))
                else:
                    self.poller = ConfluentPoller(self.endpoint, TOPIC, self.opts.partitions,
                                                  keys=workload_keys(self.opts))
            return self.poller.poll()
        raise ValueError(op.f)


async def run(opts: RunOptions, progress: Callable[[float, str], None] | None = None) -> RunOutcome:
    out = Path(opts.out).resolve()
    process.umount_under(out / "cluster")  # tmpfs data dirs a killed run left
    if (out / "cluster").exists():
        shutil.rmtree(out / "cluster")  # a run starts from empty disks
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.jsonl").unlink(missing_ok=True)
    if opts.workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}")
    if opts.group_protocol not in ("", "classic", "consumer", "mixed"):
        raise ValueError("group_protocol must be classic, consumer or mixed (or empty: assign)")
    if opts.group_protocol and opts.workload != "send":
        raise ValueError("a consumer-group run takes the send workload")
    mode, why = pick_mode(opts.mode)
    if progress is not None:
        progress(0.0, f"mode {mode}")
    env: dict[str, str] = dict(opts.env)
    if "lost-writes" in opts.faults:
        env.update(LOSSY_ENV)
    clock_files: dict[str, Path] = {}
    node_env: dict[str, dict[str, str]] = {}
    for i in range(1, opts.nodes + 1):
        n = f"n{i}"
        node_env[n] = dict(env)
        if "clock" in opts.faults:
            clock_files[n] = out / f"clock-{n}"
            node_env[n].update(faketime_env(clock_files[n]))
    properties = dict(opts.properties)
    if is_compacted(opts):
        properties = {**COMPACT_PROPERTIES, **properties}
    if is_txn(opts):
        properties = {**TXN_PROPERTIES, **properties}
    if opts.group_protocol:
        properties = {**GROUP_PROPERTIES, **properties}
    db = ChaosDB(
        out / "cluster",
        opts.nodes,
        mode=mode,
        properties=properties,
        timeouts=Timeouts.fast(),
        node_env=node_env,
        disk_bytes=DISK_BYTES if "disk-full" in opts.faults else None,
        tls=opts.tls,
    )
    cfg = RunConfig(
        seed=opts.seed,
        time_limit_s=opts.time_limit_s,
        quiet_s=opts.quiet_s,
        workload=WorkloadConfig(
            partitions=opts.partitions,
            processes=opts.processes,
            rate_hz=opts.rate_hz,
            txn=is_txn(opts),
            keys=workload_keys(opts),
        ),
        nemesis=NemesisConfig(
            faults=opts.faults,
            interval_s=opts.interval_s,
            duration_s=opts.duration_s,
            start_s=min(2.0, opts.time_limit_s / 4),
        ),
    )
    plan = generate(cfg)
    pool = ThreadPoolExecutor(max_workers=opts.processes + opts.partitions + 4)
    loop = asyncio.get_running_loop()
    rec = HistoryRecorder(out / "history.jsonl")
    counts = {"ok": 0, "fail": 0, "info": 0}
    workers: list[_Worker] = []
    abandoned: list[str] = []

    async def close_workers() -> None:
        await asyncio.gather(*(loop.run_in_executor(pool, w.close) for w in workers),
                             return_exceptions=True)

    try:
        await db.setup()
        await _create_topic(db, opts.partitions, pool,
                            COMPACT_TOPIC_CONFIGS if is_compacted(opts) else {})
        rng = random.Random(f"targets:{opts.seed}")
        assert db.net is not None
        nemesis = Compose(
            [
                PartitionNemesis(db.net, rng),
                ProcessNemesis(db, rng),
                ClockNemesis(clock_files, rng),
                DiskFullNemesis(db, rng),
                IsolateThenKillLeader(db, db.net, rng),
                ReassignNemesis(db, rng, topic=TOPIC, partitions=opts.partitions),
            ]
        )
        await nemesis.setup()
        workers.extend(_Worker(i, db.endpoint(), opts, abandoned)
                       for i in range(opts.processes))
        t0 = time.monotonic_ns()

        def now() -> int:
            return time.monotonic_ns() - t0

        async def client_op(w: _Worker, op: PlannedOp) -> None:
            proc = w.process
            rec.record(now(), OpType.INVOKE, proc, op.f, op.value)
            try:
                typ, value = await loop.run_in_executor(pool, w.do, op)
            except Exception as exc:  # a client blew up: indefinite
                typ, value = OpType.INFO, {**(op.value or {}), "error": repr(exc)}
            rec.record(now(), typ, proc, op.f, value)
            counts[typ.value] = counts.get(typ.value, 0) + 1
            if typ is OpType.INFO:
                await loop.run_in_executor(pool, w.crash)
            w.busy = False

        async def nemesis_op(op: PlannedOp) -> None:
            rec.record(now(), OpType.INVOKE, NEMESIS, op.f, op.value)
            state = ClusterState(tuple(db.nodes), await db.leader(TOPIC, 0), await db.controller())
            try:
                value = await nemesis.invoke(op.f, op.value, state)
                rec.record(now(), OpType.INFO, NEMESIS, op.f, value)
            except Exception as exc:
                rec.record(now(), OpType.INFO, NEMESIS, op.f, {"error": repr(exc)})

        tasks: set[asyncio.Task[None]] = set()
        main = [op for op in plan if op.f != "final-read"]
        finals = [op for op in plan if op.f == "final-read"]
        total_s = opts.time_limit_s + opts.quiet_s
        for op in main:
            delay = op.time_ns / 1e9 - now() / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            if progress is not None:
                progress(min(1.0, now() / 1e9 / total_s), op.f)
            if op.process == NEMESIS:
                # Nemesis ops run in order; the final heals are awaited.
                await nemesis_op(op)
                continue
            w = workers[int(op.process)]
            if w.busy:
                continue
            w.busy = True  # at dispatch: the task starts later
            t = asyncio.create_task(client_op(w, op))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        await nemesis.teardown()
        # Restart anything still down (a heal may have failed), then settle.
        for n in db.nodes:
            await db.resume_node(n)
            await db.start_node(n)
        not_ready = await _settle(db, rec, now)
        await close_workers()  # healed and idle: they close cleanly now
        quiet_end = opts.time_limit_s + opts.quiet_s
        while now() / 1e9 < quiet_end:
            if progress is not None:
                progress(min(1.0, now() / 1e9 / total_s), "quiet")
            await asyncio.sleep(min(0.5, quiet_end - now() / 1e9 + 0.01))
        if progress is not None:
            progress(1.0, "final reads")
        finals_done = []
        for op in finals:
            p = int(op.value["partitions"][0])
            rec.record(now(), OpType.INVOKE, op.process, op.f, op.value)
            typ, value = await loop.run_in_executor(
                pool, functools.partial(final_read, db.endpoint(), TOPIC, p,
                                        keys=workload_keys(opts))
            )
            finals_done.append(rec.record(now(), typ, op.process, op.f, value))
        if opts.group_protocol:
            # What the group committed, now that its members have closed.
            process_id = finals[0].process if finals else 0
            rec.record(now(), OpType.INVOKE, process_id, "group-offsets", {"group": group_id(opts)})
            typ, value = await loop.run_in_executor(
                pool, functools.partial(group_offsets, db.endpoint(), TOPIC,
                                        opts.partitions, group_id(opts)))
            rec.record(now(), typ, process_id, "group-offsets", value)
        history = rec.history()
        await db.teardown()
        logs: dict[int | str, dict[int | str, bytes]] = {}
        for fop in finals_done:
            for p, hw in end_offsets_of(fop).items():
                logs[p] = {}
                for n in db.nodes:
                    d = db.partition_log_dir(n, TOPIC, p)
                    if d.is_dir():
                        logs[p][n] = read_log_below_hw(d, hw)
        await db.release()
        checkers = client_checkers(opts)
        strict = duplicates_strict(opts)
        checkers["replica-divergence"] = _Fixed(ReplicaDivergence(
            logs, compacted=is_compacted(opts)).check(history))
        checkers["cluster-ready"] = _Fixed(
            make_result(
                {},
                unknown_reason=f"cluster not ready after the final heal: {not_ready}"
                if not_ready
                else "",
            )
        )
        overall = compose(checkers).check(history)
        meta: dict[str, JSON] = {
            **asdict(opts),
            "mode": mode,
            "mode_reason": why,
            "duplicates_strict": strict,
            "ops": len(history),
            "counts": counts,
            "clients_abandoned": list(abandoned),
            "repro": _repro(opts),
        }
        write_report(history, overall, out, meta=meta)
        return RunOutcome(overall.valid, overall, out, len(history), mode, why, counts,
                          tls=opts.tls, abandoned=tuple(abandoned))
    finally:
        await close_workers()  # a no-op for workers already closed
        rec.close()
        await db.teardown()
        await db.release()
        pool.shutdown(wait=False, cancel_futures=True)


def is_compacted(opts: RunOptions) -> bool:
    """The workload writes keyed records to a compacted topic."""
    return opts.workload in ("compact", "compact-txn")


def is_txn(opts: RunOptions) -> bool:
    """The workload's writes are transactions."""
    return opts.workload in ("txn", "compact-txn")


def workload_keys(opts: RunOptions) -> int:
    """How many keys the workload's sends carry (0: none)."""
    return COMPACT_KEYS if is_compacted(opts) else 0


def group_id(opts: RunOptions) -> str:
    """The consumer group of a ``group_protocol`` run."""
    return f"chaos-group-{opts.seed}"


def duplicates_strict(opts: RunOptions) -> bool:
    """Whether a duplicate is an anomaly: with idempotence on, and always in
    the txn workload (transactions imply idempotence, KIP-98)."""
    return opts.idempotent or is_txn(opts)


def client_checkers(opts: RunOptions) -> dict[str, Checker]:
    """The history checkers of a run (replica divergence is added after the
    nodes stop). The duplicates checker always runs; `duplicates_strict`
    says whether a duplicate fails the run."""
    return dict(kafka_checkers(idempotent=duplicates_strict(opts),
                               subscribe=bool(opts.group_protocol),
                               compacted_keys=workload_keys(opts)))


async def _settle(db: ChaosDB, rec: HistoryRecorder, now: Callable[[], int]) -> str:
    """Wait until the healed cluster is ready; "" if it is, else why not.

    A node that cannot come back (it exits during recovery) must not abort
    the run (nor a soak): it is recorded as a nemesis-process ``info`` op,
    the run goes on to its final reads and checkers, and its verdict is at
    best ``unknown`` (``cluster-ready``), since a cluster that did not heal
    certifies nothing.
    """
    rec.record(now(), OpType.INVOKE, NEMESIS, "wait-ready", None)
    try:
        await db.wait_ready(60)
    except LocalClusterError as exc:
        rec.record(now(), OpType.INFO, NEMESIS, "wait-ready", {"error": str(exc)})
        return str(exc)
    rec.record(now(), OpType.INFO, NEMESIS, "wait-ready", "ready")
    return ""


class _Fixed:
    """A checker that returns a result computed elsewhere (for composing)."""

    def __init__(self, result: Result) -> None:
        self.result = result

    def check(self, history: Any) -> Result:
        return self.result


def _repro(opts: RunOptions) -> str:
    return (
        f"raftlog chaos run --nodes {opts.nodes} --nemesis {','.join(opts.faults)} "
        f"--time-limit {opts.time_limit_s:g} --rate {opts.rate_hz:g} --seed {opts.seed} "
        f"--workload {opts.workload} --mode {opts.mode}"
        + (" --no-idempotence" if not opts.idempotent else "")
        + (f" --group-protocol {opts.group_protocol}" if opts.group_protocol else "")
    )


async def _create_topic(
    db: ChaosDB, partitions: int, pool: ThreadPoolExecutor,
    configs: dict[str, str] | None = None,
) -> None:
    import confluent_kafka as ck
    import confluent_kafka.admin as ck_admin

    new_topic: Any = getattr(ck_admin, "NewTopic")  # noqa: B009 - not re-exported for mypy

    def create() -> None:
        admin = ck_admin.AdminClient({**db.endpoint().librdkafka(), "log_level": 0})
        try:
            topic = new_topic(TOPIC, partitions, min(3, db.n), config=configs or {})
            admin.create_topics([topic])[TOPIC].result(20)
        except ck.KafkaException as e:
            # A retried CreateTopics whose first attempt did create it (the
            # cluster has auto-creation off, so nothing else makes it);
            # wait_topic below checks the partitions.
            if e.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    await asyncio.get_running_loop().run_in_executor(pool, create)
    await db.wait_topic(TOPIC, partitions, 20)


def summarize(outcome: RunOutcome) -> list[str]:
    lines = [
        f"mode: {outcome.mode} ({outcome.mode_reason})"
        + (", every connection over mutual TLS" if outcome.tls else ""),
        f"ops: {outcome.ops} ({outcome.counts})",
        f"valid: {outcome.valid}",
    ]
    if outcome.abandoned:
        lines.append(f"clients left behind (close blocked > {CLIENT_CLOSE_TIMEOUT_S:g} s): "
                     + ", ".join(outcome.abandoned))
    for name, r in outcome.result.children.items():
        if r.valid == "unknown" and r.reason:
            lines.append(f"  {name}: unknown ({r.reason})")
            continue
        lines.append(
            f"  {name}: {r.valid}"
            + (f" ({r.anomaly_count()} anomalies)" if r.anomaly_count() else "")
        )
    lines.append(f"report: {outcome.out / 'index.html'}")
    return lines


def exit_code(valid: bool | str) -> int:
    return 0 if valid is True else 1 if valid is False else 2


def faults_arg(text: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in text.split(",") if f.strip())


__all__: Sequence[str] = ("RunOptions", "RunOutcome", "exit_code", "run", "summarize")
