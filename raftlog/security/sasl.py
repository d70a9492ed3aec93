"""SASL mechanisms as sans-I/O state machines: PLAIN (RFC 4616) and
SCRAM-SHA-256/512 (RFC 5802, RFC 7677), as Kafka's brokers and clients run
them (KIP-43, KIP-84, KIP-152). OAUTHBEARER (KIP-255, RFC 7628) has its own
package, `raftlog.security.oauthbearer`; `sasl_client` makes its clients too.

A server or client object is one exchange on one connection. The shells move
the tokens in SaslHandshake/SaslAuthenticate; nothing here does I/O, reads a
clock or keeps a global. Randomness (the nonces) comes from `secrets` unless
a test passes its own.

A client runs::

    token = client.initial()
    while not client.complete:
        token = client.evaluate(send_and_receive(token))

and a server answers each token with ``server.evaluate(token)`` until
``server.complete``. Every failure is a `SaslAuthenticationError` whose text
is what the server puts in its SaslAuthenticate error message; Kafka sends the
specific reason only where its mechanisms chose to (PLAIN's "Invalid username
or password", the authorization-id mismatch) and otherwise a generic one, so
that a client cannot learn whether a user exists. The specific reason is
always in ``reason``, for the server's log.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Protocol, TypeVar

from raftlog.security import scram_messages as msg
from raftlog.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    hash_name,
    salted_password,
)

__all__ = (
    "AUTHZID_MISMATCH",
    "INVALID_USERNAME_OR_PASSWORD",
    "OAUTHBEARER",
    "PLAIN",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "SUPPORTED_MECHANISMS",
    "SaslAuthenticationError",
    "SaslClient",
    "SaslCredentials",
    "SaslServer",
    "TokenCredential",
    "plain_server",
    "sasl_client",
    "scram_server",
)

_T = TypeVar("_T")

PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
OAUTHBEARER: Final = "OAUTHBEARER"
SUPPORTED_MECHANISMS: Final = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)

#: What Kafka's PlainSaslServer and ScramSaslServer send to the client
#: (SaslAuthenticationException); everything else they raise is a
#: SaslException, whose text SaslServerAuthenticator keeps from the client.
INVALID_USERNAME_OR_PASSWORD: Final = "Authentication failed: Invalid username or password"
AUTHZID_MISMATCH: Final = (
    "Authentication failed: Client requested an authorization id that is different from username")

# The GS2 header our SCRAM client sends (no channel binding, no authzid), and
# the c= attribute that repeats it.
_GS2_HEADER: Final = "n,,"
_CHANNEL_BINDING: Final = msg.b64encode(_GS2_HEADER.encode("ascii"))  # "biws"


class SaslAuthenticationError(Exception):
    """The exchange failed. ``str(exc)`` is the message the server sends the
    client (Kafka's wording); ``reason`` is the specific cause, for logs only
    (it may say whether the user exists). On a client both are the same."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason: str = message if reason is None else reason


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What a client authenticates with (``sasl.mechanism`` and the JAAS
    ``username``/``password``). For OAUTHBEARER, ``username`` is the
    principal (for messages), ``password`` is empty, and ``token`` makes the
    bearer token of each login (an `oauthbearer.BearerToken`), with the SASL
    ``extensions`` (KIP-342). Raises ValueError for an unknown mechanism, or
    OAUTHBEARER without ``token``."""

    mechanism: str
    username: str
    password: str = field(repr=False)  # never in logs
    token: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    extensions: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.mechanism not in SUPPORTED_MECHANISMS:
            raise ValueError(
                f"unsupported SASL mechanism {self.mechanism!r}; "
                f"supported: {', '.join(SUPPORTED_MECHANISMS)}")
        if (self.mechanism == OAUTHBEARER) != (self.token is not None):
            raise ValueError("OAUTHBEARER credentials take a token maker, and only they do")


class SaslServer(Protocol):
    """The server side of one exchange."""

    mechanism: str

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name. Raises RuntimeError before completion."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """The reply to one client token (b"" when there is none). Raises
        SaslAuthenticationError, and nothing else, for any token, including
        one after the exchange completed or failed."""
        ...


class SaslClient(Protocol):
    """The client side of one exchange."""

    mechanism: str

    @property
    def complete(self) -> bool:
        """Whether the server's last reply has been checked: authenticated."""
        ...

    def initial(self) -> bytes:
        """The first token. Raises RuntimeError if called twice."""
        ...

    def evaluate(self, challenge: bytes) -> bytes:
        """The next token for a server reply (b"" once complete). Raises
        SaslAuthenticationError when the reply is invalid or reports an
        error, RuntimeError when called before `initial`."""
        ...


def plain_server(users: Mapping[str, str]) -> SaslServer:
    """A SASL/PLAIN server over ``users`` (user name -> password, the JAAS
    ``user_<name>`` options; read at `evaluate` time)."""
    return _PlainServer(users)


@dataclass(frozen=True, slots=True)
class TokenCredential:
    """What a SCRAM server needs to log a delegation token in (KIP-48): the
    SCRAM credential derived from the token's HMAC, the owner's name (the
    session's user) and the token's expiry (epoch ms), which bounds the
    session as an OAUTHBEARER token's does (KIP-368)."""

    credential: ScramCredential
    owner: str
    lifetime_ms: int


def scram_server(
    mechanism: str,
    lookup: Callable[[str], ScramCredential | None],
    *,
    server_nonce: str | None = None,
    token_lookup: Callable[[str], TokenCredential | None] | None = None,
) -> SaslServer:
    """A SCRAM server for ``mechanism`` that finds a user's credential with
    ``lookup`` (None: no such user). If ``lookup`` raises, the exchange fails
    with the exception as ``__cause__``, as Kafka's "Credentials could not be
    obtained" does. ``server_nonce`` is for tests; by default it is random.

    ``token_lookup`` finds a delegation token by id for a client that sends
    the ``tokenauth=true`` extension (None: tokens are refused). Such a
    login's user is the token's owner, and the server's
    ``token_authenticated`` is then True.

    Raises ValueError for a non-SCRAM mechanism or an invalid nonce."""
    hash_name(mechanism)
    nonce = secrets.token_urlsafe(24) if server_nonce is None else server_nonce
    if not msg.is_valid_nonce(nonce):
        raise ValueError("a nonce must be non-empty printable ASCII without ','")
    return _ScramServer(mechanism, lookup, nonce, token_lookup)


def sasl_client(credentials: SaslCredentials, *, client_nonce: str | None = None) -> SaslClient:
    """A client for ``credentials.mechanism``. ``client_nonce`` (SCRAM only)
    is for tests; by default it is random. Raises ValueError for a PLAIN
    user name or password holding NUL, or an invalid nonce."""
    if credentials.mechanism == OAUTHBEARER:
        from raftlog.security.oauthbearer import oauthbearer_client  # it imports this module

        assert credentials.token is not None
        return oauthbearer_client(credentials.token, extensions=dict(credentials.extensions))
    if credentials.mechanism == PLAIN:
        if "\0" in credentials.username or "\0" in credentials.password:
            raise ValueError("a SASL/PLAIN user name or password cannot contain NUL")
        return _PlainClient(credentials)
    nonce = secrets.token_urlsafe(24) if client_nonce is None else client_nonce
    if not msg.is_valid_nonce(nonce):
        raise ValueError("a nonce must be non-empty printable ASCII without ','")
    return _ScramClient(credentials, nonce)


class _State(Enum):
    """Where an exchange is. Legal moves: START -> [WAIT_FIRST ->]
    [WAIT_FINAL ->] COMPLETE, and from START, WAIT_FIRST or WAIT_FINAL to
    FAILED. COMPLETE and FAILED are final."""

    START = "start"  # nothing exchanged yet
    WAIT_FIRST = "wait_first"  # SCRAM client: client-first sent
    WAIT_FINAL = "wait_final"  # the peer's last message is due
    COMPLETE = "complete"
    FAILED = "failed"


def _unexpected(side: str, state: _State) -> SaslAuthenticationError:
    # Kafka: IllegalSaslStateException("Unexpected challenge in Sasl server state COMPLETE").
    return SaslAuthenticationError(f"Unexpected challenge in Sasl {side} state {state.name}")


def _refused(mechanism: str, reason: str) -> SaslAuthenticationError:
    """A failure whose reason Kafka keeps from the client (a SaslException
    in its mechanisms); SaslServerAuthenticator sends this text instead."""
    return SaslAuthenticationError(
        "Authentication failed during authentication due to invalid credentials "
        f"with SASL mechanism {mechanism}", reason=reason)


class _ServerBase:
    """What both servers share: the state and, once complete, the user."""

    __slots__ = ("_authorization_id", "_state", "mechanism")

    _state: _State
    _authorization_id: str

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def authorization_id(self) -> str:
        if self._state is not _State.COMPLETE:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id


class _PlainServer(_ServerBase):
    __slots__ = ("_users",)

    def __init__(self, users: Mapping[str, str]) -> None:
        self.mechanism = PLAIN
        self._users = users
        self._state = _State.START
        self._authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        if self._state is not _State.START:
            raise _unexpected("server", self._state)
        try:
            self._authorization_id = self._authenticate(token)
        except SaslAuthenticationError:
            self._state = _State.FAILED
            raise
        self._state = _State.COMPLETE
        return b""

    def _authenticate(self, token: bytes) -> str:
        """RFC 4616: ``[authzid] NUL authcid NUL passwd``. Kafka's checks in
        its order (PlainSaslServer): the password before the authzid."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _refused(PLAIN, "Invalid SASL/PLAIN response: not UTF-8") from None
        fields = text.split("\0")
        if len(fields) != 3:
            raise _refused(
                PLAIN, f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(fields)}")
        authzid, username, password = fields
        if not username:
            raise _refused(PLAIN, "Authentication failed: username not specified")
        if not password:
            raise _refused(PLAIN, "Authentication failed: password not specified")
        expected = self._users.get(username)
        # Constant time in the password (PlainServerCallbackHandler); bytes,
        # since compare_digest takes only ASCII str.
        if expected is None or not hmac.compare_digest(
                password.encode("utf-8"), expected.encode("utf-8", "surrogatepass")):
            raise SaslAuthenticationError(INVALID_USERNAME_OR_PASSWORD)
        if authzid and authzid != username:
            raise SaslAuthenticationError(AUTHZID_MISMATCH)
        return username


@dataclass(frozen=True, slots=True)
class _ScramRound:
    """What the server keeps between its two SCRAM messages."""

    username: str
    credential: ScramCredential
    gs2_header: str
    nonce: str  # client nonce + server nonce
    client_first_bare: str
    server_first: str


class _ScramServer(_ServerBase):
    __slots__ = ("_hash", "_lookup", "_round", "_server_nonce", "_token_lookup", "token",
                 "token_authenticated")

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 server_nonce: str,
                 token_lookup: Callable[[str], TokenCredential | None] | None = None) -> None:
        self.mechanism = mechanism
        self._hash = hash_name(mechanism)
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._server_nonce = server_nonce
        self._state = _State.START
        self._round: _ScramRound | None = None
        self._authorization_id = ""
        #: A delegation token login: its `TokenCredential` (whose
        #: ``lifetime_ms`` the session shell reads) and the flag.
        self.token: TokenCredential | None = None
        self.token_authenticated = False

    def evaluate(self, token: bytes) -> bytes:
        match self._state:
            case _State.START:
                handle = self._handle_client_first
            case _State.WAIT_FINAL:
                handle = self._handle_client_final
            case _:
                raise _unexpected("server", self._state)
        try:
            return handle(token)
        except SaslAuthenticationError:
            self._state = _State.FAILED
            self._round = None  # Kafka's clearCredentials
            raise

    def _handle_client_first(self, token: bytes) -> bytes:
        try:
            first = msg.parse_client_first(token.decode("utf-8"))
        except (UnicodeDecodeError, msg.ScramFormatError) as e:
            raise self._refuse(f"Invalid SCRAM client first message format: {e}") from None
        # KIP-48 delegation tokens ride on SCRAM with tokenauth=true: the user
        # name is the token id, the password the token's HMAC. Other
        # extensions Kafka ignores (it logs "Unsupported extensions will be
        # ignored"), and so do we.
        found: TokenCredential | None = None
        if first.token_authenticated:
            if self._token_lookup is None:
                raise self._refuse(
                    "Token Authentication failed: delegation tokens are not enabled")
            found = self._obtain(self._token_lookup, first.username)
            credential = None if found is None else found.credential
        else:
            credential = self._obtain(self._lookup, first.username)
        if credential is None:
            raise self._refuse("Authentication failed: Invalid user credentials")
        if first.authzid and first.authzid != first.username and (
                found is None or first.authzid != found.owner):
            raise SaslAuthenticationError(AUTHZID_MISMATCH)
        if credential.iterations < MIN_ITERATIONS:
            raise self._refuse(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}")
        nonce = first.nonce + self._server_nonce
        server_first = msg.ServerFirst(
            nonce=nonce, salt=credential.salt, iterations=credential.iterations).text()
        self._round = _ScramRound(
            username=first.username if found is None else found.owner,
            credential=credential, gs2_header=first.gs2_header,
            nonce=nonce, client_first_bare=first.bare, server_first=server_first)
        self.token = found
        self._state = _State.WAIT_FINAL
        return server_first.encode("ascii")

    def _obtain(self, lookup: Callable[[str], _T | None], name: str) -> _T | None:
        """``lookup(name)``; if it raises, the exchange fails with the
        exception as the cause (Kafka's "Credentials could not be obtained")."""
        try:
            return lookup(name)
        except Exception as e:
            raise self._refuse("Authentication failed: Credentials could not be obtained") from e

    def _handle_client_final(self, token: bytes) -> bytes:
        state = self._round
        assert state is not None, "WAIT_FINAL without a first round"
        try:
            final = msg.parse_client_final(token.decode("utf-8"))
        except (UnicodeDecodeError, msg.ScramFormatError) as e:
            raise self._refuse(f"Invalid SCRAM client final message format: {e}") from None
        if final.nonce != state.nonce:
            raise self._refuse("Invalid client nonce in the final client message.")
        # RFC 5802: c= repeats the GS2 header. Kafka does not compare them (the
        # proof covers c= anyway); a mismatch is a broken or tampered client.
        if final.channel_binding != state.gs2_header.encode("utf-8"):
            raise self._refuse("Invalid channel binding in the final client message")
        auth_message = ",".join(
            (state.client_first_bare, state.server_first, final.without_proof)).encode("utf-8")
        credential = state.credential
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(final.proof) != len(client_signature) or not hmac.compare_digest(
                hashlib.new(self._hash, _xor(final.proof, client_signature)).digest(),
                credential.stored_key):
            raise self._refuse("Invalid client credentials")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        self._authorization_id = state.username
        self.token_authenticated = self.token is not None
        self._round = None
        self._state = _State.COMPLETE
        return f"v={msg.b64encode(server_signature)}".encode("ascii")

    def _refuse(self, reason: str) -> SaslAuthenticationError:
        return _refused(self.mechanism, reason)


class _PlainClient:
    __slots__ = ("_credentials", "_state", "mechanism")

    def __init__(self, credentials: SaslCredentials) -> None:
        self.mechanism = PLAIN
        self._credentials = credentials
        self._state = _State.START

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def initial(self) -> bytes:
        if self._state is not _State.START:
            raise RuntimeError("initial() was already called")
        self._state = _State.WAIT_FINAL
        # No authzid: Kafka's clients send none.
        return b"\0%s\0%s" % (self._credentials.username.encode("utf-8"),
                              self._credentials.password.encode("utf-8"))

    def evaluate(self, challenge: bytes) -> bytes:
        if self._state is _State.START:
            raise RuntimeError("evaluate() before initial()")
        if self._state is not _State.WAIT_FINAL:
            raise _unexpected("client", self._state)
        if challenge:
            self._state = _State.FAILED
            raise SaslAuthenticationError("Invalid SASL/PLAIN server reply: expected none")
        self._state = _State.COMPLETE
        return b""


class _ScramClient:
    __slots__ = ("_client_first_bare", "_credentials", "_expected_signature", "_hash",
                 "_nonce", "_state", "mechanism")

    def __init__(self, credentials: SaslCredentials, nonce: str) -> None:
        self.mechanism = credentials.mechanism
        self._hash = hash_name(credentials.mechanism)
        self._credentials = credentials
        self._nonce = nonce
        # KIP-48: a delegation token logs in with the SCRAM extension
        # ``tokenauth=true`` (the JAAS option of Kafka's ScramLoginModule).
        extensions = "".join(f",{name}={value}" for name, value in credentials.extensions)
        self._client_first_bare = (
            f"n={msg.encode_saslname(credentials.username)},r={nonce}{extensions}")
        self._expected_signature = b""
        self._state = _State.START

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def initial(self) -> bytes:
        if self._state is not _State.START:
            raise RuntimeError("initial() was already called")
        self._state = _State.WAIT_FIRST
        return (_GS2_HEADER + self._client_first_bare).encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes:
        match self._state:
            case _State.START:
                raise RuntimeError("evaluate() before initial()")
            case _State.WAIT_FIRST:
                handle = self._handle_server_first
            case _State.WAIT_FINAL:
                handle = self._handle_server_final
            case _:
                raise _unexpected("client", self._state)
        try:
            return handle(challenge)
        except SaslAuthenticationError:
            self._state = _State.FAILED
            raise

    def _handle_server_first(self, challenge: bytes) -> bytes:
        try:
            server_first_text = challenge.decode("utf-8")
            server_first = msg.parse_server_first(server_first_text)
        except (UnicodeDecodeError, msg.ScramFormatError) as e:
            raise SaslAuthenticationError(
                f"Invalid SCRAM server first message format: {e}") from None
        # Kafka's ScramSaslClient checks, in its words. The maximum is ours: a
        # hostile server could otherwise make us run PBKDF2 2**31 times.
        if not server_first.nonce.startswith(self._nonce):
            raise SaslAuthenticationError("Invalid server nonce: does not start with client nonce")
        if server_first.iterations < MIN_ITERATIONS:
            raise SaslAuthenticationError(
                f"Requested iterations {server_first.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}")
        if server_first.iterations > MAX_ITERATIONS:
            raise SaslAuthenticationError(
                f"Requested iterations {server_first.iterations} is more than the maximum "
                f"{MAX_ITERATIONS} for {self.mechanism}")
        # No SASLprep: Kafka salts the password's UTF-8 bytes as they are.
        salted = salted_password(self.mechanism, self._credentials.password,
                                 server_first.salt, server_first.iterations)
        without_proof = f"c={_CHANNEL_BINDING},r={server_first.nonce}"
        auth_message = ",".join(
            (self._client_first_bare, server_first_text, without_proof)).encode("utf-8")
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        proof = _xor(client_key, hmac.digest(stored_key, auth_message, self._hash))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._expected_signature = hmac.digest(server_key, auth_message, self._hash)
        self._state = _State.WAIT_FINAL
        return f"{without_proof},p={msg.b64encode(proof)}".encode("ascii")

    def _handle_server_final(self, challenge: bytes) -> bytes:
        try:
            final = msg.parse_server_final(challenge.decode("utf-8"))
        except (UnicodeDecodeError, msg.ScramFormatError) as e:
            raise SaslAuthenticationError(
                f"Invalid SCRAM server final message format: {e}") from None
        if final.error is not None:
            raise SaslAuthenticationError(
                f"Sasl authentication using {self.mechanism} failed with error: {final.error}")
        assert final.signature is not None, "a server-final has a signature or an error"
        if not hmac.compare_digest(final.signature, self._expected_signature):
            raise SaslAuthenticationError("Invalid server signature in server final message")
        self._state = _State.COMPLETE
        return b""


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")
