"""Transactions (KIP-98) against the 3-broker in-process cluster with
confluent-kafka's transactional producer: the coordinator on
``__transaction_state``, markers written by WriteTxnMarkers, read_committed
fetches bounded by the LSO with aborted transactions filtered by the client,
TxnOffsetCommit completed by the marker, zombie fencing by epoch, and the
coordinator's transaction timeout."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP

from data_plane.api.common import BrokerApiContext
from data_plane.broker.txn_runtime import TxnCoordinatorRuntime
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from data_plane.txn.txn_log import TRANSACTION_STATE_TOPIC, partition_for
from data_plane.txn.txn_metadata import TxnState
from raftlog.net import KafkaProtocolServer

pytestmark = pytest.mark.timeout(240)
logging.getLogger("kafka").setLevel(logging.CRITICAL)

# Fewer internal partitions keep the in-process cluster quick; both topics
# use the same count, as Kafka's defaults do (50 each).
INTERNAL_PARTITIONS = "5"


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {
        "min.insync.replicas": "2",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
        "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    })
    with ClusterThread(c) as ct:
        yield ct


def _create(ct: ClusterThread, name: str, partitions: int) -> None:
    ct.call(ct.cluster.controller.create_topic, name, partitions, 3, {"min.insync.replicas": "2"})
    ct.run(ct.cluster.wait_until(lambda: sum(
        1 for b in ct.cluster.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == name and h.partition.is_leader) == partitions))


def _runtime_of(server: KafkaProtocolServer) -> TxnCoordinatorRuntime:
    """The broker's transaction runtime, through its FindCoordinator handler's context."""
    handler = server._handlers[10]
    assert isinstance(handler, functools.partial)
    api = handler.args[0]
    assert isinstance(api, BrokerApiContext)
    return api.coordinators.transactions


def _txn_producer(bootstrap: str, tid: str, timeout_ms: int = 60_000) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": timeout_ms, "linger.ms": 5})


def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str,
              expect: int | None = None, idle_s: float = 3.0) -> list[bytes]:
    """Every value of ``topic`` an ``isolation`` consumer sees (assign from 0)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "auto.offset.reset": "earliest"})
    consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    last = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and time.monotonic() - last < idle_s:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        out.append(msg.value())
        last = time.monotonic()
        if expect is not None and len(out) >= expect:
            break
    consumer.close()
    return out


def test_committed_is_visible_to_read_committed_and_aborted_never(cluster: ClusterThread) -> None:
    """KIP-98: read_committed shows committed transactions only; read_uncommitted shows all."""
    _create(cluster, "tx", 3)
    bootstrap = cluster.cluster.bootstrap_servers
    producer = _txn_producer(bootstrap, "tx-producer")
    producer.init_transactions(60)
    expected_committed: list[bytes] = []
    aborted: list[bytes] = []
    for round_ in range(6):
        producer.begin_transaction()
        values = [b"r%d-%d" % (round_, i) for i in range(50)]
        for i, v in enumerate(values):
            producer.produce("tx", value=v, partition=i % 3)
        producer.flush(30)
        if round_ % 2 == 0:
            producer.commit_transaction(30)
            expected_committed += values
        else:
            producer.abort_transaction(30)
            aborted += values
    # A last committed transaction after the aborts, so the LSO is past them all.
    producer.begin_transaction()
    producer.produce("tx", value=b"last", partition=0)
    producer.commit_transaction(30)
    expected_committed.append(b"last")

    committed_view = _read_all(bootstrap, "tx", 3, "read_committed", len(expected_committed))
    uncommitted_view = _read_all(bootstrap, "tx", 3, "read_uncommitted",
                                 len(expected_committed) + len(aborted))
    print(f"committed {len(expected_committed)}, aborted {len(aborted)}; read_committed saw "
          f"{len(committed_view)}, read_uncommitted saw {len(uncommitted_view)}")
    assert sorted(committed_view) == sorted(expected_committed)
    assert not set(committed_view) & set(aborted)
    assert sorted(uncommitted_view) == sorted(expected_committed + aborted)


def test_open_transaction_holds_the_lso_until_it_commits(cluster: ClusterThread) -> None:
    """KIP-98: records of an open transaction stay invisible to read_committed
    (the LSO stops at its first offset); the commit releases them."""
    _create(cluster, "lso", 1)
    bootstrap = cluster.cluster.bootstrap_servers
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("lso", value=b"before", partition=0)
    plain.flush(30)
    producer = _txn_producer(bootstrap, "lso-producer")
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("lso", value=b"in-txn", partition=0)
    producer.flush(30)
    plain.produce("lso", value=b"after", partition=0)
    plain.flush(30)
    assert _read_all(bootstrap, "lso", 1, "read_committed", idle_s=2.0) == [b"before"]
    assert _read_all(bootstrap, "lso", 1, "read_uncommitted", 3) == [
        b"before", b"in-txn", b"after"]
    producer.commit_transaction(30)
    assert _read_all(bootstrap, "lso", 1, "read_committed", 3) == [
        b"before", b"in-txn", b"after"]


def _process_batch(consumer: Consumer, producer: Producer, want: int) -> tuple[list[str], bool]:
    """One read-process-write transaction: up to ``want`` inputs become
    outputs, and the consumer's offsets commit in the same transaction."""
    producer.begin_transaction()
    got: list[str] = []
    deadline = time.monotonic() + 20
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        value = msg.value().decode()
        got.append(value)
        producer.produce("out", value=f"out-{value}".encode(), partition=msg.partition())
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    return got, True


def test_read_process_write_is_exactly_once_across_a_zombie(cluster: ClusterThread) -> None:
    """KIP-98: a second producer with the same transactional.id fences the
    first (epoch bump); the zombie's commit fails, its outputs and offsets are
    aborted, and the new instance reprocesses from the committed offsets, so
    every input appears exactly once in the output."""
    _create(cluster, "in", 2)
    _create(cluster, "out", 2)
    bootstrap = cluster.cluster.bootstrap_servers
    seed = Producer({"bootstrap.servers": bootstrap})
    total = 200
    for i in range(total):
        seed.produce("in", value=b"%d" % i, partition=i % 2)
    assert seed.flush(30) == 0

    def consumer() -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest"})
        c.assign([CTP("in", 0), CTP("in", 1)])
        return c

    c1 = consumer()
    zombie = _txn_producer(bootstrap, "eos-app")
    zombie.init_transactions(60)
    first, _ = _process_batch(c1, zombie, 60)  # committed normally
    # The zombie starts another transaction and writes, then stalls.
    zombie.begin_transaction()
    stalled: list[str] = []
    while len(stalled) < 40:
        msg = c1.poll(0.2)
        if msg is None or msg.error():
            continue
        stalled.append(msg.value().decode())
        zombie.produce("out", value=f"out-{stalled[-1]}".encode(), partition=msg.partition())
    zombie.flush(30)

    successor = _txn_producer(bootstrap, "eos-app")
    successor.init_transactions(60)  # bumps the epoch, aborting the zombie's transaction
    with pytest.raises(KafkaException) as fenced:
        zombie.send_offsets_to_transaction(c1.position(c1.assignment()),
                                           c1.consumer_group_metadata(), 30)
        zombie.commit_transaction(30)
    error = fenced.value.args[0]
    print(f"zombie fenced: {error.name()} fatal={error.fatal()}")
    assert error.fatal() or "fenced" in error.str().lower()
    c1.close()

    c2 = consumer()  # resumes from the committed offsets (after the first 60)
    processed = list(first)
    while len(processed) < total:
        got, _ = _process_batch(c2, successor, 50)
        assert got, "no progress"
        processed += got
    c2.close()
    out = sorted(v.decode() for v in _read_all(bootstrap, "out", 2, "read_committed", total))
    print(f"inputs {total}; zombie's stalled txn {len(stalled)} (aborted); "
          f"read_committed outputs {len(out)}")
    assert out == sorted(f"out-{i}" for i in range(total))


def test_transaction_left_open_past_its_timeout_is_aborted(cluster: ClusterThread) -> None:
    """KIP-98: transaction.timeout.ms: the coordinator aborts an abandoned
    transaction (bumping the epoch) and read_committed readers move past it."""
    _create(cluster, "tt", 1)
    bootstrap = cluster.cluster.bootstrap_servers
    producer = _txn_producer(bootstrap, "abandoned", timeout_ms=1500)
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("tt", value=b"lost-%d" % i, partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("tt", value=b"later", partition=0)
    plain.flush(30)

    tp = (TRANSACTION_STATE_TOPIC, partition_for("abandoned", int(INTERNAL_PARTITIONS)))

    def state() -> TxnState | None:
        for b in cluster.cluster.brokers.values():
            hosted = b.replicas.get(tp)
            if hosted is None or not hosted.partition.is_leader:
                continue
            c = _runtime_of(b.server).coordinator_for("abandoned")
            m = None if c is None else c.metadata("abandoned")
            return None if m is None else m.state
        return None

    deadline = time.monotonic() + 20
    while state() != TxnState.COMPLETE_ABORT and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state() == TxnState.COMPLETE_ABORT
    seen = _read_all(bootstrap, "tt", 1, "read_committed", 1)
    print(f"after the timeout abort read_committed sees {seen}")
    assert seen == [b"later"]
