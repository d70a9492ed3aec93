"""Idempotent producers (KIP-98) against the 3-broker in-process cluster:
InitProducerId from controller blocks, dedupe of resends (also after a
leader change and after a restart from producer-state snapshots), and real
clients with idempotence on (librdkafka, kafka-python's default)."""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kio.schema.init_producer_id.v4 import request as ip4
from kio.schema.produce.v9 import request as p9

from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.net.client import KafkaProtocolClient
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder

pytestmark = pytest.mark.timeout(180)
logging.getLogger("kafka").setLevel(logging.CRITICAL)


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2"})
    with ClusterThread(c) as ct:
        yield ct


def _create(ct: ClusterThread, name: str, partitions: int = 3,
            configs: dict[str, str] | None = None) -> None:
    ct.call(ct.cluster.controller.create_topic, name, partitions, 3,
            {"min.insync.replicas": "2", **(configs or {})})
    ct.run(ct.cluster.wait_until(lambda: sum(
        1 for b in ct.cluster.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == name and h.partition.is_leader) == partitions))


def _port(ct: ClusterThread, broker_id: int) -> int:
    return ct.cluster.brokers[broker_id].server.port


async def _call(port: int, request: Any) -> Any:
    client = KafkaProtocolClient("127.0.0.1", port, request_timeout_ms=10_000)
    try:
        return await client.send(request)
    finally:
        await client.close()


def _init_producer_id(ct: ClusterThread, broker_id: int) -> tuple[int, int]:
    response = ct.run(_call(_port(ct, broker_id), ip4.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),  # type: ignore[arg-type]
    )))
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


def _produce_request(topic: str, partition: int, records: bytes) -> p9.ProduceRequest:
    return p9.ProduceRequest(
        transactional_id=None, acks=-1,  # type: ignore[arg-type]
        timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
        topic_data=(p9.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
            p9.PartitionProduceData(index=partition, records=records),),),),  # type: ignore[arg-type]
    )


def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for v in values:
        builder.append(v, timestamp_ms=int(time.time() * 1000))
    return builder.build()


def _produce(ct: ClusterThread, broker_id: int, request: p9.ProduceRequest) -> tuple[int, int]:
    response = ct.run(_call(_port(ct, broker_id), request))
    part = response.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def _isr(c: InProcessCluster, topic: str, partition: int) -> tuple[int, ...]:
    reg = c.controller.image.topic_by_name(topic)
    assert reg is not None
    return reg.partitions[partition].isr


def _hw(ct: ClusterThread, topic: str, partition: int) -> int:
    c = ct.cluster
    leader = c.leader_of(topic, partition)
    return c.brokers[leader].replicas.partitions[(topic, partition)].partition.high_watermark


def test_init_producer_id_hands_out_unique_ids_and_refills_blocks(cluster: ClusterThread) -> None:
    """Ids come from controller blocks; a broker fetches the next block before
    the current one runs out, and no id is handed out twice across brokers."""
    cluster.cluster.controller.producer_id_block_size = 10
    ids = [_init_producer_id(cluster, b)[0] for _ in range(25) for b in (1, 2, 3)]
    assert len(set(ids)) == len(ids) == 75
    assert all(0 <= i < 1000 for i in ids)
    # 75 ids over 3 brokers need at least 8 blocks of 10; prefetching may add one per broker.
    assert 8 <= cluster.cluster.controller.allocate_producer_ids_calls <= 11


def test_forced_resend_is_a_duplicate_with_the_original_offsets(cluster: ClusterThread) -> None:
    """KIP-98: replaying the same ProduceRequest bytes appends nothing and is
    answered NONE with the original base offset — also by a new leader after
    a leader change, and by a leader restarted from its producer snapshots."""
    _create(cluster, "dup", partitions=1, configs={"segment.bytes": "2048"})
    c = cluster.cluster
    pid, epoch = _init_producer_id(cluster, 1)
    seq = 0
    first_offsets = []
    requests = []
    for i in range(40):  # ~40 batches over several 2 KiB segments: snapshots at rolls
        values = [b"v-%d-%d-" % (i, j) + b"x" * 40 for j in range(5)]
        request = _produce_request("dup", 0, _batch(pid, epoch, seq, values))
        seq += 5
        error, base = _produce(cluster, c.leader_of("dup", 0), request)
        assert error == ErrorCode.none
        first_offsets.append(base)
        requests.append(request)
    assert first_offsets == [5 * i for i in range(40)]
    hw = _hw(cluster, "dup", 0)
    assert hw == 200

    # A resend of the latest batch to the same leader.
    assert _produce(cluster, c.leader_of("dup", 0), requests[-1]) == (ErrorCode.none, 195)
    # Leadership moves: the new leader rebuilt its state as a follower.
    old = c.leader_of("dup", 0)
    reg = c.controller.image.topic_by_name("dup")
    assert reg is not None
    target = next(r for r in reg.partitions[0].isr if r != old)
    cluster.call(c.controller.elect_leader, "dup", 0, target)
    cluster.run(c.wait_until(lambda: c.brokers[target].replicas.is_leader(("dup", 0))))
    for back in (1, 3, 5):  # every one of the 5 retained batches is a duplicate
        assert _produce(cluster, target, requests[-back]) == (ErrorCode.none, 200 - 5 * back)
    # An older batch (not among the last 5) is out of order, never re-appended.
    error, _ = _produce(cluster, target, requests[-7])
    assert error == ErrorCode.out_of_order_sequence_number
    assert _hw(cluster, "dup", 0) == 200
    directory = c.brokers[target].replicas.partitions[("dup", 0)].directory
    assert any(n.endswith(".snapshot") for n in os.listdir(directory))

    # Restart the leader: it reopens from snapshot + log tail and still dedupes.
    cluster.run(c.kill_broker(target))
    cluster.run(c.wait_until(lambda: c.leader_of("dup", 0) != target))
    cluster.run(c.start_broker(target))
    cluster.run(c.wait_until(lambda: target in _isr(c, "dup", 0)))
    restarted = c.brokers[target].replicas.partitions[("dup", 0)].partition
    live_leader = c.brokers[c.leader_of("dup", 0)].replicas.partitions[("dup", 0)].partition
    assert restarted.txn.producers.state_key() == live_leader.txn.producers.state_key()
    cluster.call(c.controller.elect_leader, "dup", 0, target)
    cluster.run(c.wait_until(lambda: c.brokers[target].replicas.is_leader(("dup", 0))))
    assert _produce(cluster, target, requests[-2]) == (ErrorCode.none, 190)
    # And the next sequence is accepted at the next offset.
    nxt = _produce_request("dup", 0, _batch(pid, epoch, seq, [b"after"]))
    assert _produce(cluster, target, nxt) == (ErrorCode.none, 200)


def _read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    total = 0
    deadline = time.monotonic() + 60
    idle_until = None
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            if total >= expected:
                idle_until = idle_until or time.monotonic() + 1.0  # catch any extra
                if time.monotonic() > idle_until:
                    break
            continue
        got[msg.partition()].append(msg.value())
        total += 1
    consumer.close()
    return got


def test_confluent_idempotent_producer_across_leader_changes(cluster: ClusterThread) -> None:
    """librdkafka with enable.idempotence=true produces while partition
    leaders move: reading back shows every record exactly once, in order."""
    _create(cluster, "idem", partitions=3)
    c = cluster.cluster
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 2, "batch.num.messages": 50,
                         "message.timeout.ms": 60000})
    errors: list[KafkaError] = []
    n = 9000

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)

    moves = 0
    for i in range(n):
        producer.produce("idem", value=b"%d" % i, partition=i % 3, on_delivery=on_delivery)
        producer.poll(0)
        if i % 1500 == 700:
            for p in range(3):
                leader = c.leader_of("idem", p)
                reg = c.controller.image.topic_by_name("idem")
                assert reg is not None
                target = next(r for r in reg.partitions[p].isr if r != leader)
                cluster.call(c.controller.elect_leader, "idem", p, target)
                moves += 1
            time.sleep(0.02)
    assert producer.flush(90) == 0
    assert errors == []
    assert moves == 18
    got = _read_all(c.bootstrap_servers, "idem", 3, n)
    for p in range(3):
        assert got[p] == [b"%d" % i for i in range(p, n, 3)], f"partition {p}"
    assert sum(len(v) for v in got.values()) == n


def test_kafka_python_default_producer_is_idempotent_and_works(cluster: ClusterThread) -> None:
    """kafka-python's default producer (idempotence on, acks=all) works
    unchanged; its batches carry producer ids that the leaders track."""
    _create(cluster, "kpi", partitions=3)
    c = cluster.cluster
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    futures = [producer.send("kpi", value=b"%d" % i, partition=i % 3) for i in range(1500)]
    offsets = {}
    for i, f in enumerate(futures):
        meta = f.get(30)
        offsets[i] = (meta.partition, meta.offset)
    producer.close()
    assert sorted(offsets.values()) == sorted((p, o) for p in range(3) for o in range(500))
    tracked = set()
    for p in range(3):
        part = c.brokers[c.leader_of("kpi", p)].replicas.partitions[("kpi", p)].partition
        tracked |= part.txn.producers.producer_ids
    assert len(tracked) == 1  # one idempotent producer id, used on every partition
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    consumer.assign([KTP("kpi", p) for p in range(3)])
    consumer.seek_to_beginning()
    got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for msg in consumer:
        got[msg.partition].append(msg.value)
    consumer.close()
    for p in range(3):
        assert got[p] == [b"%d" % i for i in range(p, 1500, 3)]
