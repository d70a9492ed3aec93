"""Moving a replica between log dirs on a real 3-node cluster (JBOD: node 1
has two ``log.dirs``). ``raftlog reassign-partitions`` with ``log_dirs``
sends AlterReplicaLogDirs; the replica is copied while a producer writes
acks=all; ``--verify`` and ``log-dirs --describe`` follow it; every
acknowledged record reads back in order from the moved replica; a restart
finds it in its new directory and back in the ISR."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import Deliveries, cli, eventually, running
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

from data_plane.broker.log_configs import RACK_AWARE_REPLICA_SELECTOR
from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "moving"


@pytest.fixture(scope="module")
def jbod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Path]]:
    disks = tmp_path_factory.mktemp("disks")
    # Racks and the rack-aware selector (KIP-392): a consumer in node 1's
    # rack reads from node 1, so the read-back below is the moved replica's.
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2",
                    "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR},
        node_properties={1: {"log.dirs": f"{disks / 'a'},{disks / 'b'}", "broker.rack": "r1"},
                         2: {"broker.rack": "r2"}, 3: {"broker.rack": "r3"}})
    with running(tmp_path_factory.mktemp("cluster"), layout) as cluster:
        yield cluster, disks


def _replica_dir(cluster: LocalCluster) -> dict[str, bool]:
    """Node 1's log dirs holding the partition, as kafka-log-dirs.sh reports
    them: dir -> whether it is the future (moving) copy."""
    out = cli("log-dirs", "--describe", "--broker-list", "1", "--topic-list", TOPIC,
              "--bootstrap-server", cluster.bootstrap_servers)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    return {d["logDir"]: p["isFuture"] for d in report["brokers"][0]["logDirs"]
            for p in d["partitions"]}


def test_a_replica_moves_to_another_log_dir_under_acks_all_load(
    jbod: tuple[LocalCluster, Path], tmp_path: Path,
) -> None:
    cluster, disks = jbod
    b = cluster.bootstrap_servers
    out = cli("topics", "create", "--topic", TOPIC, "--partitions", "1",
              "--replication-factor", "3", "--config", "segment.bytes=262144",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    start_dir = next(iter(_replica_dir(cluster)))
    target = str(disks / ("b" if start_dir.endswith("/a") else "a"))

    deliveries = Deliveries()
    # Batches well under segment.bytes (a bigger one is MESSAGE_TOO_LARGE).
    producer = Producer({"bootstrap.servers": b, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 16384})
    stop = threading.Event()

    def produce() -> None:  # about 2,000 records/s until stopped
        i = 0
        while not stop.is_set():
            producer.produce(TOPIC, value=b"%08d" % i + b"." * 500, partition=0,
                             on_delivery=deliveries)
            i += 1
            if i % 100 == 0:
                producer.poll(0)
                time.sleep(0.05)
        producer.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        time.sleep(2)  # some segments first
        plan = tmp_path / "move.json"
        out = cli("topics", "describe", "--topic", TOPIC, "--bootstrap-server", b)
        replicas = [int(r) for r in out.stdout.split("Replicas:")[1].split()[0].split(",")]
        plan.write_text(json.dumps({"version": 1, "partitions": [{
            "topic": TOPIC, "partition": 0, "replicas": replicas,
            "log_dirs": [target if r == 1 else "any" for r in replicas]}]}))
        out = cli("reassign-partitions", "--execute", "--reassignment-json-file", str(plan),
                  "--bootstrap-server", b)
        assert out.returncode == 0, out.stderr
        assert f"Successfully started log directory move for: {TOPIC}-0-1" in out.stdout

        def moved() -> None:
            verify = cli("reassign-partitions", "--verify", "--reassignment-json-file",
                         str(plan), "--bootstrap-server", b)
            assert verify.returncode == 0, verify.stderr
            assert "Status of replica log directory movement:" in verify.stdout
            assert f"Reassignment of replica {TOPIC}-0-1 completed successfully." \
                in verify.stdout, verify.stdout
        eventually(moved, timeout_s=60)
        time.sleep(1)  # writes go on after the swap
    finally:
        stop.set()
        writer.join(60)
    assert _replica_dir(cluster) == {target: False}
    assert not deliveries.failed, deliveries.failed[:5]
    acked = sorted(deliveries.acked)
    assert len(acked) > 1000

    # Every acknowledged record, in order, read from node 1 (its rack), the
    # replica that moved.
    def read_all() -> list[int]:
        consumer = Consumer({"bootstrap.servers": b, "group.id": "mover",
                             "enable.auto.commit": False, "client.rack": "r1"})
        consumer.assign([CTP(TOPIC, 0, 0)])
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < len(acked) and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                if message.error() is None:
                    values.append(int(message.value()[:8]))
        consumer.close()
        return values

    values = read_all()
    assert values[:len(acked)] == list(range(len(acked)))

    # A restart finds the replica in its new directory, and it rejoins the ISR.
    cluster.restart(1, sig=signal.SIGKILL)
    eventually(lambda: _assert_equal(_replica_dir(cluster), {target: False}), timeout_s=60)

    def in_sync() -> None:
        out = cli("topics", "describe", "--topic", TOPIC, "--bootstrap-server", b)
        isr = out.stdout.split("Isr:")[1].split()[0].split(",")
        assert "1" in isr, out.stdout
    eventually(in_sync, timeout_s=60)
    assert not any(".future" in n or n.endswith(("-future", "-delete"))
                   for d in ("a", "b") for n in os.listdir(disks / d))


def _assert_equal(found: object, expected: object) -> None:
    assert found == expected, found


def test_a_throttled_move_resumes_after_a_crash(
    jbod: tuple[LocalCluster, Path], tmp_path: Path,
) -> None:
    """``--replica-alter-log-dirs-throttle`` keeps the copy slow enough to
    SIGKILL node 1 in the middle of it; the restarted node resumes the move
    from its future log, and once the bound is gone it finishes with every
    acknowledged record."""
    cluster, disks = jbod
    b = cluster.bootstrap_servers
    topic = "resumed"
    out = cli("topics", "create", "--topic", topic, "--partitions", "1",
              "--replication-factor", "3", "--config", "segment.bytes=262144",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    producer = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 5,
                         "batch.size": 16384})  # batches well under segment.bytes
    deliveries = Deliveries()
    for i in range(2000):  # about 1 MB
        producer.produce(topic, value=b"%08d" % i + b"." * 500, partition=0,
                         on_delivery=deliveries)
        if i % 200 == 0:
            producer.poll(0)
    producer.flush(30)
    assert not deliveries.failed and len(deliveries.acked) == 2000

    def where() -> dict[str, bool]:
        out = cli("log-dirs", "--describe", "--broker-list", "1", "--topic-list", topic,
                  "--bootstrap-server", b)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout.splitlines()[-1])
        return {d["logDir"]: p["isFuture"] for d in report["brokers"][0]["logDirs"]
                for p in d["partitions"]}

    start_dir = next(iter(where()))
    target = str(disks / ("b" if start_dir.endswith("/a") else "a"))
    out = cli("topics", "describe", "--topic", topic, "--bootstrap-server", b)
    replicas = [int(r) for r in out.stdout.split("Replicas:")[1].split()[0].split(",")]
    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{
        "topic": topic, "partition": 0, "replicas": replicas,
        "log_dirs": [target if r == 1 else "any" for r in replicas]}]}))
    # 20 kB/s: after the window's allowance (10 s worth) the rest takes a
    # minute.
    out = cli("reassign-partitions", "--execute", "--reassignment-json-file", str(plan),
              "--replica-alter-log-dirs-throttle", "20000", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    assert "The replica-alter-dir throttle limit was set to 20000 B/s" in out.stdout
    assert where() == {start_dir: False, target: True}

    cluster.restart(1, sig=signal.SIGKILL)
    # Back up with the move under way again: the future log was resumed,
    # not started over (it holds at least the allowance copied before).
    eventually(lambda: _assert_equal(where(), {start_dir: False, target: True}),
               timeout_s=60)
    futures = [n for n in os.listdir(target) if n.startswith(f"{topic}-0.")]
    assert len(futures) == 1 and futures[0].endswith("-future"), futures
    verify = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan),
                 "--bootstrap-server", b)
    assert f"Reassignment of replica {topic}-0-1 is still in progress." in verify.stdout
    assert "The throttles, if any, stay while 1 replica(s) are moving between log dirs" \
        in verify.stdout, verify.stdout

    out = cli("configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
              "--delete-config", "replica.alter.log.dirs.io.max.bytes.per.second",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    eventually(lambda: _assert_equal(where(), {target: False}), timeout_s=60)
    verify = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan),
                 "--bootstrap-server", b)
    assert f"Reassignment of replica {topic}-0-1 completed successfully." in verify.stdout
    assert "Clearing broker-level throttles on brokers" in verify.stdout, verify.stdout

    consumer = Consumer({"bootstrap.servers": b, "group.id": "resumed",
                         "enable.auto.commit": False, "client.rack": "r1"})
    consumer.assign([CTP(topic, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < 2000 and time.monotonic() < deadline:
        for message in consumer.consume(500, 1.0):
            if message.error() is None:
                values.append(int(message.value()[:8]))
    consumer.close()
    assert values == list(range(2000))
