"""SASL on the Kafka-protocol transport: the connection's authentication
state machine (sans-I/O) and the server and client shells over loopback."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v1 import request as auth_req
from kio.schema.sasl_authenticate.v1 import response as auth_resp
from kio.schema.sasl_handshake.v0 import request as handshake_v0_req
from kio.schema.sasl_handshake.v1 import request as handshake_req
from kio.schema.sasl_handshake.v1 import response as handshake_resp
from net_messages import metadata_request, vote_request, vote_response

from raftlog.net import (
    ConnectionSecurity,
    KafkaProtocolClient,
    KafkaProtocolServer,
    RequestContext,
    registry,
)
from raftlog.net.codec import decode_response, encode_request
from raftlog.net.connection import (
    ImmediateResponse,
    IncomingRequest,
    ProtocolViolation,
    ServerConnection,
    validate_supported,
)
from raftlog.net.errors import SaslAuthenticationFailedError
from raftlog.net.sasl import ANONYMOUS, SaslServerAuthenticator
from raftlog.security.sasl import (
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslCredentials,
    plain_server,
    scram_server,
)
from raftlog.security.scram import credential_from_password

USERS = {"alice": "alice-secret", "admin": "admin-secret"}
SCRAM = {(m, "bob"): credential_from_password(m, "bob-secret", 4096)
         for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def authenticator(delay_ms: int = 0) -> SaslServerAuthenticator:
    return SaslServerAuthenticator({
        PLAIN: lambda: plain_server(USERS),
        SCRAM_SHA_256: lambda: scram_server(SCRAM_SHA_256, lambda u: SCRAM.get((SCRAM_SHA_256, u))),
        SCRAM_SHA_512: lambda: scram_server(SCRAM_SHA_512, lambda u: SCRAM.get((SCRAM_SHA_512, u))),
    }, delay_ms)


SUPPORTED = validate_supported({3: (0, 12), 52: (0, 2)}, {3, 52})


def connection(delay_ms: int = 0) -> ServerConnection:
    return ServerConnection(SUPPORTED, authenticator=authenticator(delay_ms))


def only(events: list[Any]) -> Any:
    assert len(events) == 1, events
    return events[0]


def answer(event: ImmediateResponse, cls: type) -> Any:
    _, body = decode_response(event.data[4:], cls)  # without the size prefix
    return body


def handshake(conn: ServerConnection, mechanism: str, correlation_id: int = 1) -> Any:
    event = only(conn.receive_data(encode_request(
        handshake_req.SaslHandshakeRequest(mechanism=mechanism), correlation_id, "t")))
    assert isinstance(event, ImmediateResponse)
    return event


def authenticate(conn: ServerConnection, token: bytes, correlation_id: int = 2) -> ImmediateResponse:
    event = only(conn.receive_data(encode_request(
        auth_req.SaslAuthenticateRequest(auth_bytes=token), correlation_id, "t")))
    assert isinstance(event, ImmediateResponse)
    return event


def test_plain_login_then_requests_are_served_as_the_user() -> None:
    conn = connection()
    assert not conn.authenticated and conn.user == ""
    event = handshake(conn, PLAIN)
    body = answer(event, handshake_resp.SaslHandshakeResponse)
    assert body.error_code == ErrorCode.none
    assert body.mechanisms == (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
    event = authenticate(conn, b"\0alice\0alice-secret")
    assert not event.close
    assert answer(event, auth_resp.SaslAuthenticateResponse).error_code == ErrorCode.none
    assert conn.authenticated and conn.user == "alice"
    request = only(conn.receive_data(encode_request(metadata_request(12), 3, "t")))
    assert isinstance(request, IncomingRequest) and request.header.api_key == 3


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_login_takes_two_rounds(mechanism: str) -> None:
    from raftlog.security.sasl import sasl_client

    conn = connection()
    handshake(conn, mechanism)
    client = sasl_client(SaslCredentials(mechanism, "bob", "bob-secret"))
    first = authenticate(conn, client.initial())
    assert not conn.authenticated
    final = authenticate(conn, client.evaluate(
        answer(first, auth_resp.SaslAuthenticateResponse).auth_bytes), 3)
    body = answer(final, auth_resp.SaslAuthenticateResponse)
    assert body.error_code == ErrorCode.none
    assert client.evaluate(body.auth_bytes) == b"" and client.complete  # server signature checked
    assert conn.authenticated and conn.user == "bob"


def test_wrong_password_is_answered_then_the_connection_closes_after_the_delay() -> None:
    conn = connection(delay_ms=250)
    handshake(conn, PLAIN)
    event = authenticate(conn, b"\0alice\0guess")
    assert event.close and event.delay_ms == 250
    body = answer(event, auth_resp.SaslAuthenticateResponse)
    assert body.error_code == ErrorCode.sasl_authentication_failed
    assert body.error_message == "Authentication failed: Invalid username or password"
    assert not conn.authenticated
    # Anything after a failure breaks the protocol.
    assert isinstance(only(conn.receive_data(encode_request(metadata_request(12), 3, "t"))),
                      ProtocolViolation)


def test_an_unknown_mechanism_is_refused_with_the_enabled_list() -> None:
    conn = connection()
    event = handshake(conn, "GSSAPI")
    assert event.close
    body = answer(event, handshake_resp.SaslHandshakeResponse)
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism
    assert body.mechanisms == (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)


@pytest.mark.parametrize("first", [
    lambda: encode_request(metadata_request(12), 1, "t"),          # another API
    lambda: encode_request(vote_request(2), 1, "t"),
    lambda: encode_request(auth_req.SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), 1, "t"),
])
def test_requests_before_the_handshake_close_the_connection(first: Any) -> None:
    conn = connection()
    assert isinstance(only(conn.receive_data(first())), ProtocolViolation)
    assert not conn.authenticated


def test_api_versions_is_answered_before_authentication_and_lists_the_sasl_apis() -> None:
    from raftlog.net.api_versions import api_versions_request, decode_api_versions_response

    conn = connection()
    event = only(conn.receive_data(encode_request(api_versions_request(3, "t", "1"), 7, "t")))
    assert isinstance(event, ImmediateResponse)
    _, body = decode_api_versions_response(event.data[4:], 3)
    keys = {int(k.api_key) for k in body.api_keys}
    assert {17, 36, 18, 3, 52} <= keys
    assert not conn.authenticated


def test_a_second_handshake_during_authentication_closes_the_connection() -> None:
    conn = connection()
    handshake(conn, PLAIN)
    assert isinstance(only(conn.receive_data(encode_request(
        handshake_req.SaslHandshakeRequest(mechanism=PLAIN), 2, "t"))), ProtocolViolation)


def test_v0_handshake_takes_bare_tokens() -> None:
    conn = connection()
    event = only(conn.receive_data(encode_request(
        handshake_v0_req.SaslHandshakeRequest(mechanism=PLAIN), 1, "t")))
    assert isinstance(event, ImmediateResponse) and not event.close
    token = b"\0admin\0admin-secret"
    reply = only(conn.receive_data(struct.pack(">i", len(token)) + token))
    assert isinstance(reply, ImmediateResponse)
    assert reply.data == b"\0\0\0\0"  # the mechanism's (empty) reply, size-prefixed
    assert conn.authenticated and conn.user == "admin"


def test_v0_bad_token_closes_without_an_answer() -> None:
    conn = connection(delay_ms=5)
    only(conn.receive_data(encode_request(
        handshake_v0_req.SaslHandshakeRequest(mechanism=PLAIN), 1, "t")))
    token = b"\0admin\0nope"
    reply = only(conn.receive_data(struct.pack(">i", len(token)) + token))
    assert isinstance(reply, ImmediateResponse) and reply.close and reply.data == b""


@pytest.mark.parametrize("sasl", [True, False])
def test_sasl_apis_after_authentication_or_on_plaintext_are_an_illegal_state(sasl: bool) -> None:
    conn = connection() if sasl else ServerConnection(SUPPORTED)
    if sasl:
        handshake(conn, PLAIN)
        authenticate(conn, b"\0alice\0alice-secret")
    assert conn.user == ("alice" if sasl else ANONYMOUS)
    event = handshake(conn, PLAIN, 9)
    assert not event.close
    assert answer(event, handshake_resp.SaslHandshakeResponse).error_code == \
        ErrorCode.illegal_sasl_state
    event = authenticate(conn, b"\0alice\0alice-secret", 10)
    body = answer(event, auth_resp.SaslAuthenticateResponse)
    assert body.error_code == ErrorCode.illegal_sasl_state
    assert body.error_message == "SaslAuthenticate request received after successful authentication"


def test_frames_in_one_chunk_after_the_completing_token_are_served() -> None:
    conn = connection()
    handshake(conn, PLAIN)
    data = (encode_request(auth_req.SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"),
                           2, "t") + encode_request(metadata_request(12), 3, "t"))
    first, second = conn.receive_data(data)
    assert isinstance(first, ImmediateResponse) and isinstance(second, IncomingRequest)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=4), st.sampled_from([None, PLAIN, SCRAM_SHA_256]))
def test_hostile_bytes_before_authentication_never_authenticate_or_raise(
    frames: list[bytes], mechanism: str | None,
) -> None:
    conn = connection()
    if mechanism is not None:
        handshake(conn, mechanism)
    for frame in frames:
        for event in conn.receive_data(struct.pack(">i", len(frame)) + frame):
            assert isinstance(event, ImmediateResponse | ProtocolViolation)
    assert not conn.authenticated


# --- the shells over loopback ---------------------------------------------------


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


seen: list[str] = []  # each request's RequestContext.user, in order


async def _who(context: RequestContext, body: Any) -> Any:
    seen.append(context.user)
    return vote_response(context.api_version)


@pytest.mark.parametrize("mechanism,user,password", [
    (PLAIN, "alice", "alice-secret"),
    (SCRAM_SHA_256, "bob", "bob-secret"),
    (SCRAM_SHA_512, "bob", "bob-secret"),
])
def test_client_authenticates_and_handlers_see_the_user(
    mechanism: str, user: str, password: str,
) -> None:
    async def main() -> None:
        seen.clear()
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       authenticator=authenticator) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port,
                                         security=ConnectionSecurity(
                                             sasl=SaslCredentials(mechanism, user, password)))
            await client.send(vote_request(2))
            await client.send(vote_request(2))  # same connection, authenticated once
            assert seen == [user, user]
            assert server.authentications == 1 and server.failed_authentications == 0
            await client.close()

    run(main())


def test_client_without_credentials_is_cut_off_by_a_sasl_listener() -> None:
    async def main() -> None:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who},
                                       authenticator=authenticator) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port, request_timeout_ms=2000)
            with pytest.raises(Exception) as info:
                await client.send(vote_request(2))
            assert "closed" in str(info.value) or "Disconnected" in type(info.value).__name__
            await client.close()

    run(main())


def test_wrong_password_fails_after_the_failure_delay() -> None:
    async def main() -> None:
        async with KafkaProtocolServer(
            "127.0.0.1", 0, {52: _who}, authenticator=lambda: authenticator(300),
        ) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port,
                                         security=ConnectionSecurity(
                                             sasl=SaslCredentials(PLAIN, "alice", "wrong")))
            started = time.monotonic()
            with pytest.raises(SaslAuthenticationFailedError) as info:
                await client.send(vote_request(2))
            assert time.monotonic() - started >= 0.3
            assert "Invalid username or password" in str(info.value)
            assert server.failed_authentications == 1
            await client.close()

    run(main())


def test_a_plaintext_listener_refuses_a_sasl_client() -> None:
    async def main() -> None:
        async with KafkaProtocolServer("127.0.0.1", 0, {52: _who}) as server:
            client = KafkaProtocolClient("127.0.0.1", server.port,
                                         security=ConnectionSecurity(
                                             sasl=SaslCredentials(PLAIN, "alice", "alice-secret")))
            with pytest.raises(SaslAuthenticationFailedError, match=r"ILLEGAL_SASL_STATE|illegal"):
                await client.send(vote_request(2))
            await client.close()

    run(main())


def test_registry_knows_the_sasl_apis() -> None:
    assert registry.kio_version_range(17) == (0, 1)
    assert registry.kio_version_range(36) == (0, 2)


def test_before_login_frames_are_bounded_by_the_sasl_receive_size() -> None:
    limited = ServerConnection(SUPPORTED, max_request_bytes=10_000_000,
                               authenticator=SaslServerAuthenticator(
                                   {PLAIN: lambda: plain_server(USERS)}, 0, max_receive_bytes=1024))
    # A 2 KiB frame before login: the size prefix alone closes the connection.
    event = only(limited.receive_data(struct.pack(">i", 2048)))
    assert isinstance(event, ProtocolViolation)
    # After login the listener's own limit applies again.
    conn = ServerConnection(SUPPORTED, max_request_bytes=10_000_000,
                            authenticator=SaslServerAuthenticator(
                                {PLAIN: lambda: plain_server(USERS)}, 0, max_receive_bytes=1024))
    handshake(conn, PLAIN)
    authenticate(conn, b"\0alice\0alice-secret")
    big = encode_request(vote_request(2), 5, "x" * 3000)
    assert isinstance(only(conn.receive_data(big)), IncomingRequest)
