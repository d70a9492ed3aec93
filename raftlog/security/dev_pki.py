"""A throwaway PKI for tests, chaos runs and local clusters: one CA, server
and client identities, each as the files Kafka's ``ssl.*`` settings point
at (PEM and PKCS12). Not for production: keys are written unencrypted
beside the stores, and everything expires in 30 days.

    pki = make_pki(tmp_path, servers=("broker",), clients=("alice",))
    props = pki.keystore_settings("broker", "pkcs12") | pki.truststore_settings("pem")

Keys are EC P-256, so a few identities take well under a second. Server
certificates carry SAN DNS:localhost and IP:127.0.0.1 (and ``hosts``) and
both serverAuth and clientAuth (brokers are clients of each other); client
certificates carry clientAuth. Everything is valid from a day ago for 30
days.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

StoreForm = Literal["pem", "inline", "pkcs12"]

CA_DN = "CN=raftlog dev CA,O=raftlog"


@dataclass(frozen=True)
class Identity:
    name: str
    pem: Path  # unencrypted PKCS#8 key, then the chain (leaf, CA)
    cert_pem: Path  # the chain alone: leaf, then CA
    key_pem: Path  # the key alone, unencrypted PKCS#8
    p12: Path  # key, leaf and CA under Pki.password
    dn: str  # the subject as Java's X500Principal.getName() prints it


@dataclass(frozen=True)
class _Ca:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    name: x509.Name
    ski: x509.SubjectKeyIdentifier


@dataclass(frozen=True)
class Pki:
    directory: Path
    password: str
    ca_pem: Path  # the CA certificate
    truststore_p12: Path  # the CA certificate alone (Java-readable), under password
    identities: dict[str, Identity]
    ca: _Ca | None = None  # to issue more (renew)
    alt_names: tuple[x509.GeneralName, ...] = ()  # the server certificates'

    def renew(self, name: str, *, stem: str | None = None) -> Identity:
        """A new key and certificate for identity ``name``, from the same CA
        and with the same subject and names (a renewed certificate), written
        as ``<stem>.pem`` and so on (default ``<name>-renewed``)."""
        assert self.ca is not None
        old = self.identities[name]
        server = ",OU=brokers," in old.dn
        return _issue(self.ca, name, self.alt_names if server else None, self.directory,
                      stem or f"{name}-renewed", self.password,
                      datetime.datetime.now(datetime.UTC))

    def keystore_settings(self, name: str, form: StoreForm = "pem") -> dict[str, str]:
        """``ssl.keystore.*`` settings for an identity: a PEM file, inline PEM
        (KIP-651) or a PKCS12 file."""
        identity = self.identities[name]
        if form == "pem":
            return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(identity.pem)}
        if form == "inline":
            return {"ssl.keystore.type": "PEM",
                    "ssl.keystore.key": identity.key_pem.read_text(),
                    "ssl.keystore.certificate.chain": identity.cert_pem.read_text()}
        return {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(identity.p12),
                "ssl.keystore.password": self.password}

    def truststore_settings(self, form: StoreForm = "pem") -> dict[str, str]:
        """``ssl.truststore.*`` settings trusting the CA."""
        if form == "pem":
            return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_pem)}
        if form == "inline":
            return {"ssl.truststore.type": "PEM",
                    "ssl.truststore.certificates": self.ca_pem.read_text()}
        return {"ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": str(self.truststore_p12),
                "ssl.truststore.password": self.password}


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def make_pki(directory: Path, *, servers: Sequence[str] = ("broker",), clients: Sequence[str] = (),
             password: str = "test-secret", hosts: Sequence[str] = ()) -> Pki:
    """Writes a CA and the identities into ``directory`` (created if need be).
    Names must be plain (letters, digits, ``.``, ``_``, ``-``) and distinct.
    ``hosts``: more names (IP addresses or DNS names) the server
    certificates are valid for, beside localhost and 127.0.0.1."""
    names = [*servers, *clients]
    alt_names = _alt_names(hosts)
    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(f"identity name {name!r} is not plain")
    if len(set(names)) != len(names):
        raise ValueError(f"identity names repeat: {names}")
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    encryption = serialization.BestAvailableEncryption(password.encode())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftlog"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "raftlog dev CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (_builder(ca_name, ca_name, ca_key.public_key(), now)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(_key_usage(certificate_sign=True), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    truststore = directory / "truststore.p12"
    truststore.write_bytes(pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca, b"raftlog dev ca")], encryption))

    ca_state = _Ca(ca_key, ca, ca_name, ca_ski)
    identities = {name: _issue(ca_state, name, alt_names if name in servers else None,
                               directory, name, password, now)
                  for name in names}
    return Pki(directory=directory, password=password, ca_pem=ca_pem, truststore_p12=truststore,
               identities=identities, ca=ca_state, alt_names=alt_names)


def _alt_names(hosts: Sequence[str]) -> tuple[x509.GeneralName, ...]:
    names: list[x509.GeneralName] = [x509.DNSName("localhost"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        try:
            name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            name = x509.DNSName(host)
        if name not in names:
            names.append(name)
    return tuple(names)


def _issue(ca_state: _Ca, name: str, alt_names: Sequence[x509.GeneralName] | None,
           directory: Path, stem: str, password: str, now: datetime.datetime) -> Identity:
    """A key and a certificate for ``name`` signed by the CA, written as
    ``<stem>.pem``, ``.cert.pem``, ``.key.pem`` and ``.p12``; a server's
    (``alt_names`` given) is valid for those names."""
    server = alt_names is not None
    ca, ca_key, ca_name, ca_ski = ca_state.certificate, ca_state.key, ca_state.name, ca_state.ski
    encryption = serialization.BestAvailableEncryption(password.encode())
    key = ec.generate_private_key(ec.SECP256R1())
    unit = "brokers" if server else "clients"
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftlog"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
              else [ExtendedKeyUsageOID.CLIENT_AUTH])
    builder = (_builder(subject, ca_name, key.public_key(), now)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(_key_usage(certificate_sign=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                   ca_ski), critical=False))
    if alt_names is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(alt_names)),
                                        critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    key_text = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    chain_text = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (certificate, ca))
    files = {suffix: directory / f"{stem}{suffix}"
             for suffix in (".pem", ".cert.pem", ".key.pem", ".p12")}
    files[".pem"].write_bytes(key_text + chain_text)
    files[".cert.pem"].write_bytes(chain_text)
    files[".key.pem"].write_bytes(key_text)
    files[".p12"].write_bytes(pkcs12.serialize_key_and_certificates(
        name.encode(), key, certificate, [ca], encryption))
    for path in (files[".pem"], files[".key.pem"], files[".p12"]):
        path.chmod(0o600)
    return Identity(name=name, pem=files[".pem"], cert_pem=files[".cert.pem"],
                    key_pem=files[".key.pem"], p12=files[".p12"],
                    dn=f"CN={name},OU={unit},O=raftlog")


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             now: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)))


def _key_usage(*, certificate_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=not certificate_sign, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=certificate_sign, crl_sign=certificate_sign,
                         encipher_only=False, decipher_only=False)
