"""SASL on a connection (KIP-43, KIP-152): the server's authentication state
machine, sans-I/O.

A connection accepted on a SASL listener starts unauthenticated. Following
Kafka's ``SaslServerAuthenticator``:

- **Handshake.** ApiVersions may come first (it is answered as anywhere).
  Then a SaslHandshake names a mechanism. An enabled one is accepted and the
  answer lists the enabled mechanisms; any other is answered
  UNSUPPORTED_SASL_MECHANISM, and the connection is closed.
- **Authenticate.** After a v1 handshake, each client token comes in a
  SaslAuthenticate request and each server token goes back in its answer.
  After a v0 handshake (clients older than KIP-152) tokens come as bare
  size-prefixed frames with no request header, and go back the same way.
- **Done.** When the mechanism completes, the connection is authenticated
  as ``User:<name>`` and serves every API.
- **Failure.** A wrong credential or a malformed token is answered
  SASL_AUTHENTICATION_FAILED with the mechanism's message (nothing for
  v0, which has no way to say it), and the connection is closed. The answer
  is held for ``connection.failed.authentication.delay.ms`` first, as Kafka
  holds it, to slow down password guessing.
- **Anything else** before authentication completes (another API, a second
  handshake, a SaslAuthenticate before the handshake) breaks the protocol:
  the connection is closed, as Kafka does (IllegalSaslStateException).

Once authenticated (and on a PLAINTEXT listener), SaslHandshake and
SaslAuthenticate are answered ILLEGAL_SASL_STATE (Kafka's ``KafkaApis``),
except for re-authentication.

**Re-authentication (KIP-368).** With ``connections.max.reauth.ms`` above 0,
or with a credential that expires (an OAUTHBEARER token), a login opens a
session that lasts the least of the two; SaslAuthenticate v1+ tells the
client its length (``session_lifetime_ms``). A client that logged in with
SaslAuthenticate v1+ into such a session may log in again on the same
connection (at most once a second), with a new SaslHandshake and
SaslAuthenticate, which starts a new session;
the mechanism and the principal must stay the same (otherwise
SASL_AUTHENTICATION_FAILED, and the connection closes). A request other
than a SaslHandshake that arrives once the session has ended closes the
connection, as Kafka does; a client that cannot re-authenticate (v0) then
connects and logs in again.
"""

from __future__ import annotations

import datetime
import enum
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.sasl_authenticate.v0 import response as sasl_auth_v0
from kio.schema.sasl_authenticate.v1 import response as sasl_auth_v1
from kio.schema.sasl_authenticate.v2 import response as sasl_auth_v2
from kio.schema.sasl_handshake.v0 import response as handshake_v0
from kio.schema.sasl_handshake.v1 import response as handshake_v1
from kio.static.protocol import ResponsePayload

from raftlog.net import registry
from raftlog.net.codec import decode_request_body, decode_request_header, encode_response
from raftlog.net.errors import ErrorCode, RequestDecodeError
from raftlog.security.sasl import SaslAuthenticationError, SaslServer

__all__ = (
    "ANONYMOUS",
    "DEFAULT_MAX_RECEIVE_BYTES",
    "SASL_AUTHENTICATE_KEY",
    "SASL_HANDSHAKE_KEY",
    "AuthenticationStep",
    "SaslServerAuthenticator",
    "illegal_sasl_state_response",
)

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36

#: The user of a connection that did not authenticate (PLAINTEXT), as Kafka names it.
ANONYMOUS: Final = "ANONYMOUS"

#: Kafka's ``sasl.server.max.receive.size`` default.
DEFAULT_MAX_RECEIVE_BYTES: Final = 524_288

MechanismFactory = Callable[[], SaslServer]

#: Kafka's floor between two re-authentications of one connection (KIP-368).
MIN_REAUTHENTICATION_INTERVAL_MS: Final = 1000


class _State(enum.Enum):
    HANDSHAKE = "handshake"          # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"    # SaslAuthenticate requests (handshake v1)
    RAW_TOKENS = "raw tokens"        # bare token frames (handshake v0)
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AuthenticationStep:
    """What the shell does with one frame received before authentication.

    ``data``: a whole frame to write (b"" for none). ``close``: close the
    connection once it is written. ``delay_ms``: hold ``data`` (and stop
    reading) that long first (a failed authentication). ``user``: set when
    this frame completed authentication."""

    correlation_id: int
    data: bytes
    close: bool = False
    delay_ms: int = 0
    user: str | None = None
    # Why authentication failed, for the server's log (the client is told less).
    reason: str = ""


class SaslServerAuthenticator:
    """One connection's SASL exchange. ``mechanisms``: each enabled mechanism's
    name and a factory of its server (`raftlog.security.sasl`), in the order
    the handshake answer lists them. ``failure_delay_ms``: Kafka's
    ``connection.failed.authentication.delay.ms``. ``max_receive_bytes``:
    Kafka's ``sasl.server.max.receive.size``, the largest frame a client may
    send before it has logged in (a stranger cannot make the server buffer
    ``socket.request.max.bytes``)."""

    def __init__(self, mechanisms: Mapping[str, MechanismFactory], failure_delay_ms: int,
                 max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES, *,
                 max_reauth_ms: Mapping[str, int] | None = None,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 monotonic_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000)) -> None:
        if not mechanisms:
            raise ValueError("a SASL listener needs at least one mechanism")
        self._mechanisms = dict(mechanisms)
        self._failure_delay_ms = failure_delay_ms
        self.max_receive_bytes = max_receive_bytes
        # connections.max.reauth.ms per mechanism (0 or absent: off).
        self._max_reauth_ms = dict(max_reauth_ms or {})
        self._wall_ms = wall_ms
        self._monotonic_ms = monotonic_ms
        self._state = _State.HANDSHAKE
        self._server: SaslServer | None = None
        self._handshake_version = 1
        self._mechanism = ""
        # The last login: its principal, mechanism, and whether the client
        # can log in again (it used SaslAuthenticate v1+, KIP-368).
        self.user: str | None = None
        self.token_authenticated = False
        self._logged_in_with = ""
        self.can_reauthenticate = False
        self._reauthenticating = False
        #: When the session ends (monotonic ms); None: it does not.
        self.session_expiry_ms: int | None = None
        self.reauthentications = 0
        self._lifetime_ms = 0
        self._last_reauthentication_ms: int | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def session_expired(self) -> bool:
        """The session ended (KIP-368): only a re-authentication may follow."""
        return self.session_expiry_ms is not None and self._monotonic_ms() >= self.session_expiry_ms

    def may_reauthenticate(self) -> bool:
        """Whether a SaslHandshake now starts a re-authentication (Kafka's
        ``KafkaChannel.maybeBeginServerReauthentication``): the session has
        an end, the client logged in with SaslAuthenticate v1+, and the last
        re-authentication began at least a second ago. Otherwise the
        handshake is answered ILLEGAL_SASL_STATE."""
        if self._state is not _State.COMPLETE or self.session_expiry_ms is None \
                or not self.can_reauthenticate:
            return False
        now = self._monotonic_ms()
        if self._last_reauthentication_ms is not None \
                and now - self._last_reauthentication_ms < MIN_REAUTHENTICATION_INTERVAL_MS:
            return False
        self._last_reauthentication_ms = now
        return True

    def begin_reauthentication(self) -> None:
        """Start the exchange again (`handshake` next); call only after
        `may_reauthenticate` said so."""
        if self._state is not _State.COMPLETE:
            raise RequestDecodeError("re-authentication before authentication completed")
        self._state = _State.HANDSHAKE
        self._server = None
        self._reauthenticating = True

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a bare token (after a v0 handshake), not a request."""
        return self._state is _State.RAW_TOKENS

    def handshake(self, frame: bytes, api_version: int) -> AuthenticationStep:
        """A SaslHandshake request frame (the caller checked the version is served).
        Raises RequestDecodeError for a malformed body."""
        header, offset = decode_request_header(frame)
        if self._state is not _State.HANDSHAKE:
            raise RequestDecodeError(f"unexpected SaslHandshake in state {self._state.value}")
        body = decode_request_body(
            registry.schemas(SASL_HANDSHAKE_KEY, api_version).request, frame, offset)
        mechanism = str(typing.cast(Any, body).mechanism)
        enabled = tuple(self._mechanisms)
        cls = handshake_v0.SaslHandshakeResponse if api_version == 0 \
            else handshake_v1.SaslHandshakeResponse
        factory = self._mechanisms.get(mechanism)
        if factory is None:
            self._state = _State.FAILED
            response: ResponsePayload = cls(
                error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
            return AuthenticationStep(header.correlation_id,
                                      encode_response(response, header.correlation_id),
                                      close=True, delay_ms=self._failure_delay_ms,
                                      reason=f"mechanism {mechanism!r} is not enabled")
        self._server = factory()
        self._mechanism = mechanism
        self._handshake_version = api_version
        self._state = _State.AUTHENTICATE if api_version >= 1 else _State.RAW_TOKENS
        return AuthenticationStep(
            header.correlation_id,
            encode_response(cls(error_code=ErrorCode.none, mechanisms=enabled),
                            header.correlation_id))

    def authenticate(self, frame: bytes, api_version: int) -> AuthenticationStep:
        """A SaslAuthenticate request frame. Raises RequestDecodeError for a
        malformed body or when no handshake came first."""
        header, offset = decode_request_header(frame)
        if self._state is not _State.AUTHENTICATE:
            raise RequestDecodeError(f"unexpected SaslAuthenticate in state {self._state.value}")
        body = decode_request_body(
            registry.schemas(SASL_AUTHENTICATE_KEY, api_version).request, frame, offset)
        token: bytes = typing.cast(Any, body).auth_bytes
        cls = _AUTHENTICATE_RESPONSES[api_version]
        try:
            reply, user = self._evaluate(token)
        except SaslAuthenticationError as exc:
            self._state = _State.FAILED
            failed = cls(error_code=ErrorCode.sasl_authentication_failed,
                         error_message=str(exc), auth_bytes=b"")
            return AuthenticationStep(header.correlation_id,
                                      encode_response(failed, header.correlation_id),
                                      close=True, delay_ms=self._failure_delay_ms,
                                      reason=exc.reason or str(exc))
        values: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                                  "auth_bytes": reply}
        if user is not None:
            self.can_reauthenticate = api_version >= 1
            if api_version >= 1:
                values["session_lifetime"] = datetime.timedelta(milliseconds=self._lifetime_ms)
        answer = cls(**values)
        return AuthenticationStep(header.correlation_id,
                                  encode_response(answer, header.correlation_id), user=user)

    def raw_token(self, frame: bytes) -> AuthenticationStep:
        """A bare token frame (after a v0 handshake). A failure closes the
        connection with nothing written (v0 has no way to say why)."""
        try:
            reply, user = self._evaluate(frame)
        except SaslAuthenticationError as exc:
            self._state = _State.FAILED
            return AuthenticationStep(-1, b"", close=True, delay_ms=self._failure_delay_ms,
                                      reason=exc.reason or str(exc))
        # Kafka writes the mechanism's reply, size-prefixed, even an empty one.
        return AuthenticationStep(-1, len(reply).to_bytes(4, "big") + reply, user=user)

    def _evaluate(self, token: bytes) -> tuple[bytes, str | None]:
        server = self._server
        assert server is not None
        reply = server.evaluate(token)
        if not server.complete:
            return reply, None
        user = server.authorization_id
        if self._reauthenticating:
            # KIP-368: a new session for the same principal, by the same mechanism.
            if self._mechanism != self._logged_in_with:
                raise SaslAuthenticationError(
                    "Cannot change mechanisms during re-authentication from "
                    f"{self._logged_in_with}: {self._mechanism}")
            if user != self.user:
                raise SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from User:{self.user}: "
                    f"User:{user}")
            self.reauthentications += 1
        self._reauthenticating = False
        self._state = _State.COMPLETE
        self.user = user
        # KIP-48: a delegation token's login (Kafka's
        # KafkaPrincipal.tokenAuthenticated), which may not ask for tokens.
        self.token_authenticated = bool(getattr(server, "token_authenticated", False))
        self._logged_in_with = self._mechanism
        self._start_session(server)
        return reply, user

    def _start_session(self, server: SaslServer) -> None:
        """The session's length (Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``):
        the least of ``connections.max.reauth.ms`` and the credential's
        remaining life (an OAUTHBEARER token's expiry), never negative;
        without either, the session does not end."""
        max_reauth = self._max_reauth_ms.get(self._mechanism, 0)
        token = getattr(server, "token", None)
        credential_expiry = getattr(token, "lifetime_ms", None)
        if credential_expiry is None and max_reauth <= 0:
            self._lifetime_ms = 0
            self.session_expiry_ms = None
            return
        remaining = None if credential_expiry is None else credential_expiry - self._wall_ms()
        candidates = [m for m in (max_reauth if max_reauth > 0 else None, remaining)
                      if m is not None]
        self._lifetime_ms = max(0, min(candidates))
        self.session_expiry_ms = self._monotonic_ms() + self._lifetime_ms


_AUTHENTICATE_RESPONSES: Final[Mapping[int, type]] = {
    0: sasl_auth_v0.SaslAuthenticateResponse,
    1: sasl_auth_v1.SaslAuthenticateResponse,
    2: sasl_auth_v2.SaslAuthenticateResponse,
}


def illegal_sasl_state_response(frame: bytes, api_key: int, api_version: int) -> tuple[int, bytes]:
    """The answer to SaslHandshake or SaslAuthenticate on a connection that is
    authenticated or on a listener without SASL: ILLEGAL_SASL_STATE, as Kafka's
    ``KafkaApis`` answers them. Returns (correlation id, frame)."""
    header, _ = decode_request_header(frame)
    if api_key == SASL_HANDSHAKE_KEY:
        cls = handshake_v0.SaslHandshakeResponse if api_version == 0 \
            else handshake_v1.SaslHandshakeResponse
        response: ResponsePayload = cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    else:
        response = _AUTHENTICATE_RESPONSES[api_version](
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication"
            if api_key == SASL_AUTHENTICATE_KEY else None,
            auth_bytes=b"")
    return header.correlation_id, encode_response(response, header.correlation_id)
