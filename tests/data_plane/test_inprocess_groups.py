"""Consumer groups against the 3-broker in-process cluster with real clients:
FindCoordinator creates ``__consumer_offsets`` (50 partitions), the group
coordinator runtime serves the classic protocol, and committed offsets live
in the offsets partitions (surviving coordinator moves)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from kafka import ConsumerRebalanceListener, KafkaConsumer

from data_plane.groups.partitioning import OFFSETS_TOPIC, partition_for_group
from data_plane.testing.inprocess_cluster import ClusterThread

pytestmark = pytest.mark.timeout(240)
logging.getLogger("kafka").setLevel(logging.CRITICAL)

TOPIC = "g12"
PARTITIONS = 12


@pytest.fixture
def cluster(groups_cluster: ClusterThread) -> ClusterThread:
    return groups_cluster


def _create(ct: ClusterThread, name: str, partitions: int) -> None:
    ct.call(ct.cluster.controller.create_topic, name, partitions, 3, {"min.insync.replicas": "2"})
    ct.run(ct.cluster.wait_until(lambda: sum(
        1 for b in ct.cluster.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == name and h.partition.is_leader) == partitions))


def _produce(bootstrap: str, start: int, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class Ownership:
    """Who owns which partition, from the members' assignment callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []
        self.assignments = 0

    def assigned(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            self.assignments += 1
            for p in partitions:
                other = self.owner.get(p)
                if other is not None and other != member:
                    self.violations.append(f"partition {p} assigned to {member} "
                                           f"while {other} owns it")
                self.owner[p] = member

    def revoked(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            for p in partitions:
                if self.owner.get(p) == member:
                    del self.owner[p]


class Member:
    """One group member polling in its own thread."""

    def __init__(self, name: str, bootstrap: str, group: str, ownership: Ownership,
                 processed: list[tuple[int, int, bytes, str]]) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.group = group
        self.ownership = ownership
        self.processed = processed
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._guarded, daemon=True)
        self.thread.start()

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as e:  # surfaced by close()
            self.errors.append(e)

    def run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        assert self.errors == [], f"{self.name}: {self.errors}"


class ConfluentMember(Member):
    def run(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 300, "session.timeout.ms": 6000,
        })

        def on_assign(c: Any, parts: list[CTP]) -> None:
            self.ownership.assigned(self.name, [p.partition for p in parts])

        closing = False

        def on_revoke(c: Any, parts: list[CTP]) -> None:
            # Not inside close(): a synchronous commit from the revoke that
            # close() runs can deadlock librdkafka's close with this thread
            # holding the GIL (seen once: the whole worker hung); the loop
            # below commits before closing instead.
            if not closing:
                with contextlib.suppress(KafkaException):  # nothing consumed since then
                    c.commit(asynchronous=False)
            self.ownership.revoked(self.name, [p.partition for p in parts])

        def on_lost(c: Any, parts: list[CTP]) -> None:
            self.ownership.revoked(self.name, [p.partition for p in parts])

        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        uncommitted = 0
        while not self.stop.is_set():
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            self.processed.append((msg.partition(), msg.offset(), msg.value(), self.name))
            time.sleep(0.001)
            uncommitted += 1
            if uncommitted >= 25:
                consumer.commit(asynchronous=False)
                uncommitted = 0
        with contextlib.suppress(KafkaException):
            consumer.commit(asynchronous=False)
        closing = True
        consumer.close()  # revokes (committed just above) and leaves the group


class KafkaPythonMember(Member):
    def run(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 heartbeat_interval_ms=300, session_timeout_ms=6000)
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                # kafka-python 3 forbids blocking calls here; it commits
                # after every poll instead (at-least-once either way).
                member.ownership.revoked(member.name, [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.ownership.assigned(member.name, [tp.partition for tp in assigned])

        consumer.subscribe([TOPIC], listener=Listener())
        uncommitted = 0
        while not self.stop.is_set():
            batches = consumer.poll(timeout_ms=100, max_records=20)
            for records in batches.values():
                for msg in records:
                    self.processed.append((msg.partition, msg.offset, msg.value, self.name))
                    time.sleep(0.001)
                    uncommitted += 1
            if uncommitted:
                consumer.commit()
                uncommitted = 0
        consumer.commit()
        member.ownership.revoked(member.name, list(range(PARTITIONS)))
        consumer.close()


def _wait(predicate: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    got = consumer.committed([CTP(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    consumer.close()
    return {tp.partition: tp.offset for tp in got}


def test_three_members_share_a_topic_across_joins_and_leaves(cluster: ClusterThread) -> None:
    """confluent-kafka and kafka-python members share a 12-partition topic
    through joins and leaves: no partition is ever owned by two members,
    every record is processed, and a new member resumes at the committed
    offsets."""
    c = cluster.cluster
    _create(cluster, TOPIC, PARTITIONS)
    bootstrap = c.bootstrap_servers
    _produce(bootstrap, 0, 2400)
    ownership = Ownership()
    processed: list[tuple[int, int, bytes, str]] = []
    done = lambda n: lambda: len({(p, o) for p, o, _, _ in processed}) >= n  # noqa: E731

    m1 = ConfluentMember("cf-1", bootstrap, "g", ownership, processed)
    m2 = KafkaPythonMember("kp-2", bootstrap, "g", ownership, processed)
    _wait(done(500))
    m3 = ConfluentMember("cf-3", bootstrap, "g", ownership, processed)  # join
    _wait(lambda: len({name for *_, name in processed[-200:]}) == 3 or done(2400)())
    _wait(done(1400))
    m2.close()  # leave
    _wait(done(2400))
    m1.close()
    m3.close()

    assert ownership.violations == []
    assert ownership.assignments >= 5  # at least three rebalances happened
    distinct = {(p, o) for p, o, _, _ in processed}
    assert distinct == {(p, o) for p in range(PARTITIONS) for o in range(200)}
    for p, o, v, _ in processed:
        assert v == b"%d" % (o * PARTITIONS + p)
    assert {name for *_, name in processed} == {"cf-1", "kp-2", "cf-3"}
    assert _committed(bootstrap, "g") == {p: 200 for p in range(PARTITIONS)}

    # A fresh member resumes exactly where the group left off.
    _produce(bootstrap, 2400, 600)
    fresh: list[tuple[int, int, bytes, str]] = []
    m4 = ConfluentMember("cf-4", bootstrap, "g", Ownership(), fresh)
    _wait(lambda: len(fresh) >= 600)
    time.sleep(1.0)  # nothing beyond the new records arrives
    m4.close()
    assert sorted((p, o) for p, o, _, _ in fresh) == sorted(
        (p, o) for p in range(PARTITIONS) for o in range(200, 250))
    topic = c.controller.image.topic_by_name(OFFSETS_TOPIC)
    assert topic is not None and len(topic.partitions) == 50
    assert len(topic.partitions[0].replicas) == 3


def test_committed_offsets_survive_the_coordinator_moving(cluster: ClusterThread) -> None:
    """Offsets are records of the group's ``__consumer_offsets`` partition: after
    a leader change and after the coordinator's broker is killed, the new
    coordinator replays them."""
    c = cluster.cluster
    _create(cluster, TOPIC, PARTITIONS)
    bootstrap = c.bootstrap_servers
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gm",
                         "enable.auto.commit": False})
    offsets = [CTP(TOPIC, p, 10 + p) for p in range(PARTITIONS)]
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()
    want = {p: 10 + p for p in range(PARTITIONS)}
    assert _committed(bootstrap, "gm") == want

    partition = partition_for_group("gm", 50)
    first = c.leader_of(OFFSETS_TOPIC, partition)
    reg = c.controller.image.topic_by_name(OFFSETS_TOPIC)
    assert reg is not None
    target = next(r for r in reg.partitions[partition].isr if r != first)
    cluster.call(c.controller.elect_leader, OFFSETS_TOPIC, partition, target)
    assert _committed(bootstrap, "gm") == want

    cluster.run(c.kill_broker(target))
    assert c.leader_of(OFFSETS_TOPIC, partition) not in (target, -1)
    assert _committed(c.bootstrap_servers, "gm") == want
    # Commits keep working on the new coordinator.
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "gm",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[CTP(TOPIC, 0, 99)], asynchronous=False)
    consumer.close()
    assert _committed(c.bootstrap_servers, "gm")[0] == 99


def test_a_failing_tick_reloads_the_shard_and_the_coordinator_keeps_working(
    cluster: ClusterThread, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A coordinator bug in tick must not end the timer task (session expiry
    would stop for every group on the broker): the shard is reloaded from its
    offsets partition and the group keeps its committed offsets."""
    from data_plane.groups.shard import GroupCoordinatorShard

    _create(cluster, TOPIC, PARTITIONS)
    _produce(cluster.cluster.bootstrap_servers, 0, 24)
    consumer = Consumer({"bootstrap.servers": cluster.cluster.bootstrap_servers,
                         "group.id": "tick-bug", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 24 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == 24
        consumer.commit(asynchronous=False)

        real_tick = GroupCoordinatorShard.tick
        failures = {"left": 1}

        def tick_once_broken(self: GroupCoordinatorShard, now_ms: int) -> Any:
            if failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("injected coordinator bug")
            return real_tick(self, now_ms)

        monkeypatch.setattr(GroupCoordinatorShard, "tick", tick_once_broken)
        # A new group's initial rebalance delay is a deadline the timer ticks on.
        second = Consumer({"bootstrap.servers": cluster.cluster.bootstrap_servers,
                           "group.id": "tick-bug-2", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False})
        try:
            with caplog.at_level(logging.ERROR, logger="data_plane.broker.group_runtime"):
                second.subscribe([TOPIC])
                got = 0
                deadline = time.monotonic() + 60
                while got < 24 and time.monotonic() < deadline:
                    msg = second.poll(0.5)
                    if msg is not None and msg.error() is None:
                        got += 1
            assert failures["left"] == 0, "the timer never ticked the shard"
            assert "tick failed; reloading its groups" in caplog.text
            assert got == 24, "the group formed after the reload"
        finally:
            second.close()
        # The first group's offsets, committed before the failure, are intact.
        committed = consumer.committed([CTP(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        assert sum(tp.offset for tp in committed) == 24
    finally:
        consumer.close()
