"""KIP-848 consumer groups on a real 3-node cluster with librdkafka
(confluent-kafka, ``group.protocol=consumer``): partitions are shared and
never held by two consumers at once, members come and go, committed offsets
are kept, and the group survives its coordinator's SIGKILL."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cluster_helpers import cli, eventually, module_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_describe.v0 import request as cgd0

from data_plane.local_cluster import LocalCluster
from raftlog.net.client import KafkaProtocolClient
from raftlog.net.errors import ErrorCode

# Heartbeats every 500 ms so that a rebalance takes about a second, not ten.
cluster = module_cluster(group_consumer_heartbeat_interval_ms="500",
                         group_consumer_session_timeout_ms="8000")


def create_topic(cluster: LocalCluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=20)


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 30_000})
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        producer.poll(0)
    assert producer.flush(30) == 0


def consumer(cluster: LocalCluster, group: str, name: str, **extra: str) -> Any:
    return Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
        "group.protocol": "consumer", "client.id": name, "auto.offset.reset": "earliest",
        "enable.auto.commit": True, "auto.commit.interval.ms": 200, **extra,
    })


def group_epochs(cluster: LocalCluster, group_id: str) -> tuple[int, dict[str, int]]:
    """(group epoch, member id -> member epoch) from ConsumerGroupDescribe,
    asked of every live broker (only the coordinator describes the group)."""

    async def ask() -> tuple[int, dict[str, int]]:
        for node in cluster.layout.nodes:
            if node.kafka_port is None or not cluster.is_alive(node.node_id):
                continue
            client = KafkaProtocolClient(cluster.layout.host, node.kafka_port,
                                         request_timeout_ms=5000)
            try:
                response = await client.send(cgd0.ConsumerGroupDescribeRequest(
                    group_ids=(group_id,), include_authorized_operations=False))
            finally:
                await client.close()
            (group,) = response.groups  # type: ignore[attr-defined]
            if group.error_code == ErrorCode.none:
                return int(group.group_epoch), {m.member_id: int(m.member_epoch)
                                                for m in group.members}
        raise AssertionError(f"no broker describes {group_id}")

    return asyncio.run(ask())


def held(c: Any) -> frozenset[int]:
    return frozenset(tp.partition for tp in c.assignment())


class Group:
    """Consumers polled in turn from this thread; what each read, and a check
    after every round that no partition is held by two of them."""

    def __init__(self, *consumers: Any) -> None:
        self.consumers = list(consumers)
        self.read: set[tuple[int, int]] = set()

    def round(self) -> None:
        for c in self.consumers:
            for m in c.consume(200, 0.05):
                if m.error() is None:
                    self.read.add((m.partition(), m.offset()))
        holdings = [held(c) for c in self.consumers]
        for i, a in enumerate(holdings):
            for b in holdings[i + 1:]:
                assert not a & b, f"partitions {sorted(a & b)} held by two consumers"

    def until(self, done: Any, timeout_s: float, what: str) -> float:
        started = time.monotonic()
        while not done():
            assert time.monotonic() - started < timeout_s, f"not {what} within {timeout_s} s"
            self.round()
        return time.monotonic() - started


def _settled(epochs: tuple[int, dict[str, int]]) -> tuple[int, dict[str, int]]:
    group_epoch, members = epochs
    assert len(members) == 2 and set(members.values()) == {group_epoch}, epochs
    return epochs


def test_librdkafka_consumers_share_a_topic_with_the_consumer_protocol(
        cluster: LocalCluster) -> None:
    topic, group_id = "kip848", "kip848-group"
    create_topic(cluster, topic, 6)
    produce(cluster, topic, 600)
    c1 = consumer(cluster, group_id, "c1")
    c1.subscribe([topic])
    group = Group(c1)
    group.until(lambda: len(held(c1)) == 6, 30, "assigned everything to c1")

    c2 = consumer(cluster, group_id, "c2")
    c2.subscribe([topic])
    group.consumers.append(c2)
    took = group.until(lambda: len(held(c1)) == 3 and len(held(c2)) == 3, 30,
                       "split between c1 and c2")
    print(f"\nc2 joined: split 3/3 after {took:.2f} s: c1 {sorted(held(c1))}, c2 {sorted(held(c2))}")

    produce(cluster, topic, 600, start=600)
    group.until(lambda: len(group.read) == 1200, 30, "read every record")

    described = cli("groups", "describe", group_id, "--bootstrap-server", cluster.bootstrap_servers)
    assert described.returncode == 0, described.stderr
    print(described.stdout)
    rows = [line.split() for line in described.stdout.splitlines()[1:] if line.strip()]
    assert {r[-1] for r in rows} == {"c1", "c2"}
    assert len(rows) == 6

    members = cli("groups", "describe", group_id, "--members", "--verbose", "--state",
                  "--bootstrap-server", cluster.bootstrap_servers)
    assert members.returncode == 0, members.stderr
    print(members.stdout)
    lines = [line.split() for line in members.stdout.splitlines() if line.startswith(group_id)]
    state_row, *member_rows = lines
    # GROUP, COORDINATOR, (ID), ASSIGNMENT-STRATEGY, STATE, GROUP-EPOCH, ASSIGNMENT-EPOCH, #MEMBERS
    assert state_row[3:5] == ["uniform", "Stable"] and state_row[-1] == "2"
    epoch = state_row[5]
    assert state_row[6] == epoch and int(epoch) >= 2
    # Each member: 3 partitions held at the group's epoch, and its target is what it holds.
    assert sorted(r[4] for r in member_rows) == ["c1", "c2"]
    assert all(r[5] == "3" and r[6] == epoch and r[7] == r[8] for r in member_rows)

    listed = cli("groups", "list", "--bootstrap-server", cluster.bootstrap_servers)
    assert group_id in listed.stdout.split()
    listed = cli("groups", "list", "--type", "consumer", "--state",
                 "--bootstrap-server", cluster.bootstrap_servers)
    assert listed.returncode == 0, listed.stderr
    print(listed.stdout)
    assert [group_id, "Consumer", "Stable"] in [line.split() for line in listed.stdout.splitlines()]
    refused = cli("groups", "list", "--type", "streams", "--bootstrap-server",
                  cluster.bootstrap_servers)
    assert refused.returncode != 0 and "unknown type 'streams'" in refused.stderr

    c2.close()
    group.consumers.remove(c2)
    took = group.until(lambda: len(held(c1)) == 6, 30, "everything back to c1")
    print(f"c2 left: c1 held all 6 again after {took:.2f} s")
    c1.close()

    def committed_to_the_end() -> None:
        out = cli("groups", "describe", group_id, "--bootstrap-server", cluster.bootstrap_servers)
        assert "has no active members" in out.stdout, out.stdout
        lags = [line.split()[5] for line in out.stdout.splitlines()
                if line.startswith(group_id)]
        assert lags == ["0"] * 6, out.stdout

    eventually(committed_to_the_end, timeout_s=20)


def test_the_group_survives_its_coordinators_sigkill(cluster: LocalCluster) -> None:
    topic, group_id = "kip848-failover", "kip848-failover-group"
    create_topic(cluster, topic, 6)
    produce(cluster, topic, 300)
    c1, c2 = (consumer(cluster, group_id, name, **{"group.remote.assignor": "range"})
              for name in ("c1", "c2"))
    c1.subscribe([topic])
    c2.subscribe([topic])
    group = Group(c1, c2)
    group.until(lambda: len(held(c1)) + len(held(c2)) == 6 and held(c1) and held(c2), 30,
                "split between c1 and c2")
    group.until(lambda: len(group.read) == 300, 30, "read the first records")

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    before = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
    coordinator = before.coordinator.id
    members_before = {m.member_id for m in before.members}
    assert len(members_before) == 2
    assert before.partition_assignor == "range"
    # The range assignor: contiguous halves, one per member.
    assert {held(c1), held(c2)} == {frozenset({0, 1, 2}), frozenset({3, 4, 5})}
    epochs_before = eventually(lambda: _settled(group_epochs(cluster, group_id)), timeout_s=10)

    cluster.kill(coordinator)  # SIGKILL
    try:
        killed_at = time.monotonic()
        produce(cluster, topic, 300, start=300)
        group.until(lambda: len(group.read) == 600, 60, "read the records written after the kill")
        print(f"\ncoordinator {coordinator} killed: every new record read "
              f"{time.monotonic() - killed_at:.2f} s later")

        def moved() -> Any:
            after = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
            assert after.coordinator.id != coordinator
            assert len(after.members) == 2
            return after

        after = eventually(moved, timeout_s=30)
        print(f"coordinator now {after.coordinator.id}; members before {sorted(members_before)}, "
              f"after {sorted(m.member_id for m in after.members)}")
        group.until(lambda: len(held(c1)) + len(held(c2)) == 6, 30, "every partition held")
        # The new coordinator replayed the group and carried on: the same
        # group epoch and member epochs, so no member was fenced or rejoined.
        epochs_after = group_epochs(cluster, group_id)
        print(f"group and member epochs before {epochs_before}, after {epochs_after}")
        assert epochs_after == epochs_before
    finally:
        c1.close()
        c2.close()
        cluster.start(coordinator)
        cluster.wait_ready(timeout_s=40)


def test_a_classic_group_rolls_to_the_consumer_protocol_and_back(cluster: LocalCluster) -> None:
    """KIP-848 online migration (group.consumer.migration.policy=bidirectional,
    Kafka 4's default) with librdkafka: two group.protocol=classic consumers
    share a topic; one is replaced by a group.protocol=consumer consumer
    (the group is upgraded in place, the remaining classic member keeps
    consuming inside it); that one leaves again and the group goes back to
    classic. Every record is read, no partition is ever held by two."""
    topic, group_id = "kip848-migration", "kip848-migration-group"
    create_topic(cluster, topic, 6)
    produce(cluster, topic, 300)
    classic = {"group.protocol": "classic", "session.timeout.ms": "10000",
               "heartbeat.interval.ms": "500", "partition.assignment.strategy": "range"}
    old1, old2 = (consumer(cluster, group_id, name, **classic) for name in ("old1", "old2"))
    old1.subscribe([topic])
    old2.subscribe([topic])
    group = Group(old1, old2)
    group.until(lambda: len(held(old1)) == 3 and len(held(old2)) == 3, 60,
                "split between the classic consumers")
    group.until(lambda: len(group.read) == 300, 30, "read the first records")

    # Roll old2 over to the consumer protocol: the group is upgraded.
    old2.close()
    group.consumers.remove(old2)
    new = consumer(cluster, group_id, "new")
    new.subscribe([topic])
    group.consumers.append(new)
    took = group.until(lambda: len(held(old1)) + len(held(new)) == 6 and held(old1) and held(new),
                       60, "shared between the classic and the consumer-protocol member")
    print(f"\nupgraded: old1 {sorted(held(old1))}, new {sorted(held(new))} after {took:.2f} s")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
    assert str(described.type) == "ConsumerGroupType.CONSUMER", described.type
    assert {m.client_id for m in described.members} == {"old1", "new"}
    produce(cluster, topic, 300, start=300)
    group.until(lambda: len(group.read) == 600, 30, "read every record in the mixed group")

    # The consumer-protocol member leaves: only a classic member remains, so
    # the group goes back to classic and old1 takes everything.
    new.close()
    group.consumers.remove(new)
    took = group.until(lambda: len(held(old1)) == 6, 60, "everything back to old1")
    print(f"downgraded: old1 holds all 6 after {took:.2f} s")
    described = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
    assert str(described.type) == "ConsumerGroupType.CLASSIC", described.type
    produce(cluster, topic, 60, start=600)
    group.until(lambda: len(group.read) == 660, 30, "read the last records")
    old1.close()


def test_a_kafka_python_member_lives_inside_a_consumer_group(cluster: LocalCluster) -> None:
    """A classic member written by others than librdkafka (kafka-python's
    client-side protocol) joins a KIP-848 group held by a librdkafka
    consumer-protocol member: the coordinator assigns it, as a follower,
    through JoinGroup and SyncGroup, and the two never share a partition."""
    from kafka import KafkaConsumer

    topic, group_id = "kip848-kafka-python", "kip848-kafka-python-group"
    create_topic(cluster, topic, 6)
    produce(cluster, topic, 120)
    new = consumer(cluster, group_id, "new")
    new.subscribe([topic])
    group = Group(new)
    group.until(lambda: len(held(new)) == 6, 30, "assigned everything to the KIP-848 member")

    old = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group_id,
                        client_id="kafka-python", auto_offset_reset="earliest",
                        session_timeout_ms=10_000, heartbeat_interval_ms=500,
                        consumer_timeout_ms=100)
    old_read: set[tuple[int, int]] = set()
    try:
        def old_holds() -> frozenset[int]:
            return frozenset(tp.partition for tp in old.assignment())

        deadline = time.monotonic() + 60
        while not (old_holds() and len(held(new)) + len(old_holds()) == 6):
            assert time.monotonic() < deadline, (sorted(held(new)), sorted(old_holds()))
            for batch in old.poll(timeout_ms=100).values():
                old_read.update((m.partition, m.offset) for m in batch)
            group.round()
            assert not held(new) & old_holds(), "a partition held by both"
        print(f"\nkafka-python holds {sorted(old_holds())}, librdkafka {sorted(held(new))}")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        described = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
        assert str(described.type) == "ConsumerGroupType.CONSUMER", described.type
        assert {m.client_id for m in described.members} == {"new", "kafka-python"}
        deadline = time.monotonic() + 30
        while len(group.read | old_read) < 120:
            assert time.monotonic() < deadline, len(group.read | old_read)
            for batch in old.poll(timeout_ms=100).values():
                old_read.update((m.partition, m.offset) for m in batch)
            group.round()
    finally:
        old.close()
        new.close()
