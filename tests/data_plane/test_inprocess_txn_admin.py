"""Transaction admin (KIP-664) against the in-process cluster, from
kafka-python's admin client, as kafka-transactions.sh uses it:
DescribeProducers on the partition leaders, ListTransactions merged over
every broker, DescribeTransactions on the coordinator, and an admin abort of
an open transaction (WriteTxnMarkers with coordinator epoch -1) that
releases the last stable offset for read_committed consumers."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
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
from data_plane.txn.txn_metadata import TxnState

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


def _open_and_committed(cluster: ClusterThread, open_id: str, done_id: str) -> tuple[
        str, tuple[Producer, Producer]]:
    """Topic "tx" (2 partitions): ``open_id`` leaves a transaction of three
    records open on partition 0, ``done_id`` commits one on partition 1.
    Returns the bootstrap servers and both producers (kept alive)."""
    c = cluster.cluster
    cluster.call(c.controller.create_topic, "tx", 2, 3, {"min.insync.replicas": "2"})
    cluster.run(c.wait_until(lambda: sum(
        1 for b in c.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == "tx" and h.partition.is_leader) == 2))
    bootstrap = c.bootstrap_servers
    opened = Producer({"bootstrap.servers": bootstrap, "transactional.id": open_id})
    opened.init_transactions(30)
    opened.begin_transaction()
    for i in range(3):
        opened.produce("tx", b"open-%d" % i, partition=0)
    assert opened.flush(30) == 0
    done = Producer({"bootstrap.servers": bootstrap, "transactional.id": done_id})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("tx", b"done", partition=1)
    done.commit_transaction(30)
    return bootstrap, (opened, done)


def _states(listing: dict[Any, list[Any]]) -> dict[str, str]:
    return {t.transactional_id: t.state.value for ts in listing.values() for t in ts}


def test_describe_list_and_abort_an_open_transaction(cluster: ClusterThread) -> None:
    bootstrap, _producers = _open_and_committed(cluster, "open-1", "done-1")

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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "data_plane", "transactions", *args],
                          capture_output=True, text=True, timeout=60)


def _rows(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.strip().splitlines()[1:]]


def test_cli_lists_describes_finds_hanging_and_aborts(cluster: ClusterThread) -> None:
    """``raftlog transactions`` (kafka-transactions.sh). The hanging
    transaction is made by hand: the coordinator of ``open-2`` is told its
    transaction ended without the partition's marker, the state a late
    write after the coordinator aborted leaves (KIP-890's hanging case)."""
    c = cluster.cluster
    bootstrap, _producers = _open_and_committed(cluster, "open-2", "done-2")
    where = ("--bootstrap-server", bootstrap)

    listed = _cli("list", *where)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == \
        "TransactionalId\tCoordinator\tProducerId\tTransactionState"
    assert {(r[0], r[3]) for r in _rows(listed.stdout)} == {
        ("open-2", "Ongoing"), ("done-2", "CompleteCommit")}
    described = _cli("describe", "--transactional-id", "open-2", *where)
    assert described.returncode == 0, described.stderr
    [row] = _rows(described.stdout)
    assert (row[1], row[4], row[8]) == ("open-2", "Ongoing", "tx-0")
    producers = _cli("describe-producers", "--topic", "tx", "--partition", "0", *where)
    [row] = _rows(producers.stdout)
    assert (row[3], row[5]) == ("2", "0")  # last sequence, transaction start offset
    producer_id = row[0]
    # Open, but its coordinator knows it: not hanging.
    none = _cli("find-hanging", "--topic", "tx", "--max-transaction-timeout", "0", *where)
    assert none.returncode == 0, none.stderr
    assert _rows(none.stdout) == []

    coordinator = next(
        api.coordinators.transactions.coordinator_for("open-2")
        for api in (b.server._handlers[10].args[0] for b in c.brokers.values())  # type: ignore[attr-defined]
        if api.coordinators.transactions.coordinator_for("open-2") is not None)
    assert coordinator is not None
    m = coordinator.metadata("open-2")
    assert m is not None

    def forget() -> None:
        coordinator._txns["open-2"] = dataclasses.replace(
            m, state=TxnState.COMPLETE_ABORT, partitions=frozenset(), txn_start_ms=-1)
    cluster.call(forget)
    hanging = _cli("find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0", *where)
    assert hanging.returncode == 0, hanging.stderr
    [row] = _rows(hanging.stdout)
    assert (row[0], row[1], row[2], row[5]) == ("tx", "0", producer_id, "0")

    aborted = _cli("abort", "--topic", "tx", "--partition", "0", "--start-offset", "0", *where)
    assert aborted.returncode == 0, aborted.stderr
    assert aborted.stdout.startswith(f"Aborted the transaction of producer {producer_id}")
    after = _cli("describe-producers", "--topic", "tx", "--partition", "0", *where)
    assert _rows(after.stdout)[0][5] == "None"
    assert _rows(_cli("find-hanging", "--topic", "tx", "--max-transaction-timeout", "0",
                      *where).stdout) == []

    missing = _cli("describe", "--transactional-id", "never-used", *where)
    assert missing.returncode == 2
    assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    nothing = _cli("abort", "--topic", "tx", "--partition", "0", "--start-offset", "0", *where)
    assert nothing.returncode == 2
    assert "no transaction open at offset 0 of tx-0" in nothing.stderr
