"""Admin writes a Kafka user expects, against a real 3-node cluster:
CreatePartitions (KIP-195), IncrementalAlterConfigs (KIP-339) and the legacy
AlterConfigs, ElectLeaders (KIP-460), from confluent-kafka, kafka-python and
the `raftlog` CLI. Each is forwarded by a broker to the active controller; a
changed topic config reaches the partitions' open logs (max.message.bytes
refuses a record). Client quotas (KIP-546) set with `raftlog configs
--client` and enforced by the brokers; SCRAM credentials (KIP-554) set,
described and deleted with `raftlog configs --user`. (`raftlog acls` needs an
authorizer: tests/data_plane/test_acl_cluster.py.)"""

from __future__ import annotations

import asyncio
import datetime
import json
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from cluster_helpers import cli, eventually, metric_total, module_cluster
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kio.schema.create_topics.v4 import request as ct4_req
from kio.schema.create_topics.v7 import request as ct7_req
from kio.schema.delete_topics.v6 import request as dt6_req
from kio.schema.describe_cluster.v2 import request as dc2_req
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from data_plane.local_cluster import LocalCluster
from raftlog.net import KafkaProtocolClient
from raftlog.net.errors import ErrorCode

pytestmark = pytest.mark.slow

cluster = module_cluster()


def topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's own (dynamic) configs, as a broker's DescribeConfigs says."""
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: v.value for k, v in entries.items() if v.source == 1}  # DYNAMIC_TOPIC_CONFIG


def error_code(future: Any) -> str:
    with pytest.raises(KafkaException) as raised:
        future.result(10)
    return str(raised.value.args[0].name())


def test_confluent_create_partitions_then_produce_to_every_partition(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("grow", 2, 3)])["grow"].result(15)
    cluster.wait_topic("grow", 2)
    assert admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(15) is None
    cluster.wait_topic("grow", 5)
    acked: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for partition in range(5):
        producer.produce("grow", b"v", partition=partition,
                         on_delivery=lambda err, msg: acked.append((msg.partition(), msg.offset()))
                         if err is None else None)
    assert producer.flush(20) == 0
    assert sorted(acked) == [(p, 0) for p in range(5)]
    # Errors, with Kafka's codes.
    assert error_code(admin.create_partitions([NewPartitions("grow", 3)])["grow"]) \
        == "INVALID_PARTITIONS"
    assert error_code(admin.create_partitions([NewPartitions("grow", 5)])["grow"]) \
        == "INVALID_PARTITIONS"
    assert error_code(admin.create_partitions([NewPartitions("missing", 3)])["missing"]) \
        == "UNKNOWN_TOPIC_OR_PART"
    too_many = NewPartitions("grow", 20_000)
    assert error_code(admin.create_partitions([too_many])["grow"]) == "POLICY_VIOLATION"


def test_confluent_incremental_and_legacy_alter_configs(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("cfg", 1, 3)])["cfg"].result(15)
    cluster.wait_topic("cfg", 1)

    def incremental(*entries: ConfigEntry, validate_only: bool = False) -> Any:
        resource = ConfigResource("topic", "cfg", incremental_configs=list(entries))
        return admin.incremental_alter_configs(
            [resource], validate_only=validate_only)[resource]

    incremental(
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ).result(10)

    def both_set() -> None:
        assert topic_configs(admin, "cfg") == {
            "retention.ms": "3600000", "cleanup.policy": "delete,compact"}
    eventually(both_set)
    incremental(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
                validate_only=True).result(10)
    incremental(ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)
                ).result(10)

    def deleted() -> None:
        assert topic_configs(admin, "cfg") == {"retention.ms": "3600000"}  # validate_only kept it
    eventually(deleted)
    assert error_code(incremental(ConfigEntry(
        "retention.ms", "soon", incremental_operation=AlterConfigOpType.SET))) == "INVALID_CONFIG"
    assert error_code(incremental(ConfigEntry(
        "retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND))) == "INVALID_CONFIG"
    assert error_code(incremental(ConfigEntry(
        "no.such.config", "5", incremental_operation=AlterConfigOpType.SET))) == "INVALID_CONFIG"
    # The legacy AlterConfigs replaces the topic's whole dynamic config.
    legacy = ConfigResource("topic", "cfg", set_config={"segment.ms": "7200000"})
    with pytest.warns(DeprecationWarning):
        admin.alter_configs([legacy])[legacy].result(10)

    def replaced() -> None:
        assert topic_configs(admin, "cfg") == {"segment.ms": "7200000"}
    eventually(replaced)


def test_a_changed_max_message_bytes_reaches_the_partition_logs(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("small", 1, 3)])["small"].result(15)
    cluster.wait_topic("small", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 10_000})

    def send(size: int) -> str:
        outcome: list[str] = []
        producer.produce("small", b"x" * size, on_delivery=lambda err, msg: outcome.append(
            "ok" if err is None else str(err.name())))
        left = producer.flush(15)
        assert left == 0 and len(outcome) == 1, (left, outcome)
        return outcome[0]

    assert send(1000) == "ok"
    resource = ConfigResource("topic", "small", incremental_configs=[ConfigEntry(
        "max.message.bytes", "200", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)

    def refused() -> None:
        assert send(1000) == "MSG_SIZE_TOO_LARGE"
    eventually(refused, timeout_s=15)
    assert send(100) == "ok"


def test_kafka_python_admin(cluster: LocalCluster) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([KNewTopic("kp", 1, 3)])
        cluster.wait_topic("kp", 1)
        admin.create_partitions({"kp": KNewPartitions(3)})
        cluster.wait_topic("kp", 3)
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp",
                                             configs={"retention.ms": "123456"})])
        confluent = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

        def altered() -> None:
            assert topic_configs(confluent, "kp") == {"retention.ms": "123456"}
        eventually(altered)
    finally:
        admin.close()


def test_cli_topics_alter_and_configs(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_servers
    assert cli("topics", "create", "--topic", "clicfg", "--partitions", "1",
               "--replication-factor", "3", "--bootstrap-server", b).returncode == 0
    out = cli("topics", "alter", "--topic", "clicfg", "--partitions", "4", "--bootstrap-server", b)
    assert out.returncode == 0 and "now has 4 partitions" in out.stdout
    cluster.wait_topic("clicfg", 4)
    bad = cli("topics", "alter", "--topic", "clicfg", "--partitions", "2", "--bootstrap-server", b)
    assert bad.returncode == 2 and "INVALID_PARTITIONS" in bad.stderr
    out = cli("configs", "alter", "--topic", "clicfg", "--add-config",
              "retention.ms=86400000,cleanup.policy=[delete,compact]", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr

    def described() -> None:
        text = cli("configs", "describe", "--topic", "clicfg", "--bootstrap-server", b).stdout
        assert "cleanup.policy=delete,compact" in text and "retention.ms=86400000" in text
    eventually(described)
    out = cli("configs", "alter", "--topic", "clicfg", "--delete-config", "cleanup.policy",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    bad = cli("configs", "alter", "--topic", "clicfg", "--add-config", "retention.ms=x",
              "--bootstrap-server", b)
    assert bad.returncode == 2 and "INVALID_CONFIG" in bad.stderr

    def topics_describe() -> None:
        text = cli("topics", "describe", "--topic", "clicfg", "--bootstrap-server", b).stdout
        assert "PartitionCount: 4" in text and "Configs: retention.ms=86400000\n" in text
    eventually(topics_describe)



def test_cli_takes_kafka_tools_spelling_of_topics_and_configs(cluster: LocalCluster) -> None:
    """kafka-topics.sh's ``--create``/``--describe`` and kafka-configs.sh's
    ``--entity-type``/``--entity-name``/``--entity-default`` do what the
    short forms do; a describe without a name covers every topic or broker."""
    b = cluster.bootstrap_servers
    out = cli("topics", "--bootstrap-server", b, "--create", "--topic", "spelled",
              "--partitions", "2", "--replication-factor", "3")
    assert out.returncode == 0 and out.stdout.strip() == "Created topic spelled.", out.stderr
    cluster.wait_topic("spelled", 2)
    described = cli("topics", "--describe", "--topic", "spelled", "--bootstrap-server", b)
    assert "PartitionCount: 2" in described.stdout
    assert "spelled" in cli("topics", "--list", "--bootstrap-server", b).stdout.split()
    out = cli("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name",
              "spelled", "--alter", "--add-config", "retention.ms=7200000")
    assert out.stdout.strip() == "Completed updating config for topic spelled.", out.stderr

    def described_both_ways() -> None:
        short = cli("configs", "describe", "--topic", "spelled", "--bootstrap-server", b).stdout
        long = cli("configs", "--describe", "--entity-type", "topics", "--entity-name", "spelled",
                   "--bootstrap-server", b).stdout
        assert short == long == "Dynamic configs for topic spelled are:\n  retention.ms=7200000\n"
        every = cli("configs", "--describe", "--entity-type", "topics",
                    "--bootstrap-server", b).stdout
        assert "Dynamic configs for topic spelled are:\n  retention.ms=7200000\n" in every
        assert "Dynamic configs for topic __consumer_offsets are:" in every or \
            "__consumer_offsets" not in cli("topics", "list", "--bootstrap-server", b).stdout
    eventually(described_both_ways)
    brokers = cli("configs", "--describe", "--entity-type", "brokers", "--bootstrap-server", b)
    assert [line for line in brokers.stdout.splitlines() if line.startswith("Dynamic")] == [
        f"Dynamic configs for broker {n} are:" for n in (1, 2, 3)]
    defaults = cli("configs", "--describe", "--entity-type", "brokers", "--entity-default",
                   "--bootstrap-server", b)
    assert defaults.stdout.splitlines()[0] == "Default configs for brokers in the cluster are:"
    # A running broker's log levels (KIP-412): that broker's alone, not stored.
    out = cli("configs", "--alter", "--entity-type", "broker-loggers", "--entity-name", "2",
              "--add-config", "raftlog.net.server=DEBUG", "--bootstrap-server", b)
    assert out.stdout.strip() == "Completed updating config for broker-logger 2.", out.stderr
    try:
        levels = {n: cli("configs", "describe", "--broker-logger", n, "--bootstrap-server",
                         b).stdout.splitlines() for n in ("1", "2")}
        assert levels["2"][0] == "Dynamic configs for broker-logger 2 are:"
        assert "  raftlog.net.server=DEBUG" in levels["2"]
        assert "  raftlog.net.server=DEBUG" not in levels["1"]
        assert any(line.startswith("  root=") for line in levels["1"])
        bad = cli("configs", "alter", "--broker-logger", "2", "--add-config", "root=LOUD",
                  "--bootstrap-server", b)
        assert bad.returncode == 2 and "INVALID_CONFIG: Cannot set the log level of root to " \
            "LOUD" in bad.stderr
    finally:
        cli("configs", "alter", "--broker-logger", "2", "--delete-config", "raftlog.net.server",
            "--bootstrap-server", b)
    # A user and the default client id: the pair's quota (kafka-configs.sh's
    # --entity-type users --entity-name U --entity-type clients --entity-default).
    out = cli("configs", "--alter", "--entity-type", "users", "--entity-name", "spelt",
              "--entity-type", "clients", "--entity-default", "--add-config",
              "producer_byte_rate=2048", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    try:
        def pair_described() -> None:
            text = cli("configs", "describe", "--user", "spelt", "--client-defaults",
                       "--bootstrap-server", b).stdout
            assert "producer_byte_rate=2048" in text
        eventually(pair_described)
    finally:
        cli("configs", "--alter", "--entity-type", "users", "--entity-name", "spelt",
            "--entity-type", "clients", "--entity-default", "--delete-config",
            "producer_byte_rate", "--bootstrap-server", b)
        cli("topics", "--delete", "--topic", "spelled", "--bootstrap-server", b)


def test_confluent_delete_records_then_consumers_start_at_the_new_log_start(
    cluster: LocalCluster,
) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("trim", 1, 3)])["trim"].result(15)
    cluster.wait_topic("trim", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(10):
        producer.produce("trim", str(i).encode(), partition=0)
    assert producer.flush(20) == 0
    deleted = admin.delete_records([CTP("trim", 0, 6)])
    (future,) = deleted.values()
    # Answered once every in-sync replica's log start reached 6.
    assert future.result(20).low_watermark == 6
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "trim",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(CTP("trim", 0), timeout=10)
        assert (low, high) == (6, 10)
        consumer.assign([CTP("trim", 0, 0)])  # below the log start: reset to earliest
        values = []
        deadline = time.monotonic() + 15
        while len(values) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append((msg.offset(), msg.value()))
        assert values == [(o, str(o).encode()) for o in range(6, 10)]
    finally:
        consumer.close()
    past_hw = admin.delete_records([CTP("trim", 0, 50)])
    (future,) = past_hw.values()
    assert error_code(future) == "OFFSET_OUT_OF_RANGE"


def create_with_cli(cluster: LocalCluster, topic: str, partitions: int) -> None:
    """``raftlog topics create`` (RF 3), then wait until every broker has it."""
    assert cli("topics", "create", "--topic", topic, "--partitions", str(partitions),
               "--replication-factor", "3", "--bootstrap-server",
               cluster.bootstrap_servers).returncode == 0
    cluster.wait_topic(topic, partitions)


def test_cli_delete_records(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_servers
    create_with_cli(cluster, "clitrim", 1)
    producer = Producer({"bootstrap.servers": b, "acks": "all"})
    for i in range(5):
        producer.produce("clitrim", str(i).encode(), partition=0)
    assert producer.flush(20) == 0
    out = cli("delete-records", "--topic", "clitrim", "--partition", "0", "--offset", "3",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [  # kafka-delete-records.sh's lines
        "Executing records delete operation", "Records delete operation completed:",
        "partition: clitrim-0\tlow_watermark: 3"]
    out = cli("delete-records", "--topic", "clitrim", "--partition", "0", "--offset", "-1",
              "--bootstrap-server", b)
    assert out.stdout.splitlines()[-1] == "partition: clitrim-0\tlow_watermark: 5"
    bad = cli("delete-records", "--topic", "clitrim", "--partition", "0", "--offset", "99",
              "--bootstrap-server", b)
    assert bad.returncode == 2
    assert bad.stdout.splitlines()[-1] == "partition: clitrim-0\terror: OFFSET_OUT_OF_RANGE"
    # Kafka's --offset-json-file: several partitions, each at its own leader.
    create_with_cli(cluster, "clitrim3", 3)
    for partition in range(3):
        for i in range(4):
            producer.produce("clitrim3", str(i).encode(), partition=partition)
    assert producer.flush(20) == 0
    path = cluster.directory / "offsets.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "clitrim3", "partition": 0, "offset": 1},
        {"topic": "clitrim3", "partition": 2, "offset": -1},
        {"topic": "clitrim", "partition": 4, "offset": 1}]}))
    out = cli("delete-records", "--offset-json-file", str(path), "--bootstrap-server", b)
    assert out.returncode == 2
    assert out.stdout.splitlines()[2:] == [
        "partition: clitrim-4\terror: UNKNOWN_TOPIC_OR_PARTITION",
        "partition: clitrim3-0\tlow_watermark: 1", "partition: clitrim3-2\tlow_watermark: 4"]
    path.write_text(json.dumps({"partitions": [
        {"topic": "clitrim3", "partition": 1, "offset": 1},
        {"topic": "clitrim3", "partition": 1, "offset": 2}]}))
    bad = cli("delete-records", "--offset-json-file", str(path), "--bootstrap-server", b)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "raftlog: Offset json file contains duplicate topic partitions: clitrim3-1")


def test_cli_get_offsets(cluster: LocalCluster) -> None:
    """kafka-get-offsets.sh's lines (``topic:partition:offset``, sorted as
    text), for each ``--time`` and partition filter; ListOffsets v8 (-4) and
    v9 (-5) go to the leaders."""
    b = cluster.bootstrap_servers
    create_with_cli(cluster, "offs", 11)
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 0})
    for i in range(5):
        producer.produce("offs", b"v", partition=0, timestamp=base + 10 * i)
        producer.flush(20)
    for _ in range(2):
        producer.produce("offs", b"v", partition=10, timestamp=base + 100)
    assert producer.flush(20) == 0
    admin = AdminClient({"bootstrap.servers": b})
    (trimmed,) = admin.delete_records([TopicPartition("offs", 0, 2)]).values()
    trimmed.result(15)

    def offsets(*args: str) -> list[str]:
        out = cli("get-offsets", "--bootstrap-server", b, *args)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    empty = [f"offs:{p}:0" for p in range(1, 10)]
    # Sorted as "offs-10" < "offs-2", as Kafka's tool sorts TopicPartitions.
    assert offsets("--topic", "offs") == ["offs:0:5", "offs:1:0", "offs:10:2", *empty[1:]]
    assert offsets("--topic", "offs", "--partitions", "0,10", "--time", "earliest") \
        == ["offs:0:2", "offs:10:0"]
    assert offsets("--topic-partitions", "offs:0,of.s:10-", "--time", "-4") \
        == ["offs:0:2", "offs:10:0"]  # earliest-local: no tiered storage
    assert offsets("--topic", "offs", "--time", "latest-tiered") == []  # none tiered
    # By timestamp: the first record at or after it; none after the last.
    assert offsets("--topic-partitions", "offs:0,offs:10", "--time", str(base + 25)) \
        == ["offs:0:3", "offs:10:0"]
    assert offsets("--topic", "offs", "--time", str(base + 101)) == []
    assert offsets("--topic", "offs", "--partitions", "0", "--time", "max-timestamp") \
        == ["offs:0:4"]
    # Internal topics are in unless excluded. A group commit makes __consumer_offsets.
    committed = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "offs-group", [TopicPartition("offs", 0, 1)])])
    committed["offs-group"].result(15)
    everything = offsets("--partitions", "0")
    assert "offs:0:5" in everything
    assert any(line.startswith("__consumer_offsets:0:") for line in everything)
    assert not any(line.startswith("__") for line in offsets("--partitions", "0",
                                                               "--exclude-internal-topics"))
    bad = cli("get-offsets", "--bootstrap-server", b, "--topic", "nothing-like-it")
    assert bad.returncode == 2
    assert "Could not match any topic-partitions with the specified filters" in bad.stderr
    bad = cli("get-offsets", "--bootstrap-server", b, "--topic", "offs", "--topic-partitions", "x")
    assert bad.returncode == 2 and "cannot be used with --topic" in bad.stderr


def test_cli_log_dirs(cluster: LocalCluster) -> None:
    """kafka-log-dirs.sh --describe: every broker's directory, each replica's
    size on disk (the same on every broker, as they hold the same records)."""
    b = cluster.bootstrap_servers
    create_with_cli(cluster, "dirs", 2)
    producer = Producer({"bootstrap.servers": b, "acks": "all"})
    for _ in range(20):
        producer.produce("dirs", b"x" * 100, partition=1)
    assert producer.flush(20) == 0

    def described() -> dict[int, dict[str, tuple[int, int]]]:
        out = cli("log-dirs", "--describe", "--bootstrap-server", b, "--topic-list", "dirs")
        assert out.returncode == 0, out.stderr
        querying, received, line = out.stdout.splitlines()
        assert querying == "Querying brokers for log directories information"
        assert received == "Received log directory information from brokers 1,2,3"
        answer = json.loads(line)
        assert answer["version"] == 1
        sizes = {}
        for broker in answer["brokers"]:
            (log_dir,) = broker["logDirs"]
            assert log_dir["error"] is None and log_dir["logDir"]
            assert not any(p["isFuture"] for p in log_dir["partitions"])
            sizes[broker["broker"]] = {p["partition"]: (p["size"], p["offsetLag"])
                                       for p in log_dir["partitions"]}
        # Followers take a fetch to catch up (their size and lag then settle).
        assert len({tuple(sorted(s.items())) for s in sizes.values()}) == 1, sizes
        return sizes

    sizes = eventually(described)
    assert sorted(sizes) == [1, 2, 3]
    one = sizes[1]
    assert set(one) == {"dirs-0", "dirs-1"}
    assert one["dirs-0"] == (0, 0) and one["dirs-1"][0] > 20 * 100 and one["dirs-1"][1] == 0
    out = cli("log-dirs", "--describe", "--bootstrap-server", b, "--broker-list", "2,9")
    assert out.returncode == 2
    assert "The given brokers do not exist from --broker-list: 9. Current existent brokers: " \
           "1,2,3" in out.stderr


def _leader_and_isr(admin: AdminClient, topic: str, partition: int) -> tuple[int, list[int]]:
    meta = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return int(meta.leader), sorted(int(r) for r in meta.isrs)


def test_preferred_leader_election_after_a_broker_returns(cluster: LocalCluster) -> None:
    """Runs last in this module: it restarts broker 1. Leadership that moved
    away when broker 1 died goes back to it (its preferred replica) on
    ElectLeaders, not only after ``leader.imbalance.check.interval.seconds``."""
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("elect", replica_assignment=[[1, 2, 3], [2, 3, 1]],
                                  num_partitions=2)])[
        "elect"].result(15)
    cluster.wait_topic("elect", 2)

    done = cli("leader-election", "--election-type", "preferred", "--topic", "elect",
               "--partition", "0", "--bootstrap-server", bootstrap)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Valid replica already elected for partitions elect-0"
    # kafka-leader-election.sh's --path-to-json-file: the same, for the partitions listed.
    path = cluster.directory / "elect.json"
    path.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": 0},
                                               {"topic": "elect", "partition": 1}]}))
    listed = cli("leader-election", "--election-type", "preferred", "--path-to-json-file",
                 str(path), "--bootstrap-server", bootstrap)
    assert listed.stdout.strip() == \
        "Valid replica already elected for partitions elect-0, elect-1", listed.stderr

    cluster.kill(1)
    survivors = AdminClient({"bootstrap.servers": ",".join(
        f"{cluster.layout.host}:{n.kafka_port}" for n in cluster.layout.brokers if n.node_id != 1)})

    def moved() -> None:
        assert _leader_and_isr(survivors, "elect", 0)[0] in (2, 3)
    eventually(moved, 20)
    answer = survivors.elect_leaders(ElectionType.PREFERRED,
                                     [TopicPartition("elect", 0)]).result(15)
    (error,) = answer.values()
    assert error is not None and error.name() == "PREFERRED_LEADER_NOT_AVAILABLE"
    refused = cli("leader-election", "--election-type", "PREFERRED", "--topic", "elect",
                  "--partition", "0", "--bootstrap-server", bootstrap)
    assert refused.returncode == 2
    assert "Error completing leader election (PREFERRED) for partition: elect-0: " \
        "PREFERRED_LEADER_NOT_AVAILABLE" in refused.stderr

    cluster.start(1)
    cluster.wait_ready(40)

    def back_in_isr() -> None:
        leader, isr = _leader_and_isr(admin, "elect", 0)
        assert isr == [1, 2, 3] and leader != 1
    eventually(back_in_isr, 30)
    elected = cli("leader-election", "--election-type", "preferred", "--all-topic-partitions",
                  "--bootstrap-server", bootstrap)
    assert elected.returncode == 0, elected.stderr
    first = elected.stdout.splitlines()[0]
    assert first.startswith("Successfully completed leader election (PREFERRED) for partitions ")
    assert "elect-0" in first.split("partitions ", 1)[1].split(", ")
    assert "elect-1" not in elected.stdout  # led by its preferred replica all along

    def back_to_preferred() -> None:
        assert _leader_and_isr(admin, "elect", 0) == (1, [1, 2, 3])
    eventually(back_to_preferred, 10)
    # Now nothing needs an election: confluent-kafka reports it per partition.
    answer = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elect", 0)]).result(15)
    (error,) = answer.values()
    assert error is not None and error.name() == "ELECTION_NOT_NEEDED"


def test_dynamic_broker_configs_per_broker_and_cluster_wide(cluster: LocalCluster) -> None:
    """kafka-configs.sh --entity-type brokers: a per-broker dynamic config
    (message.max.bytes on broker 2 only) and a cluster default
    (log.retention.ms) reach the brokers' topic defaults at once, and
    DescribeConfigs names where each value comes from."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("dyn", 3, 3)])["dyn"].result(15)
    cluster.wait_topic("dyn", 3)
    b = cluster.bootstrap_servers
    out = cli("configs", "alter", "--broker", "2", "--add-config", "message.max.bytes=300",
              "--bootstrap-server", b)
    assert out.returncode == 0 and "Completed updating config for broker 2." in out.stdout
    # (confluent-kafka's AdminClient refuses the empty name of the cluster default.)
    out = cli("configs", "alter", "--broker-defaults", "--add-config", "log.retention.ms=3600000",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    assert "Completed updating default config for brokers in the cluster." in out.stdout
    try:
        # Broker 2 refuses a 1000-byte batch for the partitions it leads; the
        # others still take it (their default is Kafka's).
        leaders = {p.id: p.leader for p in
                   admin.list_topics("dyn", timeout=10).topics["dyn"].partitions.values()}
        producer = Producer({"bootstrap.servers": b, "acks": "all",
                             "message.timeout.ms": 10_000})

        def send(partition: int) -> str:
            outcome: list[str] = []
            producer.produce("dyn", b"x" * 1000, partition=partition,
                             on_delivery=lambda err, msg: outcome.append(
                                 "ok" if err is None else str(err.name())))
            producer.flush(15)
            return outcome[0]

        def refused_by_broker_2_only() -> None:
            for partition, leader in leaders.items():
                assert send(partition) == ("MSG_SIZE_TOO_LARGE" if leader == 2 else "ok")
        assert 2 in leaders.values()
        eventually(refused_by_broker_2_only, timeout_s=15)

        def described() -> None:
            two = ConfigResource("broker", "2")
            entries = admin.describe_configs([two])[two].result(10)
            assert (entries["message.max.bytes"].value, entries["message.max.bytes"].source) \
                == ("300", 2)  # DYNAMIC_BROKER_CONFIG
            assert (entries["log.retention.ms"].value, entries["log.retention.ms"].source) \
                == ("3600000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
            # What cannot change at run time is read-only, as in Kafka.
            assert entries["replica.lag.time.max.ms"].is_read_only
            assert not entries["message.max.bytes"].is_read_only
            topic = ConfigResource("topic", "dyn")
            inherited = admin.describe_configs([topic])[topic].result(10)
            assert (inherited["retention.ms"].value, inherited["retention.ms"].source) \
                == ("3600000", 3)
        eventually(described)
        listing = cli("configs", "describe", "--broker", "2", "--bootstrap-server", b)
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.splitlines() == [
            "Dynamic configs for broker 2 are:", "  message.max.bytes=300"]
        listing = cli("configs", "describe", "--broker-defaults", "--bootstrap-server", b)
        # With KIP-966 ELR on (a new cluster's default), the controller
        # writes the cluster-level min.insync.replicas (its static 2), as Kafka's.
        assert listing.stdout.splitlines() == [
            "Default configs for brokers in the cluster are:", "  log.retention.ms=3600000",
            "  min.insync.replicas=2"]
        bad = cli("configs", "alter", "--broker", "2", "--add-config", "retention.ms=5",
                  "--bootstrap-server", b)
        assert bad.returncode != 0 and "INVALID_CONFIG" in bad.stderr + bad.stdout
    finally:
        assert cli("configs", "alter", "--broker", "2", "--delete-config", "message.max.bytes",
                   "--bootstrap-server", b).returncode == 0
        assert cli("configs", "alter", "--broker-defaults", "--delete-config",
                   "log.retention.ms", "--bootstrap-server", b).returncode == 0


def test_cli_client_quotas_alter_describe_and_refuse(cluster: LocalCluster) -> None:
    """`raftlog configs --client/--user` (kafka-configs.sh --entity-type
    clients/users): AlterClientQuotas forwarded by a broker to the
    controller, DescribeClientQuotas answered by brokers (from their image)
    and by controllers."""
    b = cluster.bootstrap_servers
    out = cli("configs", "alter", "--client", "qapp", "--add-config",
              "producer_byte_rate=1048576,consumer_byte_rate=2097152", "--bootstrap-server", b)
    assert out.returncode == 0 and "client-id 'qapp'" in out.stdout, out.stderr
    out = cli("configs", "alter", "--user", "alice", "--client-defaults", "--add-config",
              "producer_byte_rate=100", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr

    def described() -> None:
        text = cli("configs", "describe", "--client", "qapp", "--bootstrap-server", b).stdout
        assert text == ("Quota configs for client-id 'qapp' are "
                        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"), text
    eventually(described)
    pair = cli("configs", "describe", "--user", "alice", "--client",
               "--bootstrap-controller", cluster.bootstrap_controllers).stdout
    assert pair == ("Quota configs for user-principal 'alice', the default client-id are "
                    "producer_byte_rate=100.0\n"), pair
    # Refused with the controller's reason; nothing changes.
    bad = cli("configs", "alter", "--client", "qapp", "--add-config", "request_percentage=0",
              "--bootstrap-server", b)
    assert bad.returncode == 2 and "INVALID_REQUEST" in bad.stderr
    assert "above 0 percent" in bad.stderr
    bad = cli("configs", "alter", "--client", "qapp", "--add-config", "producer_byte_rate=1.5",
              "--bootstrap-server", b)
    assert bad.returncode == 2 and "must be a Long value" in bad.stderr
    bad = cli("configs", "alter", "--client", "--add-config", "producer_byte_rate=1",
              "--bootstrap-server", b)
    assert bad.returncode == 2 and "needs a name" in bad.stderr
    # KIP-612 ip entities: an address (not a hostname), alone, with its one key.
    bad = cli("configs", "alter", "--ip", "not-an-ip", "--add-config",
              "connection_creation_rate=5", "--bootstrap-server", b)
    assert bad.returncode == 2 and "not a valid IP address" in bad.stderr
    bad = cli("configs", "alter", "--ip", "10.1.2.3", "--add-config", "producer_byte_rate=5",
              "--bootstrap-server", b)
    assert bad.returncode == 2 and "ip entity" in bad.stderr
    bad = cli("configs", "alter", "--ip", "10.1.2.3", "--client", "qapp", "--add-config",
              "connection_creation_rate=5", "--bootstrap-server", b)
    assert bad.returncode != 0 and "cannot be combined" in bad.stderr
    out = cli("configs", "alter", "--client", "qapp", "--delete-config", "consumer_byte_rate",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr

    def deleted() -> None:
        text = cli("configs", "describe", "--client", "--bootstrap-server", b).stdout
        assert text == "Quota configs for client-id 'qapp' are producer_byte_rate=1048576.0\n", text
    eventually(deleted)


async def _as_client(cluster: LocalCluster, client_id: str, request: Any, version: int) -> Any:
    node = cluster.layout.node(1)
    client = KafkaProtocolClient(cluster.layout.host, node.kafka_port, client_id=client_id,
                                 request_timeout_ms=15_000)
    try:
        return await client.send(request, version)
    finally:
        await client.close()


def _create_topics(partitions: dict[str, int], version: int) -> Any:
    module = ct7_req if version >= 7 else ct4_req
    return module.CreateTopicsRequest(
        topics=tuple(module.CreatableTopic(
            name=TopicName(name), num_partitions=i32(count), replication_factor=i16(1),
            assignments=(), configs=()) for name, count in partitions.items()),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=15)), validate_only=False)


def test_controller_mutation_quota_refuses_strict_clients_and_throttles_older_ones(
    cluster: LocalCluster,
) -> None:
    """KIP-599: ``controller_mutation_rate`` on a client id. The broker
    forwards CreateTopics/DeleteTopics in an Envelope as the client, and the
    active controller's token bucket (rate 1/s, burst 11) refuses a v6+
    request once overdrawn (THROTTLING_QUOTA_EXCEEDED with the wait), while
    an older version is accepted and only told to wait."""
    b = cluster.bootstrap_servers
    out = cli("configs", "alter", "--entity-type", "clients", "--entity-name", "kip599",
              "--add-config", "controller_mutation_rate=1", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    eventually(lambda: _assert_in(
        "controller_mutation_rate=1.0",
        cli("configs", "describe", "--client", "kip599", "--bootstrap-server", b).stdout))

    def strict_create(partitions: dict[str, int]) -> Any:
        return asyncio.run(_as_client(cluster, "kip599", _create_topics(partitions, 7), 7))

    first = strict_create({"q599-a": 10, "q599-b": 5})  # 11 -> 1 -> -4: both accepted
    assert [(str(t.name), t.error_code) for t in first.topics] == [
        ("q599-a", ErrorCode.none), ("q599-b", ErrorCode.none)]
    refused = strict_create({"q599-c": 1})
    assert [t.error_code for t in refused.topics] == [ErrorCode.throttling_quota_exceeded]
    wait_ms = refused.throttle_time.total_seconds() * 1000
    assert 1000 < wait_ms <= 4000, wait_ms  # about -(-4) / 1 per second
    # An older client is permissive: accepted, and told to back off.
    older = asyncio.run(_as_client(cluster, "kip599", _create_topics({"q599-d": 1}, 4), 4))
    assert [t.error_code for t in older.topics] == [ErrorCode.none]
    assert older.throttle_time.total_seconds() > 1
    # Deleting is charged too (v6 strict), and another client id is not bounded.
    delete = dt6_req.DeleteTopicsRequest(
        topics=(dt6_req.DeleteTopicState(name=TopicName("q599-d"), topic_id=uuid.UUID(int=0)),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=15)))
    denied = asyncio.run(_as_client(cluster, "kip599", delete, 6))
    assert [r.error_code for r in denied.responses] == [ErrorCode.throttling_quota_exceeded]
    # Kafka's ControllerMutation metrics, on the active controller: the
    # client's bucket is below zero, it created 16 partitions.
    series = '{client_id="kip599",user=""}'
    assert metric_total(cluster, "kafka_server_controllermutation_tokens" + series) < 0
    assert metric_total(cluster, "kafka_server_controllermutation_mutation_rate" + series) > 0
    assert metric_total(cluster, "kafka_server_controllermutation_throttle_time" + series) > 0
    other = asyncio.run(_as_client(cluster, "someone-else", delete, 6))
    assert [r.error_code for r in other.responses] == [ErrorCode.none]
    # The CLI (client id raftlog-admin) waits out the throttle time and
    # retries, as Kafka's admin client does.
    out = cli("configs", "alter", "--client", "raftlog-admin", "--add-config",
              "controller_mutation_rate=5", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    try:
        eventually(lambda: _assert_in("controller_mutation_rate=5.0", cli(
            "configs", "describe", "--client", "raftlog-admin", "--bootstrap-server", b).stdout))
        out = cli("topics", "create", "--topic", "q599-big", "--partitions", "60", "--replication-factor",
                  "1", "--bootstrap-server", b)  # 55 -> -5
        assert out.returncode == 0, out.stderr
        started = time.monotonic()
        out = cli("topics", "create", "--topic", "q599-after", "--partitions", "1", "--replication-factor",
                  "1", "--bootstrap-server", b)
        assert out.returncode == 0, out.stderr
        assert time.monotonic() - started >= 0.5  # refused once, retried after about 1 s
    finally:
        out = cli("configs", "alter", "--client", "raftlog-admin", "--delete-config",
                  "controller_mutation_rate", "--bootstrap-server", b)
        assert out.returncode == 0, out.stderr
    for name in ("q599-a", "q599-b", "q599-big", "q599-after"):
        assert cli("topics", "delete", "--topic", name, "--bootstrap-server", b).returncode == 0


def _assert_in(part: str, text: str) -> None:
    assert part in text, text


def test_cli_scram_credentials_alter_describe_and_delete(cluster: LocalCluster) -> None:
    """`raftlog configs --user NAME` with SCRAM mechanisms (kafka-configs.sh
    --entity-type users): AlterUserScramCredentials forwarded by a broker to
    the controller, beside the user's quota (AlterClientQuotas);
    DescribeUserScramCredentials answered by the brokers from their
    metadata image, and read by librdkafka too."""
    from confluent_kafka.admin import ScramMechanism

    b = cluster.bootstrap_servers
    user = "scram-carol"
    both = (f"SCRAM credential configs for user-principal '{user}' are "
            "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n")
    # As kafka-configs.sh: quotas and credentials go in separate commands.
    mixed = cli("configs", "alter", "--user", user, "--add-config",
                "SCRAM-SHA-512=[password=carol-secret],producer_byte_rate=2048",
                "--bootstrap-server", b)
    assert mixed.returncode == 2 and "Cannot alter both quota and SCRAM" in mixed.stderr
    out = cli("configs", "alter", "--user", user, "--add-config",
              "SCRAM-SHA-256=[iterations=8192,password=carol-secret],"
              "SCRAM-SHA-512=[password=carol-secret]", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"Completed updating config for user-principal '{user}'.\n"
    out = cli("configs", "alter", "--user", user, "--add-config", "producer_byte_rate=2048",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr

    def described() -> None:
        text = cli("configs", "describe", "--user", user, "--bootstrap-server", b).stdout
        assert text == (f"Quota configs for user-principal '{user}' are "
                        f"producer_byte_rate=2048.0\n{both}"), text
    eventually(described)
    every = cli("configs", "describe", "--user", "--bootstrap-server", b).stdout
    assert both in every, every
    admin = AdminClient({"bootstrap.servers": b})
    description = admin.describe_user_scram_credentials([user])[user].result(10)
    assert sorted((i.mechanism, i.iterations) for i in description.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    # Refused with the controller's reason; nothing changes.
    bad = cli("configs", "alter", "--user", user, "--add-config",
              "SCRAM-SHA-256=[iterations=100,password=carol-secret]", "--bootstrap-server", b)
    assert bad.returncode == 2 and "UNACCEPTABLE_CREDENTIAL: Too few iterations" in bad.stderr
    assert "carol-secret" not in bad.stderr
    bad = cli("configs", "alter", "--user", "scram-nobody", "--delete-config", "SCRAM-SHA-512",
              "--bootstrap-server", b)
    assert bad.returncode == 2 and "RESOURCE_NOT_FOUND" in bad.stderr
    bad = cli("configs", "alter", "--user-defaults", "--add-config",
              "SCRAM-SHA-256=[password=x]", "--bootstrap-server", b)
    assert bad.returncode == 2 and "named user" in bad.stderr
    for key in ("SCRAM-SHA-256", "producer_byte_rate"):
        out = cli("configs", "alter", "--user", user, "--delete-config", key,
                  "--bootstrap-server", b)
        assert out.returncode == 0, out.stderr

    def deleted() -> None:
        text = cli("configs", "describe", "--user", user, "--bootstrap-controller",
                   cluster.bootstrap_controllers).stdout
        assert text == (f"Quota configs for user-principal '{user}' are \n"
                        f"SCRAM credential configs for user-principal '{user}' are "
                        "SCRAM-SHA-512=iterations=4096\n"), text
    eventually(deleted)
    out = cli("configs", "alter", "--user", user, "--delete-config", "SCRAM-SHA-512",
              "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr

    def gone() -> None:
        text = cli("configs", "describe", "--user", user, "--bootstrap-server", b).stdout
        assert text == f"Quota configs for user-principal '{user}' are \n", text
    eventually(gone)


def test_a_producer_byte_rate_set_through_the_cli_throttles_that_client_only(
    cluster: LocalCluster,
) -> None:
    """End to end: the quota goes through the controller into every broker's
    image; the leader throttles the limited client id (librdkafka reports
    the throttle time) and delivers about the bound, not what the client
    could send; another client id on the same topic is not throttled."""
    b = cluster.bootstrap_servers
    bound = 100_000
    out = cli("configs", "alter", "--client", "qlimited", "--add-config",
              f"producer_byte_rate={bound}", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic("quota-topic", 1, 3)])["quota-topic"].result(20)
    cluster.wait_topic("quota-topic", 1)

    def brokers_have_it() -> None:
        for broker in cluster.layout.nodes:
            assert broker.kafka_port is not None
            text = cli("configs", "describe", "--client", "qlimited", "--bootstrap-server",
                       f"127.0.0.1:{broker.kafka_port}").stdout
            assert f"producer_byte_rate={float(bound)}" in text, text
    eventually(brokers_have_it)

    # The request that takes a client over its bound is still accepted whole
    # (Kafka's too): capping librdkafka's batch (1 MB by default, and what
    # it sends after a mute with a full queue) bounds that overshoot.
    batch = 64 * 1024

    def produce_for(client_id: str, seconds: float) -> tuple[int, int]:
        throttled: list[int] = []

        def stats(text: str) -> None:
            for broker in json.loads(text)["brokers"].values():
                throttled.append(int(broker.get("throttle", {}).get("max", 0)))

        delivered = [0]

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered[0] += len(msg.value())

        p = Producer({"bootstrap.servers": b, "client.id": client_id, "acks": "all",
                      "linger.ms": 5, "batch.size": batch, "statistics.interval.ms": 200,
                      "stats_cb": stats})
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                p.produce("quota-topic", b"q" * 1024, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        done = delivered[0]
        p.poll(0.5)  # one more stats interval
        p.purge()
        p.flush(5)
        return done, max(throttled, default=0)

    seconds = 4.0
    limited, limited_throttle = produce_for("qlimited", seconds)
    # Kafka's rate is measured over at least 10 one-second windows (the
    # oldest may have begun up to one window before the first byte), so
    # about 10 s of the bound goes before the first throttle, then the bound
    # per second, plus the one request that crossed it; far less than an
    # unthrottled producer sends in 4 s on loopback (tens of MB).
    assert limited_throttle > 0
    assert limited <= bound * (10 + 1 + seconds) + 2 * batch, limited
    free, free_throttle = produce_for("qfree", 2.0)
    assert free_throttle == 0
    assert free > limited


def test_cluster_id_and_broker_api_versions(cluster: LocalCluster) -> None:
    """kafka-cluster.sh cluster-id and kafka-broker-api-versions.sh."""
    b = cluster.bootstrap_servers
    out = cli("cluster", "cluster-id", "--bootstrap-server", b)
    assert out.stdout.strip() == f"Cluster ID: {cluster.cluster_id}", out.stderr
    versions = cli("broker-api-versions", "--bootstrap-server", b)
    assert versions.returncode == 0, versions.stderr
    heads = [line for line in versions.stdout.splitlines() if " -> (" in line]
    assert [h.split(" (id: ")[1].split(" ")[0] for h in heads] == ["1", "2", "3"]
    lines = [line.strip().rstrip(",") for line in versions.stdout.splitlines()]
    assert "Produce(0): 3 to 10 [usable: 10]" in lines
    assert "ApiVersions(18): 0 to 4 [usable: 4]" in lines
    assert "ShareFetch(78): UNSUPPORTED" in lines


def test_quorum_describe_through_a_broker(cluster: LocalCluster) -> None:
    """kafka-metadata-quorum.sh --bootstrap-server: a broker forwards
    DescribeQuorum to the active controller; the answer is the controllers'."""
    def status(*where: str) -> dict[str, str]:
        out = cli("quorum", "describe", "--status", *where)
        assert out.returncode == 0, out.stderr
        return dict((k.strip(), v.strip()) for k, v in
                    (line.split(":", 1) for line in out.stdout.splitlines()))

    via_broker = status("--bootstrap-server", cluster.bootstrap_servers)
    via_controller = status("--bootstrap-controller", cluster.bootstrap_controllers)
    assert via_broker["ClusterId"] == via_controller["ClusterId"]
    assert via_broker["CurrentVoters"] == via_controller["CurrentVoters"] == "[1,2,3]"
    assert via_broker["LeaderId"] == via_controller["LeaderId"]
    rows = cli("quorum", "describe", "--replication",
               "--bootstrap-server", cluster.bootstrap_servers.split(",")[0]).stdout.splitlines()
    assert sorted(row.split()[-1] for row in rows[1:]) == ["Follower", "Follower", "Leader"]


def test_cluster_unregister_removes_a_stopped_broker_until_it_registers_again(
    cluster: LocalCluster,
) -> None:
    """kafka-cluster.sh unregister: an unknown id is refused; a stopped
    broker's registration goes; started again, it registers anew. (Last in
    the module: it stops node 3, and leaves the cluster whole again.)"""
    unknown = cli("cluster", "unregister", "--id", "99",
                  "--bootstrap-server", cluster.bootstrap_servers)
    assert unknown.returncode == 2
    assert "BROKER_ID_NOT_REGISTERED" in unknown.stderr

    def brokers() -> set[int]:
        out = cli("cluster", "describe", "--bootstrap-controller", cluster.bootstrap_controllers)
        assert out.returncode == 0, out.stderr
        return {int(line.split("BrokerId:")[1].split()[0])
                for line in out.stdout.splitlines() if "BrokerId:" in line}

    assert brokers() == {1, 2, 3}
    cluster.kill(3, signal.SIGTERM)
    done = cli("cluster", "unregister", "--id", "3", "--bootstrap-server",
               ",".join(cluster.bootstrap_servers.split(",")[:2]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Broker 3 is no longer registered."

    def registered(expected: set[int]) -> Callable[[], None]:
        def check() -> None:  # a follower controller replays the change a moment later
            assert brokers() == expected
        return check

    eventually(registered({1, 2}), timeout_s=15)
    cluster.start(3)
    cluster.wait_ready(timeout_s=60)
    eventually(registered({1, 2, 3}), timeout_s=30)


def test_request_percentage_throttles_a_client_on_brokers_and_controllers(
    cluster: LocalCluster,
) -> None:
    """KIP-124 on a real cluster: ``request_percentage`` on a client id,
    set through the CLI. Its DescribeCluster requests, to a broker and to a
    controller listener, come back with throttle times (DescribeCluster's
    clients do not back off by themselves, so each answer is also held that
    long); another client id is not throttled."""
    b = cluster.bootstrap_servers
    out = cli("configs", "alter", "--client", "kip124", "--add-config",
              "request_percentage=0.01", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    eventually(lambda: _assert_in(
        "request_percentage=0.01",
        cli("configs", "describe", "--client", "kip124", "--bootstrap-server", b).stdout))
    node = cluster.layout.node(1)

    async def describe(port: int, client_id: str, count: int) -> tuple[list[int], float]:
        client = KafkaProtocolClient(cluster.layout.host, port, client_id=client_id,
                                     request_timeout_ms=15_000)
        try:
            started = time.monotonic()
            throttles = []
            for _ in range(count):
                response = await client.send(dc2_req.DescribeClusterRequest(
                    include_cluster_authorized_operations=False,
                    include_fenced_brokers=False), 2)
                throttles.append(int(response.throttle_time.total_seconds() * 1000))
            return throttles, time.monotonic() - started
        finally:
            await client.close()

    for port in (node.kafka_port, node.controller_port):
        assert port is not None

        def throttled(port: int = port) -> None:
            throttles, elapsed = asyncio.run(describe(port, "kip124", 5))
            assert max(throttles) > 0 and all(t <= 1000 for t in throttles), throttles
            assert elapsed >= sum(throttles) / 1000 * 0.9, (elapsed, throttles)
        # The node applies the quota once its metadata has the record.
        eventually(throttled, timeout_s=30)
        throttles, _ = asyncio.run(describe(port, "other", 5))
        assert throttles == [0] * 5
    out = cli("configs", "alter", "--client", "kip124", "--delete-config",
              "request_percentage", "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
