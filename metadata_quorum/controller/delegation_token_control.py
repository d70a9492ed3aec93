"""Delegation tokens (KIP-48, KRaft): create, renew, expire, and the expiry sweep.

After Kafka's ``DelegationTokenControlManager`` (design only). A token lives
in the metadata log: create writes a DelegationTokenRecord, renew and a
delayed expire write it again with a new expiration, an immediate expire
and the sweep write a RemoveDelegationTokenRecord. Every node replays them
into ``MetadataImage.delegation_tokens``. The token's HMAC, which the client
logs in with, is in no record: whoever holds ``delegation.token.secret.key``
recomputes it (`metadata_quorum.delegation_tokens.token_hmac`).

Principals are ``Type:name`` strings (``User:alice``); the requester is
the authenticated caller, as the broker saw it.

CreateDelegationToken, checked in order:

1. no secret key: DELEGATION_TOKEN_AUTH_DISABLED;
2. an owner that is not ``Type:name``, or a principal too long for the
   record encoding: INVALID_REQUEST (Kafka's request carries type and name
   apart, so it has neither case);
3. a renewer whose type is not ``User``: INVALID_PRINCIPAL_TYPE.

The token's owner is the request's, or the requester when none is given;
the requester is recorded too. Its lifetime is
``delegation.token.max.lifetime.ms``, or the request's max lifetime when
that is positive and shorter; it expires at the earlier of that and now +
``delegation.token.expiry.time.ms``.

RenewDelegationToken and ExpireDelegationToken name the token by its HMAC,
and are checked in this order: DELEGATION_TOKEN_AUTH_DISABLED; no token with
that HMAC: DELEGATION_TOKEN_NOT_FOUND; its max timestamp or expiration
already passed: DELEGATION_TOKEN_EXPIRED; the caller is neither its owner
nor one of its renewers: DELEGATION_TOKEN_OWNER_MISMATCH. The requester
that created a token for someone else has no rights over it (Kafka's
controller checks owner and renewers only).

- Renew: the new expiration is now + the renew period (the configured
  expiry time, or the request's period when positive and shorter), never
  past the max timestamp.
- Expire with a negative period: the token is removed at once, and the
  answer's expiry timestamp echoes the period. With a period >= 0: the new
  expiration is now + period, never past the max timestamp (a period of 0
  leaves the token to the next sweep).

The sweep (`sweep_expired_delegation_tokens`) removes every token whose max
timestamp or expiration is before now; the active controller runs it every
``delegation.token.expiry.check.interval.ms`` while a secret key is set.

A token id is derived from the cluster id and the metadata log offset of
the record that creates the token, printed as Kafka prints a ``Uuid``
(22 characters of unpadded base64url). Kafka draws it at random; deriving
it keeps commands pure and simulations reproducible. The id is no secret
(it is the SCRAM user name of a token login); the HMAC is.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Final

from metadata_quorum.delegation_tokens import (
    USER_TYPE,
    find_token_by_hmac,
    principal_type,
    token_hmac,
)
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import DelegationTokenRecord, RemoveDelegationTokenRecord
from raftlog import kafka_uuid
from raftlog.net.errors import ErrorCode

from .result import ControllerConfig, ControllerResult, DelegationTokenSettings

__all__ = [
    "CreateDelegationTokenRequest",
    "CreateDelegationTokenResult",
    "DelegationTokenExpiryResult",
    "DelegationTokenSettings",
    "ExpireDelegationTokenRequest",
    "RenewDelegationTokenRequest",
    "create_delegation_token",
    "expire_delegation_token",
    "new_token_id",
    "renew_delegation_token",
    "sweep_expired_delegation_tokens",
]

#: Kafka's default messages for these codes (``Errors``).
AUTH_DISABLED: Final = "Delegation Token feature is not enabled."
NOT_FOUND: Final = "Delegation Token is not found on server."
EXPIRED: Final = "Delegation Token is expired."
OWNER_MISMATCH: Final = "Specified Principal is not valid Owner/Renewer."
# The record encoding's limit on a string (int16 length).
_MAX_PRINCIPAL_BYTES: Final = (1 << 15) - 1
_INT64_MAX: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class CreateDelegationTokenRequest:
    """CreateDelegationToken from ``requester`` (the caller's principal).

    ``owner`` None (or empty): the requester owns the token. ``renewers``
    may renew and expire it besides the owner. ``max_lifetime_ms`` <= 0:
    the configured max lifetime.
    """

    requester: str
    owner: str | None
    renewers: tuple[str, ...]
    max_lifetime_ms: int


@dataclass(frozen=True, slots=True)
class CreateDelegationTokenResult:
    """The CreateDelegationToken answer. ``owner`` and ``requester`` are set
    on errors too (Kafka's response names them whatever the outcome); the
    token fields only on success."""

    error: ErrorCode
    message: str | None = None
    owner: str = ""
    requester: str = ""
    issue_timestamp: int = -1
    expiry_timestamp: int = -1
    max_timestamp: int = -1
    token_id: str = ""
    hmac: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class RenewDelegationTokenRequest:
    """RenewDelegationToken of the token with ``hmac``; ``renew_period_ms``
    <= 0: the configured expiry time."""

    requester: str
    hmac: bytes = field(repr=False)
    renew_period_ms: int


@dataclass(frozen=True, slots=True)
class ExpireDelegationTokenRequest:
    """ExpireDelegationToken of the token with ``hmac``; a negative
    ``expiry_time_period_ms`` removes it at once."""

    requester: str
    hmac: bytes = field(repr=False)
    expiry_time_period_ms: int


@dataclass(frozen=True, slots=True)
class DelegationTokenExpiryResult:
    """The Renew/ExpireDelegationToken answer: the token's expiry timestamp
    on success (an immediate expire echoes its negative period)."""

    error: ErrorCode
    message: str | None = None
    expiry_timestamp: int = -1


def create_delegation_token(
    image: MetadataImage,
    request: CreateDelegationTokenRequest,
    config: ControllerConfig,
    *,
    next_offset: int,
    now_ms: int,
) -> ControllerResult[CreateDelegationTokenResult]:
    """CreateDelegationToken: one DelegationTokenRecord, or an error and
    none (see the module docstring). ``next_offset`` is the metadata log
    offset the record will get (it seeds the token id). Raises ValueError
    if ``request.requester`` is not ``Type:name`` (the caller's own
    principal: caller misuse)."""
    principal_type(request.requester)
    settings = config.delegation_tokens
    owner = request.owner or request.requester
    secret_key = settings.secret_key
    if not secret_key:
        return _create_refused(request, owner, ErrorCode.delegation_token_auth_disabled,
                               AUTH_DISABLED)
    refused = _create_refusal(request, owner)
    if refused is not None:
        return _create_refused(request, owner, *refused)
    lifetime_ms = settings.max_lifetime_ms
    if request.max_lifetime_ms > 0:
        lifetime_ms = min(lifetime_ms, request.max_lifetime_ms)
    # Saturate rather than leave int64 (Kafka's long would wrap around).
    max_timestamp = min(now_ms + lifetime_ms, _INT64_MAX)
    expiry_timestamp = min(max_timestamp, now_ms + settings.expiry_time_ms)
    token_id = new_token_id(image, config, next_offset)
    record = DelegationTokenRecord(
        owner=owner, requester=request.requester, renewers=request.renewers,
        issue_timestamp=now_ms, max_timestamp=max_timestamp,
        expiration_timestamp=expiry_timestamp, token_id=token_id)
    return ControllerResult((record,), CreateDelegationTokenResult(
        ErrorCode.none, None, owner=owner, requester=request.requester,
        issue_timestamp=now_ms, expiry_timestamp=expiry_timestamp,
        max_timestamp=max_timestamp, token_id=token_id,
        hmac=token_hmac(secret_key, token_id)))


def renew_delegation_token(
    image: MetadataImage,
    request: RenewDelegationTokenRequest,
    config: ControllerConfig,
    *,
    now_ms: int,
) -> ControllerResult[DelegationTokenExpiryResult]:
    """RenewDelegationToken: the token again with its new expiration, or an
    error and no record (see the module docstring)."""
    settings = config.delegation_tokens
    found = _token_for(image, settings, request.requester, request.hmac, now_ms)
    if isinstance(found, DelegationTokenExpiryResult):
        return ControllerResult((), found)
    period_ms = settings.expiry_time_ms
    if request.renew_period_ms > 0:
        period_ms = min(period_ms, request.renew_period_ms)
    expiry_timestamp = min(found.max_timestamp, now_ms + period_ms)
    return ControllerResult(
        (replace(found, expiration_timestamp=expiry_timestamp),),
        DelegationTokenExpiryResult(ErrorCode.none, None, expiry_timestamp))


def expire_delegation_token(
    image: MetadataImage,
    request: ExpireDelegationTokenRequest,
    config: ControllerConfig,
    *,
    now_ms: int,
) -> ControllerResult[DelegationTokenExpiryResult]:
    """ExpireDelegationToken: a RemoveDelegationTokenRecord (negative
    period) or the token with its new expiration, or an error and no record
    (see the module docstring)."""
    found = _token_for(image, config.delegation_tokens, request.requester, request.hmac,
                       now_ms)
    if isinstance(found, DelegationTokenExpiryResult):
        return ControllerResult((), found)
    period_ms = request.expiry_time_period_ms
    if period_ms < 0:
        return ControllerResult((RemoveDelegationTokenRecord(found.token_id),),
                                DelegationTokenExpiryResult(ErrorCode.none, None, period_ms))
    expiry_timestamp = min(found.max_timestamp, now_ms + period_ms)
    return ControllerResult(
        (replace(found, expiration_timestamp=expiry_timestamp),),
        DelegationTokenExpiryResult(ErrorCode.none, None, expiry_timestamp))


def sweep_expired_delegation_tokens(
    image: MetadataImage, *, now_ms: int
) -> tuple[RemoveDelegationTokenRecord, ...]:
    """A RemoveDelegationTokenRecord for each token whose max timestamp or
    expiration is before ``now_ms``, in the image's order. The caller runs
    it only while tokens are enabled (the facade's ``tick``)."""
    return tuple(RemoveDelegationTokenRecord(token.token_id)
                 for token in image.delegation_tokens.values() if _expired(token, now_ms))


def new_token_id(image: MetadataImage, config: ControllerConfig, offset: int) -> str:
    """The id of the token whose record gets metadata log ``offset``: a
    ``Uuid`` derived from the cluster id and the offset, as Kafka prints
    one, never a token's id already in ``image``, never one Kafka's ``Uuid``
    reserves or prints with a leading ``-``."""
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog-delegation-token:{config.cluster_id}")
    attempt = 0
    while True:
        candidate = uuid.uuid5(namespace, f"{offset}/{attempt}")
        token_id = kafka_uuid.to_text(candidate)
        if kafka_uuid.usable(candidate) and token_id not in image.delegation_tokens:
            return token_id
        attempt += 1


def _create_refused(
    request: CreateDelegationTokenRequest, owner: str, error: ErrorCode, message: str,
) -> ControllerResult[CreateDelegationTokenResult]:
    return ControllerResult((), CreateDelegationTokenResult(
        error, message, owner=owner, requester=request.requester))


def _create_refusal(
    request: CreateDelegationTokenRequest, owner: str
) -> tuple[ErrorCode, str] | None:
    """Why an enabled controller refuses ``request``, or None."""
    for principal in (owner, request.requester, *request.renewers):
        if len(principal.encode("utf-8")) > _MAX_PRINCIPAL_BYTES:
            return ErrorCode.invalid_request, (
                f"Principal is longer than {_MAX_PRINCIPAL_BYTES} bytes")
    try:
        principal_type(owner)
    except ValueError as exc:
        return ErrorCode.invalid_request, str(exc)
    for renewer in request.renewers:
        try:
            kind = principal_type(renewer)
        except ValueError as exc:
            return ErrorCode.invalid_principal_type, str(exc)
        if kind != USER_TYPE:
            return ErrorCode.invalid_principal_type, (
                f"Renewer principal type must be {USER_TYPE}, not {kind}")
    return None


def _token_for(
    image: MetadataImage, settings: DelegationTokenSettings, requester: str, hmac: bytes,
    now_ms: int,
) -> DelegationTokenRecord | DelegationTokenExpiryResult:
    """The token Renew/Expire may change, or the refusal, checked in Kafka's order."""
    if not settings.secret_key:
        return DelegationTokenExpiryResult(ErrorCode.delegation_token_auth_disabled,
                                           AUTH_DISABLED)
    token = find_token_by_hmac(image.delegation_tokens, settings.secret_key, hmac)
    if token is None:
        return DelegationTokenExpiryResult(ErrorCode.delegation_token_not_found, NOT_FOUND)
    if _expired(token, now_ms):
        return DelegationTokenExpiryResult(ErrorCode.delegation_token_expired, EXPIRED)
    if requester != token.owner and requester not in token.renewers:
        return DelegationTokenExpiryResult(ErrorCode.delegation_token_owner_mismatch,
                                           OWNER_MISMATCH)
    return token


def _expired(token: DelegationTokenRecord, now_ms: int) -> bool:
    return token.max_timestamp < now_ms or token.expiration_timestamp < now_ms
