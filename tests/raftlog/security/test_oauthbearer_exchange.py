"""SASL/OAUTHBEARER, the RFC 7628 exchange
(raftlog.security.oauthbearer.exchange) with Kafka's unsecured tokens: the
client's message, the server's JSON error challenge and the client's
acknowledgement, steps out of order, and fuzzing with hostile messages; and
the names Kafka uses. Every time is passed in: nothing reads a clock."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oauthbearer_helpers import ALICE, NOW_MS
from sasl_exchange import run

from raftlog.security.oauthbearer import (
    JWT_VALIDATOR_SETTINGS,
    LOGIN_MODULE,
    OAUTHBEARER,
    VALIDATOR_HANDLERS,
    BearerToken,
    UnsecuredLogin,
    UnsecuredValidator,
    oauthbearer_client,
    oauthbearer_server,
)
from raftlog.security.sasl import SaslAuthenticationError, SaslServer

GENERIC = ("Authentication failed during authentication due to invalid credentials "
           "with SASL mechanism OAUTHBEARER")


def test_the_names_kafka_uses() -> None:
    assert OAUTHBEARER == "OAUTHBEARER"
    assert LOGIN_MODULE == "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    assert VALIDATOR_HANDLERS[0].endswith("oauthbearer.OAuthBearerValidatorCallbackHandler")
    assert VALIDATOR_HANDLERS[1].endswith("secured.OAuthBearerValidatorCallbackHandler")
    assert len(JWT_VALIDATOR_SETTINGS) == 9
    assert all(s.startswith("sasl.oauthbearer.") for s in JWT_VALIDATOR_SETTINGS)


# --- the exchange -----------------------------------------------------------


def login_token(**options: str) -> BearerToken:
    return UnsecuredLogin.from_jaas({**ALICE, **options}).token(NOW_MS)


def server_at(now_ms: int = NOW_MS, validator: UnsecuredValidator | None = None) -> SaslServer:
    check = validator or UnsecuredValidator()
    return oauthbearer_server(lambda token: check.validate(token, now_ms))


def test_a_valid_token_completes_the_exchange_in_one_round() -> None:
    token = login_token(unsecuredLoginListClaim_scope=" read")
    client = oauthbearer_client(lambda: token)
    server = server_at()
    assert client.mechanism == server.mechanism == OAUTHBEARER
    transcript = run(client, server)
    assert transcript == [f"n,,\x01auth=Bearer {token.value}\x01\x01".encode(), b""]
    assert client.complete and server.complete
    assert server.authorization_id == "alice"
    assert server.token == token  # type: ignore[attr-defined]
    assert server.token.scope == {"read"}  # type: ignore[attr-defined]


def test_extensions_follow_the_token_in_the_client_message_and_the_server_ignores_them() -> None:
    login = UnsecuredLogin.from_jaas({**ALICE, "unsecuredLoginExtension_traceId": "t 1",
                                      "unsecuredLoginExtension_cluster": "lkc-1"})
    token = login.token(NOW_MS)
    client = oauthbearer_client(lambda: token, extensions=login.extensions)
    message = client.initial()
    assert message == (f"n,,\x01auth=Bearer {token.value}\x01traceId=t 1\x01cluster=lkc-1"
                       "\x01\x01").encode()
    server = server_at()
    assert server.evaluate(message) == b""
    assert server.authorization_id == "alice"


def test_the_token_maker_is_called_once_per_exchange() -> None:
    calls: list[int] = []

    def make() -> BearerToken:
        calls.append(1)
        return login_token()

    client = oauthbearer_client(make)
    run(client, server_at())
    assert calls == [1]


@pytest.mark.parametrize("authzid", ["alice", ""])
def test_an_authorization_id_equal_to_the_principal_is_accepted(authzid: str) -> None:
    token = login_token()
    client = oauthbearer_client(lambda: token, authorization_id=authzid)
    first = client.initial()
    assert first.startswith(b"n,a=alice,\x01" if authzid else b"n,,\x01")
    server = server_at()
    assert server.evaluate(first) == b""
    assert client.evaluate(b"") == b""
    assert server.authorization_id == "alice"


def test_the_authorization_id_is_a_saslname_with_comma_and_equals_escaped() -> None:
    token = UnsecuredLogin({"sub": "a,b=c"}).token(NOW_MS)
    client = oauthbearer_client(lambda: token, authorization_id="a,b=c")
    first = client.initial()
    assert first.startswith(b"n,a=a=2Cb=3Dc,\x01")
    server = server_at()
    assert server.evaluate(first) == b""
    assert server.authorization_id == "a,b=c"


def test_an_authorization_id_other_than_the_principal_fails_with_kafkas_message() -> None:
    token = login_token()
    server = server_at()
    with pytest.raises(SaslAuthenticationError) as info:
        run(oauthbearer_client(lambda: token, authorization_id="bob"), server)
    assert str(info.value) == (
        "Authentication failed: Client requested an authorization id (bob) that is different "
        "from the token's principal name (alice)")
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match="state FAILED"):
        server.evaluate(b"\x01")


def test_an_invalid_token_gets_the_json_challenge_then_fails_with_it() -> None:
    token = login_token()
    client = oauthbearer_client(lambda: token)
    server = server_at(now_ms=NOW_MS + 3_600_000)  # on its expiry
    challenge = server.evaluate(client.initial())
    assert challenge == b'{"status":"invalid_token"}'
    assert not server.complete
    acknowledgement = client.evaluate(challenge)
    assert acknowledgement == b"\x01"
    assert not client.complete
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(acknowledgement)
    assert str(info.value) == '{"status":"invalid_token"}'  # what Kafka sends the client
    assert "expired" in info.value.reason
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match="state FAILED"):
        server.evaluate(b"\x01")
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        client.evaluate(b"")  # whatever comes after the error
    with pytest.raises(SaslAuthenticationError, match="state FAILED"):
        client.evaluate(b"")


def test_an_insufficient_scope_challenge_names_the_scope() -> None:
    token = login_token()
    server = server_at(validator=UnsecuredValidator(required_scope=("admin",)))
    assert server.evaluate(oauthbearer_client(lambda: token).initial()) == (
        b'{"status":"insufficient_scope", "scope":"admin"}')
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(b"\x01")
    assert str(info.value) == '{"status":"insufficient_scope", "scope":"admin"}'


@pytest.mark.parametrize("reply", [b"", b"\x01\x01", b"x", b"n,,\x01auth=Bearer a.b.\x01\x01"])
def test_only_a_lone_kvsep_may_follow_the_error_challenge(reply: bytes) -> None:
    server = server_at(now_ms=NOW_MS + 10**9)
    assert server.evaluate(oauthbearer_client(login_token).initial()).startswith(b'{"status"')
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(reply)
    assert str(info.value) == '{"status":"invalid_token"}'
    assert "instead of the %x01" in info.value.reason
    assert not server.complete


def test_a_validator_that_breaks_fails_the_exchange_with_the_cause() -> None:
    def broken(token: str) -> BearerToken:
        raise KeyError("JWKS not loaded")

    server = oauthbearer_server(broken)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(oauthbearer_client(login_token).initial())
    assert str(info.value) == GENERIC
    assert isinstance(info.value.__cause__, KeyError)
    assert not server.complete


def test_the_server_and_client_refuse_steps_out_of_order() -> None:
    server = server_at()
    with pytest.raises(RuntimeError):
        _ = server.authorization_id
    with pytest.raises(RuntimeError):
        _ = server.token  # type: ignore[attr-defined]
    client = oauthbearer_client(login_token)
    with pytest.raises(RuntimeError):
        client.evaluate(b"")
    first = client.initial()
    with pytest.raises(RuntimeError):
        client.initial()
    assert server.evaluate(first) == b""
    assert client.evaluate(b"") == b""
    with pytest.raises(SaslAuthenticationError, match="Sasl server state COMPLETE"):
        server.evaluate(first)
    with pytest.raises(SaslAuthenticationError, match="Sasl client state COMPLETE"):
        client.evaluate(b"")
    assert server.complete and client.complete  # a stray message does not undo it


@pytest.mark.parametrize("kwargs, fragment", [
    ({"extensions": {"auth": "x"}}, "reserved"),
    ({"extensions": {"trace-id": "x"}}, "ASCII letters"),
    ({"extensions": {"x": ""}}, "extension value"),
    ({"extensions": {"x": "a\x01b"}}, "extension value"),
    ({"authorization_id": "a\0b"}, "NUL"),
])
def test_the_client_refuses_what_it_cannot_send(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        oauthbearer_client(login_token, **kwargs)


def test_the_client_refuses_a_token_value_that_is_no_bearer_token() -> None:
    client = oauthbearer_client(lambda: BearerToken("a b\x01", "alice", frozenset(), 0, None))
    with pytest.raises(ValueError, match="bearer token"):
        client.initial()


VALUE = login_token().value


@pytest.mark.parametrize("message", [
    f"n,,\x01auth=bearer {VALUE}\x01\x01",  # the scheme is case-insensitive
    f"n,,\x01auth=BEARER   {VALUE}\x01\x01",
    f"n,,\x01unknown=ext\x01auth=Bearer {VALUE}\x01other=x y\x01\x01",
    f"n,a=alice,\x01auth=Bearer {VALUE}\x01\x01",
])
def test_initial_responses_the_server_accepts(message: str) -> None:
    server = server_at()
    assert server.evaluate(message.encode()) == b""
    assert server.authorization_id == "alice"


@pytest.mark.parametrize("message, fragment", [
    (b"", "must start with 'n,'"),
    (b"\x01", "must start with 'n,'"),
    (f"y,,\x01auth=Bearer {VALUE}\x01\x01".encode(), "must start with 'n,'"),
    (f"p=tls-unique,,\x01auth=Bearer {VALUE}\x01\x01".encode(), "must start with 'n,'"),
    (f"n,\x01auth=Bearer {VALUE}\x01\x01".encode(), "not closed"),
    (f"n,x=alice,\x01auth=Bearer {VALUE}\x01\x01".encode(), "authorization id"),
    (f"n,a=,\x01auth=Bearer {VALUE}\x01\x01".encode(), "authorization id"),
    (f"n,a=al=ice,\x01auth=Bearer {VALUE}\x01\x01".encode(), "authorization id"),
    (f"n,a=al\0ice,\x01auth=Bearer {VALUE}\x01\x01".encode(), "authorization id"),
    (f"n,a=\xff,\x01auth=Bearer {VALUE}\x01\x01".encode("latin-1"), "not UTF-8"),
    (f"n,,auth=Bearer {VALUE}\x01\x01".encode(), "between %x01s"),
    (f"n,,\x01auth=Bearer {VALUE}\x01".encode(), "must end with %x01"),
    (f"n,,\x01auth=Bearer {VALUE}".encode(), "between %x01s"),
    (f"n,,\x01auth=Bearer {VALUE}\x01\x01\x01".encode(), "key=value"),
    (b"n,,\x01\x01", "'auth' not specified"),
    (b"n,,\x01x=y\x01\x01", "'auth' not specified"),
    (b"n,,\x01auth=Basic YWxpY2U6cHc=\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Basic YWxpY2U6cHc\x01\x01", "invalid scheme 'Basic'"),
    (b"n,,\x01auth=Bearer \x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Bearer a+b/c\x01\x01", "invalid 'auth' format"),
    (f"n,,\x01auth=Bearer {VALUE}\x011x=y\x01\x01".encode(), "key=value"),
    (f"n,,\x01auth=Bearer {VALUE}\x01x=\x01\x01".encode(), "key=value"),
    (f"n,,\x01auth=Bearer {VALUE}\x01x\x01\x01".encode(), "key=value"),
    (f"n,,\x01auth=Bearer {VALUE}\x01x=\0\x01\x01".encode(), "key=value"),
    (f"n,,\x01auth=Bearer {VALUE}\x01x=é\x01\x01".encode(), "key=value"),
    (f"n,,\x01auth=Bearer {VALUE}\x01auth=Bearer {VALUE}\x01\x01".encode(), "'auth' is repeated"),
])
def test_malformed_initial_responses_fail_with_kafkas_generic_message(
        message: bytes, fragment: str) -> None:
    server = server_at()
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(message)
    assert str(info.value) == GENERIC
    assert info.value.reason.startswith("Invalid OAUTHBEARER client first message: ")
    assert fragment in info.value.reason
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match="state FAILED"):
        server.evaluate(message)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_escape_the_server(message: bytes) -> None:
    server = server_at()
    for token in (message, b"\x01", message):
        with contextlib.suppress(SaslAuthenticationError):
            server.evaluate(token)
    assert not server.complete


VALID_FIRST = f"n,a=alice,\x01auth=Bearer {VALUE}\x01traceId=1\x01\x01".encode()


@given(st.lists(st.tuples(st.integers(0, len(VALID_FIRST)), st.integers(0, 8), st.binary(max_size=4)),
                min_size=1, max_size=4))
def test_mangled_initial_responses_never_escape_the_server(
        edits: list[tuple[int, int, bytes]]) -> None:
    message = VALID_FIRST
    for at, cut, insert in edits:
        message = message[:at] + insert + message[at + cut:]
    server = server_at()
    try:
        assert server.evaluate(message) in (b"", b'{"status":"invalid_token"}')
    except SaslAuthenticationError:
        assert not server.complete


@given(st.binary(max_size=100))
def test_any_server_reply_gets_an_answer_from_the_client(challenge: bytes) -> None:
    client = oauthbearer_client(login_token)
    client.initial()
    assert client.evaluate(challenge) == (b"\x01" if challenge else b"")
    assert client.complete is (not challenge)


def test_the_token_repr_hides_the_credential() -> None:
    token = login_token()
    assert token.value not in repr(token)
    assert "alice" in repr(token)
