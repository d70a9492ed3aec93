"""Fetching from the closest replica (KIP-392) on a real 3-node cluster:
each broker in its own rack (``broker.rack``), ``replica.selector.class``
Kafka's RackAwareReplicaSelector. A librdkafka consumer with ``client.rack``
is sent by the partition leader to the in-sync replica in its rack and
reads every record from it; counted by each broker's request metrics
(``FetchConsumer``)."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from cluster_helpers import module_cluster_with
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.broker.log_configs import RACK_AWARE_REPLICA_SELECTOR
from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}


cluster = module_cluster_with(
    {"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR},
    node_properties={n: {"broker.rack": rack} for n, rack in RACKS.items()})


def _consumer_fetches(cluster: LocalCluster, node_id: int) -> float:
    node = next(n for n in cluster.layout.nodes if n.node_id == node_id)
    with urllib.request.urlopen(f"http://{cluster.layout.host}:{node.http_port}/metrics",
                                timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'kafka_network_requestmetrics_totaltimems_count\{[^}]*'
                      r'request="FetchConsumer"[^}]*\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_a_consumer_reads_from_the_in_sync_replica_in_its_rack(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic("near", num_partitions=1, replica_assignment=[[1, 2, 3]])])["near"].result(15)
    cluster.wait_topic("near", 1)
    producer = Producer({"bootstrap.servers": b, "acks": "all"})
    values = [f"record {i}".encode() for i in range(200)]
    for value in values:
        producer.produce("near", value, partition=0)
    assert producer.flush(20) == 0
    leader = admin.list_topics("near", timeout=10).topics["near"].partitions[0].leader
    near = next(n for n in RACKS if n != leader)  # a follower: the consumer's rack is its
    before = {n: _consumer_fetches(cluster, n) for n in RACKS}

    consumer = Consumer({"bootstrap.servers": b, "group.id": "near-group",
                         "client.rack": RACKS[near], "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition("near", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        # Keep polling a moment: from now on the fetches are the follower's.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            consumer.poll(0.2)
        after = {n: _consumer_fetches(cluster, n) for n in RACKS}
    finally:
        consumer.close()
    assert got == values
    served = {n: after[n] - before[n] for n in RACKS}
    print(f"\nleader {leader}, consumer in {RACKS[near]} (broker {near}); consumer fetches "
          f"served per broker: {served}")
    # The leader answered the first fetch with its preferred read replica;
    # the follower in the consumer's rack served the rest, long polls included.
    assert served[near] >= 5, served
    assert served[near] > served[leader], served
    third = next(n for n in RACKS if n not in (near, leader))
    assert served[third] == 0, served
