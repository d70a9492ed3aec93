"""A 3-broker in-process cluster (real ReplicaManagers, fetchers and Kafka
listeners on loopback, fake controller) driven by real Kafka clients:
kafka-python and confluent-kafka (librdkafka)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP

from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster

pytestmark = pytest.mark.timeout(120)
logging.getLogger("kafka").setLevel(logging.CRITICAL)

N = 300


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2"})
    with ClusterThread(c) as ct:
        yield ct


def _create(ct: ClusterThread, name: str, partitions: int = 3) -> None:
    ct.call(ct.cluster.controller.create_topic, name, partitions, 3, {"min.insync.replicas": "2"})
    ct.run(ct.cluster.wait_until(lambda: sum(
        1 for b in ct.cluster.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == name and h.partition.is_leader) == partitions))


def _confluent_produce(bootstrap: str, topic: str, n: int, compression: str,
                       prefix: str) -> dict[tuple[int, int], bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "compression.type": compression, "linger.ms": 5})
    acked: dict[tuple[int, int], bytes] = {}
    errors: list[object] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=f"{prefix}{i}".encode(),
                         partition=i % 3, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []
    return acked


def _confluent_consume(bootstrap: str, topic: str, start: dict[int, int],
                       expected: int) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([CTP(topic, p, o) for p, o in start.items()])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        got.append((msg.partition(), msg.offset(), msg.value()))
    consumer.close()
    return got


def _kafka_python_produce(bootstrap: str, topic: str, n: int, compression: str | None,
                          prefix: str) -> dict[tuple[int, int], bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False,
                             compression_type=compression, linger_ms=5)
    futures = [(f"{prefix}{i}".encode(), producer.send(topic, value=f"{prefix}{i}".encode(),
                                                     partition=i % 3)) for i in range(n)]
    acked = {}
    for value, future in futures:
        meta = future.get(30)
        acked[(meta.partition, meta.offset)] = value
    producer.close()
    return acked


def _kafka_python_consume(bootstrap: str, topic: str, start: dict[int, int],
                          expected: int) -> list[tuple[int, int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    consumer.assign([KTP(topic, p) for p in start])
    for p, o in start.items():
        consumer.seek(KTP(topic, p), o)
    got = []
    for msg in consumer:
        got.append((msg.partition, msg.offset, msg.value))
        if len(got) >= expected:
            break
    consumer.close()
    return got


def _check_order(got: list[tuple[int, int, bytes]], acked: dict[tuple[int, int], bytes],
                 start: dict[int, int]) -> None:
    by_partition: dict[int, list[int]] = {}
    for p, o, v in got:
        by_partition.setdefault(p, []).append(o)
        assert acked[(p, o)] == v, f"offset {p}/{o} holds {v!r}, acked {acked[(p, o)]!r}"
    for p, offsets in by_partition.items():
        assert offsets == list(range(start[p], start[p] + len(offsets))), "per-partition order"
    want = {k for k in acked if k[1] >= start[k[0]]}
    assert {(p, o) for p, o, _ in got} == want


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_confluent_kafka_produce_acks_all_and_consume(
    cluster: ClusterThread, compression: str
) -> None:
    _create(cluster, "cf")
    bootstrap = cluster.cluster.bootstrap_servers
    acked = _confluent_produce(bootstrap, "cf", N, compression, "cf-")
    assert len(acked) == N
    start = {p: 0 for p in range(3)}
    _check_order(_confluent_consume(bootstrap, "cf", start, N), acked, start)
    stored = {p: 40 for p in range(3)}  # "a stored offset": resume mid-partition
    _check_order(_confluent_consume(bootstrap, "cf", stored, N - 120), acked, stored)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_kafka_python_produce_acks_all_and_consume(
    cluster: ClusterThread, compression: str | None
) -> None:
    _create(cluster, "kp")
    bootstrap = cluster.cluster.bootstrap_servers
    acked = _kafka_python_produce(bootstrap, "kp", N, compression, "kp-")
    assert len(acked) == N
    start = {p: 0 for p in range(3)}
    _check_order(_kafka_python_consume(bootstrap, "kp", start, N), acked, start)
    stored = {p: 50 for p in range(3)}
    _check_order(_kafka_python_consume(bootstrap, "kp", stored, N - 150), acked, stored)


def test_acks_all_refused_with_one_in_sync_replica(cluster: ClusterThread) -> None:
    """min.insync.replicas=2: with two brokers down the ISR is the leader
    alone, and acks=all is refused NOT_ENOUGH_REPLICAS, never acknowledged."""
    _create(cluster, "mi", partitions=1)
    c = cluster.cluster
    leader = c.leader_of("mi", 0)
    for b in [b for b in c.brokers if b != leader]:
        cluster.run(c.kill_broker(b))
    cluster.run(c.wait_until(lambda: c.brokers[leader].replicas.partitions[("mi", 0)]
                             .partition.isr == (leader,)))
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 3000, "retries": 0})
    results: list[KafkaError | None] = []
    producer.produce("mi", value=b"x", partition=0,
                     on_delivery=lambda err, msg: results.append(err))
    producer.flush(10)
    assert len(results) == 1 and results[0] is not None
    assert results[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
    hw = c.brokers[leader].replicas.partitions[("mi", 0)].partition.high_watermark
    assert hw == 0


def test_leader_change_mid_produce_keeps_every_acked_record(cluster: ClusterThread) -> None:
    """Leadership moves (clean election within the ISR) while confluent-kafka
    produces with acks=all: every acknowledged record reads back at its offset."""
    _create(cluster, "lc", partitions=1)
    c = cluster.cluster
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "linger.ms": 1, "retries": 1_000_000, "message.timeout.ms": 30000})
    acked: dict[tuple[int, int], bytes] = {}
    errors: list[object] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]
        else:
            errors.append(err)

    moves = 0
    for i in range(3000):
        producer.produce("lc", value=b"lc-%d" % i, partition=0, on_delivery=on_delivery)
        producer.poll(0)
        if i % 1000 == 500:
            leader = c.leader_of("lc", 0)
            reg = c.controller.image.topic_by_name("lc")
            assert reg is not None
            target = next(r for r in reg.partitions[0].isr if r != leader)
            cluster.call(c.controller.elect_leader, "lc", 0, target)
            moves += 1
            time.sleep(0.05)
    assert producer.flush(60) == 0
    assert moves == 3
    assert len(acked) + len(errors) == 3000
    assert len(acked) > 0
    got = _confluent_consume(c.bootstrap_servers, "lc", {0: 0}, max(o for _, o in acked) + 1)
    by_offset = {o: v for _, o, v in got}
    for (_, offset), value in acked.items():
        assert by_offset.get(offset) == value


def test_log_append_time_topic_answers_the_brokers_timestamps(cluster: ClusterThread) -> None:
    """``message.timestamp.type=LogAppendTime``: the producer's delivery
    report (the produce response's log_append_time_ms) and the consumer both
    see the leader's append time as a LOG_APPEND_TIME timestamp, not the
    producer's. The setting used to be accepted and ignored."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    bootstrap = cluster.cluster.bootstrap_servers
    cluster.call(cluster.cluster.controller.create_topic, "stamped", 1, 3,
                 {"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"})
    _create(cluster, "plain", 1)
    cluster.run(cluster.cluster.wait_until(lambda: any(
        k[0] == "stamped" and h.partition.is_leader
        for b in cluster.cluster.brokers.values() for k, h in b.replicas.partitions.items())))
    old = 1_000_000_000_000  # 2001
    reports: dict[str, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    before = int(time.time() * 1000)
    for topic in ("stamped", "plain"):
        producer.produce(topic, b"v", timestamp=old, on_delivery=lambda err, msg: reports.update(
            {msg.topic(): msg.timestamp()}) if err is None else None)
    assert producer.flush(30) == 0
    after = int(time.time() * 1000)
    kind, stamp = reports["stamped"]
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
    assert reports["plain"] == (TIMESTAMP_CREATE_TIME, old)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ts",
                         "enable.auto.commit": False})
    consumer.assign([CTP("stamped", 0, 0)])
    message = None
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            break
    consumer.close()
    assert message is not None and message.error() is None
    assert message.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, stamp)


def test_timestamps_outside_the_topics_bounds_are_refused_to_real_clients(
    cluster: ClusterThread,
) -> None:
    """KIP-937: a CreateTime record more than ``message.timestamp.after.max.ms``
    (Kafka's default: one hour) ahead of the broker's clock, or more than
    ``message.timestamp.before.max.ms`` behind it, is refused with
    INVALID_TIMESTAMP; confluent-kafka and kafka-python each see that error
    and nothing refused can be read."""
    from kafka.errors import InvalidTimestampError

    bootstrap = cluster.cluster.bootstrap_servers
    cluster.call(cluster.cluster.controller.create_topic, "bounded", 1, 3,
                 {"min.insync.replicas": "2", "message.timestamp.before.max.ms": "60000"})
    cluster.run(cluster.cluster.wait_until(lambda: any(
        k[0] == "bounded" and h.partition.is_leader
        for b in cluster.cluster.brokers.values() for k, h in b.replicas.partitions.items())))
    now = int(time.time() * 1000)
    outcomes: dict[str, object] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    for name, stamp in (("now", now), ("two hours ahead", now + 7_200_000),
                        ("ten minutes ago", now - 600_000)):
        producer.produce("bounded", name.encode(), timestamp=stamp,
                         on_delivery=lambda err, msg, name=name: outcomes.update(
                             {name: err.code() if err is not None else msg.offset()}))
        assert producer.flush(30) == 0
    assert outcomes == {"now": 0, "two hours ahead": KafkaError.INVALID_TIMESTAMP,
                        "ten minutes ago": KafkaError.INVALID_TIMESTAMP}
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
    with pytest.raises(InvalidTimestampError):
        kp.send("bounded", b"kafka-python late", timestamp_ms=now - 600_000).get(timeout=30)
    assert kp.send("bounded", b"kafka-python now",
                   timestamp_ms=int(time.time() * 1000)).get(timeout=30).offset == 1
    kp.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3_000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([KTP("bounded", 0)])
    assert [m.value for m in consumer] == [b"now", b"kafka-python now"]
    consumer.close()


def test_kafka_python_describes_each_brokers_log_dirs(cluster: ClusterThread) -> None:
    """DescribeLogDirs (kafka-log-dirs.sh): every broker answers its own
    directory with the partitions it holds and their size on disk."""
    from kafka import KafkaAdminClient

    _create(cluster, "sized", 3)
    _confluent_produce(cluster.cluster.bootstrap_servers, "sized", 30, "none", "x")
    admin = KafkaAdminClient(bootstrap_servers=cluster.cluster.bootstrap_servers)
    try:
        answers = admin.describe_log_dirs()
    finally:
        admin.close()
    assert sorted(a["broker"] for a in answers) == [1, 2, 3]
    for answer in answers:
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"].endswith(f"broker-{answer['broker']}")
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        (topic,) = log_dir["topics"]
        assert topic["name"] == "sized"
        sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        assert sorted(sizes) == [0, 1, 2] and all(size > 0 for size in sizes.values())
        assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topic["partitions"])
