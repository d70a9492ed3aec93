"""SASL authentication on a real 3-node cluster whose broker listener is
SASL_PLAINTEXT (KIP-43): real clients (librdkafka, kafka-python) log in with
PLAIN, the brokers replicate to each other over the same listener with
their own PLAIN credentials (acks=all with min.insync.replicas=2 needs
them), a wrong password is refused with Kafka's error, and a client
without SASL gets nothing. The `raftlog` CLI logs in with
``--command-config``, and a SCRAM user it creates (KIP-554) logs in with
SCRAM-SHA-256 and -512 until a mechanism is deleted. A delegation token
(KIP-48) made with the CLI logs its owner in over SCRAM until it is expired
or swept, and may not ask for tokens itself."""

from __future__ import annotations

import base64
import datetime
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    cli,
    eventually,
    http_base,
    metric_total,
    module_cluster_with,
    rest_produce,
)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(240)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_alice="alice-secret";')

PROPERTIES = {
    "min.insync.replicas": "2",
    # The local layout's broker listener is named PLAINTEXT; mapping it to
    # SASL_PLAINTEXT is how Kafka names a listener's protocol.
    "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
    "connection.failed.authentication.delay.ms": "200",
    # KIP-368: PLAIN sessions on the broker listener last 3 s. Clients (and
    # the nodes' own fetchers and calls, which log in with PLAIN) must log
    # in again before then; every test here runs under it.
    "listener.name.plaintext.plain.connections.max.reauth.ms": "3000",
    # KIP-48: delegation tokens, swept a second after they expire.
    "delegation.token.secret.key": "sasl-cluster-token-secret",
    "delegation.token.expiry.check.interval.ms": "1000",
}


cluster = module_cluster_with(PROPERTIES, up_timeout_s=60)


_AUTHENTICATIONS = ('kafka_server_socket_server_metrics_{}_authentication_total'
                    '{{listener="PLAINTEXT"}}')
_REAUTHENTICATIONS = ('kafka_server_socket_server_metrics_successful_reauthentication_total'
                      '{listener="PLAINTEXT"}')


def sasl(user: str, password: str, mechanism: str = "PLAIN") -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def _create(cluster: LocalCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers,
                         **sasl("alice", "alice-secret")})
    for future in admin.create_topics([NewTopic(topic, 1, 3)]).values():
        future.result(30)


def test_the_cluster_authenticates_itself_and_reports_its_credentials(
    cluster: LocalCluster,
) -> None:
    # wait_ready probed every broker's SASL listener with the nodes' own
    # credentials (Metadata listing all three brokers).
    credentials = cluster.client_security.sasl
    assert credentials is not None
    assert cluster.client_security.protocol == "SASL_PLAINTEXT"
    assert (credentials.mechanism, credentials.username) == ("PLAIN", "broker")


def test_plain_clients_produce_acks_all_and_consume_over_sasl(cluster: LocalCluster) -> None:
    _create(cluster, "sasl-plain")
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, **sasl("alice", "alice-secret")})
    for i in range(200):
        producer.produce("sasl-plain", str(i).encode(), partition=0,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * 200  # acks=all: two followers fetched over SASL

    from kafka import KafkaProducer  # kafka-python: SaslHandshake + SaslAuthenticate too

    other = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="alice", sasl_plain_password="alice-secret")
    for i in range(200, 250):
        other.send("sasl-plain", str(i).encode(), partition=0).get(timeout=30)
    other.close()

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "sasl",
                         "enable.auto.commit": False, **sasl("alice", "alice-secret")})
    consumer.assign([CTP("sasl-plain", 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 250 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(250))


def test_sessions_end_and_clients_log_in_again_on_their_connections(
    cluster: LocalCluster,
) -> None:
    """KIP-368: with 3 s sessions, librdkafka re-authenticates on its
    connections (SaslHandshake and SaslAuthenticate again) and every record
    of an 8 s trickle is acknowledged; followers keep fetching (acks=all)."""
    _create(cluster, "sasl-reauth")
    before = metric_total(cluster, _REAUTHENTICATIONS)
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         **sasl("alice", "alice-secret")})
    deadline = time.monotonic() + 8
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("sasl-reauth", str(sent).encode(), partition=0,
                         on_delivery=lambda err, msg: delivered.append(err))
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert delivered == [None] * sent
    # Each of the producer's connections logged in again at least once.
    eventually(lambda: _more(metric_total(cluster, _REAUTHENTICATIONS), before, 2),
               timeout_s=10)


def _more(now: float, before: float, by: int) -> None:
    assert now >= before + by, (before, now)


def test_a_wrong_password_is_refused_with_kafkas_error(cluster: LocalCluster) -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "error_cb": errors.append, "message.timeout.ms": 3000,
                         **sasl("alice", "wrong")})
    producer.produce("sasl-plain", b"never")
    producer.flush(10)

    def refused() -> None:
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

    eventually(refused, timeout_s=15)
    assert any("Invalid username or password" in e.str() for e in errors), errors


def test_a_client_without_sasl_gets_no_answer(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)




def test_rest_produce_goes_through_the_sasl_listener_and_logins_are_counted(
    cluster: LocalCluster,
) -> None:
    # The REST API reaches partition leaders over the inter-broker listener,
    # authenticating with the node's own credentials.
    assert rest_produce(cluster, "sasl-plain", "rest")["offset"] >= 250

    def counted() -> None:
        # At least the fetchers' and the clients' logins; the wrong password above.
        assert metric_total(cluster, _AUTHENTICATIONS.format("successful")) >= 6
        assert metric_total(cluster, _AUTHENTICATIONS.format("failed")) >= 1

    eventually(counted, timeout_s=10)


# --- the CLI's --command-config, and SCRAM users -------------------------------------------

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _command_config(tmp_path: Path, name: str, mechanism: str, module: str, user: str,
                    password: str) -> str:
    """A kafka-topics.sh style ``--command-config`` file (Java JAAS syntax)."""
    path = tmp_path / f"{name}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config={module} required \\\n"
        f'    username="{user}" password="{password}";\n', encoding="utf-8")
    return str(path)


def _alice(tmp_path: Path) -> str:
    return _command_config(tmp_path, "alice", "PLAIN", PLAIN_MODULE, "alice", "alice-secret")


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _login(cluster: LocalCluster, config: dict[str, Any], timeout_s: float = 5.0) -> str | None:
    """A fresh librdkafka client's first Metadata with ``config``: None once
    it is answered, else the authentication error librdkafka reported."""
    errors: list[KafkaError] = []
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers,
                          "error_cb": errors.append, **config})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=0.5)
            return None
        except KafkaException:
            client.poll(0)  # serves error_cb
            refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
            if refused:
                return str(refused[0].str())
    raise AssertionError(f"neither an answer nor a refusal in {timeout_s} s: {errors}")


def test_the_cli_creates_describes_produces_and_consumes_with_a_plain_command_config(
    cluster: LocalCluster, tmp_path: Path,
) -> None:
    b, config = cluster.bootstrap_servers, _alice(tmp_path)
    created = _ok(cli("topics", "create", "--topic", "cli-sasl", "--partitions", "1",
                      "--replication-factor", "3", "--bootstrap-server", b,
                      "--command-config", config))
    assert created.strip() == "Created topic cli-sasl."
    described = _ok(cli("topics", "describe", "--topic", "cli-sasl", "--bootstrap-server", b,
                        "--command-config", config))
    assert "ReplicationFactor: 3" in described and "\tPartition: 0\tLeader: " in described
    lines = [f"event {i}" for i in range(20)]
    _ok(cli("produce", "--topic", "cli-sasl", "--acks", "all", "--bootstrap-server", b,
            "--command-config", config, stdin="\n".join(lines) + "\n"))
    consumed = cli("consume", "--topic", "cli-sasl", "--from-beginning", "--max-messages", "20",
                   "--timeout-ms", "15000", "--bootstrap-server", b, "--command-config", config)
    assert _ok(consumed).splitlines() == lines
    assert "Processed a total of 20 messages" in consumed.stderr


def test_without_a_command_config_the_cli_fails_readably(cluster: LocalCluster) -> None:
    # The listener closes a connection that sends anything but ApiVersions
    # or SaslHandshake before it authenticated; the admin client retries the
    # brokers until --timeout-ms and reports the last failure.
    started = time.monotonic()
    result = cli("topics", "list", "--bootstrap-server", cluster.bootstrap_servers,
                 "--timeout-ms", "2000", timeout_s=30)
    assert time.monotonic() - started < 15
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("raftlog: 127.0.0.1:"), line
    assert "connection closed by peer" in line or "read failed" in line, line
    assert result.stdout == ""


def test_groups_list_and_describe_with_a_command_config(
    cluster: LocalCluster, tmp_path: Path,
) -> None:
    b, config = cluster.bootstrap_servers, _alice(tmp_path)
    _create(cluster, "sasl-groups")
    _ok(cli("produce", "--topic", "sasl-groups", "--bootstrap-server", b,
            "--command-config", config, stdin="".join(f"{i}\n" for i in range(5))))
    # A group member that commits what it printed.
    read = cli("consume", "--topic", "sasl-groups", "--group", "sasl-group", "--from-beginning",
               "--max-messages", "5", "--timeout-ms", "20000", "--bootstrap-server", b,
               "--command-config", config)
    assert _ok(read).splitlines() == [str(i) for i in range(5)]
    listed = _ok(cli("groups", "list", "--bootstrap-server", b, "--command-config", config))
    assert "sasl-group" in listed.splitlines()
    described = _ok(cli("groups", "describe", "sasl-group", "--bootstrap-server", b,
                        "--command-config", config))
    row = next(line.split() for line in described.splitlines()
               if line.startswith("sasl-group "))
    assert row[1:6] == ["sasl-groups", "0", "5", "5", "0"]  # TOPIC PARTITION CURRENT LOG-END LAG


def test_a_scram_user_made_with_the_cli_logs_in_until_its_mechanism_is_deleted(
    cluster: LocalCluster, tmp_path: Path,
) -> None:
    b, alice = cluster.bootstrap_servers, _alice(tmp_path)
    added = _ok(cli("configs", "alter", "--user", "bob", "--add-config",
                    "SCRAM-SHA-256=[iterations=8192,password=bob-secret],"
                    "SCRAM-SHA-512=[password=bob-secret]",
                    "--bootstrap-server", b, "--command-config", alice))
    assert added.strip() == "Completed updating config for user-principal 'bob'."
    bob_256, bob_512 = sasl("bob", "bob-secret", "SCRAM-SHA-256"), sasl(
        "bob", "bob-secret", "SCRAM-SHA-512")

    def logs_in() -> None:  # every broker replays the credential a moment later
        for _ in range(3):
            assert _login(cluster, bob_256) is None

    eventually(logs_in, timeout_s=20)
    _create(cluster, "sasl-scram")

    # SCRAM-SHA-256 with librdkafka: produce (acks=all) and consume.
    producer = Producer({"bootstrap.servers": b, "acks": "all", **bob_256})
    for i in range(10):
        producer.produce("sasl-scram", str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": b, "group.id": "bob", "enable.auto.commit": False,
                         **bob_256})
    consumer.assign([CTP("sasl-scram", 0, 0)])
    values = _poll_values(consumer, 10)
    consumer.close()
    assert values == list(range(10))

    # SCRAM-SHA-512 with kafka-python.
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    scram_512 = {"bootstrap_servers": b, "security_protocol": "SASL_PLAINTEXT",
                 "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "bob",
                 "sasl_plain_password": "bob-secret"}
    other = KafkaProducer(acks="all", **scram_512)
    for i in range(10, 15):
        other.send("sasl-scram", str(i).encode(), partition=0).get(timeout=30)
    other.close()
    reader = KafkaConsumer(consumer_timeout_ms=10_000, **scram_512)
    reader.assign([KTP("sasl-scram", 0)])
    reader.seek(KTP("sasl-scram", 0), 0)
    seen = [int(record.value) for _, record in zip(range(15), reader, strict=False)]
    reader.close()
    assert seen == list(range(15))

    # The CLI logs in with a SCRAM command config too.
    bob_file_256 = _command_config(tmp_path, "bob-256", "SCRAM-SHA-256", SCRAM_MODULE, "bob",
                                   "bob-secret")
    assert "sasl-scram" in _ok(cli("topics", "list", "--bootstrap-server", b,
                                   "--command-config", bob_file_256)).splitlines()

    # A wrong password is refused with Kafka's SCRAM error.
    refusal = _login(cluster, sasl("bob", "wrong", "SCRAM-SHA-256"))
    assert refusal is not None and "invalid credentials with SASL mechanism SCRAM-SHA-256" in (
        refusal), refusal

    # Deleting one mechanism ends its logins; the other still works.
    _ok(cli("configs", "alter", "--user", "bob", "--delete-config", "SCRAM-SHA-256",
            "--bootstrap-server", b, "--command-config", alice))

    def refused() -> None:
        for _ in range(3):  # a fresh client each time: any broker may be asked
            assert _login(cluster, bob_256) is not None

    eventually(refused, timeout_s=20)
    assert _login(cluster, bob_512) is None
    bob_file_512 = _command_config(tmp_path, "bob-512", "SCRAM-SHA-512", SCRAM_MODULE, "bob",
                                   "bob-secret")
    assert "sasl-scram" in _ok(cli("topics", "list", "--bootstrap-server", b,
                                   "--command-config", bob_file_512)).splitlines()
    # The CLI does not retry a refused login until its timeout: it says why.
    started = time.monotonic()
    gone = cli("topics", "list", "--bootstrap-server", b, "--command-config", bob_file_256)
    assert time.monotonic() - started < 10  # --timeout-ms is 15 s
    assert gone.returncode == 2
    [line] = [text for text in gone.stderr.splitlines() if text.startswith("raftlog: ")]
    assert line.endswith("sasl_authentication_failed: Authentication failed during "
                         "authentication due to invalid credentials with SASL mechanism "
                         "SCRAM-SHA-256"), line


def _poll_values(consumer: Consumer, count: int, timeout_s: float = 30) -> list[int]:
    values: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    return values


def test_user_quotas_measure_the_authenticated_user(cluster: LocalCluster, tmp_path: Path) -> None:
    """A producer_byte_rate for --user alice binds alice's connections: the
    leader measures her under (user alice, client id), not ANONYMOUS."""
    b, config = cluster.bootstrap_servers, _alice(tmp_path)
    _ok(cli("configs", "alter", "--user", "alice", "--add-config", "producer_byte_rate=10485760",
            "--bootstrap-server", b, "--command-config", config))

    def everywhere() -> None:
        for node in cluster.layout.nodes:
            text = _ok(cli("configs", "describe", "--user", "alice", "--bootstrap-server",
                           f"127.0.0.1:{node.kafka_port}", "--command-config", config))
            assert "producer_byte_rate=10485760.0" in text, text
    eventually(everywhere, timeout_s=20)
    _create(cluster, "sasl-quota")
    producer = Producer({"bootstrap.servers": b, "acks": "all", "client.id": "quota-app",
                         **sasl("alice", "alice-secret")})
    for i in range(20):
        producer.produce("sasl-quota", str(i).encode(), partition=0)
    assert producer.flush(30) == 0

    def measured() -> None:
        text = "".join(urllib.request.urlopen(http_base(cluster, n) + "/metrics", timeout=10)
                       .read().decode() for n in (1, 2, 3))
        # A user quota's sensor is the user's, shared by its client ids
        # (Kafka's (user, "") sensor): its series names alice.
        series = [line for line in text.splitlines()
                  if line.startswith('kafka_server_produce_byte_rate{client_id="",user="alice"}')]
        assert series and any(float(line.split()[-1]) > 0 for line in series), series
        assert 'user="ANONYMOUS"' not in text

    eventually(measured, timeout_s=10)
    _ok(cli("configs", "alter", "--user", "alice", "--delete-config", "producer_byte_rate",
            "--bootstrap-server", b, "--command-config", config))


# --- delegation tokens (KIP-48) --------------------------------------------------------------


def _token_config(tmp_path: Path, name: str, token_id: str, hmac: str) -> str:
    """kafka-delegation-tokens.sh's documented client config for a token."""
    path = tmp_path / f"{name}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.jaas.config={SCRAM_MODULE} required \\\n"
        f'    username="{token_id}" password="{hmac}" tokenauth="true";\n', encoding="utf-8")
    return str(path)


def _tokens(b: str, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("delegation-tokens", "--bootstrap-server", b, "--command-config", config,
               "--timeout-ms", "15000", *args)


def _fail(what: str) -> None:
    raise AssertionError(what)


def _created(output: str) -> list[str]:
    """The table row of ``--create``: TOKENID HMAC OWNER REQUESTER RENEWERS ..."""
    lines = output.splitlines()
    assert lines[0].startswith("Created delegation token with tokenId : "), output
    assert lines[1].split() == ["TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS",
                                "ISSUEDATE", "EXPIRYDATE", "MAXDATE"]
    return lines[2].split()


def test_a_delegation_token_logs_its_owner_in_until_it_is_expired(
    cluster: LocalCluster, tmp_path: Path,
) -> None:
    b, alice = cluster.bootstrap_servers, _alice(tmp_path)
    row = _created(_ok(_tokens(b, alice, "--create", "--max-life-time-period", "-1",
                               "--renewer-principal", "User:bob")))
    token_id, hmac, owner, requester, renewers = row[:5]
    assert (owner, requester, renewers) == ("User:alice", "User:alice", "[User:bob]")
    token = _token_config(tmp_path, "token", token_id, hmac)

    def logs_in() -> None:  # every broker's image has the token a moment later
        for node in cluster.layout.nodes:
            listed = cli("topics", "list", "--bootstrap-server",
                         f"127.0.0.1:{node.kafka_port}", "--command-config", token,
                         "--timeout-ms", "3000")
            assert listed.returncode == 0, listed.stderr
    eventually(logs_in, timeout_s=20)
    # The token produces and reads as alice.
    _create(cluster, "token-topic")
    _ok(cli("produce", "--topic", "token-topic", "--bootstrap-server", b,
            "--command-config", alice, stdin="one\ntwo\n"))

    # A principal that logged in with a token may not ask for tokens.
    refused = _tokens(b, token, "--describe")
    assert refused.returncode == 2
    assert "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED" in refused.stderr, refused.stderr

    described = _ok(_tokens(b, alice, "--describe")).splitlines()
    assert described[0] == "Total number of tokens : 1"
    assert described[2].split()[:5] == [token_id, hmac, "User:alice", "User:alice", "[User:bob]"]
    assert _ok(_tokens(b, alice, "--describe", "--owner-principal", "User:carol")
               ).splitlines() == ["Total number of tokens : 0"]

    renewed = _ok(_tokens(b, alice, "--renew", "--hmac", hmac, "--renew-time-period", "600000"))
    assert renewed.startswith("Completed renew operation. New expiry date : "), renewed
    wrong = _tokens(b, alice, "--renew", "--hmac", base64.b64encode(b"x" * 64).decode(),
                    "--renew-time-period", "-1")
    assert wrong.returncode == 2 and "DELEGATION_TOKEN_NOT_FOUND" in wrong.stderr, wrong.stderr

    expired = _ok(_tokens(b, alice, "--expire", "--hmac", hmac, "--expiry-time-period", "-1"))
    assert expired.strip() == "Completed expire operation. The token was removed."
    eventually(lambda: _ok(_tokens(b, alice, "--describe")).splitlines() == [
        "Total number of tokens : 0"] or _fail("still described"), timeout_s=20)

    def refused_login() -> None:
        listed = cli("topics", "list", "--bootstrap-server", b, "--command-config", token,
                     "--timeout-ms", "3000")
        assert listed.returncode == 2, listed.stdout
        assert "Authentication failed" in listed.stderr, listed.stderr
    eventually(refused_login, timeout_s=20)


def test_an_expired_token_is_refused_and_swept(cluster: LocalCluster, tmp_path: Path) -> None:
    b, alice = cluster.bootstrap_servers, _alice(tmp_path)
    row = _created(_ok(_tokens(b, alice, "--create", "--max-life-time-period", "600000")))
    token_id, hmac = row[:2]
    # Its life is capped at 600 s: MAXDATE is ten minutes after ISSUEDATE.
    issued, maximum = (datetime.datetime.strptime(row[i], "%Y-%m-%dT%H:%M") for i in (5, 7))
    assert maximum - issued == datetime.timedelta(minutes=10)
    token = _token_config(tmp_path, "short", token_id, hmac)
    eventually(lambda: _ok(cli("topics", "list", "--bootstrap-server", b,
                               "--command-config", token, "--timeout-ms", "3000")),
               timeout_s=20)
    expired = _ok(_tokens(b, alice, "--expire", "--hmac", hmac, "--expiry-time-period", "0"))
    assert expired.startswith("Completed expire operation. New expiry date : "), expired

    def swept() -> None:  # the controller's sweep runs every second here
        assert _ok(_tokens(b, alice, "--describe")).splitlines() == [
            "Total number of tokens : 0"]
    eventually(swept, timeout_s=20)
    refused = cli("topics", "list", "--bootstrap-server", b, "--command-config", token,
                  "--timeout-ms", "3000")
    assert refused.returncode == 2 and "Authentication failed" in refused.stderr, refused.stderr
