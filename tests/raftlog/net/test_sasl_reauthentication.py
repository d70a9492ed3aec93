"""KIP-368 re-authentication on a SASL connection (sans-I/O): the session
length a login is told, a new login on the same connection, and a
connection closed when its session ended without one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v0 import request as auth_v0_req
from kio.schema.sasl_authenticate.v0 import response as auth_v0_resp
from kio.schema.sasl_authenticate.v1 import request as auth_req
from kio.schema.sasl_authenticate.v1 import response as auth_resp
from kio.schema.sasl_handshake.v1 import request as handshake_req
from kio.schema.sasl_handshake.v1 import response as handshake_resp
from net_messages import metadata_request, vote_request, vote_response

from raftlog.net import ConnectionSecurity, KafkaProtocolClient, KafkaProtocolServer
from raftlog.net.codec import decode_response, encode_request
from raftlog.net.connection import (
    ImmediateResponse,
    IncomingRequest,
    ProtocolViolation,
    ServerConnection,
    validate_supported,
)
from raftlog.net.errors import DisconnectedError, SessionExpiredError
from raftlog.net.sasl import SaslServerAuthenticator
from raftlog.security.oauthbearer import BearerToken, oauthbearer_server
from raftlog.security.sasl import OAUTHBEARER, PLAIN, SaslCredentials, plain_server

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SUPPORTED = validate_supported({3: (0, 12)}, {3})
ALICE = b"\0alice\0alice-secret"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def connection(clock: Clock, max_reauth_ms: int = 0, **mechanisms: Any) -> ServerConnection:
    factories = mechanisms or {PLAIN: lambda: plain_server(USERS)}
    return ServerConnection(SUPPORTED, authenticator=SaslServerAuthenticator(
        factories, 0, max_reauth_ms={m: max_reauth_ms for m in factories},
        wall_ms=clock, monotonic_ms=clock))


def only(events: list[Any]) -> Any:
    assert len(events) == 1, events
    return events[0]


def send(conn: ServerConnection, request: Any, correlation_id: int) -> Any:
    return only(conn.receive_data(encode_request(request, correlation_id, "t")))


def body(event: ImmediateResponse, cls: type) -> Any:
    return decode_response(event.data[4:], cls)[1]


def login(conn: ServerConnection, token: bytes = ALICE, mechanism: str = PLAIN,
          correlation_id: int = 1) -> tuple[ImmediateResponse, Any]:
    shake = send(conn, handshake_req.SaslHandshakeRequest(mechanism=mechanism), correlation_id)
    assert isinstance(shake, ImmediateResponse)
    handshake = body(shake, handshake_resp.SaslHandshakeResponse)
    if handshake.error_code != ErrorCode.none:
        return shake, handshake
    event = send(conn, auth_req.SaslAuthenticateRequest(auth_bytes=token), correlation_id + 1)
    assert isinstance(event, ImmediateResponse)
    return event, body(event, auth_resp.SaslAuthenticateResponse)


def logged_in(max_reauth_ms: int = 5000) -> tuple[Clock, ServerConnection]:
    """A connection where alice logged in with PLAIN, sessions of ``max_reauth_ms``."""
    clock = Clock()
    conn = connection(clock, max_reauth_ms=max_reauth_ms)
    login(conn)
    return clock, conn


def lifetime_ms(answer: Any) -> int:
    return int(answer.session_lifetime.total_seconds() * 1000)


def metadata(conn: ServerConnection, correlation_id: int = 9) -> Any:
    return send(conn, metadata_request(12), correlation_id)


def test_without_connections_max_reauth_ms_a_session_does_not_end() -> None:
    clock = Clock()
    conn = connection(clock)
    _, answer = login(conn)
    assert answer.error_code == ErrorCode.none and lifetime_ms(answer) == 0
    clock.ms += 10**9
    assert isinstance(metadata(conn), IncomingRequest)
    # And a second handshake is not a re-authentication (Kafka: ILLEGAL_SASL_STATE).
    _, again = login(conn, correlation_id=20)
    assert again.error_code == ErrorCode.illegal_sasl_state


def test_the_session_lasts_connections_max_reauth_ms_and_a_new_login_renews_it() -> None:
    clock = Clock()
    conn = connection(clock, max_reauth_ms=5000)
    _, answer = login(conn)
    assert lifetime_ms(answer) == 5000
    clock.ms += 4000
    assert isinstance(metadata(conn), IncomingRequest)
    event, answer = login(conn, correlation_id=10)  # KIP-368: log in again, same connection
    assert answer.error_code == ErrorCode.none and lifetime_ms(answer) == 5000
    assert not event.close and conn.user == "alice" and conn.reauthentications == 1
    clock.ms += 4000  # 8 s after the first login, 4 s into the new session
    assert isinstance(metadata(conn), IncomingRequest)


def test_a_request_after_the_session_ended_closes_the_connection() -> None:
    clock, conn = logged_in()
    clock.ms += 5000
    violation = metadata(conn)
    assert isinstance(violation, ProtocolViolation)
    assert isinstance(violation.error, SessionExpiredError)
    assert "alice" in str(violation.error)


def test_a_late_re_authentication_is_still_accepted() -> None:
    """Once the session ended, a re-authentication may still come (Kafka
    closes the connection only on another request)."""
    clock, conn = logged_in()
    clock.ms += 6000
    _, answer = login(conn, correlation_id=10)
    assert answer.error_code == ErrorCode.none
    assert isinstance(metadata(conn), IncomingRequest)


def test_re_authentication_must_keep_the_principal() -> None:
    clock, conn = logged_in()
    clock.ms += 2000
    event, answer = login(conn, b"\0bob\0bob-secret", correlation_id=10)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert answer.error_message == \
        "Cannot change principals during re-authentication from User:alice: User:bob"
    assert event.close


def test_a_wrong_password_on_re_authentication_closes_the_connection() -> None:
    clock, conn = logged_in()
    clock.ms += 2000
    event, answer = login(conn, b"\0alice\0guess", correlation_id=10)
    assert answer.error_code == ErrorCode.sasl_authentication_failed and event.close


def test_at_most_one_re_authentication_a_second() -> None:
    clock, conn = logged_in()
    clock.ms += 1000
    assert login(conn, correlation_id=10)[1].error_code == ErrorCode.none
    clock.ms += 999
    assert login(conn, correlation_id=20)[1].error_code == ErrorCode.illegal_sasl_state
    clock.ms += 1
    assert login(conn, correlation_id=30)[1].error_code == ErrorCode.none
    assert conn.reauthentications == 2


def test_a_client_that_logged_in_with_v0_cannot_re_authenticate_and_is_closed_at_expiry() -> None:
    clock = Clock()
    conn = connection(clock, max_reauth_ms=5000)
    assert send(conn, handshake_req.SaslHandshakeRequest(mechanism=PLAIN), 1).data
    event = send(conn, auth_v0_req.SaslAuthenticateRequest(auth_bytes=ALICE), 2)
    assert body(event, auth_v0_resp.SaslAuthenticateResponse).error_code == ErrorCode.none
    clock.ms += 2000
    assert login(conn, correlation_id=10)[1].error_code == ErrorCode.illegal_sasl_state
    clock.ms += 3000
    assert isinstance(metadata(conn), ProtocolViolation)


def _token_server(expiry_ms: int) -> Any:
    def validate(value: str) -> BearerToken:
        return BearerToken(value=value, principal="alice", scope=frozenset(),
                           lifetime_ms=expiry_ms, start_ms=None)
    return oauthbearer_server(validate)


def _bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


@pytest.mark.parametrize(("max_reauth_ms", "expected_ms"), [(0, 3000), (60_000, 3000),
                                                              (1000, 1000)])
def test_an_oauthbearer_session_ends_when_its_token_does(max_reauth_ms: int,
                                                         expected_ms: int) -> None:
    """Kafka's rule: the least of connections.max.reauth.ms (when set) and the
    token's remaining life, even with connections.max.reauth.ms at 0."""
    clock = Clock()
    conn = connection(clock, max_reauth_ms,
                      **{OAUTHBEARER: lambda: _token_server(clock.ms + 3000)})
    _, answer = login(conn, _bearer("a.b.c"), OAUTHBEARER)
    assert answer.error_code == ErrorCode.none and lifetime_ms(answer) == expected_ms
    clock.ms += expected_ms
    assert isinstance(metadata(conn), ProtocolViolation)


def test_re_authentication_must_keep_the_mechanism() -> None:
    clock = Clock()
    conn = connection(clock, 5000, **{PLAIN: lambda: plain_server(USERS),
                                      OAUTHBEARER: lambda: _token_server(clock.ms + 60_000)})
    login(conn)
    clock.ms += 2000
    event, answer = login(conn, _bearer("a.b.c"), OAUTHBEARER, correlation_id=10)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert answer.error_message == \
        "Cannot change mechanisms during re-authentication from PLAIN: OAUTHBEARER"
    assert event.close


# --- over loopback: raftlog's own client against a listener whose sessions end -------------


@pytest.fixture
def replaced_at_85_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client replaces its connection at 85% of the session, the low end
    of its random range, so the tests know when (and a busy machine's stalls
    stay clear of the session's end)."""
    import raftlog.net.client

    monkeypatch.setattr(raftlog.net.client.random, "uniform", lambda low, high: low)


async def _vote(context: Any, body: Any) -> Any:
    return vote_response(context.api_version)


def _listener(users: dict[str, str], max_reauth_ms: int) -> KafkaProtocolServer:
    """A SASL PLAIN listener answering Vote, whose sessions last ``max_reauth_ms``."""
    return KafkaProtocolServer(
        "127.0.0.1", 0, {52: _vote},
        authenticator=lambda: SaslServerAuthenticator(
            {PLAIN: lambda: plain_server(users)}, 0, max_reauth_ms={PLAIN: max_reauth_ms}))


def _alice(server: KafkaProtocolServer) -> KafkaProtocolClient:
    return KafkaProtocolClient("127.0.0.1", server.port, security=ConnectionSecurity(
        sasl=SaslCredentials(PLAIN, "alice", "alice-secret")))


@pytest.mark.usefixtures("replaced_at_85_percent")
def test_raftlog_clients_move_to_a_new_connection_before_their_session_ends() -> None:
    """Nodes are clients of each other (followers' fetches): with
    connections.max.reauth.ms on a listener, a client's session is replaced
    before it ends, so no request meets an ended session and none fails."""
    async def main() -> None:
        async with _listener(USERS, 400) as server:
            client = _alice(server)
            sent = 0
            stop = time.monotonic() + 1.6
            while time.monotonic() < stop:  # four sessions' worth, every answer awaited
                await asyncio.gather(*(client.send(vote_request(2)) for _ in range(3)))
                sent += 3
                await asyncio.sleep(0.01)
            await client.close()
            assert sent > 100
            # One login per 340 ms: the first and four replacements.
            assert 4 <= server.authentications <= 6, server.authentications
            assert server.failed_authentications == 0

    asyncio.run(asyncio.wait_for(main(), 20))


@pytest.mark.usefixtures("replaced_at_85_percent")
def test_a_client_that_cannot_log_in_again_keeps_its_connection_until_the_session_ends() -> None:
    """The replacement login fails (the password changed): requests go on
    over the old connection, until the broker closes it at the session's end."""
    users = dict(USERS)

    async def main() -> None:
        async with _listener(users, 1000) as server:
            client = _alice(server)
            await client.send(vote_request(2))
            started = time.monotonic()  # the login came before this answer
            users["alice"] = "rotated"
            await asyncio.sleep(0.9 - (time.monotonic() - started))  # past 85%, before 100%
            await client.send(vote_request(2))  # the replacement fails; the old link serves
            assert server.failed_authentications == 1
            await asyncio.sleep(1.2 - (time.monotonic() - started))  # the session has ended
            with pytest.raises(DisconnectedError):
                await client.send(vote_request(2))
            await client.close()

    asyncio.run(asyncio.wait_for(main(), 20))
