"""Log compaction on a real 3-node cluster, read by three Kafka clients.

A topic with ``cleanup.policy=compact`` and small segments takes many
updates of a few keys (plain and zstd, idempotent, acks=all) and some
tombstones. Each broker's cleaner compacts its own replica; then
confluent-kafka, kafka-python and aiokafka read it from the beginning.
They must see each key's last acknowledged value at the offset it was
acknowledged at, skip the empty batches compaction leaves, and reach the
end. A replica killed with SIGKILL comes back on its compacted log.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import urllib.request
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as ATP
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
logging.getLogger("kafka").setLevel(logging.CRITICAL)
logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

TOPIC = "changelog"
KEYS = 40
Acked = dict[int, tuple[bytes, bytes | None]]


def _produce(bootstrap: str, start: int, n: int, compression: str, acked: Acked,
             tombstones: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "compression.type": compression,
                         "linger.ms": 0, "batch.num.messages": 5})
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())  # type: ignore[attr-defined]

    for i in range(start, start + n):
        key = b"key-%d" % (i % KEYS)
        value = None if i in tombstones else b"value-%d-" % i + b"x" * 200
        producer.produce(TOPIC, key=key, value=value, partition=0, on_delivery=on_delivery)
        if i % 50 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0
    assert errors == []


def _replica_bytes(cluster: LocalCluster, node_id: int) -> int:
    return sum(p.stat().st_size for p in (cluster.data_dir(node_id) / f"{TOPIC}-0").glob("*.log"))


def _confluent_read(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        consumer.assign([CTP(TOPIC, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF and (
                        consumer.position([CTP(TOPIC, 0)])[0].offset >= end):
                    break
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def _kafka_python_read(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        consumer.assign([KTP(TOPIC, 0)])
        consumer.seek(KTP(TOPIC, 0), 0)
        deadline = time.monotonic() + 30
        while consumer.position(KTP(TOPIC, 0)) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                out += [(r.offset, r.key, r.value) for r in records]
    finally:
        consumer.close()
    return out


def _aiokafka_read(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    async def read() -> list[tuple[int, bytes, bytes | None]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        out: list[tuple[int, bytes, bytes | None]] = []
        try:
            tp = ATP(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + 30
            while await consumer.position(tp) < end and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    out += [(r.offset, r.key, r.value) for r in records]
        finally:
            await consumer.stop()
        return out

    return asyncio.run(read())


def _check(name: str, read: list[tuple[int, bytes, bytes | None]], acked: Acked,
           cleaned_below: int) -> None:
    offsets = [o for o, _, _ in read]
    assert offsets == sorted(set(offsets)), f"{name}: offsets out of order or repeated"
    for offset, key, value in read:
        assert acked[offset] == (key, value), f"{name}: offset {offset} is not what was acked"
    last_acked: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(acked):
        last_acked[acked[offset][0]] = (offset, acked[offset][1])
    last_read = {key: (offset, value) for offset, key, value in read}
    for key, (offset, value) in last_acked.items():
        if value is None:
            assert last_read.get(key, (offset, None)) == (offset, None), name
        else:
            assert last_read[key] == (offset, value), f"{name}: {key!r} lost its last value"
    # Compaction happened: below the cleaned offset, one record per key at most.
    below = [key for offset, key, _ in read if offset < cleaned_below]
    assert len(below) == len(set(below)), f"{name}: superseded records below {cleaned_below}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster for the module: the cleaner looks every 200 ms, and
    ``__consumer_offsets`` is one partition of small segments."""
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2", "log.cleaner.backoff.ms": "200",
                    "offsets.topic.num.partitions": "1",
                    "offsets.topic.segment.bytes": "4096",
                    "group.initial.rebalance.delay.ms": "0"})
    c = LocalCluster(str(tmp_path_factory.mktemp("compaction")), layout)
    c.up(40)
    try:
        yield c
    finally:
        c.stop(timeout_s=10)


def test_compacted_topic_keeps_each_keys_last_value_for_every_client(
    cluster: LocalCluster,
) -> None:
    layout = cluster.layout
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "cleanup.policy": "compact", "segment.bytes": "16384",
        "min.insync.replicas": "2", "delete.retention.ms": "3600000"})])[TOPIC].result(15)
    cluster.wait_topic(TOPIC, 1)
    # As Kafka: a record without a key is refused (INVALID_RECORD).
    keyless = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    refused: list[KafkaError | None] = []
    keyless.produce(TOPIC, value=b"no key", partition=0,
                    on_delivery=lambda err, msg: refused.append(err))
    keyless.flush(30)
    assert refused and refused[0] is not None
    assert refused[0].code() == KafkaError.INVALID_RECORD, refused
    acked: Acked = {}
    _produce(cluster.bootstrap_servers, 0, 600, "none", acked)
    _produce(cluster.bootstrap_servers, 600, 600, "zstd", acked,
             tombstones={1190, 1191, 1192})
    end = max(acked) + 1
    assert len(acked) == 1200
    nodes = [n.node_id for n in layout.nodes]

    def first_dirty(node_id: int) -> int:
        path = cluster.data_dir(node_id) / f"{TOPIC}-0" / "cleaner-offset-checkpoint"
        return int(path.read_text().split()[1]) if path.exists() else 0

    # Every broker compacts its own replica (leader and followers).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and min(first_dirty(n) for n in nodes) < 900:
        time.sleep(0.3)
    cleaned_below = min(first_dirty(n) for n in nodes)
    assert cleaned_below >= 900
    for node in layout.nodes:
        if node.http_port is not None:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{node.http_port}/metrics", timeout=10) as response:
                metrics = response.read().decode()
            passes = [line for line in metrics.splitlines()
                      if line.startswith("raftlog_log_cleaner_passes_total ")]
            assert passes and float(passes[0].split()[1]) >= 1, passes
    payload = sum(len(k) + len(v or b"") for k, v in acked.values())
    sizes = {n: _replica_bytes(cluster, n) for n in nodes}
    assert all(size < payload // 5 for size in sizes.values()), (payload, sizes)
    for name, reader in (("confluent-kafka", _confluent_read),
                         ("kafka-python", _kafka_python_read),
                         ("aiokafka", _aiokafka_read)):
        read = reader(cluster.bootstrap_servers, end)
        assert read and read[-1][0] == end - 1, f"{name} did not reach the end"
        assert len(read) < len(acked) // 2, name
        _check(name, read, acked, cleaned_below)
    # A replica restarted after SIGKILL recovers its compacted log, and
    # its producer state (rebuilt over empty batches) still deduplicates.
    cluster.kill(2, signal.SIGKILL)
    cluster.start(2)
    cluster.wait_ready(60)
    _produce(cluster.bootstrap_servers, 1200, 40, "none", acked)
    end = max(acked) + 1
    read = _confluent_read(cluster.bootstrap_servers, end)
    _check("after restart", read, acked, cleaned_below)


def test_group_offsets_survive_compaction_of_consumer_offsets_and_a_coordinator_crash(
    cluster: LocalCluster,
) -> None:
    """``__consumer_offsets`` is compacted like any compacted topic: after
    many commits and a deleted group, a new coordinator that loads the
    compacted log knows each group's last commit, and the deleted group stays
    deleted."""
    layout = cluster.layout
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 1, 3)])["t"].result(15)
    cluster.wait_topic("t", 1)
    consumers = {g: Consumer({"bootstrap.servers": bootstrap, "group.id": g,
                              "enable.auto.commit": False}) for g in ("kept", "deleted")}

    def commit(consumer: Consumer, offset: int) -> None:
        # The first commits may meet a coordinator still loading (retriable).
        deadline = time.monotonic() + 30
        while True:
            try:
                consumer.commit(offsets=[CTP("t", 0, offset)], asynchronous=False)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    for offset in range(1, 151):
        for consumer in consumers.values():
            commit(consumer, offset)
    for consumer in consumers.values():
        consumer.close()
    admin.delete_consumer_groups(["deleted"])["deleted"].result(15)
    nodes = [n.node_id for n in layout.nodes]

    def first_dirty(node_id: int) -> int:
        path = cluster.data_dir(node_id) / "__consumer_offsets-0" / "cleaner-offset-checkpoint"
        return int(path.read_text().split()[1]) if path.exists() else 0

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and min(first_dirty(n) for n in nodes) < 200:
        time.sleep(0.3)
    assert min(first_dirty(n) for n in nodes) >= 200, [first_dirty(n) for n in nodes]
    leader = admin.list_topics("__consumer_offsets", timeout=10).topics[
        "__consumer_offsets"].partitions[0].leader
    cluster.kill(leader, signal.SIGKILL)

    def committed(group: str) -> int:
        check = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "enable.auto.commit": False})
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    return int(check.committed([CTP("t", 0)], timeout=5)[0].offset)
                except KafkaException:  # the coordinator is moving; retry
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            check.close()

    assert committed("kept") == 150
    assert committed("deleted") == OFFSET_INVALID
    cluster.start(leader)
    cluster.wait_ready(60)
