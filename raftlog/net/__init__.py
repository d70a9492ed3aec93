"""Kafka-protocol transport: framing, headers and ApiVersions over asyncio, encoded by kio.

Sans-I/O core: ``codec`` (frames, headers, bodies), ``api_versions``,
``connection`` (server/client protocol state), ``registry`` (APIs and
versions from kio). Shells: ``server.KafkaProtocolServer``,
``client.KafkaProtocolClient`` and ``client.NetworkClient``.
"""

from raftlog.net.client import (
    PLAINTEXT_SECURITY,
    ConnectionSecurity,
    KafkaProtocolClient,
    NetworkClient,
)
from raftlog.net.codec import DEFAULT_MAX_REQUEST_BYTES, FrameDecoder
from raftlog.net.errors import (
    ConnectFailedError,
    DisconnectedError,
    ErrorCode,
    KafkaApiError,
    ProtocolError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from raftlog.net.registry import ApiSchemas, api_registry, schemas
from raftlog.net.server import (
    NO_RESPONSE,
    EncodedBody,
    Handler,
    KafkaProtocolServer,
    NoResponse,
    RequestContext,
)

__all__ = (
    "DEFAULT_MAX_REQUEST_BYTES",
    "NO_RESPONSE",
    "PLAINTEXT_SECURITY",
    "ApiSchemas",
    "ConnectFailedError",
    "ConnectionSecurity",
    "DisconnectedError",
    "EncodedBody",
    "ErrorCode",
    "FrameDecoder",
    "Handler",
    "KafkaApiError",
    "KafkaProtocolClient",
    "KafkaProtocolServer",
    "NetworkClient",
    "NoResponse",
    "ProtocolError",
    "RequestContext",
    "RequestTimeoutError",
    "UnsupportedVersionError",
    "api_registry",
    "schemas",
)
