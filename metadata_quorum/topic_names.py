"""Kafka's topic-name rules (``org.apache.kafka.common.internals.Topic``), as facts re-stated.

- legal characters: ASCII letters, digits, ``.``, ``_`` and ``-``;
- at most 249 characters (so that ``<topic>-<partition>`` directory names
  plus a suffix fit in 255);
- not ``.`` or ``..``;
- ``.`` and ``_`` collide in metric names, so two topics whose names differ
  only by those characters may not both exist (checked by the controller).
"""

from __future__ import annotations

import re

MAX_TOPIC_NAME_LENGTH = 249
#: Kafka's ``Topic.INTERNAL_TOPICS``: the coordinators' topics. Metadata
#: marks them internal; clients may not produce to them.
GROUP_METADATA_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC})
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: object) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is (anything
    may arrive: the check comes before any other use)."""
    if not isinstance(name, str):
        return f"topic name must be a string, got {type(name).__name__}"
    if name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}..."
        )
    if _LEGAL.fullmatch(name) is None:
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def has_collision_chars(name: str) -> bool:
    """Whether ``name`` holds a character that collides in metric names."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """The collision class of ``name``: two topics collide iff these are equal."""
    return name.replace(".", "_")
