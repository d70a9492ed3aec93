"""Hypothesis strategies for hostile but wire-valid Kafka requests, from kio's
classes: each field draws from a vocabulary keyed by its name
(``Class.field`` first, then ``field``; only value fields, never lists of
entities), else from its wire type, boundary values first. Timedelta fields
draw milliseconds from ``vocabulary["<timedelta>"]`` if given.

`over_the_wire` writes a drawn request with kio's writer and reads it back,
so a handler sees only what a peer could send (NaN floats included)."""

from __future__ import annotations

import dataclasses
import datetime
import io
import typing
from typing import Any

from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

Vocabulary = dict[str, st.SearchStrategy[Any]]
TIMEDELTA = "<timedelta>"
__all__ = ("TIMEDELTA", "Vocabulary", "over_the_wire", "requests_of")
_INT_BOUNDS = {"int8": 2**7, "int16": 2**15, "int32": 2**31, "int64": 2**63}


def _field_strategy(owner: type, f: dataclasses.Field[Any], hint: Any,
                    vocabulary: Vocabulary) -> st.SearchStrategy[Any]:
    if "kafka_type" in f.metadata:  # a value or a list of values, not entities
        named = vocabulary.get(f"{owner.__name__}.{f.name}")
        if named is None:
            named = vocabulary.get(f.name)
        if named is not None:
            nullable = type(None) in typing.get_args(hint)
            return named if nullable else named.filter(lambda value: value is not None)
    args = typing.get_args(hint)
    if type(None) in args:  # nullable
        inner = next(a for a in args if a is not type(None))
        return st.one_of(st.none(), _value_strategy(inner, f, vocabulary))
    return _value_strategy(hint, f, vocabulary)


def _value_strategy(hint: Any, f: dataclasses.Field[Any],
                    vocabulary: Vocabulary) -> st.SearchStrategy[Any]:
    if typing.get_origin(hint) is tuple:
        element = typing.get_args(hint)[0]
        return st.lists(_value_strategy(element, f, vocabulary), max_size=3).map(tuple)
    if dataclasses.is_dataclass(hint):
        return requests_of(typing.cast(type, hint), vocabulary)
    kind = f.metadata.get("kafka_type")
    if kind in _INT_BOUNDS:
        bound = _INT_BOUNDS[kind]
        return st.one_of(st.sampled_from([-1, 0, 1, 2, 3]), st.integers(-bound, bound - 1))
    if kind == "uint16":
        return st.integers(0, 2**16 - 1)
    if kind == "bool":
        return st.booleans()
    if kind == "string":
        return st.text(max_size=6)
    if kind == "bytes":
        return st.binary(max_size=16)
    if kind == "uuid":
        return st.uuids()
    if kind == "float64":
        return st.floats()
    if kind in ("timedelta_i32", "timedelta_i64"):
        return vocabulary.get(TIMEDELTA, st.sampled_from([0, 1, 100, 30_000]))
    raise AssertionError(f"no strategy for {f.name}: {kind} {hint}")


def requests_of(cls: type, vocabulary: Vocabulary) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{
        f.name: _field_strategy(cls, f, hints[f.name], vocabulary)
        for f in dataclasses.fields(cls)})


def _timedelta_fields(value: Any) -> Any:
    """kio keeps timedelta fields as ``datetime.timedelta``: turn the drawn ms into one."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        current = getattr(value, f.name)
        if f.metadata.get("kafka_type") in ("timedelta_i32", "timedelta_i64"):
            changes[f.name] = datetime.timedelta(milliseconds=current)
        elif isinstance(current, tuple):
            changes[f.name] = tuple(_timedelta_fields(v) for v in current)
        elif dataclasses.is_dataclass(current):
            changes[f.name] = _timedelta_fields(current)
    return dataclasses.replace(value, **changes)


def over_the_wire(request: Any) -> Any:
    """``request`` as the handler would get it from a peer: written, then read."""
    request = _timedelta_fields(request)
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)
    data = buffer.getvalue()
    decoded, size = entity_reader(type(request))(memoryview(data), 0)
    assert size == len(data)
    return decoded
