"""Envelope (KIP-590): a broker forwards a client's request to the active
controller as that client.

Most forwarded requests need only what the broker checked (their ACLs) and
go to the controller as the broker itself (`data_plane.api.admin`). Some
need the client on the controller too, so the broker wraps them in an
Envelope that carries the client's principal, address and (in the inner
request's header) client id:

- the delegation-token writes (`data_plane.api.delegation_tokens`): the
  requester, owner and renewer checks;
- CreateTopics, CreatePartitions and DeleteTopics: the client's controller
  mutation quota (KIP-599, `data_plane.controller_mutation_quota`). Their
  inner version tells the controller whether the quota is strict: an older
  client's request goes at an older version (`ENVELOPED_VERSIONS`).

The controller listener serves the Envelope (`envelope_handler`): it unwraps
the request, answers it as the principal inside and wraps the answer. An
answer that is NOT_CONTROLLER throughout becomes the Envelope's own error,
so that the broker's channel tries the next controller (as for a request
forwarded bare).
"""

from __future__ import annotations

import io
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.envelope.v0 import request as envelope_req
from kio.schema.envelope.v0 import response as envelope_resp
from kio.serial import entity_reader, entity_writer

from data_plane.api.build import as_values, build, response_class
from data_plane.broker.controller_channel import is_not_controller
from metadata_quorum.delegation_tokens import USER_TYPE
from raftlog.net import RequestContext
from raftlog.net.codec import decode_request, decode_response, encode_request, encode_response
from raftlog.net.errors import ErrorCode

if TYPE_CHECKING:
    from data_plane.api.common import BrokerApiContext

__all__ = (
    "ENVELOPED_VERSIONS",
    "ENVELOPE_KEY",
    "ControllerHandler",
    "decode_principal",
    "encode_principal",
    "envelope_handler",
    "forward_enveloped",
)

log = logging.getLogger(__name__)

ENVELOPE_KEY: Final = 58

#: The requests an Envelope may carry to this project's controllers, and at
#: which versions (api key -> (min, max)).
ENVELOPED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    38: (3, 3),  # CreateDelegationToken
    39: (2, 2),  # RenewDelegationToken
    40: (2, 2),  # ExpireDelegationToken
    19: (5, 7),  # CreateTopics: v5 for clients before v6 (permissive quota)
    37: (2, 3),  # CreatePartitions: v2 for clients before v3
    20: (4, 6),  # DeleteTopics: v4 (by name) for clients before v5
}

ControllerHandler = Callable[[RequestContext, Any], Awaitable[Any]]


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def encode_principal(principal: str, token_authenticated: bool) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder serialisation: the version (int16)
    then DefaultPrincipalData v0."""
    kind, name = _split(principal)
    data = DefaultPrincipalData(type_=kind, name=name, token_authenticated=token_authenticated)
    buffer = io.BytesIO()
    buffer.write((0).to_bytes(2, "big"))
    entity_writer(DefaultPrincipalData)(buffer, data)
    return buffer.getvalue()


def decode_principal(data: bytes) -> tuple[str, bool]:
    """(``Type:name``, token authenticated) of `encode_principal`'s bytes.
    Raises ValueError for another version or malformed bytes."""
    if len(data) < 2 or int.from_bytes(data[:2], "big", signed=True) != 0:
        raise ValueError("unknown principal data version")
    try:
        decoded, _ = entity_reader(DefaultPrincipalData)(data, 2)
    except Exception as exc:
        raise ValueError(f"malformed principal data: {exc!r}") from None
    if not decoded.type_ or not decoded.name:
        raise ValueError(f"a principal needs a type and a name: {decoded.type_}:{decoded.name}")
    return f"{decoded.type_}:{decoded.name}", bool(decoded.token_authenticated)


async def forward_enveloped(api: BrokerApiContext, ctx: RequestContext, inner: Any) -> Any:
    """``inner`` (a kio request at one of `ENVELOPED_VERSIONS`) answered by
    the active controller as the client of ``ctx``: the controller's answer
    at ``inner``'s version, or None when the channel failed or the
    controller refused the Envelope (the outcome is unknown)."""
    api_key = int(inner.__api_key__)
    envelope = envelope_req.EnvelopeRequest(
        request_data=encode_request(inner, 0, ctx.client_id)[4:],
        request_principal=encode_principal(f"{USER_TYPE}:{ctx.user}", ctx.token_authenticated),
        client_host_address=_address_bytes(ctx.peer),
    )
    try:
        answer: Any = await api.metadata.forward(ENVELOPE_KEY, envelope)
    except Exception as exc:
        log.warning("forwarding api key %d in an envelope failed: %r", api_key, exc)
        return None
    if answer.error_code != ErrorCode.none or answer.response_data is None:
        log.warning("the controller refused an envelope (api key %d): %s", api_key,
                    ErrorCode(answer.error_code).name)
        return None
    _, inner_answer = decode_response(answer.response_data, response_class(inner))
    return inner_answer


def _address_bytes(peer: tuple[str, int] | None) -> bytes:
    if peer is None:
        return b""
    try:
        return ipaddress.ip_address(peer[0]).packed
    except ValueError:
        return b""


def envelope_handler(handlers: Mapping[int, ControllerHandler]) -> ControllerHandler:
    """The controller listener's Envelope: the embedded request (one of
    `ENVELOPED_VERSIONS` that ``handlers`` serve) answered by its handler
    under the embedded principal, with the inner header's client id and
    version in the context, and answered at that version. INVALID_REQUEST for anything else (Kafka's
    answer to an envelope it cannot unwrap), PRINCIPAL_DESERIALIZATION_FAILURE
    for a principal it cannot read, NOT_CONTROLLER when the answer is."""

    async def envelope(ctx: RequestContext, body: Any) -> Any:
        def refused(error: ErrorCode) -> Any:
            return envelope_resp.EnvelopeResponse(response_data=None, error_code=error)

        try:
            principal, token_authenticated = decode_principal(body.request_principal or b"")
        except ValueError as exc:
            log.warning("envelope from %s: %s", ctx.peer, exc)
            return refused(ErrorCode.principal_deserialization_failure)
        try:
            decoded = decode_request(bytes(body.request_data))
        except Exception as exc:
            log.warning("envelope from %s: cannot read the request: %r", ctx.peer, exc)
            return refused(ErrorCode.invalid_request)
        header = decoded.header
        handler = handlers.get(header.api_key)
        versions = ENVELOPED_VERSIONS.get(header.api_key)
        if handler is None or versions is None \
                or not versions[0] <= header.api_version <= versions[1]:
            return refused(ErrorCode.invalid_request)
        kind, name = _split(principal)
        if kind != USER_TYPE:
            # A request context holds a user (``User:<name>``), as every
            # principal this project's listeners authenticate is.
            log.warning("envelope from %s: principal %s is not a User", ctx.peer, principal)
            return refused(ErrorCode.principal_deserialization_failure)
        inner = RequestContext(
            api_key=header.api_key, api_version=header.api_version,
            correlation_id=header.correlation_id, client_id=header.client_id,
            peer=ctx.peer, listener_name=ctx.listener_name,
            user=name, token_authenticated=token_authenticated)
        answer = await handler(inner, decoded.body)
        if is_not_controller(answer):
            return refused(ErrorCode.not_controller)
        asked = response_class(decoded.body)
        if type(answer) is not asked:  # a handler answering at its own version
            answer = build(asked, as_values(answer))
        return envelope_resp.EnvelopeResponse(
            response_data=encode_response(answer, header.correlation_id)[4:],
            error_code=ErrorCode.none)

    return envelope
