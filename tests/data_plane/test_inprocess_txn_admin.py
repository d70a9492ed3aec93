"""Transaction admin (KIP-664) against the in-process cluster, from
kafka-python's admin client, as kafka-transactions.sh uses it:
DescribeProducers on the partition leaders, ListTransactions merged over
every broker, DescribeTransactions on the coordinator, and an admin abort of
an open transaction (WriteTxnMarkers with coordinator epoch -1) that
releases the last stable offset for read_committed consumers."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from kafka.admin import KafkaAdminClient
from kafka.admin._transactions import AbortTransactionSpec
from kafka.errors import TransactionalIdNotFoundError
from kafka.structs import TopicPartition as KTP

from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster

pytestmark = pytest.mark.timeout(180)
logging.getLogger("kafka").setLevel(logging.CRITICAL)


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {
        "min.insync.replicas": "2",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
    })
    with ClusterThread(c) as ct:
        yield ct


def _states(listing: dict[Any, list[Any]]) -> dict[str, str]:
    return {t.transactional_id: t.state.value for ts in listing.values() for t in ts}


def test_describe_list_and_abort_an_open_transaction(cluster: ClusterThread) -> None:
    c = cluster.cluster
    cluster.call(c.controller.create_topic, "tx", 2, 3, {"min.insync.replicas": "2"})
    cluster.run(c.wait_until(lambda: sum(
        1 for b in c.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == "tx" and h.partition.is_leader) == 2))
    bootstrap = c.bootstrap_servers
    stuck = Producer({"bootstrap.servers": bootstrap, "transactional.id": "open-1"})
    stuck.init_transactions(30)
    stuck.begin_transaction()
    for i in range(3):
        stuck.produce("tx", b"open-%d" % i, partition=0)
    assert stuck.flush(30) == 0
    done = Producer({"bootstrap.servers": bootstrap, "transactional.id": "done-1"})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("tx", b"done", partition=1)
    done.commit_transaction(30)

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        producers = admin.describe_producers([KTP("tx", 0), KTP("tx", 1)])
        [open_state] = producers[KTP("tx", 0)].active_producers
        assert open_state.current_transaction_start_offset == 0
        assert open_state.last_sequence == 2
        [done_state] = producers[KTP("tx", 1)].active_producers
        assert done_state.current_transaction_start_offset == -1
        assert done_state.coordinator_epoch >= 0  # its COMMIT marker set it

        assert _states(admin.list_transactions()) == {
            "open-1": "Ongoing", "done-1": "CompleteCommit"}
        assert _states(admin.list_transactions(state_filters=["Ongoing"])) == {
            "open-1": "Ongoing"}
        assert _states(admin.list_transactions(
            producer_id_filters=[done_state.producer_id])) == {"done-1": "CompleteCommit"}
        time.sleep(0.05)
        assert _states(admin.list_transactions(duration_filter_ms=0)) == {"open-1": "Ongoing"}
        assert _states(admin.list_transactions(duration_filter_ms=600_000)) == {}

        described = admin.describe_transactions(["open-1", "done-1"])
        assert described["open-1"].state.value == "Ongoing"
        assert described["open-1"].topic_partitions == {KTP("tx", 0)}
        assert described["open-1"].producer_id == open_state.producer_id
        assert described["open-1"].transaction_start_time_ms > 0
        assert described["done-1"].state.value == "CompleteCommit"
        assert described["done-1"].transaction_start_time_ms == -1
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["never-used"])

        # A read_committed consumer is held at the open transaction's start.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc",
                             "isolation.level": "read_committed",
                             "enable.auto.commit": False})
        consumer.assign([CTP("tx", 0, 0)])
        assert consumer.poll(1.0) is None
        assert consumer.position([CTP("tx", 0)])[0].offset in (0, -1001)

        # The operator aborts it (kafka-transactions.sh abort).
        admin.abort_transaction(AbortTransactionSpec(
            topic_partition=KTP("tx", 0), producer_id=open_state.producer_id,
            producer_epoch=open_state.producer_epoch, coordinator_epoch=-1))
        [after] = admin.describe_producers([KTP("tx", 0)])[KTP("tx", 0)].active_producers
        assert after.current_transaction_start_offset == -1
        # The LSO moved past the ABORT marker; the aborted records stay invisible.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            assert msg is None or msg.error() is not None, msg.value() if msg else None
            if consumer.position([CTP("tx", 0)])[0].offset == 4:
                break
        assert consumer.position([CTP("tx", 0)])[0].offset == 4
        consumer.close()
    finally:
        admin.close()
