"""SASL/OAUTHBEARER on real 3-node clusters (KIP-255, KIP-768), with real
clients.

- *Kafka's default, unsecured tokens*: the broker listener is
  SASL_PLAINTEXT with OAUTHBEARER only; the brokers replicate to each other
  with their own unsecured token (acks=all with min.insync.replicas=2 needs
  them), and the validator requires the scope ``kafka``. librdkafka
  (``enable.sasl.oauthbearer.unsecure.jwt``), kafka-python (a token
  provider) and the CLI (``--command-config``) log in; a token without the
  scope, or expired, is refused and counted.
- *KIP-768, signed JWTs*: OAUTHBEARER is checked against a JWKS file
  (``sasl.oauthbearer.jwks.endpoint.url``) with an expected audience and
  issuer; the brokers replicate over PLAIN on the same listener.
  confluent-kafka's ``oauth_cb`` supplies signed tokens; a token signed by
  another key, or for another audience, is refused; a key added to the
  JWKS while the cluster runs is picked up (the unknown key id asks for an
  early refresh).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cluster_helpers import cli, eventually, metric_total
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka import KafkaProducer  # type: ignore[import-untyped]
from kafka.net.sasl.oauth import AbstractTokenProvider  # type: ignore[import-untyped]
from kio.schema.metadata.v12 import request as md_req

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from raftlog.net import ConnectionSecurity, KafkaProtocolClient
from raftlog.net.errors import SaslAuthenticationFailedError
from raftlog.security.oauthbearer import UnsecuredLogin
from raftlog.security.sasl import SaslCredentials

pytestmark = pytest.mark.timeout(240)

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
FAILED = 'kafka_server_socket_server_metrics_failed_authentication_total{listener="PLAINTEXT"}'


def _cluster(directory: Path, properties: dict[str, str]) -> LocalCluster:
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(), properties={
        "min.insync.replicas": "2",
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "connection.failed.authentication.delay.ms": "100",
        **properties})
    cluster = LocalCluster(directory, layout)
    cluster.up(timeout_s=60)
    return cluster


def _create(cluster: LocalCluster, topic: str, settings: dict[str, Any]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **settings})
    for future in admin.create_topics([NewTopic(topic, 1, 3)]).values():
        future.result(30)


def _produce(cluster: LocalCluster, topic: str, settings: dict[str, Any], values: list[str],
             ) -> list[Any]:
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "error_cb": errors.append, **settings})
    delivered: list[Any] = []
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, m: delivered.append((e, m)))
    producer.flush(30)
    assert [e for e, _ in delivered] == [None] * len(values), (delivered, errors)
    return [m.offset() for _, m in delivered]


def _read(cluster: LocalCluster, topic: str, settings: dict[str, Any], count: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "oauth",
                         "enable.auto.commit": False, **settings})
    consumer.assign([CTP(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.5):
            if message.error() is None:
                values.append(message.value().decode())
    consumer.close()
    return values


def _refused(cluster: LocalCluster, settings: dict[str, Any]) -> None:
    """A producer with ``settings`` gets librdkafka's authentication error."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "error_cb": errors.append,
                         "message.timeout.ms": 3000, **settings})
    producer.produce("never", b"x")
    producer.flush(10)

    def seen() -> None:
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

    eventually(seen, timeout_s=15)


# --- unsecured tokens (Kafka's default validator) -------------------------------------------

BROKER_JAAS = (f'{MODULE} required unsecuredLoginStringClaim_sub="broker" '
               'unsecuredLoginListClaim_scope=",kafka" unsecuredValidatorRequiredScope="kafka";')


@pytest.fixture(scope="module")
def unsecured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = _cluster(tmp_path_factory.mktemp("oauth-unsecured"), {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "listener.name.plaintext.oauthbearer.sasl.jaas.config": BROKER_JAAS,
    })
    try:
        yield cluster
    finally:
        cluster.stop(timeout_s=10)


def unsecured_client(principal: str, scope: str = "kafka") -> dict[str, Any]:
    """librdkafka's own unsecured JWT (its sasl.oauthbearer.config)."""
    config = f"principal={principal}" + (f" scope={scope}" if scope else "")
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": config}


class _Tokens(AbstractTokenProvider):  # type: ignore[misc]
    def __init__(self, make: Callable[[], str]) -> None:
        super().__init__()
        self._make = make

    def token(self) -> str:
        return self._make()


def test_the_brokers_log_in_with_their_own_unsecured_token(unsecured: LocalCluster) -> None:
    credentials = unsecured.client_security.sasl
    assert credentials is not None
    assert (credentials.mechanism, credentials.username) == ("OAUTHBEARER", "broker")


def test_librdkafka_and_kafka_python_produce_acks_all_with_unsecured_tokens(
    unsecured: LocalCluster,
) -> None:
    alice = unsecured_client("alice")
    _create(unsecured, "oauth-unsecured", alice)
    offsets = _produce(unsecured, "oauth-unsecured", alice, [f"rd-{i}" for i in range(100)])
    assert offsets == list(range(100))  # acks=all: both followers fetched over OAUTHBEARER
    login = UnsecuredLogin.from_jaas({"unsecuredLoginStringClaim_sub": "bob",
                                      "unsecuredLoginListClaim_scope": ",kafka"})
    producer = KafkaProducer(
        bootstrap_servers=unsecured.bootstrap_servers.split(","), acks="all",
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=_Tokens(lambda: login.token(int(time.time() * 1000)).value))
    for i in range(20):
        producer.send("oauth-unsecured", f"kp-{i}".encode()).get(timeout=30)
    producer.close()
    values = _read(unsecured, "oauth-unsecured", alice, 120)
    assert values == [f"rd-{i}" for i in range(100)] + [f"kp-{i}" for i in range(20)]


def test_a_token_without_the_required_scope_or_expired_is_refused_and_counted(
    unsecured: LocalCluster,
) -> None:
    failed_before = metric_total(unsecured, FAILED)
    _refused(unsecured, unsecured_client("mallory", scope=""))
    expired = UnsecuredLogin.from_jaas({"unsecuredLoginStringClaim_sub": "old",
                                        "unsecuredLoginListClaim_scope": ",kafka",
                                        "unsecuredLoginLifetimeSeconds": "60"})
    host, port = unsecured.bootstrap_servers.split(",")[0].split(":")

    async def log_in_with_an_expired_token() -> None:
        client = KafkaProtocolClient(host, int(port), request_timeout_ms=5000, security=(
            ConnectionSecurity(sasl=SaslCredentials(
                "OAUTHBEARER", "old", "",
                token=lambda: expired.token(int(time.time() * 1000) - 3_600_000)))))
        try:
            with pytest.raises(SaslAuthenticationFailedError, match="invalid_token"):
                await client.send(md_req.MetadataRequest(
                    topics=(), allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False), 12)
        finally:
            await client.close()

    asyncio.run(log_in_with_an_expired_token())
    assert metric_total(unsecured, FAILED) >= failed_before + 2


def test_the_cli_logs_in_with_an_unsecured_token(unsecured: LocalCluster, tmp_path: Path) -> None:
    config = tmp_path / "oauth.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        f'sasl.jaas.config={MODULE} required unsecuredLoginStringClaim_sub="carol" '
        'unsecuredLoginListClaim_scope=",kafka";\n')
    b = unsecured.bootstrap_servers
    made = cli("topics", "create", "--topic", "oauth-cli", "--replication-factor", "3",
               "--bootstrap-server", b, "--command-config", str(config))
    assert made.returncode == 0, made.stderr
    sent = cli("produce", "--topic", "oauth-cli", "--acks", "all", "--bootstrap-server", b,
               "--command-config", str(config), stdin="one\ntwo\n")
    assert sent.returncode == 0, sent.stderr
    read = cli("consume", "--topic", "oauth-cli", "--from-beginning", "--max-messages", "2",
               "--bootstrap-server", b, "--command-config", str(config))
    assert read.stdout.split() == ["one", "two"], read.stderr


# --- KIP-768: signed JWTs checked against a JWKS ------------------------------------------------


def _rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}


class _Idp:
    """A stand-in identity provider: keys, a JWKS file, signed tokens."""

    def __init__(self, directory: Path) -> None:
        self.jwks = directory / "jwks.json"
        self.keys = {"k1": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
        self.publish()

    def publish(self) -> None:
        self.jwks.write_text(json.dumps(
            {"keys": [_rsa_jwk(key, kid) for kid, key in self.keys.items()]}))

    def token(self, sub: str, *, kid: str = "k1", audience: str = "raftlog",
              key: rsa.RSAPrivateKey | None = None) -> str:
        now = int(time.time())
        return jwt.encode({"sub": sub, "aud": audience, "iss": "https://idp.test", "iat": now,
                           "exp": now + 600, "scope": "kafka"},
                          key or self.keys[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> _Idp:
    return _Idp(tmp_path_factory.mktemp("idp"))


@pytest.fixture(scope="module")
def signed(idp: _Idp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = _cluster(tmp_path_factory.mktemp("oauth-signed"), {
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="broker" password="broker-secret" user_broker="broker-secret";'),
        "listener.name.plaintext.oauthbearer.sasl.jaas.config": f"{MODULE} required;",
        "listener.name.plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks.as_uri(),
        "sasl.oauthbearer.expected.audience": "raftlog",
        "sasl.oauthbearer.expected.issuer": "https://idp.test",
    })
    try:
        yield cluster
    finally:
        cluster.stop(timeout_s=10)


def signed_client(make: Callable[[], str]) -> dict[str, Any]:
    """confluent-kafka handing librdkafka a token from ``make`` (oauth_cb)."""
    def refresh(_config: str) -> tuple[str, float]:
        return make(), time.time() + 600

    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": refresh}


def test_signed_tokens_produce_and_consume(signed: LocalCluster, idp: _Idp) -> None:
    dave = signed_client(lambda: idp.token("dave"))
    _create(signed, "oauth-signed", dave)
    assert _produce(signed, "oauth-signed", dave, [f"s-{i}" for i in range(50)]) == \
        list(range(50))
    assert _read(signed, "oauth-signed", dave, 50) == [f"s-{i}" for i in range(50)]


@pytest.mark.parametrize("forged", ["another key", "another audience", "unsigned"])
def test_forged_or_misaddressed_tokens_are_refused(
    signed: LocalCluster, idp: _Idp, forged: str,
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    make = {
        "another key": lambda: idp.token("eve", key=other),
        "another audience": lambda: idp.token("eve", audience="someone-else"),
        "unsigned": lambda: UnsecuredLogin.from_jaas(
            {"unsecuredLoginStringClaim_sub": "eve"}).token(int(time.time() * 1000)).value,
    }[forged]
    _refused(signed, signed_client(make))


def test_a_key_added_to_the_jwks_is_picked_up_while_running(
    signed: LocalCluster, idp: _Idp,
) -> None:
    idp.keys["k2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    idp.publish()
    frank = signed_client(lambda: idp.token("frank", kid="k2"))
    # The first login names a key id the brokers lack: refused, and their
    # JWKS is read again; librdkafka logs in again and gets through.
    _create(signed, "oauth-rotated", frank)
    assert _produce(signed, "oauth-rotated", frank, ["rotated"]) == [0]
