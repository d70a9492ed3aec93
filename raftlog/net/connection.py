"""Sans-I/O connection cores: every protocol decision of the server and client.

``ServerConnection`` turns received bytes into events for the asyncio shell:
``IncomingRequest`` (run the handler), ``ImmediateResponse`` (the core
answered, e.g. ApiVersions) or ``ProtocolViolation`` (close the connection).
``ClientConnection`` allocates correlation ids, encodes requests and matches
response frames to the requests waiting for them.

Server policy, following Kafka's ``SocketServer``/``RequestContext``:

- A frame whose size prefix is negative or above ``socket.request.max.bytes``,
  a truncated or garbage header, an API key kio does not know, an API this
  server does not serve, a version outside the advertised range, or a body
  that does not decode exactly: the connection is closed (Kafka throws
  ``InvalidRequestException`` and closes). No error response is possible
  there in general, because the client could not be sure to parse it.
- ApiVersions at an unsupported version: v0-format UNSUPPORTED_VERSION answer.
- A handler that raises: if the response schema has a top-level
  ``error_code``, answer with that code (``KafkaApiError.error_code``, else
  UNKNOWN_SERVER_ERROR, like Kafka's ``getErrorResponse``) and every other
  field zero/empty; otherwise close the connection.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import kio.schema.response_header.v1 as response_header_v1
from kio.serial._implicit_defaults import get_implicit_default
from kio.static.protocol import RequestPayload, ResponsePayload

from raftlog.net import registry
from raftlog.net.api_versions import (
    FeaturesSource,
    SupportedVersions,
    build_api_versions_response,
    decode_api_versions_response,
    validate_api_versions_request,
)
from raftlog.net.codec import (
    DEFAULT_MAX_REQUEST_BYTES,
    FrameDecoder,
    RequestHeader,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_frame,
    encode_response,
    encode_response_frame,
    peek_api_key_and_version,
    peek_correlation_id,
)
from raftlog.net.errors import (
    ErrorCode,
    ProtocolError,
    RequestDecodeError,
    ResponseDecodeError,
    SessionExpiredError,
    UnsupportedVersionError,
)
from raftlog.net.sasl import (
    ANONYMOUS,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SaslServerAuthenticator,
    illegal_sasl_state_response,
)
from raftlog.values import value

__all__ = (
    "ClientConnection",
    "ImmediateResponse",
    "IncomingRequest",
    "ProtocolViolation",
    "ServerConnection",
    "ServerEvent",
    "build_error_response",
    "validate_supported",
)

_MAX_CORRELATION_ID: Final = 2**31 - 1
# Answered by the connection itself: ApiVersions, and the SASL APIs once
# authenticated (or on a listener without SASL).
_BUILT_IN: Final = frozenset({registry.API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})


@value
class IncomingRequest:
    """A decoded request the shell must hand to the handler for its API key."""

    header: RequestHeader
    body: RequestPayload
    schemas: registry.ApiSchemas


@dataclass(frozen=True, slots=True)
class ImmediateResponse:
    """A response the core produced itself; ``data`` is the whole frame
    (b"" for none). ``close``: close the connection once it is written (a
    failed SASL authentication); ``delay_ms``: stop reading and hold it that
    long first (`raftlog.net.sasl`)."""

    correlation_id: int
    data: bytes
    close: bool = False
    delay_ms: int = 0
    reason: str = ""  # why ``close``, for the log


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The peer broke the protocol; the shell logs ``error`` and closes."""

    error: ProtocolError


ServerEvent = IncomingRequest | ImmediateResponse | ProtocolViolation


def validate_supported(
    supported: SupportedVersions, handler_keys: typing.AbstractSet[int]
) -> dict[int, tuple[int, int]]:
    """Check an advertised-version table; return it with ApiVersions added.

    Every advertised key needs a handler, and every range must lie inside
    kio's schemas. ApiVersions, SaslHandshake and SaslAuthenticate (answered
    by the connection) default to kio's whole range. Raises ValueError.
    """
    table = dict(supported)
    for key in _BUILT_IN:  # served by the connection itself, on every listener
        table.setdefault(key, registry.kio_version_range(key))
    for key, (low, high) in table.items():
        if key not in _BUILT_IN and key not in handler_keys:
            raise ValueError(f"api key {key} is advertised but has no handler")
        kio_low, kio_high = registry.kio_version_range(key)
        if not kio_low <= low <= high <= kio_high:
            raise ValueError(
                f"api key {key}: range {low}..{high} is not within kio's {kio_low}..{kio_high}"
            )
    return table


class ServerConnection:
    """Protocol state of one accepted connection (sans-I/O).

    ``supported`` must already include ApiVersions (see
    ``validate_supported``). After a ``ProtocolViolation`` the connection is
    dead: later calls to ``receive_data`` return the same violation.

    With an ``authenticator`` (a SASL listener) the connection serves only
    ApiVersions and the SASL exchange until it completes (`raftlog.net.sasl`);
    ``user`` is then the authenticated name, and ``ANONYMOUS`` without one.
    ``features``: asked for the node's features (KIP-584) each time a v3+
    ApiVersions is answered; None: none are known.
    """

    def __init__(
        self,
        supported: SupportedVersions,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        authenticator: SaslServerAuthenticator | None = None,
        features: FeaturesSource | None = None,
    ) -> None:
        assert registry.API_VERSIONS_KEY in supported
        self._features = features
        for api_key in supported:
            registry.api_name(api_key)  # only keys kio knows (`_handle_frame` relies on it)
        self.supported = supported
        self._frames = FrameDecoder(max_request_bytes)
        self._max_request_bytes = max_request_bytes
        self._violation: ProtocolViolation | None = None
        self.user: str = ANONYMOUS
        #: Whether ``user`` logged in with a delegation token (KIP-48).
        self.token_authenticated = False
        self._authenticator = authenticator
        if authenticator is not None:
            # Until authenticated, frames take the SASL path (an instance
            # attribute over the method: the authenticated path pays nothing).
            self.user = ""
            self._handle_frame = self._handle_unauthenticated_frame  # type: ignore[method-assign]
            self._frames.max_frame_bytes = min(max_request_bytes,
                                               authenticator.max_receive_bytes)

    @property
    def reauthentications(self) -> int:
        """KIP-368 logins after the first on this connection."""
        return 0 if self._authenticator is None else self._authenticator.reauthentications

    @property
    def authenticated(self) -> bool:
        """True on a listener without SASL, else once the exchange completed."""
        return self._authenticator is None or self._authenticator.complete

    def receive_data(self, data: bytes) -> list[ServerEvent]:
        """Events for every frame ``data`` completes, in arrival order.

        A violation is always the last event of the list.
        """
        if self._violation is not None:
            return [self._violation]
        events: list[ServerEvent] = []
        try:
            for frame in self._frames.feed(data):
                events.append(self._handle_frame(frame))
            if self._frames.error is not None:
                raise self._frames.error
        except ProtocolError as error:
            self._violation = ProtocolViolation(error)
            events.append(self._violation)
        return events

    def _handle_frame(self, frame: bytes) -> IncomingRequest | ImmediateResponse:
        api_key, api_version = peek_api_key_and_version(frame)
        if api_key in _BUILT_IN:
            if api_key == registry.API_VERSIONS_KEY:
                return self._handle_api_versions(frame, api_version)
            self._check_supported(api_key, api_version)
            authenticator = self._authenticator
            if api_key == SASL_HANDSHAKE_KEY and authenticator is not None \
                    and authenticator.may_reauthenticate():
                # KIP-368: the client logs in again on this connection.
                authenticator.begin_reauthentication()
                self._handle_frame = self._handle_unauthenticated_frame  # type: ignore[method-assign]
                return self._handle_unauthenticated_frame(frame)
            return ImmediateResponse(*illegal_sasl_state_response(frame, api_key, api_version))
        supported = self.supported.get(api_key)
        if supported is None or not supported[0] <= api_version <= supported[1]:
            registry.api_name(api_key)  # UnknownApiKeyError for keys kio lacks
            raise UnsupportedVersionError(api_key, api_version, supported)
        header, offset = decode_request_header(frame)
        api = registry.schemas(api_key, api_version)
        body = decode_request_body(api.request, frame, offset)
        return IncomingRequest(header=header, body=body, schemas=api)

    def _check_supported(self, api_key: int, api_version: int) -> None:
        supported = self.supported.get(api_key)
        if supported is None or not supported[0] <= api_version <= supported[1]:
            registry.api_name(api_key)  # UnknownApiKeyError for keys kio lacks
            raise UnsupportedVersionError(api_key, api_version, supported)

    def _handle_unauthenticated_frame(self, frame: bytes) -> IncomingRequest | ImmediateResponse:
        """A frame before SASL authentication completed (`raftlog.net.sasl`)."""
        authenticator = self._authenticator
        assert authenticator is not None
        if authenticator.expects_raw_token:
            step = authenticator.raw_token(frame)
        else:
            api_key, api_version = peek_api_key_and_version(frame)
            if api_key == registry.API_VERSIONS_KEY:
                return self._handle_api_versions(frame, api_version)
            if api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
                raise RequestDecodeError(
                    f"unexpected request (api key {api_key}) during SASL authentication")
            self._check_supported(api_key, api_version)
            step = (authenticator.handshake(frame, api_version) if api_key == SASL_HANDSHAKE_KEY
                    else authenticator.authenticate(frame, api_version))
        if step.user is not None:
            self.user = step.user
            self.token_authenticated = authenticator.token_authenticated
            if authenticator.session_expiry_ms is None:
                del self._handle_frame  # back to the class's (authenticated) path
            else:  # the session ends (KIP-368): each request checks it first
                self._handle_frame = self._handle_session_frame  # type: ignore[method-assign]
            self._frames.max_frame_bytes = self._max_request_bytes
        return ImmediateResponse(step.correlation_id, step.data, close=step.close,
                                 delay_ms=step.delay_ms, reason=step.reason)

    def _handle_session_frame(self, frame: bytes) -> IncomingRequest | ImmediateResponse:
        """A frame on a connection whose SASL session ends (KIP-368): once it
        has ended, only a re-authentication may come (Kafka closes the
        connection on anything else)."""
        authenticator = self._authenticator
        assert authenticator is not None
        if authenticator.session_expired():
            api_key, _ = peek_api_key_and_version(frame)
            if api_key != SASL_HANDSHAKE_KEY or not authenticator.can_reauthenticate:
                raise SessionExpiredError(
                    f"the SASL session of {self.user} ended and the client did not "
                    "re-authenticate")
        return ServerConnection._handle_frame(self, frame)

    def _handle_api_versions(self, frame: bytes, api_version: int) -> ImmediateResponse:
        header, offset = decode_request_header(frame)
        low, high = self.supported[registry.API_VERSIONS_KEY]
        if not low <= api_version <= high:
            # KIP-511: do not parse a body we may not understand; answer v0.
            response = build_api_versions_response(api_version, self.supported)
        else:
            cls = registry.schemas(registry.API_VERSIONS_KEY, api_version).request
            request = decode_request_body(cls, frame, offset)
            error = (
                ErrorCode.none
                if validate_api_versions_request(request)
                else ErrorCode.invalid_request
            )
            features = None if self._features is None else self._features()
            response = build_api_versions_response(api_version, self.supported, error, features)
        return ImmediateResponse(
            correlation_id=header.correlation_id,
            data=encode_response(response, header.correlation_id),
        )

    def encode_response(self, request: IncomingRequest, body: ResponsePayload) -> bytes:
        """The framed response to ``request``.

        Raises TypeError if ``body`` is not the response class of the request's
        (api_key, version): a handler bug, never sent on the wire.
        """
        if type(body) is not request.schemas.response:
            raise TypeError(
                f"handler for api key {request.header.api_key} v{request.header.api_version} "
                f"returned {type(body).__qualname__}, expected "
                f"{request.schemas.response.__qualname__}"
            )
        return encode_response(body, request.header.correlation_id)

    def frame_encoded_response(self, request: IncomingRequest, body: bytes) -> bytes:
        """The framed response to ``request`` around ``body``, a response body
        already encoded at the request's (api_key, version): size prefix, then
        the response header of that version (v1, with an empty tagged-field
        section, for flexible versions; v0 otherwise)."""
        return encode_response_frame(
            request.header.correlation_id, _flexible_response(request.schemas.response), body
        )

    def encode_error_response(
        self, request: IncomingRequest, error_code: ErrorCode, message: str | None = None
    ) -> bytes | None:
        """An error response to ``request``, or None if its schema has no top-level error code."""
        body = build_error_response(request.schemas.response, error_code, message)
        if body is None:
            return None
        return encode_response(body, request.header.correlation_id)


def _flexible_response(cls: type[ResponsePayload]) -> bool:
    return cls.__header_schema__ is response_header_v1.ResponseHeader


def build_error_response(
    cls: type[ResponsePayload], error_code: ErrorCode, message: str | None = None
) -> ResponsePayload | None:
    """``cls`` with ``error_code`` (and ``error_message``) set, all else zero/empty.

    Returns None when ``cls`` has no top-level ``error_code`` field or a field
    cannot be given an empty value.
    """
    names = {field.name for field in dataclasses.fields(cls)}
    if "error_code" not in names:
        return None
    try:
        body = _empty_entity(cls, error_code)
    except (TypeError, KeyError, NotImplementedError):
        return None
    if message is not None and "error_message" in names:
        body = dataclasses.replace(body, error_message=message)  # type: ignore[type-var]
    return typing.cast(ResponsePayload, body)


def _empty_entity(cls: type, error_code: ErrorCode) -> object:
    kwargs: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            continue
        kwargs[field.name] = _empty_value(field.type, field.name, error_code)
    return cls(**kwargs)


def _empty_value(annotation: object, name: str, error_code: ErrorCode) -> object:
    if annotation is ErrorCode:
        return error_code if name == "error_code" else ErrorCode.none
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return ()
    if origin is types.UnionType or origin is typing.Union:
        if types.NoneType in typing.get_args(annotation):
            return None
        raise TypeError(f"cannot build an empty {annotation!r}")
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return _empty_entity(annotation, error_code)
    if isinstance(annotation, type):
        if annotation is bool:
            return False
        return get_implicit_default(annotation)
    raise TypeError(f"cannot build an empty {annotation!r}")


class ClientConnection:
    """Protocol state of one outgoing connection (sans-I/O).

    ``send_request`` registers the request under a fresh correlation id and
    returns the bytes to write; ``receive_data`` returns (correlation_id,
    response) for each response frame completed. A response nobody waits for,
    or that does not decode, raises ResponseDecodeError: the connection is
    then unusable (``ProtocolError`` subclasses are fatal here).
    """

    def __init__(self, client_id: str | None, max_response_bytes: int) -> None:
        self.client_id = client_id
        self._frames = FrameDecoder(max_response_bytes)
        self._next_correlation_id = 0
        # correlation id -> the request's (api_key, version); insertion-ordered.
        self._in_flight: dict[int, tuple[int, int]] = {}

    @property
    def in_flight(self) -> Mapping[int, tuple[int, int]]:
        """Correlation id -> (api_key, version) of requests awaiting a response."""
        return types.MappingProxyType(self._in_flight)

    def send_request(self, body: RequestPayload) -> tuple[int, bytes]:
        """Register ``body``; return its correlation id and the framed bytes to write."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) % (_MAX_CORRELATION_ID + 1)
        data = encode_request(body, correlation_id, self.client_id)
        self._in_flight[correlation_id] = (body.__api_key__, body.__version__)
        return correlation_id, data

    def send_encoded_request(self, api_key: int, version: int, body: bytes) -> tuple[int, bytes]:
        """Like `send_request` for a body already encoded at (``api_key``,
        ``version``); the response is decoded with kio's schema as usual."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) % (_MAX_CORRELATION_ID + 1)
        data = encode_request_frame(api_key, version, correlation_id, self.client_id, body)
        self._in_flight[correlation_id] = (api_key, version)
        return correlation_id, data

    def forget(self, correlation_id: int) -> None:
        """Stop waiting for ``correlation_id`` (a late response becomes an error)."""
        self._in_flight.pop(correlation_id, None)

    def receive_data(self, data: bytes) -> list[tuple[int, ResponsePayload]]:
        """Responses completed by ``data``. Raises ProtocolError (close the connection)."""
        responses: list[tuple[int, ResponsePayload]] = []
        for frame in self._frames.feed(data):
            correlation_id = peek_correlation_id(frame)
            request = self._in_flight.pop(correlation_id, None)
            if request is None:
                raise ResponseDecodeError(f"response for unknown correlation id {correlation_id}")
            api_key, version = request
            if api_key == registry.API_VERSIONS_KEY:
                _, body = decode_api_versions_response(frame, version)
            else:
                _, body = decode_response(frame, registry.schemas(api_key, version).response)
            responses.append((correlation_id, body))
        if self._frames.error is not None:
            raise self._frames.error
        return responses
