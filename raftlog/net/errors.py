"""Typed errors of the Kafka-protocol transport, and Kafka's error codes.

Error codes: kio ships Kafka's full ``Errors.java`` table as
``kio.schema.errors.ErrorCode`` (an ``IntEnum`` with Kafka's numbers and each
code's ``retriable`` flag, e.g. ``ErrorCode.not_leader_or_follower`` = 6,
retriable). We reuse it rather than keep a second copy that could drift; the
codes this project relies on are pinned by a unit test.

Exception tiers (STYLE.md section 8):

- ``ProtocolError`` and its subclasses: bad peer input found by the sans-I/O
  codec. The shells log and close the connection; they never crash the node.
- ``TransportError`` and its subclasses: what a caller of the client sees
  (timeouts, lost connections, a peer that does not support a version).
- ``KafkaApiError``: raised by a request handler to ask the server to answer
  with an error code instead of a normal body.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = (
    "ApiVersionsNegotiationError",
    "ConnectFailedError",
    "DisconnectedError",
    "ErrorCode",
    "FrameTooLargeError",
    "InvalidFrameError",
    "KafkaApiError",
    "NetError",
    "ProtocolError",
    "RequestDecodeError",
    "RequestTimeoutError",
    "ResponseDecodeError",
    "SaslAuthenticationFailedError",
    "TlsHandshakeFailedError",
    "TransportError",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "VersionConversionError",
)


class NetError(Exception):
    """Base class of every error raised by ``raftlog.net``."""


# --- bad peer input (tier 1): close the connection, log, carry on ----------


class ProtocolError(NetError):
    """The peer sent bytes that break the Kafka protocol framing or schema."""


class InvalidFrameError(ProtocolError):
    """A frame's size prefix is negative, or the frame is too short for a header."""


class FrameTooLargeError(ProtocolError):
    """A frame's size prefix exceeds the limit (``socket.request.max.bytes``).

    Raised as soon as the 4-byte prefix is seen, before any body is buffered.
    """

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {max_bytes} bytes")
        self.size = size
        self.max_bytes = max_bytes


class UnknownApiKeyError(ProtocolError):
    """A request names an API key that kio (and hence this node) does not know."""

    def __init__(self, api_key: int) -> None:
        super().__init__(f"unknown api key {api_key}")
        self.api_key = api_key


class UnsupportedVersionError(ProtocolError):
    """An API version outside the supported range (ours, or the peer's).

    ``supported`` is the inclusive (min, max) range that is supported, or None
    when the API is not supported at all.
    """

    def __init__(self, api_key: int, api_version: int, supported: tuple[int, int] | None) -> None:
        super().__init__(
            f"api key {api_key} version {api_version} is not supported (supported: {supported})"
        )
        self.api_key = api_key
        self.api_version = api_version
        self.supported = supported


class RequestDecodeError(ProtocolError):
    """A request header or body did not decode under its schema, or had trailing bytes."""


class SessionExpiredError(ProtocolError):
    """A request other than a re-authentication after the SASL session ended
    (KIP-368): the connection closes, as Kafka closes it."""


class ResponseDecodeError(ProtocolError):
    """A response did not decode, or carried a correlation id nobody waits for."""


# --- caller-facing transport errors (tier 2) --------------------------------


class TransportError(NetError):
    """Base class of the errors a client caller should expect and may retry."""


class DisconnectedError(TransportError):
    """The connection was lost (or closed) before the response arrived.

    The request may or may not have been processed by the peer: the outcome is
    indefinite, as Kafka's NetworkException is.
    """


class ConnectFailedError(DisconnectedError):
    """Connecting to the peer failed (refused, unreachable, or timed out)."""


class SaslAuthenticationFailedError(ConnectFailedError):
    """The peer refused this client's SASL authentication (or offered no
    mechanism it has); the connection was closed."""


class TlsHandshakeFailedError(ConnectFailedError):
    """This client could not verify the peer's certificate (not signed by a
    trusted CA, or not for the host name dialled): retrying cannot mend it."""


class RequestTimeoutError(TransportError):
    """No response arrived within ``request.timeout.ms``; the outcome is indefinite."""

    def __init__(self, api_key: int, correlation_id: int, timeout_ms: int) -> None:
        super().__init__(
            f"request api_key={api_key} correlation_id={correlation_id} "
            f"timed out after {timeout_ms} ms"
        )
        self.api_key = api_key
        self.correlation_id = correlation_id
        self.timeout_ms = timeout_ms


class ApiVersionsNegotiationError(TransportError):
    """The ApiVersions handshake on connect failed (error code or no common version)."""


class VersionConversionError(NetError, ValueError):
    """A request could not be rewritten at another version without losing data.

    Like Kafka's generated code, a field that the target version lacks may be
    dropped only while it holds its default value.
    """


# --- handler-side (tier 1 for the server) -----------------------------------


class KafkaApiError(NetError):
    """Raised by a request handler: answer this request with ``error_code``.

    The server turns it into an error response when the response schema has a
    top-level ``error_code`` field; otherwise it closes the connection.
    """

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(f"{error_code.name} ({int(error_code)}): {message or ''}")
        self.error_code = error_code
        self.message = message
