"""SCRAM logins with a delegation token (KIP-48): the client sends the
``tokenauth=true`` extension with the token id as its user name and the
HMAC (base64) as its password; the server finds the token, logs the owner
in and marks the session token-authenticated."""

from __future__ import annotations

import base64

import pytest
from sasl_exchange import run

from raftlog.security.sasl import (
    AUTHZID_MISMATCH,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
    SaslCredentials,
    TokenCredential,
    sasl_client,
    scram_server,
)
from raftlog.security.scram import credential_from_password

HMAC = bytes(range(64))
PASSWORD = base64.b64encode(HMAC).decode()
TOKEN_ID = "tokenid-AAAAAAAAAAAAAAA"
EXPIRY_MS = 1_800_000_000_000


def token_store(mechanism: str) -> dict[str, TokenCredential]:
    return {TOKEN_ID: TokenCredential(credential_from_password(mechanism, PASSWORD),
                                      "alice", EXPIRY_MS)}


def token_client(mechanism: str, password: str = PASSWORD, user: str = TOKEN_ID) -> object:
    return sasl_client(SaslCredentials(mechanism, user, password,
                                       extensions=(("tokenauth", "true"),)))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_a_token_logs_its_owner_in_and_the_session_is_token_authenticated(mechanism: str) -> None:
    server = scram_server(mechanism, {}.get, token_lookup=token_store(mechanism).get)
    client = token_client(mechanism)
    transcript = run(client, server)  # type: ignore[arg-type]
    assert transcript[0].endswith(b",tokenauth=true")  # the extension is in client-first
    assert server.complete
    assert server.authorization_id == "alice"  # the owner, not the token id
    assert server.token_authenticated  # type: ignore[attr-defined]
    assert server.token.lifetime_ms == EXPIRY_MS  # type: ignore[attr-defined]


def test_a_wrong_hmac_is_refused() -> None:
    server = scram_server(SCRAM_SHA_256, {}.get, token_lookup=token_store(SCRAM_SHA_256).get)
    wrong = base64.b64encode(bytes(64)).decode()
    with pytest.raises(SaslAuthenticationError) as info:
        run(token_client(SCRAM_SHA_256, wrong), server)  # type: ignore[arg-type]
    assert info.value.reason == "Invalid client credentials"
    assert not server.complete and not server.token_authenticated  # type: ignore[attr-defined]


def test_an_unknown_token_is_refused_and_a_user_is_not_looked_up_as_a_token() -> None:
    # A SCRAM user named like a token id does not log in through tokenauth,
    # and a token id is not a user name without it.
    users = {TOKEN_ID: credential_from_password(SCRAM_SHA_256, PASSWORD)}
    server = scram_server(SCRAM_SHA_256, users.get, token_lookup={}.get)
    with pytest.raises(SaslAuthenticationError) as info:
        run(token_client(SCRAM_SHA_256), server)  # type: ignore[arg-type]
    assert info.value.reason == "Authentication failed: Invalid user credentials"

    as_user = scram_server(SCRAM_SHA_256, {}.get, token_lookup=token_store(SCRAM_SHA_256).get)
    with pytest.raises(SaslAuthenticationError):
        run(sasl_client(SaslCredentials(SCRAM_SHA_256, TOKEN_ID, PASSWORD)), as_user)


def test_a_plain_user_login_is_not_token_authenticated() -> None:
    users = {"bob": credential_from_password(SCRAM_SHA_256, "bob-secret")}
    server = scram_server(SCRAM_SHA_256, users.get, token_lookup=token_store(SCRAM_SHA_256).get)
    run(sasl_client(SaslCredentials(SCRAM_SHA_256, "bob", "bob-secret")), server)
    assert server.authorization_id == "bob"
    assert not server.token_authenticated  # type: ignore[attr-defined]


def test_a_failing_token_lookup_refuses_with_the_cause() -> None:
    def broken(_: str) -> TokenCredential | None:
        raise RuntimeError("image unavailable")

    server = scram_server(SCRAM_SHA_256, {}.get, token_lookup=broken)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(f"n,,n={TOKEN_ID},r=abc,tokenauth=true".encode())
    assert isinstance(info.value.__cause__, RuntimeError)


def test_the_authorization_id_may_name_the_owner_but_no_one_else() -> None:
    store = token_store(SCRAM_SHA_256)
    owner = scram_server(SCRAM_SHA_256, {}.get, token_lookup=store.get, server_nonce="S")
    assert owner.evaluate(f"n,a=alice,n={TOKEN_ID},r=abc,tokenauth=true".encode()).startswith(
        b"r=abcS")
    other = scram_server(SCRAM_SHA_256, {}.get, token_lookup=store.get)
    with pytest.raises(SaslAuthenticationError) as info:
        other.evaluate(f"n,a=mallory,n={TOKEN_ID},r=abc,tokenauth=true".encode())
    assert str(info.value) == AUTHZID_MISMATCH
