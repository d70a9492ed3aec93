"""A broker that shuts down cleanly comes back at once (real processes).

Bug: the controller let a broker go at the end of its controlled shutdown
but left its registration unfenced, so the broker's session lived on, and
the next process of that id was refused (DUPLICATE_BROKER_REGISTRATION)
until ``broker.session.timeout.ms`` ran out. After `raftlog cluster down`
and `up`, every partition stayed leaderless for about that long (10 s with
the default 9 s session). Kafka fences the broker as it grants the shutdown
(SHUTDOWN_NOW), and a fenced registration has no session.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

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

    # The whole cluster down and up again, as `raftlog cluster down` / `up` do.
    offsets = _log_offsets(cluster)
    ended = cluster.stop(timeout_s=10)
    assert set(ended.values()) == {"stopped"}, ended
    started = time.monotonic()
    cluster.up(40)
    for node in cluster.layout.nodes:
        log = _log_since(cluster, node.node_id, offsets)
        assert REFUSED not in log, f"node {node.node_id}: {log[-2000:]}"
    # Ready means every broker is unfenced: the partitions have leaders now.
    cluster.wait_topic("t", 3, timeout_s=5)
    assert all(leader > 0 for leader in _leaders(cluster, "t"))
    print(f"\ncluster back with leaders {time.monotonic() - started:.1f} s after `up` began")
