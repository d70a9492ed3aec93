"""ApiVersions (api key 18): the server's answer and the client's negotiation.

Kafka rules followed here (KIP-35, KIP-511, ``ApiVersionsRequest.java``):

- The server advertises exactly the ranges it serves.
- A request at an ApiVersions version the server does not support is
  answered in the v0 format with UNSUPPORTED_VERSION, so that any client can
  read it; the answer still lists what the server supports (Kafka lists at
  least ApiVersions itself; we list everything, a superset), and the client
  retries with the highest ApiVersions version both support.
- From v3 on, ``client_software_name``/``client_software_version`` must match
  ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``, else INVALID_REQUEST.
- The client reads an ApiVersions response at the version it sent, falling
  back to v0 when the error code is UNSUPPORTED_VERSION.
- From v3 on the answer also carries the node's features (KIP-584, what
  ``kafka-features.sh describe`` prints, `ApiFeatures`): the levels its
  software supports, and the cluster's finalized levels with their epoch.
  In v3 a supported feature whose minimum is 0 is left out (old clients
  read a 0 minimum as invalid); v4 lists it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

from kio.schema.api_versions.v0 import response as response_v0
from kio.static.primitive import i16, i32Timedelta, i64
from kio.static.protocol import RequestPayload, ResponsePayload

from raftlog.net import registry
from raftlog.net.codec import decode_response
from raftlog.net.errors import ErrorCode, ResponseDecodeError

__all__ = (
    "ApiFeatures",
    "FeaturesSource",
    "SupportedVersions",
    "api_versions_request",
    "build_api_versions_response",
    "decode_api_versions_response",
    "negotiate",
    "validate_api_versions_request",
)

SupportedVersions = Mapping[int, tuple[int, int]]
"""``api_key -> (min_version, max_version)``, both inclusive."""

_SOFTWARE_PATTERN: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_ERROR_CODE: Final = struct.Struct(">h")
# Response header v0 is the 4-byte correlation id; the error code comes next.
_ERROR_CODE_OFFSET: Final = 4


@dataclass(frozen=True, slots=True)
class ApiFeatures:
    """A node's features for ApiVersions v3+ (KIP-584).

    ``supported``: feature -> (min, max) levels this node's software
    supports. ``finalized``: feature -> the cluster's finalized level (0, not
    finalized, is left out). ``epoch``: the metadata offset those levels were
    read at, -1 if unknown.
    """

    supported: Mapping[str, tuple[int, int]]
    finalized: Mapping[str, int]
    epoch: int = -1


FeaturesSource = Callable[[], ApiFeatures]
"""What a server asks for the features each time it answers ApiVersions."""


def _feature_fields(cls: type[ResponsePayload], version: int,
                    features: ApiFeatures) -> dict[str, object]:
    module = __import__(cls.__module__, fromlist=["SupportedFeatureKey"])
    return {
        "supported_features": tuple(
            module.SupportedFeatureKey(name=name, min_version=i16(low), max_version=i16(high))
            for name, (low, high) in sorted(features.supported.items())
            if version >= 4 or low > 0),
        "finalized_features_epoch": i64(features.epoch),
        "finalized_features": tuple(
            module.FinalizedFeatureKey(name=name, max_version_level=i16(level),
                                       min_version_level=i16(level))
            for name, level in sorted(features.finalized.items()) if level > 0),
    }


def _entries(cls: type[ResponsePayload], supported: SupportedVersions) -> tuple[object, ...]:
    # The nested ApiVersion class differs per version; fetch it by field type.
    module = __import__(cls.__module__, fromlist=["ApiVersion"])
    entry_cls = module.ApiVersion
    return tuple(
        entry_cls(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, (low, high) in sorted(supported.items())
    )


def build_api_versions_response(
    request_version: int,
    supported: SupportedVersions,
    error_code: ErrorCode = ErrorCode.none,
    features: ApiFeatures | None = None,
) -> ResponsePayload:
    """The ApiVersions response for a request at ``request_version``.

    ``supported`` must include ApiVersions (key 18) itself. An unsupported
    ``request_version`` gets the v0 format with UNSUPPORTED_VERSION.
    ``features`` go into a v3+ answer (module docstring); without them it
    says none are known (epoch -1).
    """
    low, high = supported[registry.API_VERSIONS_KEY]
    if not low <= request_version <= high:
        return response_v0.ApiVersionsResponse(
            error_code=ErrorCode.unsupported_version,
            api_keys=_entries(response_v0.ApiVersionsResponse, supported),  # type: ignore[arg-type]
        )
    cls = registry.schemas(registry.API_VERSIONS_KEY, request_version).response
    fields: dict[str, object] = {
        "error_code": error_code,
        "api_keys": _entries(cls, supported),
    }
    if request_version >= 1:
        fields["throttle_time"] = i32Timedelta.parse(timedelta(0))
    if request_version >= 3 and features is not None and error_code is ErrorCode.none:
        fields.update(_feature_fields(cls, request_version, features))
    return cls(**fields)


def validate_api_versions_request(request: RequestPayload) -> bool:
    """Kafka's ``ApiVersionsRequest.isValid``: v3+ client software name/version syntax."""
    if request.__version__ < 3:
        return True
    name = getattr(request, "client_software_name", "")
    version = getattr(request, "client_software_version", "")
    return bool(_SOFTWARE_PATTERN.fullmatch(name) and _SOFTWARE_PATTERN.fullmatch(version))


def api_versions_request(
    version: int, software_name: str = "raftlog", software_version: str = "0.1.0"
) -> RequestPayload:
    """An ApiVersions request at ``version`` (v3+ carries the client software)."""
    cls: Any = registry.schemas(registry.API_VERSIONS_KEY, version).request
    if version >= 3:
        request = cls(client_software_name=software_name, client_software_version=software_version)
    else:
        request = cls()
    return cast(RequestPayload, request)


def decode_api_versions_response(frame: bytes, sent_version: int) -> tuple[int, ResponsePayload]:
    """Read an ApiVersions response to a request sent at ``sent_version``.

    Falls back to v0 when the server answered UNSUPPORTED_VERSION (see module
    docstring). Raises ResponseDecodeError.
    """
    version = sent_version
    if len(frame) >= _ERROR_CODE_OFFSET + _ERROR_CODE.size:
        (code,) = _ERROR_CODE.unpack_from(frame, _ERROR_CODE_OFFSET)
        if code == ErrorCode.unsupported_version:
            version = 0
    cls = registry.schemas(registry.API_VERSIONS_KEY, version).response
    try:
        return decode_response(frame, cls)
    except ResponseDecodeError:
        if version == 0:
            raise
        return decode_response(frame, response_v0.ApiVersionsResponse)


def peer_versions(response: ResponsePayload) -> dict[int, tuple[int, int]]:
    """``api_key -> (min, max)`` from an ApiVersions response's ``api_keys``."""
    return {
        int(entry.api_key): (int(entry.min_version), int(entry.max_version))
        for entry in getattr(response, "api_keys", ())
    }


def negotiate(local: SupportedVersions, remote: SupportedVersions) -> dict[int, int]:
    """The highest version both sides support, per API both sides know.

    APIs without a common version are left out.
    """
    chosen: dict[int, int] = {}
    for key, (local_low, local_high) in local.items():
        if key not in remote:
            continue
        remote_low, remote_high = remote[key]
        high = min(local_high, remote_high)
        if high >= max(local_low, remote_low):
            chosen[key] = high
    return chosen
