"""The CLI's ``--command-config FILE`` (data_plane.client_config): Kafka's
client properties in, SASL credentials and a TLS context (or PLAINTEXT)
out, and a readable refusal for anything the CLI's two clients could not
both use."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from data_plane.client_config import (
    PLAINTEXT_CLIENT,
    ClientConfigError,
    ClientSecurity,
    client_security,
    load_command_config,
)
from raftlog.security import dev_pki
from raftlog.security.sasl import SaslCredentials

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _refusal(props: dict[str, str]) -> str:
    with pytest.raises(ClientConfigError) as exc:
        client_security(props)
    return str(exc.value)


# --- what the CLI accepts ----------------------------------------------------------------


def test_a_java_jaas_config_for_plain_across_continued_lines(tmp_path: Path) -> None:
    path = _file(tmp_path, (
        "# as kafka-topics.sh --command-config takes it\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        f"sasl.jaas.config={PLAIN_MODULE} required \\\n"
        '    username="alice" \\\n'
        '    password="alice-secret";\n'))
    assert load_command_config(path) == ClientSecurity(
        SaslCredentials("PLAIN", "alice", "alice-secret"))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_java_jaas_config_for_scram(tmp_path: Path, mechanism: str) -> None:
    path = _file(tmp_path, (
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config={SCRAM_MODULE} required username=\"bob\" password=\"bob-secret\";\n"))
    assert load_command_config(path) == ClientSecurity(
        SaslCredentials(mechanism, "bob", "bob-secret"))


def test_a_delegation_token_config_sends_tokenauth_and_librdkafka_refuses_it(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path, (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config={SCRAM_MODULE} required username=\"tid\" password=\"aG1hYw==\" "
        "tokenauth=\"true\";\n"))
    security = load_command_config(path)
    assert security.sasl == SaslCredentials("SCRAM-SHA-512", "tid", "aG1hYw==",
                                            extensions=(("tokenauth", "true"),))
    with pytest.raises(ClientConfigError, match="delegation token"):
        security.librdkafka()


def test_librdkafka_names_stand_for_the_jaas_config() -> None:
    security = client_security({"security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "SCRAM-SHA-256",
                                "sasl.username": "bob", "sasl.password": "bob-secret"})
    assert security == ClientSecurity(SaslCredentials("SCRAM-SHA-256", "bob", "bob-secret"))


def test_protocol_and_mechanism_names_are_case_insensitive() -> None:
    security = client_security({"security.protocol": "sasl_plaintext", "sasl.mechanism": "plain",
                                "sasl.username": "alice", "sasl.password": "alice-secret"})
    assert security.sasl == SaslCredentials("PLAIN", "alice", "alice-secret")


def test_no_file_an_empty_file_and_plaintext_all_mean_plaintext(tmp_path: Path) -> None:
    assert load_command_config(None) is PLAINTEXT_CLIENT
    assert load_command_config(_file(tmp_path, "# nothing\n\n")) == PLAINTEXT_CLIENT
    assert client_security({"security.protocol": "PLAINTEXT"}) == PLAINTEXT_CLIENT
    assert PLAINTEXT_CLIENT.sasl is None


# --- what it refuses, and says why ------------------------------------------------------


def test_a_property_the_cli_cannot_pass_on_is_named_not_dropped() -> None:
    # ssl.client.auth is a listener's setting, not a client's.
    message = _refusal({"security.protocol": "SASL_SSL", "request.timeout.ms": "5000",
                        "ssl.client.auth": "required"})
    assert "request.timeout.ms, ssl.client.auth: not supported here" in message
    assert "sasl.jaas.config" in message and "ssl.truststore.location" in message


def test_an_unknown_protocol_is_refused() -> None:
    message = _refusal({"security.protocol": "KERBEROS"})
    assert "security.protocol=KERBEROS" in message
    assert "PLAINTEXT or SSL or SASL_PLAINTEXT or SASL_SSL" in message


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    return dev_pki.make_pki(tmp_path_factory.mktemp("pki"), servers=(), clients=("alice",))


def test_ssl_with_a_pem_truststore_and_a_pkcs12_keystore(pki: dev_pki.Pki) -> None:
    security = client_security({
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.identities["alice"].p12),
        "ssl.keystore.password": pki.password})
    assert security.protocol == "SSL" and security.sasl is None
    assert isinstance(security.tls, ssl.SSLContext) and security.tls.check_hostname
    assert security.connection.tls is security.tls
    settings = security.librdkafka()
    assert settings["security.protocol"] == "SSL"
    assert settings["ssl.endpoint.identification.algorithm"] == "https"
    assert settings["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert "BEGIN CERTIFICATE" in settings["ssl.certificate.pem"]
    assert "PRIVATE KEY" in settings["ssl.key.pem"]


def test_cipher_suites_reach_both_clients(pki: dev_pki.Pki) -> None:
    security = client_security({
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
                             "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"})
    assert security.tls is not None
    assert security.tls.maximum_version == ssl.TLSVersion.TLSv1_2
    assert security.librdkafka()["ssl.cipher.suites"] \
        == "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256"
    from confluent_kafka import Producer

    Producer({"bootstrap.servers": "127.0.0.1:1", **security.librdkafka()}).flush(0)


def test_sasl_ssl_combines_a_login_and_tls_without_hostname_checks(pki: dev_pki.Pki) -> None:
    security = client_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "alice-secret",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "ssl.endpoint.identification.algorithm": ""})
    assert security.protocol == "SASL_SSL"
    assert security.sasl == SaslCredentials("PLAIN", "alice", "alice-secret")
    assert security.tls is not None and not security.tls.check_hostname
    settings = security.librdkafka()
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert "ssl.certificate.pem" not in settings  # no keystore: no client certificate
    assert settings["sasl.username"] == "alice"


def test_tls_refusals_name_the_setting_without_echoing_the_password(pki: dev_pki.Pki) -> None:
    message = _refusal({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                        "ssl.keystore.location": str(pki.identities["alice"].p12),
                        "ssl.keystore.password": "not-the-password"})
    assert "ssl.keystore.password" in message and "not-the-password" not in message
    message = _refusal({"security.protocol": "SSL",
                        "ssl.truststore.location": "/nonexistent/ca.pem"})
    assert "ssl.truststore.location" in message


@pytest.mark.parametrize("protocol", [{}, {"security.protocol": "SASL_PLAINTEXT",
                                           "sasl.mechanism": "PLAIN", "sasl.username": "a",
                                           "sasl.password": "b"}])
def test_ssl_settings_without_tls_are_refused(protocol: dict[str, str]) -> None:
    message = _refusal({**protocol, "ssl.truststore.location": "/etc/ca.pem"})
    assert "ssl.truststore.location set, but security.protocol is" in message
    assert "(SSL or SASL_SSL use them)" in message


def test_gssapi_is_refused_named_or_by_default() -> None:
    # Kafka's clients default sasl.mechanism to GSSAPI (Kerberos).
    for props in ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"},
                  {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice",
                   "sasl.password": "alice-secret"}):
        message = _refusal(props)
        assert "sasl.mechanism=GSSAPI is not supported" in message
        assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in message


def test_a_login_module_of_another_mechanism_is_refused_without_echoing_the_password() -> None:
    message = _refusal({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{SCRAM_MODULE} required username="alice" password="alice-secret";'})
    assert f"PLAIN takes {PLAIN_MODULE}, not {SCRAM_MODULE}" in message
    assert "alice-secret" not in message


@pytest.mark.parametrize("props", [
    {},  # neither a JAAS config nor librdkafka's names
    {"sasl.username": "alice"},
    {"sasl.password": "alice-secret"},
    {"sasl.username": "", "sasl.password": "alice-secret"},
], ids=["nothing", "no-password", "no-username", "empty-username"])
def test_sasl_without_credentials_is_refused(props: dict[str, str]) -> None:
    message = _refusal({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", **props})
    assert "SASL_PLAINTEXT needs sasl.jaas.config (or sasl.username and sasl.password)" in message


@pytest.mark.parametrize(("jaas", "expected"), [
    (f"{PLAIN_MODULE} required;", "sasl.jaas.config has no username and password"),
    (f'{PLAIN_MODULE} required username="alice";',
     "sasl.jaas.config: JAAS config has a 'username' option but no 'password'"),
    (f'{PLAIN_MODULE} required password="alice-secret";',
     "sasl.jaas.config: JAAS config has a 'password' option but no 'username'"),
    (f'{PLAIN_MODULE} username="alice" password="alice-secret";',
     "sasl.jaas.config: Invalid login module control flag 'username'"),
], ids=["no-options", "no-password", "no-username", "no-flag"])
def test_a_jaas_config_without_usable_credentials_is_refused(jaas: str, expected: str) -> None:
    message = _refusal({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                        "sasl.jaas.config": jaas})
    assert expected in message
    assert "alice-secret" not in message


@pytest.mark.parametrize("key", ["sasl.mechanism", "sasl.jaas.config", "sasl.username"])
def test_sasl_settings_with_plaintext_are_refused(key: str) -> None:
    for protocol in ({}, {"security.protocol": "PLAINTEXT"}):
        message = _refusal({**protocol, key: "PLAIN"})
        assert f"{key} set, but security.protocol is PLAINTEXT (SASL_PLAINTEXT or SASL_SSL " \
            "use them)" in message


def test_refusals_name_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "security.protocol=TLS\n")
    with pytest.raises(ClientConfigError, match=f"^{path}: security.protocol=TLS"):
        load_command_config(path)


def test_a_file_that_cannot_be_read_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.properties"
    with pytest.raises(ClientConfigError) as exc:
        load_command_config(str(missing))
    assert str(exc.value) == f"--command-config: cannot read {missing}: No such file or directory"
    assert isinstance(exc.value, ValueError)


# --- what librdkafka is given -------------------------------------------------------------


def test_librdkafka_settings() -> None:
    assert PLAINTEXT_CLIENT.librdkafka() == {}
    security = ClientSecurity(SaslCredentials("SCRAM-SHA-512", "bob", "bob-secret"))
    assert security.librdkafka() == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob", "sasl.password": "bob-secret"}


def test_librdkafka_accepts_the_settings(pki: dev_pki.Pki) -> None:
    from confluent_kafka import Producer

    tls = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                           "sasl.username": "alice", "sasl.password": "alice-secret",
                           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
                           "ssl.keystore.type": "PEM",
                           "ssl.keystore.location": str(pki.identities["alice"].pem)})
    for security in (ClientSecurity(SaslCredentials("PLAIN", "alice", "alice-secret")), tls):
        # No broker is contacted until a record is produced; a name librdkafka
        # does not know, or PEM text it cannot load, would raise KafkaException here.
        Producer({"bootstrap.servers": "127.0.0.1:1", **security.librdkafka()}).flush(0)
