"""Partition reassignment (KIP-455) against a real 3-node cluster: replicas
move and replication factors change while a producer writes with acks=all,
and no acknowledged record is lost; kafka-python's admin client and the
`raftlog reassign-partitions` CLI (kafka-reassign-partitions.sh) drive it."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, cast

import pytest
from cluster_helpers import cli, eventually, module_cluster
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

from chaos.client import Endpoint
from chaos.db import DB
from chaos.nemesis.core import ClusterState
from chaos.nemesis.reassign import ReassignNemesis
from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

cluster = module_cluster()


def replicas_and_isr(admin: AdminClient, topic: str) -> tuple[list[int], list[int]]:
    meta = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return [int(r) for r in meta.replicas], sorted(int(r) for r in meta.isrs)


class AckedProducer:
    """Sends "0", "1", ... one at a time (acks=all, idempotent) on a thread,
    keeping what was acknowledged and any delivery error."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[bytes] = []
        self.errors: list[KafkaError] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 5})
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append(msg.value())

        i = 0
        while not self._stop.is_set():
            self._producer.produce(topic, str(i).encode(), partition=0, on_delivery=delivered)
            self._producer.poll(0)
            i += 1
            if i % 50 == 0:
                self._producer.flush(30)
                time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    return values


def test_replicas_move_and_the_replication_factor_changes_under_acks_all_load(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("moving", replica_assignment=[[1, 2]], num_partitions=1)])[
        "moving"].result(15)
    cluster.wait_topic("moving", 1)
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = KafkaTopicPartition("moving", 0)
    producer = AckedProducer(bootstrap, "moving")
    try:
        eventually(lambda: assert_at_least(producer.acked, 200), 20)
        # Move off the leader (1): broker 3 catches up and joins the ISR, the
        # reassignment finishes, 2 or 3 leads, and broker 1 deletes its copy.
        kadmin.alter_partition_reassignments({tp: [2, 3]})

        def moved() -> None:
            assert kadmin.list_partition_reassignments() == {}
            assert replicas_and_isr(admin, "moving") == ([2, 3], [2, 3])
            assert not (cluster.data_dir(1) / "moving-0").exists()
        eventually(moved, 20)
        assert (cluster.data_dir(3) / "moving-0").is_dir()
        count = len(producer.acked)
        eventually(lambda: assert_at_least(producer.acked, count + 200), 20)
        # Up to three replicas, led by a new preferred replica.
        kadmin.alter_partition_reassignments({tp: [3, 1, 2]})

        def grown() -> None:
            assert kadmin.list_partition_reassignments() == {}
            assert replicas_and_isr(admin, "moving") == ([3, 1, 2], [1, 2, 3])
        eventually(grown, 20)
        count = len(producer.acked)
        eventually(lambda: assert_at_least(producer.acked, count + 200), 20)
    finally:
        producer.stop()
        kadmin.close()
    assert producer.errors == []
    values = read_all(bootstrap, "moving", len(producer.acked))
    assert set(producer.acked) <= set(values), "acknowledged records lost"
    # The idempotent producer wrote each record once, in order.
    assert values == [str(i).encode() for i in range(len(values))]


def assert_at_least(items: list[bytes], count: int) -> None:
    assert len(items) >= count


def write_json(path: Path, document: object) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def test_cli_and_strays_while_a_broker_is_down(cluster: LocalCluster, tmp_path: Path) -> None:
    """Broker 3 is down for a while (one kill, to keep the suite short):

    - a reassignment to it stays in progress until cancelled; --execute
      refuses to start another without --additional;
    - meanwhile a partition moves off it and a topic with a replica on it is
      deleted: when it returns, both directories go (nothing would open
      them again), and its other replicas stay and rejoin the ISR.
    """
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in ("stays", "moves", "deleted"):
        admin.create_topics([NewTopic(name, replica_assignment=[[1, 2, 3]], num_partitions=1)])[
            name].result(15)
        cluster.wait_topic(name, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for name in ("stays", "moves", "deleted"):
        for i in range(20):
            producer.produce(name, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    node3 = cluster.data_dir(3)
    eventually(lambda: assert_all((node3 / f"{n}-0").is_dir() for n in ("stays", "moves",
                                                                          "deleted")))
    admin.create_topics([NewTopic("cli-moving", replica_assignment=[[1, 2]], num_partitions=1)])[
        "cli-moving"].result(15)
    cluster.wait_topic("cli-moving", 1)
    target = write_json(tmp_path / "target.json", {"version": 1, "partitions": [
        {"topic": "cli-moving", "partition": 0, "replicas": [1, 3]}]})
    base = ("reassign-partitions", "--bootstrap-server", bootstrap)

    proposed = cli(*base, "--generate", "--broker-list", "1,3", "--topics-to-move-json-file",
                   write_json(tmp_path / "move.json",
                              {"version": 1, "topics": [{"topic": "cli-moving"}]}))
    assert proposed.returncode == 0, proposed.stderr
    lines = proposed.stdout.splitlines()
    assert json.loads(lines[1])["partitions"][0]["replicas"] == [1, 2]
    assert sorted(json.loads(lines[-1])["partitions"][0]["replicas"]) == [1, 3]

    cluster.kill(3)
    try:
        started = cli(*base, "--execute", "--reassignment-json-file", target)
        assert started.returncode == 0, started.stderr
        assert "Successfully started partition reassignment(s) for cli-moving-0" in started.stdout
        rollback = json.loads(started.stdout.split("\n\n")[1])
        assert rollback["partitions"][0]["replicas"] == [1, 2]

        listed = cli(*base, "--list")
        assert listed.returncode == 0, listed.stderr
        assert "cli-moving-0: replicas: 1,3,2. adding: 3. removing: 2." in listed.stdout
        verified = cli(*base, "--verify", "--reassignment-json-file", target)
        assert "Reassignment of partition cli-moving-0 is still in progress." in verified.stdout
        described = cli("topics", "describe", "--topic", "cli-moving", "--bootstrap-server",
                        bootstrap)
        assert described.returncode == 0, described.stderr
        assert "ReplicationFactor: 2\t" in described.stdout  # the adding replica not counted
        assert "Replicas: 1,3,2\tIsr: 1,2\tAdding Replicas: 3\tRemoving Replicas: 2" in \
            described.stdout
        # The leader's gauges: one partition being reassigned, and a replica
        # being added does not make it under-replicated (Kafka's rule). (Per
        # partition: the broker-wide count also has the other topics' replicas
        # on the killed broker 3, once the ISR has shrunk.)
        leader = admin.list_topics("cli-moving", timeout=10).topics["cli-moving"].partitions[
            0].leader
        metrics = gauges(cluster, leader)
        assert metrics["kafka_server_replicamanager_reassigningpartitions"] == 1.0
        assert partition_gauge(cluster, leader, "cli-moving") == 0.0
        # ...while a topic that lost its replica on broker 3 is, once the ISR shrank.
        stays_leader = admin.list_topics("stays", timeout=10).topics["stays"].partitions[0].leader
        eventually(lambda: assert_equal(partition_gauge(cluster, stays_leader, "stays"), 1.0), 20)

        again = cli(*base, "--execute", "--reassignment-json-file", target)
        assert again.returncode == 2
        assert "existing partition reassignment (cli-moving-0)" in again.stderr

        cancelled = cli(*base, "--cancel", "--reassignment-json-file", target)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "Successfully cancelled partition reassignment(s) for cli-moving-0" in \
            cancelled.stdout
        eventually(lambda: assert_replicas(admin, "cli-moving", [1, 2]), 20)

        def reverted() -> None:
            # Each broker replays the metadata log on its own: --verify reads
            # the replicas from whichever answers first.
            verified = cli(*base, "--verify", "--reassignment-json-file", target)
            assert ("There is no active reassignment of partition cli-moving-0, but replica "
                    "set is [1, 2] rather than [1, 3].") in verified.stdout, verified.stdout
        eventually(reverted, 20)
        nothing = cli(*base, "--cancel", "--reassignment-json-file", target)
        assert nothing.returncode == 2
        assert "NO_REASSIGNMENT_IN_PROGRESS" in nothing.stderr

        # kafka-python fails a request it routes to a broker that is down
        # rather than trying another: wait until Metadata stops listing 3
        # (fenced), and bootstrap from the others.
        def fenced() -> None:
            assert 3 not in admin.list_topics(timeout=10).brokers
        eventually(fenced, 20)
        survivors = ",".join(f"{cluster.layout.host}:{n.kafka_port}"
                             for n in cluster.layout.brokers if n.node_id != 3)
        kadmin = KafkaAdminClient(bootstrap_servers=survivors)
        kadmin.alter_partition_reassignments({KafkaTopicPartition("moves", 0): [1, 2]})
        kadmin.close()
        admin.delete_topics(["deleted"])["deleted"].result(15)
        eventually(lambda: assert_replicas(admin, "moves", [1, 2]), 20)
        assert (node3 / "moves-0").is_dir() and (node3 / "deleted-0").is_dir()  # it is down
    finally:
        cluster.start(3)
        cluster.wait_ready(40)

    def cleaned() -> None:
        assert not (node3 / "moves-0").exists()
        assert not (node3 / "deleted-0").exists()
        assert (node3 / "stays-0").is_dir()
        assert replicas_and_isr(admin, "stays") == ([1, 2, 3], [1, 2, 3])
    eventually(cleaned, 30)
    assert "deleting stray replica" in cluster.server_log(3)

    bad = cli(*base, "--execute", "--reassignment-json-file", write_json(
        tmp_path / "bad.json", {"version": 1, "partitions": [
            {"topic": "cli-moving", "partition": 0, "replicas": [1, 9]}]}))
    assert bad.returncode == 2
    assert "INVALID_REPLICA_ASSIGNMENT" in bad.stderr and "broker 9" in bad.stderr
    malformed = cli(*base, "--execute", "--reassignment-json-file", write_json(
        tmp_path / "malformed.json", {"partitions": [{"topic": "cli-moving", "partition": 0}]}))
    assert malformed.returncode == 2
    assert "replicas must be a non-empty list of broker ids" in malformed.stderr


def gauges(cluster: LocalCluster, node_id: int) -> dict[str, float]:
    """The node's /metrics samples by series (name and labels as exposed)."""
    url = f"http://{cluster.layout.host}:{cluster.layout.node(node_id).http_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def partition_gauge(cluster: LocalCluster, node_id: int, topic: str) -> float | None:
    """``kafka_cluster_partition_underreplicated`` of partition 0 of ``topic`` on the node."""
    for series, value in gauges(cluster, node_id).items():
        if (series.startswith("kafka_cluster_partition_underreplicated{")
                and f'topic="{topic}"' in series and 'partition="0"' in series):
            return value
    return None


def assert_equal(actual: object, expected: object) -> None:
    assert actual == expected, (actual, expected)


def assert_replicas(admin: AdminClient, topic: str, replicas: list[int]) -> None:
    assert replicas_and_isr(admin, topic)[0] == replicas


class _ClusterDB:
    """What `ReassignNemesis` needs of a chaos DB, over this module's cluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def endpoint(self) -> Endpoint:
        return Endpoint(self.cluster.bootstrap_servers)

    async def fully_replicated(self, topic: str) -> bool:
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        md = await asyncio.to_thread(admin.list_topics, topic, timeout=5)
        return all(sorted(p.isrs) == sorted(p.replicas)
                   for p in md.topics[topic].partitions.values())


def test_the_chaos_reassign_nemesis_moves_and_heals(cluster: LocalCluster) -> None:
    """The chaos suite's ``reassign`` fault (chaos.nemesis.reassign) against
    a real cluster: down to one replica per partition, then healed back to
    three, the heal waiting for the ISR to be whole."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("nemesis", 2, 3)])["nemesis"].result(15)
    cluster.wait_topic("nemesis", 2)
    nemesis = ReassignNemesis(cast(DB, _ClusterDB(cluster)), random.Random(1),
                              topic="nemesis", partitions=2)
    state = ClusterState(nodes=("n1", "n2", "n3"))
    started = asyncio.run(nemesis.invoke("start-reassign", {"rf": 1}, state))
    assert started["answers"] == {"0": "NONE", "1": "NONE"}, started  # type: ignore[index]
    targets = started["targets"]  # type: ignore[index]

    def shrunk() -> None:
        md = admin.list_topics("nemesis", timeout=10).topics["nemesis"].partitions
        assert {str(p): [int(r) for r in m.replicas] for p, m in md.items()} == targets
    eventually(shrunk, 20)
    healed = asyncio.run(nemesis.invoke("stop-reassign", None, state))
    assert healed["finished"] is True, healed  # type: ignore[index]

    def whole() -> None:
        md = admin.list_topics("nemesis", timeout=10).topics["nemesis"].partitions
        assert all(sorted(m.replicas) == [1, 2, 3] == sorted(m.isrs) for m in md.values())
    eventually(whole, 20)


def assert_all(checks: Any) -> None:
    assert all(checks)


def test_cli_throttle_is_set_before_the_move_and_removed_by_verify(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """``--execute --throttle`` (KIP-73) lists the partition's current
    replica as a throttled leader and the added one as a throttled follower
    on the topic, and gives both brokers the rate; the copy still finishes,
    and ``--verify`` then deletes the rates on every broker and the lists."""
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("throttled", replica_assignment=[[1]], num_partitions=1)])[
        "throttled"].result(15)
    cluster.wait_topic("throttled", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    for _ in range(300):
        producer.produce("throttled", b"x" * 1000, partition=0)
    assert producer.flush(30) == 0
    target = write_json(tmp_path / "throttled.json", {"version": 1, "partitions": [
        {"topic": "throttled", "partition": 0, "replicas": [1, 2]}]})
    base = ("reassign-partitions", "--bootstrap-server", bootstrap,
            "--reassignment-json-file", target)

    started = cli(*base, "--execute", "--throttle", "10000000")
    assert started.returncode == 0, started.stderr
    assert "The inter-broker throttle limit was set to 10000000 B/s" in started.stdout
    assert "Successfully started partition reassignment(s) for throttled-0" in started.stdout

    def configs(*entity: str) -> str:
        described = cli("configs", "describe", *entity, "--bootstrap-server", bootstrap)
        assert described.returncode == 0, described.stderr
        return described.stdout

    def throttled() -> None:
        for broker in ("1", "2"):
            rates = configs("--broker", broker)
            assert "  leader.replication.throttled.rate=10000000\n" in rates, rates
            assert "  follower.replication.throttled.rate=10000000\n" in rates, rates
        assert "throttled.rate" not in configs("--broker", "3")
        lists = configs("--topic", "throttled")
        assert "  leader.replication.throttled.replicas=0:1\n" in lists, lists
        assert "  follower.replication.throttled.replicas=0:2\n" in lists, lists
    eventually(throttled, 10)

    def done() -> str:
        verified = cli(*base, "--verify")
        assert verified.returncode == 0, verified.stderr
        assert "Reassignment of partition throttled-0 is completed." in verified.stdout, \
            verified.stdout
        return verified.stdout
    verified = eventually(done, 20)
    assert "Clearing broker-level throttles on brokers 1,2,3" in verified
    assert "Clearing topic-level throttles on topic throttled" in verified
    assert replicas_and_isr(admin, "throttled") == ([1, 2], [1, 2])

    def cleared() -> None:
        for broker in ("1", "2", "3"):
            assert "throttled.rate" not in configs("--broker", broker)
        assert "throttled.replicas" not in configs("--topic", "throttled")
    eventually(cleared, 10)
