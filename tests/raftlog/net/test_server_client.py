"""KafkaProtocolServer + KafkaProtocolClient over loopback."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from net_messages import (
    describe_quorum_request,
    metadata_request,
    metadata_response,
    vote_request,
    vote_response,
)

from raftlog.net import (
    DisconnectedError,
    KafkaApiError,
    KafkaProtocolClient,
    KafkaProtocolServer,
    NetworkClient,
    RequestContext,
    RequestTimeoutError,
    UnsupportedVersionError,
    registry,
)
from raftlog.net.errors import ConnectFailedError


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


async def echo_vote(context: RequestContext, body: Any) -> Any:
    """Answers after epoch*10 ms; odd epochs get FENCED_LEADER_EPOCH."""
    epoch = int(body.topics[0].partitions[0].replica_epoch)
    await asyncio.sleep(epoch / 100)
    error = ErrorCode.none if epoch % 2 == 0 else ErrorCode.fenced_leader_epoch
    return vote_response(context.api_version, error)


def test_pipelined_requests_are_answered_in_request_order() -> None:
    async def main() -> None:
        finished: list[int] = []

        async def vote(context: RequestContext, body: Any) -> Any:
            epoch = int(body.topics[0].partitions[0].replica_epoch)
            await asyncio.sleep((5 - epoch) * 0.03)  # later requests finish first
            finished.append(epoch)
            return vote_response(context.api_version, ErrorCode(epoch + 73))

        async with KafkaProtocolServer("127.0.0.1", 0, {52: vote}) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, client_id="pipeline")
            await client.connect()
            responses = await asyncio.gather(
                *(client.send(vote_request(2, candidate_epoch=e)) for e in range(1, 5))
            )
            assert [int(r.error_code) for r in responses] == [74, 75, 76, 77]  # type: ignore[attr-defined]
            assert finished == [4, 3, 2, 1]
            await client.close()

    run(main())


def test_responses_leave_in_request_order_on_the_wire() -> None:
    async def main() -> None:
        async def vote(context: RequestContext, body: Any) -> Any:
            epoch = int(body.topics[0].partitions[0].replica_epoch)
            await asyncio.sleep((5 - epoch) * 0.02)
            return vote_response(context.api_version)

        async with KafkaProtocolServer("127.0.0.1", 0, {52: vote}) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            from raftlog.net import codec

            for correlation_id, epoch in enumerate(range(1, 5)):
                writer.write(
                    codec.encode_request(
                        vote_request(2, candidate_epoch=epoch), correlation_id, "raw"
                    )
                )
            await writer.drain()
            order = []
            for _ in range(4):
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                order.append(codec.peek_correlation_id(frame))
            assert order == [0, 1, 2, 3]
            writer.close()

    run(main())


def test_request_timeout_raises_typed_error_and_next_send_reconnects() -> None:
    async def main() -> None:
        calls = 0

        async def slow(context: RequestContext, body: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                await asyncio.sleep(5)
            return vote_response(context.api_version)

        async with KafkaProtocolServer("127.0.0.1", 0, {52: slow}) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=200)
            with pytest.raises(RequestTimeoutError) as info:
                await client.send(vote_request(2))
            assert info.value.api_key == 52 and info.value.timeout_ms == 200
            assert not client.connected  # Kafka disconnects on request timeout
            response = await client.send(vote_request(2))
            assert response.error_code is ErrorCode.none  # type: ignore[attr-defined]
            await client.close()

    run(main())


def test_in_flight_requests_fail_on_disconnect_and_client_reconnects_after_restart() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def blocked(context: RequestContext, body: Any) -> Any:
            await release.wait()
            return vote_response(context.api_version)

        server = KafkaProtocolServer("127.0.0.1", 0, {52: blocked})
        await server.start()
        port = server.port
        client = KafkaProtocolClient("127.0.0.1", port, request_timeout_ms=5000)
        pending = [asyncio.ensure_future(client.send(vote_request(2))) for _ in range(3)]
        await asyncio.sleep(0.1)
        server.close()
        await server.wait_closed()
        for task in pending:
            with pytest.raises(DisconnectedError):
                await task
        # While the server is down: a typed connect failure (after backoff).
        with pytest.raises(ConnectFailedError):
            await client.send(vote_request(2))
        release.set()
        server = KafkaProtocolServer("127.0.0.1", port, {52: blocked})
        await server.start()
        response = await client.send(vote_request(2))
        assert response.error_code is ErrorCode.none  # type: ignore[attr-defined]
        await client.close()
        server.close()
        await server.wait_closed()

    run(main())


def test_api_versions_negotiation_picks_highest_common_version() -> None:
    async def main() -> None:
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: echo_vote, 55: echo_vote}, supported={52: (0, 1), 55: (0, 2)}
        ) as server:
            client = KafkaProtocolClient(
                "127.0.0.1", server.port, local_versions={18: (0, 4), 52: (0, 2), 3: (0, 12)}
            )
            await client.connect()
            # SaslHandshake and SaslAuthenticate are advertised on every listener.
            assert client.peer_versions == {17: (0, 1), 18: (0, 4), 36: (0, 2), 52: (0, 1),
                                            55: (0, 2)}
            assert client.negotiated_version(52) == 1
            assert client.negotiated_version(3) is None  # not served
            # A v2 request is rewritten at the negotiated v1 (pre-vote off).
            response = await client.send(vote_request(2, candidate_epoch=2, pre_vote=False))
            assert response.__version__ == 1
            with pytest.raises(UnsupportedVersionError):
                await client.send(metadata_request(12))
            await client.close()

    run(main())


def test_api_versions_unsupported_version_falls_back_and_retries() -> None:
    async def main() -> None:
        # The server speaks ApiVersions only up to v2; the client starts at v4,
        # gets a v0-format UNSUPPORTED_VERSION answer, and retries at v2.
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: echo_vote}, supported={18: (0, 2), 52: (0, 2)}
        ) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port)
            await client.connect()
            assert client.negotiated_version(18) == 2
            assert client.negotiated_version(52) == 2
            await client.close()

    run(main())


def _raw_exchange(port: int, data: bytes, timeout_s: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            return b"<open>" + b"".join(chunks)
    return b"".join(chunks)


def test_protocol_violations_close_only_that_connection() -> None:
    async def main() -> None:
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: echo_vote}, supported={52: (0, 1)}, max_request_bytes=1000
        ) as server:
            from raftlog.net import codec

            client = KafkaProtocolClient("127.0.0.1", server.port)
            await client.connect()
            loop = asyncio.get_running_loop()
            cases = [
                struct.pack(">i", 1001),  # oversize prefix
                struct.pack(">i", -1),
                struct.pack(">i", 3) + b"\x00\x34\x00",  # frame too short for a header
                codec.encode_request(vote_request(2), 1, "x"),  # unsupported version
                codec.encode_request(metadata_request(12), 1, "x"),  # API not served
                struct.pack(">ihhih", 10, 4242, 0, 1, -1),  # unknown api key
                struct.pack(">i", 12)
                + struct.pack(">hhih", 52, 1, 1, -1)
                + b"\xff\xff",  # bad body
            ]
            for data in cases:
                assert await loop.run_in_executor(None, _raw_exchange, server.port, data) == b""
            # The established connection is unaffected.
            response = await client.send(vote_request(1, candidate_epoch=2))
            assert response.error_code is ErrorCode.none  # type: ignore[attr-defined]
            await client.close()

    run(main())


def test_handler_errors_become_error_responses_or_close() -> None:
    async def main() -> None:
        async def failing_vote(context: RequestContext, body: Any) -> Any:
            raise KafkaApiError(ErrorCode.not_controller, "not here")

        async def buggy_quorum(context: RequestContext, body: Any) -> Any:
            raise RuntimeError("bug")

        async def buggy_metadata(context: RequestContext, body: Any) -> Any:
            raise RuntimeError("bug")

        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: failing_vote, 55: buggy_quorum, 3: buggy_metadata}
        ) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port)
            vote = await client.send(vote_request(2))
            assert vote.error_code is ErrorCode.not_controller  # type: ignore[attr-defined]
            quorum = await client.send(describe_quorum_request(0))
            assert quorum.error_code is ErrorCode.unknown_server_error  # type: ignore[attr-defined]
            # Metadata v12 has no top-level error code: the connection closes.
            with pytest.raises(DisconnectedError):
                await client.send(metadata_request(12))
            await client.close()

    run(main())


def test_request_context_and_network_client_pool() -> None:
    async def main() -> None:
        seen: list[RequestContext] = []

        async def metadata(context: RequestContext, body: Any) -> Any:
            seen.append(context)
            return metadata_response(context.api_version, node_id=7)

        async with KafkaProtocolServer(
            "127.0.0.1", 0, {3: metadata}, listener_name="CONTROLLER"
        ) as server:
            pool = NetworkClient(
                {7: ("127.0.0.1", server.port)}, client_id="node-1", request_timeout_ms=2000
            )
            response = await pool.send(7, metadata_request(12))
            assert response.brokers[0].node_id == 7  # type: ignore[attr-defined]
            assert pool.client(7) is pool.client(7)
            context = seen[0]
            assert (context.api_key, context.api_version, context.client_id) == (3, 12, "node-1")
            assert context.listener_name == "CONTROLLER" and context.peer is not None
            with pytest.raises(KeyError):
                await pool.send(8, metadata_request(12))
            await pool.close()

    run(main())


def test_server_rejects_inconsistent_tables() -> None:
    handler: Callable[..., Any] = echo_vote
    with pytest.raises(ValueError):
        KafkaProtocolServer("127.0.0.1", 0, {52: handler}, supported={52: (0, 9)})
    with pytest.raises(ValueError):
        KafkaProtocolServer("127.0.0.1", 0, {52: handler}, supported={55: (0, 1)})
    with pytest.raises(ValueError):
        KafkaProtocolServer("127.0.0.1", 0, {18: handler})
    assert registry.kio_version_range(52) == (0, 2)


def test_socket_buffer_sizes_are_set_on_accepted_connections() -> None:
    """``socket.send.buffer.bytes`` / ``socket.receive.buffer.bytes``: SO_SNDBUF
    and SO_RCVBUF of each accepted connection (Linux reports twice the size
    asked for: it counts its bookkeeping); -1 leaves the OS's."""
    async def sizes(send: int, receive: int) -> tuple[int, int]:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: echo_vote},
                                       send_buffer_bytes=send,
                                       receive_buffer_bytes=receive) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, client_id="buffers")
            await client.connect()
            await client.send(vote_request(2, candidate_epoch=2))
            (connection,) = server._connections
            sock = connection._transport.get_extra_info("socket")
            got = (sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                   sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
            await client.close()
            return got

    def os_default_sizes() -> tuple[int, int]:
        """What the OS gives a connection accepted without any setsockopt."""
        with socket.create_server(("127.0.0.1", 0)) as listener, \
                socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                return (accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                        accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))

    async def main() -> None:
        assert await sizes(65536, 32768) == (131072, 65536)
        assert await sizes(131072, 131072) == (262144, 262144)
        assert await sizes(-1, -1) == os_default_sizes()

    run(main())
