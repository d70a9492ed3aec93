"""Delegation tokens (KIP-48) on the Kafka protocol, without processes: the
Envelope that carries a client's principal to the controller (KIP-590),
the controller's token handlers behind it, the broker's first check, and
the token lookup a broker's SCRAM logins use."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
from typing import Any

import pytest
from kio.schema.create_delegation_token.v3 import request as create_req
from kio.schema.create_topics.v4 import request as ct4_req
from kio.schema.envelope.v0 import request as envelope_req
from kio.schema.metadata.v12 import request as md_req
from kio.schema.renew_delegation_token.v2 import request as renew_req
from kio.static.primitive import i64Timedelta

from data_plane.api.delegation_tokens import (
    TokenAuthenticator,
    controller_token_handlers,
    token_password,
    token_requests_refused,
)
from data_plane.api.envelope import decode_principal, encode_principal, envelope_handler
from metadata_quorum.controller.delegation_token_control import (
    DelegationTokenSettings,
    create_delegation_token,
    renew_delegation_token,
)
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.delegation_tokens import token_hmac
from metadata_quorum.image import MetadataImage, MetadataProvenance
from metadata_quorum.records import DelegationTokenRecord
from raftlog.net import RequestContext
from raftlog.net.codec import decode_response, encode_request
from raftlog.net.errors import ErrorCode
from raftlog.net.kio_fixes import RESPONSE_OVERRIDES
from raftlog.net.sasl import ANONYMOUS
from raftlog.security.sasl import SCRAM_SHA_256, SaslCredentials, sasl_client, scram_server


def run(client: Any, server: Any) -> None:
    """A SASL exchange, as a connection's shell drives one."""
    token = client.initial()
    while not client.complete:
        token = client.evaluate(server.evaluate(token))


SECRET = "a-shared-secret"
SETTINGS = DelegationTokenSettings(secret_key=SECRET)
CONFIG = ControllerConfig(cluster_id="tokens-test", delegation_tokens=SETTINGS)
NOW = 1_700_000_000_000


def context(user: str = "alice", *, token: bool = False, api_key: int = 58) -> RequestContext:
    return RequestContext(api_key=api_key, api_version=0, correlation_id=7, client_id="test",
                          peer=("127.0.0.1", 5555), listener_name="CONTROLLER", user=user,
                          token_authenticated=token)


def period(ms: int) -> i64Timedelta:
    return i64Timedelta.parse(datetime.timedelta(milliseconds=ms))


def envelope(inner: Any, principal: str = "User:alice", token: bool = False,
             principal_bytes: bytes | None = None) -> envelope_req.EnvelopeRequest:
    return envelope_req.EnvelopeRequest(
        request_data=encode_request(inner, 41, "the-client")[4:],
        request_principal=(encode_principal(principal, token) if principal_bytes is None
                           else principal_bytes),
        client_host_address=bytes([127, 0, 0, 1]))


@pytest.mark.parametrize("token", [False, True])
def test_the_principal_travels_as_kafkas_default_principal_data(token: bool) -> None:
    data = encode_principal("User:alice", token)
    assert data[:2] == b"\x00\x00"  # version-prefixed, as Kafka's principal serde
    assert decode_principal(data) == ("User:alice", token)
    with pytest.raises(ValueError, match="version"):
        decode_principal(b"\x00\x01" + data[2:])
    with pytest.raises(ValueError):
        decode_principal(b"\x00\x00\xff")
    with pytest.raises(ValueError, match="type and a name"):  # found by the hostile test
        decode_principal(encode_principal("User:", token))


def _run_envelope(handlers: dict[int, Any], body: Any) -> Any:
    return asyncio.run(envelope_handler(handlers)(context("broker"), body))


def test_an_envelope_is_answered_by_the_inner_handler_as_the_embedded_principal() -> None:
    seen: list[RequestContext] = []

    async def create(ctx: RequestContext, body: Any) -> Any:
        seen.append(ctx)
        return RESPONSE_OVERRIDES[(38, 3)](
            error_code=ErrorCode.none, principal_type="User", principal_name=ctx.user,
            token_requester_principal_type="User", token_requester_principal_name=ctx.user,
            issue_timestamp=1, expiry_timestamp=2, max_timestamp=3,
            token_id="t", hmac=b"h", throttle_time=datetime.timedelta(0))

    inner = create_req.CreateDelegationTokenRequest(
        owner_principal_type=None, owner_principal_name=None, renewers=(),
        max_lifetime=period(-1))
    answer = _run_envelope({38: create}, envelope(inner, token=True))
    assert answer.error_code == ErrorCode.none
    correlation, decoded = decode_response(answer.response_data, RESPONSE_OVERRIDES[(38, 3)])
    assert correlation == 41 and decoded.principal_name == "alice"
    [ctx] = seen
    assert (ctx.user, ctx.token_authenticated, ctx.client_id) == ("alice", True, "the-client")


def test_an_envelope_refuses_what_it_cannot_unwrap() -> None:
    async def never(ctx: RequestContext, body: Any) -> Any:
        raise AssertionError("not to be called")

    handlers = {38: never, 19: never, 3: never}
    # CreateTopics rides in an envelope from v5 on (KIP-599's permissive
    # version for older clients); Metadata never does.
    topics = ct4_req.CreateTopicsRequest(topics=(), timeout=datetime.timedelta(seconds=1),
                                         validate_only=False)
    assert _run_envelope(handlers, envelope(topics)).error_code == ErrorCode.invalid_request
    metadata = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False)
    assert _run_envelope(handlers, envelope(metadata)).error_code == ErrorCode.invalid_request
    inner = create_req.CreateDelegationTokenRequest(
        owner_principal_type=None, owner_principal_name=None, renewers=(),
        max_lifetime=period(-1))
    for principal_bytes in (b"\x00\x07junk", encode_principal("Group:g", False)):
        junk = envelope(inner, principal_bytes=principal_bytes)
        assert _run_envelope(handlers, junk).error_code == \
            ErrorCode.principal_deserialization_failure
    garbage = dataclasses.replace(envelope(inner), request_data=b"\x00\x26")
    assert _run_envelope(handlers, garbage).error_code == ErrorCode.invalid_request


class _Controller:
    """`controller_token_handlers`' ``write``: the real commands over an image
    that the written records are applied to."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0

    async def write(self, request: Any) -> tuple[Any, ErrorCode]:
        from metadata_quorum.controller.delegation_token_control import (
            CreateDelegationTokenRequest,
            ExpireDelegationTokenRequest,
            expire_delegation_token,
        )
        from metadata_quorum.delta import MetadataDelta

        if isinstance(request, CreateDelegationTokenRequest):
            result = create_delegation_token(self.image, request, CONFIG,
                                             next_offset=self.offset, now_ms=NOW)
        elif isinstance(request, ExpireDelegationTokenRequest):
            result = expire_delegation_token(self.image, request, CONFIG, now_ms=NOW)
        else:
            result = renew_delegation_token(self.image, request, CONFIG, now_ms=NOW)
        delta = MetadataDelta(self.image)
        for record in result.records:
            delta.replay(record)
        self.image = delta.apply(MetadataProvenance(self.offset, 1))
        self.offset += len(result.records)
        return result.response, ErrorCode.none


def test_the_controller_handlers_create_for_the_requester_and_check_renewers() -> None:
    controller = _Controller()
    handlers = controller_token_handlers(controller.write)
    create = create_req.CreateDelegationTokenRequest(
        owner_principal_type=None, owner_principal_name=None,
        renewers=(create_req.CreatableRenewers(principal_type="User", principal_name="bob"),),
        max_lifetime=period(-1))
    created = asyncio.run(handlers[38](context("alice"), create))
    assert created.error_code == ErrorCode.none
    assert (created.principal_name, created.token_requester_principal_name) == ("alice", "alice")
    assert created.hmac == token_hmac(SECRET, created.token_id)
    [token] = controller.image.delegation_tokens.values()
    assert (token.owner, token.requester, token.renewers) == (
        "User:alice", "User:alice", ("User:bob",))

    renew = renew_req.RenewDelegationTokenRequest(hmac=created.hmac, renew_period=period(1000))
    renewed = asyncio.run(handlers[39](context("bob"), renew))  # a renewer may
    assert renewed.error_code == ErrorCode.none
    assert renewed.expiry_timestamp == NOW + 1000  # ms (raftlog.net.kio_fixes)
    refused = asyncio.run(handlers[39](context("mallory"), renew))
    assert refused.error_code == ErrorCode.delegation_token_owner_mismatch
    assert isinstance(refused, RESPONSE_OVERRIDES[(39, 2)])
    # A token-authenticated principal is refused before the command runs.
    by_token = asyncio.run(handlers[38](context("alice", token=True), create))
    assert by_token.error_code == ErrorCode.delegation_token_request_not_allowed
    assert len(controller.image.delegation_tokens) == 1


@pytest.mark.parametrize(("protocol", "user", "token", "refused"), [
    ("PLAINTEXT", ANONYMOUS, False, True),
    ("SSL", ANONYMOUS, False, True),  # one-way TLS: no client certificate
    ("SSL", "CN=alice", False, False),
    ("SASL_PLAINTEXT", "alice", False, False),
    ("SASL_SSL", "alice", False, False),
    ("SASL_PLAINTEXT", "alice", True, True),  # a token may not ask for tokens
])
def test_token_requests_need_an_authenticated_channel_and_no_token(
    protocol: str, user: str, token: bool, refused: bool,
) -> None:
    assert token_requests_refused(protocol, context(user, token=token)) is refused


def _image(*tokens: DelegationTokenRecord) -> MetadataImage:
    return dataclasses.replace(MetadataImage(),
                               delegation_tokens={t.token_id: t for t in tokens})


TOKEN = DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=(),
                              issue_timestamp=NOW, max_timestamp=NOW + 10_000,
                              expiration_timestamp=NOW + 5_000, token_id="tok-1")


def test_a_broker_logs_a_live_token_in_as_its_owner() -> None:
    image = _image(TOKEN)
    clock = [NOW]
    tokens = TokenAuthenticator(SETTINGS, lambda: image, lambda: clock[0])
    server = scram_server(SCRAM_SHA_256, {}.get,
                          token_lookup=lambda tid: tokens.lookup(SCRAM_SHA_256, tid))
    password = token_password(token_hmac(SECRET, "tok-1"))
    assert password == base64.b64encode(token_hmac(SECRET, "tok-1")).decode()
    run(sasl_client(SaslCredentials(SCRAM_SHA_256, "tok-1", password,
                                    extensions=(("tokenauth", "true"),))), server)
    assert server.authorization_id == "alice"
    found = tokens.lookup(SCRAM_SHA_256, "tok-1")
    assert found is not None and found.lifetime_ms == NOW + 5_000
    assert tokens.lookup(SCRAM_SHA_256, "tok-2") is None  # unknown
    clock[0] = NOW + 5_001
    assert tokens.lookup(SCRAM_SHA_256, "tok-1") is None  # past its expiry
    disabled = TokenAuthenticator(DelegationTokenSettings(), lambda: image, lambda: NOW)
    assert disabled.lookup(SCRAM_SHA_256, "tok-1") is None


# ---- the broker's handlers, through the Envelope, on one in-process broker ----------------


def test_a_broker_creates_describes_renews_and_expires_at_every_version() -> None:
    from kio.schema.create_delegation_token.v1 import request as create_v1
    from kio.schema.describe_delegation_token.v1 import request as describe_v1
    from kio.schema.describe_delegation_token.v3 import request as describe_v3
    from kio.schema.expire_delegation_token.v1 import request as expire_v1
    from kio.schema.renew_delegation_token.v1 import request as renew_v1
    from single_broker import TOKEN_SECRET, SingleBroker

    broker = SingleBroker()
    try:
        def call(key: int, body: Any, user: str = "alice") -> Any:
            ctx = RequestContext(key, int(body.__version__), 1, "t", None, "PLAINTEXT",
                                 user=user)
            return broker.loop.run_until_complete(broker.handlers[key](ctx, body))

        # v1 has no owner fields (found by the hostile broker test: it was
        # UNKNOWN_SERVER_ERROR); the owner is the requester.
        made = call(38, create_v1.CreateDelegationTokenRequest(renewers=(), max_lifetime=period(-1)))
        assert made.error_code == ErrorCode.none
        assert (made.principal_type, made.principal_name) == ("User", "alice")
        assert made.hmac == token_hmac(TOKEN_SECRET, made.token_id)
        for_bob = call(38, create_req.CreateDelegationTokenRequest(
            owner_principal_type="User", owner_principal_name="bob", renewers=(),
            max_lifetime=period(60_000)))
        assert for_bob.error_code == ErrorCode.none
        assert (for_bob.principal_name, for_bob.token_requester_principal_name) == ("bob", "alice")
        assert for_bob.max_timestamp - for_bob.issue_timestamp == 60_000

        listed = call(41, describe_v3.DescribeDelegationTokenRequest(owners=None))
        assert sorted(t.token_id for t in listed.tokens) == sorted([made.token_id, for_bob.token_id])
        mine = call(41, describe_v1.DescribeDelegationTokenRequest(owners=(
            describe_v1.DescribeDelegationTokenOwner(principal_type="User", principal_name="alice"),)))
        assert [t.token_id for t in mine.tokens] == [made.token_id]
        # No authorizer here: any authenticated principal may DESCRIBE every
        # token, as in Kafka (its AuthHelper allows all without one).
        assert len(call(41, describe_v3.DescribeDelegationTokenRequest(owners=None),
                        user="carol").tokens) == 2

        renewed = call(39, renew_v1.RenewDelegationTokenRequest(hmac=made.hmac,
                                                                renew_period=period(1_000)))
        assert renewed.error_code == ErrorCode.none
        assert call(39, renew_v1.RenewDelegationTokenRequest(
            hmac=made.hmac, renew_period=period(1_000)), user="carol").error_code == \
            ErrorCode.delegation_token_owner_mismatch
        expired = call(40, expire_v1.ExpireDelegationTokenRequest(
            hmac=made.hmac, expiry_time_period=period(-1)))
        assert expired.error_code == ErrorCode.none and expired.expiry_timestamp == -1
        broker.run_for(0.05)
        left = call(41, describe_v3.DescribeDelegationTokenRequest(owners=None))
        assert [t.token_id for t in left.tokens] == [for_bob.token_id]
    finally:
        broker.close()
