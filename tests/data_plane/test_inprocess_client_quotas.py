"""Client quotas with real clients against an in-process broker (fake
controller: the quotas go straight into its metadata image, as the
controller's ClientQuotaRecords would).

The quota window is 2 samples of 1 s (``quota.window.num=2``), so a
client's rate is measured over 1-2 s and its initial burst allowance is one
second's worth: a few seconds of traffic show the steady state."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

from data_plane.broker.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster

pytestmark = pytest.mark.timeout(120)
logging.getLogger("kafka").setLevel(logging.CRITICAL)  # it warns on every throttle

BOUND = 100 * 1024  # bytes per second
VALUE = b"v" * 1000
PRODUCE_SECONDS = 4.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path_factory.mktemp("quotas")), 1,
                         {"quota.window.num": "2", "quota.window.size.seconds": "1"})
    with ClusterThread(c) as ct:
        yield ct


def _create(ct: ClusterThread, name: str) -> None:
    ct.call(ct.cluster.controller.create_topic, name, 1, 1)
    ct.run(ct.cluster.wait_until(lambda: any(
        k[0] == name and h.partition.is_leader
        for b in ct.cluster.brokers.values() for k, h in b.replicas.partitions.items())))


def _set_quota(ct: ClusterThread, client_id: str, key: str, value: float) -> None:
    ct.call(ct.cluster.controller.set_client_quota, (("client-id", client_id),), key, value)
    manager = (ct.cluster.brokers[1].replicas.client_quotas.produce if key == PRODUCER_BYTE_RATE
               else ct.cluster.brokers[1].replicas.client_quotas.fetch)
    ct.run(ct.cluster.wait_until(lambda: manager.resolve(client_id) is not None))


def _sensor(ct: ClusterThread, key: str, client_id: str) -> Any:
    quotas = ct.cluster.brokers[1].replicas.client_quotas
    manager = quotas.produce if key == PRODUCER_BYTE_RATE else quotas.fetch
    return ct.call(manager.sensors.get, ("", client_id))


def _log_bytes(ct: ClusterThread, topic: str) -> int:
    """Bytes in ``topic``'s partition 0 log on the broker."""
    hosted = ct.cluster.brokers[1].replicas.partitions[(topic, 0)]
    return int(ct.call(lambda: hosted.partition.log.size_in_bytes))


def _free_producer(bootstrap: str, topic: str, count: int, result: dict[str, Any]) -> None:
    """An unlimited client id producing ``count`` values; what happened goes
    in ``result``."""
    throttles: list[object] = []
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "free", "acks": "1",
                         "linger.ms": 5, "throttle_cb": throttles.append})

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        del msg
        if err is not None:
            errors.append(err)

    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=VALUE, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    result["unflushed"] = producer.flush(60)
    result["throttles"] = throttles
    result["errors"] = errors


def test_a_producer_is_held_to_its_byte_rate_and_another_client_id_is_not(
    cluster: ClusterThread,
) -> None:
    ct = cluster
    _create(ct, "produce-quota")
    _create(ct, "produce-free")
    _set_quota(ct, "limited", PRODUCER_BYTE_RATE, BOUND)
    bootstrap = ct.cluster.bootstrap_servers

    free: dict[str, Any] = {}
    free_thread = threading.Thread(
        target=_free_producer, args=(bootstrap, "produce-free", 2048, free), daemon=True)
    free_thread.start()

    throttles: list[object] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": "limited", "acks": "1",
        "linger.ms": 5, "batch.size": 16384,
        # A short local queue: "as fast as it can" without queueing megabytes.
        "queue.buffering.max.messages": 500, "throttle_cb": throttles.append,
    })

    start = time.monotonic()
    warm: tuple[float, int] | None = None
    while (now := time.monotonic()) < start + PRODUCE_SECONDS:
        try:
            producer.produce("produce-quota", value=VALUE)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        if warm is None and now >= start + 1.0:
            warm = (time.monotonic(), _log_bytes(ct, "produce-quota"))
    assert warm is not None
    # Past the first second (the burst one window allows), the broker's log
    # grows at about the bound; unthrottled, this client would write
    # megabytes a second.
    steady = (_log_bytes(ct, "produce-quota") - warm[1]) / (time.monotonic() - warm[0])
    # What it pipelined would take seconds more to be let through: drop it.
    producer.purge(in_queue=True, in_flight=True)
    producer.flush(10)

    assert 0.3 * BOUND < steady < 1.6 * BOUND, f"{steady / 1024:.0f} KiB/s"
    assert throttles, "the limited producer was never told it was throttled"
    sensor = _sensor(ct, PRODUCER_BYTE_RATE, "limited")
    assert sensor is not None and sensor.throttles > 0

    free_thread.join(90)
    assert free["unflushed"] == 0 and free["errors"] == []
    assert free["throttles"] == []  # every answer had throttle_time_ms 0
    assert _sensor(ct, PRODUCER_BYTE_RATE, "free") is None  # never measured


def _fill(bootstrap: str, topic: str, count: int) -> None:
    # Batches of 16 KiB, so the consumer's capped fetches (one quota window,
    # 100 KiB) carry several (a first batch is always sent whole, KIP-74).
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "filler",
                         "acks": "1", "linger.ms": 5, "batch.size": 16384})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


COUNT = 400  # ~400 KiB: about three seconds at the bound


def test_a_throttled_confluent_consumer_still_reads_every_record_in_order(
    cluster: ClusterThread,
) -> None:
    ct = cluster
    _create(ct, "fetch-quota")
    _fill(ct.cluster.bootstrap_servers, "fetch-quota", COUNT)
    _set_quota(ct, "slow", CONSUMER_BYTE_RATE, BOUND)
    throttles: list[object] = []
    consumer = Consumer({"bootstrap.servers": ct.cluster.bootstrap_servers,
                         "client.id": "slow", "group.id": "unused",
                         "enable.auto.commit": False, "throttle_cb": throttles.append})
    consumer.assign([CTP("fetch-quota", 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(offsets) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            offset = msg.offset()
            assert offset is not None
            assert msg.value() == VALUE and msg.key() == str(offset).encode()
            offsets.append(offset)
        consumer.poll(0.2)  # serve a last throttle event, if pending
    finally:
        consumer.close()
    assert offsets == list(range(COUNT))
    sensor = _sensor(ct, CONSUMER_BYTE_RATE, "slow")
    assert sensor is not None and sensor.throttles > 0
    assert throttles, "the consumer was never told it was throttled"


def test_a_throttled_kafka_python_consumer_with_fetch_sessions_reads_everything(
    cluster: ClusterThread,
) -> None:
    """kafka-python uses incremental fetch sessions (KIP-227): throttled
    answers in a session must not lose its position."""
    ct = cluster
    _create(ct, "fetch-quota-kp")
    _fill(ct.cluster.bootstrap_servers, "fetch-quota-kp", COUNT)
    _set_quota(ct, "slow-kp", CONSUMER_BYTE_RATE, BOUND)
    consumer = KafkaConsumer(bootstrap_servers=ct.cluster.bootstrap_servers,
                             client_id="slow-kp", enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=30_000)
    partition = KTP("fetch-quota-kp", 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    offsets: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(offsets) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    assert record.value == VALUE
                    offsets.append(record.offset)
    finally:
        consumer.close()
    assert offsets == list(range(COUNT))
    sensor = _sensor(ct, CONSUMER_BYTE_RATE, "slow-kp")
    assert sensor is not None and sensor.throttles > 0
