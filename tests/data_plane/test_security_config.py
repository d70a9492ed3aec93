"""Listener security settings (data_plane.security_config via parse_config):
protocols, SASL mechanisms, JAAS users and inter-broker credentials."""

from __future__ import annotations

import pytest

from data_plane.config import LISTENER_SETTINGS, ConfigError, env_name, parse_config
from raftlog.security.sasl import PLAIN, SCRAM_SHA_256, SaslCredentials

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="admin" password="admin-secret";')

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
}


def test_a_sasl_listener_with_plain_users_and_inter_broker_credentials() -> None:
    config = parse_config(BASE, {})
    security = config.security
    assert security.protocol("SASL_PLAINTEXT") == "SASL_PLAINTEXT"
    assert security.protocol("CONTROLLER") == "PLAINTEXT"
    sasl = security.listener_sasl("SASL_PLAINTEXT")
    assert sasl is not None
    assert sasl.mechanisms == (PLAIN, SCRAM_SHA_256)
    assert dict(sasl.plain_users) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert security.listener_sasl("CONTROLLER") is None
    assert config.inter_broker_listener_name == "SASL_PLAINTEXT"
    assert security.client_credentials("SASL_PLAINTEXT") == SaslCredentials(
        PLAIN, "admin", "admin-secret")
    assert security.client_credentials("CONTROLLER") is None
    assert security.failed_authentication_delay_ms == 100


def test_without_security_settings_every_listener_is_plaintext() -> None:
    config = parse_config({**{k: v for k, v in BASE.items() if "sasl" not in k},
                           "listeners": "PLAINTEXT://127.0.0.1:9092,EXTERNAL://127.0.0.1:9094,"
                                        "CONTROLLER://127.0.0.1:9093"}, {})
    assert config.security.sasl == ()
    assert config.security.protocol("EXTERNAL") == "PLAINTEXT"
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_an_explicit_map_names_protocols_and_the_inter_broker_listener() -> None:
    config = parse_config({
        **{k: v for k, v in BASE.items() if not k.startswith("listener.name")},
        "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9094,"
                     "CONTROLLER://127.0.0.1:9093",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT,"
                                          "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.external.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
    }, {})
    assert config.inter_broker_listener_name == "INTERNAL"
    assert config.security.client_credentials("INTERNAL") is None
    sasl = config.security.listener_sasl("EXTERNAL")
    assert sasl is not None and sasl.mechanisms == ("SCRAM-SHA-512", PLAIN)


@pytest.mark.parametrize("change,setting,words", [
    ({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"},
     "listener.security.protocol.map", "no security protocol for listener CONTROLLER"),
    ({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_SSL,CONTROLLER:PLAINTEXT"},
     "ssl.keystore.location", "needs a keystore"),
    ({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:KERBEROS"},
     "listener.security.protocol.map", "unknown security protocol KERBEROS"),
    ({"listener.security.protocol.map": "SASL_PLAINTEXT"},
     "listener.security.protocol.map", "is not LISTENER:PROTOCOL"),
    ({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"},
     "listener.name.controller.plain.sasl.jaas.config", "PLAIN is enabled on listener CONTROLLER"),
    ({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SSL"},
     "ssl.keystore.location", "needs a keystore"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms",
     "GSSAPI is not supported"),
    ({"sasl.enabled.mechanisms": "SCRAM-SHA-256"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config", "PLAIN is not enabled"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "garbage"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config", ""),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": SCRAM_JAAS},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config", "PLAIN takes"),
    ({"listener.name.nope.plain.sasl.jaas.config": PLAIN_JAAS},
     "listener.name.nope.plain.sasl.jaas.config", "no listener named 'nope'"),
    ({"listener.name.sasl_plaintext.gssapi.sasl.jaas.config": PLAIN_JAAS},
     "listener.name.sasl_plaintext.gssapi.sasl.jaas.config", "not a supported mechanism"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
     "sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512 is not enabled"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config", "needs username and password"),
    ({"inter.broker.listener.name": "CONTROLLER"}, "inter.broker.listener.name",
     "is not one of the broker listeners"),
    ({"connection.failed.authentication.delay.ms": "-1"},
     "connection.failed.authentication.delay.ms", "must be >= 0"),
    ({"connections.max.reauth.ms": "-5"}, "connections.max.reauth.ms", "must be >= 0"),
    ({"listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "soon"},
     "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms", "not an integer"),
    ({"listener.name.controller.connections.max.reauth.ms": "1000"},
     "listener.name.controller.connections.max.reauth.ms", "no SASL listener named"),
    ({"listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": "1000"},
     "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms",
     "OAUTHBEARER is not enabled on listener SASL_PLAINTEXT"),
])
def test_bad_security_settings_fail_start_up_naming_the_setting(
    change: dict[str, str], setting: str, words: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **change}, {})
    assert info.value.setting == setting
    assert words in str(info.value)


def test_plain_needs_its_jaas_config_on_a_sasl_listener() -> None:
    props = {k: v for k, v in BASE.items() if not k.startswith("listener.name")}
    with pytest.raises(ConfigError, match="PLAIN is enabled on listener SASL_PLAINTEXT"):
        parse_config(props, {})


def test_kafkas_default_mechanism_gssapi_is_refused_on_a_sasl_listener() -> None:
    props = {k: v for k, v in BASE.items() if not k.startswith("sasl")}
    with pytest.raises(ConfigError, match="GSSAPI is not supported"):
        parse_config(props, {})


def test_jaas_config_on_a_plaintext_listener_is_an_error() -> None:
    props = {**{k: v for k, v in BASE.items() if "sasl" not in k},
             "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
             "listener.name.plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    with pytest.raises(ConfigError, match="not SASL_PLAINTEXT"):
        parse_config(props, {})


def test_the_environment_overrides_a_listeners_jaas_config() -> None:
    key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    other = PLAIN_JAAS.replace('user_alice="alice-secret"', 'user_carol="carol-secret"')
    config = parse_config(BASE, {env_name(key): other})
    sasl = config.security.listener_sasl("SASL_PLAINTEXT")
    assert sasl is not None and "carol" in dict(sasl.plain_users)


def test_the_per_listener_security_settings_are_documented_settings() -> None:
    assert "listener.name.<listener>.<mechanism>.sasl.jaas.config" in LISTENER_SETTINGS
    assert "listener.name.<listener>.sasl.enabled.mechanisms" in LISTENER_SETTINGS


def test_the_pre_login_receive_size_has_kafkas_default_and_can_be_set() -> None:
    assert parse_config(BASE, {}).security.max_receive_bytes == 524288
    config = parse_config({**BASE, "sasl.server.max.receive.size": "4096"}, {})
    assert config.security.max_receive_bytes == 4096
    with pytest.raises(ConfigError, match="must be >= 1"):
        parse_config({**BASE, "sasl.server.max.receive.size": "0"}, {})


def test_connections_max_reauth_ms_by_node_listener_and_mechanism() -> None:
    """KIP-368's setting: the listener-and-mechanism key wins over the
    listener's, which wins over the node's; the default is 0 (sessions do not end)."""
    def reauth(**extra: str) -> dict[str, int]:
        sasl = parse_config({**BASE, **extra}, {}).security.listener_sasl("SASL_PLAINTEXT")
        assert sasl is not None
        return dict(sasl.max_reauth_ms)

    assert reauth() == {PLAIN: 0, SCRAM_SHA_256: 0}
    assert reauth(**{"connections.max.reauth.ms": "60000"}) == {PLAIN: 60000,
                                                               SCRAM_SHA_256: 60000}
    assert reauth(**{"connections.max.reauth.ms": "60000",
                     "listener.name.sasl_plaintext.connections.max.reauth.ms": "30000",
                     "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "5000"}) \
        == {PLAIN: 5000, SCRAM_SHA_256: 30000}


CONTROLLER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="controller" password="c-secret" user_controller="c-secret";')


def test_a_sasl_controller_listener_and_the_mechanism_nodes_dial_it_with() -> None:
    props = {**BASE, "listener.security.protocol.map":
             "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
             "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
             "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS}
    with pytest.raises(ConfigError) as info:  # Kafka's default is GSSAPI
        parse_config(props, {})
    assert info.value.setting == "sasl.mechanism.controller.protocol"
    assert "GSSAPI is not enabled on the controller listener CONTROLLER" in str(info.value)

    config = parse_config({**props, "sasl.mechanism.controller.protocol": "PLAIN"}, {})
    assert config.security.controller_listener_name == "CONTROLLER"
    security = config.security.controller_security()
    assert security.protocol == "SASL_PLAINTEXT"
    assert security.sasl == SaslCredentials(PLAIN, "controller", "c-secret")
    controller = config.security.listener_sasl("CONTROLLER")
    assert controller is not None and dict(controller.plain_users) == {"controller": "c-secret"}


def test_a_broker_only_node_needs_just_its_own_login_for_a_sasl_controller_listener() -> None:
    props = {
        "node.id": "4", "process.roles": "broker", "log.dirs": "/data/a",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-256",
    }
    with pytest.raises(ConfigError) as info:
        parse_config(props, {})
    assert info.value.setting == "listener.name.controller.scram-sha-256.sasl.jaas.config"

    config = parse_config({**props, "listener.name.controller.scram-sha-256.sasl.jaas.config":
                           SCRAM_JAAS}, {})
    assert config.security.controller_security().sasl == SaslCredentials(
        SCRAM_SHA_256, "admin", "admin-secret")
    assert config.security.client_security("PLAINTEXT").protocol == "PLAINTEXT"

    # Without the controller listener in the map, the map is incomplete.
    with pytest.raises(ConfigError, match="no security protocol for listener CONTROLLER"):
        parse_config({**props, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"}, {})
