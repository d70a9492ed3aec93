"""Kafka's default partitioner: murmur2 against Java's test vectors
(``UtilsTest.testMurmur2``), and librdkafka's ``murmur2_random`` partitioner
(what the sink's producers use) against it on a real cluster."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from spark_helpers import create_topic

from data_plane.local_cluster import LocalCluster
from spark_sink.kafka_io import default_partition, murmur2

JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS)
def test_murmur2_matches_java(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_librdkafka_murmur2_random_is_kafkas_default_partitioner(cluster: LocalCluster) -> None:
    topic = create_topic(cluster, "partitioner", partitions=5)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "partitioner": "murmur2_random"})
    landed: dict[bytes, int] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        landed[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    keys = [f"user-{i}".encode() for i in range(200)] + [k for k, _ in JAVA_VECTORS]
    for key in keys:
        producer.produce(topic, b"v", key, on_delivery=delivered)
    assert producer.flush(20) == 0
    assert landed == {k: default_partition(k, 5) for k in keys}
    assert len(set(landed.values())) == 5
