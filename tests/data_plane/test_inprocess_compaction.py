"""A replica that starts empty copies its leader's compacted log (in-process
cluster): the empty batches compaction leaves and the producer batches it
keeps empty replicate like any batch, the new replica's producer state
equals the leader's, and, once it leads, consumers read each key's last
value from it."""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP

from data_plane.replication.partition import Partition
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.records import BatchHeader, decode_records, iter_batches
from raftlog.storage import Log

pytestmark = pytest.mark.timeout(120)
TOPIC = "compacted"


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {
        "min.insync.replicas": "2", "log.cleaner.backoff.ms": "50",
        "replica.lag.time.max.ms": "2000",
        # A key map of about three keys: passes stop part-way and go on.
        "log.cleaner.dedupe.buffer.size": "350"})
    with ClusterThread(c) as ct:
        yield ct


def _records(log: Log) -> dict[int, tuple[bytes | None, bytes | None]]:
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        for header, at in iter_batches(data):
            for record in decode_records(data, pos=at):
                out[record.offset] = (record.key, record.value)
            offset = header.next_offset
    return out


def test_an_empty_replica_copies_a_compacted_log_and_serves_it(cluster: ClusterThread) -> None:
    c = cluster.cluster
    cluster.call(c.controller.create_topic, TOPIC, 1, 3, {
        "cleanup.policy": "compact", "segment.bytes": "2048", "min.insync.replicas": "2"})
    cluster.run(c.wait_until(lambda: any(
        b.replicas.is_leader((TOPIC, 0)) for b in c.brokers.values())))
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})
    acked: dict[int, tuple[bytes, bytes]] = {}
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())  # type: ignore[attr-defined]

    for i in range(300):
        producer.produce(TOPIC, key=b"k%d" % (i % 10), value=b"v%d" % i, partition=0,
                         on_delivery=on_delivery)
        if i % 20 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0 and not errors and len(acked) == 300
    leader = c.leader_of(TOPIC, 0)
    leader_log = c.brokers[leader].replicas.partitions[(TOPIC, 0)].partition.log
    # The leader's cleaner compacts as segments roll (a pass at a time).
    cluster.run(c.wait_until(lambda: len(_records(leader_log)) < 150, timeout_s=30))
    assert c.brokers[leader].replicas.cleaner.map_full_passes > 0

    # A follower loses its disk and starts empty.
    follower, directory = _kill_a_follower(cluster, leader, wipe=True)
    copy = _restart_until_caught_up(cluster, follower, leader_log)
    assert os.path.isdir(directory)
    newest = {key: (offset, value) for offset, (key, value) in sorted(acked.items())}
    assert {k: (o, v) for o, (k, v) in sorted(_records(copy.log).items())} == newest
    # The producer's last batch survived compaction (as Kafka keeps it), so
    # the copy knows its epoch and last sequence; older batches' metadata,
    # which only the live leader still caches, is gone from the log.
    leader_state = c.brokers[leader].replicas.partitions[(TOPIC, 0)].partition.txn.producers
    (pid,) = leader_state.state_key()[1][0][:1]
    live, rebuilt = leader_state.entry(pid), copy.txn.producers.entry(pid)
    assert live is not None and rebuilt is not None
    assert (rebuilt.producer_epoch, rebuilt.batches[-1]) == (live.producer_epoch, live.batches[-1])

    # It leads, and a consumer reading from the start sees each key's last value.
    cluster.call(c.controller.elect_leader, TOPIC, 0, follower)
    cluster.run(c.wait_until(lambda: c.brokers[follower].replicas.is_leader((TOPIC, 0))))
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "read",
                         "enable.auto.commit": False})
    consumer.assign([CTP(TOPIC, 0, 0)])
    seen: dict[bytes, tuple[int, bytes]] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and max(
            (o for o, _ in seen.values()), default=-1) < max(acked):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen[msg.key()] = (msg.offset(), msg.value())
    consumer.close()
    assert seen == newest


@pytest.fixture
def txn_cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {
        "min.insync.replicas": "2", "log.cleaner.backoff.ms": "50",
        "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"})
    with ClusterThread(c) as ct:
        yield ct


def test_compaction_removes_aborted_transactions_and_keeps_committed_ones(
    txn_cluster: ClusterThread,
) -> None:
    """A transactional producer writes a compacted topic (Kafka Streams'
    exactly-once changelogs): every replica's cleaner removes the aborted
    records and compacts the committed ones by key; read_committed and
    read_uncommitted consumers both see each key's last committed value and
    no aborted one; ``delete.retention.ms`` after a transaction has nothing
    left, its marker goes too; a replica that copies the compacted log from
    scratch rebuilds a producer state with no open transaction, so its last
    stable offset is its high watermark."""
    cluster = txn_cluster
    c = cluster.cluster
    cluster.call(c.controller.create_topic, TOPIC, 1, 3, {
        "cleanup.policy": "compact", "min.insync.replicas": "2",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "300"})
    cluster.run(c.wait_until(lambda: any(
        b.replicas.is_leader((TOPIC, 0)) for b in c.brokers.values())))
    producer = Producer({"bootstrap.servers": c.bootstrap_servers,
                         "transactional.id": "changelog-writer", "linger.ms": 5})
    producer.init_transactions(60)
    committed: dict[bytes, bytes] = {}
    aborted: set[bytes] = set()
    for n in range(40):
        producer.begin_transaction()
        writes = {b"k%d" % i: b"t%d-k%d" % (n, i) for i in range(4)}
        for key, value in writes.items():
            producer.produce(TOPIC, key=key, value=value, partition=0)
        producer.flush(30)  # on the leader's log before the marker, aborted or not
        if n % 3 == 2:
            producer.abort_transaction(30)
            aborted |= set(writes.values())
        else:
            producer.commit_transaction(30)
            committed.update(writes)
    leader = c.leader_of(TOPIC, 0)
    logs = {b: c.brokers[b].replicas.partitions[(TOPIC, 0)].partition.log for b in c.brokers}
    # Every replica has the last transaction's marker (see below) before the roll.
    cluster.run(c.wait_until(functools.partial(_marker_last_everywhere, logs, leader)))

    def values(log: Log) -> list[bytes | None]:
        """The data records' values (markers left out)."""
        return [v for k, v in _records(log).values() if k is not None and k.startswith(b"k")]

    # Everything is still in the active segment, which is never cleaned:
    # every replica has every aborted record. Rolled, it can be cleaned.
    assert all(len(aborted & set(values(log))) == len(aborted) for log in logs.values())
    for log in logs.values():
        cluster.call(log.roll)
    cluster.run(c.wait_until(lambda: all(
        sorted(values(log)) == sorted(committed.values()) for log in logs.values()),
        timeout_s=30))
    for isolation in ("read_committed", "read_uncommitted"):
        assert _read_from_start(c.bootstrap_servers, isolation, aborted) == committed, isolation

    # Past delete.retention.ms, a pass drops the markers of the transactions
    # with nothing left. Two more transactions, each followed by a pass: of
    # the 42 markers, the newest transaction's stays, and the one before it
    # (superseded by the last pass) waits with its horizon set.
    time.sleep(1.0)
    for n in (40, 41):
        producer.begin_transaction()
        for i in range(4):
            committed[b"k%d" % i] = b"t%d-k%d" % (n, i)
            producer.produce(TOPIC, key=b"k%d" % i, value=committed[b"k%d" % i], partition=0)
        producer.commit_transaction(30)
        # The coordinator writes the COMMIT marker after EndTxn has returned:
        # roll only once every replica has it. Rolled before it, the marker
        # lands in the new active segment, the pass cannot see the outcome,
        # and no later pass comes (this test failed that way on a loaded
        # machine).
        cluster.run(c.wait_until(functools.partial(_marker_last_everywhere, logs, leader)))
        for log in logs.values():
            cluster.call(log.roll)
        time.sleep(1.0)

    def markers(log: Log) -> int:
        return sum(1 for header in _batch_headers(log) if header.is_control)

    # Every ABORT marker stays (13), and the newest two COMMIT markers.
    cluster.run(c.wait_until(lambda: all(
        markers(log) == 13 + 2 and sorted(values(log)) == sorted(committed.values())
        for log in logs.values()), timeout_s=30))

    # The producer's committed records after its aborted transactions are
    # still visible to read_committed consumers (which skip a producer's
    # batches listed as aborted until its ABORT marker).
    for isolation in ("read_committed", "read_uncommitted"):
        assert _read_from_start(c.bootstrap_servers, isolation, aborted) == committed, isolation

    # A follower loses its disk and copies the compacted log.
    follower, _ = _kill_a_follower(cluster, leader, wipe=True)
    copy = _restart_until_caught_up(cluster, follower, logs[leader])
    assert copy.last_stable_offset == copy.high_watermark
    assert not aborted & set(values(copy.log))
    assert sorted(values(copy.log)) == sorted(committed.values())
    print(f"log end {logs[leader].log_end_offset}: {len(committed)} of {42 * 4} records left "
          f"({len(aborted)} aborted); the copy's LSO {copy.last_stable_offset}")


def _all_at(logs: dict[int, Log], end: int) -> bool:
    return all(log.log_end_offset == end for log in logs.values())


def _batch_headers(log: Log) -> list[BatchHeader]:
    """Every batch header of the log, segment after segment (a read stops at
    a segment boundary)."""
    headers: list[BatchHeader] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        for header, _ in iter_batches(log.read(offset, 1 << 20).records):
            headers.append(header)
            offset = header.next_offset
    return headers


def _marker_last_everywhere(logs: dict[int, Log], leader: int) -> bool:
    """The leader's last batch is a transaction marker and every replica has it."""
    end = logs[leader].log_end_offset
    headers = _batch_headers(logs[leader])
    return bool(headers) and headers[-1].is_control and _all_at(logs, end)


def test_a_replica_that_was_down_catches_up_over_what_the_leader_compacted(
    cluster: ClusterThread,
) -> None:
    """A follower is down while its leader compacts past the follower's log
    end: emptied batches around that offset are merged into one empty
    batch that begins below it. Restarted, the follower appends that batch
    from its own end on, catches up and rejoins the ISR (it used to refuse
    the batch and stay behind for good; the compact chaos workload found it)."""
    c = cluster.cluster
    cluster.call(c.controller.create_topic, TOPIC, 1, 3, {
        "cleanup.policy": "compact", "min.insync.replicas": "2",
        "min.cleanable.dirty.ratio": "0.01"})
    cluster.run(c.wait_until(lambda: any(
        b.replicas.is_leader((TOPIC, 0)) for b in c.brokers.values())))
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})

    def produce(values: range) -> None:
        for i in values:
            producer.produce(TOPIC, key=b"k%d" % (i % 2), value=b"v%d" % i, partition=0)
            producer.flush(30)  # one record per batch

    produce(range(60))
    leader = c.leader_of(TOPIC, 0)
    follower = next(b for b in c.brokers if b != leader)
    leader_log = c.brokers[leader].replicas.partitions[(TOPIC, 0)].partition.log
    cluster.run(c.wait_until(lambda: c.brokers[follower].replicas.partitions[
        (TOPIC, 0)].partition.log_end_offset == leader_log.log_end_offset))
    stopped_at = leader_log.log_end_offset
    _kill_a_follower(cluster, leader, wipe=False, follower=follower)
    produce(range(60, 120))
    # One segment rolled once (no segment.bytes rolls, which could put a
    # segment boundary at stopped_at): the pass empties and merges it whole.
    cluster.call(leader_log.roll)

    def straddled() -> bool:
        data = leader_log.read(leader_log.log_start_offset, 1 << 24).records
        return any(h.records_count == 0 and h.base_offset < stopped_at <= h.last_offset
                   for h, _ in iter_batches(data))

    cluster.run(c.wait_until(straddled, timeout_s=30))
    copy = _restart_until_caught_up(cluster, follower, leader_log).log

    def newest(log: Log) -> dict[bytes | None, tuple[int, bytes | None]]:
        return {k: (o, v) for o, (k, v) in sorted(_records(log).items())}

    assert newest(copy) == newest(leader_log) == {
        b"k0": (leader_log.log_end_offset - 2, b"v118"),
        b"k1": (leader_log.log_end_offset - 1, b"v119")}


def _read_from_start(bootstrap: str, isolation: str, aborted: set[bytes]) -> dict[bytes, bytes]:
    """Each key's last value an ``isolation`` consumer reads from offset 0
    (none of them aborted)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    consumer.assign([CTP(TOPIC, 0, 0)])
    seen: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            assert msg.value() not in aborted, isolation
            seen[msg.key()] = msg.value()
    finally:
        consumer.close()
    return seen


def _kill_a_follower(
    cluster: ClusterThread, leader: int, *, wipe: bool, follower: int | None = None
) -> tuple[int, str]:
    """Stop a follower of the topic's partition (``follower``, or any),
    removing its replica's directory if ``wipe``; its id and that directory."""
    c = cluster.cluster
    if follower is None:
        follower = next(b for b in c.brokers if b != leader)
    directory = c.brokers[follower].replicas.partitions[(TOPIC, 0)].directory
    cluster.run(c.kill_broker(follower))
    if wipe:
        shutil.rmtree(directory)
    return follower, directory


def _restart_until_caught_up(
    cluster: ClusterThread, follower: int, leader_log: Log
) -> Partition:
    """Start ``follower`` again and wait until its replica has the leader's
    log end offset as log end and high watermark and is in the ISR; its
    `Partition`."""
    c = cluster.cluster
    cluster.run(c.start_broker(follower))

    def caught_up() -> bool:
        hosted = c.brokers[follower].replicas.partitions.get((TOPIC, 0))
        end = leader_log.log_end_offset
        return (hosted is not None and hosted.partition.log_end_offset == end
                and hosted.partition.high_watermark == end
                and follower in c.controller.image.topic_by_name(TOPIC).partitions[0].isr)

    cluster.run(c.wait_until(caught_up, timeout_s=30))
    return c.brokers[follower].replicas.partitions[(TOPIC, 0)].partition
