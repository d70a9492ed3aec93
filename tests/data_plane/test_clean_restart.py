"""A broker that shuts down cleanly comes back at once; after an unclean
stop, `up` waits until every broker process has registered (real processes).

Bug: the controller let a broker go at the end of its controlled shutdown
but left its registration unfenced, so the broker's session lived on, and
the next process of that id was refused (DUPLICATE_BROKER_REGISTRATION)
until ``broker.session.timeout.ms`` ran out. After `raftlog cluster down`
and `up`, every partition stayed leaderless for about that long (10 s with
the default 9 s session). Kafka fences the broker as it grants the shutdown
(SHUTDOWN_NOW), and a fenced registration has no session.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts, http_get_json

pytestmark = pytest.mark.slow

REFUSED = "registration refused: duplicate_broker_registration"


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[LocalCluster]:
    # The default session (9 s), so a refusal would show for seconds.
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts(),
                                 properties={"min.insync.replicas": "2"})
    c = LocalCluster(str(tmp_path), layout)
    c.up(40)
    try:
        yield c
    finally:
        c.stop(timeout_s=10)


def _log_offsets(cluster: LocalCluster) -> dict[int, int]:
    return {n.node_id: len(cluster.server_log(n.node_id)) for n in cluster.layout.nodes}


def _log_since(cluster: LocalCluster, node_id: int, offsets: dict[int, int]) -> str:
    return cluster.server_log(node_id)[offsets[node_id]:]


def _leaders(cluster: LocalCluster, topic: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return [p.leader for _, p in sorted(meta.partitions.items())]


def test_sigterm_then_start_registers_without_waiting_for_the_old_session(
    cluster: LocalCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("t", 3, 3)])["t"].result(15)
    cluster.wait_topic("t", 3)

    offsets = _log_offsets(cluster)
    assert cluster.kill(2, signal.SIGTERM, timeout_s=10) == 0
    cluster.start(2)
    cluster.wait_ready(30)
    log = _log_since(cluster, 2, offsets)
    assert "controlled shutdown granted" in log
    assert REFUSED not in log, log[-2000:]
    assert "broker 2 is unfenced" in log
    # KIP-966: it recorded its epoch on the way down and registered with it.
    assert "a clean shutdown" in log and "no clean shutdown recorded" not in log, log[-2000:]
    assert not (cluster.data_dir(2) / ".kafka_cleanshutdown").exists()  # taken at start

    # The whole cluster down and up again, as `raftlog cluster down` / `up` do.
    offsets = _log_offsets(cluster)
    ended = cluster.stop(timeout_s=10)
    assert set(ended.values()) == {"stopped"}, ended
    started = time.monotonic()
    cluster.up(40)
    for node in cluster.layout.nodes:
        log = _log_since(cluster, node.node_id, offsets)
        assert REFUSED not in log, f"node {node.node_id}: {log[-2000:]}"
        assert "a clean shutdown" in log, f"node {node.node_id}: {log[-2000:]}"
    # Ready means every broker is unfenced: the partitions have leaders now.
    cluster.wait_topic("t", 3, timeout_s=5)
    assert all(leader > 0 for leader in _leaders(cluster, "t"))
    print(f"\ncluster back with leaders {time.monotonic() - started:.1f} s after `up` began")


def _broker_states(cluster: LocalCluster) -> dict[int, object]:
    async def ask() -> dict[int, object]:
        out: dict[int, object] = {}
        for node in cluster.layout.brokers:
            assert node.http_port is not None
            health = await http_get_json(cluster.layout.host, node.http_port, "/healthz", 2000)
            out[node.node_id] = health.get("broker_state") if isinstance(health, dict) else None
        return out
    return asyncio.run(ask())


def test_after_sigkill_up_waits_until_every_broker_process_registered(
    cluster: LocalCluster,
) -> None:
    """After SIGKILL the controller (restarted too) still lists the dead
    processes' registrations as unfenced and refuses the new ones
    (DUPLICATE_BROKER_REGISTRATION) until those sessions expire, as Kafka
    does. `up` used to call that ready at once; the partitions then lost
    their leaders when the old sessions expired, about 8 s later. Ready now
    means each broker says itself that it is running (``/healthz``)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("t", 3, 3)])["t"].result(15)
    cluster.wait_topic("t", 3)

    offsets = _log_offsets(cluster)
    for node in cluster.layout.nodes:
        cluster.kill(node.node_id, signal.SIGKILL)
    started = time.monotonic()
    status = cluster.up(40)
    took = time.monotonic() - started
    assert _broker_states(cluster) == {1: "running", 2: "running", 3: "running"}
    assert status.running == frozenset({1, 2, 3})
    refused = [n.node_id for n in cluster.layout.nodes
               if REFUSED in _log_since(cluster, n.node_id, offsets)]
    # The old sessions (9 s) were live when the nodes came back: some
    # registration was refused first, so this test exercised the wait.
    assert refused, "no registration was refused: the stale sessions had expired already"
    cluster.wait_topic("t", 3, timeout_s=5)
    assert all(leader > 0 for leader in _leaders(cluster, "t"))
    # KIP-966: a SIGKILLed broker recorded no clean shutdown.
    for node in cluster.layout.nodes:
        assert "no clean shutdown recorded" in _log_since(cluster, node.node_id, offsets)
    print(f"\nup took {took:.1f} s; registrations refused first on nodes {refused}")
