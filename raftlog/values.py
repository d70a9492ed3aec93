"""Immutable value classes that are cheap to build, for the request path.

``@value`` makes a slots dataclass with field equality and a field hash
that type checkers treat as frozen (PEP 681 ``frozen_default``): assigning
a field is a mypy error, and mypy runs in strict mode over the whole tree
in CI. At run time the class is not frozen. A frozen dataclass's
``__init__`` sets every field through ``object.__setattr__``, which costs
about six times a plain slot store (825 ns against 133 ns for ten fields on
CPython 3.11), and the classes that use ``@value`` are built several times
per request on the produce and fetch paths (request headers and contexts,
batch headers, per-partition fetch requests and results).

Use ``@dataclass(frozen=True, slots=True)`` everywhere else: the run-time
check is free when nothing builds the class in bulk.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

__all__ = ("value",)

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def value(cls: type[T]) -> type[T]:
    """``@dataclass(slots=True, unsafe_hash=True)``, read as frozen by type checkers."""
    return dataclasses.dataclass(slots=True, unsafe_hash=True)(cls)
