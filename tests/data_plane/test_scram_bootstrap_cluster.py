"""KIP-900 on a real 3-node cluster: formatted with ``--add-scram``, its only
broker listener speaks SASL with SCRAM-SHA-256 alone, and the brokers
authenticate to each other with the bootstrapped credential from the first
start (acks=all with min.insync.replicas=2 needs both followers' fetches).
``raftlog storage format --add-scram`` writes the bootstrap file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import cli
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from metadata_quorum.bootstrap import BOOTSTRAP_FILE, parse_add_scram, read_bootstrap
from metadata_quorum.features import ELR_FEATURE
from metadata_quorum.records import FeatureLevelRecord

pytestmark = pytest.mark.timeout(240)

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PROPERTIES = {
    "min.insync.replicas": "2",
    "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    "listener.name.plaintext.scram-sha-256.sasl.jaas.config":
        f'{SCRAM} required username="broker" password="broker-secret";',
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(), properties=PROPERTIES)
    records = [parse_add_scram("SCRAM-SHA-256=[name=broker,password=broker-secret]"),
               parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret,"
                               "iterations=8192]")]
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), layout, bootstrap_records=records)
    c.up(timeout_s=60)  # waits for three unfenced brokers, probed over SCRAM
    try:
        yield c
    finally:
        c.stop(timeout_s=10)


def scram(user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password}


def test_a_scram_only_cluster_replicates_with_its_bootstrapped_credentials(
    cluster: LocalCluster,
) -> None:
    assert cluster.client_security.sasl is not None
    assert cluster.client_security.sasl.mechanism == "SCRAM-SHA-256"
    alice = scram("alice", "alice-secret")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **alice})
    for future in admin.create_topics([NewTopic("boot", 1, 3)]).values():
        future.result(30)
    delivered: list[object] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **alice})
    for i in range(100):
        producer.produce("boot", str(i).encode(), partition=0,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * 100  # both followers fetched, logged in as broker
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "boot",
                         "enable.auto.commit": False, **alice})
    consumer.assign([CTP("boot", 0, 0)])
    values: list[int] = []
    while len(values) < 100:
        msg = consumer.poll(10.0)
        assert msg is not None, values
        if msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(100))
    described = cli("configs", "describe", "--user", "alice", "--bootstrap-server",
                    cluster.bootstrap_servers, "--command-config", _alice_config(cluster))
    assert described.returncode == 0, described.stderr
    assert "SCRAM-SHA-256=iterations=8192" in described.stdout, described.stdout


def _alice_config(cluster: LocalCluster) -> str:
    path = cluster.directory / "alice.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                    "sasl.username=alice\nsasl.password=alice-secret\n", encoding="utf-8")
    return str(path)


def _single_node_config(tmp_path: Path) -> Path:
    """A combined node's server.properties, for ``storage format`` only."""
    config = tmp_path / "server.properties"
    config.write_text(
        "node.id=1\nprocess.roles=broker,controller\n"
        "controller.quorum.voters=1@127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n"
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        f"log.dirs={tmp_path / 'data'}\n", encoding="utf-8")
    return config


def test_storage_format_add_scram_writes_the_bootstrap_file(tmp_path: Path) -> None:
    config = _single_node_config(tmp_path)
    cluster_id = cli("storage", "random-uuid").stdout.strip()
    out = cli("storage", "format", "--config", str(config), "--cluster-id", cluster_id,
              "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
              "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "data" / BOOTSTRAP_FILE).is_file()
    records = read_bootstrap(str(tmp_path / "data"))
    # A new cluster's feature levels first (KIP-966 ELR on), then the credentials.
    assert records[0] == FeatureLevelRecord(ELR_FEATURE, 1)
    assert [(r.name, r.mechanism.mechanism_name) for r in records[1:]] == [  # type: ignore[union-attr]
        ("admin", "SCRAM-SHA-512"), ("admin", "SCRAM-SHA-256")]
    bad = cli("storage", "format", "--config", str(config), "--cluster-id", cluster_id,
              "--ignore-formatted", "--add-scram", "SCRAM-SHA-256=[name=admin]")
    assert bad.returncode == 2 and "needs name= and password=" in bad.stderr, bad.stderr


def test_storage_format_feature_levels(tmp_path: Path) -> None:
    """``--feature`` (kafka-storage format's): ELR is on unless formatted at
    level 0; an unknown feature or level is a readable error."""
    config = _single_node_config(tmp_path)
    cluster_id = cli("storage", "random-uuid").stdout.strip()
    for spec, error in (("eligible.leader.replicas.version=2", "level 2 is not supported (0-1)"),
                        ("metadata.version=21", "unknown feature 'metadata.version'"),
                        ("eligible.leader.replicas.version", "is not NAME=LEVEL")):
        bad = cli("storage", "format", "--config", str(config), "--cluster-id", cluster_id,
                  "--feature", spec)
        assert bad.returncode == 2 and error in bad.stderr, bad.stderr
    out = cli("storage", "format", "--config", str(config), "--cluster-id", cluster_id,
              "--feature", "eligible.leader.replicas.version=0")
    assert out.returncode == 0, out.stderr
    assert read_bootstrap(str(tmp_path / "data")) == ()  # nothing to bootstrap: ELR off
