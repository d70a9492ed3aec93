"""OAUTHBEARER listener and client settings (data_plane.security_config via
parse_config, data_plane.client_config): Kafka's default unsecured
validator, KIP-768's JWKS validator with the ``sasl.oauthbearer.*``
settings (listener-prefixed ones win), the node's own unsecured login, and
every refusal naming its setting."""

from __future__ import annotations

import time

import pytest

from data_plane.client_config import ClientConfigError, client_security
from data_plane.config import ConfigError, parse_config
from raftlog.security.oauthbearer import JwtValidator, UnsecuredValidator
from raftlog.security.sasl import OAUTHBEARER

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
JAAS_KEY = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
HANDLER_KEY = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
    "sasl.enabled.mechanisms": "OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
    JAAS_KEY: (f'{MODULE} required unsecuredLoginStringClaim_sub="broker" '
               'unsecuredLoginListClaim_scope=",kafka" unsecuredValidatorRequiredScope="kafka" '
               'unsecuredValidatorAllowableClockSkewMs="2000";'),
}


def test_the_default_validator_is_kafkas_unsecured_one_with_its_jaas_options() -> None:
    config = parse_config(BASE, {})
    sasl = config.security.listener_sasl("SASL_PLAINTEXT")
    assert sasl is not None and sasl.mechanisms == (OAUTHBEARER,)
    assert sasl.oauthbearer is not None
    assert sasl.oauthbearer.validator == UnsecuredValidator(required_scope=("kafka",),
                                                            clock_skew_ms=2000)
    # The node logs in with its own unsecured token, and that token passes.
    credentials = config.security.client_credentials("SASL_PLAINTEXT")
    assert credentials is not None and credentials.mechanism == OAUTHBEARER
    assert credentials.username == "broker" and credentials.token is not None
    token = credentials.token()
    checked = sasl.oauthbearer.validator.validate(token.value, int(time.time() * 1000))
    assert checked.principal == "broker" and "kafka" in checked.scope


def test_kip_768_validator_settings_with_listener_prefixed_ones_winning() -> None:
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    config = parse_config({
        **BASE,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="b" password="p" user_b="p";'),
        HANDLER_KEY: VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks",
        prefix + "sasl.oauthbearer.jwks.endpoint.url": "file:///etc/raftlog/jwks.json",
        "sasl.oauthbearer.expected.audience": "raftlog,kafka",
        "sasl.oauthbearer.expected.issuer": "https://idp.example",
        "sasl.oauthbearer.clock.skew.seconds": "5",
    }, {})
    sasl = config.security.listener_sasl("SASL_PLAINTEXT")
    assert sasl is not None and sasl.oauthbearer is not None
    validator = sasl.oauthbearer.validator
    assert isinstance(validator, JwtValidator)
    assert validator.jwks_url == "file:///etc/raftlog/jwks.json"
    assert validator.expected_audience == ("raftlog", "kafka")
    assert validator.expected_issuer == "https://idp.example"
    assert validator.clock_skew_s == 5 and validator.sub_claim == "sub"


@pytest.mark.parametrize("changes,setting,words", [
    ({JAAS_KEY: None}, JAAS_KEY, "is required"),
    ({JAAS_KEY: f"{MODULE} required;"}, JAAS_KEY, "unsecuredLoginStringClaim_sub"),
    ({JAAS_KEY: "org.apache.kafka.common.security.plain.PlainLoginModule required;"},
     JAAS_KEY, "OAuthBearerLoginModule"),
    ({JAAS_KEY: f'{MODULE} required unsecuredLoginStringClaim_sub="b" '
                'unsecuredLoginLifetimeSeconds="soon";'},
     JAAS_KEY, "unsecuredLoginLifetimeSeconds"),
    ({HANDLER_KEY: "com.example.MyValidator"}, HANDLER_KEY, "not available"),
    ({HANDLER_KEY: VALIDATOR}, "sasl.oauthbearer.jwks.endpoint.url", ""),
    ({HANDLER_KEY: VALIDATOR, "sasl.oauthbearer.jwks.endpoint.url": "ftp://x/jwks"},
     "sasl.oauthbearer.jwks.endpoint.url", ""),
    ({HANDLER_KEY: VALIDATOR, "sasl.oauthbearer.jwks.endpoint.url": "file:///j",
      "sasl.oauthbearer.clock.skew.seconds": "-1"}, "sasl.oauthbearer.clock.skew.seconds", ""),
    ({"sasl.login.callback.handler.class": "x.Y"}, "sasl.login.callback.handler.class",
     "not supported"),
    ({"sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
     "sasl.oauthbearer.token.endpoint.url", "client credentials"),
    ({"sasl.server.callback.handler.class": VALIDATOR}, "sasl.server.callback.handler.class",
     "per listener"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.login.callback.handler.class": "x.Y"},
     "listener.name.sasl_plaintext.oauthbearer.sasl.login.callback.handler.class",
     "not supported"),
    # Refused even where no listener has OAUTHBEARER: never silently ignored.
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config":
          'org.apache.kafka.common.security.plain.PlainLoginModule required '
          'username="b" password="p" user_b="p";',
      JAAS_KEY: None, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
     "sasl.oauthbearer.token.endpoint.url", "not supported"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.url": "x"},
     "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.url", "unknown setting"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config":
          'org.apache.kafka.common.security.plain.PlainLoginModule required '
          'username="b" password="p" user_b="p";',
      JAAS_KEY: None, HANDLER_KEY: VALIDATOR}, HANDLER_KEY, "not enabled"),
])
def test_bad_oauthbearer_settings_fail_start_up_naming_the_setting(
    changes: dict[str, str | None], setting: str, words: str,
) -> None:
    props = {**BASE}
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    with pytest.raises(ConfigError) as raised:
        parse_config(props, {})
    assert raised.value.setting == setting, raised.value
    assert words in str(raised.value), raised.value


def test_a_node_that_does_not_log_in_needs_no_login_options() -> None:
    config = parse_config({
        **BASE,
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="b" password="p" user_b="p";'),
        JAAS_KEY: f"{MODULE} required;",
    }, {})
    sasl = config.security.listener_sasl("SASL_PLAINTEXT")
    assert sasl is not None and sasl.oauthbearer is not None
    assert sasl.oauthbearer.login is None
    assert sasl.oauthbearer.validator == UnsecuredValidator()


# --- the CLI's --command-config -------------------------------------------------------------


def test_a_command_config_logs_in_with_an_unsecured_token_both_clients_can_use() -> None:
    security = client_security({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": (f'{MODULE} required unsecuredLoginStringClaim_sub="alice" '
                             'unsecuredLoginListClaim_scope=",kafka,admin" '
                             'unsecuredLoginLifetimeSeconds="120" '
                             'unsecuredLoginExtension_traceId="abc";')})
    assert security.sasl is not None and security.sasl.mechanism == OAUTHBEARER
    assert security.sasl.username == "alice"
    assert security.sasl.token is not None and security.sasl.token().principal == "alice"
    assert dict(security.sasl.extensions) == {"traceId": "abc"}
    assert security.librdkafka() == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": ("principal=alice scope=kafka,admin lifeSeconds=120 "
                                    "extension_traceId=abc")}


@pytest.mark.parametrize("props,words", [
    ({"sasl.username": "alice", "sasl.password": "x"}, "not sasl.username"),
    ({"sasl.jaas.config": f"{MODULE} required;"}, "unsecuredLoginStringClaim_sub"),
    ({"sasl.jaas.config": f'{MODULE} required unsecuredLoginStringClaim_sub="a" '
                          'unsecuredLoginStringClaim_team="x";'}, "team"),
])
def test_command_configs_the_cli_cannot_use_are_refused(props: dict[str, str],
                                                        words: str) -> None:
    with pytest.raises(ClientConfigError, match=words):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                         **props})
