"""TLS on real 3-node clusters: Kafka's SSL and SASL_SSL listeners.

The mutual-TLS cluster's broker and controller listeners are SSL with
``ssl.client.auth=required``: the quorum runs over TLS, the brokers
replicate to each other with their own certificate (acks=all with min.insync.replicas=2 needs both
followers), every client must present a certificate signed by the cluster's
CA, and the principal is the certificate's subject, mapped by
``ssl.principal.mapping.rules`` and checked against ACLs. A client without a
certificate, with one from another CA, or not trusting the brokers' CA gets
nothing. The SASL_SSL cluster encrypts with TLS and names clients by their
SASL login (PLAIN and SCRAM)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import cli, eventually, metric_total, rest_produce
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from raftlog.security import dev_pki

pytestmark = pytest.mark.timeout(300)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Client certificates (OU=clients) are named by their CN; anything else
# (the brokers' certificate) by its whole subject.
MAPPING = "RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT"
BROKER_PRINCIPAL = "User:CN=broker,OU=brokers,O=raftlog"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    return dev_pki.make_pki(tmp_path_factory.mktemp("pki"), servers=("broker",),
                            clients=("admin", "alice", "bob"))


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    """Another CA, trusted by nobody, with a client 'alice' of its own."""
    return dev_pki.make_pki(tmp_path_factory.mktemp("rogue"), servers=(), clients=("alice",))


def _start(directory: Path, properties: dict[str, str]) -> LocalCluster:
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(),
                                 properties={"min.insync.replicas": "2", **properties})
    cluster = LocalCluster(directory, layout)
    cluster.up(timeout_s=60)
    return cluster


@pytest.fixture(scope="module")
def mtls(pki: dev_pki.Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    broker = pki.identities["broker"]
    cluster = _start(tmp_path_factory.mktemp("mtls"), {
        "listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(broker.p12),
        "ssl.keystore.password": pki.password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_pem),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": MAPPING,
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"{BROKER_PRINCIPAL};User:admin",
    })
    try:
        yield cluster
    finally:
        cluster.stop(timeout_s=10)


def tls(pki: dev_pki.Pki, user: str | None, *, ca: Path | None = None) -> dict[str, Any]:
    """librdkafka settings: trust ``ca`` (default: the PKI's CA), present ``user``'s certificate."""
    settings: dict[str, Any] = {"security.protocol": "SSL",
                                "ssl.ca.location": str(ca or pki.ca_pem)}
    if user is not None:
        identity = pki.identities[user]
        settings.update({"ssl.certificate.location": str(identity.cert_pem),
                         "ssl.key.location": str(identity.key_pem)})
    return settings


def command_config(tmp_path: Path, pki: dev_pki.Pki, user: str, *,
                   truststore: Path | None = None) -> str:
    """Kafka-tool client properties: PKCS12 keystore, PEM truststore."""
    path = tmp_path / f"{user}-ssl.properties"
    path.write_text(
        "security.protocol=SSL\n"
        f"ssl.keystore.type=PKCS12\nssl.keystore.location={pki.identities[user].p12}\n"
        f"ssl.keystore.password={pki.password}\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={truststore or pki.ca_pem}\n",
        encoding="utf-8")
    return str(path)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def produce(cluster: LocalCluster, settings: dict[str, Any], topic: str,
            values: range) -> list[str]:
    """Deliver ``values``; the error names, one per record ("" when delivered)."""
    outcomes: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 10_000, "retries": 0, **settings})
    for v in values:
        producer.produce(topic, str(v).encode(), partition=0, on_delivery=lambda err, msg:
                         outcomes.append("" if err is None else err.name()))
    producer.flush(30)
    return outcomes


def test_the_cluster_connects_to_itself_over_tls(
    mtls: LocalCluster, pki: dev_pki.Pki, tmp_path: Path,
) -> None:
    # wait_ready probed every broker's and controller's SSL listener with
    # the nodes' own certificate (Metadata listing all three brokers, a
    # quorum with a leader): the quorum and the brokers' heartbeats ran over
    # mutual TLS as the brokers' certificate, a super user.
    assert mtls.client_security.protocol == "SSL"
    assert mtls.controller_security.protocol == "SSL"
    c = mtls.bootstrap_controllers
    status = ok(cli("quorum", "describe", "--status", "--bootstrap-controller", c,
                    "--command-config", command_config(tmp_path, pki, "admin")))
    assert "CurrentVoters:          [1,2,3]" in status, status
    # bob's certificate is trusted, but bob may not describe the quorum.
    denied = cli("quorum", "describe", "--status", "--bootstrap-controller", c,
                 "--command-config", command_config(tmp_path, pki, "bob"))
    assert denied.returncode == 2 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, \
        denied.stderr


def test_mutual_tls_names_clients_by_certificate_for_acls(
    mtls: LocalCluster, pki: dev_pki.Pki, tmp_path: Path,
) -> None:
    b = mtls.bootstrap_servers
    admin_config = command_config(tmp_path, pki, "admin")
    ok(cli("topics", "create", "--topic", "orders", "--partitions", "1",
           "--replication-factor", "3", "--bootstrap-server", b,
           "--command-config", admin_config))

    # alice's certificate maps to User:alice, who may do nothing yet.
    refused = produce(mtls, tls(pki, "alice"), "orders", range(3))
    assert refused and set(refused) == {"TOPIC_AUTHORIZATION_FAILED"}, refused

    ok(cli("acls", "--add", "--allow-principal", "User:alice", "--producer", "--topic",
           "orders", "--bootstrap-server", b, "--command-config", admin_config))
    listed = ok(cli("acls", "--list", "--topic", "orders", "--bootstrap-server", b,
                    "--command-config", admin_config))
    assert "principal=User:alice" in listed

    def delivered() -> None:
        assert produce(mtls, tls(pki, "alice"), "orders", range(1)) == [""]

    eventually(delivered, timeout_s=20)  # the ACL reaches the leader a moment later
    # acks=all with min.insync.replicas=2: both followers fetched over mutual TLS.
    assert produce(mtls, tls(pki, "alice"), "orders", range(1, 200)) == [""] * 199

    from kafka import KafkaConsumer, TopicPartition  # kafka-python, as the super user

    admin_identity = pki.identities["admin"]
    reader = KafkaConsumer(bootstrap_servers=b, security_protocol="SSL",
                           ssl_cafile=str(pki.ca_pem), ssl_certfile=str(admin_identity.cert_pem),
                           ssl_keyfile=str(admin_identity.key_pem), enable_auto_commit=False,
                           consumer_timeout_ms=15_000)
    reader.assign([TopicPartition("orders", 0)])
    reader.seek(TopicPartition("orders", 0), 0)
    values = [int(m.value) for m in reader][:200]
    reader.close()
    assert values == list(range(200))

    # bob has a certificate from the right CA but no ACL.
    assert set(produce(mtls, tls(pki, "bob"), "orders", range(2))) == \
        {"TOPIC_AUTHORIZATION_FAILED"}


FAILED_AUTHENTICATIONS = ('kafka_server_socket_server_metrics_failed_authentication_total'
                          '{listener="PLAINTEXT"}')


def test_clients_without_a_trusted_certificate_get_nothing(
    mtls: LocalCluster, pki: dev_pki.Pki, rogue: dev_pki.Pki,
) -> None:
    failed_before = metric_total(mtls, FAILED_AUTHENTICATIONS)
    for settings in ({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)},  # none
                     tls(rogue, "alice", ca=pki.ca_pem),  # signed by a CA the brokers distrust
                     {}):  # PLAINTEXT on an SSL port
        admin = AdminClient({"bootstrap.servers": mtls.bootstrap_servers, **settings})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
    # Each refused handshake is a failed authentication, as in Kafka
    # (failed-authentication-total); the node logs it.
    assert metric_total(mtls, FAILED_AUTHENTICATIONS) >= failed_before + 3

    # The client does not trust the brokers' CA: librdkafka says so.
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": mtls.bootstrap_servers, "error_cb": errors.append,
                         "message.timeout.ms": 3000, **tls(pki, "alice", ca=rogue.ca_pem)})
    producer.produce("orders", b"never")
    producer.flush(10)

    def refused() -> None:
        assert any(e.code() == KafkaError._SSL for e in errors), errors

    eventually(refused, timeout_s=15)


def test_the_cli_reports_an_untrusted_broker_certificate(
    mtls: LocalCluster, pki: dev_pki.Pki, rogue: dev_pki.Pki, tmp_path: Path,
) -> None:
    config = command_config(tmp_path, pki, "admin", truststore=rogue.ca_pem)
    started = time.monotonic()
    result = cli("topics", "list", "--bootstrap-server", mtls.bootstrap_servers,
                 "--command-config", config)
    assert result.returncode == 2, (result.stdout, result.stderr)  # one line, no traceback
    assert "TLS handshake" in result.stderr and "certificate" in result.stderr, result.stderr
    assert time.monotonic() - started < 20  # at once, not at the command's timeout


def test_rest_produce_reaches_the_leader_over_tls_and_logins_are_counted(
    mtls: LocalCluster,
) -> None:
    def produced() -> None:
        assert rest_produce(mtls, "orders", "rest", timeout_s=10)["error_code"] == 200

    eventually(produced, timeout_s=20)
    # At least the followers' and the probes' connections.
    assert metric_total(mtls, "kafka_server_socket_server_metrics_successful_authentication_"
                              'total{listener="PLAINTEXT"}') >= 6


# --- SASL_SSL ----------------------------------------------------------------------

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="broker" password="broker-secret" '
              'user_broker="broker-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def sasl_ssl(pki: dev_pki.Pki, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[LocalCluster]:
    cluster = _start(tmp_path_factory.mktemp("sasl-ssl"), {
        "listener.security.protocol.map": "PLAINTEXT:SASL_SSL,CONTROLLER:PLAINTEXT",
        # A PEM keystore (KIP-651): key and chain in one file.
        "listener.name.plaintext.ssl.keystore.type": "PEM",
        "listener.name.plaintext.ssl.keystore.location": str(pki.identities["broker"].pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_pem),
        # Not for SASL_SSL without the listener prefix (KIP-684): ignored.
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    })
    try:
        yield cluster
    finally:
        cluster.stop(timeout_s=10)


def sasl_tls(pki: dev_pki.Pki, user: str, password: str,
             mechanism: str = "PLAIN") -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_pem),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def test_sasl_ssl_logins_over_tls_without_client_certificates(
    sasl_ssl: LocalCluster, pki: dev_pki.Pki, tmp_path: Path,
) -> None:
    assert sasl_ssl.client_security.protocol == "SASL_SSL"
    b = sasl_ssl.bootstrap_servers
    alice = tmp_path / "alice.properties"
    alice.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     "sasl.username=alice\nsasl.password=alice-secret\n"
                     f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_pem}\n",
                     encoding="utf-8")
    ok(cli("topics", "create", "--topic", "secure", "--partitions", "1",
           "--replication-factor", "3", "--bootstrap-server", b, "--command-config", str(alice)))
    ok(cli("configs", "alter", "--user", "bob", "--add-config",
           "SCRAM-SHA-512=[iterations=4096,password=bob-secret]", "--bootstrap-server", b,
           "--command-config", str(alice)))

    bob = sasl_tls(pki, "bob", "bob-secret", "SCRAM-SHA-512")

    def bob_delivers() -> None:
        assert produce(sasl_ssl, bob, "secure", range(1)) == [""]

    eventually(bob_delivers, timeout_s=20)  # the credential reaches every broker
    assert produce(sasl_ssl, bob, "secure", range(1, 100)) == [""] * 99

    from kafka import KafkaProducer  # kafka-python: PLAIN over SASL_SSL

    other = KafkaProducer(bootstrap_servers=b, acks="all", security_protocol="SASL_SSL",
                          ssl_cafile=str(pki.ca_pem), sasl_mechanism="PLAIN",
                          sasl_plain_username="alice", sasl_plain_password="alice-secret")
    for i in range(100, 150):
        other.send("secure", str(i).encode(), partition=0).get(timeout=30)
    other.close()

    consumer = Consumer({"bootstrap.servers": b, "group.id": "secure",
                         "enable.auto.commit": False, **bob})
    consumer.assign([CTP("secure", 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 150 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(150))

    # CLI consume over SASL_SSL, through librdkafka.
    consumed = ok(cli("consume", "--topic", "secure", "--from-beginning", "--max-messages", "5",
                      "--bootstrap-server", b, "--command-config", str(alice)))
    assert consumed.split() == ["0", "1", "2", "3", "4"]


def test_sasl_ssl_refuses_a_wrong_password_and_plaintext(
    sasl_ssl: LocalCluster, pki: dev_pki.Pki,
) -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": sasl_ssl.bootstrap_servers,
                         "error_cb": errors.append, "message.timeout.ms": 3000,
                         **sasl_tls(pki, "alice", "wrong")})
    producer.produce("secure", b"never")
    producer.flush(10)

    def refused() -> None:
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

    eventually(refused, timeout_s=15)
    # SASL without TLS on a SASL_SSL port gets nothing.
    admin = AdminClient({"bootstrap.servers": sasl_ssl.bootstrap_servers,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": "alice-secret"})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)


def _served_certificate(cluster: LocalCluster, node_id: int, pki: dev_pki.Pki) -> bytes:
    """The certificate a new TLS connection to the node's broker listener gets."""
    import socket
    import ssl

    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    admin = pki.identities["admin"]
    context.load_cert_chain(str(admin.cert_pem), str(admin.key_pem))
    port = cluster.layout.node(node_id).kafka_port
    assert port is not None
    with socket.create_connection((cluster.layout.host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=cluster.layout.host) as tls_socket:
        der = tls_socket.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(path: Path) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificates(path.read_bytes())[0].public_bytes(Encoding.DER)


def test_a_brokers_keystore_is_replaced_without_a_restart(
    mtls: LocalCluster, pki: dev_pki.Pki, tmp_path: Path,
) -> None:
    """KIP-226: ``configs alter --broker 1`` with the listener's keystore
    settings; broker 1 checks the new keystore, then loads it as it replays
    the change, and new connections get the renewed certificate."""
    b, admin = mtls.bootstrap_servers, ("--command-config", command_config(tmp_path, pki, "admin"))
    old = _served_certificate(mtls, 1, pki)
    renewed = pki.renew("broker", stem="broker-renewed-1")
    assert old != _der(renewed.cert_pem)
    ok(cli("configs", "alter", "--broker", "1", "--add-config",
           "listener.name.plaintext.ssl.keystore.type=PKCS12,"
           f"listener.name.plaintext.ssl.keystore.location={renewed.p12},"
           f"listener.name.plaintext.ssl.keystore.password={pki.password}",
           "--bootstrap-server", b, *admin))

    def serves_the_renewed_certificate() -> None:
        assert _served_certificate(mtls, 1, pki) == _der(renewed.cert_pem)

    eventually(serves_the_renewed_certificate, timeout_s=20)
    assert _served_certificate(mtls, 2, pki) == old  # broker 2 was not asked
    described = ok(cli("configs", "describe", "--broker", "1", "--bootstrap-server", b, *admin))
    assert f"listener.name.plaintext.ssl.keystore.location={renewed.p12}" in described
    assert "listener.name.plaintext.ssl.keystore.password=null sensitive=true" in described
    assert pki.password not in described

    # Another subject (alice's certificate), or a wrong password, is refused
    # by broker 1 before it reaches the metadata log.
    for location, password, words in (
            (pki.identities["alice"].p12, pki.password, "subject"),
            (renewed.p12, "not-the-password-42", "ssl.keystore.password")):
        refused = cli("configs", "alter", "--broker", "1", "--add-config",
                      "listener.name.plaintext.ssl.keystore.type=PKCS12,"
                      f"listener.name.plaintext.ssl.keystore.location={location},"
                      f"listener.name.plaintext.ssl.keystore.password={password}",
                      "--bootstrap-server", b, *admin)
        assert refused.returncode == 2 and "INVALID_CONFIG" in refused.stderr \
            and words in refused.stderr, refused.stderr
        assert "not-the-password-42" not in refused.stderr
    assert _served_certificate(mtls, 1, pki) == _der(renewed.cert_pem)
    # Per broker only, as in Kafka.
    refused = cli("configs", "alter", "--broker-defaults", "--add-config",
                  f"listener.name.plaintext.ssl.keystore.location={renewed.p12}",
                  "--bootstrap-server", b, *admin)
    assert refused.returncode == 2 and "broker id must be specified" in refused.stderr, \
        refused.stderr
    # Replication still runs over the listener, new connections included.
    ok(cli("topics", "create", "--topic", "after-rotation", "--partitions", "3",
           "--replication-factor", "3", "--bootstrap-server", b, *admin))

    def replicated() -> None:
        assert produce(mtls, tls(pki, "admin"), "after-rotation", range(3)) == [""] * 3

    eventually(replicated, timeout_s=20)


def test_acknowledged_records_survive_a_leader_kill_over_mutual_tls(
    mtls: LocalCluster, pki: dev_pki.Pki, tmp_path: Path,
) -> None:
    """SIGKILL the partition leader during an acks=all produce over TLS: the
    client reconnects over TLS to the new leader, every acknowledged record
    is read back, and the restarted node rejoins the ISR (its fetchers dial
    the leader over TLS again). Last in the module: it restarts a node."""
    import threading

    b, admin = mtls.bootstrap_servers, ("--command-config", command_config(tmp_path, pki, "admin"))
    ok(cli("topics", "create", "--topic", "failover", "--partitions", "1",
           "--replication-factor", "3", "--bootstrap-server", b, *admin))
    settings = tls(pki, "admin")
    client = AdminClient({"bootstrap.servers": b, **settings})

    def leader_and_isr() -> tuple[int, int]:
        topic = client.list_topics("failover", timeout=10).topics["failover"]
        assert 0 in topic.partitions, topic.error  # every broker has the topic a moment later
        partition = topic.partitions[0]
        return int(partition.leader), len(partition.isrs)

    def full_isr() -> None:
        assert leader_and_isr()[1] == 3

    eventually(full_isr, timeout_s=20)
    acked: list[int] = []
    producer = Producer({"bootstrap.servers": b, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60_000, **settings})
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            producer.produce("failover", str(i).encode(), partition=0, on_delivery=lambda err, msg:
                             acked.append(int(msg.value())) if err is None else None)
            producer.poll(0.002)
            i += 1
        producer.flush(60)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        time.sleep(1.5)
        leader = leader_and_isr()[0]
        mtls.kill(leader)
        time.sleep(3)
        mtls.start(leader)
        time.sleep(2)
    finally:
        stop.set()
        worker.join(90)
    assert len(acked) > 100, len(acked)
    eventually(full_isr, timeout_s=60)  # the restarted node caught up over TLS
    consumer = Consumer({"bootstrap.servers": b, "group.id": "failover",
                         "enable.auto.commit": False, **settings})
    consumer.assign([CTP("failover", 0, 0)])
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while not set(acked) <= seen and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen.add(int(msg.value()))
    consumer.close()
    print(f"killed node {leader}; {len(acked)} acknowledged, "
          f"{len(set(acked) & seen)} of them read back")
    assert not set(acked) - seen, f"{len(set(acked) - seen)} acknowledged records lost"
