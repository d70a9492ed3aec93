"""TLS for Kafka's SSL and SASL_SSL listeners and clients: the ``ssl.*``
settings, the ``ssl.SSLContext`` they describe, and the SSL principal.

- `tls_settings` reads one listener's (or client's) ``ssl.*`` settings with
  Kafka's defaults and its per-listener prefix, and checks them; every
  `TlsConfigError` names the exact key that was read.
- `server_context` and `client_context` build the contexts. Keystores and
  truststores come as PEM (a file or inline text, KIP-651) or PKCS12.
- The SSL principal (`distinguished_name`, `PrincipalMapper`,
  `peer_principal`) lives in `raftlog.security.ssl_principal` and is
  re-exported here.

Where raftlog differs from Kafka:

- JKS and JCEKS files are refused (Python cannot read them). Under type JKS a
  PKCS12 file is read, as JDK 9+ does (``keystore.type.compat``).
- ``ssl.cipher.suites`` takes the IANA (Java) names of the TLS 1.2 suites in
  `TLS12_CIPHER_SUITES` and of TLS 1.3's three standard suites. Python's
  ``ssl`` module can choose TLS 1.2 suites but not TLS 1.3 ones, so a list
  naming some TLS 1.3 suites must name all three (the ones OpenSSL offers);
  a list with none leaves TLS 1.3 off, and one with only TLS 1.3 suites
  leaves TLS 1.2 off, which is what the JVM does with such lists.
- Only TLSv1.2 and TLSv1.3 are offered.
- ``ssl.client.auth=requested|required`` needs a truststore (Kafka would fall
  back to the JVM's public CAs), and an unknown value is refused (Kafka logs
  a warning and uses ``none``).
- Inline PEM with ``ssl.keystore.type`` (or ``ssl.truststore.type``) left at
  its default is read as PEM; Kafka wants the type set explicitly.
- Mapping rules that Kafka accepts but that fail on every connection (no
  rules at all, a reference to a group the pattern does not have, a bad
  ``$`` in a replacement) are refused when they are parsed.
- A PKCS12 truststore trusts every certificate in it (Java only those marked
  as trusted, which ``openssl pkcs12 -export`` does not mark), and a PEM key
  may also be PKCS#1 or SEC1 (Kafka reads only PKCS#8).
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from raftlog.security.ssl_principal import (
    NoMatchingRule,
    PrincipalMapper,
    distinguished_name,
    java_trim,
    peer_principal,
)

__all__ = (
    "TLS12_CIPHER_SUITES",
    "TLS13_CIPHER_SUITES",
    "TLS_SETTINGS",
    "NoMatchingRule",
    "PemMaterial",
    "PrincipalMapper",
    "TlsConfigError",
    "TlsSettings",
    "client_context",
    "distinguished_name",
    "keystore_certificate",
    "peer_principal",
    "pem_material",
    "reload_keystore",
    "server_context",
    "tls_settings",
)

#: Kafka's ``ssl.*`` settings this module reads (any listener prefix aside).
TLS_SETTINGS: Final = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol",
    "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules", "ssl.cipher.suites",
})

_CLIENT_AUTH: Final = ("required", "requested", "none")
_STORE_TYPES: Final = ("JKS", "PKCS12", "PEM")
_PROTOCOLS: Final = ("TLSv1.2", "TLSv1.3")
_SSL_PROTOCOLS: Final = ("TLSv1.2", "TLSv1.3", "TLS")
_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_SECRET_FIELDS: Final = frozenset({"keystore_password", "key_password", "truststore_password",
                                   "keystore_key"})
_JKS_MAGIC: Final = {b"\xfe\xed\xfe\xed": "JKS", b"\xce\xce\xce\xce": "JCEKS"}

#: ``ssl.cipher.suites`` names (IANA, as the JVM takes them) of the TLS 1.2
#: suites, with OpenSSL's name for each (``openssl ciphers -stdname``).
TLS12_CIPHER_SUITES: Final = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}
#: TLS 1.3's suites as OpenSSL offers them; Python cannot narrow this set.
TLS13_CIPHER_SUITES: Final = frozenset({
    "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"})


class TlsConfigError(ValueError):
    """A bad ``ssl.*`` setting or store. ``setting`` is the key to fix, with
    its listener prefix when that is where it was read; ``str(e)`` is
    ``"<setting>: <message>"``. Messages never contain passwords or keys."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


@dataclass(frozen=True, slots=True, repr=False)
class TlsSettings:
    """One listener's (or one client's) resolved ``ssl.*`` settings, with
    Kafka's defaults. Construction normalises case (store types upper,
    ``client_auth`` and the endpoint algorithm lower) and checks everything
    `tls_settings` documents, raising TlsConfigError; it reads no file."""

    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_key: str | None = None  # PEM text (KIP-651)
    keystore_certificate_chain: str | None = None  # PEM text, leaf first
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None  # PEM text
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = _PROTOCOLS
    protocol: str = "TLSv1.3"
    endpoint_identification_algorithm: str = "https"  # "" turns host name checking off
    principal_mapping_rules: str = "DEFAULT"
    cipher_suites: tuple[str, ...] = ()  # IANA names; empty: OpenSSL's defaults
    # (field, key read) for each field that came from a setting, e.g.
    # ("keystore_location", "listener.name.ssl.ssl.keystore.location").
    sources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name, _ in self.sources:
            if name not in _SETTING_OF:
                raise ValueError(f"sources names {name!r}, which is not a TlsSettings field")
        set_ = object.__setattr__
        set_(self, "keystore_type", self.keystore_type.upper())
        set_(self, "truststore_type", self.truststore_type.upper())
        set_(self, "client_auth", self.client_auth.lower())
        set_(self, "enabled_protocols", tuple(self.enabled_protocols))
        set_(self, "cipher_suites", tuple(self.cipher_suites))
        set_(self, "endpoint_identification_algorithm",
             self.endpoint_identification_algorithm.lower())
        self._check_choices()
        self._check_keystore()
        self._check_truststore()
        try:
            PrincipalMapper.parse(self.principal_mapping_rules)
        except ValueError as e:
            raise TlsConfigError(self.setting("principal_mapping_rules"), str(e)) from None

    def setting(self, field: str) -> str:
        """The key to name in an error about ``field``: the key it was read
        from, else its plain ``ssl.*`` name. Raises ValueError for a name
        that is not a field."""
        if field not in _SETTING_OF:
            raise ValueError(f"{field!r} is not a TlsSettings field")
        return dict(self.sources).get(field, _SETTING_OF[field])

    def _setting_like(self, present: str, missing: str) -> str:
        """The key for the unset ``missing`` field, with the prefix that
        ``present`` was read under (a listener's settings belong together)."""
        if missing in dict(self.sources):
            return self.setting(missing)
        read = self.setting(present)
        return read[: len(read) - len(_SETTING_OF[present])] + _SETTING_OF[missing]

    def _check_choices(self) -> None:
        if self.client_auth not in _CLIENT_AUTH:
            raise TlsConfigError(self.setting("client_auth"),
                                 f"{self.client_auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
        if not self.enabled_protocols:
            raise TlsConfigError(self.setting("enabled_protocols"), "no protocol is enabled: "
                                 f"name one or both of {', '.join(_PROTOCOLS)}")
        for name in self.enabled_protocols:
            if name not in _PROTOCOLS:
                raise TlsConfigError(self.setting("enabled_protocols"),
                                     f"{name!r} is not supported ({', '.join(_PROTOCOLS)})")
        if self.protocol not in _SSL_PROTOCOLS:
            raise TlsConfigError(self.setting("protocol"), f"{self.protocol!r} is not supported "
                                 f"({', '.join(_SSL_PROTOCOLS)})")
        for field in ("keystore_type", "truststore_type"):
            value = getattr(self, field)
            if value not in _STORE_TYPES:
                raise TlsConfigError(self.setting(field),
                                     f"{value!r} is not supported ({', '.join(_STORE_TYPES)})")
        self._check_cipher_suites()
        if self.endpoint_identification_algorithm not in ("https", ""):
            raise TlsConfigError(
                self.setting("endpoint_identification_algorithm"),
                f"{self.endpoint_identification_algorithm!r} is not supported: use https "
                "(check the server's host name) or an empty value (do not check it)")

    def _check_cipher_suites(self) -> None:
        if not self.cipher_suites:
            return
        key = self.setting("cipher_suites")
        for name in self.cipher_suites:
            if name not in TLS12_CIPHER_SUITES and name not in TLS13_CIPHER_SUITES:
                raise TlsConfigError(key, f"{name!r} is not a cipher suite raftlog offers: give "
                                     "IANA names, as for Java (the README lists them)")
        tls13 = TLS13_CIPHER_SUITES & set(self.cipher_suites)
        if tls13 and tls13 != TLS13_CIPHER_SUITES:
            raise TlsConfigError(key, "names only some of TLS 1.3's suites, and Python's ssl "
                                 "module cannot narrow them: name all of "
                                 f"{', '.join(sorted(TLS13_CIPHER_SUITES))}, or none (no TLS 1.3)")
        usable = [version for version, named in (("TLSv1.2", self.tls12_ciphers()),
                                                 ("TLSv1.3", tls13)) if named]
        if not set(usable) & set(self.enabled_protocols):
            raise TlsConfigError(key, f"names suites of {' and '.join(usable)} only, which "
                                 f"{self.setting('enabled_protocols')} does not enable")

    def tls12_ciphers(self) -> tuple[str, ...]:
        """OpenSSL's names of the TLS 1.2 suites ``ssl.cipher.suites`` names, in order."""
        return tuple(TLS12_CIPHER_SUITES[n] for n in self.cipher_suites
                     if n in TLS12_CIPHER_SUITES)

    def _check_keystore(self) -> None:
        # The combinations DefaultSslEngineFactory.createKeystore refuses.
        key, chain = self.keystore_key, self.keystore_certificate_chain
        location, password = self.keystore_location, self.keystore_password
        if key is not None or chain is not None:
            if key is None or chain is None:
                present, missing = (("keystore_key", "keystore_certificate_chain") if chain is None
                                    else ("keystore_certificate_chain", "keystore_key"))
                raise TlsConfigError(self.setting(present), f"is set without "
                                     f"{self._setting_like(present, missing)}: an inline "
                                     "keystore needs both the key and the chain")
            if location is not None:
                raise TlsConfigError(self.setting("keystore_key"), "cannot be used together with "
                                     f"{self.setting('keystore_location')}: give the key and "
                                     "chain either inline or in a file")
            if self.keystore_type != "PEM":
                raise TlsConfigError(self.setting("keystore_type"),
                                     f"is {self.keystore_type}, but an inline key and chain "
                                     f"({self.setting('keystore_key')}) must have type PEM")
        if self.keystore_type == "PEM" and password is not None:
            raise TlsConfigError(self.setting("keystore_password"),
                                 "cannot be used with keystore type PEM: encrypt the private "
                                 "key and give its password in "
                                 f"{self._setting_like('keystore_password', 'key_password')}")
        if self.keystore_type != "PEM" and location is not None and password is None:
            raise TlsConfigError(self._setting_like("keystore_location", "keystore_password"),
                                 f"is not set, but the {self.keystore_type} keystore "
                                 f"{self.setting('keystore_location')} needs its password")
        if location is None and key is None and password is not None:
            where = self._setting_like("keystore_password", "keystore_location")
            raise TlsConfigError(self.setting("keystore_password"),
                                 f"is set, but there is no keystore ({where})")

    def _check_truststore(self) -> None:
        # The combinations DefaultSslEngineFactory.createTruststore refuses.
        certificates, location = self.truststore_certificates, self.truststore_location
        password = self.truststore_password
        if certificates is not None:
            if location is not None:
                raise TlsConfigError(self.setting("truststore_certificates"),
                                     "cannot be used together with "
                                     f"{self.setting('truststore_location')}: give the "
                                     "certificates either inline or in a file")
            if self.truststore_type != "PEM":
                raise TlsConfigError(self.setting("truststore_type"),
                                     f"is {self.truststore_type}, but inline certificates "
                                     f"({self.setting('truststore_certificates')}) must have "
                                     "type PEM")
        if self.truststore_type == "PEM" and password is not None:
            raise TlsConfigError(self.setting("truststore_password"),
                                 "cannot be used with truststore type PEM")
        if location is None and certificates is None and password is not None:
            where = self._setting_like("truststore_password", "truststore_location")
            raise TlsConfigError(self.setting("truststore_password"),
                                 f"is set, but there is no truststore ({where})")

    def __repr__(self) -> str:
        # Passwords and inline keys stay out of logs; only whether they are set shows.
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            secret = f.name in _SECRET_FIELDS and value is not None
            shown = "'<redacted>'" if secret else repr(value)
            parts.append(f"{f.name}={shown}")
        return f"TlsSettings({', '.join(parts)})"


_SETTING_OF: Final = {f.name: "ssl." + f.name.replace("_", ".")
                      for f in fields(TlsSettings) if f.name != "sources"}


def tls_settings(props: Mapping[str, str], prefix: str = "") -> TlsSettings:
    """The ``ssl.*`` settings in ``props``. Each is read from
    ``props[prefix + name]`` when present (Kafka's per-listener override, e.g.
    prefix ``"listener.name.ssl."``), else ``props[name]``, else Kafka's
    default. Values are trimmed as Kafka trims them.

    Raises TlsConfigError naming the key read when: ``ssl.client.auth`` is not
    required/requested/none; ``ssl.enabled.protocols`` is empty or names
    anything but TLSv1.2 and TLSv1.3; ``ssl.protocol`` is not TLSv1.2, TLSv1.3
    or TLS; a store type is not JKS, PKCS12 or PEM; a keystore is given both
    inline and as a file, or inline without its key or chain; inline PEM is
    given under another explicit type (left at its default, the type becomes
    PEM); a store password is given for a PEM store or for no store; a
    JKS/PKCS12 keystore has no password; the endpoint identification algorithm
    is not https or empty; the mapping rules do not parse; or
    ``ssl.cipher.suites`` names a suite not offered, only some of TLS 1.3's
    suites, or only suites of protocols not enabled. Unknown keys are the
    caller's to check.
    """
    values: dict[str, str] = {}
    sources: list[tuple[str, str]] = []
    for field, name in _SETTING_OF.items():
        key = _key(props, prefix, name)
        if key is not None:
            values[field] = java_trim(props[key])
            sources.append((field, key))
    if "keystore_type" not in values and ("keystore_key" in values
                                          or "keystore_certificate_chain" in values):
        values["keystore_type"] = "PEM"
    if "truststore_type" not in values and "truststore_certificates" in values:
        values["truststore_type"] = "PEM"
    changes: dict[str, Any] = dict(values, sources=tuple(sources))
    for field in ("enabled_protocols", "cipher_suites"):
        if field in values:
            changes[field] = _kafka_list(values[field])
    return replace(TlsSettings(), **changes)


def _key(props: Mapping[str, str], prefix: str, name: str) -> str | None:
    if prefix and prefix + name in props:
        return prefix + name
    return name if name in props else None




def _kafka_list(text: str) -> tuple[str, ...]:
    # ConfigDef.Type.LIST: an empty value is an empty list; otherwise split
    # on commas with the white space around them (empty items are kept).
    trimmed = java_trim(text)
    return tuple(re.split(r"\s*,\s*", trimmed)) if trimmed else ()


# ---------------------------------------------------------------------------
# Contexts

def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context for a listener: its keystore's key and chain, the
    enabled protocol versions and, for ``ssl.client.auth`` requested
    (CERT_OPTIONAL) or required (CERT_REQUIRED), the truststore's CAs.
    Raises TlsConfigError when there is no keystore, when client
    authentication is on without a truststore, or when a store cannot be
    read (missing file, wrong password, no private key, not a keystore)."""
    key_and_chain = _keystore(settings)
    if key_and_chain is None:
        raise TlsConfigError(settings.setting("keystore_location"),
                             "a listener with TLS needs a keystore: set it (with its type "
                             "and password), or set ssl.keystore.key and "
                             "ssl.keystore.certificate.chain")
    cas = _truststore(settings)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, settings, client=False)
    _load_key_and_chain(context, key_and_chain)
    if settings.client_auth != "none":
        if not cas:
            raise TlsConfigError(settings._setting_like("client_auth", "truststore_location"),
                                 f"is not set, but ssl.client.auth={settings.client_auth} needs a "
                                 "truststore with the CAs that sign client certificates")
        _load_cas(context, settings, cas)
        context.verify_mode = (ssl.CERT_REQUIRED if settings.client_auth == "required"
                               else ssl.CERT_OPTIONAL)
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client context: the truststore's CAs, else the system's (as a JVM
    uses its cacerts); the keystore's key and chain when one is set (mutual
    TLS); host name checking when the endpoint identification algorithm is
    https; the server's certificate always verified. With ``ssl.protocol``
    TLSv1.2 the client offers nothing newer (Kafka's documented behaviour).
    Raises TlsConfigError as `server_context` does, and when ``ssl.protocol``
    rules out every enabled protocol."""
    cas = _truststore(settings)
    key_and_chain = _keystore(settings)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(context, settings, client=True)
    if cas is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        _load_cas(context, settings, cas)
    if key_and_chain is not None:
        _load_key_and_chain(context, key_and_chain)
    context.check_hostname = settings.endpoint_identification_algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def reload_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    """Load ``settings``' keystore (key and chain) into ``context``, an
    existing server or client context: handshakes from now on present it,
    connections already made keep theirs (Kafka's dynamic keystore update,
    KIP-226). Raises TlsConfigError as `server_context` does, and when there
    is no keystore; ``context`` is unchanged then."""
    key_and_chain = _keystore(settings)
    if key_and_chain is None:
        raise TlsConfigError(settings.setting("keystore_location"), "no keystore is set")
    _load_key_and_chain(context, key_and_chain)


def keystore_certificate(settings: TlsSettings) -> x509.Certificate | None:
    """The keystore's own certificate (the chain's first), read as
    `server_context` reads it; None without a keystore. Raises
    TlsConfigError when the keystore cannot be read."""
    key_and_chain = _keystore(settings)
    return None if key_and_chain is None else key_and_chain.chain[0]


@dataclass(frozen=True, slots=True, repr=False)
class PemMaterial:
    """The stores as PEM text, for librdkafka's ``ssl.ca.pem``,
    ``ssl.certificate.pem`` and ``ssl.key.pem``: the truststore's CAs, the
    keystore's chain (leaf first) and its key (unencrypted PKCS#8)."""

    ca: str | None
    certificate: str | None
    key: str | None

    def __repr__(self) -> str:
        key = None if self.key is None else "<redacted>"
        return f"PemMaterial(ca={self.ca!r}, certificate={self.certificate!r}, key={key!r})"


def pem_material(settings: TlsSettings) -> PemMaterial:
    """The settings' stores as PEM text; None for a store that is not set.
    Raises TlsConfigError when a store cannot be read."""
    cas = _truststore(settings)
    key_and_chain = _keystore(settings)
    if key_and_chain is None:
        return PemMaterial(ca=_certificates_pem(cas) if cas else None, certificate=None, key=None)
    key = key_and_chain.key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()).decode("ascii")
    return PemMaterial(ca=_certificates_pem(cas) if cas else None,
                       certificate=_certificates_pem(key_and_chain.chain), key=key)


def _set_versions(context: ssl.SSLContext, settings: TlsSettings, *, client: bool) -> None:
    versions = sorted(_VERSIONS[name] for name in settings.enabled_protocols)
    lowest, highest = versions[0], versions[-1]
    if client and settings.protocol == "TLSv1.2":
        # Kafka: "If this config is set to 'TLSv1.2', clients will not use
        # 'TLSv1.3' even if it is one of the values in ssl.enabled.protocols".
        highest = min(highest, ssl.TLSVersion.TLSv1_2)
        if highest < lowest:
            raise TlsConfigError(settings.setting("protocol"),
                                 "is TLSv1.2, so a client cannot use TLSv1.3, the only protocol in "
                                 f"{settings.setting('enabled_protocols')}")
    if settings.cipher_suites:
        tls12 = settings.tls12_ciphers()
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise TlsConfigError(settings.setting("cipher_suites"),
                                     "OpenSSL offers none of these suites") from None
        else:
            lowest = max(lowest, ssl.TLSVersion.TLSv1_3)  # no TLS 1.2 suite: no TLS 1.2
        if not TLS13_CIPHER_SUITES & set(settings.cipher_suites):
            highest = min(highest, ssl.TLSVersion.TLSv1_2)  # no TLS 1.3 suite: no TLS 1.3
        if highest < lowest:
            raise TlsConfigError(settings.setting("cipher_suites"),
                                 "leaves no protocol this "
                                 f"{'client' if client else 'listener'} may use")
    context.minimum_version = lowest
    context.maximum_version = highest


@dataclass(frozen=True, slots=True, repr=False)
class _KeyAndChain:
    key: PrivateKeyTypes
    chain: tuple[x509.Certificate, ...]  # leaf first; the leaf's public key is the key's
    setting: str  # where they came from, for errors


def _load_key_and_chain(context: ssl.SSLContext, key_and_chain: _KeyAndChain) -> None:
    # ssl can load a key only from a file. The file is private (mkstemp
    # makes it 0600), the key in it is encrypted under a one-off password,
    # and it is gone before this returns.
    password = secrets.token_urlsafe(32).encode("ascii")
    text = key_and_chain.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password))
    text += _certificates_pem(key_and_chain.chain).encode("ascii")
    descriptor, path = tempfile.mkstemp(prefix="raftlog-tls-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(text)
        context.load_cert_chain(path, password=password)
    except ssl.SSLError as e:
        raise TlsConfigError(key_and_chain.setting,
                             f"OpenSSL refused the key or certificate: {e.reason or e}") from None
    finally:
        os.unlink(path)


def _load_cas(context: ssl.SSLContext, settings: TlsSettings,
              cas: tuple[x509.Certificate, ...]) -> None:
    try:
        context.load_verify_locations(cadata=_certificates_pem(cas))
    except ssl.SSLError as e:
        inline = settings.truststore_certificates is not None
        raise TlsConfigError(settings.setting("truststore_certificates" if inline
                                              else "truststore_location"),
                             f"OpenSSL refused a CA certificate: {e.reason or e}") from None


def _certificates_pem(certificates: tuple[x509.Certificate, ...]) -> str:
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certificates)


# ---------------------------------------------------------------------------
# Stores

def _keystore(settings: TlsSettings) -> _KeyAndChain | None:
    key_password_setting = settings._setting_like(
        "keystore_key" if settings.keystore_key is not None else "keystore_location",
        "key_password")
    if settings.keystore_key is not None and settings.keystore_certificate_chain is not None:
        return _pem_key_and_chain(settings.keystore_key, settings.setting("keystore_key"),
                                  settings.keystore_certificate_chain,
                                  settings.setting("keystore_certificate_chain"),
                                  settings.key_password, key_password_setting)
    if settings.keystore_location is None:
        return None
    setting = settings.setting("keystore_location")
    data = _read(settings.keystore_location, setting)
    if settings.keystore_type == "PEM":
        text = _pem_text(data, setting)
        return _pem_key_and_chain(text, setting, text, setting,
                                  settings.key_password, key_password_setting)
    _check_pkcs12(data, setting, settings.keystore_location, settings.setting("keystore_type"))
    password = settings.keystore_password
    try:
        # PKCS12 has one password for the file and its key (keytool ignores
        # a separate key password for PKCS12), so ssl.key.password is unused.
        key, certificate, others = pkcs12.load_key_and_certificates(
            data, None if password is None else password.encode("utf-8"))
    except ValueError:
        raise TlsConfigError(settings.setting("keystore_password"),
                             f"does not open the PKCS12 keystore {settings.keystore_location!r} "
                             f"({setting}): wrong password, or the file is damaged") from None
    if key is None:
        raise TlsConfigError(setting, f"{settings.keystore_location!r} holds no private key "
                                      "(is it a truststore?)")
    if certificate is None:
        raise TlsConfigError(setting, f"{settings.keystore_location!r} holds no certificate "
                                      "for its private key")
    _check_key_matches(key, certificate, setting)
    return _KeyAndChain(key, _chain_from(certificate, others), setting)


def _truststore(settings: TlsSettings) -> tuple[x509.Certificate, ...] | None:
    if settings.truststore_certificates is not None:
        setting = settings.setting("truststore_certificates")
        return _pem_certificates(settings.truststore_certificates, setting)
    if settings.truststore_location is None:
        return None
    setting = settings.setting("truststore_location")
    data = _read(settings.truststore_location, setting)
    if settings.truststore_type == "PEM":
        return _pem_certificates(_pem_text(data, setting), setting)
    _check_pkcs12(data, setting, settings.truststore_location, settings.setting("truststore_type"))
    password = settings.truststore_password
    try:
        store = pkcs12.load_pkcs12(data, None if password is None else password.encode("utf-8"))
    except ValueError:
        reason = "wrong password" if password is not None else "it needs a password"
        raise TlsConfigError(settings._setting_like("truststore_location", "truststore_password"),
                             "does not open the PKCS12 truststore "
                             f"{settings.truststore_location!r} ({setting}): {reason}, or the "
                             "file is damaged") from None
    certificates = ([] if store.cert is None else [store.cert.certificate]) + [
        c.certificate for c in store.additional_certs]
    if not certificates:
        raise TlsConfigError(setting, f"{settings.truststore_location!r} holds no certificates")
    return tuple(certificates)


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as e:
        raise TlsConfigError(setting, f"cannot read {path!r}: {e.strerror or e}") from None


def _pem_text(data: bytes, setting: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TlsConfigError(setting, "is not a PEM file (it is binary: is it a PKCS12 store? "
                                      "then set the store type to PKCS12)") from None


def _check_pkcs12(data: bytes, setting: str, path: str, type_setting: str) -> None:
    """Refuses what is plainly not a PKCS12 file, with the reason."""
    kind = _JKS_MAGIC.get(data[:4])
    if kind is not None:
        raise TlsConfigError(setting, f"{path!r} is a {kind} keystore. JKS keystores are not "
                                      "supported: convert it with keytool -importkeystore "
                                      "-deststoretype PKCS12, or use PEM")
    if b"-----BEGIN " in data[:4096]:
        raise TlsConfigError(setting, f"{path!r} is a PEM file: set {type_setting}=PEM")
    if data[:1] != b"\x30":  # a PFX is a DER SEQUENCE
        raise TlsConfigError(setting, f"{path!r} is not a PKCS12 file")


# Lenient about white space as Kafka's PemParser is: a value continued over
# lines in a properties file arrives with spaces where the newlines were.
_PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def _pem_blocks(text: str, suffix: str) -> list[tuple[str, bytes]]:
    """(label, the block as canonical PEM) for each block whose label ends
    with ``suffix``."""
    blocks = []
    for match in _PEM_BLOCK.finditer(text):
        label, body = match.group(1), match.group(2)
        if not label.endswith(suffix):
            continue
        if ":" in body:  # RFC 1421 headers (an encrypted traditional key): keep the lines
            canonical = match.group(0)
        else:
            data = re.sub(r"\s+", "", body)
            lines = "".join(data[i:i + 64] + "\n" for i in range(0, len(data), 64))
            canonical = f"-----BEGIN {label}-----\n{lines}-----END {label}-----\n"
        blocks.append((label, canonical.encode("ascii", errors="replace")))
    return blocks


def _pem_certificates(text: str, setting: str) -> tuple[x509.Certificate, ...]:
    blocks = [block for label, block in _pem_blocks(text, "CERTIFICATE") if label == "CERTIFICATE"]
    if not blocks:
        raise TlsConfigError(setting, "holds no certificate (-----BEGIN CERTIFICATE-----)")
    certificates = []
    for number, block in enumerate(blocks, 1):
        try:
            certificates.append(x509.load_pem_x509_certificate(block))
        except ValueError as e:
            raise TlsConfigError(setting, f"certificate {number} is not valid: {e}") from None
    return tuple(certificates)


def _pem_key_and_chain(key_text: str, key_setting: str, chain_text: str, chain_setting: str,
                       key_password: str | None, key_password_setting: str) -> _KeyAndChain:
    keys = _pem_blocks(key_text, "PRIVATE KEY")
    if len(keys) != 1:
        found = "no" if not keys else str(len(keys))
        raise TlsConfigError(key_setting, f"holds {found} private keys (-----BEGIN PRIVATE "
                                          "KEY-----); a keystore needs exactly one")
    label, block = keys[0]
    encrypted = label == "ENCRYPTED PRIVATE KEY" or b"Proc-Type: 4,ENCRYPTED" in block
    if encrypted and key_password is None:
        raise TlsConfigError(key_password_setting,
                             f"is not set, but the private key in {key_setting} is encrypted")
    if not encrypted and key_password is not None:
        # Kafka reads a PEM key as encrypted PKCS#8 whenever a key password is set.
        raise TlsConfigError(key_password_setting,
                             f"is set, but the private key in {key_setting} is not encrypted")
    try:
        key = serialization.load_pem_private_key(
            block, None if key_password is None else key_password.encode("utf-8"))
    except UnsupportedAlgorithm as e:
        raise TlsConfigError(key_setting,
                             f"the private key's algorithm is not supported: {e}") from None
    except (ValueError, TypeError):
        if encrypted:
            raise TlsConfigError(key_password_setting,
                                 f"does not decrypt the private key in {key_setting}: "
                                 "wrong password, or the key is damaged") from None
        raise TlsConfigError(key_setting, "the private key could not be read") from None
    chain = _pem_certificates(chain_text, chain_setting)
    _check_key_matches(key, chain[0], chain_setting)
    return _KeyAndChain(key, chain, key_setting)


def _check_key_matches(key: PrivateKeyTypes, certificate: x509.Certificate, setting: str) -> None:
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        mine = key.public_key().public_bytes(*spki)
        matches = mine == certificate.public_key().public_bytes(*spki)
    except (ValueError, UnsupportedAlgorithm) as e:
        raise TlsConfigError(setting,
                             f"the certificate's public key is not supported: {e}") from None
    if not matches:
        raise TlsConfigError(setting, "the first certificate is not the private key's "
                                      "(the chain must start with the key's own certificate)")


def _chain_from(leaf: x509.Certificate,
                others: list[x509.Certificate]) -> tuple[x509.Certificate, ...]:
    # A PKCS12 file's certificate bags are unordered: follow issuers from
    # the key's certificate, as Java's PKCS12 KeyStore builds an entry's chain.
    chain = [leaf]
    remaining = list(others)
    while chain[-1].issuer != chain[-1].subject:
        issuer = next((c for c in remaining if c.subject == chain[-1].issuer), None)
        if issuer is None:
            break
        chain.append(issuer)
        remaining.remove(issuer)
    return tuple(chain)
