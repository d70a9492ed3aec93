"""The transport shells over TLS, on loopback: a TLS listener
(`KafkaProtocolServer(tls=...)`) and `KafkaProtocolClient` with a TLS
`ConnectionSecurity`. Handlers see the user the listener names: the mapped
certificate subject on SSL, ANONYMOUS without a certificate, the SASL login
on SASL_SSL. A client that cannot verify the server fails at once with
TlsHandshakeFailedError; one the server refuses is disconnected."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import socket
import ssl
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import uvloop
from net_messages import vote_request, vote_response

from raftlog.net import ConnectionSecurity, KafkaProtocolClient, KafkaProtocolServer, RequestContext
from raftlog.net.connection_quotas import ConnectionLimits, ConnectionQuotas
from raftlog.net.errors import TlsHandshakeFailedError, TransportError
from raftlog.net.sasl import SaslServerAuthenticator
from raftlog.security import dev_pki
from raftlog.security.sasl import PLAIN, SaslCredentials, plain_server
from raftlog.security.tls import (
    PrincipalMapper,
    TlsSettings,
    client_context,
    peer_principal,
    server_context,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    return dev_pki.make_pki(tmp_path_factory.mktemp("pki"), servers=("broker",),
                            clients=("alice",))


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    return dev_pki.make_pki(tmp_path_factory.mktemp("rogue"), servers=(), clients=("alice",))


def server_tls(pki: dev_pki.Pki, client_auth: str) -> ssl.SSLContext:
    return server_context(TlsSettings(
        keystore_type="PEM", keystore_location=str(pki.identities["broker"].pem),
        truststore_type="PEM", truststore_location=str(pki.ca_pem), client_auth=client_auth))


def client_tls(pki: dev_pki.Pki, user: str | None, *, trust: dev_pki.Pki | None = None
               ) -> ssl.SSLContext:
    identity = None if user is None else pki.identities[user]
    return client_context(TlsSettings(
        keystore_type="PEM", keystore_location=None if identity is None else str(identity.pem),
        truststore_type="PEM", truststore_location=str((trust or pki).ca_pem)))


def _plain() -> SaslServerAuthenticator:
    return SaslServerAuthenticator({PLAIN: lambda: plain_server({"alice": "alice-secret"})}, 0)


MAPPER = PrincipalMapper.parse("RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT")
seen: list[str] = []


async def _who(context: RequestContext, body: Any) -> Any:
    seen.append(context.user)
    return vote_response(context.api_version)


_loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def event_loop_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test on both loops: nodes run on uvloop, whose transports and
    TLS layer differ from asyncio's (it reads before ``pause_reading`` in
    ``connection_made`` takes effect, and caches protocol methods)."""
    global _loop_factory
    _loop_factory = uvloop.new_event_loop if request.param == "uvloop" else None
    yield request.param
    _loop_factory = None


def run(coro: Awaitable[None]) -> None:
    with asyncio.Runner(loop_factory=_loop_factory) as runner:
        runner.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


@pytest.mark.parametrize("client_auth,user,expected", [
    ("required", "alice", "alice"),
    ("requested", "alice", "alice"),
    ("requested", None, "ANONYMOUS"),
    ("none", "alice", "ANONYMOUS"),  # a certificate not asked for is not sent
])
def test_handlers_see_the_certificates_mapped_subject(
    pki: dev_pki.Pki, client_auth: str, user: str | None, expected: str,
) -> None:
    async def main() -> None:
        seen.clear()
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: _who}, tls=server_tls(pki, client_auth),
            tls_principal=functools.partial(peer_principal, mapper=MAPPER),
        ) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, security=ConnectionSecurity(
                tls=client_tls(pki, user)))
            await client.send(vote_request(2))
            await client.send(vote_request(2))
            assert seen == [expected, expected]
            assert server.tls and server.authentications == 1
            await client.close()

    run(main())


def test_a_client_that_cannot_verify_the_server_fails_at_once(
    pki: dev_pki.Pki, rogue: dev_pki.Pki,
) -> None:
    async def main() -> None:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       tls=server_tls(pki, "none")) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=3000,
                                         security=ConnectionSecurity(
                                             tls=client_tls(pki, None, trust=rogue)))
            with pytest.raises(TlsHandshakeFailedError, match=r"TLS handshake with 127\.0\.0\.1"):
                await client.send(vote_request(2))
            await client.close()

    run(main())


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
def test_a_listener_requiring_certificates_drops_clients_without_a_trusted_one(
    pki: dev_pki.Pki, rogue: dev_pki.Pki, who: str,
) -> None:
    async def main() -> None:
        seen.clear()
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       tls=server_tls(pki, "required")) as server:
            context = client_tls(pki, None) if who == "no certificate" else client_tls(
                rogue, "alice", trust=pki)
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=3000,
                                         security=ConnectionSecurity(tls=context))
            with pytest.raises(TransportError):
                await client.send(vote_request(2))
            assert seen == []
            await client.close()

    run(main())


def test_a_plaintext_client_gets_nothing_from_a_tls_listener(pki: dev_pki.Pki) -> None:
    async def main() -> None:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       tls=server_tls(pki, "none")) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=2000)
            with pytest.raises(TransportError):
                await client.send(vote_request(2))
            await client.close()

    run(main())


def test_an_unmapped_certificate_fails_authentication(pki: dev_pki.Pki) -> None:
    strict = PrincipalMapper.parse("RULE:^CN=([^,]*),OU=admins,.*$/$1/")  # no DEFAULT

    async def main() -> None:
        seen.clear()
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "required"),
            tls_principal=functools.partial(peer_principal, mapper=strict),
        ) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=3000,
                                         security=ConnectionSecurity(tls=client_tls(pki, "alice")))
            with pytest.raises(TransportError):
                await client.send(vote_request(2))
            assert seen == [] and server.failed_authentications == 1
            await client.close()

    run(main())


def test_sasl_ssl_names_the_client_by_its_login(pki: dev_pki.Pki) -> None:
    async def main() -> None:
        seen.clear()
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who}, authenticator=_plain,
                                       tls=server_tls(pki, "none")) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, security=ConnectionSecurity(
                sasl=SaslCredentials(PLAIN, "alice", "alice-secret"), tls=client_tls(pki, None)))
            assert client.security.protocol == "SASL_SSL"
            await client.send(vote_request(2))
            assert seen == ["alice"]
            await client.close()

    run(main())


# --- the handshake, from accept to application data ------------------------------------------


async def _until(predicate: Any, what: str) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("who", ["untrusted certificate", "no certificate", "plaintext request"])
def test_a_failed_handshake_is_a_counted_and_logged_failed_authentication(
    pki: dev_pki.Pki, rogue: dev_pki.Pki, who: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka counts an SSL handshake failure in failed-authentication-total
    and logs "Failed authentication ... (SSL handshake failed)"; the
    listener keeps serving good clients."""
    async def main() -> None:
        seen.clear()
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "required"),
            tls_principal=functools.partial(peer_principal, mapper=MAPPER),
        ) as server:
            if who == "plaintext request":
                bad = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=3000)
            else:
                context = client_tls(rogue, "alice", trust=pki) if who == "untrusted certificate" \
                    else client_tls(pki, None)
                bad = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=3000,
                                          security=ConnectionSecurity(tls=context))
            with pytest.raises(TransportError):
                await bad.send(vote_request(2))
            await bad.close()
            await _until(lambda: server.failed_handshakes == 1, "the failure to be counted")
            assert server.failed_authentications == 1 and server.authentications == 0
            await _until(lambda: not server._connections, "the connection to be dropped")
            good = KafkaProtocolClient("127.0.0.1", server.port, security=ConnectionSecurity(
                tls=client_tls(pki, "alice")))
            await good.send(vote_request(2))
            assert seen == ["alice"] and server.authentications == 1
            assert server.failed_authentications == 1
            await good.close()

    with caplog.at_level("INFO", logger="raftlog.net.server"):
        run(main())
    failures = [r.getMessage() for r in caplog.records if "SSL handshake failed" in r.getMessage()]
    assert len(failures) == 1, caplog.text
    assert "failed authentication with ('127.0.0.1'" in failures[0]


def test_a_peer_that_leaves_mid_handshake_is_not_a_failed_authentication(
    pki: dev_pki.Pki,
) -> None:
    """A port probe (connect, close) or a reset is a disconnect, as in Kafka,
    not an authentication failure; its connection is released."""
    async def main() -> None:
        quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=1))
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "none"),
                                       connection_quotas=quotas) as server:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await _until(lambda: quotas.open == 1, "the probe to be counted")
            writer.close()
            await _until(lambda: quotas.open == 0, "the probe's connection to be released")
            assert server.failed_authentications == 0 and not server._connections

    run(main())


def test_a_tls_connection_counts_against_the_limits_from_accept(pki: dev_pki.Pki) -> None:
    """max.connections.per.ip counts a connection when it is accepted, before
    its handshake: a peer holding connections open without ever handshaking
    cannot get past the limit."""
    async def main() -> None:
        quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=1))
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "none"),
                                       connection_quotas=quotas) as server:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)  # silent
            await _until(lambda: quotas.open == 1, "the silent connection to be counted")
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=2000,
                                         security=ConnectionSecurity(tls=client_tls(pki, None)))
            with pytest.raises(TransportError):
                await client.send(vote_request(2))
            await client.close()
            assert quotas.refused >= 1
            writer.close()
            await _until(lambda: quotas.open == 0, "the silent connection to be released")
            client = KafkaProtocolClient("127.0.0.1", server.port,
                                         security=ConnectionSecurity(tls=client_tls(pki, None)))
            await client.send(vote_request(2))  # served once the slot is free
            await client.close()

    run(main())


def test_a_tls_connection_waits_its_creation_rate_turn_then_is_served(
    pki: dev_pki.Pki,
) -> None:
    """KIP-612: a TLS connection the creation rates hold back handshakes,
    but its requests are taken only once its wait is over; the next one,
    not held back, is served at once."""
    waits = iter([400, 0])

    async def main() -> None:
        seen.clear()
        quotas = ConnectionQuotas(ConnectionLimits(idle_ms=-1))
        quotas.creation_throttle = lambda listener: next(waits)
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "none"),
                                       connection_quotas=quotas) as server:
            loop = asyncio.get_running_loop()
            for least_s, most_s in ((0.35, 5.0), (0.0, 0.3)):
                client = KafkaProtocolClient(
                    "127.0.0.1", server.port, request_timeout_ms=5000,
                    security=ConnectionSecurity(tls=client_tls(pki, None)))
                started = loop.time()
                await client.send(vote_request(2))
                took = loop.time() - started
                assert least_s <= took < most_s, took
                await client.send(vote_request(2))  # and it stays served
                await client.close()
            assert seen == ["ANONYMOUS"] * 4

    run(main())


def test_closing_the_listener_drops_connections_mid_handshake(pki: dev_pki.Pki) -> None:
    async def main() -> None:
        server = KafkaProtocolServer("127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "none"))
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await _until(lambda: len(server._connections) == 1, "the connection to be accepted")
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        assert server.failed_authentications == 0
        writer.close()

    run(main())


def _client_hello(pki: dev_pki.Pki) -> bytes:
    """A real ClientHello, as the first flight of a client trusting ``pki``."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_tls(pki, None).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("close", ["eof", "reset"])
def test_a_client_hello_then_a_close_leaves_no_error_behind(
    pki: dev_pki.Pki, close: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer that sends its first flight and goes at once (a killed client,
    a cut link) can close the connection before the TLS layer takes it
    over: the layer must not then write to the closed transport (uvloop
    logged "Exception in callback SSLProtocol.connection_made ... the
    handler is closed"), and the connection is released."""
    hello = _client_hello(pki)

    async def main() -> None:
        quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=100))
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who}, tls=server_tls(pki, "none"),
                                       connection_quotas=quotas) as server:
            for _ in range(20):
                sock = socket.create_connection(("127.0.0.1", server.port))
                if close == "reset":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
                sock.sendall(hello)
                sock.close()
            await _until(lambda: quotas.open == 0 and not server._connections,
                         "every connection to be released")
            await asyncio.sleep(0.1)  # any callback left over would run now
            assert server.failed_authentications == 0
            good = KafkaProtocolClient("127.0.0.1", server.port, security=ConnectionSecurity(
                tls=client_tls(pki, None)))
            await good.send(vote_request(2))
            await good.close()

    with caplog.at_level("DEBUG"):
        run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_a_peer_that_closes_after_the_server_hello_is_not_a_failed_authentication(
    pki: dev_pki.Pki,
) -> None:
    """EOF in the middle of a handshake (a killed client, a cut link) is a
    disconnect, as in Kafka, even once the TLS layer is talking."""
    hello = _client_hello(pki)

    async def main() -> None:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       tls=server_tls(pki, "none")) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(hello)
            assert await asyncio.wait_for(reader.read(1), 5)  # the ServerHello has come
            writer.close()
            await _until(lambda: not server._connections, "the connection to be dropped")
            assert server.failed_authentications == 0 and server.failed_handshakes == 0

    run(main())


def test_a_connect_given_up_as_the_peer_closes_leaves_no_error_behind(
    pki: dev_pki.Pki, caplog: pytest.LogCaptureFixture,
) -> None:
    """A TLS connect cancelled (a fetcher stopped, a deadline) in the loop
    turn its peer closed the half-made connection: with
    ``create_connection(ssl=...)`` uvloop then set the failure on a waiter
    nobody awaited, logged as "Future exception was never retrieved" (a
    chaos TLS smoke failed on it; about 3 in 100 of these attempts showed
    it). The peer here accepts and closes at once, and pokes a control
    connection whose arrival cancels the connect: the two land in one turn
    often enough."""
    listener = socket.create_server(("127.0.0.1", 0))
    control = socket.create_server(("127.0.0.1", 0))
    attempts = 600

    def peer() -> None:
        poke, _ = control.accept()
        with poke:
            for _ in range(attempts):
                conn, _ = listener.accept()
                conn.close()
                poke.send(b"x")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        connecting: list[asyncio.Task[Any]] = []

        class Canceller(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                if connecting and not connecting[-1].done():
                    connecting[-1].cancel()

        control_link, _ = await loop.create_connection(
            Canceller, "127.0.0.1", control.getsockname()[1])
        outcomes: set[str] = set()
        for _ in range(attempts):
            client = KafkaProtocolClient(
                "127.0.0.1", listener.getsockname()[1], request_timeout_ms=5000,
                security=ConnectionSecurity(tls=client_tls(pki, None)))
            connecting.append(loop.create_task(client.send(vote_request(2))))
            try:
                await connecting[-1]
            except (asyncio.CancelledError, TransportError) as exc:
                outcomes.add(type(exc).__name__)
            await client.close()
        control_link.close()
        assert "CancelledError" in outcomes  # the race was really run
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0.05)

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    try:
        with caplog.at_level("DEBUG"):
            run(main())
    finally:
        listener.close()
        control.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors[:3]]
