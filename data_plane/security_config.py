"""Listener security settings: which listeners speak TLS and SASL, with
which certificates, mechanisms and users, and how this node connects as a
client of its inter-broker listener. Kafka's names and rules (KIP-43,
KIP-103):

- ``listener.security.protocol.map``: ``NAME:PROTOCOL`` pairs. Kafka's
  default maps each protocol's own name (PLAINTEXT, SSL, SASL_PLAINTEXT,
  SASL_SSL). When the map is set, every listener must be in it. When it is
  not, a listener with another name (``CONTROLLER``, ``EXTERNAL``) is
  PLAINTEXT: Kafka does that for controller listeners only.
- Protocols served: PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL, on broker
  and controller listeners alike. Every node dials the controllers on the
  first of ``controller.listener.names``, so a broker-only node's map names
  that listener's protocol too, and its ``listener.name.<controller>.*``
  settings say how to connect (a truststore, a client certificate, the
  JAAS ``username`` and ``password`` of ``sasl.mechanism.controller.protocol``).
- TLS listeners take Kafka's ``ssl.*`` settings (`raftlog.security.tls`),
  each also per listener as ``listener.name.<listener>.ssl.*``, which wins.
  Every context is built here, so an unreadable keystore or a wrong
  password fails start-up naming the setting. As in Kafka (KIP-684),
  ``ssl.client.auth`` applies to a SASL_SSL listener only when set with its
  listener prefix. On an SSL listener the client's principal is its
  certificate's subject, mapped by ``ssl.principal.mapping.rules``
  (ANONYMOUS without a certificate); on SASL_SSL it is the SASL login.
- ``sasl.enabled.mechanisms`` (Kafka's default, GSSAPI, is not served), or
  per listener ``listener.name.<listener>.sasl.enabled.mechanisms``: PLAIN,
  SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.
- ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (the names in
  lower case): PLAIN needs one, whose ``user_<name>="<password>"`` options
  are the users; SCRAM users live in the metadata log (KIP-554). Its
  ``username`` and ``password`` are what this node authenticates with when
  it connects to that listener (inter-broker).
- OAUTHBEARER (KIP-255, `raftlog.security.oauthbearer`): its JAAS config
  (``OAuthBearerLoginModule``) is required where the mechanism is served.
  Tokens are checked by Kafka's default, the *unsecured* validator (unsigned
  tokens; its ``unsecuredValidator*`` JAAS options), or, when
  ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`` is
  ``org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler``,
  by KIP-768's validator: signed JWTs against the JWKS at
  ``sasl.oauthbearer.jwks.endpoint.url``, with the other
  ``sasl.oauthbearer.*`` settings (each also under the listener and
  mechanism prefix, which wins). A node logs in with the unsecured token
  its JAAS ``unsecuredLogin*`` options describe; KIP-768's client
  credentials flow (``sasl.login.callback.handler.class``,
  ``sasl.oauthbearer.token.endpoint.url``) is refused, not implemented.
- ``inter.broker.listener.name`` (default: the first broker listener) and
  ``sasl.mechanism.inter.broker.protocol`` (Kafka's default GSSAPI: it must
  be set when the inter-broker listener is SASL);
  ``sasl.mechanism.controller.protocol`` likewise for the controller
  listener.
- ``connection.failed.authentication.delay.ms`` (100): how long a failed
  authentication's answer is held before the connection is closed.
- ``sasl.server.max.receive.size`` (524288): the largest frame a SASL
  listener reads before the client has logged in.
- ``connections.max.reauth.ms`` (0), also per listener
  (``listener.name.<l>.connections.max.reauth.ms``) and per listener and
  mechanism (``listener.name.<l>.<mechanism>.connections.max.reauth.ms``,
  which wins): above 0, a SASL login's session lasts at most this long,
  and the client must re-authenticate on the connection before it ends
  (KIP-368, `raftlog.net.sasl`). An OAUTHBEARER session ends when its token
  does, whatever this says.
- ``authorizer.class.name`` (none): ``org.apache.kafka.metadata.authorizer.
  StandardAuthorizer`` checks every broker request against the ACLs in the
  metadata log (`metadata_quorum.acls`); ``super.users`` (``User:a;User:b``)
  and ``allow.everyone.if.no.acl.found`` (false) as in Kafka.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from metadata_quorum.acls import parse_principal
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.sasl import DEFAULT_MAX_RECEIVE_BYTES
from raftlog.security.jaas import (
    MODULES,
    JaasEntry,
    client_credentials,
    parse_jaas_config,
    plain_users,
)
from raftlog.security.oauthbearer import (
    JWT_VALIDATOR_SETTINGS,
    VALIDATOR_HANDLERS,
    BearerToken,
    JwtValidator,
    OAuthBearerConfigError,
    UnsecuredLogin,
    UnsecuredValidator,
)
from raftlog.security.sasl import OAUTHBEARER, PLAIN, SUPPORTED_MECHANISMS, SaslCredentials
from raftlog.security.tls import (
    TLS_SETTINGS,
    PrincipalMapper,
    TlsConfigError,
    TlsSettings,
    client_context,
    peer_principal,
    server_context,
    tls_settings,
)

__all__ = (
    "DEFAULT_PROTOCOL_MAP",
    "LISTENER_REAUTH_SETTING",
    "LISTENER_SECURITY_SETTING",
    "LISTENER_SECURITY_SETTINGS",
    "SECURITY_SETTINGS",
    "ListenerOAuthBearer",
    "ListenerSasl",
    "ListenerTls",
    "SecurityConfig",
    "SecurityConfigError",
    "oauthbearer_credentials",
    "parse_security",
)

PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SASL_PLAINTEXT: Final = "SASL_PLAINTEXT"
SASL_SSL: Final = "SASL_SSL"
_TLS: Final = frozenset({SSL, SASL_SSL})
_SASL: Final = frozenset({SASL_PLAINTEXT, SASL_SSL})
DEFAULT_PROTOCOL_MAP: Final = {name: name for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                                       "SASL_SSL")}

#: OAUTHBEARER settings named so that they are refused with the reason.
_REFUSED_OAUTHBEARER: Final = ("sasl.login.callback.handler.class",
                               "sasl.oauthbearer.token.endpoint.url",
                               "sasl.server.callback.handler.class")
_CLIENT_CREDENTIALS_REFUSED: Final = (
    "not supported: nodes and the CLI log in with the unsecured token of their JAAS "
    "unsecuredLogin* options (KIP-768's client credentials flow is not implemented)")
#: Kafka's default OAUTHBEARER validator, which may also be named.
_UNSECURED_VALIDATOR: Final = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                               "OAuthBearerUnsecuredValidatorCallbackHandler")

#: What may follow ``listener.name.<l>.oauthbearer.``.
_OAUTHBEARER_LISTENER_SETTINGS: Final = frozenset(
    {"sasl.server.callback.handler.class", *JWT_VALIDATOR_SETTINGS, *_REFUSED_OAUTHBEARER[:2]})

#: The node-wide settings this module reads (Kafka's names).
SECURITY_SETTINGS: Final = frozenset({
    "listener.security.protocol.map",
    "sasl.enabled.mechanisms",
    "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol",
    "inter.broker.listener.name",
    "connection.failed.authentication.delay.ms",
    "sasl.server.max.receive.size",
    "connections.max.reauth.ms",
    "authorizer.class.name",
    "super.users",
    "allow.everyone.if.no.acl.found",
    *JWT_VALIDATOR_SETTINGS,
    *_REFUSED_OAUTHBEARER,
}) | TLS_SETTINGS

#: The authorizer a node may name: Kafka's KRaft ACL authorizer (KIP-801).
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

#: The per-listener ones, as documented (``<listener>`` and ``<mechanism>``
#: stand for the lower-case names).
LISTENER_SECURITY_SETTINGS: Final = frozenset({
    "listener.name.<listener>.sasl.enabled.mechanisms",
    "listener.name.<listener>.<mechanism>.sasl.jaas.config",
    "listener.name.<listener>.<ssl setting>",
    "listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class",
    "listener.name.<listener>.oauthbearer.<sasl.oauthbearer setting>",
    "listener.name.<listener>.connections.max.reauth.ms",
    "listener.name.<listener>.<mechanism>.connections.max.reauth.ms",
})

#: ``listener.name.<l>[.<mechanism>].connections.max.reauth.ms`` (KIP-368).
LISTENER_REAUTH_SETTING: Final = re.compile(
    r"listener\.name\.([a-z0-9_-]+)\.(?:([a-z0-9-]+)\.)?connections\.max\.reauth\.ms")

#: ``listener.name.<l>.sasl.enabled.mechanisms``,
#: ``listener.name.<l>.<mechanism>.sasl.jaas.config``,
#: ``listener.name.<l>.ssl.<...>`` and the OAUTHBEARER ones
#: (``listener.name.<l>.oauthbearer.sasl.<...>``, group 5).
LISTENER_SECURITY_SETTING: Final = re.compile(
    r"listener\.name\.([a-z0-9_-]+)\.(sasl\.enabled\.mechanisms|([a-z0-9-]+)\.sasl\.jaas\.config"
    r"|(ssl\.[a-z.]+)|oauthbearer\.(sasl\.[a-z.]+))")

_DEFAULT_FAILURE_DELAY_MS: Final = 100


class SecurityConfigError(ValueError):
    """A bad security setting: ``setting`` names it."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


@dataclass(frozen=True, slots=True)
class ListenerOAuthBearer:
    """A listener's OAUTHBEARER: how its server checks tokens, and the
    token this node logs in with there (None: it does not)."""

    validator: UnsecuredValidator | JwtValidator
    login: UnsecuredLogin | None = None


@dataclass(frozen=True, slots=True)
class ListenerSasl:
    """A SASL_PLAINTEXT listener's mechanisms, PLAIN users and client credentials."""

    listener: str
    mechanisms: tuple[str, ...]
    # PLAIN's users: (name, password) pairs from the JAAS config.
    plain_users: tuple[tuple[str, str], ...] = ()
    # Per mechanism, (username, password) from its JAAS config, if any.
    credentials: tuple[tuple[str, str, str], ...] = ()
    # With OAUTHBEARER enabled.
    oauthbearer: ListenerOAuthBearer | None = None
    # connections.max.reauth.ms per mechanism (KIP-368; 0: sessions do not end).
    max_reauth_ms: tuple[tuple[str, int], ...] = ()

    def client_credentials(self, mechanism: str) -> SaslCredentials | None:
        if mechanism == OAUTHBEARER:
            login = None if self.oauthbearer is None else self.oauthbearer.login
            return None if login is None else oauthbearer_credentials(login)
        for name, user, password in self.credentials:
            if name == mechanism:
                return SaslCredentials(mechanism, user, password)
        return None


def oauthbearer_credentials(login: UnsecuredLogin) -> SaslCredentials:
    """OAUTHBEARER credentials that log in with ``login``'s unsecured token,
    made afresh for each connection (its iat and exp from now)."""
    return SaslCredentials(OAUTHBEARER, login.principal, "",
                           token=functools.partial(_login_token, login),
                           extensions=tuple(sorted(login.extensions.items())))


def _login_token(login: UnsecuredLogin) -> BearerToken:
    return login.token(int(time.time() * 1000))


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """An SSL or SASL_SSL listener's settings and the contexts built from
    them: the server's, and the client's this node connects to it with."""

    listener: str
    settings: TlsSettings
    # None for a listener this node only dials (a broker-only node's view
    # of the controller listener).
    server: ssl.SSLContext | None = field(compare=False, repr=False)
    client: ssl.SSLContext = field(compare=False, repr=False)
    # Names a client from its certificate (SSL); None on SASL_SSL, where
    # the SASL login names it.
    principal: Callable[[Any], str] | None = field(compare=False, repr=False, default=None)


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """Every listener's security protocol and the SASL listeners' settings."""

    protocols: tuple[tuple[str, str], ...] = ()
    sasl: tuple[ListenerSasl, ...] = ()
    tls: tuple[ListenerTls, ...] = ()
    # inter.broker.listener.name as set (None: the first broker listener).
    inter_broker_listener_name: str | None = None
    inter_broker_mechanism: str = "GSSAPI"
    # The first of controller.listener.names (what every node dials the
    # controllers on) and sasl.mechanism.controller.protocol.
    controller_listener_name: str | None = None
    controller_mechanism: str = "GSSAPI"
    failed_authentication_delay_ms: int = _DEFAULT_FAILURE_DELAY_MS
    # sasl.server.max.receive.size: the largest frame before login.
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES
    # authorizer.class.name is StandardAuthorizer: requests are checked
    # against the ACLs; super.users (principals) may do anything;
    # allow.everyone.if.no.acl.found.
    acls_enabled: bool = False
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl: bool = False

    def protocol(self, listener: str) -> str:
        return dict(self.protocols).get(listener, PLAINTEXT)

    def listener_sasl(self, listener: str) -> ListenerSasl | None:
        """The listener's SASL settings; None for a PLAINTEXT one."""
        for entry in self.sasl:
            if entry.listener == listener:
                return entry
        return None

    def listener_tls(self, listener: str) -> ListenerTls | None:
        """The listener's TLS settings and contexts; None without TLS."""
        for entry in self.tls:
            if entry.listener == listener:
                return entry
        return None

    def client_credentials(self, listener: str,
                           mechanism: str | None = None) -> SaslCredentials | None:
        """What this node authenticates with on ``listener``: ``mechanism``'s
        (default: the inter-broker mechanism's) JAAS username and password;
        None when the listener is not SASL."""
        entry = self.listener_sasl(listener)
        return None if entry is None else entry.client_credentials(
            mechanism or self.inter_broker_mechanism)

    def client_security(self, listener: str, mechanism: str | None = None) -> ConnectionSecurity:
        """How this node connects to ``listener`` as a client: its TLS
        client context and SASL credentials (``mechanism``'s, default the
        inter-broker one), as the listener needs."""
        sasl, tls = self.client_credentials(listener, mechanism), self.listener_tls(listener)
        if sasl is None and tls is None:
            return PLAINTEXT_SECURITY
        return ConnectionSecurity(sasl=sasl, tls=None if tls is None else tls.client)

    def controller_security(self) -> ConnectionSecurity:
        """How this node connects to the controllers (the first controller
        listener, with sasl.mechanism.controller.protocol)."""
        if self.controller_listener_name is None:
            return PLAINTEXT_SECURITY
        return self.client_security(self.controller_listener_name, self.controller_mechanism)


def parse_security(
    props: Mapping[str, str], listeners: tuple[str, ...], controller_listeners: tuple[str, ...],
    inter_broker_listener: str | None,
) -> SecurityConfig:
    """Validate the security settings of ``props`` for a node with
    ``listeners`` (names); ``inter_broker_listener``: the broker listener
    replication uses (None for a controller-only node). Raises
    SecurityConfigError naming the first bad setting."""
    for setting in _REFUSED_OAUTHBEARER[:2]:
        if setting in props:
            raise SecurityConfigError(setting, _CLIENT_CREDENTIALS_REFUSED)
    if "sasl.server.callback.handler.class" in props:
        raise SecurityConfigError(
            "sasl.server.callback.handler.class",
            "set it per listener and mechanism, as "
            "listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class")
    explicit = props.get("listener.security.protocol.map", "").strip()
    protocol_map = _protocol_map(explicit) if explicit else dict(DEFAULT_PROTOCOL_MAP)
    controller = controller_listeners[0] if controller_listeners else None
    # The listeners this node serves, and the controller listener it only
    # dials (a broker-only node).
    dialled = (controller,) if controller is not None and controller not in listeners else ()
    known = listeners + dialled
    protocols: dict[str, str] = {}
    for name in known:
        protocol = protocol_map.get(name)
        if protocol is None:
            if explicit:
                raise SecurityConfigError("listener.security.protocol.map",
                                          f"no security protocol for listener {name}")
            protocol = PLAINTEXT
        protocols[name] = protocol

    default_mechanisms = _mechanisms("sasl.enabled.mechanisms",
                                     props.get("sasl.enabled.mechanisms", "GSSAPI"))
    controller_mechanism = props.get("sasl.mechanism.controller.protocol", "GSSAPI").strip()
    jaas = _jaas_settings(props, known)
    sasl: list[ListenerSasl] = []
    for name in known:
        prefix = f"listener.name.{name.lower()}."
        if protocols[name] not in _SASL:
            for key in [k for k in props if k.startswith(prefix) and "sasl." in k]:
                raise SecurityConfigError(key, f"listener {name} is {protocols[name]}, not "
                                               "SASL_PLAINTEXT or SASL_SSL")
            continue
        setting = prefix + "sasl.enabled.mechanisms"
        mechanisms: tuple[str, ...]
        if name in dialled:  # only the mechanism this node logs in with
            mechanisms = (controller_mechanism,)
            setting = "sasl.mechanism.controller.protocol"
        elif setting in props:
            mechanisms = _mechanisms(setting, props[setting])
        else:
            mechanisms = default_mechanisms
        for mechanism in mechanisms:
            if mechanism not in SUPPORTED_MECHANISMS:
                raise SecurityConfigError(
                    setting if setting in props else "sasl.enabled.mechanisms",
                    f"{mechanism} is not supported on listener {name} (supported: "
                    f"{', '.join(SUPPORTED_MECHANISMS)})")
        entries = jaas.get(name, {})
        for mechanism in entries:
            if mechanism not in mechanisms:
                raise SecurityConfigError(
                    _jaas_key(name, mechanism),
                    f"{mechanism} is not enabled on listener {name}")
        if PLAIN in mechanisms and PLAIN not in entries and name not in dialled:
            raise SecurityConfigError(
                _jaas_key(name, PLAIN),
                f"is required: PLAIN is enabled on listener {name}, and its users are the "
                "user_<name>=\"<password>\" options of this JAAS config")
        users = tuple(sorted(plain_users(entries[PLAIN]).items())) if PLAIN in entries else ()
        credentials = tuple(
            (mechanism, *found) for mechanism, entry in sorted(entries.items())
            if mechanism != OAUTHBEARER and (found := client_credentials(entry)) is not None)
        oauthbearer = _oauthbearer(props, name, entries.get(OAUTHBEARER),
                                   serves=name not in dialled) \
            if OAUTHBEARER in mechanisms else None
        if oauthbearer is None:
            for key in [k for k in props if k.startswith(prefix + "oauthbearer.sasl.")
                        and not k.endswith(".sasl.jaas.config")]:
                raise SecurityConfigError(key, f"OAUTHBEARER is not enabled on listener {name}")
        reauth = tuple((m, _reauth_ms(props, name, m)) for m in mechanisms)
        sasl.append(ListenerSasl(name, mechanisms, users, credentials, oauthbearer, reauth))

    for key in props:
        match = LISTENER_REAUTH_SETTING.fullmatch(key)
        if match is None:
            continue
        entry = next((e for e in sasl if e.listener.lower() == match.group(1)), None)
        if entry is None:
            raise SecurityConfigError(key, f"no SASL listener named {match.group(1)!r}")
        if match.group(2) is not None and match.group(2) not in {
                m.lower() for m in entry.mechanisms}:
            raise SecurityConfigError(key, f"{match.group(2).upper()} is not enabled on "
                                           f"listener {entry.listener}")

    tls = tuple(_listener_tls(props, name, protocols[name], serves=name not in dialled)
                for name in known if protocols[name] in _TLS)
    for key in props:
        match = LISTENER_SECURITY_SETTING.fullmatch(key)
        if match is not None and match.group(4) is not None:
            listener = next(n for n in known if n.lower() == match.group(1))
            if protocols[listener] not in _TLS:
                raise SecurityConfigError(key, f"listener {listener} is {protocols[listener]}, "
                                               "not SSL or SASL_SSL")

    inter_mechanism = props.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip()
    if inter_broker_listener is not None:
        _check_client_login(sasl, protocols, inter_broker_listener, inter_mechanism,
                            "sasl.mechanism.inter.broker.protocol", "inter-broker",
                            "the brokers authenticate")
    if controller is not None:
        _check_client_login(sasl, protocols, controller, controller_mechanism,
                            "sasl.mechanism.controller.protocol", "controller",
                            "every node authenticates")

    delay = _int(props, "connection.failed.authentication.delay.ms", _DEFAULT_FAILURE_DELAY_MS, 0)
    max_receive = _int(props, "sasl.server.max.receive.size", DEFAULT_MAX_RECEIVE_BYTES, 1)
    authorizer = props.get("authorizer.class.name", "").strip()
    if authorizer and authorizer != STANDARD_AUTHORIZER:
        raise SecurityConfigError("authorizer.class.name",
                                  f"{authorizer} is not available (the one authorizer is "
                                  f"{STANDARD_AUTHORIZER})")
    super_users = frozenset(u.strip() for u in props.get("super.users", "").split(";")
                            if u.strip())
    for user in super_users:
        try:
            parse_principal(user)
        except ValueError as exc:
            raise SecurityConfigError("super.users", str(exc)) from None
    allow_text = props.get("allow.everyone.if.no.acl.found", "false").strip().lower()
    if allow_text not in ("true", "false"):
        raise SecurityConfigError("allow.everyone.if.no.acl.found",
                                  f"{allow_text!r} is not true or false")
    return SecurityConfig(
        protocols=tuple(protocols.items()),
        sasl=tuple(sasl),
        tls=tls,
        inter_broker_listener_name=props.get("inter.broker.listener.name", "").strip() or None,
        inter_broker_mechanism=inter_mechanism,
        controller_listener_name=controller,
        controller_mechanism=controller_mechanism,
        failed_authentication_delay_ms=delay,
        max_receive_bytes=max_receive,
        acls_enabled=bool(authorizer),
        super_users=super_users,
        allow_everyone_if_no_acl=allow_text == "true",
    )


def _check_client_login(sasl: list[ListenerSasl], protocols: Mapping[str, str], listener: str,
                        mechanism: str, setting: str, role: str, who: str) -> None:
    """On a SASL ``listener`` this node dials (the inter-broker or the
    controller one), ``mechanism`` must be enabled and its JAAS config
    must give a username and password."""
    if protocols.get(listener) not in _SASL:
        return
    entry = next(e for e in sasl if e.listener == listener)
    if mechanism not in entry.mechanisms:
        raise SecurityConfigError(
            setting, f"{mechanism} is not enabled on the {role} listener {listener} "
                     f"(enabled: {', '.join(entry.mechanisms)})")
    if entry.client_credentials(mechanism) is None:
        if mechanism == OAUTHBEARER:
            raise SecurityConfigError(
                _jaas_key(listener, mechanism),
                "needs unsecuredLoginStringClaim_sub (and any other unsecuredLogin* options): "
                f"{who} with that token on the {role} listener {listener}")
        raise SecurityConfigError(
            _jaas_key(listener, mechanism),
            f"needs username and password options: {who} with them on the {role} listener "
            f"{listener}")


def _oauthbearer(props: Mapping[str, str], listener: str, entry: JaasEntry | None, *,
                 serves: bool) -> ListenerOAuthBearer:
    """OAUTHBEARER on ``listener``: the validator its server uses and the
    login this node makes (see the module docstring)."""
    jaas_key = _jaas_key(listener, OAUTHBEARER)
    prefix = f"listener.name.{listener.lower()}.oauthbearer."
    for setting in _REFUSED_OAUTHBEARER[:2]:
        if prefix + setting in props:
            raise SecurityConfigError(prefix + setting, _CLIENT_CREDENTIALS_REFUSED)
    if entry is None and serves:
        raise SecurityConfigError(
            jaas_key, f"is required: OAUTHBEARER is enabled on listener {listener} "
                      "(org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule, "
                      "with the unsecuredLogin* options of this node's own token, if it logs in)")
    options = {} if entry is None else dict(entry.options)
    try:
        login = UnsecuredLogin.from_jaas(options) \
            if any(k.startswith("unsecuredLogin") for k in options) else None
    except OAuthBearerConfigError as exc:
        raise SecurityConfigError(jaas_key, f"{exc.setting}: {exc.message}") from None
    handler = props.get(prefix + "sasl.server.callback.handler.class", "").strip()
    validator: UnsecuredValidator | JwtValidator
    if handler in VALIDATOR_HANDLERS:
        settings = {name: props[prefix + name] if prefix + name in props else props[name]
                    for name in JWT_VALIDATOR_SETTINGS if prefix + name in props or name in props}
        try:
            validator = JwtValidator.from_settings(settings)
        except OAuthBearerConfigError as exc:
            key = prefix + exc.setting if prefix + exc.setting in props else exc.setting
            raise SecurityConfigError(key, exc.message) from None
    elif handler in ("", _UNSECURED_VALIDATOR):
        try:
            validator = UnsecuredValidator.from_jaas(options)
        except OAuthBearerConfigError as exc:
            raise SecurityConfigError(jaas_key, f"{exc.setting}: {exc.message}") from None
    else:
        raise SecurityConfigError(
            prefix + "sasl.server.callback.handler.class",
            f"{handler} is not available (OAUTHBEARER validators: Kafka's default unsecured "
            f"one, or {VALIDATOR_HANDLERS[0]})")
    return ListenerOAuthBearer(validator, login)


def _listener_tls(props: Mapping[str, str], listener: str, protocol: str, *,
                  serves: bool = True) -> ListenerTls:
    """The TLS settings of ``listener`` (its ``listener.name.<l>.ssl.*``
    over the node-wide ``ssl.*``) and the contexts built from them (the
    client's only when this node does not serve it)."""
    prefix = f"listener.name.{listener.lower()}."
    if protocol == SASL_SSL and prefix + "ssl.client.auth" not in props:
        # KIP-684: on SASL_SSL the node-wide ssl.client.auth does not apply.
        props = {k: v for k, v in props.items() if k != "ssl.client.auth"}
    try:
        settings = tls_settings(props, prefix)
        server = server_context(settings) if serves else None
        client = client_context(settings)
        mapper = PrincipalMapper.parse(settings.principal_mapping_rules)
    except TlsConfigError as exc:
        raise SecurityConfigError(exc.setting, str(exc).partition(": ")[2]) from None
    principal = functools.partial(peer_principal, mapper=mapper) if protocol == SSL else None
    return ListenerTls(listener, settings, server, client, principal)


def _reauth_ms(props: Mapping[str, str], listener: str, mechanism: str) -> int:
    """``connections.max.reauth.ms`` for ``mechanism`` on ``listener``: the
    listener-and-mechanism key, else the listener's, else the node's (0)."""
    prefix = f"listener.name.{listener.lower()}."
    for key in (f"{prefix}{mechanism.lower()}.connections.max.reauth.ms",
                f"{prefix}connections.max.reauth.ms", "connections.max.reauth.ms"):
        if key in props:
            return _int(props, key, 0, 0)
    return 0


def _int(props: Mapping[str, str], setting: str, default: int, minimum: int) -> int:
    text = props.get(setting, str(default)).strip()
    try:
        number = int(text)
    except ValueError:
        raise SecurityConfigError(setting, f"{text!r} is not an integer") from None
    if number < minimum:
        raise SecurityConfigError(setting, f"must be >= {minimum}, got {number}")
    return number


def _protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, colon, protocol = entry.partition(":")
        name, protocol = name.strip(), protocol.strip().upper()
        if not colon or not name or not protocol:
            raise SecurityConfigError("listener.security.protocol.map",
                                      f"{entry!r} is not LISTENER:PROTOCOL")
        if protocol not in DEFAULT_PROTOCOL_MAP:
            raise SecurityConfigError(
                "listener.security.protocol.map",
                f"{entry!r}: unknown security protocol {protocol} (PLAINTEXT, SSL, "
                "SASL_PLAINTEXT, SASL_SSL)")
        if name in out:
            raise SecurityConfigError("listener.security.protocol.map",
                                      f"listener {name} appears twice")
        out[name] = protocol
    return out


def _mechanisms(setting: str, text: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    if not names:
        raise SecurityConfigError(setting, "is empty")
    if len(set(names)) != len(names):
        raise SecurityConfigError(setting, "names a mechanism twice")
    return names


def _jaas_key(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def _jaas_settings(
    props: Mapping[str, str], listeners: tuple[str, ...]
) -> dict[str, dict[str, JaasEntry]]:
    """listener -> mechanism -> its parsed JAAS config, every one checked."""
    by_lower = {name.lower(): name for name in listeners}
    out: dict[str, dict[str, JaasEntry]] = {}
    for key in sorted(props):
        match = LISTENER_SECURITY_SETTING.fullmatch(key)
        if match is None:
            continue
        listener = by_lower.get(match.group(1))
        if listener is None:
            raise SecurityConfigError(key, f"no listener named {match.group(1)!r} (listeners: "
                                           f"{', '.join(sorted(by_lower))})")
        if match.group(4) is not None:
            if match.group(4) not in TLS_SETTINGS:
                raise SecurityConfigError(key, "unknown setting")
            continue  # read by _listener_tls
        if match.group(5) is not None:
            if match.group(5) not in _OAUTHBEARER_LISTENER_SETTINGS:
                raise SecurityConfigError(key, "unknown setting")
            continue  # read by _oauthbearer
        if match.group(3) is None:
            continue  # sasl.enabled.mechanisms, read by the caller
        mechanism = match.group(3).upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise SecurityConfigError(key, f"{mechanism} is not a supported mechanism "
                                           f"({', '.join(SUPPORTED_MECHANISMS)})")
        try:
            entry = parse_jaas_config(props[key])
        except ValueError as exc:
            raise SecurityConfigError(key, str(exc)) from None
        if entry.login_module != MODULES[mechanism]:
            raise SecurityConfigError(key, f"{mechanism} takes {MODULES[mechanism]}, not "
                                           f"{entry.login_module}")
        out.setdefault(listener, {})[mechanism] = entry
    return out
