"""Real chaos runs against real node processes.

- smoke (default suite, < 3 min): kill + partition on 3 nodes, a few hundred
  ops, in the loopback proxy mode; the verdict must be valid.
- TLS smoke (default suite, < 1 min): kill + pause + partition with every
  listener SSL and client certificates required (``--tls``).
- netns smoke (default suite, < 2 min): the same in network namespaces,
  when root and namespaces are available (else skipped, reason printed);
  clients in the root namespace, nodes at their own addresses, nftables
  partitions; nothing left behind.
- unsafe mode (proof the suite can fail): nodes acknowledge acks=all before
  the HW (``RAFTLOG_UNSAFE_ACK_BEFORE_HW``); killing leaders must show lost
  writes.
- the unsafe setting is refused without its confirmation flag.
- TLS with the txn workload and clock faults (marker ``long``).
- compact and txn workloads (marker ``long``): keyed sends to a compacted
  topic, and transactions, under faults; reassignments between kills.
- soak (marker ``soak``): many seeds, every nemesis.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.nemesis import netns
from chaos.runner import RunOptions, RunOutcome, run, summarize

UNSAFE = {"RAFTLOG_UNSAFE_ACK_BEFORE_HW": "1", "RAFTLOG_I_KNOW_THIS_IS_UNSAFE": "1"}


def test_smoke_kill_and_partition_is_valid(tmp_path: Path) -> None:
    outcome = _smoke(tmp_path, 1, ("kill", "partition"), mode="proxy")
    assert outcome.counts["ok"] > 100
    assert outcome.valid is True, outcome.result.to_json()
    assert (tmp_path / "run" / "index.html").exists()
    # The run closed its clients: nothing keeps reconnecting to the stopped
    # cluster (kafka-python's network thread would, drawing on the global
    # `random` under later tests).
    deadline = time.monotonic() + 10
    while (left := _client_threads()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], left


def test_tls_smoke_kill_pause_and_partition_is_valid(tmp_path: Path) -> None:
    """The same promise with every connection over mutual TLS: clients,
    replication, the quorum and the brokers' controller channel. The faults
    also cut connections mid-handshake; no node may log an error for it."""
    outcome = _smoke(tmp_path, 3, ("kill", "pause", "partition"), mode="proxy", tls=True)
    assert outcome.tls and "mutual TLS" in summarize(outcome)[0]
    # Real work under the faults (a pause stalls clients longer than a
    # kill, so fewer than the kill + partition smoke's); the verdict is the
    # point.
    assert outcome.counts["ok"] > 50
    assert outcome.valid is True, outcome.result.to_json()
    cluster = tmp_path / "run" / "cluster"
    props = (cluster / "node-1" / "server.properties").read_text()
    assert "PLAINTEXT:SSL" in props and "CONTROLLER:SSL" in props and "R2:SSL" in props
    assert "ssl.client.auth=required" in props
    for log in cluster.glob("node-*/server.log"):
        text = log.read_text()
        assert "Traceback" not in text and " ERROR " not in text, (log, text[-3000:])


def _client_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kafka-python")]


def test_netns_smoke_kill_and_partition_is_valid(tmp_path: Path) -> None:
    reason = netns.availability()
    if reason is not None:
        print(f"SKIP netns smoke: {reason}")
        pytest.skip(f"netns mode unavailable: {reason}")
    before = set(
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    )
    # Seed 2's plan: kill the leader, partition halves, kill a minority.
    outcome = _smoke(tmp_path, 2, ("kill", "partition"), mode="netns")
    assert outcome.mode == "netns"
    history = (tmp_path / "run" / "history.jsonl").read_text()
    assert '"start-kill"' in history and '"start-partition"' in history
    assert '"drops"' in history  # a grudge really cut links
    # Real work under faults; availability on a loaded 2-core machine varies
    # a lot (a restarted node took 5-9 s to come up at load 15), so the bar
    # is low: the verdict is what this test is about.
    assert outcome.counts["ok"] > 25
    assert outcome.valid is True, outcome.result.to_json()
    after = set(
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    )
    assert not {n for n in after - before if n.startswith(netns.NS_PREFIX)}


def test_netns_db_signals_the_node_itself_inside_its_namespace(tmp_path: Path) -> None:
    """The recorded PID is the python node (``ip netns exec`` execs), it runs
    in its own network namespace, and pause / kill / restart act on it;
    teardown leaves no namespace and no process."""
    reason = netns.availability()
    if reason is not None:
        print(f"SKIP netns db: {reason}")
        pytest.skip(f"netns mode unavailable: {reason}")
    from chaos.db import ChaosDB
    from data_plane.local_cluster import Timeouts, process_state

    async def main() -> None:
        db = ChaosDB(tmp_path / "c", 3, mode="netns", timeouts=Timeouts.fast())
        pids: list[int] = []
        try:
            await db.setup()
            root_ns = os.readlink("/proc/self/ns/net")
            for n in db.nodes:
                pid = db.pid(n)
                assert pid is not None
                pids.append(pid)
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                assert b"-m\0data_plane\0server" in cmdline and b"ip\0netns" not in cmdline
                assert os.readlink(f"/proc/{pid}/ns/net") != root_ns
            assert db.bootstrap_servers().startswith("10.77.")
            assert await db.controller() in db.nodes  # probed at the node addresses
            await db.pause_node("n1")
            assert process_state(pids[0]) == "T"
            await db.resume_node("n1")
            await db.kill_node("n2")
            assert db.pid("n2") is None
            await db.start_node("n2")
            assert db.pid("n2") not in (None, pids[1])
            await db.wait_ready(60)
        finally:
            await db.teardown()
            await db.release()
        for pid in pids:
            assert process_state(pid) in (None, "Z")
        assert db.ns_net is not None
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"{db.ns_net.prefix}-" not in listed

    asyncio.run(main())


def _isolate_then_kill(tmp_path: Path, *, time_limit_s: float, **extra: Any) -> RunOptions:
    """The ``isolate-then-kill-leader`` schedule, seed 3, one partition, proxy mode."""
    return RunOptions(seed=3, faults=("isolate-then-kill-leader",), time_limit_s=time_limit_s,
                      rate_hz=60, quiet_s=6, interval_s=8, duration_s=5, partitions=1,
                      mode="proxy", out=str(tmp_path / "run"), **extra)


def test_unsafe_ack_before_hw_is_caught(tmp_path: Path) -> None:
    """Deterministic in what matters: the ``isolate-then-kill-leader``
    schedule cuts the leader of the (only) partition off from its followers,
    lets it acknowledge writes alone, kills it and elects a follower that
    never had them. Two such episodes per run (at 2 and 10 s); each loses
    every write the isolated leader acknowledged, so one run suffices (no
    lucky kills)."""
    opts = _isolate_then_kill(tmp_path, time_limit_s=18, env=UNSAFE)
    outcome = asyncio.run(run(opts))
    lost = outcome.result.children["lost-writes"]
    history = (tmp_path / "run" / "history.jsonl").read_text()
    print(outcome.counts, {k: len(v) for k, v in lost.anomalies.items()})
    assert history.count('"kill-isolated-leader"') >= 4  # invoke + completion, >= 2 episodes
    assert outcome.valid is False
    assert lost.valid is False and lost.anomaly_count() > 0
    assert set(lost.anomalies) <= {"lost-write", "lost-at-end"}


@pytest.mark.long
def test_isolate_then_kill_leader_is_valid_on_the_safe_cluster(tmp_path: Path) -> None:
    """The control: the same schedule against the default (safe) cluster
    loses nothing: the isolated leader cannot reach minISR, so it
    acknowledges nothing alone."""
    opts = _isolate_then_kill(tmp_path, time_limit_s=18)
    outcome = asyncio.run(run(opts))
    print(outcome.counts, outcome.valid)
    assert outcome.counts["ok"] > 50
    assert outcome.valid is True, outcome.result.to_json()


def test_unsafe_mode_is_refused_without_confirmation(tmp_path: Path) -> None:
    code = "from data_plane.broker.replica_manager import unsafe_ack_before_hw_enabled as f\nf()"
    env = {**os.environ, "RAFTLOG_UNSAFE_ACK_BEFORE_HW": "1"}
    env.pop("RAFTLOG_I_KNOW_THIS_IS_UNSAFE", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "refusing to start" in r.stderr


def _smoke(tmp_path: Path, seed: int, faults: tuple[str, ...], **options: Any) -> RunOutcome:
    """A default-suite smoke run: 20 s with three faults (at 2, 8 and 14 s),
    at 60 ops/s (as many ops as 30 s at 40/s), 6 s quiet."""
    return _short_run(tmp_path, seed, faults, time_limit_s=20, rate_hz=60, quiet_s=6, **options)


def _short_run(tmp_path: Path, seed: int, faults: tuple[str, ...], **options: Any) -> RunOutcome:
    """A short scenario run (the long tests' shape: 40 s at 40 ops/s, a
    3 s fault every 6 s, 8 s quiet; ``options`` override any of it), its
    figures printed."""
    settings: dict[str, Any] = {"time_limit_s": 40, "rate_hz": 40, "quiet_s": 8,
                                "interval_s": 6, "duration_s": 3, "mode": "auto", **options}
    outcome = asyncio.run(run(RunOptions(seed=seed, faults=faults,
                                         out=str(tmp_path / "run"), **settings)))
    print(outcome.ops, outcome.counts, outcome.valid)
    return outcome


@pytest.mark.long
def test_tls_transactions_under_process_network_and_clock_faults_are_valid(
        tmp_path: Path) -> None:
    """Mutual TLS everywhere (``--tls``), the txn workload (transaction
    markers and the coordinator's calls to the leaders go over TLS too),
    and kills, pauses, partitions and clock skew, in netns mode where the
    machine allows it (nodes dial each other at their own addresses, which
    their certificates must name)."""
    outcome = _short_run(tmp_path, 4301, ("kill", "pause", "partition", "clock"),
                         time_limit_s=60, quiet_s=10, workload="txn", tls=True)
    history = (tmp_path / "run" / "history.jsonl").read_text()
    assert '"f":"txn"' in history and outcome.counts["ok"] > 50
    assert outcome.valid is True, outcome.result.to_json()


@pytest.mark.long
def test_netns_txn_workload_with_faults_is_valid(tmp_path: Path) -> None:
    """Transactions (a quarter aborted on purpose) under kill + partition in
    netns mode: aborted-reads has aborted values to look for, and finds none."""
    reason = netns.availability()
    if reason is not None:
        print(f"SKIP netns txn: {reason}")
        pytest.skip(f"netns mode unavailable: {reason}")
    outcome = _short_run(tmp_path, 2, ("kill", "partition"), time_limit_s=30, quiet_s=10,
                         mode="netns", workload="txn")
    history = (tmp_path / "run" / "history.jsonl").read_text()
    assert '"f":"txn"' in history and '"abort":true' in history
    assert outcome.counts["fail"] > 0  # deliberately aborted transactions
    assert outcome.valid is True, outcome.result.to_json()


@pytest.mark.long
def test_compact_workload_with_faults_is_valid(tmp_path: Path) -> None:
    """Keyed sends to a compacted topic whose segments roll every 2 s, under
    kill + pause + partition: the cleaners remove most acknowledged writes
    during the run, and every one of them is superseded by a newer record of
    its key in the final log (no key goes back in time, no offset changes)."""
    outcome = _short_run(tmp_path, 3, ("kill", "pause", "partition"), time_limit_s=30,
                         workload="compact")
    stats = outcome.result.children["lost-writes"].stats
    print(stats)
    assert outcome.valid is True, outcome.result.to_json()
    assert stats["superseded"] > stats["ok_sends"] // 2  # the cleaners did run


def _reassign_run(tmp_path: Path, fault: str) -> tuple[list[Any], list[Any]]:
    """A valid 40 s run of ``fault`` between kills; the completed values of
    its start ops and of its heals."""
    outcome = _short_run(tmp_path, 5, (fault, "kill"))
    assert outcome.valid is True, outcome.result.to_json()
    history = (tmp_path / "run" / "history.jsonl").read_text().splitlines()
    completed = [o for o in map(json.loads, history) if o["type"] != "invoke"]
    started = [o["value"] for o in completed if o["f"] == f"start-{fault}"]
    heals = [o["value"] for o in completed if o["f"] == f"stop-{fault}"]
    assert started and all(set(v["answers"].values()) == {"NONE"} for v in started)
    assert heals
    return started, heals


@pytest.mark.long
def test_reassignments_with_kills_are_valid(tmp_path: Path) -> None:
    """Partition reassignment (KIP-455) as a fault, between kills: replicas
    are removed (down to one) and added back while the workload writes with
    acks=all, and no acknowledged write is lost."""
    _started, heals = _reassign_run(tmp_path, "reassign")
    assert all(v["finished"] for v in heals)


@pytest.mark.long
def test_throttled_reassignments_with_kills_are_valid(tmp_path: Path) -> None:
    """The same moves under replication throttles (KIP-73, as low as
    1 KiB/s): added replicas catch up slowly, in-sync ones are never held
    back, and no acknowledged write is lost; every fault sets its throttles
    and its heal removes them."""
    started, heals = _reassign_run(tmp_path, "throttled-reassign")
    assert all(v["throttle_set"] == {"topic": "NONE", "brokers": "NONE"} for v in started)
    assert all(v["throttle_removed"] == {"topic": "NONE", "brokers": "NONE"} for v in heals)


@pytest.mark.long
def test_idle_connection_expiry_under_faults_is_valid(tmp_path: Path) -> None:
    """Every node closes connections idle for 1 s (``connections.max.idle.ms``),
    so pauses and partitions of several seconds have the live nodes drop the
    affected node's connections, and every client (replication, Raft,
    heartbeats, the workload) must reconnect; no acknowledged write is lost."""
    outcome = _short_run(tmp_path, 3401, ("kill", "pause", "partition"),
                         properties={"connections.max.idle.ms": "1000"})
    assert outcome.valid is True, outcome.result.to_json()


def _group_progress(outcome: RunOutcome) -> tuple[int, int]:
    """(records the group committed, ok sends): a group run must have consumed."""
    committed = outcome.result.children["committed-unread"].stats["committed"]
    ok_sends = sum(1 for line in (outcome.out / "history.jsonl").read_text().splitlines()
                   if '"f":"send"' in line and '"type":"ok"' in line)
    return sum(max(0, int(c)) for c in committed.values()), ok_sends


def test_kip848_consumer_group_under_kill_and_partition_is_valid(tmp_path: Path) -> None:
    """Polls by members of one KIP-848 consumer group while nodes (and so the
    group coordinator and partition leaders) are killed and partitioned: no
    acknowledged record lost, none committed unread, and the group consumed."""
    outcome = _short_run(tmp_path, 4101, ("kill", "partition"), time_limit_s=24, rate_hz=60,
                         quiet_s=8, group_protocol="consumer")
    assert outcome.valid is True, outcome.result.to_json()
    committed, ok_sends = _group_progress(outcome)
    print(f"group committed {committed} of {ok_sends} acknowledged records")
    assert ok_sends > 50 and committed >= ok_sends // 2


@pytest.mark.long
@pytest.mark.parametrize("protocol", ["classic", "consumer", "mixed"])
def test_consumer_groups_under_kill_pause_and_partition_are_valid(
        tmp_path: Path, protocol: str) -> None:
    outcome = _short_run(tmp_path, 4201, ("kill", "pause", "partition"), group_protocol=protocol)
    assert outcome.valid is True, outcome.result.to_json()
    committed, ok_sends = _group_progress(outcome)
    print(f"{protocol}: group committed {committed} of {ok_sends} acknowledged records")
    assert committed >= ok_sends // 2


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(100, 130))
def test_soak(seed: int, tmp_path: Path) -> None:
    opts = RunOptions(
        seed=seed,
        faults=("kill", "pause", "partition", "clock", "lost-writes", "disk-full", "reassign"),
        time_limit_s=60,
        rate_hz=100,
        mode="auto",
        out=str(tmp_path / "run"),
    )
    outcome = asyncio.run(run(opts))
    assert outcome.valid is True, outcome.result.to_json()
