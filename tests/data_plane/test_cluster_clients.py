"""Real clients against a real 3-node combined cluster on loopback (issue 5 §3).

One cluster of `raftlog server start` processes (`data_plane.local_cluster`,
RF 3, ``min.insync.replicas=2``, fencing in 3 s) serves the module:

- kafka-python 3.x, aiokafka 0.14 and confluent-kafka 2.x each produce with
  acks=all, plain and zstd, then consume from the beginning and from a
  stored offset (assign + seek): every acknowledged record is at its offset,
  per-partition order is kept. kafka-python and aiokafka produce as
  idempotent producers (InitProducerId, sequence numbers).
- kcat lists the metadata (``-L``), produces and consumes (skipped, saying
  why, when kcat is not installed).
- failover under load: confluent-kafka produces with acks=all while the
  leader of the partition is SIGKILLed; leadership moves within the ISR,
  the client retries, every acknowledged record is read back at its offset;
  the write-unavailability window is printed. With that broker down, a
  partition whose only other replica is in-sync refuses acks=all
  (NOT_ENOUGH_REPLICAS) and appends nothing.
- the CLI round trip: ``raftlog produce`` then ``raftlog consume``.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "data_plane"]
KEYS = [f"key-{i}".encode() for i in range(6)]
PER_CODEC = 60
# A record as acknowledged or read: (partition, offset, value).
Acked = tuple[int, int, bytes]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(
        base_port=None,
        timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2", "auto.create.topics.enable": "false",
                    "group.initial.rebalance.delay.ms": "0"},
    )
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), layout)
    started = time.monotonic()
    c.up(timeout_s=40)
    print(f"\ncluster ready in {time.monotonic() - started:.1f} s: {c.bootstrap_servers}")
    try:
        yield c
    finally:
        stopping = time.monotonic()
        ended = c.stop(timeout_s=10)
        print(f"\ncluster stopped in {time.monotonic() - stopping:.1f} s: {ended}")


def cli(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True,
                            timeout=40)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}): {result.stderr}")
    return result


def create_topic(cluster: LocalCluster, name: str, partitions: int = 3, rf: int = 3) -> None:
    cli("topics", "create", "--topic", name, "--partitions", str(partitions),
        "--replication-factor", str(rf), "--bootstrap-server", cluster.bootstrap_servers)
    cluster.wait_topic(name, partitions)


def partition_state(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), as a broker's Metadata says."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in meta.partitions.items()}
    finally:
        consumer.close()


def records(client: str, codec: str) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs; the value's number gives the produce order."""
    return [(KEYS[i % len(KEYS)], f"{client}-{codec}-{i:05d}".encode()) for i in range(PER_CODEC)]


def check_read_back(acked: list[Acked], read: list[Acked], label: str) -> None:
    """Every acknowledged record at its offset; per partition, offsets and
    produce order increase."""
    at = {(p, o): v for p, o, v in read}
    missing = [(p, o, v) for p, o, v in acked if at.get((p, o)) != v]
    assert not missing, f"{label}: {len(missing)} acknowledged records not at their offset: {missing[:3]}"
    for partition in {p for p, _, _ in read}:
        mine = [(o, v) for p, o, v in read if p == partition]
        offsets = [o for o, _ in mine]
        assert offsets == sorted(set(offsets)), f"{label}: partition {partition} out of order"
        for codec in ("none", "zstd"):
            seq = [int(v.rsplit(b"-", 1)[1]) for _, v in mine if f"-{codec}-".encode() in v]
            assert seq == sorted(seq), f"{label}: partition {partition} {codec} reordered"


def stored_offset(acked: list[Acked]) -> Acked:
    """A record in the middle of a partition to seek to."""
    by_partition = sorted(acked, key=lambda r: (r[0], r[1]))
    return by_partition[len(by_partition) // 2]


# --- kafka-python --------------------------------------------------------------------


def test_kafka_python_produces_acks_all_plain_and_zstd_and_consumes(cluster: LocalCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = "kafka-python"
    create_topic(cluster, topic)
    acked: list[Acked] = []
    for codec in ("none", "zstd"):
        producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, acks="all",
            compression_type=None if codec == "none" else codec,
            enable_idempotence=True,
            request_timeout_ms=10_000,
        )
        futures = [(producer.send(topic, key=k, value=v), v) for k, v in records("kp", codec)]
        for future, value in futures:
            meta = future.get(timeout=20)
            acked.append((meta.partition, meta.offset, value))
        producer.close()

    def read(start: dict[int, int], expected: int) -> list[Acked]:
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                 enable_auto_commit=False, consumer_timeout_ms=5000)
        consumer.assign([KTP(topic, p) for p in start])
        for p, o in start.items():
            consumer.seek(KTP(topic, p), o)
        got: list[Acked] = []
        for msg in consumer:
            got.append((msg.partition, msg.offset, msg.value))
            if len(got) >= expected:
                break
        consumer.close()
        return got

    everything = read({0: 0, 1: 0, 2: 0}, len(acked))
    assert len(everything) == len(acked) == 2 * PER_CODEC
    check_read_back(acked, everything, "kafka-python")
    p, o, v = stored_offset(acked)
    assert read({p: o}, 1) == [(p, o, v)]


# --- aiokafka ------------------------------------------------------------------------


def test_aiokafka_produces_acks_all_plain_and_zstd_and_consumes(cluster: LocalCluster) -> None:
    pytest.importorskip("aiokafka", reason="aiokafka>=0.14 is not installed")
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = "aiokafka"
    create_topic(cluster, topic)

    async def produce() -> list[Acked]:
        acked: list[Acked] = []
        for codec in ("none", "zstd"):
            producer = AIOKafkaProducer(
                bootstrap_servers=cluster.bootstrap_servers, acks="all",
                compression_type=None if codec == "none" else codec,
                enable_idempotence=True,
            )
            await producer.start()
            try:
                sent = [(await producer.send(topic, key=k, value=v), v)
                        for k, v in records("aio", codec)]
                for future, value in sent:
                    meta = await future
                    acked.append((meta.partition, meta.offset, value))
            finally:
                await producer.stop()
        return acked

    async def read(start: dict[int, int], expected: int) -> list[Acked]:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                    enable_auto_commit=False, group_id=None)
        await consumer.start()
        got: list[Acked] = []
        try:
            consumer.assign([ATP(topic, p) for p in start])
            for p, o in start.items():
                consumer.seek(ATP(topic, p), o)
            deadline = time.monotonic() + 20
            while len(got) < expected and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for messages in batches.values():
                    got += [(m.partition, m.offset, m.value) for m in messages]
        finally:
            await consumer.stop()
        return got[:expected]

    acked = asyncio.run(produce())
    everything = asyncio.run(read({0: 0, 1: 0, 2: 0}, len(acked)))
    assert len(everything) == len(acked) == 2 * PER_CODEC
    check_read_back(acked, everything, "aiokafka")
    p, o, v = stored_offset(acked)
    assert asyncio.run(read({p: o}, 1)) == [(p, o, v)]


# --- confluent-kafka -----------------------------------------------------------------


def confluent_read(cluster: LocalCluster, topic: str, start: dict[int, int],
                   expected: int, timeout_s: float = 20) -> list[Acked]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([CTP(topic, p, o) for p, o in start.items()])
    got: list[Acked] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            got.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_confluent_kafka_produces_acks_all_plain_and_zstd_and_consumes(
    cluster: LocalCluster,
) -> None:
    topic = "confluent"
    create_topic(cluster, topic)
    acked: list[Acked] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for codec in ("none", "zstd"):
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                             "compression.type": codec, "enable.idempotence": True,
                             "linger.ms": 5})
        for key, value in records("ck", codec):
            producer.produce(topic, value=value, key=key, on_delivery=delivered)
        assert producer.flush(20) == 0
    assert not errors, errors[:3]
    everything = confluent_read(cluster, topic, {0: 0, 1: 0, 2: 0}, len(acked))
    assert len(everything) == len(acked) == 2 * PER_CODEC
    check_read_back(acked, everything, "confluent-kafka")
    p, o, v = stored_offset(acked)
    assert confluent_read(cluster, topic, {p: o}, 1) == [(p, o, v)]


# --- kcat ------------------------------------------------------------------------------


def test_kcat_lists_metadata_produces_and_consumes(cluster: LocalCluster) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed (apt-get install -y kcat)")
    topic = "kcat"
    create_topic(cluster, topic, partitions=1)
    b = cluster.bootstrap_servers
    listing = subprocess.run([kcat, "-b", b, "-L", "-t", topic], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    assert " 3 brokers:" in listing, listing
    for node in cluster.layout.brokers:
        assert f"broker {node.node_id} at 127.0.0.1:{node.kafka_port}" in listing, listing
    assert f'topic "{topic}" with 1 partitions:' in listing, listing
    assert "replicas: " in listing and "isrs: " in listing
    lines = [f"k{i}:v{i}" for i in range(10)]
    subprocess.run([kcat, "-b", b, "-P", "-t", topic, "-K:", "-X", "acks=all"],
                   input="\n".join(lines) + "\n", text=True, timeout=20, check=True)
    out = subprocess.run([kcat, "-b", b, "-C", "-t", topic, "-o", "beginning", "-e",
                          "-f", "%o %k:%s\n"], capture_output=True, text=True, timeout=20,
                         check=True).stdout
    assert out.splitlines() == [f"{i} {line}" for i, line in enumerate(lines)]


# --- failover under load and min.insync.replicas --------------------------------------


def test_failover_under_load_then_acks_all_refused_below_min_isr(cluster: LocalCluster) -> None:
    from kafka import KafkaProducer
    from kafka.errors import NotEnoughReplicasError

    create_topic(cluster, "failover", partitions=1)
    create_topic(cluster, "min-isr", partitions=3, rf=2)
    leader, _, isr_before = partition_state(cluster, "failover")[0]
    assert sorted(isr_before) == [1, 2, 3]

    acks: list[tuple[float, int, bytes]] = []  # (monotonic time, offset, value)
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acks.append((time.monotonic(), msg.offset(), msg.value()))

    producer = Producer({
        "bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
        "enable.idempotence": False, "linger.ms": 2, "message.timeout.ms": 30_000,
        "max.in.flight.requests.per.connection": 1, "retry.backoff.ms": 50,
        "topic.metadata.refresh.interval.ms": 500,
    })
    sent = 0
    started = time.monotonic()
    killed_at = 0.0
    while time.monotonic() - started < 7.0:
        if not killed_at and time.monotonic() - started >= 1.5:
            cluster.kill(leader)  # SIGKILL
            killed_at = time.monotonic()
        producer.produce("failover", value=f"r{sent:06d}".encode(), partition=0,
                         on_delivery=delivered)
        sent += 1
        producer.poll(0.003)
    assert producer.flush(40) == 0
    assert killed_at

    new_leader, _, isr_after = partition_state(cluster, "failover")[0]
    assert new_leader != leader and new_leader in isr_before, (leader, new_leader)
    assert leader not in isr_after and len(isr_after) == 2, isr_after
    before_kill = [t for t, _, _ in acks if t < killed_at]
    after_kill = [t for t, _, _ in acks if t >= killed_at]
    assert before_kill and after_kill, "acks on both sides of the kill"
    times = sorted(t for t, _, _ in acks)
    window = max(b - a for a, b in itertools.pairwise(times) if b >= killed_at)
    end = max(o for _, o, _ in acks) + 1
    read = confluent_read(cluster, "failover", {0: 0}, end, timeout_s=30)
    at = {o: v for _, o, v in read}
    wrong = [(o, v) for _, o, v in acks if at.get(o) != v]
    duplicates = len(read) - len({v for _, _, v in read})
    print(f"\nfailover: SIGKILL of broker {leader} (leader of failover-0); new leader "
          f"{new_leader}, ISR {isr_after}; sent {sent}, acknowledged {len(acks)}, failed "
          f"{len(failed)}; log has {len(read)} records ({duplicates} duplicates of retried "
          f"sends); write unavailability window {window * 1000:.0f} ms")
    assert not failed, failed[:3]
    assert len(acks) == sent
    assert not wrong, f"{len(wrong)} acknowledged records not at their offset: {wrong[:3]}"

    # The broker is still down: a min-isr partition it replicated has one in-sync replica.
    state = partition_state(cluster, "min-isr")
    partition = next(p for p, (_, replicas, _) in state.items() if leader in replicas)
    deadline = time.monotonic() + 10
    while leader in state[partition][2] or state[partition][0] < 0:
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
        state = partition_state(cluster, "min-isr")
    assert len(state[partition][2]) == 1
    before = _end_offset(cluster, "min-isr", partition)
    producer_kp = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                                retries=0, enable_idempotence=False, request_timeout_ms=5000)
    with pytest.raises(NotEnoughReplicasError):
        producer_kp.send("min-isr", value=b"must not be acknowledged",
                         partition=partition).get(timeout=15)
    producer_kp.close()
    assert _end_offset(cluster, "min-isr", partition) == before
    print(f"min.insync.replicas=2 with ISR {state[partition][2]}: acks=all refused with "
          "NOT_ENOUGH_REPLICAS, log end offset unchanged")

    cluster.start(leader)
    cluster.wait_ready(30)


def _end_offset(cluster: LocalCluster, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    try:
        _, high = consumer.get_watermark_offsets(CTP(topic, partition), timeout=10)
        return int(high)
    finally:
        consumer.close()


# --- the CLI ----------------------------------------------------------------------------


def test_cli_produce_then_consume_round_trip(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_servers
    create_topic(cluster, "cli", partitions=1)
    described = cli("topics", "describe", "--topic", "cli", "--bootstrap-server", b).stdout
    assert "\tPartition: 0\tLeader: " in described and "Isr: " in described
    lines = [f"user{i}:event {i}" for i in range(8)]
    cli("produce", "--bootstrap-server", b, "--topic", "cli", "--property", "parse.key=true",
        "--property", "key.separator=:", "--compression-type", "zstd", "--acks", "all",
        stdin="\n".join(lines) + "\n")
    out = cli("consume", "--bootstrap-server", b, "--topic", "cli", "--from-beginning",
              "--max-messages", "8", "--property", "print.key=true", "--timeout-ms", "15000")
    assert out.stdout.splitlines() == [line.replace(":", "\t", 1) for line in lines]
    assert "Processed a total of 8 messages" in out.stderr
    tail = cli("consume", "--bootstrap-server", b, "--topic", "cli", "--partition", "0",
               "--offset", "6", "--max-messages", "2", "--timeout-ms", "15000")
    assert tail.stdout.splitlines() == ["event 6", "event 7"]
    # As a group member: reads from the group's start, commits what it printed,
    # and a second run of the same group has nothing left to read.
    grouped = cli("consume", "--bootstrap-server", b, "--topic", "cli", "--group", "g",
                  "--from-beginning", "--max-messages", "8", "--timeout-ms", "20000")
    assert grouped.stdout.splitlines() == [f"event {i}" for i in range(8)]
    described = cli("groups", "describe", "g", "--bootstrap-server", b).stdout
    row = next(line.split() for line in described.splitlines() if line.startswith("g "))
    assert row[1:6] == ["cli", "0", "8", "8", "0"]  # TOPIC PARTITION CURRENT LOG-END LAG
    again = cli("consume", "--bootstrap-server", b, "--topic", "cli", "--group", "g",
                "--timeout-ms", "5000")
    assert again.stdout == ""



def test_cli_console_tools_take_kafkas_reader_and_formatter_properties(
        cluster: LocalCluster) -> None:
    """kafka-console-producer's headers and null marker, and
    kafka-console-consumer's printed fields, ``--include`` and
    ``--isolation-level`` (read_uncommitted unless given, as Kafka's tool)."""
    b = cluster.bootstrap_servers
    create_topic(cluster, "console-a", partitions=1)
    create_topic(cluster, "console-b", partitions=1)
    lines = "h1:v1,h2:v2\tk1:one\n\tNULL:two\nh3:x\tk3:NULL\n"
    cli("produce", "--bootstrap-server", b, "--topic", "console-a", "--reader-property",
        "parse.key=true", "--property", "key.separator=:", "--property", "parse.headers=true",
        "--property", "null.marker=NULL", "--request-required-acks", "all",
        "--compression-codec", "--sync", stdin=lines)
    out = cli("consume", "--bootstrap-server", b, "--topic", "console-a", "--from-beginning",
              "--max-messages", "3", "--timeout-ms", "15000", "--formatter-property",
              "print.partition=true", "--property", "print.offset=true", "--property",
              "print.headers=true", "--property", "print.key=true", "--property",
              "key.separator=|")
    assert out.stdout.splitlines() == [
        "Partition:0|Offset:0|h1:v1,h2:v2|k1|one",
        "Partition:0|Offset:1|NO_HEADERS|null|two",
        "Partition:0|Offset:2|h3:x|k3|null"]
    stamped = cli("consume", "--bootstrap-server", b, "--topic", "console-a",
                  "--from-beginning", "--max-messages", "1", "--timeout-ms", "15000",
                  "--property", "print.timestamp=true", "--property", "print.value=false")
    kind, _, ms = stamped.stdout.strip().partition(":")
    assert kind == "CreateTime" and abs(int(ms) - time.time() * 1000) < 300_000

    cli("produce", "--bootstrap-server", b, "--topic", "console-b", stdin="b0\nb1\n")
    # An aborted transaction's record: read_uncommitted prints it, read_committed not.
    producer = Producer({"bootstrap.servers": b, "transactional.id": "console-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("console-b", b"aborted")
    producer.flush(15)
    producer.abort_transaction(30)
    cli("produce", "--bootstrap-server", b, "--topic", "console-b", stdin="b2\n")
    every = cli("consume", "--bootstrap-server", b, "--topic", "console-b", "--from-beginning",
                "--max-messages", "4", "--timeout-ms", "15000")
    assert every.stdout.splitlines() == ["b0", "b1", "aborted", "b2"]
    committed = cli("consume", "--bootstrap-server", b, "--topic", "console-b",
                    "--from-beginning", "--max-messages", "3", "--timeout-ms", "15000",
                    "--isolation-level", "read_committed")
    assert committed.stdout.splitlines() == ["b0", "b1", "b2"]
    # Both topics, by a regular expression (a fresh group subscribes to it).
    both = cli("consume", "--bootstrap-server", b, "--include", "console-[ab]",
               "--from-beginning", "--max-messages", "6", "--timeout-ms", "20000",
               "--isolation-level", "read_committed", "--property", "print.offset=true")
    assert sorted(both.stdout.splitlines()) == sorted([
        "Offset:0\tone", "Offset:1\ttwo", "Offset:2\tnull",
        "Offset:0\tb0", "Offset:1\tb1", "Offset:4\tb2"])
    refused = cli("produce", "--bootstrap-server", b, "--topic", "console-b",
                  "--producer-property", "no.such.setting=1", stdin="x\n", check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        'raftlog: --producer-property: No such configuration property: "no.such.setting"')



def test_cli_perf_tests_print_kafkas_lines(cluster: LocalCluster) -> None:
    """kafka-producer-perf-test.sh's totals line and kafka-consumer-perf-test.sh's
    CSV, over what the producer wrote."""
    b = cluster.bootstrap_servers
    create_topic(cluster, "perf", partitions=2)
    out = cli("producer-perf-test", "--topic", "perf", "--num-records", "2000",
              "--record-size", "512", "--throughput", "-1", "--producer-props", "acks=all",
              "linger.ms=2", "--bootstrap-server", b)
    last = out.stdout.splitlines()[-1]
    assert last.startswith("2000 records sent, ") and last.endswith(" ms 99.9th."), out.stdout
    assert " ms avg latency, " in last and " ms 50th, " in last
    consumed = cli("consumer-perf-test", "--topic", "perf", "--messages", "2000",
                   "--bootstrap-server", b)
    header, row = consumed.stdout.splitlines()[-2:]
    assert header.split(", ")[4] == "data.consumed.in.nMsg"
    fields = row.split(", ")
    assert int(fields[4]) == 2000 and abs(float(fields[2]) - 2000 * 512 / 1024 / 1024) < 1e-3
    short = cli("consumer-perf-test", "--topic", "perf", "--messages", "2001", "--timeout",
                "2000", "--bootstrap-server", b, check=False)
    assert short.returncode == 1 and "Exiting before consuming the expected number" \
        in short.stderr
    refused = cli("producer-perf-test", "--topic", "perf", "--num-records", "1",
                  "--record-size", "1", "--throughput", "-1", "--producer-props",
                  "no.such=1", "--bootstrap-server", b, check=False)
    assert refused.returncode == 2 and "No such configuration property" in refused.stderr

def _assigned_member(b: str, group: str, topic: str) -> Consumer:
    """A consumer subscribed to ``topic`` in ``group``, once it has partitions
    (the group then has a member); the caller closes it."""
    member = Consumer({"bootstrap.servers": b, "group.id": group,
                       "auto.offset.reset": "earliest"})
    member.subscribe([topic])
    for _ in range(60):
        member.poll(0.5)
        if member.assignment():
            break
    return member


def _committed_offset(b: str, group: str) -> str:
    described = cli("groups", "describe", group, "--bootstrap-server", b).stdout
    row = next(line.split() for line in described.splitlines() if line.startswith(group + " "))
    return row[3]  # CURRENT-OFFSET


def test_cli_resets_and_deletes_an_inactive_group(cluster: LocalCluster) -> None:
    """kafka-consumer-groups.sh --reset-offsets and --delete: a dry run by
    default, each target clamped to [log start, HW], refused while the group
    has members."""
    b = cluster.bootstrap_servers
    create_topic(cluster, "rewind", partitions=1)
    cli("produce", "--bootstrap-server", b, "--topic", "rewind",
        stdin="".join(f"event {i}\n" for i in range(10)))
    read = cli("consume", "--bootstrap-server", b, "--topic", "rewind", "--group", "rw",
               "--from-beginning", "--max-messages", "10", "--timeout-ms", "20000")
    assert len(read.stdout.splitlines()) == 10
    assert _committed_offset(b, "rw") == "10"

    dry = cli("groups", "reset-offsets", "rw", "--topic", "rewind", "--to-earliest",
              "--bootstrap-server", b)
    assert "--execute option is missing" in dry.stderr  # on stderr, as Kafka's tool
    assert dry.stdout.splitlines()[-1].split() == ["rw", "rewind", "0", "0"]
    assert _committed_offset(b, "rw") == "10"  # nothing changed

    for args, expected in ((["--to-offset", "4"], "4"), (["--shift-by", "-100"], "0"),
                           (["--to-offset", "99"], "10"), (["--shift-by", "-3"], "7"),
                           (["--to-datetime", "2999-01-01T00:00:00.000"], "10")):
        done = cli("groups", "reset-offsets", "rw", "--topic", "rewind:0", *args, "--execute",
                   "--bootstrap-server", b).stdout
        assert done.splitlines()[-1].split() == ["rw", "rewind", "0", expected], (args, done)
        assert _committed_offset(b, "rw") == expected
    cli("groups", "reset-offsets", "rw", "--all-topics", "--shift-by", "-2", "--execute",
        "--bootstrap-server", b)
    again = cli("consume", "--bootstrap-server", b, "--topic", "rewind", "--group", "rw",
                "--max-messages", "2", "--timeout-ms", "20000")
    assert again.stdout.splitlines() == ["event 8", "event 9"]

    member = _assigned_member(b, "rw", "rewind")
    try:
        refused = cli("groups", "reset-offsets", "rw", "--all-topics", "--to-earliest",
                      "--execute", "--bootstrap-server", b, check=False)
        assert refused.returncode != 0
        assert "can only be reset if the group 'rw' is inactive, but the current state is " \
            "Stable" in refused.stderr
    finally:
        member.close()
    deleted = cli("groups", "delete", "rw", "--bootstrap-server", b).stdout
    assert deleted.strip() == "Deletion of requested consumer groups ('rw') was successful."
    assert "rw" not in cli("groups", "list", "--bootstrap-server", b).stdout.split()



def test_cli_groups_in_kafka_consumer_groups_spelling(cluster: LocalCluster) -> None:
    """kafka-consumer-groups.sh's action flags: --describe of several groups,
    --reset-offsets --to-current / --by-duration / --export then --from-file,
    --delete-offsets (refused for a topic a member subscribes to, and for
    a partition that does not exist), and --delete of several groups."""
    b = cluster.bootstrap_servers
    create_topic(cluster, "spelt", partitions=2)
    producer = Producer({"bootstrap.servers": b, "acks": "all"})
    for i in range(20):  # 12 on partition 0, 8 on partition 1
        producer.produce("spelt", f"event {i}".encode(), partition=0 if i % 5 < 3 else 1)
    assert producer.flush(20) == 0
    for group in ("sa", "sb"):
        read = cli("consume", "--bootstrap-server", b, "--topic", "spelt", "--group", group,
                   "--from-beginning", "--max-messages", "20", "--timeout-ms", "20000")
        assert len(read.stdout.splitlines()) == 20
    ends = {p: _end_offset(cluster, "spelt", p) for p in (0, 1)}
    assert ends == {0: 12, 1: 8}

    described = cli("groups", "--bootstrap-server", b, "--describe", "--group", "sb",
                    "--group", "sa").stdout
    rows = [line.split() for line in described.splitlines() if line.startswith(("sa ", "sb "))]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("sa", "0", str(ends[0])), ("sa", "1", str(ends[1])),
        ("sb", "0", str(ends[0])), ("sb", "1", str(ends[1]))]  # sorted by group
    states = cli("groups", "--bootstrap-server", b, "--describe", "--all-groups", "--state").stdout
    assert {"sa", "sb"} <= {line.split()[0] for line in states.splitlines() if line.strip()}

    # --export then --from-file: the plan is CSV, and the file is the plan.
    plan = cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "sa",
               "--all-topics", "--shift-by", "-3", "--export", "--dry-run").stdout
    assert plan.splitlines() == [f"spelt,{p},{ends[p] - 3}" for p in (0, 1)]
    both = cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "sa",
               "--group", "sb", "--topic", "spelt:0", "--to-earliest", "--export").stdout
    assert both.splitlines() == ["sa,spelt,0,0", "sb,spelt,0,0"]
    path = cluster.directory / "plan.csv"
    path.write_text(plan)
    done = cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "sa",
               "--from-file", str(path), "--execute").stdout
    assert [line.split() for line in done.splitlines()[-2:]] == [
        ["sa", "spelt", str(p), str(ends[p] - 3)] for p in (0, 1)]
    assert _committed_offset(b, "sa") == str(ends[0] - 3)
    # --to-current keeps a committed offset; --by-duration P1D goes back a
    # day, before every record here.
    current = cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "sa",
                  "--all-topics", "--to-current", "--dry-run").stdout
    assert current.splitlines()[-2].split() == ["sa", "spelt", "0", str(ends[0] - 3)]
    day = cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "sa",
              "--all-topics", "--by-duration", "P1D", "--execute").stdout
    assert [line.split()[-1] for line in day.splitlines()[-2:]] == ["0", "0"]
    bad = cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "sa",
              "--all-topics", "--by-duration", "1 day", check=False)
    assert bad.returncode == 2 and "ISO-8601 duration" in bad.stderr

    # --delete-offsets: a partition that does not exist is refused by the
    # broker (UNKNOWN_TOPIC_OR_PARTITION, as Kafka's), the rest go.
    out = cli("groups", "--bootstrap-server", b, "--delete-offsets", "--group", "sa",
              "--topic", "spelt", "--topic", "spelt:7", check=False)
    assert out.returncode == 2
    assert "partition-level error" in out.stderr
    table = [line.split() for line in out.stdout.splitlines()[-3:]]
    assert table == [["spelt", "0", "Successful"], ["spelt", "1", "Successful"],
                     ["spelt", "7", "Error:", "UNKNOWN_TOPIC_OR_PARTITION"]]
    left = cli("groups", "describe", "sa", "--bootstrap-server", b).stdout
    assert not any(line.startswith("sa ") for line in left.splitlines())
    member = _assigned_member(b, "sb", "spelt")
    try:
        refused = cli("groups", "--bootstrap-server", b, "--delete-offsets", "--group", "sb",
                      "--topic", "spelt:0", check=False)
        assert refused.returncode == 2
        assert refused.stdout.splitlines()[-1].split() == [
            "spelt", "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"]
        busy = cli("groups", "--bootstrap-server", b, "--delete", "--group", "sa", "--group",
                   "sb", check=False)
        assert busy.returncode == 2
        assert busy.stderr.splitlines()[0] == "Error: Deletion of some consumer groups failed:"
        assert busy.stderr.splitlines()[1].startswith(
            "* Group 'sb' could not be deleted due to: ")
        assert busy.stdout.strip() == "These consumer groups were deleted successfully: 'sa'"
    finally:
        member.close()
    gone = cli("groups", "--bootstrap-server", b, "--delete", "--group", "sb").stdout
    assert gone.strip() == "Deletion of requested consumer groups ('sb') was successful."
    listed = cli("groups", "--bootstrap-server", b, "--list").stdout.split()
    assert "sa" not in listed and "sb" not in listed


def test_cluster_status_lists_every_node(cluster: LocalCluster) -> None:
    out = cli("cluster", "status", "--dir", str(cluster.directory)).stdout
    assert "Brokers unfenced: 3/3" in out
    assert out.count("quorum leader") == 1
    assert f"Bootstrap servers: {cluster.bootstrap_servers}" in out


