"""``KafkaProtocolServer``: the asyncio shell around ``ServerConnection``.

The shell only moves bytes and runs handlers; what to answer and when to hang
up is decided by ``raftlog.net.connection`` (see its docstring for the error
policy). Per connection, handlers run concurrently but responses leave in
request order (Kafka's per-connection ordering guarantee): each request gets a
slot in a FIFO, and whenever a slot at the head is filled, every filled slot
from the head is written in one ``transport.write``.

Each connection is an ``asyncio.Protocol``, not a stream reader/writer pair
with read and write loop tasks: received bytes are decoded in
``data_received`` and a response is written by the handler task that finished
it. That is one event-loop hop per request (the handler task's first step)
instead of three (read loop, handler, write loop), which is most of the
broker's per-request overhead on an idle connection (acks=all latency).

A handler may also ask for its connection to be muted (KIP-219): a throttled
client's connection reads no further request for ``throttle_ms`` from when
the handler returns (`EncodedBody.throttle_ms`, `NoResponse`), as Kafka mutes
a throttled client's channel, and may hold its response until then
(``delay_response``, for clients that do not back off by themselves).
Requests already read whose handlers have not started wait for the mute to
end as well: Kafka reads one request at a time from a channel, so it would
not have seen them yet, and a client pipelining many requests (librdkafka's
default) would otherwise have all of them served at every unmute.
Muting composes with the other reasons to stop reading (the in-flight limit,
write backpressure): reading resumes once none holds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import logging
import socket
import ssl
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from kio.static.primitive import i32Timedelta
from kio.static.protocol import ResponsePayload

from raftlog.net.api_versions import FeaturesSource, SupportedVersions
from raftlog.net.codec import DEFAULT_MAX_REQUEST_BYTES
from raftlog.net.connection import (
    ImmediateResponse,
    IncomingRequest,
    ProtocolViolation,
    ServerConnection,
    validate_supported,
)
from raftlog.net.connection_quotas import ConnectionQuotas
from raftlog.net.errors import ErrorCode, KafkaApiError, SessionExpiredError
from raftlog.net.registry import API_VERSIONS_KEY, kio_version_range
from raftlog.net.request_time import RequestClock, RequestTimeQuota, timed
from raftlog.net.sasl import ANONYMOUS, SaslServerAuthenticator
from raftlog.values import value

__all__ = (
    "NO_RESPONSE",
    "EncodedBody",
    "Handler",
    "KafkaProtocolServer",
    "NoResponse",
    "RequestContext",
)

log = logging.getLogger(__name__)

# How long a TLS listener waits for a client's handshake (asyncio's default
# is 60 s; Kafka bounds it by its connection setup).
_TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0


@value
class RequestContext:
    """What a handler knows about a request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # (host, port) of the peer, as the socket reports it.
    peer: tuple[str, int] | None
    listener_name: str
    # Mutes the connection for that many ms from now (KIP-219, see the
    # module docstring): a handler that knows early that its client is over
    # a quota holds back the requests behind this one before it awaits.
    mute: Callable[[int], None] | None = None
    # The principal's name (``User:<user>``): who authenticated with SASL,
    # ANONYMOUS on a listener without it.
    user: str = ANONYMOUS
    # Whether ``user`` logged in with a delegation token (KIP-48; Kafka's
    # KafkaPrincipal.tokenAuthenticated): such a principal may not create,
    # renew, expire or describe tokens.
    token_authenticated: bool = False
    # The loop time the handler has used, while request quotas are on
    # (KIP-124, `raftlog.net.request_time`); None otherwise.
    clock: RequestClock | None = None


class NoResponse:
    """What a handler returns to send no response at all (`NO_RESPONSE`), or
    none but a mute: ``NoResponse(throttle_ms)`` reads no further request
    from the connection for ``throttle_ms`` (KIP-219: an acks=0 producer over
    its quota gets no answer to carry a throttle time, so only the mute
    holds it back, as in Kafka)."""

    __slots__ = ("throttle_ms",)

    def __init__(self, throttle_ms: int = 0) -> None:
        if throttle_ms < 0:
            raise ValueError(f"throttle_ms must not be negative, got {throttle_ms}")
        self.throttle_ms = throttle_ms

    def __repr__(self) -> str:
        return f"NoResponse(throttle_ms={self.throttle_ms})" if self.throttle_ms else "NO_RESPONSE"


NO_RESPONSE: Final = NoResponse()
"""What a handler returns when Kafka sends no response at all: a Produce with
acks=0 (the client does not read one, so an answer would desynchronise its
correlation ids). The connection keeps its response order."""


@value
class EncodedBody:
    """A response body a handler encoded itself, at the request's API and
    version (hand-written encoders for hot responses, checked against kio's
    decoder in their tests). The server adds the size prefix and the
    response header."""

    data: bytes
    # (topic label, bytes of record batches) per topic the body carries
    # records for: what byte-rate metrics would otherwise read from the entity.
    record_bytes: tuple[tuple[object, int], ...] = ()
    # KIP-219: > 0 mutes the connection: no further request is read from it,
    # nor is one already read handled, until this many ms after the handler
    # returned (Kafka mutes a throttled client's channel, so a client that
    # ignores the body's throttle time is held back all the same).
    throttle_ms: int = 0
    # With ``throttle_ms``: also hold this response (and so the ones after it
    # on the connection) until the mute ends. Kafka delays the answer to a
    # request version older than KIP-219, whose clients do not back off.
    delay_response: bool = False


Handler = Callable[[RequestContext, Any], Awaitable["ResponsePayload | EncodedBody | NoResponse"]]
"""``async def handle_x(context, request_body) -> response_body``.

The body is the kio request class of ``context.api_version``; the result must
be the kio response class of the same API and version, an `EncodedBody` of
it, or `NO_RESPONSE` (or a muting `NoResponse`). Raise ``KafkaApiError(code)``
to answer with an error code.
"""


class KafkaProtocolServer:
    """A Kafka-protocol listener dispatching requests by API key.

    ``handlers`` maps api key -> handler. ``supported`` maps api key ->
    (min, max) advertised versions; it defaults to kio's full range for every
    handled key. ApiVersions (18) is built in and must not be in
    ``handlers``; it answers exactly ``supported`` (plus itself).
    ``max_request_bytes`` is Kafka's ``socket.request.max.bytes``;
    ``send_buffer_bytes`` / ``receive_buffer_bytes`` its
    ``socket.send.buffer.bytes`` / ``socket.receive.buffer.bytes``.
    ``max_in_flight_per_connection`` bounds pipelining: beyond it the server
    stops reading from that connection until responses drain.
    ``connection_quotas`` (shared by a node's listeners,
    `raftlog.net.connection_quotas`): connections over the per-address or
    total limit are closed as they are accepted, and idle ones after
    ``connections.max.idle.ms``; None: no limit, no idle expiry.
    ``authenticator``: a SASL listener (SASL_PLAINTEXT): each connection gets
    a new `SaslServerAuthenticator` and serves nothing but ApiVersions and
    the SASL exchange until it completes; None: PLAINTEXT.
    ``tls``: an SSL or SASL_SSL listener: every connection is admitted
    by the connection quotas as it is accepted, then completes a TLS
    handshake with this server context before its first byte is read. A
    failed handshake closes only that connection and counts as a failed
    authentication (``failed_handshakes`` counts those alone); one not
    done in 10 s is dropped. ``tls_principal`` names
    the client from its TLS session (its certificate's mapped subject, or
    ANONYMOUS without one): that is the connection's user on an SSL
    listener; on SASL_SSL the SASL login is. It may raise ValueError (no
    mapping rule matched): the connection then fails authentication.
    ``features``: the node's features for ApiVersions v3+ (KIP-584,
    `raftlog.net.api_versions.ApiFeatures`), asked for at each answer.

    Raises ValueError for an inconsistent handler/supported table.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handlers: Mapping[int, Handler],
        *,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        supported: SupportedVersions | None = None,
        listener_name: str = "PLAINTEXT",
        max_in_flight_per_connection: int = 100,
        connection_quotas: ConnectionQuotas | None = None,
        authenticator: Callable[[], SaslServerAuthenticator] | None = None,
        tls: ssl.SSLContext | None = None,
        tls_principal: Callable[[Any], str] | None = None,
        features: FeaturesSource | None = None,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        request_quota: RequestTimeQuota | None = None,
    ) -> None:
        if API_VERSIONS_KEY in handlers:
            raise ValueError("ApiVersions is built in; do not register a handler for it")
        if supported is None:
            supported = {key: kio_version_range(key) for key in handlers}
        self.supported: Mapping[int, tuple[int, int]] = validate_supported(
            supported, frozenset(handlers)
        )
        self.host = host
        self._port = port
        self._handlers = dict(handlers)
        self.max_request_bytes = max_request_bytes
        # ``socket.send.buffer.bytes`` / ``socket.receive.buffer.bytes``:
        # SO_SNDBUF / SO_RCVBUF of each accepted connection; -1 leaves the
        # OS's (autotuned) buffers.
        self._socket_buffers = tuple(
            (socket.SOL_SOCKET, option, size)
            for option, size in ((socket.SO_SNDBUF, send_buffer_bytes),
                                 (socket.SO_RCVBUF, receive_buffer_bytes))
            if size != -1)
        self.listener_name = listener_name
        self._max_in_flight = max_in_flight_per_connection
        self._server: asyncio.Server | None = None
        self._connections: set[_ConnectionProtocol] = set()
        # Shared by a node's listeners: per-address and total limits, idle expiry.
        self._quotas = connection_quotas
        self._idle_sweep: asyncio.TimerHandle | None = None
        self._last_refusal_log = 0.0
        self._authenticator = authenticator
        self._tls = tls
        self._tls_principal = tls_principal
        self.features = features
        self._request_quota = request_quota
        # Counted SASL outcomes (Kafka's successful-/failed-authentication-total).
        self.authentications = 0
        self.failed_authentications = 0
        # KIP-368 logins on connections already authenticated
        # (Kafka's successful-reauthentication-total).
        self.reauthentications = 0
        # TLS handshakes that failed (also in failed_authentications).
        self.failed_handshakes = 0
        self._last_handshake_log = float("-inf")

    @property
    def authenticates(self) -> bool:
        """Whether connections authenticate with SASL (SASL_PLAINTEXT, SASL_SSL)."""
        return self._authenticator is not None

    @property
    def tls(self) -> bool:
        """Whether connections are TLS (SSL, SASL_SSL)."""
        return self._tls is not None

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0, once started)."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        """Bind and start accepting connections."""
        if self._server is not None:
            raise RuntimeError("server already started")
        loop = asyncio.get_running_loop()
        # TLS listeners too accept plain TCP: each connection is counted
        # against the connection quotas as it is accepted, then upgraded
        # (`_TlsConnectionProtocol`), so a failed handshake is seen.
        protocol = _ConnectionProtocol if self._tls is None else _TlsConnectionProtocol
        self._server = await loop.create_server(
            lambda: protocol(self), self.host, self._port
        )
        if self._quotas is not None and self._quotas.limits.idle_ms >= 0:
            self._idle_sweep = loop.call_later(self._sweep_interval_s(), self._sweep_idle)

    def _sweep_interval_s(self) -> float:
        assert self._quotas is not None
        # A connection idle for idle_ms is closed within one more interval.
        return min(1.0, max(0.01, self._quotas.limits.idle_ms / 2000))

    def _sweep_idle(self) -> None:
        """Close connections with nothing in flight and no bytes read or
        written since two sweeps covering ``connections.max.idle.ms``."""
        assert self._quotas is not None
        loop = asyncio.get_running_loop()
        now = loop.time()
        idle_s = self._quotas.limits.idle_ms / 1000
        for connection in list(self._connections):
            if connection.active:
                connection.active = False
                connection.idle_since = now
            elif not connection.in_flight and now - connection.idle_since >= idle_s:
                log.debug("closing connection from %s: idle for %d ms (connections.max.idle.ms)",
                          connection.peer, int((now - connection.idle_since) * 1000))
                connection.abort()
        self._idle_sweep = loop.call_later(self._sweep_interval_s(), self._sweep_idle)

    def _handshake_failed(self, peer: tuple[str, int] | None, error: ssl.SSLError) -> None:
        """Count a failed TLS handshake as a failed authentication (Kafka's
        ``failed-authentication-total``) and log it, once a second at most:
        anyone who can connect can fail a handshake."""
        self.failed_authentications += 1
        self.failed_handshakes += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_handshake_log >= 1.0:
            self._last_handshake_log = now
            log.info("%s: failed authentication with %s (SSL handshake failed: %s; "
                     "%d failed handshakes so far)", self.listener_name, peer,
                     error.reason or error, self.failed_handshakes)

    def _refused(self, peer: tuple[str, int] | None, why: str) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._last_refusal_log >= 1.0:  # a connection flood logs once a second
            self._last_refusal_log = now
            assert self._quotas is not None
            log.info("%s: refused a connection from %s: %s (%d refused so far)",
                     self.listener_name, peer, why, self._quotas.refused)

    async def __aenter__(self) -> KafkaProtocolServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()

    def close(self) -> None:
        """Stop accepting and drop every connection (in-flight requests are abandoned)."""
        if self._server is not None:
            self._server.close()
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
            self._idle_sweep = None
        for connection in list(self._connections):
            connection.abort()

    async def wait_closed(self) -> None:
        """Wait until the listener and every connection is gone."""
        if self._connections:
            await asyncio.gather(
                *(c.closed for c in list(self._connections)), return_exceptions=True
            )
        if self._server is not None:
            await self._server.wait_closed()

    async def _respond(
        self,
        protocol: _ConnectionProtocol,
        connection: ServerConnection,
        request: IncomingRequest,
        peer: tuple[str, int] | None,
    ) -> bytes | None:
        """The framed response to ``request`` (b"" for none, None: close the
        connection), after muting ``protocol`` if the handler asks."""
        header = request.header
        quota = self._request_quota
        clock = RequestClock() if quota is not None and quota.enabled else None
        context = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            peer=peer,
            listener_name=self.listener_name,
            mute=protocol.mute,
            user=connection.user,
            token_authenticated=connection.token_authenticated,
            clock=clock,
        )
        try:
            if clock is None:
                body = await self._handlers[header.api_key](context, request.body)
            else:
                body = await timed(self._handlers[header.api_key](context, request.body), clock)
                if not clock.charged:
                    assert quota is not None
                    body = await self._charge(protocol, context, clock, quota, body)
            if isinstance(body, EncodedBody):
                if body.throttle_ms:  # the one read an unthrottled answer costs
                    protocol.mute(body.throttle_ms)
                    if body.delay_response:
                        await asyncio.sleep(body.throttle_ms / 1000)
                return connection.frame_encoded_response(request, body.data)
            if isinstance(body, NoResponse):
                if body.throttle_ms:
                    protocol.mute(body.throttle_ms)
                return b""
            return connection.encode_response(request, body)
        except KafkaApiError as exc:
            error_code, message = exc.error_code, exc.message
        except Exception as exc:
            log.exception(
                "handler for api key %d v%d (correlation id %d) from %s failed",
                header.api_key,
                header.api_version,
                header.correlation_id,
                peer,
            )
            error_code, message = ErrorCode.unknown_server_error, repr(exc)
        return connection.encode_error_response(request, error_code, message)

    @staticmethod
    async def _charge(protocol: _ConnectionProtocol, context: RequestContext,
                      clock: RequestClock, quota: RequestTimeQuota, body: Any) -> Any:
        """Charge the handler's loop time to the client (KIP-124); over its
        quota, the answer carries the throttle time (the larger, if it has
        one already), the connection is muted for it, and the answer to a
        client that does not back off by itself is held back as long."""
        throttle_ms = quota.record(context, clock.elapsed_ns())
        if not throttle_ms:
            return body
        if isinstance(body, EncodedBody):
            # Encoded already, without this throttle time: the mute (and for
            # a client that does not back off, the held answer) holds it back.
            return dataclasses.replace(
                body, throttle_ms=max(body.throttle_ms, throttle_ms),
                delay_response=body.delay_response or not quota.client_throttles(
                    context.api_key, context.api_version))
        if isinstance(body, NoResponse):
            return NoResponse(max(body.throttle_ms, throttle_ms))
        current = getattr(body, "throttle_time", None)  # kio's name for throttle_time_ms
        if isinstance(current, datetime.timedelta):
            if current >= datetime.timedelta(milliseconds=throttle_ms):
                throttle_ms = int(current.total_seconds() * 1000)
            else:
                body = dataclasses.replace(
                    body, throttle_time=i32Timedelta.parse(
                        datetime.timedelta(milliseconds=throttle_ms)))
        protocol.mute(throttle_ms)
        if not quota.client_throttles(context.api_key, context.api_version):
            await asyncio.sleep(throttle_ms / 1000)
        return body


class _Slot:
    """One request's place in its connection's response order."""

    __slots__ = ("data", "done", "task")

    def __init__(self) -> None:
        self.done = False
        # The framed response; b"" for none (acks=0); None: close the connection.
        self.data: bytes | None = b""
        self.task: asyncio.Task[None] | None = None


class _ConnectionProtocol(asyncio.Protocol):
    """One accepted connection: decode in `data_received`, run each request's
    handler in a task, write filled slots from the head of the FIFO.

    Backpressure: with ``max_in_flight_per_connection`` unanswered requests,
    or while the transport's write buffer is over its high-water mark, the
    connection stops reading (requests already received in the same chunk
    are still served). While a handler's mute lasts (KIP-219, `mute`) it
    stops reading too, and requests already received wait to be handled.
    """

    def __init__(self, server: KafkaProtocolServer) -> None:
        self._server = server
        self._connection = ServerConnection(
            server.supported, server.max_request_bytes,
            None if server._authenticator is None else server._authenticator(),
            server.features)
        self._slots: collections.deque[_Slot] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._peer: tuple[str, int] | None = None
        self._read_paused = False
        self._write_paused = False
        # Muted by a throttled answer until the loop time ``_muted_until``;
        # handlers starting meanwhile wait for ``_unmuted``.
        self._muted = False
        self._muted_until = 0.0
        self._unmute_handle: asyncio.TimerHandle | None = None
        self._unmuted: asyncio.Future[None] | None = None
        # What runs a request: the server's `_respond`, or while muted
        # `_respond_after_mute` (swapped, so an unmuted request pays no check).
        self._respond: Callable[
            [_ConnectionProtocol, ServerConnection, IncomingRequest, tuple[str, int] | None],
            Awaitable[bytes | None],
        ] = server._respond
        # _write_paused or _muted: one read in `_update_reading`.
        self._hold_reading = False
        self._closing = False
        self._loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = self._loop.create_future()
        # Idle expiry (`KafkaProtocolServer._sweep_idle`): bytes moved since
        # the last sweep, and since when none did.
        self.active = False
        self.idle_since = self._loop.time()
        # Counted in the server's connection quotas: release on close.
        self._admitted = False
        self._counted_authentication = False
        self._counted_reauthentications = 0
        self._closing_after_failure: asyncio.TimerHandle | None = None
        # KIP-612: bytes received before the connection's creation-rate
        # turn (None: it has had its turn), and the timer that gives it.
        self._awaiting_turn: list[bytes] | None = None
        self._turn_handle: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (not necessarily an asyncio.Transport subclass:
        # uvloop's is not).
        self._transport = typing.cast(asyncio.Transport, transport)
        self._peer = _peer(transport)
        quotas = self._server._quotas
        if quotas is not None:
            refused = quotas.admit(self._peer[0] if self._peer is not None else None,
                                   self._server.listener_name)
            if refused is not None:
                self._server._refused(self._peer, refused)
                self._closing = True
                transport.close()  # connection_lost follows
                return
            self._admitted = True
            # KIP-612 creation rates: Kafka's acceptor waits before taking
            # the connection; here nothing it sends is taken until then.
            if (wait_ms := quotas.creation_throttle_ms(self._server.listener_name)) > 0:
                self._awaiting_turn = []
                self._hold_reading = True
                self._turn_handle = self._loop.call_later(wait_ms / 1000, self._take_turn)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Each option on its own: one the socket refuses leaves the others set.
            for level, option, value in ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
                                         *self._server._socket_buffers):
                with contextlib.suppress(OSError):
                    sock.setsockopt(level, option, value)
        self._server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self.active = True
        try:
            self._receive(data)
        except Exception:
            # A bug in the shell must still cost only this connection.
            log.exception("connection from %s failed", self._peer)
            self.abort()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._hold_reading = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._hold_reading = self._muted
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        del exc
        self._closing = True
        self._cancel_unmute()
        if self._turn_handle is not None:
            self._turn_handle.cancel()
            self._turn_handle = None
        if self._closing_after_failure is not None:
            self._closing_after_failure.cancel()
            self._closing_after_failure = None
        self._server._connections.discard(self)
        if self._admitted:
            self._admitted = False
            assert self._server._quotas is not None
            self._server._quotas.release(self._peer[0] if self._peer is not None else None,
                                         self._server.listener_name)
        for slot in self._slots:
            if slot.task is not None:
                slot.task.cancel()
        self._slots.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    # --- internals -----------------------------------------------------------

    @property
    def peer(self) -> tuple[str, int] | None:
        return self._peer

    @property
    def in_flight(self) -> bool:
        """A request read and not answered yet (a long poll is not idle)."""
        return bool(self._slots)

    def abort(self) -> None:
        """Drop the connection: abandon in-flight requests, close the transport
        (bytes already written are still flushed)."""
        self._closing = True
        self._cancel_unmute()
        for slot in self._slots:
            if slot.task is not None:
                slot.task.cancel()
        self._slots.clear()
        if self._transport is not None:
            self._transport.close()

    def _take_turn(self) -> None:
        """The connection's creation-rate wait is over: what it sent meanwhile
        is taken, and reading goes on."""
        self._turn_handle = None
        waiting, self._awaiting_turn = self._awaiting_turn, None
        self._hold_reading = self._write_paused or self._muted
        self._update_reading()
        for data in waiting or ():
            if self._closing:
                return
            self._receive(data)

    def _receive(self, data: bytes) -> None:
        if self._awaiting_turn is not None:  # KIP-612: not yet its turn
            self._awaiting_turn.append(data)
            self._update_reading()  # (uvloop reads once the connection is made)
            return
        for event in self._connection.receive_data(data):
            if isinstance(event, ProtocolViolation):
                log.log(logging.INFO if isinstance(event.error, SessionExpiredError)
                        else logging.WARNING,
                        "closing connection from %s: %s", self._peer, event.error)
                self._flush()
                self.abort()
                return
            slot = _Slot()
            self._slots.append(slot)
            if isinstance(event, ImmediateResponse):
                if event.close:  # a failed SASL authentication
                    self._slots.pop()
                    self._fail_authentication(event)
                    return
                slot.data = event.data
                slot.done = True
                if self._server._authenticator is not None and self._connection.authenticated:
                    if not self._counted_authentication:
                        self._counted_authentication = True
                        self._server.authentications += 1
                    reauthentications = self._connection.reauthentications
                    if reauthentications > self._counted_reauthentications:
                        self._server.reauthentications += \
                            reauthentications - self._counted_reauthentications
                        self._counted_reauthentications = reauthentications
            else:
                # create_task, not ensure_future: one task per request, and
                # ensure_future's type checks cost a few percent of a node's CPU.
                slot.task = self._loop.create_task(self._run(slot, event))
        self._flush()
        self._update_reading()

    def _fail_authentication(self, event: ImmediateResponse) -> None:
        """Stop reading; after ``event.delay_ms`` write its answer and close
        (Kafka's connection.failed.authentication.delay.ms)."""
        self._server.failed_authentications += 1
        log.info("%s: authentication failed for a connection from %s: %s",
                 self._server.listener_name, self._peer, event.reason)
        self._flush()
        self._hold_reading = True
        self._update_reading()
        self._closing_after_failure = self._loop.call_later(
            event.delay_ms / 1000, self._close_after_failure, event.data)

    def _close_after_failure(self, data: bytes) -> None:
        self._closing_after_failure = None
        transport = self._transport
        if data and transport is not None and not transport.is_closing() and not self._closing:
            transport.write(data)
        self.abort()

    def mute(self, throttle_ms: int) -> None:
        """KIP-219: read no further request, and start no handler of one
        already read, for ``throttle_ms`` from now (a mute already running
        longer is kept). Reading resumes when it ends unless the in-flight
        limit or write backpressure still holds."""
        if self._closing:
            return
        until = self._loop.time() + throttle_ms / 1000
        if self._muted and until <= self._muted_until:
            return
        self._cancel_unmute()
        if not self._muted:
            self._muted = True
            self._unmuted = self._loop.create_future()
            self._respond = self._respond_after_mute
        self._muted_until = until
        self._hold_reading = True
        self._unmute_handle = self._loop.call_at(until, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._unmute_handle = None
        self._muted = False
        self._respond = self._server._respond
        unmuted, self._unmuted = self._unmuted, None
        if unmuted is not None and not unmuted.done():
            unmuted.set_result(None)  # waiting handlers start, in request order
        self._hold_reading = self._write_paused
        self._update_reading()

    async def _respond_after_mute(
        self,
        protocol: _ConnectionProtocol,
        connection: ServerConnection,
        request: IncomingRequest,
        peer: tuple[str, int] | None,
    ) -> bytes | None:
        """`KafkaProtocolServer._respond` once no mute holds (a request that
        was read before the mute began and had not started)."""
        while self._unmuted is not None:
            await self._unmuted
        return await self._server._respond(protocol, connection, request, peer)

    def _cancel_unmute(self) -> None:
        if self._unmute_handle is not None:
            self._unmute_handle.cancel()
            self._unmute_handle = None

    async def _run(self, slot: _Slot, request: IncomingRequest) -> None:
        slot.data = await self._respond(self, self._connection, request, self._peer)
        slot.done = True
        if not self._closing:
            self._flush()
            self._update_reading()

    def _flush(self) -> None:
        """Write every answered slot at the head of the FIFO, in one write."""
        slots = self._slots
        if not slots or not slots[0].done:
            return
        out: list[bytes] = []
        failed = False
        while slots and slots[0].done:
            data = slots.popleft().data
            if data is None:
                failed = True
                break
            if data:
                out.append(data)
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.active = True
        if failed:
            log.warning("closing connection from %s after a failed request", self._peer)
            self.abort()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing or transport.is_closing():
            return
        pause = self._hold_reading or len(self._slots) >= self._server._max_in_flight
        if pause and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not pause and self._read_paused:
            transport.resume_reading()
            self._read_paused = False


class _TlsConnectionProtocol(_ConnectionProtocol):
    """A connection to an SSL or SASL_SSL listener: accepted (and counted
    against the connection quotas) as plain TCP, then upgraded with
    ``loop.start_tls``. Until the upgraded transport is handed over,
    received bytes wait in ``_early``: raw ones (uvloop starts reading as
    soon as the connection is made) go to the TLS layer, decrypted ones to
    the Kafka decoder once the user is named. A subclass, so that a
    PLAINTEXT connection's ``data_received`` tests nothing for TLS."""

    def __init__(self, server: KafkaProtocolServer) -> None:
        super().__init__(server)
        self._early: list[bytes] | None = []
        self._handshake: asyncio.Task[None] | None = None
        # loop.start_tls, from its first step until the handshake ends.
        self._starting: asyncio.Task[asyncio.Transport | None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._closing:  # refused by the connection quotas
            return
        typing.cast(asyncio.Transport, transport).pause_reading()  # asyncio honours it
        self._handshake = self._loop.create_task(self._start_tls(transport))

    def data_received(self, data: bytes) -> None:
        if self._early is not None:
            self._early.append(data)
        else:
            _ConnectionProtocol.data_received(self, data)

    async def _start_tls(self, raw: asyncio.BaseTransport) -> None:
        """Upgrade an accepted connection to TLS; on failure, count it (an
        SSL error is a failed authentication, as in Kafka; a peer gone or
        silent for the handshake timeout is not) and drop the connection."""
        server = self._server
        assert server._tls is not None
        tls: asyncio.Transport | None = None
        try:
            if raw.is_closing() or self._closing:
                return  # gone before the TLS layer took over (a probe, a reset)
            self._starting = starting = self._loop.create_task(self._loop.start_tls(
                typing.cast(asyncio.Transport, raw), self, server._tls, server_side=True,
                ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S))
            # One loop turn: start_tls's first step has put its TLS layer in
            # front of ``raw`` (and paused it); the layer's connection_made
            # and the resumed reading come on the next turn.
            await asyncio.sleep(0)
            if raw.is_closing() or self._closing:
                # Cancelled, start_tls closes ``raw`` and drops the layer's
                # connection_made, which would write to a closed transport.
                starting.cancel()
            else:
                self._hand_over_early_bytes(raw)
            try:
                tls = await starting
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                # start_tls alone was cancelled (above, or by `abort`).
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:  # the peer went away
            log.debug("%s: TLS handshake with %s did not complete: %r",
                      server.listener_name, self._peer, exc)
        except ssl.SSLError as exc:
            server._handshake_failed(self._peer, exc)
        except (TimeoutError, OSError) as exc:  # reset, EOF, handshake timeout
            log.debug("%s: TLS handshake with %s did not complete: %r",
                      server.listener_name, self._peer, exc)
        finally:
            self._handshake = self._starting = None
            if tls is None or tls.is_closing() or self._closing:
                # The connection is gone, failed or was aborted: asyncio does
                # not tell the protocol of a loss during the handshake.
                raw.close()
                if tls is not None:
                    tls.close()
                self.connection_lost(None)
                tls = None
        if tls is None:
            return
        self._transport = tls
        if not self._tls_user(tls):
            self._closing = True
            tls.close()
            return
        early, self._early = self._early, None
        for data in early or ():
            _ConnectionProtocol.data_received(self, data)

    def abort(self) -> None:
        starting = self._starting
        if starting is not None and not starting.done():
            # Mid-handshake: cancel start_tls, which closes the raw transport
            # before its TLS layer can use it; `_start_tls` cleans up.
            self._closing = True
            starting.cancel()
            return
        super().abort()

    def _hand_over_early_bytes(self, raw: asyncio.BaseTransport) -> None:
        """Give the TLS layer the raw bytes read before it took over (uvloop
        starts reading as soon as the connection is made), in order, through
        its buffered-protocol interface."""
        layer: Any = raw.get_protocol()  # asyncio's or uvloop's SSLProtocol
        if layer is self or not self._early:
            return
        for data in self._early:
            view = memoryview(data)
            while view:
                buffer = layer.get_buffer(len(view))
                size = min(len(buffer), len(view))
                buffer[:size] = view[:size]
                layer.buffer_updated(size)
                view = view[size:]
        self._early.clear()

    def _tls_user(self, transport: asyncio.BaseTransport) -> bool:
        """Name the connection's user from its TLS session (an SSL
        listener; SASL_SSL's login replaces it). False: refused."""
        principal = self._server._tls_principal
        if principal is None:
            return True
        try:
            user = principal(transport.get_extra_info("ssl_object"))
        except ValueError as exc:
            self._server.failed_authentications += 1
            log.info("%s: authentication failed for a connection from %s: %s",
                     self._server.listener_name, self._peer, exc)
            return False
        if self._server._authenticator is None:
            self._connection.user = user
            self._server.authentications += 1
        return True


def _peer(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return None
