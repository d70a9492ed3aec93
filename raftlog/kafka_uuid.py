"""Kafka's UUIDs as text: 22 characters of unpadded base64url.

Kafka prints a ``Uuid`` (cluster ids, topic ids, directory ids) as base64url
without padding. Its ``Uuid.randomUuid`` never returns the two reserved ids
(all zeros, and the metadata topic's id 1) nor one whose text starts with
``-``, because such a string reads as an option on a command line
(``--cluster-id -Hac...``). Every id raftlog draws or derives keeps the same
rules, through :func:`usable`.
"""

from __future__ import annotations

import base64
import uuid
from typing import Final

RESERVED: Final = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})
"""``Uuid.ZERO_UUID`` and ``Uuid.METADATA_TOPIC_ID``."""


def to_text(value: uuid.UUID) -> str:
    """The 22-character base64url text Kafka prints for ``value``."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def from_text(text: str) -> uuid.UUID:
    """Parse Kafka's UUID text; ``ValueError`` if it is not 16 bytes of base64url."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{text!r} is not a base64url UUID") from exc
    if len(text) != 22 or len(raw) != 16:
        raise ValueError(f"{text!r} is not a base64url UUID")
    return uuid.UUID(bytes=raw)


def usable(value: uuid.UUID) -> bool:
    """True unless ``value`` is reserved or its text starts with ``-``."""
    return value not in RESERVED and not to_text(value).startswith("-")


def random_uuid() -> uuid.UUID:
    """A random UUID that :func:`usable` accepts, like ``Uuid.randomUuid``."""
    while True:
        candidate = uuid.uuid4()
        if usable(candidate):
            return candidate
