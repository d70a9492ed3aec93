"""SASL/PLAIN and SASL/SCRAM exchanges (raftlog.security.sasl): Kafka's
checks and messages, the RFC 7677 test vector, scramp interoperability, and
fuzzing with hostile tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st
from sasl_exchange import run

from raftlog.security.sasl import (
    AUTHZID_MISMATCH,
    INVALID_USERNAME_OR_PASSWORD,
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SUPPORTED_MECHANISMS,
    SaslAuthenticationError,
    SaslClient,
    SaslCredentials,
    SaslServer,
    plain_server,
    sasl_client,
    scram_server,
)
from raftlog.security.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_password,
    salted_password,
)

SCRAM = (SCRAM_SHA_256, SCRAM_SHA_512)
USERS = {"alice": "alice-secret", "bob": "pässwörd"}


def generic(mechanism: str) -> str:
    """What Kafka's SaslServerAuthenticator sends for a SaslException."""
    return ("Authentication failed during authentication due to invalid credentials "
            f"with SASL mechanism {mechanism}")




def refusal(server: SaslServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(token)
    assert not server.complete
    return info.value


# --- PLAIN ------------------------------------------------------------------


@pytest.mark.parametrize("token, user", [
    (b"\0alice\0alice-secret", "alice"),
    (b"alice\0alice\0alice-secret", "alice"),  # authzid equal to the user
    ("\0bob\0pässwörd".encode(), "bob"),
])
def test_plain_accepts_a_known_user_with_its_password(token: bytes, user: str) -> None:
    server = plain_server(USERS)
    assert server.mechanism == PLAIN
    assert server.evaluate(token) == b""
    assert server.complete
    assert server.authorization_id == user


@pytest.mark.parametrize("token", [
    b"\0alice\0wrong",
    b"\0alice\0alice-secre",  # a prefix of the password
    b"\0alice\0alice-secret!",
    b"\0carol\0alice-secret",  # no such user
    b"\0ALICE\0alice-secret",
    b"other\0alice\0wrong",  # the password is checked before the authzid (Kafka's order)
])
def test_plain_refuses_a_wrong_password_or_unknown_user_with_kafkas_message(token: bytes) -> None:
    error = refusal(plain_server(USERS), token)
    assert str(error) == INVALID_USERNAME_OR_PASSWORD == (
        "Authentication failed: Invalid username or password")
    assert error.reason == str(error)


def test_plain_refuses_an_authorization_id_other_than_the_user() -> None:
    error = refusal(plain_server(USERS), b"bob\0alice\0alice-secret")
    assert str(error) == (
        "Authentication failed: Client requested an authorization id that is different "
        "from username")


@pytest.mark.parametrize("token, reason", [
    (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\0alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\0alice\0alice-secret\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\0\0alice-secret", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"\0\0", "Authentication failed: username not specified"),
    (b"\0alice\0\xff\xfe", "Invalid SASL/PLAIN response: not UTF-8"),
])
def test_plain_keeps_malformed_token_reasons_from_the_client(token: bytes, reason: str) -> None:
    """Kafka raises these as SaslException: the client gets the generic text."""
    error = refusal(plain_server(USERS), token)
    assert str(error) == generic(PLAIN)
    assert error.reason == reason


def test_plain_server_refuses_tokens_after_completion_or_failure() -> None:
    done = plain_server(USERS)
    done.evaluate(b"\0alice\0alice-secret")
    error = refusal_after(done, b"\0alice\0alice-secret")
    assert str(error) == "Unexpected challenge in Sasl server state COMPLETE"
    assert done.complete and done.authorization_id == "alice"

    failed = plain_server(USERS)
    refusal(failed, b"\0alice\0wrong")
    assert str(refusal(failed, b"\0alice\0alice-secret")) == (
        "Unexpected challenge in Sasl server state FAILED")
    with pytest.raises(RuntimeError, match="has not completed"):
        _ = failed.authorization_id


def refusal_after(server: SaslServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(token)
    return info.value


def test_authorization_id_is_refused_before_completion() -> None:
    with pytest.raises(RuntimeError):
        _ = plain_server(USERS).authorization_id
    with pytest.raises(RuntimeError):
        _ = scram_server(SCRAM_SHA_256, lambda _: None).authorization_id


def test_plain_server_reads_users_when_the_token_arrives() -> None:
    users: dict[str, str] = {}
    server = plain_server(users)
    users["alice"] = "alice-secret"
    assert server.evaluate(b"\0alice\0alice-secret") == b""


def test_plain_client_sends_no_authzid_and_completes_on_the_empty_reply() -> None:
    client = sasl_client(SaslCredentials(PLAIN, "bob", "pässwörd"))
    assert client.mechanism == PLAIN
    with pytest.raises(RuntimeError):
        client.evaluate(b"")
    assert client.initial() == "\0bob\0pässwörd".encode()
    assert not client.complete
    with pytest.raises(RuntimeError):
        client.initial()
    assert client.evaluate(b"") == b""
    assert client.complete
    with pytest.raises(SaslAuthenticationError, match="state COMPLETE"):
        client.evaluate(b"")


def test_plain_client_refuses_a_non_empty_server_reply() -> None:
    client = sasl_client(SaslCredentials(PLAIN, "alice", "alice-secret"))
    client.initial()
    with pytest.raises(SaslAuthenticationError, match="expected none"):
        client.evaluate(b"x")
    assert not client.complete


def test_plain_client_against_our_server() -> None:
    server = plain_server(USERS)
    transcript = run(sasl_client(SaslCredentials(PLAIN, "bob", "pässwörd")), server)
    assert transcript == ["\0bob\0pässwörd".encode(), b""]
    assert server.authorization_id == "bob"


def test_plain_client_refuses_nul_in_credentials() -> None:
    with pytest.raises(ValueError, match="NUL"):
        sasl_client(SaslCredentials(PLAIN, "a\0b", "x"))
    with pytest.raises(ValueError, match="NUL"):
        sasl_client(SaslCredentials(PLAIN, "a", "x\0"))


def test_credentials_check_the_mechanism_and_hide_the_password() -> None:
    for mechanism in SUPPORTED_MECHANISMS:
        token = (lambda: None) if mechanism == "OAUTHBEARER" else None
        assert SaslCredentials(mechanism, "u", "p", token=token).mechanism == mechanism
    for bad in ("GSSAPI", "plain", "SCRAM-SHA-1", ""):
        with pytest.raises(ValueError, match="unsupported SASL mechanism"):
            SaslCredentials(bad, "u", "p")
    # OAUTHBEARER logs in with a token, made afresh per login; the others never do.
    with pytest.raises(ValueError, match="token maker"):
        SaslCredentials("OAUTHBEARER", "u", "")
    with pytest.raises(ValueError, match="token maker"):
        SaslCredentials(PLAIN, "u", "p", token=lambda: None)
    assert "hunter2" not in repr(SaslCredentials(PLAIN, "u", "hunter2"))


# --- SCRAM: whole exchanges ---------------------------------------------------


def credentials_lookup(mechanism: str, users: dict[str, str]) -> Callable[[str], ScramCredential | None]:
    stored = {user: credential_from_password(mechanism, password) for user, password in users.items()}
    return stored.get


@pytest.mark.parametrize("mechanism", SCRAM)
@pytest.mark.parametrize("user, password", [
    ("alice", "alice-secret"),
    ("bob", "pässwörd"),
    ("a,b=c", "x"),  # saslname escaping both ways
    ("=2C", ",="),
])
def test_scram_full_exchange_between_our_client_and_server(
        mechanism: str, user: str, password: str) -> None:
    server = scram_server(mechanism, credentials_lookup(mechanism, {user: password}))
    client = sasl_client(SaslCredentials(mechanism, user, password))
    transcript = run(client, server)
    assert len(transcript) == 4  # client-first, server-first, client-final, server-final
    assert transcript[3].startswith(b"v=")
    assert client.complete and server.complete
    assert server.authorization_id == user
    assert server.mechanism == client.mechanism == mechanism


def test_rfc7677_scram_sha_256_test_vector() -> None:
    """RFC 7677 section 3: the exact four messages."""
    credential = credential_from_password(
        SCRAM_SHA_256, "pencil", 4096, base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = scram_server(SCRAM_SHA_256, {"user": credential}.get,
                          server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = sasl_client(SaslCredentials(SCRAM_SHA_256, "user", "pencil"),
                         client_nonce="rOprNGfwEbeRWgbNEkqO")
    assert run(client, server) == [
        b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
        b"i=4096",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    ]
    assert server.authorization_id == "user"


def test_scram_saslname_is_escaped_on_the_wire_and_decoded_for_lookup() -> None:
    looked_up: list[str] = []
    credential = credential_from_password(SCRAM_SHA_256, "pw")

    def lookup(user: str) -> ScramCredential:
        looked_up.append(user)
        return credential

    server = scram_server(SCRAM_SHA_256, lookup)
    transcript = run(sasl_client(SaslCredentials(SCRAM_SHA_256, "a,b=c", "pw")), server)
    assert transcript[0].startswith(b"n,,n=a=2Cb=3Dc,r=")
    assert looked_up == ["a,b=c"]
    assert server.authorization_id == "a,b=c"


def test_scram_client_salts_the_password_without_saslprep() -> None:
    """Kafka applies no SASLprep: U+2168 (ROMAN NUMERAL NINE) and "IX" are
    different passwords, though SASLprep (NFKC) would make them one."""
    credential = credential_from_password(SCRAM_SHA_256, "\u2168")
    assert credential == credential_from_password(
        SCRAM_SHA_256, "\u2168", salt=credential.salt)
    ok = scram_server(SCRAM_SHA_256, {"u": credential}.get)
    run(sasl_client(SaslCredentials(SCRAM_SHA_256, "u", "\u2168")), ok)
    assert ok.complete
    refused = scram_server(SCRAM_SHA_256, {"u": credential}.get)
    with pytest.raises(SaslAuthenticationError):
        run(sasl_client(SaslCredentials(SCRAM_SHA_256, "u", "IX")), refused)


def test_scram_default_nonces_are_random() -> None:
    credential = credential_from_password(SCRAM_SHA_256, "pw")
    first_tokens = {sasl_client(SaslCredentials(SCRAM_SHA_256, "u", "pw")).initial()
                    for _ in range(5)}
    assert len(first_tokens) == 5
    replies = {scram_server(SCRAM_SHA_256, {"u": credential}.get).evaluate(b"n,,n=u,r=abc")
               for _ in range(5)}
    assert len(replies) == 5


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scramp_client_against_our_server(mechanism: str) -> None:
    salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
        "secret", iteration_count=4096)
    credential = ScramCredential(salt, stored_key, server_key, iterations)
    assert credential == credential_from_password(mechanism, "secret", 4096, salt)
    server = scram_server(mechanism, {"a,b=c": credential}.get)
    client = scramp.ScramClient([mechanism], "a,b=c", "secret")
    server_first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # raises if our signature were wrong
    assert server.complete and server.authorization_id == "a,b=c"


@pytest.mark.parametrize("mechanism", SCRAM)
def test_our_client_against_a_scramp_server(mechanism: str) -> None:
    scramp_mechanism = scramp.ScramMechanism(mechanism)
    auth_info = scramp_mechanism.make_auth_info("secret", iteration_count=4096)
    server = scramp_mechanism.make_server(lambda user: auth_info if user == "a,b=c" else None)
    client = sasl_client(SaslCredentials(mechanism, "a,b=c", "secret"))
    server.set_client_first(client.initial().decode())
    client_final = client.evaluate(server.get_server_first().encode())
    server.set_client_final(client_final.decode())  # raises if our proof were wrong
    assert client.evaluate(server.get_server_final().encode()) == b""
    assert client.complete


# --- SCRAM: the server's refusals ------------------------------------------------


PASSWORD = "pencil"
CREDENTIAL = credential_from_password(SCRAM_SHA_256, PASSWORD)


def server_for(user: str = "user", credential: ScramCredential = CREDENTIAL) -> SaslServer:
    return scram_server(SCRAM_SHA_256, {user: credential}.get, server_nonce="SERVER")


def client_final(server_first: bytes, gs2_header: str, client_first_bare: str,
                 password: str = PASSWORD, extensions: str = "") -> bytes:
    """A reference client-final (RFC 5802 section 3), written out here so the
    tests can send what our client never does (other GS2 headers, extensions)."""
    attributes = dict(a.split("=", 1) for a in server_first.decode().split(","))
    salted = salted_password(SCRAM_SHA_256, password, base64.b64decode(attributes["s"]),
                             int(attributes["i"]))
    binding = base64.b64encode(gs2_header.encode()).decode()
    without_proof = f"c={binding},r={attributes['r']}{extensions}"
    auth_message = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth_message, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_scram_unknown_user_fails_in_the_first_round_with_kafkas_reason() -> None:
    error = refusal(server_for("user"), b"n,,n=nobody,r=abc")
    assert str(error) == generic(SCRAM_SHA_256)
    assert error.reason == "Authentication failed: Invalid user credentials"


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_wrong_password_fails_on_the_proof(mechanism: str) -> None:
    server = scram_server(mechanism, credentials_lookup(mechanism, {"user": "right"}))
    client = sasl_client(SaslCredentials(mechanism, "user", "wrong"))
    reply = server.evaluate(client.initial())
    error = refusal(server, client.evaluate(reply))
    assert str(error) == generic(mechanism)
    assert error.reason == "Invalid client credentials"


def test_scram_refuses_a_final_message_with_another_nonce() -> None:
    server = server_for()
    server_first = server.evaluate(b"n,,n=user,r=abc")
    good = client_final(server_first, "n,,", "n=user,r=abc")
    error = refusal(server, good.replace(b"r=abcSERVER", b"r=abcSERVEX"))
    assert error.reason == "Invalid client nonce in the final client message."


@pytest.mark.parametrize("proof", [b"", b"\0" * 31, b"\0" * 33])
def test_scram_refuses_a_proof_of_the_wrong_length(proof: bytes) -> None:
    server = server_for()
    server.evaluate(b"n,,n=user,r=abc")
    error = refusal(server, b"c=biws,r=abcSERVER,p=" + base64.b64encode(proof))
    assert error.reason == "Invalid client credentials"


@pytest.mark.parametrize("header", ["n,,", "y,,", "n,a=user,"])
def test_scram_accepts_gs2_headers_without_channel_binding(header: str) -> None:
    """'y': the client could bind but thinks we cannot, and we cannot (RFC
    5802 section 6); an authzid equal to the user is allowed (Kafka)."""
    server = server_for()
    server_first = server.evaluate(f"{header}n=user,r=abc".encode())
    reply = server.evaluate(client_final(server_first, header, "n=user,r=abc"))
    assert reply.startswith(b"v=") and server.authorization_id == "user"


def test_scram_refuses_channel_binding() -> None:
    error = refusal(server_for(), b"p=tls-server-end-point,,n=user,r=abc")
    assert str(error) == generic(SCRAM_SHA_256)
    assert error.reason == (
        "Invalid SCRAM client first message format: channel binding is not supported")


def test_scram_refuses_a_c_attribute_that_is_not_the_gs2_header() -> None:
    server = server_for()
    server_first = server.evaluate(b"y,,n=user,r=abc")
    # A valid proof over "c=biws" ("n,,"), though the header was "y,,".
    error = refusal(server, client_final(server_first, "n,,", "n=user,r=abc"))
    assert error.reason == "Invalid channel binding in the final client message"


def test_scram_refuses_an_authorization_id_other_than_the_user_with_kafkas_message() -> None:
    error = refusal(server_for(), b"n,a=admin,n=user,r=abc")
    assert str(error) == AUTHZID_MISMATCH


@pytest.mark.parametrize("extension", ["tokenauth=true", "tokenauth=TRUE", "foo=1,tokenauth=true"])
def test_scram_without_tokens_refuses_delegation_token_authentication(extension: str) -> None:
    # A server made without a token lookup (a listener of a cluster with no
    # delegation.token.secret.key) refuses tokenauth logins.
    error = refusal(server_for(), f"n,,n=user,r=abc,{extension}".encode())
    assert str(error) == generic(SCRAM_SHA_256)
    assert error.reason == "Token Authentication failed: delegation tokens are not enabled"


@pytest.mark.parametrize("extension", ["tokenauth=false", "foo=bar", "x=y=z"])
def test_scram_ignores_other_extensions_as_kafka_does(extension: str) -> None:
    server = server_for()
    bare = f"n=user,r=abc,{extension}"
    server_first = server.evaluate(f"n,,{bare}".encode())
    assert server.evaluate(client_final(server_first, "n,,", bare)).startswith(b"v=")


def test_scram_accepts_extensions_in_the_final_message() -> None:
    server = server_for()
    server_first = server.evaluate(b"n,,n=user,r=abc")
    token = client_final(server_first, "n,,", "n=user,r=abc", extensions=",foo=bar")
    assert server.evaluate(token).startswith(b"v=")


@pytest.mark.parametrize("token, detail", [
    (b"n,,n=user", "expected 'n=<user>,r=<nonce>'"),
    (b"n,,m=ext,n=user,r=abc", "mandatory extensions ('m=') are not supported"),
    (b"n,,n=us=2Xer,r=abc", "'=' in a user name must start '=2C' or '=3D'"),
    (b"n,,n=,r=abc", "a user name must be non-empty"),
    (b"n,,n=user,r=", "a nonce must be non-empty printable ASCII"),
    (b"n,,n=user,r=a b", "a nonce must be non-empty printable ASCII"),
    (b"n,,n=user,r=abc,tokenauth", "invalid extension"),
    (b"x,,n=user,r=abc", "GS2 channel binding flag must be 'n' or 'y'"),
    (b"n,b=user,n=user,r=abc", "GS2 authorization identity must start 'a='"),
    (b"n,,r=abc,n=user", "expected attribute 'n='"),
    (b"\xff", "Invalid SCRAM client first message format: 'utf-8' codec"),
])
def test_scram_refuses_malformed_first_messages(token: bytes, detail: str) -> None:
    error = refusal(server_for(), token)
    assert str(error) == generic(SCRAM_SHA_256)
    assert error.reason.startswith("Invalid SCRAM client first message format: ")
    assert detail in error.reason


@pytest.mark.parametrize("token", [
    b"c=biws,r=abcSERVER",
    b"c=biws,r=abcSERVER,p=abc",  # not padded
    b"c=bi!s,r=abcSERVER,p=AAAA",
    b"r=abcSERVER,c=biws,p=AAAA",
    b"c=biws,r=abcSERVER,p=AAAA,x=1",
])
def test_scram_refuses_malformed_final_messages(token: bytes) -> None:
    server = server_for()
    server.evaluate(b"n,,n=user,r=abc")
    error = refusal(server, token)
    assert error.reason.startswith("Invalid SCRAM client final message format: ")


def test_scram_refuses_a_credential_below_the_minimum_iterations() -> None:
    weak = credential_from_password(SCRAM_SHA_256, PASSWORD, iterations=MIN_ITERATIONS - 1)
    error = refusal(server_for(credential=weak), b"n,,n=user,r=abc")
    assert error.reason == "Iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"


def test_scram_lookup_failure_fails_the_exchange_with_the_cause() -> None:
    def broken(user: str) -> ScramCredential | None:
        raise KeyError(user)

    error = refusal(scram_server(SCRAM_SHA_256, broken), b"n,,n=user,r=abc")
    assert error.reason == "Authentication failed: Credentials could not be obtained"
    assert isinstance(error.__cause__, KeyError)


def test_scram_server_refuses_tokens_after_completion_or_failure() -> None:
    server = server_for()
    server_first = server.evaluate(b"n,,n=user,r=abc")
    final = client_final(server_first, "n,,", "n=user,r=abc")
    server.evaluate(final)
    assert str(refusal_after(server, final)) == "Unexpected challenge in Sasl server state COMPLETE"
    assert server.complete and server.authorization_id == "user"

    failed = server_for()
    refusal(failed, b"n,,n=nobody,r=abc")
    assert str(refusal(failed, b"n,,n=user,r=abc")) == (
        "Unexpected challenge in Sasl server state FAILED")

    failed_late = server_for()
    server_first = failed_late.evaluate(b"n,,n=user,r=abc")
    refusal(failed_late, client_final(server_first, "n,,", "n=user,r=abc", password="wrong"))
    assert "state FAILED" in str(
        refusal(failed_late, client_final(server_first, "n,,", "n=user,r=abc")))


def test_scram_factories_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        scram_server(PLAIN, lambda _: None)
    for nonce in ("", "a,b", "a b", "é"):
        with pytest.raises(ValueError, match="nonce"):
            scram_server(SCRAM_SHA_256, lambda _: None, server_nonce=nonce)
        with pytest.raises(ValueError, match="nonce"):
            sasl_client(SaslCredentials(SCRAM_SHA_256, "u", "p"), client_nonce=nonce)


# --- SCRAM: the client's checks ------------------------------------------------


def scram_client_after_first(server: SaslServer | None = None) -> tuple[SaslClient, SaslServer]:
    server = server or server_for()
    client = sasl_client(SaslCredentials(SCRAM_SHA_256, "user", PASSWORD), client_nonce="abc")
    client.evaluate(server.evaluate(client.initial()))
    return client, server


def test_scram_client_refuses_a_bad_server_signature() -> None:
    client, _ = scram_client_after_first()
    with pytest.raises(SaslAuthenticationError) as info:
        client.evaluate(b"v=" + base64.b64encode(b"\0" * 32))
    assert str(info.value) == "Invalid server signature in server final message"
    assert not client.complete


def test_scram_client_refuses_a_server_that_does_not_know_the_password() -> None:
    """A server holding another password's credential cannot sign: the
    client finds out even if that server says yes."""
    impostor_key = credential_from_password(SCRAM_SHA_256, "other", salt=CREDENTIAL.salt)
    client, _ = scram_client_after_first()
    auth_message = (b"n=user,r=abc,r=abcSERVER,s=" + base64.b64encode(CREDENTIAL.salt)
                    + b",i=4096,c=biws,r=abcSERVER")
    forged = hmac.digest(impostor_key.server_key, auth_message, "sha256")
    with pytest.raises(SaslAuthenticationError, match="Invalid server signature"):
        client.evaluate(b"v=" + base64.b64encode(forged))


def test_scram_client_reports_a_server_error() -> None:
    client, _ = scram_client_after_first()
    with pytest.raises(SaslAuthenticationError) as info:
        client.evaluate(b"e=invalid-proof")
    assert str(info.value) == (
        "Sasl authentication using SCRAM-SHA-256 failed with error: invalid-proof")
    with pytest.raises(SaslAuthenticationError, match="state FAILED"):
        client.evaluate(b"v=AAAA")


@pytest.mark.parametrize("server_first, message", [
    (b"r=xyzSERVER,s=QUJD,i=4096", "Invalid server nonce: does not start with client nonce"),
    (b"r=abcSERVER,s=QUJD,i=4095",
     "Requested iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"),
    (b"r=abcSERVER,s=QUJD,i=16385",
     "Requested iterations 16385 is more than the maximum 16384 for SCRAM-SHA-256"),
    (b"r=abcSERVER,s=QUJD,i=0", "Invalid SCRAM server first message format: invalid iteration"),
    (b"r=abcSERVER,s=QUJD", "Invalid SCRAM server first message format: expected"),
    (b"m=x,r=abcSERVER,s=QUJD,i=4096", "Invalid SCRAM server first message format: mandatory"),
    (b"r=abcSERVER,s=QUJ,i=4096", "Invalid SCRAM server first message format: salt"),
])
def test_scram_client_refuses_bad_server_first_messages(server_first: bytes, message: str) -> None:
    client = sasl_client(SaslCredentials(SCRAM_SHA_256, "user", PASSWORD), client_nonce="abc")
    client.initial()
    with pytest.raises(SaslAuthenticationError) as info:
        client.evaluate(server_first)
    assert str(info.value).startswith(message)


def test_scram_client_call_order() -> None:
    client = sasl_client(SaslCredentials(SCRAM_SHA_512, "user", PASSWORD))
    with pytest.raises(RuntimeError):
        client.evaluate(b"r=x,s=QUJD,i=4096")
    client.initial()
    with pytest.raises(RuntimeError):
        client.initial()
    server = scram_server(SCRAM_SHA_512, credentials_lookup(SCRAM_SHA_512, {"user": PASSWORD}))
    other = sasl_client(SaslCredentials(SCRAM_SHA_512, "user", PASSWORD))
    run(other, server)
    with pytest.raises(SaslAuthenticationError, match="Unexpected challenge in Sasl client state COMPLETE"):
        other.evaluate(b"v=AAAA")


# --- Fuzzing: hostile peers -------------------------------------------------------

# Messages near the SCRAM grammar, to get past the first checks: a GS2
# header (or none) and attributes with likely names and values.
GS2_HEADERS = st.sampled_from(["", "n,,", "y,,", "p=x,,", "n,a=user,", "n,a=a=2Cb,", "n,", "x,,"])
ATTRIBUTES = st.tuples(
    st.sampled_from(["n", "r", "c", "p", "s", "i", "m", "e", "v", "tokenauth", "foo", ""]),
    st.sampled_from(["=", "=", ""]),
    st.one_of(st.sampled_from(["user", "abc", "abcSERVER", "biws", "QUJD", "QUJDRA==", "true",
                               "4096", "16385", "=2C", "a=3Db", "=2X", ""]), st.text(max_size=6)),
).map("".join)
SCRAM_LIKE = st.tuples(GS2_HEADERS, st.lists(ATTRIBUTES, max_size=6).map(",".join)).map(
    lambda parts: "".join(parts).encode("utf-8"))
TOKENS = st.one_of(st.binary(max_size=200), SCRAM_LIKE)


def near(*valid: str) -> st.SearchStrategy[bytes]:
    """A valid message's comma-separated parts, some swapped for junk, with
    junk attributes after them: past the first checks, into the later ones."""
    parts = [st.one_of(st.just(part), st.just(part), ATTRIBUTES) for part in valid]
    return st.tuples(st.tuples(*parts), st.lists(ATTRIBUTES, max_size=2)).map(
        lambda t: ",".join([*t[0], *t[1]]).encode("utf-8"))


PROOF = base64.b64encode(bytes(range(32))).decode()
CLIENT_FIRSTS = st.one_of(TOKENS, near("n", "", "n=user", "r=abc"))
CLIENT_FINALS = st.one_of(TOKENS, near("c=biws", "r=abcSERVER", f"p={PROOF}"))
SERVER_FIRSTS = st.one_of(TOKENS, near("r=abcSERVER", "s=QUJD", "i=4096"))
SERVER_FINALS = st.one_of(TOKENS, near(f"v={PROOF}"))


def assert_refuses_or_answers(peer: SaslServer | SaslClient, token: bytes) -> None:
    try:
        reply = peer.evaluate(token)
    except SaslAuthenticationError:
        assert not peer.complete
        return
    assert isinstance(reply, bytes)


@given(TOKENS)
def test_fuzz_plain_server_raises_only_authentication_errors(token: bytes) -> None:
    server = plain_server(USERS)
    assert_refuses_or_answers(server, token)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(token)  # whatever happened, the exchange is over


@given(CLIENT_FIRSTS)
def test_fuzz_scram_server_first_round(token: bytes) -> None:
    server = server_for()
    assert_refuses_or_answers(server, token)


@given(CLIENT_FINALS)
def test_fuzz_scram_server_second_round(token: bytes) -> None:
    server = server_for()
    server.evaluate(b"n,,n=user,r=abc")
    with pytest.raises(SaslAuthenticationError):  # no forged proof gets through
        server.evaluate(token)
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match="state FAILED"):
        server.evaluate(token)


@given(SERVER_FIRSTS)
def test_fuzz_scram_client_first_reply(token: bytes) -> None:
    client = sasl_client(SaslCredentials(SCRAM_SHA_256, "user", PASSWORD), client_nonce="abc")
    client.initial()
    assert_refuses_or_answers(client, token)


@given(SERVER_FINALS)
def test_fuzz_scram_client_final_reply(token: bytes) -> None:
    client, _ = scram_client_after_first()
    with pytest.raises(SaslAuthenticationError):  # no forged signature gets through
        client.evaluate(token)
    assert not client.complete


@given(TOKENS)
def test_fuzz_plain_client_reply(token: bytes) -> None:
    client = sasl_client(SaslCredentials(PLAIN, "alice", "alice-secret"))
    client.initial()
    assert_refuses_or_answers(client, token)
    assert client.complete == (token == b"")
