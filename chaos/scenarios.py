"""Named known-anomaly scenarios (kraft.md section 4): ``raftlog chaos scenario NAME``.

Each scenario is a short, scripted fault schedule against a real 3-node
cluster (proxy mode), with a background acks=all workload recorded in a
Jepsen history, and returns a checker `Result`: the Kafka checkers and the
replica-divergence checker, plus scenario-specific checks where the
anomaly is not visible in the history (controller split brain, ISR
membership after a disk wipe). What each asserts:

- ``isr-shrink-leader-dies`` (row 1, Jepsen 2013): the ISR shrinks to the
  leader, then the leader dies. With acks=all and minISR=2 the writes while
  the ISR is the leader alone are refused (NOT_ENOUGH_REPLICAS); no ok send
  is lost. Expected: valid, with refusals observed.
- ``fast-leader-changes`` (row 3, KIP-279): leaders killed and restarted in
  quick succession with little new data; replicas must not diverge.
  Expected: valid.
- ``controller-isolated`` (row 8, KAFKA-15489): the active controller is cut
  off into a minority. The majority elects a new one; the old one must stop
  serving as leader (check-quorum) and can never commit meanwhile. Checked
  with ``raftlog quorum describe --status`` against each node in turn.
  Expected: valid.
- ``indefinite-across-failover`` (row 12, KAFKA-13574): leaders killed
  mid-produce; NOT_LEADER_OR_FOLLOWER and timeouts are ``info``
  (indefinite): such a write may or may not appear, no ok send may be lost.
  Expected: valid; the stats say how many indefinite sends did commit.
- ``last-replica-standing`` (row 7, KIP-966): two partitions drop both
  followers one after the other (the ISR shrinks to the leader), the leader
  is SIGKILLed *and* loses its un-fsynced bytes (a power cut: the
  lossy-fsync hook), the partitions heal and it restarts. Without KIP-966
  it would come back as the only ISR member and be elected, and the
  follower holding every acknowledged write would truncate to it. With
  ELR (on for a new cluster) the follower that left the ISR below
  ``min.insync.replicas`` is eligible, the leader's HW held meanwhile, and
  the restarted leader's unclean shutdown takes it out of the running.
  Expected: valid.
- ``disk-wipe-rejoin`` (row 5, KIP-903): a follower's partition directory
  is wiped and the follower restarted at once. The ISR keeps naming it until
  the controller accepts its new incarnation (refused while the old session
  lives; then the old one's ISR entries are removed): a window Kafka has too
  before KIP-966, reported in the notes. Once removed, it must not be in the
  ISR again until its log holds everything below the high watermark of the
  time of the wipe (a stale AlterPartition from its old incarnation must not
  re-add it). Expected: valid.
- ``zombie-producer`` (row 13): a transactional producer is fenced by a new
  instance with the same transactional.id; the zombie's commit must fail
  and its records must never be read under read_committed. Expected: valid;
  ``unknown`` if this cluster has no transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import compose
from chaos.checker.base import UNKNOWN, Anomaly, Checker, Result, make_result
from chaos.checker.kafka import kafka_checkers
from chaos.checker.replicas import ReplicaDivergence, read_log_below_hw
from chaos.client import (
    ConfluentProducer,
    KafkaPythonProducer,
    SendClient,
    final_read,
    transactions_available,
)
from chaos.db import ChaosDB, node_id
from chaos.history import JSON, NEMESIS, History, HistoryRecorder, Op, OpType, end_offsets_of
from chaos.nemesis import grudges as g
from chaos.nemesis.grudges import Node
from chaos.nemesis.process import LOSSY_ENV
from chaos.report import write_report
from data_plane.local_cluster import Timeouts
from raftlog.records.batch import iter_batches
from raftlog.records.errors import CorruptRecordError

TOPIC = "chaos"


@dataclass
class ScenarioOutcome:
    name: str
    result: Result
    expected: str
    notes: list[str] = field(default_factory=list)
    out: Path = Path(".")

    @property
    def valid(self) -> bool | str:
        return self.result.valid


class _Fixed:
    def __init__(self, result: Result) -> None:
        self.result = result

    def check(self, history: Any) -> Result:
        return self.result


class Harness:
    """A 3-node proxy-mode cluster, a topic, a recorded background workload,
    nemesis steps recorded as ``info`` ops, and the final check."""

    def __init__(
        self,
        out: Path,
        *,
        partitions: int = 1,
        properties: dict[str, str] | None = None,
        node_env: dict[Node, dict[str, str]] | None = None,
    ) -> None:
        self.out = out
        self.partitions = partitions
        if (out / "cluster").exists():
            shutil.rmtree(out / "cluster")
        out.mkdir(parents=True, exist_ok=True)
        (out / "history.jsonl").unlink(missing_ok=True)
        self.db = ChaosDB(
            out / "cluster",
            3,
            mode="proxy",
            properties=properties,
            timeouts=Timeouts.fast(),
            node_env=node_env,
        )
        self.pool = ThreadPoolExecutor(max_workers=12)
        self.rec = HistoryRecorder(out / "history.jsonl")
        self.t0 = time.monotonic_ns()
        self.values = itertools.count()
        self.procs = itertools.count(100)
        self._stop = asyncio.Event()
        self._load: list[asyncio.Task[None]] = []
        self.notes: list[str] = []

    def now(self) -> int:
        return time.monotonic_ns() - self.t0

    async def setup(self) -> None:
        from chaos.runner import _create_topic

        await self.db.setup()
        await _create_topic(self.db, self.partitions, self.pool)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    # --- workload ------------------------------------------------------------------

    def start_load(
        self,
        rate_hz: float,
        kinds: tuple[str, ...] = ("confluent", "kafka-python"),
    ) -> None:
        for kind in kinds:
            self._load.append(asyncio.create_task(self._producer_loop(kind, rate_hz)))

    async def _producer_loop(self, kind: str, rate_hz: float) -> None:
        boot = self.db.endpoint()
        proc = next(self.procs)
        client: SendClient | None = None
        while not self._stop.is_set():
            if client is None:
                client = await self.call(
                    (lambda: KafkaPythonProducer(boot, TOPIC))
                    if kind == "kafka-python"
                    else (lambda: ConfluentProducer(boot, TOPIC, idempotent=True))
                )
            value = next(self.values)
            part = value % self.partitions
            self.rec.record(
                self.now(), OpType.INVOKE, proc, "send", {"partition": part, "value": value}
            )
            try:
                typ, res = await self.call(client.send, part, value)
            except Exception as exc:
                typ, res = OpType.INFO, {"partition": part, "value": value, "error": repr(exc)}
            self.rec.record(self.now(), typ, proc, "send", res)
            if typ is OpType.INFO:  # crash the process: fresh id, fresh client
                with contextlib.suppress(Exception):
                    await self.call(client.close)
                client, proc = None, next(self.procs)
            await asyncio.sleep(1.0 / rate_hz)
        if client is not None:
            with contextlib.suppress(Exception):
                await self.call(client.close)

    async def stop_load(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._load)
        self._load.clear()

    # --- nemesis steps ---------------------------------------------------------------

    async def step(self, f: str, action: Callable[[], Awaitable[JSON]]) -> JSON:
        """Run one fault step, recorded as a nemesis op (shaded in the report)."""
        self.rec.record(self.now(), OpType.INVOKE, NEMESIS, f, None)
        try:
            value = await action()
        except Exception as exc:
            value = {"error": repr(exc)}
        self.rec.record(self.now(), OpType.INFO, NEMESIS, f, value)
        return value

    async def leader(self, partition: int = 0, timeout_s: float = 20.0) -> Node:
        deadline = time.monotonic() + timeout_s
        while True:
            who = await self.db.leader(TOPIC, partition)
            if who is not None:
                return who
            if time.monotonic() > deadline:
                raise RuntimeError(f"no leader for {TOPIC}-{partition} after {timeout_s} s")
            await asyncio.sleep(0.3)

    async def isr(self, partition: int = 0) -> list[Node] | None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(
            {
                **self.db.endpoint().librdkafka(),
                "log_level": 0,
                "socket.timeout.ms": 2000,
            }
        )
        try:
            md = await self.call(lambda: admin.list_topics(TOPIC, timeout=2))
        except Exception:
            return None
        t = md.topics.get(TOPIC)
        if t is None or partition not in t.partitions:
            return None
        return sorted(f"n{i}" for i in t.partitions[partition].isrs)

    async def wait_isr(self, want: set[Node], timeout_s: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = await self.isr()
            if got is not None and set(got) == want:
                return True
            await asyncio.sleep(0.3)
        return False

    async def cut(self, grudge: g.Grudge, *, replica_only: bool = False) -> JSON:
        links = g.links(grudge)
        if replica_only:
            assert self.db.kafka_net is not None
            await self.db.kafka_net.cut(links)
        else:
            assert self.db.net is not None
            await self.db.net.cut(links)
        return {
            "drops": {k: sorted(v) for k, v in grudge.items() if v},
            "replica_only": replica_only,
        }

    async def heal(self) -> JSON:
        assert self.db.net is not None
        await self.db.net.heal()
        return "healed"

    # --- the end ---------------------------------------------------------------------

    async def finish(
        self, extra: dict[str, Result] | None = None, *, quiet_s: float = 4.0
    ) -> Result:
        await self.stop_load()
        await self.heal()
        for n in self.db.nodes:
            await self.db.resume_node(n)
            await self.db.start_node(n)
        await self.db.wait_ready(60)
        await asyncio.sleep(quiet_s)
        finals: list[Op] = []
        for p in range(self.partitions):
            proc = next(self.procs)
            self.rec.record(self.now(), OpType.INVOKE, proc, "final-read", {"partitions": [p]})
            typ, value = await self.call(final_read, self.db.endpoint(), TOPIC, p)
            finals.append(self.rec.record(self.now(), typ, proc, "final-read", value))
        history = self.rec.history()
        await self.db.teardown()
        logs: dict[int | str, dict[int | str, bytes]] = {}
        for fop in finals:
            for p, hw in end_offsets_of(fop).items():
                logs[p] = {
                    n: read_log_below_hw(d, hw)
                    for n in self.db.nodes
                    if (d := self.db.partition_log_dir(n, TOPIC, p)).is_dir()
                }
        checkers: dict[str, Checker] = dict(kafka_checkers(idempotent=True))
        checkers["replica-divergence"] = _Fixed(ReplicaDivergence(logs).check(history))
        for name, r in (extra or {}).items():
            checkers[name] = _Fixed(r)
        result = compose(checkers).check(history)
        write_report(history, result, self.out, meta={"notes": list(self.notes)})
        return result

    async def close(self) -> None:
        self._stop.set()
        for t in self._load:
            t.cancel()
        self.rec.close()
        await self.db.teardown()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _sends(history: History) -> list[Op]:
    return [op for op in history if op.f == "send" and not op.is_invoke]


def _final_values(history: History) -> set[Any]:
    vals: set[Any] = set()
    for op in history:
        if op.f == "final-read" and op.type is OpType.OK:
            for recs in (op.value or {}).get("records", {}).values():
                vals.update(v for _o, v in recs)
    return vals


# --- the scenarios -----------------------------------------------------------------


async def isr_shrink_leader_dies(h: Harness) -> tuple[Result, str]:
    h.start_load(15)
    await asyncio.sleep(3)
    leader = await h.leader()
    # Followers stop fetching (replica links only: the leader still reaches
    # the controller, so it can shrink the ISR to itself).
    await h.step("start-partition", lambda: h.cut(g.isolate(leader, h.db.nodes), replica_only=True))
    shrunk = await h.wait_isr({leader}, 50)  # replica.lag.time.max.ms: 30 s
    h.notes.append(f"leader {leader}; ISR shrank to the leader alone: {shrunk}")
    t_refuse = h.now()
    await asyncio.sleep(3)  # writes now: must be refused (NOT_ENOUGH_REPLICAS)
    await h.step("start-kill", lambda: _kill(h, leader))
    await asyncio.sleep(3)
    await h.step("stop-partition", h.heal)
    await h.step("stop-kill", lambda: _start(h, leader))
    await asyncio.sleep(4)
    result = await h.finish()
    history = h.rec.history()
    refused = [
        op
        for op in _sends(history)
        if op.time_ns >= t_refuse
        and op.type is OpType.FAIL
        and "NOT_ENOUGH_REPLICAS" in str(op.value)
    ]
    acked_alone = [
        op
        for op in _sends(history)
        if op.type is OpType.OK and t_refuse + 1_000_000_000 <= op.time_ns
    ]
    h.notes.append(f"refused with NOT_ENOUGH_REPLICAS after the shrink: {len(refused)}")
    extra = make_result(
        {
            "isr-did-not-shrink": []
            if shrunk
            else [
                Anomaly(
                    "isr-did-not-shrink",
                    "the ISR never shrank to the leader; scenario not exercised",
                )
            ],
            "no-refusal": []
            if refused
            else [
                Anomaly(
                    "no-refusal", "no write was refused with NOT_ENOUGH_REPLICAS while ISR={leader}"
                )
            ],
        },
        stats={"refused": len(refused), "ok_after_shrink_window": len(acked_alone)},
    )
    result = compose({"run": _Fixed(result), "isr-shrink": _Fixed(extra)}).check(history)
    return result, "valid: writes refused while ISR = {leader}; no ok send lost"


async def _kill(h: Harness, n: Node) -> JSON:
    await h.db.kill_node(n)
    return {"nodes": [n]}


async def _start(h: Harness, n: Node, *, lose_unsynced: bool = False) -> JSON:
    await h.db.start_node(n, lose_unsynced=lose_unsynced)
    return {"nodes": [n]}


async def _kill_leader_cycles(h: Harness, times: int, *, down_s: float, up_s: float) -> None:
    """``times`` rounds of: SIGKILL the current leader, wait ``down_s``,
    restart it, wait ``up_s``."""
    for _ in range(times):
        leader = await h.leader()
        await h.step("start-kill", lambda leader=leader: _kill(h, leader))  # type: ignore[misc]
        await asyncio.sleep(down_s)
        await h.step("stop-kill", lambda leader=leader: _start(h, leader))  # type: ignore[misc]
        await asyncio.sleep(up_s)


async def fast_leader_changes(h: Harness) -> tuple[Result, str]:
    h.start_load(4, kinds=("confluent",))  # little new data between changes
    await asyncio.sleep(2)
    await _kill_leader_cycles(h, 6, down_s=1.0, up_s=1.5)
    await asyncio.sleep(3)
    return await h.finish(), "valid: no divergence below the HW, no ok send lost"


async def _describe(h: Harness, n: Node) -> dict[str, Any]:
    """``raftlog quorum describe --status`` against one node's controller
    listener (directly, not through a proxy): ``serving`` if it answered as
    the leader, with its LeaderId/LeaderEpoch/HighWatermark."""
    assert h.db.cluster is not None
    port = next(x.controller_port for x in h.db.cluster.layout.nodes if x.node_id == node_id(n))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "data_plane",
        "quorum",
        "describe",
        "--status",
        "--bootstrap-controller",
        f"127.0.0.1:{port}",
        "--timeout-ms",
        "1500",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    fields = {}
    for line in out.decode().splitlines():
        k, _, v = line.partition(":")
        fields[k.strip()] = v.strip()
    serving = proc.returncode == 0 and fields.get("LeaderId") == str(node_id(n))
    return {
        "node": n,
        "rc": proc.returncode,
        "serving": serving,
        "epoch": int(fields.get("LeaderEpoch", -1)),
        "hw": int(fields.get("HighWatermark", -1)),
        "error": err.decode().strip()[-160:] if proc.returncode else "",
    }


async def controller_isolated(h: Harness) -> tuple[Result, str]:
    h.start_load(10)
    await asyncio.sleep(2)
    old = await h.db.controller()
    if old is None:
        raise RuntimeError("no active controller")
    await h.step("start-partition", lambda: h.cut(g.isolate(old, h.db.nodes)))
    t_cut = time.monotonic()
    samples: list[dict[str, Any]] = []
    while time.monotonic() - t_cut < 12:
        round_ = await asyncio.gather(*(_describe(h, n) for n in h.db.nodes))
        at = time.monotonic() - t_cut
        for s in round_:
            s["t"] = round(at, 2)
        samples.append({"t": round(at, 2), "nodes": round_})
        await asyncio.sleep(0.3)
    await h.step("stop-partition", h.heal)
    (h.out / "quorum-samples.json").write_text(json.dumps(samples, indent=1))
    bad: dict[str, list[Anomaly]] = {
        "two-leaders-same-epoch": [],
        "new-leader-not-elected": [],
        "old-leader-never-resigned": [],
        "isolated-leader-committed": [],
    }
    fetch_s = Timeouts.fast().fetch_ms / 1000
    old_hw0: int | None = None
    last_old_serving = -1.0
    new_leaders: set[str] = set()
    for smp in samples:
        serving = [s for s in smp["nodes"] if s["serving"]]
        epochs = [s["epoch"] for s in serving]
        if len(epochs) != len(set(epochs)):
            bad["two-leaders-same-epoch"].append(
                Anomaly("two-leaders-same-epoch", f"at +{smp['t']} s", (), {"sample": smp})
            )
        for s in serving:
            if s["node"] == old:
                last_old_serving = smp["t"]
                old_hw0 = s["hw"] if old_hw0 is None else old_hw0
                if s["hw"] > old_hw0 and smp["t"] > 0.5:
                    bad["isolated-leader-committed"].append(
                        Anomaly(
                            "isolated-leader-committed",
                            f"isolated old leader's HW moved {old_hw0} -> {s['hw']}",
                            (),
                            {},
                        )
                    )
            else:
                new_leaders.add(s["node"])
    if not new_leaders:
        bad["new-leader-not-elected"].append(
            Anomaly("new-leader-not-elected", "the majority never elected a new controller")
        )
    # check-quorum: resign after ~1.5 fetch timeouts without a majority; allow 3.
    if last_old_serving > 3 * fetch_s:
        bad["old-leader-never-resigned"].append(
            Anomaly(
                "old-leader-never-resigned",
                f"isolated controller {old} still served as leader at +{last_old_serving} s",
            )
        )
    h.notes.append(
        f"old controller {old}; new {sorted(new_leaders)}; old served as leader "
        f"until +{last_old_serving} s after the cut; {len(samples)} samples"
    )
    extra = make_result(
        bad,
        stats={
            "old": old,
            "new": sorted(new_leaders),
            "old_last_serving_s": last_old_serving,
            "samples": len(samples),
        },
    )
    await asyncio.sleep(3)
    return (
        await h.finish({"controller-split-brain": extra}),
        "valid: a new controller elected, the isolated one resigned, never two in one epoch",
    )


async def indefinite_across_failover(h: Harness) -> tuple[Result, str]:
    h.start_load(30, kinds=("confluent", "kafka-python", "kafka-python"))
    await asyncio.sleep(2)
    await _kill_leader_cycles(h, 3, down_s=4, up_s=3)
    result = await h.finish()
    history = h.rec.history()
    final = _final_values(history)
    indefinite = [op for op in _sends(history) if op.type is OpType.INFO]
    nlf = [op for op in indefinite if "NOT_LEADER" in str(op.value).upper()]
    stats = {
        "indefinite": len(indefinite),
        "not_leader_or_follower": len(nlf),
        "not_leader_later_seen": sum(op.value["value"] in final for op in nlf),
        "indefinite_later_seen": sum(op.value["value"] in final for op in indefinite),
    }
    h.notes.append(f"indefinite sends: {stats}")
    extra = make_result(
        {
            "no-indefinite": []
            if indefinite
            else [
                Anomaly(
                    "no-indefinite",
                    "no send was in flight across a failover; scenario not exercised",
                )
            ]
        },
        stats=stats,
    )
    result = compose({"run": _Fixed(result), "indefinite": _Fixed(extra)}).check(history)
    return result, "valid: indefinite sends may appear; no ok send lost"


async def last_replica_standing(h: Harness) -> tuple[Result, str]:
    h.start_load(15)
    await asyncio.sleep(3)
    leader = await h.leader()
    f1, f2 = [n for n in h.db.nodes if n != leader]
    pair = {leader: frozenset({f2}), f2: frozenset({leader})}
    await h.step("start-partition", lambda: h.cut(pair, replica_only=True))
    shrunk1 = await h.wait_isr({leader, f1}, 50)
    await asyncio.sleep(3)  # acked at ISR {leader, f1}; the leader never fsyncs them
    both = {leader: frozenset({f1, f2}), f1: frozenset({leader}), f2: frozenset({leader})}
    await h.step("start-partition", lambda: h.cut(both, replica_only=True))
    shrunk2 = await h.wait_isr({leader}, 50)
    await asyncio.sleep(1)
    await h.step("start-lost-writes", lambda: _kill(h, leader))  # power cut on restart
    await asyncio.sleep(2)
    await h.step("stop-partition", h.heal)
    await h.step(
        "stop-lost-writes", lambda: _start(h, leader, lose_unsynced=True)
    )  # drops unsynced bytes
    h.notes.append(
        f"leader {leader}; ISR -> {{leader,{f1}}}: {shrunk1}; -> {{leader}}: "
        f"{shrunk2}; leader power-cut and restarted as the last ISR member"
    )
    await asyncio.sleep(4)
    result = await h.finish()
    lost = result.children["lost-writes"].anomaly_count()
    h.notes.append(f"acknowledged writes lost: {lost}")
    return result, "valid: KIP-966 elects the eligible follower; no ok send lost"


def _log_end(d: Path) -> int:
    """Next offset after the last whole batch of a partition dir (read-only)."""
    end = 0
    if not d.is_dir():
        return end
    for f in sorted(d.glob("*.log"), key=lambda p: int(p.stem)):
        data = f.read_bytes()
        with contextlib.suppress(CorruptRecordError):
            for header, _start in iter_batches(data):
                end = header.last_offset + 1
    return end


async def disk_wipe_rejoin(h: Harness) -> tuple[Result, str]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    h.start_load(20)
    await asyncio.sleep(4)
    leader = await h.leader()
    follower = next(n for n in h.db.nodes if n != leader)

    def hw() -> int:
        c = Consumer(
            {**h.db.endpoint().librdkafka(), "group.id": "wipe", "log_level": 0}
        )
        try:
            return int(c.get_watermark_offsets(CTP(TOPIC, 0), timeout=5)[1])
        finally:
            c.close()

    await h.step("start-kill", lambda: _kill(h, follower))
    hw0 = await h.call(hw)
    pdir = h.db.partition_log_dir(follower, TOPIC, 0)

    async def wipe() -> JSON:
        shutil.rmtree(pdir, ignore_errors=True)
        return {"wiped": str(pdir), "hw_before": hw0}

    await h.step("wipe-disk", wipe)
    await h.step("stop-kill", lambda: _start(h, follower))
    bad: list[Anomaly] = []
    # The ISR still names the follower until the controller hears of its new
    # incarnation (its registration is refused while the old session lives,
    # then accepted with the old one's ISR entries removed): that window is the
    # same as Kafka's before KIP-966. The KIP-903 question is the *re-add*.
    removed_at: float | None = None
    rejoined_at: float | None = None
    t = time.monotonic()
    while time.monotonic() - t < 30:
        isr = await h.isr()
        if isr is not None and follower not in isr and removed_at is None:
            removed_at = round(time.monotonic() - t, 2)
        if isr is not None and follower in isr and removed_at is not None:
            end = _log_end(pdir)
            rejoined_at = round(time.monotonic() - t, 2)
            if end < hw0:
                bad.append(
                    Anomaly(
                        "rejoined-isr-behind-hw",
                        f"{follower} back in ISR {isr} with log end {end} < HW {hw0}",
                        (),
                        {"log_end": end, "hw": hw0},
                    )
                )
            break
        await asyncio.sleep(0.1)
    if removed_at is None:
        bad.append(
            Anomaly(
                "wiped-replica-never-removed",
                f"{follower} restarted on an empty disk but stayed in the ISR 30 s",
            )
        )
    h.notes.append(
        f"wiped {follower} (leader {leader}); HW at wipe {hw0}; removed from the "
        f"ISR after {removed_at} s, back in it after {rejoined_at} s"
    )
    extra = make_result(
        {"rejoined-isr-behind-hw": bad},
        stats={"hw_at_wipe": hw0, "removed_after_s": removed_at, "rejoined_after_s": rejoined_at},
        unknown_reason=""
        if rejoined_at is not None
        else "the wiped follower never rejoined the ISR within 30 s",
    )
    return (
        await h.finish({"isr-after-wipe": extra}),
        "valid: the wiped follower rejoins the ISR only once caught up",
    )


async def zombie_producer(h: Harness) -> tuple[Result, str]:
    boot = h.db.endpoint()
    if not await h.call(transactions_available, boot):
        h.notes.append("transactions unavailable on this cluster")
        return (
            make_result({}, unknown_reason="transactions unavailable"),
            "unknown: no transactions",
        )
    h.start_load(5, kinds=("confluent",))
    zombie = await h.call(
        lambda: ConfluentProducer(boot, TOPIC, idempotent=True, transactional_id="chaos-zombie")
    )
    zvals = [next(h.values) for _ in range(5)]
    zproc, nproc = next(h.procs), next(h.procs)

    def zombie_begin() -> None:
        zombie.p.begin_transaction()
        for v in zvals:
            zombie.p.produce(TOPIC, str(v).encode(), partition=0)
        zombie.p.flush(5)

    h.rec.record(
        h.now(),
        OpType.INVOKE,
        zproc,
        "txn",
        {"sends": [{"partition": 0, "value": v} for v in zvals], "abort": False},
    )
    await h.call(zombie_begin)
    fresh = await h.call(
        lambda: ConfluentProducer(boot, TOPIC, idempotent=True, transactional_id="chaos-zombie")
    )
    nvals = [next(h.values) for _ in range(5)]
    h.rec.record(
        h.now(),
        OpType.INVOKE,
        nproc,
        "txn",
        {"sends": [{"partition": 0, "value": v} for v in nvals], "abort": False},
    )
    typ, val = await h.call(fresh.txn, [(0, v, None) for v in nvals], False)
    h.rec.record(h.now(), typ, nproc, "txn", val)

    def zombie_commit() -> tuple[OpType, JSON]:
        value: dict[str, JSON] = {
            "sends": [{"partition": 0, "value": v} for v in zvals],
            "abort": False,
        }
        try:
            zombie.p.commit_transaction(5)
        except Exception as exc:
            value["error"] = str(exc)[:200]
            return OpType.FAIL, value  # fenced: a definite refusal
        return OpType.OK, value

    ztyp, zval = await h.call(zombie_commit)
    h.rec.record(h.now(), ztyp, zproc, "txn", zval)
    h.notes.append(
        f"new instance commit: {typ.value}; zombie commit: {ztyp.value} "
        f"({zval.get('error', '') if isinstance(zval, dict) else ''})"
    )
    await asyncio.sleep(2)
    result = await h.finish()
    final = _final_values(h.rec.history())
    seen = [v for v in zvals if v in final]
    extra = make_result(
        {
            "zombie-committed": []
            if ztyp is not OpType.OK
            else [Anomaly("zombie-committed", "a fenced producer's commit succeeded")],
            "zombie-records-visible": []
            if not seen
            else [
                Anomaly("zombie-records-visible", f"read_committed saw the zombie's values {seen}")
            ],
            "new-instance-not-visible": []
            if typ is not OpType.OK or all(v in final for v in nvals)
            else [
                Anomaly(
                    "new-instance-not-visible", "the new instance's committed values are missing"
                )
            ],
        },
        stats={"zombie_commit": ztyp.value, "new_commit": typ.value},
    )
    result = compose({"run": _Fixed(result), "zombie": _Fixed(extra)}).check(h.rec.history())
    return result, "valid: the zombie is fenced, its records never visible"


Scenario = Callable[[Harness], Awaitable[tuple[Result, str]]]

SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    "isr-shrink-leader-dies": (isr_shrink_leader_dies, {}),
    "fast-leader-changes": (fast_leader_changes, {}),
    "controller-isolated": (controller_isolated, {}),
    "indefinite-across-failover": (indefinite_across_failover, {}),
    "last-replica-standing": (
        last_replica_standing,
        {"node_env": {f"n{i}": dict(LOSSY_ENV) for i in (1, 2, 3)}},
    ),
    "disk-wipe-rejoin": (disk_wipe_rejoin, {}),
    "zombie-producer": (zombie_producer, {}),
}


async def run_scenario(name: str, out: str | Path) -> ScenarioOutcome:
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    fn, kwargs = SCENARIOS[name]
    h = Harness(Path(out).resolve(), **kwargs)
    try:
        await h.setup()
        result, expected = await fn(h)
    finally:
        await h.close()
    outcome = ScenarioOutcome(name, result, expected, h.notes, h.out)
    (h.out / "scenario.json").write_text(
        json.dumps(
            {
                "name": name,
                "valid": result.valid,
                "expected": expected,
                "notes": h.notes,
                "result": result.to_json(),
            },
            indent=1,
            default=str,
        )
    )
    return outcome


def summarize(o: ScenarioOutcome) -> list[str]:
    lines = [f"scenario {o.name}: valid={o.valid}", f"  expected: {o.expected}"]
    lines += [f"  note: {n}" for n in o.notes]

    def walk(name: str, r: Result, depth: int) -> None:
        lines.append(
            "  " * depth
            + f"{name}: {r.valid}"
            + (f" ({r.anomaly_count()} anomalies: {sorted(r.anomalies)})" if r.anomalies else "")
        )
        for k, c in r.children.items():
            walk(k, c, depth + 1)

    walk("result", o.result, 1)
    lines.append(f"  out: {o.out}")
    return lines


__all__ = ("SCENARIOS", "UNKNOWN", "ScenarioOutcome", "run_scenario", "summarize")
