"""Internal topics get their configured replication factor, never fewer.

Bug found by the chaos suite (netns txn soak, seed 42): `__transaction_state`
was created at first use with min(3, unfenced brokers) replicas, so a node
down at that moment left it at RF 2 (or 1) for good; with
min.insync.replicas=2 a factor of 1 answered COORDINATOR_NOT_AVAILABLE for
the whole run. As Kafka, the broker now waits until
``transaction.state.log.replication.factor`` (default 3) brokers are up.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts


@pytest.mark.slow
def test_transaction_state_waits_for_three_brokers_then_has_rf_3(tmp_path: object) -> None:
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(),
                                 properties={"min.insync.replicas": "2"})
    cluster = LocalCluster(str(tmp_path), layout)
    cluster.up(40)
    try:
        cluster.kill(3)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + 20
        while len(admin.list_topics(timeout=10).brokers) != 2:  # broker 3 fenced
            assert time.monotonic() < deadline, "broker 3 never fenced"
            time.sleep(0.3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                             "transactional.id": "rf-check", "log_level": 0})
        outcome: list[BaseException | None] = []

        def init() -> None:
            try:
                producer.init_transactions(60)
                outcome.append(None)
            except KafkaException as e:
                outcome.append(e)

        thread = threading.Thread(target=init)
        thread.start()
        time.sleep(3)
        # Two brokers up: the topic is not created (it would stay at RF 2).
        assert "__transaction_state" not in admin.list_topics(timeout=10).topics
        assert outcome == []  # still retrying COORDINATOR_NOT_AVAILABLE
        cluster.start(3)
        thread.join(70)
        assert outcome == [None]
        topic = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
        assert {len(p.replicas) for p in topic.partitions.values()} == {3}
    finally:
        cluster.stop(timeout_s=10)
