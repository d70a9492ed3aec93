"""Exactly-once building blocks on a real 3-node cluster (issue 6 §4):
`raftlog server start` processes (`LocalCluster`, RF 3, min.insync.replicas
2), real clients, SIGKILL.

- idempotence: confluent-kafka (enable.idempotence) produces while the
  partition leaders are SIGKILLed: read back, no duplicate, no gap, in order;
- groups: 3 consumers in separate processes (confluent-kafka x2, kafka-python)
  share a 12-partition topic, one is SIGKILLed: no partition owned by two
  members at once (assignment callbacks), every record processed, committed
  offsets resume where they left off;
- committed offsets survive the SIGKILL of the group coordinator's broker;
- transactions: producer A (its own process) is fenced by producer B with
  the same transactional.id; read_committed sees B's records only.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from data_plane.groups.describe import parse_assignment
from data_plane.groups.partitioning import OFFSETS_TOPIC, partition_for_group
from data_plane.groups.records import GroupMetadataKey, decode_group_metadata_value, decode_key
from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CLI = [sys.executable, "-m", "data_plane"]
GROUP_TOPIC = "eos-g12"
GROUP_PARTITIONS = 12
COMMIT_EVERY = 10
_CTX = mp.get_context("spawn")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2", "auto.create.topics.enable": "false"})
    c = LocalCluster(tmp_path_factory.mktemp("eos"), layout)
    c.up(timeout_s=40)
    try:
        yield c
    finally:
        c.stop(timeout_s=10)


def _create(cluster: LocalCluster, name: str, partitions: int) -> None:
    result = subprocess.run([*CLI, "topics", "create", "--topic", name, "--partitions",
                             str(partitions), "--replication-factor", "3",
                             "--bootstrap-server", cluster.bootstrap_servers],
                            capture_output=True, text=True, timeout=40)
    assert result.returncode == 0, result.stderr
    cluster.wait_topic(name, partitions)


def _leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "meta"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {p: m.leader for p, m in meta.partitions.items()}
    finally:
        consumer.close()


def _restart(cluster: LocalCluster, node_id: int) -> None:
    cluster.start(node_id)
    cluster.wait_ready(timeout_s=40)


def _read(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted",
          idle_s: float = 3.0) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        out[msg.partition() or 0].append(msg.value() or b"")
        last = time.monotonic()
    consumer.close()
    return out


# ==== idempotence ===================================================================

def test_idempotent_producer_survives_leader_kills(cluster: LocalCluster) -> None:
    """KIP-98: resends to a new leader are recognised as duplicates: no
    duplicate, no gap, in order per partition, across two leader SIGKILLs."""
    _create(cluster, "idem", 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 60_000})
    per_partition = 1500
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    killed: list[int] = []
    started = time.monotonic()
    for i in range(per_partition):
        for p in range(3):
            producer.produce("idem", value=b"%d:%06d" % (p, i), partition=p, on_delivery=report)
        producer.poll(0)
        if i in (300, 900):
            victim = _leaders(cluster, "idem")[len(killed) % 3]
            cluster.kill(victim)
            killed.append(victim)
        if i == 600:
            _restart(cluster, killed[0])
        time.sleep(0.002)
    assert producer.flush(90) == 0
    _restart(cluster, killed[1])
    read = _read(cluster.bootstrap_servers, "idem", 3)
    total = sum(len(v) for v in read.values())
    print(f"\nidempotence: SIGKILLed leaders {killed}; produced {3 * per_partition}, "
          f"delivery errors {len(failed)}, read back {total} in "
          f"{time.monotonic() - started:.1f} s")
    assert failed == []
    for p, values in read.items():
        assert values == [b"%d:%06d" % (p, i) for i in range(per_partition)], (
            f"partition {p}: {len(values)} records, {len(set(values))} distinct")


# ==== consumer groups ===============================================================

def _confluent_member(name: str, bootstrap: str, group: str, events: Any, stop: Any) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "max.poll.interval.ms": 20_000})

    def on_assign(c: Any, parts: list[CTP]) -> None:
        events.put((time.time(), name, "assign", [p.partition for p in parts]))

    closing = False

    def on_revoke(c: Any, parts: list[CTP]) -> None:
        if not closing:  # not inside close(): see test_inprocess_groups.ConfluentMember
            with contextlib.suppress(KafkaException):  # nothing consumed since the last commit
                c.commit(asynchronous=False)
        events.put((time.time(), name, "revoke", [p.partition for p in parts]))

    consumer.subscribe([GROUP_TOPIC], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_revoke)
    uncommitted = 0
    while not stop.is_set():
        msg = consumer.poll(0.1)
        if msg is None or msg.error():
            continue
        events.put((time.time(), name, "record", (msg.partition(), msg.offset())))
        uncommitted += 1
        if uncommitted >= COMMIT_EVERY:
            consumer.commit(asynchronous=False)
            uncommitted = 0
    with contextlib.suppress(KafkaException):
        consumer.commit(asynchronous=False)
    closing = True
    consumer.close()


def _kafka_python_member(name: str, bootstrap: str, group: str, events: Any, stop: Any) -> None:
    from kafka import (  # type: ignore[import-untyped]
        ConsumerRebalanceListener,
        KafkaConsumer,
        OffsetAndMetadata,
    )

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=500,
                             max_poll_interval_ms=20_000)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        # kafka-python 3 runs these on its IO thread: a blocking call such as
        # consumer.commit() there raises (and the rebalance fails). Nothing
        # needs committing: every polled batch is committed before the next poll.
        def on_partitions_revoked(self, revoked: Any) -> None:
            events.put((time.time(), name, "revoke", [tp.partition for tp in revoked]))

        def on_partitions_assigned(self, assigned: Any) -> None:
            events.put((time.time(), name, "assign", [tp.partition for tp in assigned]))

    consumer.subscribe([GROUP_TOPIC], listener=Listener())
    while not stop.is_set():
        for tp, msgs in consumer.poll(timeout_ms=100, max_records=COMMIT_EVERY).items():
            for msg in msgs:
                events.put((time.time(), name, "record", (tp.partition, msg.offset)))
            consumer.commit({tp: OffsetAndMetadata(msgs[-1].offset + 1, None, -1)})
    consumer.close()


def _check_ownership(events: list[tuple[float, str, str, Any]], killed: str,
                     killed_at: float) -> int:
    """Replay the callbacks in time order (one host clock): a partition is
    never assigned to a member while another owns it. Eager protocol: a
    survivor revokes everything before it rejoins, so its revoke precedes any
    new assignment. The SIGKILLed member runs no callback: it owns nothing
    after its session expires, which is before the next generation, so its
    ownership ends at the kill. Returns the number of assignments."""
    owner: dict[int, str] = {}
    assignments = 0
    cleared = False
    for t, name, kind, value in sorted(events, key=lambda e: e[0]):
        if not cleared and t >= killed_at:
            owner = {p: o for p, o in owner.items() if o != killed}
            cleared = True
        if kind == "assign":
            assignments += 1
            for p in value:
                assert owner.get(p, name) == name, (
                    f"partition {p} assigned to {name} while {owner[p]} owns it")
                owner[p] = name
        elif kind == "revoke":
            for p in value:
                if owner.get(p) == name:
                    del owner[p]
    return assignments


def _generations(bootstrap: str, group: str) -> dict[int, dict[str, list[int]]]:
    """The coordinator's own record of each generation: the GroupMetadata
    values of ``group`` in its ``__consumer_offsets`` partition, as
    generation -> member id -> assigned partitions of GROUP_TOPIC."""
    partition = partition_for_group(group)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    _, high = consumer.get_watermark_offsets(CTP(OFFSETS_TOPIC, partition), timeout=10)
    consumer.assign([CTP(OFFSETS_TOPIC, partition, 0)])
    out: dict[int, dict[str, list[int]]] = {}
    deadline = time.monotonic() + 20
    position = 0
    while position < high and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        position = (msg.offset() or 0) + 1
        raw_key, value = msg.key(), msg.value()
        key = decode_key(raw_key) if raw_key else None
        if not isinstance(key, GroupMetadataKey) or key.group_id != group or value is None:
            continue
        meta = decode_group_metadata_value(value)
        out[meta.generation] = {
            m.member_id: sorted(tp.partition for tp in parse_assignment(m.assignment) or []
                                if tp.topic == GROUP_TOPIC)
            for m in meta.members}
    consumer.close()
    assert position >= high, f"read {position} of {high} offsets records"
    return out


def _produce_group_records(bootstrap: str, start: int, end: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, end):
        producer.produce(GROUP_TOPIC, value=b"%d" % i, partition=i % GROUP_PARTITIONS)
    assert producer.flush(30) == 0


def test_three_consumers_share_partitions_and_survive_a_killed_member(
        cluster: LocalCluster) -> None:
    """Half the records are produced, the 3 members share them, one member
    is SIGKILLed, then the other half is produced: the survivors only get
    them if the coordinator expires the dead member's session and rebalances."""
    _create(cluster, GROUP_TOPIC, GROUP_PARTITIONS)
    bootstrap = cluster.bootstrap_servers
    half, total = 600, 1200
    _produce_group_records(bootstrap, 0, half)
    group = "eos-group"
    events: Any = _CTX.Queue()
    stop = _CTX.Event()
    targets = {"confluent-1": _confluent_member, "confluent-2": _confluent_member,
               "kafka-python": _kafka_python_member}
    procs = {name: _CTX.Process(target=fn, args=(name, bootstrap, group, events, stop))
             for name, fn in targets.items()}
    for proc in procs.values():
        proc.start()
    collected: list[tuple[float, str, str, Any]] = []

    def drain(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                collected.append(events.get(timeout=0.1))
            except queue.Empty:
                continue

    def processed() -> set[tuple[int, int]]:
        return {e[3] for e in collected if e[2] == "record"}

    def owners() -> set[str]:
        return {e[1] for e in collected if e[2] == "assign" and e[3]}

    deadline = time.monotonic() + 60
    while (len(processed()) < half or len(owners()) < 3) and time.monotonic() < deadline:
        drain(0.5)
    assert len(owners()) == 3, f"members with partitions: {owners()}"
    victim = "confluent-2"
    victim_pid = procs[victim].pid
    assert victim_pid is not None
    os.kill(victim_pid, signal.SIGKILL)
    killed_at = time.time()
    _produce_group_records(bootstrap, half, total)
    deadline = time.monotonic() + 45
    while len(processed()) < total and time.monotonic() < deadline:
        drain(0.5)
    reassigned_after_s = min((e[0] - killed_at for e in collected
                              if e[2] == "assign" and e[0] > killed_at), default=None)
    stop.set()
    drain(2.0)
    for name, proc in procs.items():
        proc.join(20)
        assert name == victim or proc.exitcode == 0, f"{name} exited with {proc.exitcode}"
    assignments = _check_ownership(collected, victim, killed_at)
    records = [e[3] for e in collected if e[2] == "record"]
    by_member = {n: sum(1 for e in collected if e[2] == "record" and e[1] == n) for n in procs}
    generations = _generations(bootstrap, group)
    print(f"\ngroups: {total} records ({half} before the SIGKILL of {victim}, {half} after), "
          f"{len(processed())} distinct processed, {len(records) - len(processed())} "
          f"reprocessed, {assignments} assignment callbacks, first assignment "
          f"{reassigned_after_s:.1f} s after the kill, per member {by_member}")
    for generation, members in sorted(generations.items()):
        print(f"  generation {generation}: "
              + ", ".join(f"{m.rsplit('-', 5)[0]}:{ps}" for m, ps in members.items()))
    assert len(processed()) == total
    for generation, members in generations.items():  # no partition owned twice
        owned = [p for ps in members.values() for p in ps]
        assert len(owned) == len(set(owned)), (generation, members)
        assert not members or sorted(owned) == list(range(GROUP_PARTITIONS)), (
            generation, members)
    # The survivors' generation after the kill has two members.
    assert any(len(m) == 2 for g, m in generations.items()), generations

    # Offsets resume where they left off: all 1200 committed, and a new member
    # of the group reads exactly the records produced afterwards.
    more = 60
    _produce_group_records(bootstrap, total, total + more)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    committed = consumer.committed([CTP(GROUP_TOPIC, p) for p in range(GROUP_PARTITIONS)],
                                   timeout=20)
    assert sum(tp.offset for tp in committed) == total, [tp.offset for tp in committed]
    consumer.subscribe([GROUP_TOPIC])
    resumed: list[int] = []
    deadline = time.monotonic() + 30
    while len(resumed) < more and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            resumed.append(int(msg.value() or b"-1"))
    end = time.monotonic() + 1.5  # nothing below the committed offsets follows
    while time.monotonic() < end:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            resumed.append(int(msg.value() or b"-1"))
    consumer.close()
    print(f"  resumed: a new member read {len(resumed)} records, "
          f"values {min(resumed, default=None)}..{max(resumed, default=None)}")
    assert sorted(resumed) == list(range(total, total + more))


def _coordinator(bootstrap: str, group: str, timeout_s: float = 40) -> int:
    """The group's coordinator broker, as FindCoordinator answers (librdkafka
    looks it up for DescribeGroups and reports it).

    Just after a failover, a broker whose metadata is a moment behind can
    still name the killed coordinator. In one CI run the lookup timed out
    after 20 s while the admin client kept connecting to the killed broker.
    So each attempt is short, and one that times out is asked again with a
    new client, until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group], request_timeout=8)
        try:
            return int(described[group].result(timeout=10).coordinator.id)
        except (KafkaException, concurrent.futures.TimeoutError):
            if time.monotonic() > deadline:
                raise


# Retriable coordinator errors (Kafka's RetriableException subclasses). While
# the new coordinator's broker has not applied the leader change that another
# broker's FindCoordinator already reports, OffsetFetch answers NOT_COORDINATOR;
# librdkafka's committed() hands that to the application instead of retrying
# (the Java consumer retries it), so the application retries, as Kafka's docs
# advise for retriable errors.
_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def _committed_retrying(consumer: Consumer, partitions: list[CTP], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.committed(partitions, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as e:
            if e.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_committed_offsets_survive_the_coordinator_kill(cluster: LocalCluster) -> None:
    _create(cluster, "offs", 3)
    group = "survivor"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    wanted = [CTP("offs", 0, 11), CTP("offs", 1, 22), CTP("offs", 2, 33)]
    consumer.commit(offsets=wanted, asynchronous=False)
    consumer.close()
    coordinator = _coordinator(cluster.bootstrap_servers, group)
    assert coordinator == _leaders(cluster, OFFSETS_TOPIC)[partition_for_group(group)]
    cluster.kill(coordinator)
    try:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                             "enable.auto.commit": False})
        got = _committed_retrying(consumer, [CTP("offs", p) for p in range(3)], 30)
        consumer.close()
        new_coordinator = _coordinator(cluster.bootstrap_servers, group)
        print(f"\noffsets: coordinator broker {coordinator} (FindCoordinator) SIGKILLed, "
              f"new coordinator {new_coordinator}, committed {[tp.offset for tp in got]}")
        assert [tp.offset for tp in got] == [11, 22, 33]
        assert new_coordinator != coordinator
    finally:
        _restart(cluster, coordinator)


# ==== transactions ==================================================================

def _producer_a(bootstrap: str, log: Any, go: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-zombie",
                         "linger.ms": 5})
    producer.init_transactions(60)
    log.put("A: init_transactions ok")
    producer.begin_transaction()
    for i in range(50):
        producer.produce("eos-txn", value=b"A-%d" % i, partition=i % 2)
    producer.flush(30)
    log.put("A: begin_transaction, produced 50 records (open)")
    go.set()
    time.sleep(4)  # meanwhile B initialises the same transactional.id
    try:
        producer.commit_transaction(30)
        log.put("A: commit_transaction succeeded (UNEXPECTED)")
    except KafkaException as e:
        err = e.args[0]
        log.put(f"A: commit_transaction failed: {err.name()} fatal={err.fatal()} "
                f"({err.str()})")


def test_transactional_zombie_is_fenced_across_processes(cluster: LocalCluster) -> None:
    _create(cluster, "eos-txn", 2)
    bootstrap = cluster.bootstrap_servers
    log: Any = _CTX.Queue()
    go = _CTX.Event()
    a = _CTX.Process(target=_producer_a, args=(bootstrap, log, go))
    a.start()
    transcript: list[str] = []
    assert go.wait(60), "producer A never started its transaction"
    b = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-zombie",
                  "linger.ms": 5})
    b.init_transactions(60)
    transcript.append("B: init_transactions ok (same transactional.id: epoch bumped, A fenced)")
    b.begin_transaction()
    for i in range(30):
        b.produce("eos-txn", value=b"B-%d" % i, partition=i % 2)
    b.commit_transaction(30)
    transcript.append("B: committed 30 records")
    a.join(60)
    lines: list[str] = []
    while not log.empty():
        lines.append(log.get())
    read = _read(bootstrap, "eos-txn", 2, "read_committed")
    values = [v for vs in read.values() for v in vs]
    uncommitted = [v for vs in _read(bootstrap, "eos-txn", 2).values() for v in vs]
    a_lines = [line for line in lines if line.startswith("A:")]
    full = a_lines[:2] + transcript + a_lines[2:]
    full.append(f"read_committed: {sum(v.startswith(b'B-') for v in values)} from B, "
                f"{sum(v.startswith(b'A-') for v in values)} from A; read_uncommitted: "
                f"{len(uncommitted)} records")
    print("\n" + "\n".join(full))
    assert any("commit_transaction failed" in line and "FENCED" in line.upper()
               for line in a_lines), a_lines
    assert sorted(values) == sorted(b"B-%d" % i for i in range(30))
    assert len(uncommitted) == 80


# ==== groups CLI ====================================================================

def test_groups_cli_lists_and_describes_with_lag(cluster: LocalCluster) -> None:
    """``raftlog groups list`` / ``describe`` (kafka-consumer-groups.sh) against
    the cluster: a live member owns 3 partitions of 10 records each and has
    committed 4, 7 and 10, so LAG is 6, 3 and 0."""
    _create(cluster, "lagged", 3)
    bootstrap = cluster.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(30):
        producer.produce("lagged", value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    group = "lag-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "client.id": "lag-client", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["lagged"])
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert len(consumer.assignment()) == 3
        consumer.commit(offsets=[CTP("lagged", 0, 4), CTP("lagged", 1, 7),
                                 CTP("lagged", 2, 10)], asynchronous=False)
        member_id = consumer.memberid()
        listed = subprocess.run([*CLI, "groups", "list", "--bootstrap-server", bootstrap],
                                capture_output=True, text=True, timeout=60)
        described = subprocess.run([*CLI, "groups", "describe", group,
                                    "--bootstrap-server", bootstrap],
                                   capture_output=True, text=True, timeout=60)
    finally:
        consumer.close()
    print(f"\n$ raftlog groups list\n{listed.stdout}$ raftlog groups describe {group}\n"
          f"{described.stdout}")
    assert listed.returncode == 0, listed.stderr
    assert group in listed.stdout.split()
    assert described.returncode == 0, described.stderr
    lines = [line.split() for line in described.stdout.splitlines() if line.strip()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                        "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = {int(r[2]): r for r in lines[1:] if r[1] == "lagged"}
    assert sorted(rows) == [0, 1, 2], described.stdout
    for partition, (current, lag) in {0: (4, 6), 1: (7, 3), 2: (10, 0)}.items():
        row = rows[partition]
        assert row[0] == group
        assert (int(row[3]), int(row[4]), int(row[5])) == (current, 10, lag), row
        assert row[6] == member_id and row[8] == "lag-client", row
