"""``raftlog cluster up --tls``: a local cluster whose every listener is SSL,
with a throwaway CA and certificates written under ``DIR/tls``, as a user
would try TLS clients out. The CLI (with the written client.properties) and
confluent-kafka (with the printed settings, with and without a client
certificate) produce and consume; a PLAINTEXT client is refused with a hint;
a restart of the same directory keeps TLS."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import cli
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from cryptography.hazmat.primitives.serialization import Encoding

from raftlog.security.tls import TlsSettings, distinguished_name, keystore_certificate


def _free_base_port() -> int:
    """A base port whose Kafka, controller (+1000) and HTTP (+2000) ranges are free."""
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(20000, 27000)
        ports = [base + offset + i for offset in (0, 1000, 2000) for i in range(3)]
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    directory = tmp_path_factory.mktemp("tls-up")
    up = cli("cluster", "up", "--tls", "--detach", "--dir", str(directory),
             "--base-port", str(_free_base_port()), timeout_s=120)
    try:
        assert up.returncode == 0, (up.stdout, up.stderr)
        yield directory, up.stdout, up.stdout.strip().splitlines()[-1]
    finally:
        cli("cluster", "down", "--dir", str(directory))


def test_up_prints_the_tls_files_and_ends_with_the_bootstrap_servers(
    tls_cluster: tuple[Path, str, str],
) -> None:
    directory, out, bootstrap = tls_cluster
    tls = directory / "tls"
    assert bootstrap.count("127.0.0.1:") == 3  # --detach: the last line
    assert "TLS: every listener is SSL" in out
    assert f"--command-config {tls / 'client.properties'}" in out
    assert f"'ssl.ca.location': '{tls / 'ca.pem'}'" in out
    props = (directory / "node-1" / "server.properties").read_text()
    assert "listener.security.protocol.map=PLAINTEXT:SSL,CONTROLLER:SSL" in props
    assert "ssl.client.auth=requested" in props
    certificate = keystore_certificate(TlsSettings(
        keystore_type="PEM", keystore_location=str(tls / "client.pem")))
    assert certificate is not None
    assert distinguished_name(certificate.public_bytes(Encoding.DER)) == \
        "CN=client,OU=clients,O=raftlog"


def test_the_cli_and_confluent_kafka_produce_and_consume_over_tls(
    tls_cluster: tuple[Path, str, str],
) -> None:
    directory, _, bootstrap = tls_cluster
    tls = directory / "tls"
    config = str(tls / "client.properties")
    made = cli("topics", "create", "--topic", "secure", "--partitions", "3",
               "--replication-factor", "3", "--bootstrap-server", bootstrap,
               "--command-config", config)
    assert made.returncode == 0, made.stderr
    sent = cli("produce", "--topic", "secure", "--acks", "all", "--bootstrap-server", bootstrap,
               "--command-config", config, stdin="".join(f"cli-{i}\n" for i in range(50)))
    assert sent.returncode == 0, sent.stderr
    ca_only = {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
               "ssl.ca.location": str(tls / "ca.pem")}
    with_certificate = {**ca_only, "ssl.certificate.location": str(tls / "client.cert.pem"),
                        "ssl.key.location": str(tls / "client.key.pem")}
    for settings, name in ((ca_only, "anonymous"), (with_certificate, "mutual")):
        producer = Producer({**settings, "acks": "all"})
        for i in range(25):
            producer.produce("secure", f"{name}-{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
    consumer = Consumer({**with_certificate, "group.id": "tls-up", "enable.auto.commit": False})
    consumer.assign([TopicPartition("secure", p, OFFSET_BEGINNING) for p in range(3)])
    values: set[str] = set()
    for _ in range(100):
        for message in consumer.consume(200, timeout=0.5):
            if message.error() is None:
                values.add(message.value().decode())
        if len(values) >= 100:
            break
    consumer.close()
    assert values == ({f"cli-{i}" for i in range(50)} | {f"anonymous-{i}" for i in range(25)}
                      | {f"mutual-{i}" for i in range(25)})
    read = cli("consume", "--topic", "secure", "--from-beginning", "--max-messages", "100",
               "--bootstrap-server", bootstrap, "--command-config", config)
    assert read.returncode == 0 and len(read.stdout.splitlines()) == 100, read.stderr


def test_a_plaintext_client_is_refused_with_a_hint(tls_cluster: tuple[Path, str, str]) -> None:
    _, _, bootstrap = tls_cluster
    refused = cli("topics", "list", "--bootstrap-server", bootstrap.split(",")[0],
                  "--timeout-ms", "2000")
    assert refused.returncode == 2
    assert "connection closed by peer" in refused.stderr and "--command-config" in refused.stderr
    assert refused.stderr.count(bootstrap.split(",")[0]) == 1, refused.stderr  # said once


def test_a_restart_of_the_directory_keeps_tls(tls_cluster: tuple[Path, str, str]) -> None:
    directory, _, bootstrap = tls_cluster
    config = str(directory / "tls" / "client.properties")
    assert cli("topics", "create", "--topic", "kept", "--bootstrap-server", bootstrap,
               "--command-config", config).returncode == 0
    assert cli("cluster", "down", "--dir", str(directory)).returncode == 0
    again = cli("cluster", "up", "--detach", "--dir", str(directory), timeout_s=120)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert "TLS: every listener is SSL" in again.stdout
    assert again.stdout.strip().splitlines()[-1] == bootstrap
    listed = cli("topics", "list", "--bootstrap-server", bootstrap, "--command-config", config)
    assert "kept" in listed.stdout.split(), listed.stderr
