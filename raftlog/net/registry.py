"""Which Kafka APIs and versions exist, and their kio schema classes.

Everything here is derived from kio's generated index (``kio.schema.index``),
which kio builds from Kafka's ``clients/src/main/resources/common/message``
JSON files. Version ranges come from the index without importing any schema
module; schema classes are imported lazily and cached, because importing all
~300 request/response pairs costs about two seconds.

Flexible versions (KIP-482): each kio payload class carries ``__flexible__``
and ``__header_schema__``. The request header is v2 (compact client id
excluded, tagged fields) exactly when the request version is flexible, else
v1; the response header is v1 when the response is flexible, else v0, with
Kafka's one exception, ApiVersions, whose response header is always v0 so
that a client can read it before it knows what the broker supports. kio
encodes that exception in ``ApiVersionsResponse.__header_schema__``, so the
codec asks the payload class for its header schema rather than deciding
itself.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.static.protocol import RequestPayload, ResponsePayload

from raftlog.net.errors import UnknownApiKeyError, UnsupportedVersionError, VersionConversionError

__all__ = (
    "API_VERSIONS_KEY",
    "KIO_API_KEYS",
    "ApiSchemas",
    "api_name",
    "api_registry",
    "convert_request",
    "is_flexible",
    "kio_version_range",
    "schemas",
)

API_VERSIONS_KEY: Final = 18

KIO_API_KEYS: Final[frozenset[int]] = frozenset(api_key_map)
"""Every API key kio has request/response schemas for."""


@dataclass(frozen=True, slots=True)
class ApiSchemas:
    """The kio request and response classes of one (api_key, version)."""

    api_key: int
    version: int
    request: type[RequestPayload]
    response: type[ResponsePayload]

    def __post_init__(self) -> None:
        # Invariant: kio's classes agree with the index entry they came from.
        assert self.request.__api_key__ == self.api_key == self.response.__api_key__
        assert self.request.__version__ == self.version == self.response.__version__
        assert self.request.__type__ is EntityType.request
        assert self.response.__type__ is EntityType.response


def api_name(api_key: int) -> str:
    """kio's snake_case name of ``api_key`` (``3`` -> ``"metadata"``).

    Raises UnknownApiKeyError for a key kio does not know.
    """
    try:
        return api_key_map[api_key]
    except KeyError:
        raise UnknownApiKeyError(api_key) from None


@functools.cache
def _versions(api_key: int) -> frozenset[int]:
    return frozenset(schema_name_map[api_name(api_key)])


@functools.cache  # known keys only: an unknown one raises, which is not cached
def kio_version_range(api_key: int) -> tuple[int, int]:
    """The inclusive (min, max) versions kio has schemas for.

    Raises UnknownApiKeyError.
    """
    versions = _versions(api_key)
    return min(versions), max(versions)


@functools.cache
def schemas(api_key: int, version: int) -> ApiSchemas:
    """The request/response classes of ``(api_key, version)``, imported lazily
    (kio's, or `raftlog.net.kio_fixes`' where kio cannot carry a value).

    Raises UnknownApiKeyError, or UnsupportedVersionError when kio has no
    schema for that version.
    """
    if version not in _versions(api_key):
        raise UnsupportedVersionError(api_key, version, kio_version_range(api_key))
    from raftlog.net.kio_fixes import RESPONSE_OVERRIDES

    response = RESPONSE_OVERRIDES.get((api_key, version)) or load_response_schema(
        api_key, version)
    return ApiSchemas(
        api_key=api_key,
        version=version,
        request=load_request_schema(api_key, version),
        response=response,
    )


def api_registry(api_keys: typing.Iterable[int] | None = None) -> dict[int, dict[int, ApiSchemas]]:
    """``api_key -> {version: ApiSchemas}`` for ``api_keys`` (default: all of kio's).

    Importing everything takes seconds; pass the keys you serve.
    """
    keys = sorted(KIO_API_KEYS if api_keys is None else api_keys)
    return {key: {v: schemas(key, v) for v in sorted(_versions(key))} for key in keys}


# Read for every request header: cached, bounded (the version comes off the wire).
@functools.lru_cache(maxsize=4096)
def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``(api_key, version)`` uses flexible encoding (KIP-482).

    For a version above kio's newest, the newest version's answer is used:
    Kafka never makes a flexible API non-flexible again, and the server needs
    this to read the header of an ApiVersions request from a newer client.
    Raises UnknownApiKeyError.
    """
    low, high = kio_version_range(api_key)
    known = min(max(version, low), high)
    return schemas(api_key, known).request.__flexible__


# --- version conversion ------------------------------------------------------

_MISSING: Final = dataclasses.MISSING


def _is_default_like(value: object, field: dataclasses.Field[Any]) -> bool:
    """Whether dropping ``value`` loses nothing: it is the field's default.

    kio declares explicit defaults only for tagged fields; for the others we
    accept the values Kafka's message JSON uses as defaults: zero, -1 ("none"
    for ids and epochs), empty, null, false.
    """
    if field.default is not _MISSING and value == field.default:
        return True
    if isinstance(value, bool):
        return value is False
    if isinstance(value, int):
        return value in (0, -1)
    if isinstance(value, timedelta):
        return value == timedelta(0)
    if isinstance(value, uuid.UUID):
        return value.int == 0
    return value is None or value in ("", b"", ())


def _target_entity_type(annotation: object) -> type | None:
    """The dataclass type inside ``X``, ``X | None`` or ``tuple[X, ...]``, if any."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is tuple or origin is types.UnionType or origin is typing.Union:
        for arg in typing.get_args(annotation):
            found = _target_entity_type(arg)
            if found is not None:
                return found
    return None


def _convert_value(value: object, annotation: object, path: str) -> object:
    target = _target_entity_type(annotation)
    if target is None or value is None:
        return value
    if isinstance(value, tuple):
        return tuple(_convert_entity(item, target, f"{path}[{i}]") for i, item in enumerate(value))
    return _convert_entity(value, target, path)


def _convert_entity(source: object, target: type, path: str) -> object:
    if not dataclasses.is_dataclass(source) or isinstance(source, type):
        raise VersionConversionError(f"{path}: expected an entity, got {type(source).__name__}")
    source_fields = {f.name: f for f in dataclasses.fields(source)}
    kwargs: dict[str, object] = {}
    target_fields = dataclasses.fields(target)
    for field in target_fields:
        if field.name in source_fields:
            value = getattr(source, field.name)
            kwargs[field.name] = _convert_value(value, field.type, f"{path}.{field.name}")
        elif field.default is _MISSING and field.default_factory is _MISSING:
            raise VersionConversionError(
                f"{path}.{field.name} is required at version {target.__version__} "  # type: ignore[attr-defined]
                f"but absent from version {source.__version__}"  # type: ignore[attr-defined]
            )
    target_names = {f.name for f in target_fields}
    for name, field in source_fields.items():
        if name not in target_names and not _is_default_like(getattr(source, name), field):
            raise VersionConversionError(
                f"{path}.{name}={getattr(source, name)!r} cannot be sent at version "
                f"{target.__version__}, which lacks the field"  # type: ignore[attr-defined]
            )
    return target(**kwargs)


def convert_request(request: RequestPayload, version: int) -> RequestPayload:
    """``request`` rewritten as the kio class of the same API at ``version``.

    Fields are matched by name, recursively through nested entities. A field
    the target lacks may be dropped only while it holds a default-like value;
    a field the target requires and the source lacks is an error. Raises
    VersionConversionError, UnsupportedVersionError.
    """
    if request.__version__ == version:
        return request
    target = schemas(request.__api_key__, version).request
    return cast(RequestPayload, _convert_entity(request, target, type(request).__name__))
