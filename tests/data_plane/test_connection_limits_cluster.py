"""Connection limits on a real 3-node cluster (`raftlog.net.connection_quotas`):
``connections.max.idle.ms`` closes idle client connections, and clients
reconnect; the nodes' own connections (replication fetches, Raft, broker
heartbeats) are never idle long enough to be closed, so the ISR stays whole;
``max.connections.per.ip.overrides`` with a count of 0 refuses an address
while others connect."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from cluster_helpers import cli, eventually, module_cluster
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP

from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

IDLE_MS = 1500
REFUSED = "127.0.0.2"  # loopback, but another address than the nodes' own


cluster = module_cluster(connections_max_idle_ms=str(IDLE_MS),
                         max_connections_per_ip_overrides=f"{REFUSED}:0")


def _produce(producer: Producer, topic: str, values: range) -> list[KafkaError]:
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        del msg
        if err is not None:
            errors.append(err)

    for v in values:
        producer.produce(topic, str(v).encode(), partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    return errors


def _isr(cluster: LocalCluster, topic: str) -> str:
    out = cli("topics", "describe", "--topic", topic,
              "--bootstrap-server", cluster.bootstrap_servers)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("Isr:")[1].split()[0]


def test_idle_clients_are_disconnected_and_reconnect_while_the_isr_stays_whole(
    cluster: LocalCluster,
) -> None:
    out = cli("topics", "create", "--topic", "idle", "--partitions", "1",
              "--replication-factor", "3", "--bootstrap-server", cluster.bootstrap_servers)
    assert out.returncode == 0, out.stderr

    def isr_whole() -> None:
        assert _isr(cluster, "idle").count(",") == 2

    eventually(isr_whole, timeout_s=20)
    disconnects: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True,
                         "error_cb": lambda e: disconnects.append(str(e))})
    assert _produce(producer, "idle", range(10)) == []
    time.sleep(3 * IDLE_MS / 1000)  # the brokers close the idle producer's connections
    assert _produce(producer, "idle", range(10, 20)) == []
    # The nodes' own connections were busy: replication went on.
    assert _isr(cluster, "idle").count(",") == 2
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "idle",
                         "enable.auto.commit": False})
    consumer.assign([CTP("idle", 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 20
    while len(values) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(20))
    print("client-side connection errors while idle:", disconnects)


def _api_versions_from(source: str, port: int) -> bytes:
    """Send ApiVersions v0 from ``source``; the answer's bytes (b"": closed)."""
    request = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    with socket.create_connection(("127.0.0.1", port), timeout=5,
                                  source_address=(source, 0)) as sock:
        try:
            sock.sendall(struct.pack(">i", len(request)) + request)
            return sock.recv(4)
        except ConnectionError:
            return b""


def test_an_address_with_an_override_of_zero_is_refused(cluster: LocalCluster) -> None:
    port = int(cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
    assert _api_versions_from("127.0.0.1", port) != b""
    assert _api_versions_from(REFUSED, port) == b""


RATED = "127.0.0.3"


def test_an_ip_connection_creation_rate_refuses_a_burst_beyond_it(cluster: LocalCluster) -> None:
    """KIP-612: ``connection_creation_rate`` of an ip entity. At 1/s over the
    default 11 windows of 1 s, a burst of 15 connections from the address
    gets 10 answered and the rest closed; other addresses are not bound;
    removing the quota lifts it."""
    bootstrap = cluster.bootstrap_servers
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    out = cli("configs", "alter", "--ip", RATED, "--add-config", "connection_creation_rate=1",
              "--bootstrap-server", bootstrap)
    assert out.returncode == 0, out.stderr
    described = cli("configs", "describe", "--ip", "--bootstrap-server", bootstrap)
    assert f"Quota configs for ip '{RATED}' are connection_creation_rate=1.0" in described.stdout

    def burst_refused() -> list[bool]:
        answered = [_api_versions_from(RATED, port) != b"" for _ in range(15)]
        assert not all(answered), answered
        return answered

    answered = eventually(burst_refused, timeout_s=20)
    print("a burst of 15 from", RATED, "answered:", answered)
    # Answered while the measured rate (connections over at least 10 s)
    # stays within 1/s, then refused: every attempt counts, refused or not.
    accepted = answered.count(True)
    assert accepted >= 10 and answered == [True] * accepted + [False] * (15 - accepted)
    assert all(_api_versions_from("127.0.0.1", port) != b"" for _ in range(15))

    out = cli("configs", "alter", "--ip", RATED, "--delete-config", "connection_creation_rate",
              "--bootstrap-server", bootstrap)
    assert out.returncode == 0, out.stderr

    def burst_answered() -> None:
        assert all(_api_versions_from(RATED, port) != b"" for _ in range(15))

    eventually(burst_answered, timeout_s=20)
