"""Delegation tokens (KIP-48, KIP-373) on the Kafka protocol, broker and controller side.

A token is a pair (token id, HMAC) that a client logs in with over SCRAM
(the ``tokenauth=true`` extension), as its owner. The controller keeps the
tokens as metadata records (`metadata_quorum.controller.delegation_token_control`);
every node derives a token's HMAC from ``delegation.token.secret.key``, so
the key must be the same on all of them.

Brokers, as Kafka's do:

- refuse every token request with DELEGATION_TOKEN_REQUEST_NOT_ALLOWED from
  a principal that logged in with a token, on a PLAINTEXT listener, and on
  an SSL listener without a client certificate (the principal is
  ANONYMOUS): a token is a credential, handed out only over an
  authenticated channel to an authenticated user;
- check a CreateDelegationToken themselves (an owner or renewer that is not
  a ``User`` is INVALID_PRINCIPAL_TYPE; creating for another owner needs
  CREATE_TOKENS on that user, else DELEGATION_TOKEN_AUTHORIZATION_FAILED)
  and forward Create, Renew and Expire to the active controller in an
  Envelope (KIP-590) that carries the client's principal, which the
  controller needs (the requester, the owner and renewer checks);
- answer DescribeDelegationToken from their metadata image: the tokens the
  principal owns, renews or requested, and those it may DESCRIBE (the
  DELEGATION_TOKEN resource of the token id) or DESCRIBE_TOKENS of (the
  USER resource of the owner); with owners given, only theirs (as owner or
  renewer). DELEGATION_TOKEN_AUTH_DISABLED without a secret key.

The controller listener serves the Envelope
(`data_plane.api.envelope.envelope_handler`): it unwraps the request,
answers it as the principal inside, and wraps the answer.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from kio.schema.create_delegation_token.v3 import request as create_v3
from kio.schema.expire_delegation_token.v2 import request as expire_v2
from kio.schema.renew_delegation_token.v2 import request as renew_v2

from data_plane.api.build import as_values, build, response_class
from data_plane.api.envelope import ControllerHandler, forward_enveloped
from metadata_quorum.acls import AclOperation, ResourceType
from metadata_quorum.controller.delegation_token_control import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResult,
    DelegationTokenExpiryResult,
    DelegationTokenSettings,
    ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest,
)
from metadata_quorum.delegation_tokens import USER_TYPE, token_hmac
from metadata_quorum.records import DelegationTokenRecord
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request
from raftlog.net.sasl import ANONYMOUS
from raftlog.security.sasl import TokenCredential
from raftlog.security.scram import MIN_ITERATIONS, ScramCredential, credential_from_password

if TYPE_CHECKING:
    from data_plane.api.common import BrokerApiContext

__all__ = (
    "CONTROLLER_TOKEN_VERSIONS",
    "CREATE_DELEGATION_TOKEN_KEY",
    "DESCRIBE_DELEGATION_TOKEN_KEY",
    "EXPIRE_DELEGATION_TOKEN_KEY",
    "RENEW_DELEGATION_TOKEN_KEY",
    "TokenAuthenticator",
    "controller_token_handlers",
    "create_values",
    "expiry_values",
    "handle_create_delegation_token",
    "handle_describe_delegation_token",
    "handle_expire_delegation_token",
    "handle_renew_delegation_token",
    "token_password",
    "token_requests_refused",
)

log = logging.getLogger(__name__)

CREATE_DELEGATION_TOKEN_KEY: Final = 38
RENEW_DELEGATION_TOKEN_KEY: Final = 39
EXPIRE_DELEGATION_TOKEN_KEY: Final = 40
DESCRIBE_DELEGATION_TOKEN_KEY: Final = 41

#: The versions brokers forward at (the controller listener serves these).
CONTROLLER_TOKEN_VERSIONS: Final = {CREATE_DELEGATION_TOKEN_KEY: 3,
                                    RENEW_DELEGATION_TOKEN_KEY: 2,
                                    EXPIRE_DELEGATION_TOKEN_KEY: 2}
_NO_THROTTLE: Final = datetime.timedelta(0)


def _principal(context: RequestContext) -> str:
    return f"{USER_TYPE}:{context.user}"


def _ms(period: datetime.timedelta) -> int:
    """A request's period in whole milliseconds (exact, unlike total_seconds)."""
    return period // datetime.timedelta(milliseconds=1)


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def token_requests_refused(protocol: str, context: RequestContext) -> bool:
    """Kafka's ``allowTokenRequests``, negated: a token-authenticated
    principal, a PLAINTEXT listener, or one-way SSL (ANONYMOUS)."""
    return (context.token_authenticated or protocol == "PLAINTEXT"
            or (protocol == "SSL" and context.user == ANONYMOUS))


async def _forward_enveloped(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """``request`` answered by the active controller as the client's
    principal, in an Envelope (`data_plane.api.envelope`): the controller's
    answer, or None when the channel failed (the outcome is unknown)."""
    api_key = int(request.__api_key__)
    if api_key == CREATE_DELEGATION_TOKEN_KEY:
        # v1-v2 have no owner fields: None, as v3 sends for "the requester".
        inner: Any = create_v3.CreateDelegationTokenRequest(
            owner_principal_type=getattr(request, "owner_principal_type", None),
            owner_principal_name=getattr(request, "owner_principal_name", None),
            renewers=tuple(create_v3.CreatableRenewers(
                principal_type=r.principal_type, principal_name=r.principal_name)
                for r in request.renewers),
            max_lifetime=request.max_lifetime)
    else:
        inner = convert_request(request, CONTROLLER_TOKEN_VERSIONS[api_key])
    return await forward_enveloped(api, ctx, inner)


# ---- the controller's handlers (behind the Envelope) ------------------------------------


def controller_token_handlers(
    write: Callable[[Any], Awaitable[tuple[Any, ErrorCode]]],
) -> dict[int, ControllerHandler]:
    """Create, Renew and Expire on the controller listener: ``write`` runs
    a controller command and returns (result, NONE) once its records are
    committed, or (None, the error) (NOT_CONTROLLER, REQUEST_TIMED_OUT)."""

    async def create(ctx: RequestContext, body: create_v3.CreateDelegationTokenRequest) -> Any:
        owner = None
        if body.owner_principal_name:
            owner = f"{body.owner_principal_type or USER_TYPE}:{body.owner_principal_name}"
        request = CreateDelegationTokenRequest(
            requester=_principal(ctx), owner=owner,
            renewers=tuple(f"{r.principal_type}:{r.principal_name}" for r in body.renewers),
            max_lifetime_ms=_ms(body.max_lifetime))
        result, error = await write(request)
        if error is not ErrorCode.none:
            result = CreateDelegationTokenResult(error)
        return build(response_class(body), create_values(result))

    async def renew(ctx: RequestContext, body: renew_v2.RenewDelegationTokenRequest) -> Any:
        result, error = await write(RenewDelegationTokenRequest(
            requester=_principal(ctx), hmac=bytes(body.hmac),
            renew_period_ms=_ms(body.renew_period)))
        if error is not ErrorCode.none:
            result = DelegationTokenExpiryResult(error)
        return build(response_class(body), expiry_values(result))

    async def expire(ctx: RequestContext, body: expire_v2.ExpireDelegationTokenRequest) -> Any:
        result, error = await write(ExpireDelegationTokenRequest(
            requester=_principal(ctx), hmac=bytes(body.hmac),
            expiry_time_period_ms=_ms(body.expiry_time_period)))
        if error is not ErrorCode.none:
            result = DelegationTokenExpiryResult(error)
        return build(response_class(body), expiry_values(result))

    async def checked(handler: ControllerHandler, ctx: RequestContext, body: Any,
                      failed: Callable[[ErrorCode], Any]) -> Any:
        # The controller repeats the broker's first check (Kafka's
        # ControllerApis): a token-authenticated principal may not.
        if ctx.token_authenticated:
            return failed(ErrorCode.delegation_token_request_not_allowed)
        return await handler(ctx, body)

    def failed_create(body: Any) -> Callable[[ErrorCode], Any]:
        return lambda error: build(response_class(body), create_values(
            CreateDelegationTokenResult(error)))

    def failed_expiry(body: Any) -> Callable[[ErrorCode], Any]:
        return lambda error: build(response_class(body), expiry_values(
            DelegationTokenExpiryResult(error)))

    return {
        CREATE_DELEGATION_TOKEN_KEY:
            lambda ctx, body: checked(create, ctx, body, failed_create(body)),
        RENEW_DELEGATION_TOKEN_KEY:
            lambda ctx, body: checked(renew, ctx, body, failed_expiry(body)),
        EXPIRE_DELEGATION_TOKEN_KEY:
            lambda ctx, body: checked(expire, ctx, body, failed_expiry(body)),
    }


def create_values(result: CreateDelegationTokenResult) -> dict[str, object]:
    """A CreateDelegationTokenResponse body for `build`: on an error, empty
    principals and -1 timestamps, as Kafka's error answer has."""
    ok = result.error is ErrorCode.none
    owner_kind, owner_name = _split(result.owner) if ok else ("", "")
    requester_kind, requester_name = _split(result.requester) if ok else ("", "")
    return {
        "error_code": result.error, "principal_type": owner_kind, "principal_name": owner_name,
        "token_requester_principal_type": requester_kind,
        "token_requester_principal_name": requester_name,
        # Milliseconds (`raftlog.net.kio_fixes`: -1 on an error, as Kafka).
        "issue_timestamp": result.issue_timestamp if ok else -1,
        "expiry_timestamp": result.expiry_timestamp if ok else -1,
        "max_timestamp": result.max_timestamp if ok else -1,
        "token_id": result.token_id if ok else "", "hmac": result.hmac if ok else b"",
        "throttle_time": _NO_THROTTLE,
    }


def expiry_values(result: DelegationTokenExpiryResult) -> dict[str, object]:
    """A Renew/ExpireDelegationTokenResponse body for `build`."""
    return {"error_code": result.error, "expiry_timestamp": result.expiry_timestamp,
            "throttle_time": _NO_THROTTLE}


# ---- the broker's handlers -------------------------------------------------------------


async def handle_create_delegation_token(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """CreateDelegationToken v1-v3 (``kafka-delegation-tokens.sh --create``)."""
    def answer(error: ErrorCode) -> Any:
        return build(response_class(request), create_values(
            CreateDelegationTokenResult(error)))

    if token_requests_refused(api.listener_protocol(ctx.listener_name), ctx):
        return answer(ErrorCode.delegation_token_request_not_allowed)
    owner_type = getattr(request, "owner_principal_type", None)
    owner_name = getattr(request, "owner_principal_name", None)
    if owner_name and (owner_type or USER_TYPE) != USER_TYPE:
        return answer(ErrorCode.invalid_principal_type)
    if any(str(r.principal_type) != USER_TYPE for r in request.renewers):
        return answer(ErrorCode.invalid_principal_type)
    requester = _principal(ctx)
    owner = f"{USER_TYPE}:{owner_name}" if owner_name else requester
    if owner != requester and not api.authorize(
            ctx, AclOperation.CREATE_TOKENS, ResourceType.USER, owner):
        return answer(ErrorCode.delegation_token_authorization_failed)
    answered = await _forward_enveloped(api, ctx, request)
    if answered is None:
        return answer(ErrorCode.request_timed_out)
    return build(response_class(request), as_values(answered))


async def handle_renew_delegation_token(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """RenewDelegationToken v1-v2 (``--renew --hmac H --renew-time-period MS``)."""
    return await _forward_expiry(api, ctx, request)


async def handle_expire_delegation_token(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """ExpireDelegationToken v1-v2 (``--expire --hmac H --expiry-time-period MS``;
    a negative period removes the token at once)."""
    return await _forward_expiry(api, ctx, request)


async def _forward_expiry(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    def answer(error: ErrorCode) -> Any:
        return build(response_class(request), expiry_values(DelegationTokenExpiryResult(error)))

    if token_requests_refused(api.listener_protocol(ctx.listener_name), ctx):
        return answer(ErrorCode.delegation_token_request_not_allowed)
    answered = await _forward_enveloped(api, ctx, request)
    if answered is None:
        return answer(ErrorCode.request_timed_out)
    return build(response_class(request), as_values(answered))


async def handle_describe_delegation_token(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """DescribeDelegationToken v1-v3 (``--describe [--owner-principal P]``),
    from this broker's metadata image."""
    def answer(error: ErrorCode, tokens: list[dict[str, object]]) -> Any:
        return build(response_class(request), {
            "error_code": error, "tokens": tokens, "throttle_time": _NO_THROTTLE})

    if token_requests_refused(api.listener_protocol(ctx.listener_name), ctx):
        return answer(ErrorCode.delegation_token_request_not_allowed, [])
    settings = api.delegation_tokens
    if not settings.enabled:
        return answer(ErrorCode.delegation_token_auth_disabled, [])
    owners = None if request.owners is None else {
        f"{o.principal_type}:{o.principal_name}" for o in request.owners}
    if owners is not None and not owners:
        return answer(ErrorCode.none, [])
    principal = _principal(ctx)
    assert settings.secret_key is not None
    tokens = []
    for token in sorted(api.image.delegation_tokens.values(), key=lambda t: t.token_id):
        if owners is not None and not (token.owner in owners or owners & set(token.renewers)):
            continue
        if not _may_describe(api, ctx, principal, token):
            continue
        tokens.append(_described(token, token_hmac(settings.secret_key, token.token_id)))
    return answer(ErrorCode.none, tokens)


def _may_describe(api: BrokerApiContext, ctx: RequestContext, principal: str,
                  token: DelegationTokenRecord) -> bool:
    return (principal in (token.owner, token.requester) or principal in token.renewers
            or api.authorize(ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN,
                             token.token_id)
            or api.authorize(ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, token.owner))


def _described(token: DelegationTokenRecord, hmac: bytes) -> dict[str, object]:
    owner_kind, owner_name = _split(token.owner)
    requester_kind, requester_name = _split(token.requester)
    return {
        "principal_type": owner_kind, "principal_name": owner_name,
        "token_requester_principal_type": requester_kind,
        "token_requester_principal_name": requester_name,
        "issue_timestamp": token.issue_timestamp, "expiry_timestamp": token.expiration_timestamp,
        "max_timestamp": token.max_timestamp, "token_id": token.token_id, "hmac": hmac,
        "renewers": [{"principal_type": kind, "principal_name": name}
                     for kind, name in map(_split, token.renewers)],
    }


# ---- SASL/SCRAM logins with a token ------------------------------------------------------


class TokenAuthenticator:
    """Finds a delegation token for a SCRAM login with ``tokenauth=true``
    (`raftlog.security.sasl.scram_server`'s ``token_lookup``).

    The token's password is the standard base64 of its HMAC; the SCRAM
    credential is derived from it with the mechanism's minimum iterations
    (4096) and a salt drawn once per node, as Kafka derives it. The secret
    key is fixed for the node's life, so a token id's credential is too:
    it is derived once per mechanism and dropped when the token is gone.
    A token past its expiry is refused (Kafka lets one in until the
    controller's sweep removes it; a login a check away is cheaper than
    that window)."""

    def __init__(self, settings: DelegationTokenSettings,
                 image: Callable[[], Any], wall_ms: Callable[[], int]) -> None:
        self._settings = settings
        self._image = image
        self._wall_ms = wall_ms
        self._salt = os.urandom(32)
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def lookup(self, mechanism: str, token_id: str) -> TokenCredential | None:
        key = self._settings.secret_key
        if not key:
            return None
        token: DelegationTokenRecord | None = self._image().delegation_tokens.get(token_id)
        if token is None:
            self._credentials.pop((mechanism, token_id), None)
            return None
        owner_kind, owner_name = _split(token.owner)
        if owner_kind != USER_TYPE or min(token.expiration_timestamp,
                                          token.max_timestamp) < self._wall_ms():
            return None
        credential = self._credentials.get((mechanism, token_id))
        if credential is None:
            credential = credential_from_password(
                mechanism, token_password(token_hmac(key, token_id)), MIN_ITERATIONS,
                self._salt)
            self._credentials[(mechanism, token_id)] = credential
        return TokenCredential(credential, owner_name, token.expiration_timestamp)


def token_password(hmac: bytes) -> str:
    """What a client logs in with for a token's ``hmac`` (standard base64)."""
    return base64.b64encode(hmac).decode("ascii")


