"""The sink's partitioning against librdkafka's ``murmur2_random``
partitioner (what the sink's producers use) on a real cluster. murmur2
itself is checked against Java's vectors in
tests/raftlog/test_records_partitioner.py."""

from __future__ import annotations

from confluent_kafka import Producer
from spark_helpers import create_topic

from data_plane.local_cluster import LocalCluster
from spark_sink.kafka_io import default_partition


def test_librdkafka_murmur2_random_is_kafkas_default_partitioner(cluster: LocalCluster) -> None:
    topic = create_topic(cluster, "partitioner", partitions=5)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "partitioner": "murmur2_random",
        }
    )
    landed: dict[bytes, int] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        landed[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    keys = [f"user-{i}".encode() for i in range(200)] + [
        b"21",
        b"foobar",
        b"a-little-bit-long-string",
        b"abc",
    ]
    for key in keys:
        producer.produce(topic, b"v", key, on_delivery=delivered)
    assert producer.flush(20) == 0
    assert landed == {k: default_partition(k, 5) for k in keys}
    assert len(set(landed.values())) == 5
