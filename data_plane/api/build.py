"""Build a kio entity at any version from one version-independent description.

Handlers describe a response once, as nested mappings keyed by kio field
names (a superset over the versions they serve). `build` keeps the fields
the target class has, drops the others (a field a version lacks is simply
not on the wire at that version, as in Kafka's generated code), converts
nested mappings to the nested entity classes by annotation, and fills any
field the description omits with its default or Kafka's empty value.

This is deliberately lenient, unlike `raftlog.net.registry.convert_request`:
a response can always be *answered* at an older version, losing only what
the older client could not read anyway (leader hints, tagged fields).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from kio.serial._implicit_defaults import get_implicit_default

from raftlog.net.errors import ErrorCode

__all__ = ("as_values", "build", "field_names", "response_class")

T = TypeVar("T")

_FIELDS_CACHE: dict[type, tuple[dataclasses.Field[Any], ...]] = {}


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    cached = _FIELDS_CACHE.get(cls)
    if cached is None:
        cached = _FIELDS_CACHE[cls] = dataclasses.fields(cls)
    return cached


def field_names(cls: type) -> frozenset[str]:
    """The field names of kio entity class ``cls``."""
    return frozenset(f.name for f in _fields(cls))


def response_class(request: object) -> type[Any]:
    """The kio response class matching a kio request entity's API and version."""
    from raftlog.net.registry import schemas

    return schemas(int(request.__api_key__), int(request.__version__)).response  # type: ignore[attr-defined]


def as_values(entity: object) -> Any:
    """A kio entity as nested dicts and lists (for `build` at another
    version: a forwarded request's answer rebuilt at the client's)."""
    if dataclasses.is_dataclass(entity) and not isinstance(entity, type):
        return {f.name: as_values(getattr(entity, f.name)) for f in dataclasses.fields(entity)}
    if isinstance(entity, tuple):
        return [as_values(v) for v in entity]
    return entity


def build(cls: type[T], values: Mapping[str, object]) -> T:
    """``cls(**values)`` with version leniency (see the module docstring).

    Raises TypeError if a value cannot be converted to its field's type.
    """
    kwargs: dict[str, object] = {}
    for field in _fields(cls):
        if field.name in values:
            kwargs[field.name] = _convert(values[field.name], field.type)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            kwargs[field.name] = _empty(field.type, field.name)
    return cls(**kwargs)


def _entity_type(annotation: object) -> type | None:
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is tuple or origin is types.UnionType or origin is typing.Union:
        for arg in typing.get_args(annotation):
            found = _entity_type(arg)
            if found is not None:
                return found
    return None


def _convert(value: object, annotation: object) -> object:
    if value is None:
        return None
    entity = _entity_type(annotation)
    if entity is None:
        if isinstance(value, list):
            return tuple(value)
        return value
    if isinstance(value, Mapping):
        return build(entity, value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return tuple(build(entity, v) if isinstance(v, Mapping) else v for v in value)
    return value


def _empty(annotation: object, name: str) -> object:
    if annotation is ErrorCode:
        return ErrorCode.none
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return ()
    if (origin is types.UnionType or origin is typing.Union) and (
        types.NoneType in typing.get_args(annotation)
    ):
        return None
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return build(annotation, {})
    if annotation is bool:
        return False
    if annotation is uuid.UUID:
        return uuid.UUID(int=0)
    if annotation is datetime.timedelta:
        return datetime.timedelta(0)
    try:
        return get_implicit_default(annotation)  # type: ignore[arg-type]
    except Exception as e:
        raise TypeError(f"no empty value for field {name}: {annotation!r}") from e
