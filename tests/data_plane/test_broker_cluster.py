"""Real processes: three combined nodes and one broker-only node on loopback.

The broker role's metadata side end to end: every broker registers and is
unfenced (``raftlog cluster describe``), the broker-only node is a Raft
observer (``quorum describe --replication``), the broker listener answers
ApiVersions; topics with RF 3; SIGKILL a broker -> fenced within
``broker.session.timeout.ms`` and its partitions get new leaders from the
ISR; restart it -> a new broker epoch, unfenced; SIGKILL the active
controller -> the new one serves and every topic is intact.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from data_plane.storage_format import random_uuid
from raftlog.net import KafkaProtocolClient
from raftlog.runtime.local_quorum import free_ports

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "data_plane.cli"]
SESSION_TIMEOUT_MS = 3000
COMBINED = (1, 2, 3)
BROKER_ONLY = 4


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        ports = free_ports(7)
        self.controller_ports = {n: ports[n - 1] for n in COMBINED}
        self.broker_ports = {n: ports[2 + n] for n in (*COMBINED, BROKER_ONLY)}
        self.cluster_id = random_uuid()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.controller_ports.items())
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.controller_ports.values())
        for node_id in (*COMBINED, BROKER_ONLY):
            combined = node_id in COMBINED
            listeners = f"PLAINTEXT://127.0.0.1:{self.broker_ports[node_id]}"
            if combined:
                listeners += f",CONTROLLER://127.0.0.1:{self.controller_ports[node_id]}"
            self.config(node_id).write_text(
                f"node.id={node_id}\n"
                f"process.roles={'broker,controller' if combined else 'broker'}\n"
                f"controller.quorum.voters={voters}\n"
                f"listeners={listeners}\n"
                "controller.listener.names=CONTROLLER\n"
                f"log.dirs={root}/data{node_id}\n"
                f"broker.rack=rack{node_id % 2}\n"
                f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}\n"
                "broker.heartbeat.interval.ms=500\n"
                "metadata.log.max.record.bytes.between.snapshots=2000\n"
            )

    def config(self, node_id: int) -> Path:
        return self.root / f"server{node_id}.properties"

    def log(self, node_id: int) -> str:
        return (self.root / f"node{node_id}.log").read_text(errors="replace")

    def start(self, node_id: int) -> None:
        out = open(self.root / f"node{node_id}.log", "ab")  # noqa: SIM115 - owned by the child
        self.procs[node_id] = subprocess.Popen(
            [*CLI, "server", "start", str(self.config(node_id))], stderr=out, stdout=out
        )

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> int:
        proc = self.procs.pop(node_id)
        os.kill(proc.pid, sig)
        return proc.wait(timeout=20)

    def stop_all(self) -> None:
        for node_id in list(self.procs):
            proc = self.procs[node_id]
            if proc.poll() is None:
                self.kill(node_id, signal.SIGKILL)


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}): {result.stderr}")
    return result


def brokers(bootstrap: str) -> dict[int, dict[str, str]]:
    """``cluster describe`` as broker id -> fields."""
    out = cli("cluster", "describe", "--bootstrap-controller", bootstrap).stdout
    result = {}
    for line in out.splitlines()[1:]:
        fields = dict(part.split(": ", 1) for part in line.split("\t"))
        result[int(fields["BrokerId"])] = fields
    return result


def partitions(bootstrap: str, topic: str) -> list[dict[str, str]]:
    out = cli("topics", "describe", "--topic", topic, "--bootstrap-controller", bootstrap).stdout
    return [
        dict(part.split(": ", 1) for part in line.strip().split("\t"))
        for line in out.splitlines()
        if "\tPartition: " in line
    ]


def leader_id(bootstrap: str) -> int:
    out = cli("quorum", "describe", "--status", "--bootstrap-controller", bootstrap).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines())
    return int(fields["LeaderId"])


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``check`` until true; return the seconds it took."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.2)
    return time.monotonic() - started


def epochs_logged(cluster: Cluster, node_id: int) -> list[int]:
    return [
        int(m) for m in re.findall(r"registered with broker epoch (\d+)", cluster.log(node_id))
    ]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


def test_brokers_register_get_fenced_on_kill_and_come_back_with_a_new_epoch(
    cluster: Cluster,
) -> None:
    for node_id in (*COMBINED, BROKER_ONLY):
        cli("storage", "format", f"--cluster-id={cluster.cluster_id}",
            "--config", str(cluster.config(node_id)))
        cluster.start(node_id)
    b = cluster.bootstrap
    everyone = {*COMBINED, BROKER_ONLY}

    wait_for("all four brokers unfenced",
             lambda: {i for i, f in brokers(b).items() if f["Fenced"] == "false"} == everyone, 20)
    listed = brokers(b)
    assert listed[BROKER_ONLY]["Endpoint"] == f"127.0.0.1:{cluster.broker_ports[BROKER_ONLY]}"
    assert listed[1]["Rack"] == "rack1" and listed[2]["Rack"] == "rack0"

    # The broker-only node fetches as an observer; the combined ones are voters.
    replication = cli("quorum", "describe", "--replication", "--bootstrap-controller", b).stdout
    roles = {int(line.split()[0]): line.split()[-1] for line in replication.splitlines()[1:]}
    assert roles[BROKER_ONLY] == "Observer"
    assert sorted(roles[n] for n in COMBINED) == ["Follower", "Follower", "Leader"]

    # Each broker listener serves ApiVersions (the data side adds the rest).
    async def api_versions(port: int) -> None:
        client = KafkaProtocolClient("127.0.0.1", port, request_timeout_ms=5000)
        try:
            await client.connect()
            assert client.peer_versions is not None and 18 in client.peer_versions
        finally:
            await client.close()

    for port in cluster.broker_ports.values():
        asyncio.run(api_versions(port))

    cli("topics", "create", "--topic", "orders", "--partitions", "6",
        "--replication-factor", "3", "--bootstrap-controller", b)
    before = partitions(b, "orders")
    assert len(before) == 6
    assert all(len(p["Isr"].split(",")) == 3 for p in before)

    # SIGKILL a broker that is not the active controller (a combined follower).
    active = leader_id(b)
    victim = next(n for n in COMBINED if n != active)
    led = [p for p in before if p["Leader"] == str(victim)]
    assert led, before
    first_epoch = epochs_logged(cluster, victim)[-1]
    cluster.kill(victim)
    took = wait_for("the killed broker fenced",
                    lambda: brokers(b)[victim]["Fenced"] == "true", SESSION_TIMEOUT_MS / 1000 + 5)
    assert took < SESSION_TIMEOUT_MS / 1000 + 2, took
    after_kill = partitions(b, "orders")
    for old, new in zip(before, after_kill, strict=True):
        assert str(victim) not in new["Isr"].split(","), new
        assert new["Leader"] != str(victim), new
        if old["Leader"] == str(victim):
            assert new["Leader"] in old["Isr"].split(","), (old, new)  # clean: from the ISR

    # Restart it: it registers again (new incarnation) with a new, larger epoch.
    cluster.start(victim)
    wait_for("the restarted broker unfenced",
             lambda: brokers(b)[victim]["Fenced"] == "false", 20)
    second_epoch = epochs_logged(cluster, victim)[-1]
    assert second_epoch > first_epoch

    # SIGKILL the active controller: a new one serves, every topic is intact.
    cluster.kill(active)
    survivors = ",".join(
        f"127.0.0.1:{p}" for n, p in cluster.controller_ports.items() if n != active
    )
    cli("topics", "create", "--topic", "after-failover", "--partitions", "2",
        "--replication-factor", "2", "--bootstrap-controller", survivors)
    assert leader_id(survivors) != active
    wait_for("the killed controller's broker fenced",
             lambda: brokers(survivors)[active]["Fenced"] == "true",
             SESSION_TIMEOUT_MS / 1000 + 5)
    final = partitions(survivors, "orders")
    assert [p["Replicas"] for p in final] == [p["Replicas"] for p in before]
    assert all(p["Leader"] not in ("none", str(active)) for p in final), final
    assert cli("topics", "list", "--bootstrap-controller", survivors).stdout.split() == [
        "after-failover", "orders"]

    # SIGTERM: controlled shutdown (leadership moves first), then exit 0.
    assert cluster.kill(BROKER_ONLY, signal.SIGTERM) == 0
    assert "controlled shutdown granted" in cluster.log(BROKER_ONLY)
