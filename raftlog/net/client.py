"""``KafkaProtocolClient`` and ``NetworkClient``: the asyncio client shells.

Protocol state (correlation ids, response matching, ApiVersions fallback,
version negotiation) lives in ``ClientConnection`` and ``api_versions``; this
module connects, writes, reads, times out and backs off.

Following Kafka's ``NetworkClient``:

- Many requests may be in flight on one connection (pipelining); responses
  are matched by correlation id.
- A request that outlives ``request.timeout.ms`` fails with
  RequestTimeoutError and the connection is closed, failing the other
  in-flight requests with DisconnectedError: a silent peer is most likely a
  dead connection, and an abandoned correlation id would desynchronise it.
- After a failed connect or a lost connection, the next attempt waits
  ``reconnect.backoff.ms`` (50) doubling per consecutive failure up to
  ``reconnect.backoff.max.ms`` (1000), with +/-20% jitter.
- With TLS (``security.tls``, an ``ssl.SSLContext``), every connection
  first completes a TLS handshake; the context decides whether the
  server's certificate and host name are checked (Kafka's
  ``ssl.endpoint.identification.algorithm``). A failed handshake is a
  failed connect.
- With SASL credentials (``security.sasl``), every new connection
  authenticates after the ApiVersions handshake (SaslHandshake v1, then SaslAuthenticate until the
  mechanism completes) before any request is sent on it. A refusal fails
  the connection with SaslAuthenticationFailedError and counts as a failed
  connect (backoff), as Kafka's clients retry a broker's authentication.
  When the broker gives the login a session that ends (KIP-368's
  ``session_lifetime_ms``: ``connections.max.reauth.ms``, or a token's
  expiry), the connection is replaced before the session ends, at a random
  85-95% of its length as Kafka's clients re-authenticate then: new
  requests go on a new, freshly authenticated connection, and the old one
  closes once its in-flight requests are answered. (Kafka's clients log in
  again on the same connection; a broker accepts either.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import typing
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.sasl_authenticate.v1 import request as sasl_auth_req
from kio.schema.sasl_handshake.v1 import request as handshake_req
from kio.static.protocol import RequestPayload, ResponsePayload

from raftlog.net import registry
from raftlog.net.api_versions import (
    SupportedVersions,
    api_versions_request,
    negotiate,
    peer_versions,
)
from raftlog.net.connection import ClientConnection
from raftlog.net.errors import (
    ApiVersionsNegotiationError,
    ConnectFailedError,
    DisconnectedError,
    ErrorCode,
    ProtocolError,
    RequestTimeoutError,
    SaslAuthenticationFailedError,
    TlsHandshakeFailedError,
    UnsupportedVersionError,
)
from raftlog.security.sasl import (
    SaslAuthenticationError,
    SaslClient,
    SaslCredentials,
    sasl_client,
)
from raftlog.values import value

__all__ = ("PLAINTEXT_SECURITY", "ConnectionSecurity", "KafkaProtocolClient", "NetworkClient")

log = logging.getLogger(__name__)

_JITTER: Final = 0.2


@value
class ConnectionSecurity:
    """How a client's connections are secured (Kafka's security.protocol):
    PLAINTEXT with neither, SSL with ``tls``, SASL_PLAINTEXT with ``sasl``,
    SASL_SSL with both."""

    sasl: SaslCredentials | None = None
    # The client context: CAs, optional client certificate, host name check.
    tls: ssl.SSLContext | None = None

    @property
    def protocol(self) -> str:
        """Kafka's name for it: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        if self.sasl is None:
            return "PLAINTEXT" if self.tls is None else "SSL"
        return "SASL_PLAINTEXT" if self.tls is None else "SASL_SSL"


PLAINTEXT_SECURITY: Final = ConnectionSecurity()


class _Link(asyncio.Protocol):
    """One TCP connection and the futures waiting on it.

    An ``asyncio.Protocol``: a response completes its waiter right in
    `data_received`, with no read-loop task in between (one event-loop hop
    less per response, which is on the path of every replica fetch).
    """

    def __init__(self, client: KafkaProtocolClient, protocol: ClientConnection) -> None:
        self.client = client
        self.protocol = protocol
        self.transport: asyncio.Transport | None = None
        self.waiters: dict[int, asyncio.Future[ResponsePayload]] = {}
        self.closed = False
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        # Loop time to move to a new connection (KIP-368 session); None: never.
        self.replace_at: float | None = None
        # Replaced: close once the last waiter is answered.
        self.retiring = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (not necessarily an asyncio.Transport subclass:
        # uvloop's is not).
        self.transport = typing.cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            responses = self.protocol.receive_data(data)
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("%s:%d: %s", self.client.host, self.client.port, reason)
            self.client._close_link(
                self, DisconnectedError(f"{self.client.host}:{self.client.port}: {reason}")
            )
            return
        for correlation_id, response in responses:
            waiter = self.waiters.pop(correlation_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(response)
        if self.retiring and not self.waiters:
            self.client._close_link(self, DisconnectedError("replaced"), count_failure=False)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        reason = "connection closed by peer" if exc is None else f"read failed: {exc!r}"
        self.client._close_link(
            self, DisconnectedError(f"{self.client.host}:{self.client.port}: {reason}")
        )
        self._wake_drainers(ConnectionResetError("connection lost"))
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drainers(None)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark.
        Raises ConnectionResetError if the connection is lost meanwhile."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection is closing")
        if not self.write_paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_drainers(self, exc: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)


class KafkaProtocolClient:
    """A Kafka-protocol client for one peer address.

    ``send`` connects lazily (and reconnects after a failure, with backoff).
    With ``negotiate_api_versions`` the client performs the ApiVersions
    handshake on every new connection and then knows, per API, the highest
    version both sides support (``negotiated_version``); ``local_versions``
    is what this side speaks (default: everything kio knows).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "raftlog",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int | None = None,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        negotiate_api_versions: bool = True,
        local_versions: SupportedVersions | None = None,
        max_response_bytes: int = 2**31 - 1,
        software_name: str = "raftlog",
        software_version: str = "0.1.0",
        rng: random.Random | None = None,
        security: ConnectionSecurity = PLAINTEXT_SECURITY,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms or request_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.negotiate_api_versions = negotiate_api_versions
        self._local_versions = local_versions
        self.max_response_bytes = max_response_bytes
        self.software_name = software_name
        self.software_version = software_version
        self._rng = rng or random.Random()
        self._link: _Link | None = None
        self._connect_lock = asyncio.Lock()
        self._failures = 0
        self._next_attempt_at = 0.0  # loop time
        self._peer_versions: dict[int, tuple[int, int]] | None = None
        self._negotiated: dict[int, int] | None = None
        self._closed = False
        self.security = security

    # --- public -----------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.closed

    @property
    def peer_versions(self) -> Mapping[int, tuple[int, int]] | None:
        """The peer's advertised ranges from the last handshake, if any."""
        return self._peer_versions

    def negotiated_version(self, api_key: int) -> int | None:
        """Highest version of ``api_key`` both sides support, or None.

        None also before the first handshake or without negotiation.
        """
        return None if self._negotiated is None else self._negotiated.get(api_key)

    async def connect(self) -> None:
        """Connect (and negotiate) now rather than on the first ``send``.

        Raises ConnectFailedError, ApiVersionsNegotiationError, RequestTimeoutError.
        """
        await self._ensure_link(self._deadline(self.connect_timeout_ms))

    async def send(self, request: RequestPayload, version: int | None = None) -> ResponsePayload:
        """Send ``request``; return the peer's response (the matching kio class).

        The version sent is ``version`` if given, else the request's own
        version if the peer supports it (or nothing is known), else the
        negotiated one; a different version is reached with
        ``registry.convert_request``.

        Raises RequestTimeoutError, DisconnectedError (including
        ConnectFailedError), UnsupportedVersionError (the peer does not
        support the API or version), VersionConversionError,
        ApiVersionsNegotiationError.
        """
        if self._closed:
            raise DisconnectedError("client is closed")
        deadline = self._deadline(self.request_timeout_ms)
        link = await self._ensure_link(deadline)
        request = self._at_version(request, version)
        return await self._exchange(link, request, deadline)

    async def send_encoded(self, api_key: int, version: int, body: bytes) -> ResponsePayload:
        """Send a request body the caller encoded at (``api_key``, ``version``)
        (hand-written encoders for hot requests); return the peer's response,
        decoded by kio as for `send`.

        Raises what `send` raises; UnsupportedVersionError if the peer does
        not support the version.
        """
        if self._closed:
            raise DisconnectedError("client is closed")
        deadline = self._deadline(self.request_timeout_ms)
        link = await self._ensure_link(deadline)
        if self._peer_versions is not None:
            peer = self._peer_versions.get(api_key)
            if peer is None or not peer[0] <= version <= peer[1]:
                raise UnsupportedVersionError(api_key, version, peer)
        if link.closed:
            raise DisconnectedError(f"connection to {self.host}:{self.port} is closed")
        correlation_id, data = link.protocol.send_encoded_request(api_key, version, body)
        return await self._await_response(link, api_key, correlation_id, data, deadline)

    async def close(self) -> None:
        """Close the connection; in-flight requests fail with DisconnectedError."""
        self._closed = True
        if self._link is not None:
            await self._drop(self._link, DisconnectedError("client closed"), count_failure=False)

    # --- versions ---------------------------------------------------------------

    def _at_version(self, request: RequestPayload, version: int | None) -> RequestPayload:
        api_key = request.__api_key__
        if version is None:
            peer = None if self._peer_versions is None else self._peer_versions.get(api_key)
            if self._peer_versions is None or (
                peer is not None and peer[0] <= request.__version__ <= peer[1]
            ):
                return request
            version = self.negotiated_version(api_key)
            if version is None:
                raise UnsupportedVersionError(api_key, request.__version__, peer)
        elif self._peer_versions is not None:
            peer = self._peer_versions.get(api_key)
            if peer is None or not peer[0] <= version <= peer[1]:
                raise UnsupportedVersionError(api_key, version, peer)
        return registry.convert_request(request, version)

    # --- connection management --------------------------------------------------

    def _deadline(self, timeout_ms: int) -> float:
        return asyncio.get_running_loop().time() + timeout_ms / 1000

    async def _ensure_link(self, deadline: float) -> _Link:
        link = self._link
        if link is not None and not link.closed and (
                link.replace_at is None or asyncio.get_running_loop().time() < link.replace_at):
            return link
        async with self._connect_lock:
            link = self._link
            if link is not None and not link.closed:
                loop = asyncio.get_running_loop()
                if link.replace_at is None or loop.time() < link.replace_at:
                    return link
                try:
                    return await self._replace(link, deadline)
                except Exception as exc:
                    if link.closed:
                        raise
                    # The old connection serves until its session ends; try
                    # again in a second rather than fail this request.
                    log.warning("%s:%d: could not replace a connection whose SASL session "
                                "ends soon: %s", self.host, self.port, exc)
                    link.replace_at = loop.time() + 1.0
                    return link
            loop = asyncio.get_running_loop()
            wait_s = self._next_attempt_at - loop.time()
            if wait_s > 0:
                if loop.time() + wait_s > deadline:
                    raise ConnectFailedError(
                        f"{self.host}:{self.port}: in reconnect backoff for {wait_s * 1000:.0f} ms"
                    )
                await asyncio.sleep(wait_s)
            link = await self._open(deadline)
            self._link = link
            if self.negotiate_api_versions:
                await self._handshake(link, deadline)
            if self.security.sasl is not None:
                await self._authenticate(link, self.security.sasl, deadline)
            self._failures = 0
            return link

    async def _replace(self, old: _Link, deadline: float) -> _Link:
        """A new, authenticated connection for ``old``, whose SASL session is
        about to end (KIP-368); ``old`` closes once its waiters are answered.
        If the new one cannot be made, ``old`` stays current and the error
        is raised (the caller keeps using ``old`` for now)."""
        link = await self._open(deadline)
        try:
            if self.negotiate_api_versions:
                await self._handshake(link, deadline)
            assert self.security.sasl is not None
            await self._authenticate(link, self.security.sasl, deadline)
        except BaseException:
            self._close_link(link, DisconnectedError("replacement failed"), count_failure=False)
            if self._link is None and not old.closed:
                self._link = old
            raise
        self._link = link
        if old.waiters:
            old.retiring = True
        else:
            self._close_link(old, DisconnectedError("replaced"), count_failure=False)
        return link

    async def _open(self, deadline: float) -> _Link:
        loop = asyncio.get_running_loop()
        timeout_s = max(0.0, deadline - loop.time())
        link = _Link(self, ClientConnection(self.client_id, self.max_response_bytes))
        try:
            async with asyncio.timeout(timeout_s):
                if self.security.tls is None:
                    await loop.create_connection(lambda: link, self.host, self.port)
                else:
                    await self._open_tls(link, self.security.tls, max(timeout_s, 0.001))
        except ssl.SSLCertVerificationError as exc:
            self._note_failure()
            raise TlsHandshakeFailedError(
                f"TLS handshake with {self.host}:{self.port} failed: {exc.verify_message}"
            ) from exc
        except (OSError, TimeoutError) as exc:  # other ssl.SSLErrors are OSErrors
            self._note_failure()
            raise ConnectFailedError(f"connect to {self.host}:{self.port} failed: {exc!r}") from exc
        return link

    async def _open_tls(self, link: _Link, context: ssl.SSLContext, timeout_s: float) -> None:
        """TCP first, then the TLS handshake on it (``start_tls``), rather
        than ``create_connection(ssl=...)``: given up (cancelled) while its
        TCP step completes, the latter leaves its TLS layer's waiter behind,
        and the handshake's failure (the peer closed) is then logged as a
        "Future exception was never retrieved" ERROR (MagicStack/uvloop#437;
        a chaos run's TLS smoke saw one when a fetcher stopped mid-connect).
        Here each step awaits what it starts."""
        loop = asyncio.get_running_loop()
        raw, _ = await loop.create_connection(asyncio.Protocol, self.host, self.port)
        if raw.is_closing():  # the peer closed at once: nothing to upgrade
            raise ConnectionResetError("connection closed before the TLS handshake")
        try:
            transport = await loop.start_tls(
                raw, link, context, server_hostname=self.host, ssl_handshake_timeout=timeout_s)
        except BaseException:
            raw.abort()
            raise
        if transport is None:  # the type allows it; no loop we run returns None
            raw.abort()
            raise ConnectionResetError("connection closed during the TLS handshake")
        link.connection_made(transport)

    async def _handshake(self, link: _Link, deadline: float) -> None:
        local = self._local_versions or {
            key: registry.kio_version_range(key) for key in registry.KIO_API_KEYS
        }
        version = local[registry.API_VERSIONS_KEY][1]
        for _ in range(2):
            request = api_versions_request(version, self.software_name, self.software_version)
            response = await self._exchange(link, request, deadline)
            error = ErrorCode(getattr(response, "error_code", ErrorCode.none))
            peer = peer_versions(response)
            if error is ErrorCode.unsupported_version and registry.API_VERSIONS_KEY in peer:
                # KIP-511: retry at the highest ApiVersions version both speak.
                chosen = negotiate(local, peer).get(registry.API_VERSIONS_KEY)
                if chosen is None or chosen == version:
                    break
                version = chosen
                continue
            if error is not ErrorCode.none:
                break
            self._peer_versions = peer
            self._negotiated = negotiate(local, peer)
            return
        await self._drop(link, DisconnectedError("ApiVersions handshake failed"))
        raise ApiVersionsNegotiationError(
            f"{self.host}:{self.port}: ApiVersions handshake failed ({error.name})"
        )

    async def _authenticate(self, link: _Link, credentials: SaslCredentials,
                            deadline: float) -> None:
        """SaslHandshake v1 for ``credentials.mechanism``, then the mechanism's
        tokens in SaslAuthenticate v1 requests until it completes."""
        where = f"{self.host}:{self.port}"
        response: Any = await self._exchange(
            link, handshake_req.SaslHandshakeRequest(mechanism=credentials.mechanism), deadline)
        error = ErrorCode(response.error_code)
        if error is not ErrorCode.none:
            offered = ", ".join(response.mechanisms)
            await self._fail_authentication(
                link, f"{where}: SASL handshake for {credentials.mechanism} refused "
                      f"({error.name}; the listener offers: {offered or 'none'})")
        client = sasl_client(credentials)
        token = client.initial()
        while True:
            response = await self._exchange(
                link, sasl_auth_req.SaslAuthenticateRequest(auth_bytes=token), deadline)
            error = ErrorCode(response.error_code)
            if error is not ErrorCode.none:
                message = response.error_message
                await self._fail_authentication(
                    link, f"{where}: {error.name}: {message or 'no message'}")
            if _complete(client):  # PLAIN: done once the server took the one token
                self._note_session(link, response)
                return
            try:
                token = client.evaluate(response.auth_bytes)
            except SaslAuthenticationError as exc:
                await self._fail_authentication(link, f"{where}: {exc}")
            if _complete(client) and not token:  # SCRAM: the server's signature checked
                self._note_session(link, response)
                return

    @staticmethod
    def _note_session(link: _Link, response: Any) -> None:
        """KIP-368: a session that ends is replaced at a random 85-95% of it."""
        lifetime_s = response.session_lifetime.total_seconds()
        if lifetime_s > 0:
            link.replace_at = asyncio.get_running_loop().time() \
                + lifetime_s * random.uniform(0.85, 0.95)

    async def _fail_authentication(self, link: _Link, reason: str) -> typing.NoReturn:
        log.warning("SASL authentication failed: %s", reason)
        await self._drop(link, DisconnectedError(reason))
        raise SaslAuthenticationFailedError(reason)

    def _note_failure(self) -> None:
        self._failures += 1
        backoff_ms = min(
            self.reconnect_backoff_ms * 2 ** (self._failures - 1), self.reconnect_backoff_max_ms
        )
        backoff_ms *= self._rng.uniform(1 - _JITTER, 1 + _JITTER)
        self._next_attempt_at = asyncio.get_running_loop().time() + backoff_ms / 1000

    async def _drop(
        self, link: _Link, error: DisconnectedError, *, count_failure: bool = True
    ) -> None:
        self._close_link(link, error, count_failure=count_failure)
        with contextlib.suppress(Exception):
            await link.lost

    def _close_link(
        self, link: _Link, error: DisconnectedError, *, count_failure: bool = True
    ) -> None:
        """Fail every waiter of ``link`` with ``error`` and close it (once)."""
        if link.closed:
            return
        link.closed = True
        if self._link is link:
            self._link = None
        if count_failure:
            self._note_failure()
        for waiter in link.waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        link.waiters.clear()
        if link.transport is not None:
            link.transport.close()
        elif not link.lost.done():
            link.lost.set_result(None)

    # --- requests ---------------------------------------------------------------

    async def _exchange(
        self, link: _Link, request: RequestPayload, deadline: float
    ) -> ResponsePayload:
        if link.closed:
            raise DisconnectedError(f"connection to {self.host}:{self.port} is closed")
        correlation_id, data = link.protocol.send_request(request)
        return await self._await_response(link, request.__api_key__, correlation_id, data, deadline)

    async def _await_response(
        self, link: _Link, api_key: int, correlation_id: int, data: bytes, deadline: float
    ) -> ResponsePayload:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[ResponsePayload] = loop.create_future()
        link.waiters[correlation_id] = waiter
        assert link.transport is not None
        link.transport.write(data)
        # A plain timer failing the waiter, not asyncio.timeout: its
        # cancel-scope machinery costs several times more per request.
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            if link.write_paused:
                async with asyncio.timeout_at(deadline):
                    await link.drain()
            return await waiter
        except TimeoutError:
            link.waiters.pop(correlation_id, None)
            await self._drop(
                link, DisconnectedError("connection closed after another request timed out")
            )
            raise RequestTimeoutError(api_key, correlation_id, self.request_timeout_ms) from None
        except OSError as exc:
            await self._drop(link, DisconnectedError(f"write failed: {exc!r}"))
            raise DisconnectedError(f"write to {self.host}:{self.port} failed: {exc!r}") from exc
        finally:
            timer.cancel()


def _complete(client: SaslClient) -> bool:
    # A call, not the property inline: mypy would keep it narrowed across
    # `evaluate`, which changes it.
    return client.complete


def _expire(waiter: asyncio.Future[ResponsePayload]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class NetworkClient:
    """A pool of ``KafkaProtocolClient``s keyed by node id (Raft peers, brokers).

    ``client_options`` are passed to every ``KafkaProtocolClient``.
    """

    def __init__(
        self, addresses: Mapping[int, tuple[str, int]] | None = None, **client_options: object
    ) -> None:
        self._addresses: dict[int, tuple[str, int]] = dict(addresses or {})
        self._clients: dict[int, KafkaProtocolClient] = {}
        self._options = client_options

    def set_address(self, node_id: int, host: str, port: int) -> None:
        """Add or move a node; a moved node's old connection is closed on next use."""
        if self._addresses.get(node_id) != (host, port):
            self._addresses[node_id] = (host, port)
            old = self._clients.pop(node_id, None)
            if old is not None:
                task = asyncio.ensure_future(old.close())
                task.add_done_callback(lambda t: t.exception())

    def client(self, node_id: int) -> KafkaProtocolClient:
        """The client for ``node_id``, created on first use. Raises KeyError for an unknown node."""
        existing = self._clients.get(node_id)
        if existing is not None:
            return existing
        host, port = self._addresses[node_id]
        created = KafkaProtocolClient(host, port, **self._options)  # type: ignore[arg-type]
        self._clients[node_id] = created
        return created

    async def send(
        self, node_id: int, request: RequestPayload, version: int | None = None
    ) -> ResponsePayload:
        """``KafkaProtocolClient.send`` to ``node_id``; raises what it raises, or KeyError."""
        return await self.client(node_id).send(request, version)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
