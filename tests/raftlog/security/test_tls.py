"""TLS settings, contexts and SSL principals (raftlog.security.tls)."""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier

from raftlog.security.dev_pki import Pki, StoreForm, make_pki
from raftlog.security.tls import (
    TLS12_CIPHER_SUITES,
    TLS13_CIPHER_SUITES,
    TLS_SETTINGS,
    NoMatchingRule,
    PemMaterial,
    PrincipalMapper,
    TlsConfigError,
    TlsSettings,
    client_context,
    distinguished_name,
    peer_principal,
    pem_material,
    server_context,
    tls_settings,
)

FORMS: tuple[StoreForm, ...] = ("pem", "inline", "pkcs12")
PREFIX = "listener.name.internal."
KEY = "-----BEGIN PRIVATE KEY-----\nKKKK\n-----END PRIVATE KEY-----\n"
CHAIN = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), servers=("broker",), clients=("alice",))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A second CA whose certificates the first PKI's stores do not trust."""
    return make_pki(tmp_path_factory.mktemp("other"), servers=("broker",), clients=("alice",))


def server(pki: Pki, form: StoreForm = "pem", **props: str) -> ssl.SSLContext:
    return server_context(tls_settings(
        pki.keystore_settings("broker", form) | pki.truststore_settings(form) | _dotted(props)))


def client(pki: Pki, form: StoreForm = "pem", *, certificate: bool = False,
           **props: str) -> ssl.SSLContext:
    keystore = pki.keystore_settings("alice", form) if certificate else {}
    return client_context(tls_settings(keystore | pki.truststore_settings(form) | _dotted(props)))


def _dotted(props: dict[str, str]) -> dict[str, str]:
    """client_auth="required" -> {"ssl.client.auth": "required"}."""
    return {"ssl." + name.replace("_", "."): value for name, value in props.items()}


# ---------------------------------------------------------------------------
# tls_settings

def test_defaults_are_kafkas() -> None:
    settings = tls_settings({})
    assert settings == TlsSettings()
    assert (settings.keystore_type, settings.truststore_type, settings.client_auth,
            settings.enabled_protocols, settings.protocol,
            settings.endpoint_identification_algorithm, settings.principal_mapping_rules) == (
        "JKS", "JKS", "none", ("TLSv1.2", "TLSv1.3"), "TLSv1.3", "https", "DEFAULT")
    assert settings.keystore_location is None and settings.truststore_location is None
    assert settings.setting("keystore_location") == "ssl.keystore.location"
    assert settings.setting("key_password") == "ssl.key.password"


def test_tls_settings_names_every_setting_it_reads() -> None:
    assert {"ssl.keystore.location", "ssl.cipher.suites", "ssl.principal.mapping.rules",
            "ssl.keystore.certificate.chain", "ssl.truststore.certificates"} <= TLS_SETTINGS
    assert len(TLS_SETTINGS) == 16
    assert all(name.startswith("ssl.") for name in TLS_SETTINGS)


def test_a_listener_prefixed_setting_wins_over_the_plain_one() -> None:
    props = {"ssl.client.auth": "requested", PREFIX + "ssl.client.auth": "required",
             "ssl.protocol": "TLSv1.2"}
    settings = tls_settings(props, PREFIX)
    assert settings.client_auth == "required"
    assert settings.protocol == "TLSv1.2"  # not overridden: the plain one
    assert settings.setting("client_auth") == PREFIX + "ssl.client.auth"
    assert settings.setting("protocol") == "ssl.protocol"
    assert settings.setting("keystore_location") == "ssl.keystore.location"
    assert tls_settings(props).client_auth == "requested"


def test_values_are_trimmed_and_case_normalised_as_kafka_does() -> None:
    settings = tls_settings({
        "ssl.client.auth": " REQUIRED ", "ssl.keystore.type": "pkcs12",
        "ssl.keystore.location": " /k.p12\t", "ssl.keystore.password": " pw ",
        "ssl.truststore.type": "Pem", "ssl.endpoint.identification.algorithm": "HTTPS",
        "ssl.enabled.protocols": " TLSv1.3 , TLSv1.2 "})
    assert settings.client_auth == "required"
    assert settings.keystore_type == "PKCS12" and settings.truststore_type == "PEM"
    assert settings.keystore_location == "/k.p12" and settings.keystore_password == "pw"
    assert settings.endpoint_identification_algorithm == "https"
    assert settings.enabled_protocols == ("TLSv1.3", "TLSv1.2")


def test_an_empty_endpoint_identification_algorithm_turns_host_name_checking_off() -> None:
    settings = tls_settings({"ssl.endpoint.identification.algorithm": ""})
    assert settings.endpoint_identification_algorithm == ""


def test_an_empty_cipher_suite_list_is_accepted() -> None:
    assert tls_settings({"ssl.cipher.suites": " "}) == TlsSettings(
        sources=(("cipher_suites", "ssl.cipher.suites"),))
    assert tls_settings({"ssl.cipher.suites": " "}).cipher_suites == ()


def test_cipher_suites_are_read_as_a_list_of_iana_names() -> None:
    settings = tls_settings({"ssl.cipher.suites": " TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 ,"
                                                  "TLS_RSA_WITH_AES_128_CBC_SHA "})
    assert settings.cipher_suites == ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                                      "TLS_RSA_WITH_AES_128_CBC_SHA")
    assert settings.tls12_ciphers() == ("ECDHE-ECDSA-AES256-GCM-SHA384", "AES128-SHA")
    # Every name in the tables is one this OpenSSL offers.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("ALL")
    known = {c["name"] for c in context.get_ciphers()}
    assert set(TLS12_CIPHER_SUITES.values()) <= known
    assert known >= TLS13_CIPHER_SUITES


def test_inline_pem_with_the_store_type_left_at_its_default_is_read_as_pem() -> None:
    settings = tls_settings({"ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": CHAIN,
                             "ssl.truststore.certificates": CHAIN})
    assert settings.keystore_type == "PEM" and settings.truststore_type == "PEM"


ERRORS = [
    ({"ssl.client.auth": "always"}, "", "ssl.client.auth",
     "'always' is not one of required, requested, none"),
    ({"ssl.client.auth": "required", PREFIX + "ssl.client.auth": "always"}, PREFIX,
     PREFIX + "ssl.client.auth", "is not one of"),
    ({"ssl.enabled.protocols": "TLSv1.2,TLSv1.1"}, "", "ssl.enabled.protocols",
     "'TLSv1.1' is not supported (TLSv1.2, TLSv1.3)"),
    ({"ssl.enabled.protocols": "tlsv1.3"}, "", "ssl.enabled.protocols", "is not supported"),
    ({"ssl.enabled.protocols": " "}, "", "ssl.enabled.protocols", "no protocol is enabled"),
    ({"ssl.protocol": "SSLv3"}, "", "ssl.protocol",
     "'SSLv3' is not supported (TLSv1.2, TLSv1.3, TLS)"),
    ({"ssl.keystore.type": "BKS"}, "", "ssl.keystore.type",
     "'BKS' is not supported (JKS, PKCS12, PEM)"),
    ({PREFIX + "ssl.truststore.type": "JCEKS"}, PREFIX, PREFIX + "ssl.truststore.type",
     "'JCEKS' is not supported"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": CHAIN,
      "ssl.keystore.location": "/k.pem"}, "", "ssl.keystore.key",
     "cannot be used together with ssl.keystore.location"),
    ({"ssl.keystore.key": KEY}, "", "ssl.keystore.key",
     "is set without ssl.keystore.certificate.chain"),
    ({PREFIX + "ssl.keystore.certificate.chain": CHAIN}, PREFIX,
     PREFIX + "ssl.keystore.certificate.chain", f"is set without {PREFIX}ssl.keystore.key"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": CHAIN},
     "", "ssl.keystore.type",
     "is JKS, but an inline key and chain (ssl.keystore.key) must have type PEM"),
    ({"ssl.truststore.certificates": CHAIN, "ssl.truststore.location": "/ca.pem"}, "",
     "ssl.truststore.certificates", "cannot be used together with ssl.truststore.location"),
    ({"ssl.truststore.type": "PKCS12", "ssl.truststore.certificates": CHAIN}, "",
     "ssl.truststore.type", "is PKCS12, but inline certificates"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem", "ssl.keystore.password": "pw"},
     "", "ssl.keystore.password", "cannot be used with keystore type PEM"),
    ({"ssl.keystore.type": "PKCS12", PREFIX + "ssl.keystore.location": "/k.p12"}, PREFIX,
     PREFIX + "ssl.keystore.password",
     f"is not set, but the PKCS12 keystore {PREFIX}ssl.keystore.location needs its password"),
    ({"ssl.keystore.password": "pw"}, "", "ssl.keystore.password",
     "is set, but there is no keystore"),
    ({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
      "ssl.truststore.password": "pw"}, "", "ssl.truststore.password",
     "cannot be used with truststore type PEM"),
    ({"ssl.truststore.password": "pw"}, "", "ssl.truststore.password",
     "is set, but there is no truststore"),
    ({"ssl.endpoint.identification.algorithm": "LDAPS"}, "",
     "ssl.endpoint.identification.algorithm", "'ldaps' is not supported: use https"),
    ({"ssl.principal.mapping.rules": "RULE:a/b"}, "", "ssl.principal.mapping.rules",
     "Invalid rule: `RULE:a/b`"),
    ({PREFIX + "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_NOPE"}, PREFIX,
     PREFIX + "ssl.cipher.suites", "'TLS_NOPE' is not a cipher suite raftlog offers"),
    ({"ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"}, "", "ssl.cipher.suites",
     "give IANA names, as for Java"),  # OpenSSL's name, not Kafka's
    ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "", "ssl.cipher.suites",
     "names only some of TLS 1.3's suites"),
    ({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
      "ssl.enabled.protocols": "TLSv1.3"}, "", "ssl.cipher.suites",
     "names suites of TLSv1.2 only, which ssl.enabled.protocols does not enable"),
]


@pytest.mark.parametrize(("props", "prefix", "key", "message"), ERRORS,
                         ids=[f"{key}-{message[:24]}" for _, _, key, message in ERRORS])
def test_each_bad_setting_is_refused_naming_the_key_read(
        props: dict[str, str], prefix: str, key: str, message: str) -> None:
    with pytest.raises(TlsConfigError) as info:
        tls_settings(props, prefix)
    assert info.value.setting == key
    assert message in info.value.message
    assert str(info.value) == f"{key}: {info.value.message}"


def test_tls_config_error_is_a_value_error_that_names_its_setting() -> None:
    error = TlsConfigError("ssl.keystore.location", "cannot read '/x'")
    assert isinstance(error, ValueError)
    assert str(error) == "ssl.keystore.location: cannot read '/x'"
    assert error.setting == "ssl.keystore.location"


def test_settings_built_directly_are_checked_too() -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.client\.auth: 'sometimes'"):
        TlsSettings(client_auth="sometimes")
    with pytest.raises(TlsConfigError, match=r"^listener\.name\.a\.ssl\.protocol: "):
        TlsSettings(protocol="SSLv2", sources=(("protocol", "listener.name.a.ssl.protocol"),))
    with pytest.raises(ValueError, match="not a TlsSettings field"):
        TlsSettings(sources=(("protocol_version", "ssl.protocol"),))
    with pytest.raises(ValueError, match="not a TlsSettings field"):
        TlsSettings().setting("cipher_list")


def test_repr_never_shows_passwords_or_inline_keys() -> None:
    settings = tls_settings({"ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": CHAIN,
                             "ssl.key.password": "key-secret", "ssl.truststore.type": "PKCS12",
                             "ssl.truststore.location": "/t.p12",
                             "ssl.truststore.password": "trust-secret"})
    shown = repr(settings)
    assert "key-secret" not in shown and "trust-secret" not in shown and "KKKK" not in shown
    assert "key_password='<redacted>'" in shown and "keystore_password=None" in shown
    assert "truststore_location='/t.p12'" in shown


# ---------------------------------------------------------------------------
# distinguished_name: Java's X500Principal.getName()

_DN_KEY = ec.generate_private_key(ec.SECP256R1())


def certificate_der(subject: x509.Name | list[x509.NameAttribute[Any]]) -> bytes:
    name = subject if isinstance(subject, x509.Name) else x509.Name(subject)
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name)
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "issuer")]))
                   .public_key(_DN_KEY.public_key()).serial_number(1)
                   .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                   .sign(_DN_KEY, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.DER)


def cn(value: str, kind: _ASN1Type | None = None) -> list[x509.NameAttribute[Any]]:
    if kind is None:
        return [x509.NameAttribute(NameOID.COMMON_NAME, value)]
    return [x509.NameAttribute(NameOID.COMMON_NAME, value, _type=kind)]


A = x509.NameAttribute
MULTI_VALUED = x509.Name([
    x509.RelativeDistinguishedName([A(NameOID.ORGANIZATION_NAME, "raftlog")]),
    x509.RelativeDistinguishedName([A(NameOID.COMMON_NAME, "zed"), A(NameOID.USER_ID, "a1"),
                                    A(NameOID.EMAIL_ADDRESS, "m@x")])])

# (subject, what Java 17's X500Principal.getName() prints): checked against a
# JVM by test_distinguished_names_agree_with_java when one is installed.
DN_CASES: list[tuple[str, x509.Name | list[x509.NameAttribute[Any]], str]] = [
    ("most specific first", [A(NameOID.COUNTRY_NAME, "US"), A(NameOID.ORGANIZATION_NAME, "raftlog"),
                             A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                             A(NameOID.COMMON_NAME, "alice")],
     "CN=alice,OU=ops,O=raftlog,C=US"),
    ("comma", cn("a,b"), r"CN=a\,b"),
    ("plus", cn("a+b"), r"CN=a\+b"),
    ("quote", cn('a"b'), r'CN=a\"b'),
    ("every # is escaped", cn("#a#b"), r"CN=\#a\#b"),
    ("equals", cn("a=b"), r"CN=a\=b"),
    ("leading and trailing spaces", cn("  a b  "), r"CN=\ \ a b\ \ "),
    ("only spaces", cn("   "), r"CN=\ \ \ "),
    ("other specials", cn("a;b<c>d\\e_f@g*h&i!j'k(l)m"), r"CN=a\;b\<c\>d\\e_f@g*h&i!j'k(l)m"),
    ("carriage returns at the ends", cn("\ra\r"), "CN=\\\ra\\\r"),
    ("NUL", cn("a\x00b", _ASN1Type.UTF8String), r"CN=a\00b"),
    ("non-ASCII as it is", cn("Zoë 日本"), "CN=Zoë 日本"),
    ("emailAddress has no keyword", [A(NameOID.EMAIL_ADDRESS, "x@y.org"),
                                     A(NameOID.COMMON_NAME, "alice")],
     "CN=alice,1.2.840.113549.1.9.1=#16077840792e6f7267"),
    ("serialNumber has no keyword", [A(NameOID.SERIAL_NUMBER, "1234"),
                                     A(NameOID.COMMON_NAME, "alice")],
     "CN=alice,2.5.4.5=#130431323334"),
    ("the other keywords", [A(NameOID.DOMAIN_COMPONENT, "org"),
                            A(NameOID.DOMAIN_COMPONENT, "example"),
                            A(NameOID.STREET_ADDRESS, "Main St 1"), A(NameOID.USER_ID, "u1"),
                            A(NameOID.STATE_OR_PROVINCE_NAME, "MD"),
                            A(NameOID.LOCALITY_NAME, "Fulton"),
                            A(NameOID.TITLE, "boss"), A(NameOID.GIVEN_NAME, "Al")],
     "2.5.4.42=#0c02416c,2.5.4.12=#0c04626f7373,L=Fulton,ST=MD,UID=u1,STREET=Main St 1,"
     "DC=example,DC=org"),
    ("unregistered OIDs", [A(ObjectIdentifier("2.999.1"), "v"),
                           A(ObjectIdentifier("1.3.6.1.4.1.99999.5"), "w")],
     "1.3.6.1.4.1.99999.5=#0c0177,2.999.1=#0c0176"),
    ("multi-valued RDN, in DER order", MULTI_VALUED,
     "CN=zed+1.2.840.113549.1.9.1=#16036d4078+UID=a1,O=raftlog"),
    ("PrintableString", cn("ab", _ASN1Type.PrintableString), "CN=ab"),
    ("T61String", cn("ab", _ASN1Type.T61String), "CN=ab"),
    ("IA5String", cn("a,b", _ASN1Type.IA5String), r"CN=a\,b"),
    ("BMPString bytes read as UTF-8", cn("ab", _ASN1Type.BMPString), r"CN=\00a\00b"),
    ("VisibleString in hex", cn("ab", _ASN1Type.VisibleString), "CN=#1a026162"),
    ("UniversalString in hex", cn("ab", _ASN1Type.UniversalString), "CN=#1c080000006100000062"),
    ("empty value", [A(NameOID.ORGANIZATIONAL_UNIT_NAME, "", _type=_ASN1Type.UTF8String),
                     A(NameOID.COMMON_NAME, "x")], "CN=x,OU="),
    ("empty subject", [], ""),
]


@pytest.mark.parametrize(("subject", "expected"), [(s, e) for _, s, e in DN_CASES],
                         ids=[case for case, _, _ in DN_CASES])
def test_distinguished_name_is_printed_as_java_prints_it(
        subject: x509.Name | list[x509.NameAttribute[Any]], expected: str) -> None:
    assert distinguished_name(certificate_der(subject)) == expected


def test_cryptographys_rfc4514_string_is_not_javas() -> None:
    # Why distinguished_name exists: RFC 4514 leaves "=" and an inner "#"
    # alone and prints unknown types as text; Java escapes and hex-encodes.
    name = x509.Name([A(NameOID.EMAIL_ADDRESS, "x@y"), A(NameOID.COMMON_NAME, "a=b#c")])
    assert name.rfc4514_string() == "CN=a=b#c,1.2.840.113549.1.9.1=x@y"
    assert distinguished_name(certificate_der(name)) == (
        r"CN=a\=b\#c,1.2.840.113549.1.9.1=#1603784079")


@pytest.mark.parametrize("data", [b"", b"\x30", b"\x30\x03abc", b"\x02\x01\x01",
                                  b"not a certificate", b"\x30\x84\xff\xff\xff\xff"])
def test_distinguished_name_refuses_what_is_not_a_der_certificate(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"not a DER X\.509 certificate"):
        distinguished_name(data)


_JAVA_PRINTER = """
import java.io.ByteArrayInputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;

public class PrintDn {
    public static void main(String[] args) throws Exception {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        for (String path : args) {
            X509Certificate certificate = (X509Certificate) factory.generateCertificate(
                new ByteArrayInputStream(Files.readAllBytes(Paths.get(path))));
            StringBuilder out = new StringBuilder();
            for (char c : certificate.getSubjectX500Principal().getName().toCharArray()) {
                boolean ascii = c >= 0x20 && c <= 0x7e;
                out.append(ascii ? String.valueOf(c) : String.format("\\\\u%04x", (int) c));
            }
            System.out.println(out);
        }
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no JVM to compare with")
def test_distinguished_names_agree_with_java(tmp_path: Path) -> None:
    paths = []
    for number, (_, subject, _) in enumerate(DN_CASES):
        path = tmp_path / f"{number}.der"
        path.write_bytes(certificate_der(subject))
        paths.append(str(path))
    (tmp_path / "PrintDn.java").write_text(_JAVA_PRINTER)
    java = subprocess.run(["java", str(tmp_path / "PrintDn.java"), *paths],
                          capture_output=True, text=True, timeout=120, check=True)

    def as_java_prints(text: str) -> str:  # UTF-16 code units outside ASCII as \\uXXXX
        units = text.encode("utf-16-be")
        chars = [int.from_bytes(units[i:i + 2], "big") for i in range(0, len(units), 2)]
        return "".join(chr(c) if 0x20 <= c <= 0x7E else f"\\u{c:04x}" for c in chars)

    assert java.stdout.splitlines() == [as_java_prints(expected) for _, _, expected in DN_CASES]


# ---------------------------------------------------------------------------
# PrincipalMapper: ssl.principal.mapping.rules

def test_kafkas_documented_rules() -> None:
    # The example in Kafka's security documentation (KIP-371).
    mapper = PrincipalMapper.parse(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT")
    unknown = "O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert mapper.name(f"CN=serviceuser,OU=ServiceUsers,{unknown}") == "serviceuser"
    assert mapper.name(f"CN=adminUser,OU=Admin,{unknown}") == "adminuser@admin"


def test_first_matching_rule_wins_and_l_and_u_change_case() -> None:
    mapper = PrincipalMapper.parse(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    no_cn = "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert mapper.name(no_cn) == no_cn


def test_default_keeps_the_distinguished_name() -> None:
    assert PrincipalMapper.parse("DEFAULT").name(r"CN=a\,b,O=x") == r"CN=a\,b,O=x"


def test_no_applicable_rule_raises_no_matching_rule() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=(.*),OU=clients$/$1/")
    assert mapper.name("CN=a,OU=clients") == "a"
    with pytest.raises(NoMatchingRule, match=r"No rules apply to CN=a,OU=brokers, rules \[RULE:"):
        mapper.name("CN=a,OU=brokers")
    assert issubclass(NoMatchingRule, ValueError)


@pytest.mark.parametrize(("rules", "parsed"), [
    ("DEFAULT", "DEFAULT"),
    ("RULE://", "RULE:/"),
    ("RULE:/.*/L", "RULE:/.*/L"),
    ("  RULE:   /     / ,  DEFAULT  ", "RULE:   /     , DEFAULT"),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
     "RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT"),
    (",,RULE://,,,DEFAULT,,", "RULE:/, DEFAULT"),
    (r"RULE:\/\\\(\)\n\t/\/\//", r"RULE:\/\\\(\)\n\t/\/\/"),
    ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,DEFAULT",
     "RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, DEFAULT"),
])
def test_rules_are_split_as_kafka_splits_them(rules: str, parsed: str) -> None:
    # Patterns hold commas: a rule runs to its closing slashes, then to the
    # next comma; white space around rules and empty rules are dropped.
    assert repr(PrincipalMapper.parse(rules)) == f"PrincipalMapper(rules=[{parsed}])"


@pytest.mark.parametrize(("rules", "message"), [
    ("default", "Invalid rule: `default`"),
    ("DEFAULT/L", "unmatched substring: `/L`"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "unmatched substring: `/U`"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "Invalid rule: `RULE:^CN=(.*?)`"),
    ("rule:^CN=(.*)$/$1/", "Invalid rule: `rule:^CN=(.*)$/$1/`"),
    ("RULE:a/b", "Invalid rule: `RULE:a/b`"),
    ("", "no rules"),
    (" , ,", "no rules"),
    ("RULE:(/x/", "is not a regular expression Python can use"),
    (r"RULE:\p{Lu}+/x/", "is not a regular expression Python can use"),
    ("RULE:[a-z&&[^b]]+/x/", "is not a regular expression Python can use"),
    ("RULE:CN=.*/$1/", "$1 refers to a group, but the pattern has none"),
    ("RULE:CN=(.*)/$/", "'$' must be followed by a group number or {name}"),
    ("RULE:CN=(.*)/$x/", "'$' must be followed by a group number or {name}"),
    ("RULE:CN=(.*)/${nope}/", "the pattern has no group named 'nope'"),
    ("RULE:CN=(.*)/${1}/", "'${' must be followed by a group name"),
])
def test_bad_rules_are_refused_with_the_reason(rules: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        PrincipalMapper.parse(rules)
    assert message in str(info.value)


@pytest.mark.parametrize(("rule", "dn", "name"), [
    # Java's Matcher.replaceAll syntax, with Kafka's literal "$n" for a missing group.
    ("RULE:CN=([^,]*),.*/$12/", "CN=x,O=y", "x2"),
    ("RULE:(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)(l)/$12-$1-$13/", "abcdefghijkl", "l-a-a3"),
    ("RULE:CN=([^,]*),.*/$9$1/", "CN=x,O=y", "$9x"),
    ("RULE:CN=([^,]*),.*/[$0]/", "CN=x,O=y", "[CN=x,O=y]"),
    (r"RULE:CN=([^,]*),.*/\$1\\$1/", "CN=x,O=y", r"$1\x"),
    ("RULE:(?<user>[a-z]+)@(?<domain>.*)/${domain}:${user}/", "bob@corp", "corp:bob"),
    ("RULE:(a)|(b)/[$1$2]/", "b", "[b]"),
    # String.replaceAll replaces every match: ".*" also matches at the end.
    ("RULE:(.*)/$1!/", "abc", "abc!!"),
    # Java regex syntax that Python spells differently.
    (r"RULE:(?<n>a)\k<n>/$0/", "aa", "aa"),
    (r"RULE:\QCN=a.b\E(.*)/[$1]/", "CN=a.b,x", "[,x]"),
    (r"RULE:CN=(\w+)\z/$1/", "CN=abc", "abc"),
    (r"RULE:CN=(\w+)\Z\s/[$1]/", "CN=abc\n", "[abc]"),
    ("RULE:(?i)cn=(.*)/$1/", "CN=Abc", "Abc"),
    (r"RULE:^CN=a\/b$/slash/", "CN=a/b", "slash"),
    # A pattern with commas (Kafka's testCommaWithWhitespace).
    (r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/", r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz",
     r"Tkac\, Adam"),
])
def test_replacements_follow_java(rule: str, dn: str, name: str) -> None:
    assert PrincipalMapper.parse(rule).name(dn) == name


def test_character_classes_are_ascii_as_in_java() -> None:
    # Java's \w and (?i) are ASCII-only unless a pattern asks otherwise.
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse(r"RULE:CN=(\w+)/$1/").name("CN=é")
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse("RULE:(?i)CN=é/x/").name("CN=É")


# ---------------------------------------------------------------------------
# Handshakes over loopback

@dataclass(frozen=True)
class Outcome:
    principal: str  # the server's view of the client
    version: str  # the TLS version negotiated
    cipher: str = ""  # the suite negotiated (OpenSSL's name)


def exchange(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, *,
             server_hostname: str = "127.0.0.1", rules: str = "DEFAULT") -> Outcome:
    """Connects a client to a server over loopback, echoes one message and
    returns what the server saw. Raises what the client's side raises."""
    mapper = PrincipalMapper.parse(rules)

    async def run() -> Outcome:
        seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                seen.set_result(peer_principal(writer.get_extra_info("ssl_object"), mapper))
                writer.write(await reader.readexactly(5))
                await writer.drain()
            finally:
                writer.close()

        listener = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
        port = listener.sockets[0].getsockname()[1]
        async with listener:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname=server_hostname), 10)
            try:
                writer.write(b"hello")
                await writer.drain()
                assert await asyncio.wait_for(reader.readexactly(5), 10) == b"hello"
                version = writer.get_extra_info("ssl_object").version()
                cipher = writer.get_extra_info("ssl_object").cipher()[0]
            finally:
                writer.close()
            return Outcome(await asyncio.wait_for(seen, 10), version, cipher)

    return asyncio.run(run())


HANDSHAKE_FAILED = (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)


@pytest.mark.parametrize("form", FORMS)
def test_handshake_with_each_store_form(pki: Pki, form: StoreForm) -> None:
    outcome = exchange(server(pki, form), client(pki, form))
    assert outcome.principal == "ANONYMOUS"  # ssl.client.auth=none
    assert outcome.version == "TLSv1.3"


@pytest.mark.parametrize("form", FORMS)
def test_a_required_client_certificate_gives_the_clients_dn(pki: Pki, form: StoreForm) -> None:
    outcome = exchange(server(pki, form, client_auth="required"),
                       client(pki, form, certificate=True))
    assert outcome.principal == pki.identities["alice"].dn == "CN=alice,OU=clients,O=raftlog"


def test_the_mapping_rules_apply_to_the_client_dn(pki: Pki) -> None:
    outcome = exchange(server(pki, client_auth="required"), client(pki, certificate=True),
                       rules="RULE:^CN=(.*?),OU=brokers,.*$/broker-$1/,"
                             "RULE:^CN=(.*?),OU=clients,.*$/$1/U")
    assert outcome.principal == "ALICE"


def test_cipher_suites_choose_what_a_handshake_may_use(pki: Pki) -> None:
    """ssl.cipher.suites as Kafka takes it (IANA names), on both ends."""
    only = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"  # the test PKI's keys are EC
    outcome = exchange(server(pki, cipher_suites=only), client(pki))
    assert (outcome.version, outcome.cipher) == ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")
    # A client offering only another suite gets no handshake.
    with pytest.raises(HANDSHAKE_FAILED):
        exchange(server(pki, cipher_suites=only),
                 client(pki, cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"))
    # TLS 1.3's suites named too: TLS 1.3, as before.
    tls13 = ",".join(sorted(TLS13_CIPHER_SUITES))
    assert exchange(server(pki, cipher_suites=f"{only},{tls13}"), client(pki)).version == "TLSv1.3"
    # Only TLS 1.3's suites: a client that will not go past TLS 1.2 is refused.
    assert exchange(server(pki, cipher_suites=tls13), client(pki)).version == "TLSv1.3"
    with pytest.raises(HANDSHAKE_FAILED):
        exchange(server(pki, cipher_suites=tls13), client(pki, protocol="TLSv1.2"))
    # A client of TLS 1.2 with only TLS 1.3 suites has no protocol left.
    with pytest.raises(TlsConfigError, match="leaves no protocol this client may use"):
        client(pki, cipher_suites=tls13, protocol="TLSv1.2")


def test_requested_client_auth_without_a_certificate_is_anonymous(pki: Pki) -> None:
    assert exchange(server(pki, client_auth="requested"), client(pki)).principal == "ANONYMOUS"
    assert exchange(server(pki, client_auth="requested"),
                    client(pki, certificate=True)).principal == pki.identities["alice"].dn


def test_no_client_auth_ignores_a_client_certificate(pki: Pki) -> None:
    assert exchange(server(pki), client(pki, certificate=True)).principal == "ANONYMOUS"


@pytest.mark.parametrize("protocol", ["TLSv1.2", "TLSv1.3"])
def test_required_client_auth_without_a_certificate_fails_the_handshake(
        pki: Pki, protocol: str) -> None:
    with pytest.raises(HANDSHAKE_FAILED):
        exchange(server(pki, client_auth="required", enabled_protocols=protocol), client(pki))


def test_a_client_certificate_from_an_untrusted_ca_fails_the_handshake(
        pki: Pki, other_pki: Pki) -> None:
    stranger = client_context(tls_settings(other_pki.keystore_settings("alice")
                                           | pki.truststore_settings()))
    with pytest.raises(HANDSHAKE_FAILED):
        exchange(server(pki, client_auth="required"), stranger)


def test_a_server_from_an_untrusted_ca_is_refused(pki: Pki, other_pki: Pki) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        exchange(server(other_pki), client(pki))


def test_a_client_without_a_truststore_uses_the_system_cas(pki: Pki) -> None:
    context = client_context(tls_settings({}))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    with pytest.raises(ssl.SSLCertVerificationError):
        exchange(server(pki), context)  # the test CA is not a system CA


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_host_name_checking_accepts_the_servers_names(pki: Pki, name: str) -> None:
    assert exchange(server(pki), client(pki), server_hostname=name).principal == "ANONYMOUS"


def test_host_name_checking_refuses_another_name(pki: Pki) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        exchange(server(pki), client(pki), server_hostname="kafka.example.com")


def test_an_empty_endpoint_identification_algorithm_accepts_another_name(pki: Pki) -> None:
    unchecked = client(pki, endpoint_identification_algorithm="")
    assert not unchecked.check_hostname and unchecked.verify_mode == ssl.CERT_REQUIRED
    exchange(server(pki), unchecked, server_hostname="kafka.example.com")


def test_enabled_protocols_bound_the_versions(pki: Pki) -> None:
    only_13 = server(pki, enabled_protocols="TLSv1.3")
    assert (only_13.minimum_version, only_13.maximum_version) == (
        ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)
    assert exchange(server(pki), client(pki, enabled_protocols="TLSv1.2")).version == "TLSv1.2"
    with pytest.raises(HANDSHAKE_FAILED):
        exchange(only_13, client(pki, enabled_protocols="TLSv1.2"))


def test_ssl_protocol_tlsv12_keeps_a_client_off_tlsv13(pki: Pki) -> None:
    # Kafka: with ssl.protocol=TLSv1.2, "clients will not use TLSv1.3 even if
    # it is one of the values in ssl.enabled.protocols".
    capped = client(pki, protocol="TLSv1.2")
    assert capped.maximum_version == ssl.TLSVersion.TLSv1_2
    assert exchange(server(pki), capped).version == "TLSv1.2"
    assert server(pki, protocol="TLSv1.2").maximum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(TlsConfigError) as info:
        client(pki, protocol="TLSv1.2", enabled_protocols="TLSv1.3")
    assert info.value.setting == "ssl.protocol"


def test_the_key_file_handed_to_openssl_is_private_encrypted_and_removed(
        pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[tuple[int, bytes]] = []
    load = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, *args: Any, **kwargs: Any) -> None:
        seen.append((os.stat(certfile).st_mode & 0o777, Path(certfile).read_bytes()))
        load(self, certfile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    server(pki, "inline")
    mode, text = seen[0]
    assert mode == 0o600
    assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in text
    assert pki.identities["broker"].key_pem.read_bytes().splitlines()[1] not in text
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# Store errors

def test_a_missing_keystore_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.p12"
    with pytest.raises(TlsConfigError) as info:
        server_context(tls_settings({"ssl.keystore.location": str(missing),
                                     "ssl.keystore.password": "pw"}))
    assert info.value.setting == "ssl.keystore.location"
    assert f"cannot read '{missing}': No such file or directory" in info.value.message


def test_a_wrong_keystore_password_is_named_without_the_password(pki: Pki) -> None:
    props = pki.keystore_settings("broker", "pkcs12") | {"ssl.keystore.password": "not-it"}
    with pytest.raises(TlsConfigError) as info:
        server_context(tls_settings(props))
    assert info.value.setting == "ssl.keystore.password"
    assert "wrong password" in info.value.message
    assert "not-it" not in str(info.value) and pki.password not in str(info.value)


def test_a_wrong_truststore_password_is_named(pki: Pki) -> None:
    props = pki.truststore_settings("pkcs12") | {PREFIX + "ssl.truststore.password": "not-it"}
    with pytest.raises(TlsConfigError) as info:
        client_context(tls_settings(props, PREFIX))
    assert info.value.setting == PREFIX + "ssl.truststore.password"
    assert "wrong password" in info.value.message


def test_a_pkcs12_file_is_read_under_the_default_jks_type(pki: Pki) -> None:
    # JDK 9+ opens PKCS12 under type JKS (keystore.type.compat); so does raftlog.
    props = {"ssl.keystore.location": str(pki.identities["broker"].p12),
             "ssl.keystore.password": pki.password,
             "ssl.truststore.location": str(pki.truststore_p12),
             "ssl.truststore.password": pki.password}
    assert tls_settings(props).keystore_type == "JKS"
    exchange(server_context(tls_settings(props)), client(pki))


@pytest.mark.parametrize(("magic", "kind"), [(b"\xfe\xed\xfe\xed", "JKS"),
                                             (b"\xce\xce\xce\xce", "JCEKS")])
def test_a_jks_file_is_refused_with_how_to_convert_it(
        tmp_path: Path, magic: bytes, kind: str) -> None:
    store = tmp_path / "broker.jks"
    store.write_bytes(magic + bytes(60))
    with pytest.raises(TlsConfigError) as info:
        server_context(tls_settings({"ssl.keystore.location": str(store),
                                     "ssl.keystore.password": "pw"}))
    assert info.value.setting == "ssl.keystore.location"
    assert info.value.message == (
        f"'{store}' is a {kind} keystore. JKS keystores are not supported: convert it with "
        "keytool -importkeystore -deststoretype PKCS12, or use PEM")


def test_a_pem_file_under_a_pkcs12_type_is_refused_with_the_fix(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"is a PEM file: set ssl\.truststore\.type=PEM"):
        client_context(tls_settings({"ssl.truststore.type": "PKCS12",
                                     "ssl.truststore.location": str(pki.ca_pem)}))


def test_a_keystore_without_a_private_key_is_refused(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"holds no private key \(is it a truststore\?\)"):
        server_context(tls_settings({"ssl.keystore.type": "PKCS12",
                                     "ssl.keystore.location": str(pki.truststore_p12),
                                     "ssl.keystore.password": pki.password}))
    with pytest.raises(TlsConfigError, match="holds no private keys"):
        server_context(tls_settings({"ssl.keystore.type": "PEM",
                                 "ssl.keystore.location": str(pki.identities["broker"].cert_pem)}))


def test_a_listener_without_a_keystore_is_refused() -> None:
    with pytest.raises(TlsConfigError) as info:
        server_context(TlsSettings())
    assert info.value.setting == "ssl.keystore.location"
    assert "a listener with TLS needs a keystore" in info.value.message


@pytest.mark.parametrize("client_auth", ["required", "requested"])
def test_client_auth_without_a_truststore_is_refused(pki: Pki, client_auth: str) -> None:
    props = {PREFIX + k: v for k, v in pki.keystore_settings("broker").items()}
    props[PREFIX + "ssl.client.auth"] = client_auth
    with pytest.raises(TlsConfigError) as info:
        server_context(tls_settings(props, PREFIX))
    assert info.value.setting == PREFIX + "ssl.truststore.location"
    assert f"ssl.client.auth={client_auth} needs a truststore" in info.value.message


def test_a_chain_that_is_not_the_keys_is_refused(pki: Pki) -> None:
    props = {"ssl.keystore.key": pki.identities["alice"].key_pem.read_text(),
             "ssl.keystore.certificate.chain": pki.identities["broker"].cert_pem.read_text()}
    with pytest.raises(TlsConfigError) as info:
        server_context(tls_settings(props))
    assert info.value.setting == "ssl.keystore.certificate.chain"
    assert "the first certificate is not the private key's" in info.value.message


@pytest.fixture
def encrypted_pem(pki: Pki, tmp_path: Path) -> Path:
    identity = pki.identities["broker"]
    key = serialization.load_pem_private_key(identity.key_pem.read_bytes(), None)
    path = tmp_path / "encrypted.pem"
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"key-secret"))
    path.write_bytes(encrypted + identity.cert_pem.read_bytes())
    return path


def test_an_encrypted_pem_key_opens_with_the_key_password(pki: Pki, encrypted_pem: Path) -> None:
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(encrypted_pem),
             "ssl.key.password": "key-secret"}
    exchange(server_context(tls_settings(props)), client(pki))


@pytest.mark.parametrize(("key_password", "message"), [
    (None, "is not set, but the private key in ssl.keystore.location is encrypted"),
    ("not-it", "does not decrypt the private key in ssl.keystore.location: wrong password"),
])
def test_an_encrypted_pem_key_needs_the_right_key_password(
        encrypted_pem: Path, key_password: str | None, message: str) -> None:
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(encrypted_pem)}
    if key_password is not None:
        props["ssl.key.password"] = key_password
    with pytest.raises(TlsConfigError) as info:
        server_context(tls_settings(props))
    assert info.value.setting == "ssl.key.password"
    assert message in info.value.message


def test_a_key_password_for_an_unencrypted_pem_key_is_refused(pki: Pki) -> None:
    # Kafka reads the key as encrypted PKCS#8 whenever ssl.key.password is set.
    props = pki.keystore_settings("broker", "inline") | {"ssl.key.password": "key-secret"}
    with pytest.raises(TlsConfigError, match=r"^ssl\.key\.password: is set, but the private key in "
                                             r"ssl\.keystore\.key is not encrypted"):
        server_context(tls_settings(props))


def test_a_traditional_sec1_pem_key_is_read_too(pki: Pki) -> None:
    # Kafka reads only PKCS#8; OpenSSL's older "EC PRIVATE KEY" form is accepted here.
    identity = pki.identities["broker"]
    key = serialization.load_pem_private_key(identity.key_pem.read_bytes(), None)
    sec1 = key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()
    assert sec1.startswith("-----BEGIN EC PRIVATE KEY-----")
    props = {"ssl.keystore.key": sec1,
             "ssl.keystore.certificate.chain": identity.cert_pem.read_text()}
    exchange(server_context(tls_settings(props)), client(pki))


def test_inline_pem_continued_over_property_lines_is_read(pki: Pki) -> None:
    # A properties value continued with backslashes loses its newlines.
    def one_line(path: Path) -> str:
        return " ".join(path.read_text().split())

    props = {"ssl.keystore.key": one_line(pki.identities["broker"].key_pem),
             "ssl.keystore.certificate.chain": one_line(pki.identities["broker"].cert_pem),
             "ssl.truststore.certificates": one_line(pki.ca_pem), "ssl.client.auth": "required"}
    outcome = exchange(server_context(tls_settings(props)), client(pki, certificate=True))
    assert outcome.principal == pki.identities["alice"].dn


def test_a_pem_keystore_with_two_keys_is_refused(pki: Pki) -> None:
    identity = pki.identities["broker"]
    props = {"ssl.keystore.key": identity.key_pem.read_text() * 2,
             "ssl.keystore.certificate.chain": identity.cert_pem.read_text()}
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.key: holds 2 private keys"):
        server_context(tls_settings(props))


def test_a_pem_truststore_without_certificates_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pem"
    empty.write_text("nothing here\n")
    with pytest.raises(TlsConfigError, match=r"^ssl\.truststore\.location: holds no certificate"):
        client_context(tls_settings({"ssl.truststore.type": "PEM",
                                     "ssl.truststore.location": str(empty)}))


# ---------------------------------------------------------------------------
# pem_material

def _certificates(text: str | None) -> list[x509.Certificate]:
    assert text is not None
    return x509.load_pem_x509_certificates(text.encode())


@pytest.mark.parametrize("form", FORMS)
def test_pem_material_round_trips_the_stores(pki: Pki, form: StoreForm) -> None:
    material = pem_material(tls_settings(pki.keystore_settings("alice", form)
                                         | pki.truststore_settings(form)))
    ca = x509.load_pem_x509_certificate(pki.ca_pem.read_bytes())
    leaf = x509.load_pem_x509_certificate(pki.identities["alice"].cert_pem.read_bytes())
    assert _certificates(material.ca) == [ca]
    assert _certificates(material.certificate) == [leaf, ca]
    assert material.key is not None and material.key.startswith("-----BEGIN PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(material.key.encode(), None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.public_key().public_bytes(*spki) == leaf.public_key().public_bytes(*spki)
    assert "PRIVATE KEY" not in repr(material) and "key='<redacted>'" in repr(material)


def test_pem_material_without_stores_is_empty() -> None:
    assert pem_material(TlsSettings()) == PemMaterial(ca=None, certificate=None, key=None)


# ---------------------------------------------------------------------------
# peer_principal without a certificate

class _NoCertificate:
    def getpeercert(self, binary_form: bool = False) -> None:
        return None


@pytest.mark.parametrize("ssl_object", [None, _NoCertificate()])
def test_no_tls_or_no_peer_certificate_is_anonymous(ssl_object: Any) -> None:
    assert peer_principal(ssl_object, PrincipalMapper.parse("RULE:^x$/y/")) == "ANONYMOUS"


def test_make_pki_is_quick(tmp_path: Path) -> None:
    started = time.perf_counter()
    pki = make_pki(tmp_path, servers=("b1", "b2", "b3"), clients=("c1", "c2"))
    assert time.perf_counter() - started < 1.0
    assert pki.identities["b2"].dn == "CN=b2,OU=brokers,O=raftlog"
    assert distinguished_name(x509.load_pem_x509_certificate(
        pki.identities["c1"].cert_pem.read_bytes()).public_bytes(serialization.Encoding.DER)) == (
        pki.identities["c1"].dn)
