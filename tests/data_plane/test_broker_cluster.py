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
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from data_plane.local_cluster import COMBINED as COMBINED_ROLES
from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from raftlog.net import KafkaProtocolClient

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "data_plane"]
SESSION_TIMEOUT_MS = 3000
COMBINED = (1, 2, 3)
BROKER_ONLY = 4


def make_cluster(root: Path) -> LocalCluster:
    """Three combined nodes and a broker-only one on free ports; configs written."""
    layout = ClusterLayout.build(
        (COMBINED_ROLES,) * len(COMBINED) + ("broker",),
        base_port=None,
        timeouts=Timeouts(session_ms=SESSION_TIMEOUT_MS, heartbeat_ms=500),
        properties={"metadata.log.max.record.bytes.between.snapshots": "2000"},
        node_properties={n: {"broker.rack": f"rack{n % 2}"} for n in (*COMBINED, BROKER_ONLY)},
    )
    cluster = LocalCluster(root, layout)
    cluster.write_configs()
    return cluster


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


def epochs_logged(cluster: LocalCluster, node_id: int) -> list[int]:
    return [
        int(m) for m in re.findall(r"registered with broker epoch (\d+)", cluster.server_log(node_id))
    ]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = make_cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop(timeout_s=5)


def test_brokers_register_get_fenced_on_kill_and_come_back_with_a_new_epoch(
    cluster: LocalCluster,
) -> None:
    for node_id in (*COMBINED, BROKER_ONLY):
        cli("storage", "format", f"--cluster-id={cluster.cluster_id}",
            "--config", str(cluster.config_path(node_id)))
        cluster.start(node_id)
    b = cluster.bootstrap_controllers
    everyone = {*COMBINED, BROKER_ONLY}

    wait_for("all four brokers unfenced",
             lambda: {i for i, f in brokers(b).items() if f["Fenced"] == "false"} == everyone, 20)
    listed = brokers(b)
    assert listed[BROKER_ONLY]["Endpoint"] == f"127.0.0.1:{cluster.layout.node(BROKER_ONLY).kafka_port}"
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

    for port in (n.kafka_port for n in cluster.layout.brokers):
        asyncio.run(api_versions(port))

    cli("topics", "create", "--topic", "orders", "--partitions", "6",
        "--replication-factor", "3", "--config", "retention.ms=86400000",
        "--config", "min.insync.replicas=2", "--bootstrap-controller", b)
    before = partitions(b, "orders")
    assert len(before) == 6
    # The topic's own configs, as kafka-topics.sh lists them, from a
    # controller and from a broker.
    kafka = ",".join(f"127.0.0.1:{n.kafka_port}" for n in cluster.layout.brokers)
    for option, where in (("--bootstrap-controller", b), ("--bootstrap-server", kafka)):
        head = cli("topics", "describe", "--topic", "orders", option, where).stdout.splitlines()[0]
        assert head.endswith("Configs: min.insync.replicas=2,retention.ms=86400000"), head
    # From a broker, paged by DescribeTopicPartitions (4 partitions an
    # answer, then 2): the same lines as one answer, 6 partitions.
    whole = cli("topics", "describe", "--topic", "orders", "--bootstrap-server", kafka).stdout
    paged = cli("topics", "describe", "--topic", "orders", "--bootstrap-server", kafka,
                "--partition-size-limit-per-response", "4").stdout
    assert paged == whole and whole.count("\tPartition: ") == 6, (whole, paged)
    assert all(len(p["Isr"].split(",")) == 3 for p in before)

    # SIGKILL a broker that is not the active controller (a combined follower).
    active = leader_id(b)
    victim = next(n for n in COMBINED if n != active)
    led = [p for p in before if p["Leader"] == str(victim)]
    assert led, before
    first_epoch = epochs_logged(cluster, victim)[-1]
    cluster.kill(victim)
    # Polled in-process (DescribeCluster, a few ms a look), not through the
    # CLI, whose start-up (about a second, more on a busy host) would be
    # measured as well as the session timeout.
    took = wait_for("the killed broker fenced", lambda: victim in cluster.probe().fenced,
                    SESSION_TIMEOUT_MS / 1000 + 5)
    assert took < SESSION_TIMEOUT_MS / 1000 + 2, took
    assert brokers(b)[victim]["Fenced"] == "true"  # and the CLI says so
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
        f"127.0.0.1:{n.controller_port}" for n in cluster.layout.controllers if n.node_id != active
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
    assert "controlled shutdown granted" in cluster.server_log(BROKER_ONLY)
