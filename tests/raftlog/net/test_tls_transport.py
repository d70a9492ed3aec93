"""The transport shells over TLS, on loopback: a TLS listener
(`KafkaProtocolServer(tls=...)`) and `KafkaProtocolClient` with a TLS
`ConnectionSecurity`. Handlers see the user the listener names: the mapped
certificate subject on SSL, ANONYMOUS without a certificate, the SASL login
on SASL_SSL. A client that cannot verify the server fails at once with
TlsHandshakeFailedError; one the server refuses is disconnected."""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Awaitable
from typing import Any

import pytest
import tls_pki
from net_messages import vote_request, vote_response

from raftlog.net import ConnectionSecurity, KafkaProtocolClient, KafkaProtocolServer, RequestContext
from raftlog.net.errors import TlsHandshakeFailedError, TransportError
from raftlog.net.sasl import SaslServerAuthenticator
from raftlog.security.sasl import PLAIN, SaslCredentials, plain_server
from raftlog.security.tls import (
    PrincipalMapper,
    TlsSettings,
    client_context,
    peer_principal,
    server_context,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tls_pki.Pki:
    return tls_pki.make_pki(tmp_path_factory.mktemp("pki"), servers=("broker",),
                            clients=("alice",))


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> tls_pki.Pki:
    return tls_pki.make_pki(tmp_path_factory.mktemp("rogue"), servers=(), clients=("alice",))


def server_tls(pki: tls_pki.Pki, client_auth: str) -> ssl.SSLContext:
    return server_context(TlsSettings(
        keystore_type="PEM", keystore_location=str(pki.identities["broker"].pem),
        truststore_type="PEM", truststore_location=str(pki.ca_pem), client_auth=client_auth))


def client_tls(pki: tls_pki.Pki, user: str | None, *, trust: tls_pki.Pki | None = None
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


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


@pytest.mark.parametrize("client_auth,user,expected", [
    ("required", "alice", "alice"),
    ("requested", "alice", "alice"),
    ("requested", None, "ANONYMOUS"),
    ("none", "alice", "ANONYMOUS"),  # a certificate not asked for is not sent
])
def test_handlers_see_the_certificates_mapped_subject(
    pki: tls_pki.Pki, client_auth: str, user: str | None, expected: str,
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
    pki: tls_pki.Pki, rogue: tls_pki.Pki,
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
    pki: tls_pki.Pki, rogue: tls_pki.Pki, who: str,
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


def test_a_plaintext_client_gets_nothing_from_a_tls_listener(pki: tls_pki.Pki) -> None:
    async def main() -> None:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       tls=server_tls(pki, "none")) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=2000)
            with pytest.raises(TransportError):
                await client.send(vote_request(2))
            await client.close()

    run(main())


def test_an_unmapped_certificate_fails_authentication(pki: tls_pki.Pki) -> None:
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


def test_sasl_ssl_names_the_client_by_its_login(pki: tls_pki.Pki) -> None:
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
