"""TLS listener settings through parse_config (data_plane.security_config):
the contexts built at start-up, the per-listener ``ssl.*`` overrides, the
SASL_SSL rule for ``ssl.client.auth`` (KIP-684), the principal an SSL
listener gives a client, and settings that fail start-up naming the key."""

from __future__ import annotations

import ssl

import pytest

from data_plane.config import KNOWN_SETTINGS, ConfigError, env_name, parse_config
from raftlog.security import dev_pki

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9094,"
                 "CONTROLLER://127.0.0.1:9093",
    "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    return dev_pki.make_pki(tmp_path_factory.mktemp("pki"), servers=("broker",),
                            clients=("alice",))


def _ssl(pki: dev_pki.Pki, prefix: str = "") -> dict[str, str]:
    return {f"{prefix}ssl.keystore.type": "PKCS12",
            f"{prefix}ssl.keystore.location": str(pki.identities["broker"].p12),
            f"{prefix}ssl.keystore.password": pki.password,
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.location": str(pki.ca_pem)}


def test_an_ssl_inter_broker_listener_gets_server_and_client_contexts(pki: dev_pki.Pki) -> None:
    config = parse_config({**BASE, **_ssl(pki), "ssl.client.auth": "required"}, {})
    tls = config.security.listener_tls("INTERNAL")
    assert tls is not None
    assert tls.server.verify_mode == ssl.CERT_REQUIRED
    assert tls.client.check_hostname  # ssl.endpoint.identification.algorithm=https
    assert tls.principal is not None  # SSL: the certificate names the client
    assert config.security.listener_tls("EXTERNAL") is None
    security = config.security.client_security("INTERNAL")
    assert security.protocol == "SSL" and security.tls is tls.client
    assert config.security.client_security("EXTERNAL").protocol == "PLAINTEXT"


def test_cipher_suites_narrow_the_listener_and_the_nodes_own_connections(
    pki: dev_pki.Pki,
) -> None:
    config = parse_config({**BASE, **_ssl(pki), "ssl.cipher.suites":
                           "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,"
                           "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}, {})
    tls = config.security.listener_tls("INTERNAL")
    assert tls is not None
    for context in (tls.server, tls.client):
        # No TLS 1.3 suite named: TLS 1.2 only, with the two suites named.
        assert context.maximum_version == ssl.TLSVersion.TLSv1_2
        tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
        assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256"}


def test_per_listener_settings_win_and_sasl_ssl_ignores_the_global_client_auth(
    pki: dev_pki.Pki,
) -> None:
    props = {**BASE, **_ssl(pki, "listener.name.internal."),
             "listener.security.protocol.map":
                 "INTERNAL:SASL_SSL,EXTERNAL:SSL,CONTROLLER:PLAINTEXT",
             **_ssl(pki, "listener.name.external."),
             "ssl.client.auth": "required",
             "ssl.keystore.location": "/nonexistent/ignored-where-a-listener-sets-its-own.p12",
             "sasl.enabled.mechanisms": "PLAIN",
             "sasl.mechanism.inter.broker.protocol": "PLAIN",
             "listener.name.internal.plain.sasl.jaas.config":
                 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                 'username="b" password="p" user_b="p";'}
    config = parse_config(props, {})
    internal, external = (config.security.listener_tls(n) for n in ("INTERNAL", "EXTERNAL"))
    assert internal is not None and external is not None
    # KIP-684: on SASL_SSL only listener.name.<l>.ssl.client.auth counts.
    assert internal.server.verify_mode == ssl.CERT_NONE
    assert internal.principal is None  # SASL names the client
    assert external.server.verify_mode == ssl.CERT_REQUIRED
    assert config.security.client_security("INTERNAL").protocol == "SASL_SSL"

    props["listener.name.internal.ssl.client.auth"] = "requested"
    config = parse_config(props, {})
    internal = config.security.listener_tls("INTERNAL")
    assert internal is not None and internal.server.verify_mode == ssl.CERT_OPTIONAL


@pytest.mark.parametrize("change,setting,words", [
    ({"ssl.keystore.location": "/nonexistent/broker.p12"}, "ssl.keystore.location", ""),
    ({"ssl.keystore.password": "wrong"}, "ssl.keystore.password", ""),
    ({"ssl.client.auth": "always"}, "ssl.client.auth", ""),
    ({"ssl.cipher.suites": "TLS_RC4_FOREVER"}, "ssl.cipher.suites", "not a cipher suite"),
    ({"listener.name.internal.ssl.client.auth": "maybe"},
     "listener.name.internal.ssl.client.auth", ""),
    ({"listener.name.internal.ssl.keystore.locaton": "x"},
     "listener.name.internal.ssl.keystore.locaton", "unknown setting"),
    ({"listener.name.external.ssl.client.auth": "required"},
     "listener.name.external.ssl.client.auth", "not SSL or SASL_SSL"),
    ({"listener.name.nope.ssl.client.auth": "required"},
     "listener.name.nope.ssl.client.auth", "no listener named 'nope'"),
])
def test_bad_tls_settings_fail_start_up_naming_the_setting(
    pki: dev_pki.Pki, change: dict[str, str], setting: str, words: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **_ssl(pki), **change}, {})
    assert info.value.setting == setting, str(info.value)
    assert words in str(info.value)


def test_an_ssl_listener_names_clients_by_their_mapped_certificate_subject(
    pki: dev_pki.Pki,
) -> None:
    config = parse_config({**BASE, **_ssl(pki), "ssl.client.auth": "required",
                           "ssl.principal.mapping.rules":
                               "RULE:^CN=([^,]*),OU=clients,.*$/$1/U,DEFAULT"}, {})
    tls = config.security.listener_tls("INTERNAL")
    assert tls is not None and tls.principal is not None
    assert tls.principal(None) == "ANONYMOUS"  # no TLS session object: no certificate


def test_the_environment_overrides_a_listeners_ssl_setting(pki: dev_pki.Pki) -> None:
    assert {"ssl.keystore.location", "ssl.truststore.location", "ssl.client.auth",
            "ssl.principal.mapping.rules"} <= KNOWN_SETTINGS
    key = "listener.name.internal.ssl.keystore.password"
    environ = {env_name(key): "wrong"}
    assert env_name(key) == "RAFTLOG_LISTENER_NAME_INTERNAL_SSL_KEYSTORE_PASSWORD"
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **_ssl(pki)}, environ)
    assert info.value.setting == key


def test_a_tls_controller_listener_and_a_broker_only_node_that_dials_it(pki: dev_pki.Pki) -> None:
    config = parse_config({**BASE, **_ssl(pki), "listener.security.protocol.map":
                           "INTERNAL:SSL,EXTERNAL:PLAINTEXT,CONTROLLER:SSL"}, {})
    controller = config.security.listener_tls("CONTROLLER")
    assert controller is not None and controller.server is not None
    assert config.security.controller_security().protocol == "SSL"

    # A broker-only node serves no controller listener: a truststore is all
    # it needs to dial one (no keystore, no server context).
    broker = parse_config({
        "node.id": "4", "process.roles": "broker", "log.dirs": "/data/a",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        "listener.name.controller.ssl.truststore.type": "PEM",
        "listener.name.controller.ssl.truststore.location": str(pki.ca_pem)}, {})
    dialled = broker.security.listener_tls("CONTROLLER")
    assert dialled is not None and dialled.server is None
    security = broker.security.controller_security()
    assert security.protocol == "SSL" and security.tls is dialled.client
