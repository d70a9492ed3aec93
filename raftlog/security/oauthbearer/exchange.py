"""The OAUTHBEARER exchange (RFC 7628) as sans-I/O state machines: the
broker's `oauthbearer_server` (Kafka's OAuthBearerSaslServer) and the
`oauthbearer_client` (OAuthBearerSaslClient), with the strict parsing of the
client's initial response (OAuthBearerClientInitialResponse). The token is
checked by whichever validator the caller binds in."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

from raftlog.security.oauthbearer._common import (
    _AUTH_KEY,
    _EXTENSION_VALUE,
    OAUTHBEARER,
    BearerToken,
    TokenValidationError,
    _extension_problem,
)
from raftlog.security.sasl import SaslAuthenticationError, SaslClient, SaslServer

_KVSEP: Final = "\x01"
_KEY: Final = re.compile(r"[A-Za-z]+")  # RFC 7628 key
_AUTH_VALUE: Final = re.compile(r"(\w+) +([-_.a-zA-Z0-9]+)", re.ASCII)  # Kafka's scheme and token
_TOKEN: Final = re.compile(r"[-_.a-zA-Z0-9]+")
_SASLNAME: Final = re.compile(r"(?:[^\x00,=]|=2C|=3D)+")  # RFC 5801

#: What SaslServerAuthenticator sends for a SaslException (see sasl.py).
_REFUSED: Final = ("Authentication failed during authentication due to invalid credentials "
                   f"with SASL mechanism {OAUTHBEARER}")


def oauthbearer_server(validate: Callable[[str], BearerToken]) -> SaslServer:
    """An OAUTHBEARER server that checks the client's token with ``validate``
    (`UnsecuredValidator.validate` or `JwtValidator.validate` with the time
    and keys bound), which raises TokenValidationError to refuse it. Any
    other exception fails the exchange, with it as ``__cause__``. Once
    complete, ``authorization_id`` is the token's principal and ``token``
    the token. Unknown SASL extensions are accepted and ignored."""
    return _OAuthBearerServer(validate)


def oauthbearer_client(token: Callable[[], BearerToken], *, authorization_id: str = "",
                       extensions: Mapping[str, str] | None = None) -> SaslClient:
    """An OAUTHBEARER client that sends the token ``token()`` gives (called
    once, by `initial`), with ``extensions`` (KIP-342) after it and
    ``authorization_id`` in the GS2 header when non-empty (Kafka's clients
    send none). Raises ValueError for an extension Kafka would refuse or an
    authorization id holding NUL."""
    extensions = dict(extensions or {})
    for name, value in extensions.items():
        problem = _extension_problem(name, value)
        if problem is not None:
            raise ValueError(f"SASL extension {name!r}: {problem}")
    if "\0" in authorization_id:
        raise ValueError("an authorization id cannot contain NUL")
    return _OAuthBearerClient(token, authorization_id, extensions)


class _State(Enum):
    """Where an exchange is. Legal moves: a client goes START -> SENT ->
    COMPLETE, or SENT -> ERROR -> FAILED when the server sends an error; a
    server goes START -> COMPLETE or FAILED, or START -> ERROR -> FAILED.
    COMPLETE and FAILED are final."""

    START = "start"  # nothing exchanged yet
    SENT = "sent"  # client: its initial response is out
    ERROR = "error"  # the JSON error challenge is out; the client's %x01 is due
    COMPLETE = "complete"
    FAILED = "failed"


def _unexpected(side: str, state: _State) -> SaslAuthenticationError:
    # Kafka: IllegalSaslStateException("Unexpected challenge in Sasl server state COMPLETE").
    return SaslAuthenticationError(f"Unexpected challenge in Sasl {side} state {state.name}")


@dataclass(frozen=True, slots=True)
class _InitialResponse:
    authorization_id: str  # "" when the GS2 header has none
    token: str
    extensions: Mapping[str, str]


class _OAuthBearerServer:
    __slots__ = ("_error", "_state", "_token", "_validate", "mechanism")

    def __init__(self, validate: Callable[[str], BearerToken]) -> None:
        self.mechanism = OAUTHBEARER
        self._validate = validate
        self._state = _State.START
        self._token: BearerToken | None = None
        self._error: TokenValidationError | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def authorization_id(self) -> str:
        return self.token.principal

    @property
    def token(self) -> BearerToken:
        """The client's token. Raises RuntimeError before completion."""
        if self._state is not _State.COMPLETE or self._token is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._token

    def evaluate(self, token: bytes) -> bytes:
        match self._state:
            case _State.START:
                handle = self._handle_initial_response
            case _State.ERROR:
                handle = self._handle_error_acknowledgement
            case _:
                raise _unexpected("server", self._state)
        try:
            return handle(token)
        except SaslAuthenticationError:
            self._state = _State.FAILED
            raise

    def _handle_initial_response(self, message: bytes) -> bytes:
        try:
            response = _parse_initial_response(message)
        except ValueError as e:
            raise SaslAuthenticationError(
                _REFUSED, reason=f"Invalid OAUTHBEARER client first message: {e}") from None
        try:
            bearer = self._validate(response.token)
        except TokenValidationError as e:
            # RFC 7628 3.2.2: the error goes out as a challenge; the exchange
            # fails once the client has acknowledged it.
            self._error = e
            self._state = _State.ERROR
            return e.challenge().encode("utf-8")
        except Exception as e:
            raise SaslAuthenticationError(
                _REFUSED, reason=f"the token validator failed: {e!r}") from e
        if response.authorization_id and response.authorization_id != bearer.principal:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id "
                f"({response.authorization_id}) that is different from the token's principal "
                f"name ({bearer.principal})")
        self._token = bearer
        self._state = _State.COMPLETE
        return b""

    def _handle_error_acknowledgement(self, message: bytes) -> bytes:
        error = self._error
        assert error is not None, "ERROR without an error"
        if message != _KVSEP.encode("ascii"):
            # Kafka would read it as a new initial response; RFC 7628 allows only %x01.
            raise SaslAuthenticationError(
                error.challenge(), reason=f"{error.reason}; then the client sent "
                f"{len(message)} bytes instead of the %x01 acknowledgement")
        raise SaslAuthenticationError(error.challenge(), reason=error.reason)


class _OAuthBearerClient:
    __slots__ = ("_authorization_id", "_error", "_extensions", "_state", "_token", "mechanism")

    def __init__(self, token: Callable[[], BearerToken], authorization_id: str,
                 extensions: Mapping[str, str]) -> None:
        self.mechanism = OAUTHBEARER
        self._token = token
        self._authorization_id = authorization_id
        self._extensions = extensions
        self._state = _State.START
        self._error = ""

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def initial(self) -> bytes:
        """The client's only message. Raises RuntimeError if called twice,
        ValueError if the token's value is not a compact JWS's characters."""
        if self._state is not _State.START:
            raise RuntimeError("initial() was already called")
        value = self._token().value
        if not _TOKEN.fullmatch(value):
            raise ValueError("the token holds characters a bearer token cannot")
        authzid = ""
        if self._authorization_id:
            authzid = "a=" + self._authorization_id.replace("=", "=3D").replace(",", "=2C")
        pairs = [f"{_AUTH_KEY}=Bearer {value}"]
        pairs += [f"{name}={v}" for name, v in self._extensions.items()]
        self._state = _State.SENT
        return f"n,{authzid},{_KVSEP}{''.join(p + _KVSEP for p in pairs)}{_KVSEP}".encode()

    def evaluate(self, challenge: bytes) -> bytes:
        match self._state:
            case _State.START:
                raise RuntimeError("evaluate() before initial()")
            case _State.SENT if not challenge:
                self._state = _State.COMPLETE
                return b""
            case _State.SENT:
                # RFC 7628 3.2.3: acknowledge the error; the server then fails
                # the exchange. Kafka's client does not read the challenge.
                self._error = challenge.decode("utf-8", "replace")
                self._state = _State.ERROR
                return _KVSEP.encode("ascii")
            case _State.ERROR:
                self._state = _State.FAILED
                raise SaslAuthenticationError(
                    f"{OAUTHBEARER} authentication failed: the server refused the token: "
                    f"{self._error}")
            case _:
                raise _unexpected("client", self._state)


def _parse_initial_response(message: bytes) -> _InitialResponse:
    """RFC 7628 3.1 ``gs2-header kvsep *kvpair kvsep``, as strictly as
    Kafka's OAuthBearerClientInitialResponse, plus RFC 5801's saslname
    escapes in the authzid. Raises ValueError saying what is wrong."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if not text.startswith("n,"):
        raise ValueError("the GS2 header must start with 'n,' (no channel binding)")
    authzid, comma, rest = text[2:].partition(",")
    if not comma:
        raise ValueError("the GS2 header is not closed by ','")
    if authzid:
        if not authzid.startswith("a=") or not _SASLNAME.fullmatch(authzid[2:]):
            raise ValueError("the GS2 authorization id must be 'a=' and a saslname")
        authzid = authzid[2:].replace("=2C", ",").replace("=3D", "=")
    if len(rest) < 2 or rest[0] != _KVSEP or rest[-1] != _KVSEP:
        raise ValueError("key=value pairs must follow the GS2 header between %x01s")
    body = rest[1:-1]
    if not body:
        raise ValueError("'auth' not specified")
    if not body.endswith(_KVSEP):
        raise ValueError("each key=value pair must end with %x01")
    pairs: dict[str, str] = {}
    for pair in body[:-1].split(_KVSEP):
        key, equals, value = pair.partition("=")
        if not equals or not _KEY.fullmatch(key) or not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError("a pair must be key=value with a key of letters and a value of "
                             "printable ASCII, space, tab, CR or LF")
        if key in pairs:
            raise ValueError(f"the key {key!r} is repeated")
        pairs[key] = value
    auth = pairs.pop(_AUTH_KEY, None)
    if auth is None:
        raise ValueError("'auth' not specified")
    match = _AUTH_VALUE.fullmatch(auth)
    if match is None:
        raise ValueError("invalid 'auth' format: expected 'Bearer <token>'")
    if match.group(1).lower() != "bearer":  # RFC 7235: schemes are case-insensitive
        raise ValueError(f"invalid scheme {match.group(1)!r}: expected 'Bearer'")
    return _InitialResponse(authzid, match.group(2), MappingProxyType(pairs))
