"""The CLI's ``--command-config FILE``: client properties, as Kafka's tools
take them, for a cluster whose listener wants TLS or SASL.

The file is Java properties with Kafka's client names::

    security.protocol=SASL_PLAINTEXT
    sasl.mechanism=SCRAM-SHA-256
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";

``sasl.username`` and ``sasl.password`` (librdkafka's names) may stand for
the JAAS config. ``sasl.mechanism=OAUTHBEARER`` takes Kafka's unsecured
login: ``OAuthBearerLoginModule`` with ``unsecuredLoginStringClaim_sub``
(the principal) and optionally ``unsecuredLoginListClaim_scope``,
``unsecuredLoginLifetimeSeconds``, ``unsecuredLoginPrincipalClaimName``,
``unsecuredLoginScopeClaimName`` and ``unsecuredLoginExtension_<name>``;
librdkafka gets the same token through ``enable.sasl.oauthbearer.unsecure.jwt``
and ``sasl.oauthbearer.config``, which carries no other claims, so other
claims are refused. With ``security.protocol=SSL`` or ``SASL_SSL``, Kafka's
client ``ssl.*`` settings say which CAs to trust (``ssl.truststore.*``, PEM
or PKCS12; without one, the system's), which certificate to present
(``ssl.keystore.*``, for listeners with ``ssl.client.auth``) and whether to
check the broker's host name (``ssl.endpoint.identification.algorithm``,
``https`` by default, empty to skip). Kafka's tools hand every other property to the client as
it is; raftlog's CLI drives two clients (librdkafka and its own), so it
takes only the ones it can give both, and names any other as an error
rather than dropping it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Final

from data_plane.config import parse_properties
from data_plane.security_config import oauthbearer_credentials
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.security.jaas import MODULES, JaasEntry, client_credentials, parse_jaas_config
from raftlog.security.oauthbearer import OAuthBearerConfigError, UnsecuredLogin
from raftlog.security.sasl import OAUTHBEARER, PLAIN, SUPPORTED_MECHANISMS, SaslCredentials
from raftlog.security.tls import (
    TLS_SETTINGS,
    PemMaterial,
    TlsConfigError,
    client_context,
    pem_material,
    tls_settings,
)

__all__ = ("CLIENT_SETTINGS", "ClientConfigError", "ClientSecurity", "load_command_config")

#: The client's TLS settings (the rest of TLS_SETTINGS are a listener's).
CLIENT_TLS_SETTINGS: Final = TLS_SETTINGS - {"ssl.client.auth", "ssl.principal.mapping.rules"}
#: The client properties a command config may hold.
CLIENT_SETTINGS: Final = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password",
}) | CLIENT_TLS_SETTINGS
_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ClientConfigError(ValueError):
    """A command config the CLI cannot use; the message says why."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How the CLI's clients reach the cluster."""

    sasl: SaslCredentials | None = None
    # TLS: raftlog's client context, and the same material as PEM text for
    # librdkafka (which cannot take a context).
    tls: ssl.SSLContext | None = field(default=None, compare=False)
    pem: PemMaterial | None = None
    check_hostname: bool = True
    # OAUTHBEARER: the unsecured token's options (librdkafka builds its own).
    oauthbearer: UnsecuredLogin | None = None
    # ssl.cipher.suites' TLS 1.2 suites, OpenSSL's names joined by ":" (librdkafka's
    # ssl.cipher.suites); None: OpenSSL's defaults.
    ciphers: str | None = None

    @property
    def connection(self) -> ConnectionSecurity:
        """The same, for raftlog's own client."""
        if self.sasl is None and self.tls is None:
            return PLAINTEXT_SECURITY
        return ConnectionSecurity(sasl=self.sasl, tls=self.tls)

    @property
    def protocol(self) -> str:
        return self.connection.protocol

    def librdkafka(self) -> dict[str, str]:
        """The same, as confluent-kafka (librdkafka) configuration."""
        if self.sasl is None and self.tls is None:
            return {}
        out = {"security.protocol": self.protocol}
        if self.oauthbearer is not None:
            out.update({"sasl.mechanism": OAUTHBEARER,
                        "enable.sasl.oauthbearer.unsecure.jwt": "true",
                        "sasl.oauthbearer.config": _librdkafka_unsecured(self.oauthbearer)})
        elif self.sasl is not None:
            if self.sasl.extensions:
                # librdkafka has no SCRAM extensions, so no delegation tokens.
                raise ClientConfigError(
                    "librdkafka cannot log in with a delegation token (tokenauth=\"true\"): "
                    "produce and consume with a SCRAM user instead")
            out.update({"sasl.mechanism": self.sasl.mechanism,
                        "sasl.username": self.sasl.username, "sasl.password": self.sasl.password})
        if self.pem is not None:
            out["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname \
                else "none"
            if self.ciphers:
                out["ssl.cipher.suites"] = self.ciphers
            for key, text in (("ssl.ca.pem", self.pem.ca),
                              ("ssl.certificate.pem", self.pem.certificate),
                              ("ssl.key.pem", self.pem.key)):
                if text:
                    out[key] = text
        return out


PLAINTEXT_CLIENT: Final = ClientSecurity()


def load_command_config(path: str | None) -> ClientSecurity:
    """Read ``path`` (None: PLAINTEXT). Raises ClientConfigError."""
    if path is None:
        return PLAINTEXT_CLIENT
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as exc:
        raise ClientConfigError(f"--command-config: cannot read {path}: "
                                f"{exc.strerror or exc}") from None
    return client_security(props, where=path)


def client_security(props: dict[str, str], where: str = "--command-config") -> ClientSecurity:
    """The security of client properties ``props``. Raises ClientConfigError."""
    unknown = sorted(set(props) - CLIENT_SETTINGS)
    if unknown:
        raise ClientConfigError(
            f"{where}: {', '.join(unknown)}: not supported here (the CLI takes "
            f"{', '.join(sorted(CLIENT_SETTINGS))})")
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise ClientConfigError(f"{where}: security.protocol={protocol}: raftlog listeners speak "
                                f"{' or '.join(_PROTOCOLS)}")
    if not protocol.startswith("SASL_"):
        stray = sorted(k for k in props if k.startswith("sasl."))
        if stray:
            raise ClientConfigError(f"{where}: {', '.join(stray)} set, but security.protocol is "
                                    f"{protocol} (SASL_PLAINTEXT or SASL_SSL use them)")
    if not protocol.endswith("SSL"):
        stray = sorted(k for k in props if k.startswith("ssl."))
        if stray:
            raise ClientConfigError(f"{where}: {', '.join(stray)} set, but security.protocol is "
                                    f"{protocol} (SSL or SASL_SSL use them)")
    tls = _client_tls(props, where) if protocol.endswith("SSL") else ClientSecurity()
    if not protocol.startswith("SASL_"):
        return tls if protocol == "SSL" else PLAINTEXT_CLIENT
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ClientConfigError(f"{where}: sasl.mechanism={mechanism} is not supported "
                                f"({', '.join(SUPPORTED_MECHANISMS)})")
    if mechanism == OAUTHBEARER:
        login = _oauthbearer_login(props, where)
        return ClientSecurity(oauthbearer_credentials(login), tls.tls, tls.pem,
                              tls.check_hostname, login)
    user, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    extensions: tuple[tuple[str, str], ...] = ()
    if jaas is not None:
        entry = _jaas_entry(jaas, mechanism, where)
        if mechanism != PLAIN and entry.options.get("tokenauth", "").lower() == "true":
            # KIP-48: a delegation token (username = token id, password =
            # its HMAC) logs in with ScramLoginModule's tokenauth="true".
            extensions = (("tokenauth", "true"),)
        try:
            found = client_credentials(entry)
        except ValueError as exc:  # a username without a password, or the reverse
            raise ClientConfigError(f"{where}: sasl.jaas.config: {exc}") from None
        if found is None:
            raise ClientConfigError(f"{where}: sasl.jaas.config has no username and password")
        user, password = found
    if not user or password is None:
        raise ClientConfigError(
            f"{where}: {protocol} needs sasl.jaas.config (or sasl.username and "
            f"sasl.password) for {mechanism}")
    return ClientSecurity(SaslCredentials(mechanism, user, password, extensions=extensions),
                          tls.tls, tls.pem, tls.check_hostname)


def _jaas_entry(jaas: str, mechanism: str, where: str) -> JaasEntry:
    """``sasl.jaas.config`` parsed, with the mechanism's login module."""
    try:
        entry = parse_jaas_config(jaas)
    except ValueError as exc:
        raise ClientConfigError(f"{where}: sasl.jaas.config: {exc}") from None
    if entry.login_module != MODULES[mechanism]:
        raise ClientConfigError(f"{where}: sasl.jaas.config: {mechanism} takes "
                                f"{MODULES[mechanism]}, not {entry.login_module}")
    return entry


def _oauthbearer_login(props: dict[str, str], where: str) -> UnsecuredLogin:
    """The unsecured login of an OAUTHBEARER command config."""
    jaas = props.get("sasl.jaas.config")
    if jaas is None or "sasl.username" in props or "sasl.password" in props:
        raise ClientConfigError(
            f"{where}: OAUTHBEARER takes sasl.jaas.config ({MODULES[OAUTHBEARER]} with "
            "unsecuredLoginStringClaim_sub=\"<principal>\"), not sasl.username/sasl.password")
    entry = _jaas_entry(jaas, OAUTHBEARER, where)
    try:
        login = UnsecuredLogin.from_jaas(entry.options)
    except OAuthBearerConfigError as exc:
        raise ClientConfigError(f"{where}: sasl.jaas.config: {exc.setting}: {exc.message}") \
            from None
    extra = sorted(set(login.claims) - {login.principal_claim, login.scope_claim})
    if extra:
        raise ClientConfigError(
            f"{where}: sasl.jaas.config: claims {', '.join(extra)}: the CLI's tokens carry only "
            "the principal and scope claims (librdkafka's unsecured tokens have no others)")
    return login


def _librdkafka_unsecured(login: UnsecuredLogin) -> str:
    """librdkafka's ``sasl.oauthbearer.config`` for the same unsecured token."""
    parts = [f"principal={login.principal}"]
    if login.principal_claim != "sub":
        parts.append(f"principalClaimName={login.principal_claim}")
    scope = login.claims.get(login.scope_claim)
    if scope:
        parts.append("scope=" + ",".join(map(str, scope)) if isinstance(scope, (list, tuple))
                     else f"scope={scope}")
    if login.scope_claim != "scope":
        parts.append(f"scopeClaimName={login.scope_claim}")
    parts.append(f"lifeSeconds={login.lifetime_s}")
    parts.extend(f"extension_{name}={value}" for name, value in sorted(login.extensions.items()))
    return " ".join(parts)


def _client_tls(props: dict[str, str], where: str) -> ClientSecurity:
    """The TLS half of a client's security: its context and PEM material."""
    try:
        settings = tls_settings({k: v for k, v in props.items() if k in CLIENT_TLS_SETTINGS})
        return ClientSecurity(tls=client_context(settings), pem=pem_material(settings),
                              check_hostname=settings.endpoint_identification_algorithm == "https",
                              ciphers=":".join(settings.tls12_ciphers()) or None)
    except TlsConfigError as exc:
        raise ClientConfigError(f"{where}: {exc}") from None
