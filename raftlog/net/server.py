"""``KafkaProtocolServer``: the asyncio shell around ``ServerConnection``.

The shell only moves bytes and runs handlers; what to answer and when to hang
up is decided by ``raftlog.net.connection`` (see its docstring for the error
policy). Per connection, handlers run concurrently but responses leave in
request order (Kafka's per-connection ordering guarantee): each request gets a
slot in a FIFO of futures and the writer awaits the head of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.static.protocol import ResponsePayload

from raftlog.net.api_versions import SupportedVersions
from raftlog.net.codec import DEFAULT_MAX_REQUEST_BYTES
from raftlog.net.connection import (
    ImmediateResponse,
    IncomingRequest,
    ProtocolViolation,
    ServerConnection,
    validate_supported,
)
from raftlog.net.errors import ErrorCode, KafkaApiError
from raftlog.net.registry import API_VERSIONS_KEY, kio_version_range

__all__ = ("NO_RESPONSE", "Handler", "KafkaProtocolServer", "RequestContext")

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about a request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # (host, port) of the peer, as the socket reports it.
    peer: tuple[str, int] | None
    listener_name: str


class _NoResponse:
    """The type of `NO_RESPONSE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE: Final = _NoResponse()
"""What a handler returns when Kafka sends no response at all: a Produce with
acks=0 (the client does not read one, so an answer would desynchronise its
correlation ids). The connection keeps its response order."""

Handler = Callable[[RequestContext, Any], Awaitable["ResponsePayload | _NoResponse"]]
"""``async def handle_x(context, request_body) -> response_body``.

The body is the kio request class of ``context.api_version``; the result must
be the kio response class of the same API and version, or `NO_RESPONSE`.
Raise ``KafkaApiError(code)`` to answer with an error code.
"""


class KafkaProtocolServer:
    """A Kafka-protocol listener dispatching requests by API key.

    ``handlers`` maps api key -> handler. ``supported`` maps api key ->
    (min, max) advertised versions; it defaults to kio's full range for every
    handled key. ApiVersions (18) is built in and must not be in
    ``handlers``; it answers exactly ``supported`` (plus itself).
    ``max_request_bytes`` is Kafka's ``socket.request.max.bytes``.
    ``max_in_flight_per_connection`` bounds pipelining: beyond it the server
    stops reading from that connection until responses drain.

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
        self.listener_name = listener_name
        self._max_in_flight = max_in_flight_per_connection
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

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
        self._server = await asyncio.start_server(self._on_connect, self.host, self._port)

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
        for task in self._connections:
            task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the listener and every connection task are gone."""
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # --- per connection -------------------------------------------------------

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass
        except Exception:
            # A bug in the shell must still cost only this connection.
            log.exception("connection from %s failed", _peer(writer))
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = ServerConnection(self.supported, self.max_request_bytes)
        slots: asyncio.Queue[asyncio.Future[bytes | None]] = asyncio.Queue(self._max_in_flight)
        handler_tasks: set[asyncio.Future[bytes | None]] = set()
        read_task = asyncio.create_task(
            self._read_loop(reader, connection, slots, handler_tasks, peer)
        )
        write_task = asyncio.create_task(self._write_loop(writer, slots, peer))
        try:
            await asyncio.wait({read_task, write_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            tasks: list[asyncio.Future[Any]] = [read_task, write_task, *handler_tasks]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_loop(
        self,
        reader: asyncio.StreamReader,
        connection: ServerConnection,
        slots: asyncio.Queue[asyncio.Future[bytes | None]],
        handler_tasks: set[asyncio.Future[bytes | None]],
        peer: tuple[str, int] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await reader.read(_READ_CHUNK_BYTES)
            except OSError as exc:
                log.info("connection from %s: read failed: %r", peer, exc)
                return
            if not data:
                return
            for event in connection.receive_data(data):
                if isinstance(event, ProtocolViolation):
                    log.warning("closing connection from %s: %s", peer, event.error)
                    return
                slot: asyncio.Future[bytes | None]
                if isinstance(event, ImmediateResponse):
                    slot = loop.create_future()
                    slot.set_result(event.data)
                else:
                    slot = asyncio.ensure_future(self._respond(connection, event, peer))
                    handler_tasks.add(slot)
                    slot.add_done_callback(handler_tasks.discard)
                await slots.put(slot)

    async def _write_loop(
        self,
        writer: asyncio.StreamWriter,
        slots: asyncio.Queue[asyncio.Future[bytes | None]],
        peer: tuple[str, int] | None,
    ) -> None:
        while True:
            slot = await slots.get()
            data = await slot
            if data is None:
                log.warning("closing connection from %s after a failed request", peer)
                return
            if not data:  # NO_RESPONSE
                continue
            writer.write(data)
            try:
                await writer.drain()
            except OSError as exc:
                log.info("connection from %s: write failed: %r", peer, exc)
                return

    async def _respond(
        self,
        connection: ServerConnection,
        request: IncomingRequest,
        peer: tuple[str, int] | None,
    ) -> bytes | None:
        header = request.header
        context = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            peer=peer,
            listener_name=self.listener_name,
        )
        try:
            body = await self._handlers[header.api_key](context, request.body)
            if isinstance(body, _NoResponse):
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


def _peer(writer: asyncio.StreamWriter) -> tuple[str, int] | None:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return None
