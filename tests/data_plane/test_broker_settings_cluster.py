"""Broker data-plane settings in server.properties reach real node processes.

`log.segment.bytes`, `log.retention.ms` and `log.retention.check.interval.ms`
are set only in the nodes' server.properties (the topic sets nothing): the
brokers roll small segments and retention deletes the old ones, so the log
start offset moves past 0 within seconds. With Kafka's defaults (1 GiB
segments, 7 days, a check every 5 minutes) nothing would move.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts


@pytest.mark.slow
def test_log_settings_from_server_properties_drive_retention(tmp_path: object) -> None:
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2", "log.segment.bytes": "4096",
                    "log.retention.ms": "1000", "log.retention.check.interval.ms": "300"})
    cluster = LocalCluster(str(tmp_path), layout)
    cluster.up(40)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("r", 1, 3)])["r"].result(15)
        cluster.wait_topic("r", 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                             "linger.ms": 0, "batch.num.messages": 1})
        for i in range(40):
            producer.produce("r", b"x" * 1000, key=b"%d" % i, partition=0)
            producer.flush(10)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "w"})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition("r", 0), timeout=10)
            assert high == 40
            deadline = time.monotonic() + 20
            while low == 0 and time.monotonic() < deadline:
                time.sleep(0.3)
                low, high = consumer.get_watermark_offsets(TopicPartition("r", 0), timeout=10)
            assert 0 < low <= high == 40, (low, high)
        finally:
            consumer.close()
        # Every broker applied it to its own replica, not only the leader:
        # each replica's oldest segment no longer starts at offset 0.
        def oldest() -> dict[int, int]:
            return {n.node_id: min(int(p.stem) for p in (
                        tmp_path / f"node-{n.node_id}" / "data" / "r-0").glob("*.log"))  # type: ignore[operator]
                    for n in layout.nodes}
        deadline = time.monotonic() + 20
        while min(oldest().values()) == 0 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert min(oldest().values()) > 0, oldest()
    finally:
        cluster.stop(timeout_s=10)
