"""The consumer's embedded protocol in classic groups: ConsumerProtocolSubscription
(a JoinGroup protocol's metadata) and ConsumerProtocolAssignment (a SyncGroup
assignment), as Kafka's ``ConsumerProtocol`` lays them out.

Both are non-flexible messages behind an int16 version:

- Subscription v0: Topics [string], UserData nullable bytes; v1 adds
  OwnedPartitions [Topic string, Partitions [int32]]; v2 adds GenerationId
  int32; v3 adds RackId nullable string.
- Assignment v0-v3: AssignedPartitions [Topic string, Partitions [int32]],
  UserData nullable bytes.

A newer version than we know is read as the newest we know (its new fields
come last), as Kafka's consumer does. The coordinator needs these only for
KIP-848's online migration: converting a classic group's members into a
consumer group, serving classic members inside one, and back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .records import CorruptOffsetsRecordError, RecordReader

__all__ = (
    "MalformedConsumerProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HIGHEST_SUBSCRIPTION_VERSION = 3
_HIGHEST_ASSIGNMENT_VERSION = 3

#: (topic name, partitions), as the embedded protocol groups them.
TopicPartitionsByName = tuple[tuple[str, tuple[int, ...]], ...]


class MalformedConsumerProtocolError(ValueError):
    """The bytes are not a consumer protocol message."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitionsByName = ()
    generation_id: int = -1
    rack_id: str | None = None


class _Reader(RecordReader):
    """`records.RecordReader` (int16-length strings) plus the arrays and
    nullable bytes of these messages; failures are CorruptOffsetsRecordError,
    turned into MalformedConsumerProtocolError by the decoders."""

    __slots__ = ()

    def count(self) -> int:
        n = self.i32()
        if n < 0:
            raise CorruptOffsetsRecordError(f"array count {n}")
        if n > len(self._data) - self._pos:  # every element takes a byte at least
            raise CorruptOffsetsRecordError(f"array of {n} in {len(self._data)} bytes")
        return n

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n == -1 else self._take(n)

    def topic_partitions(self) -> TopicPartitionsByName:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            out.append((topic, tuple(self.i32() for _ in range(self.count()))))
        return tuple(out)


def decode_subscription(data: bytes) -> Subscription:
    """A JoinGroup protocol's metadata; MalformedConsumerProtocolError if it
    is not a ConsumerProtocolSubscription."""
    try:
        return _subscription(_Reader(data))
    except CorruptOffsetsRecordError as exc:
        raise MalformedConsumerProtocolError(str(exc)) from None


def _subscription(r: _Reader) -> Subscription:
    version = r.i16()
    if version < 0:
        raise MalformedConsumerProtocolError(f"subscription version {version}")
    read_as = min(version, _HIGHEST_SUBSCRIPTION_VERSION)
    topics = tuple(r.string() for _ in range(r.count()))
    user_data = r.nullable_bytes()
    owned: TopicPartitionsByName = ()
    generation_id = -1
    rack_id = None
    if read_as >= 1:
        owned = r.topic_partitions()
    if read_as >= 2:
        generation_id = r.i32()
    if read_as >= 3:
        rack_id = r.nullable_string()
    return Subscription(version, topics, user_data, owned, generation_id, rack_id)


def encode_subscription(subscription: Subscription) -> bytes:
    """The bytes of ``subscription`` at its version (tests and tools)."""
    version = min(subscription.version, _HIGHEST_SUBSCRIPTION_VERSION)
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(subscription.topics))
    for topic in subscription.topics:
        _string(out, topic)
    _nullable_bytes(out, subscription.user_data)
    if version >= 1:
        _topic_partitions(out, subscription.owned_partitions)
    if version >= 2:
        out += _I32.pack(subscription.generation_id)
    if version >= 3:
        if subscription.rack_id is None:
            out += _I16.pack(-1)
        else:
            _string(out, subscription.rack_id)
    return bytes(out)


def decode_assignment(data: bytes) -> tuple[TopicPartitionsByName, bytes | None]:
    """A SyncGroup assignment's (partitions, user data); empty bytes are an
    empty assignment (a member the leader left out)."""
    if not data:
        return (), None
    try:
        r = _Reader(data)
        version = r.i16()
        if version < 0:
            raise MalformedConsumerProtocolError(f"assignment version {version}")
        return r.topic_partitions(), r.nullable_bytes()
    except CorruptOffsetsRecordError as exc:
        raise MalformedConsumerProtocolError(str(exc)) from None


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions`` (topic name -> indexes)
    at ``version`` (capped at the newest we know), without user data."""
    version = max(0, min(version, _HIGHEST_ASSIGNMENT_VERSION))
    out = bytearray(_I16.pack(version))
    _topic_partitions(out, tuple((t, tuple(sorted(p))) for t, p in sorted(partitions.items())))
    out += _I32.pack(-1)
    return bytes(out)


def _string(out: bytearray, text: str) -> None:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes")
    out += _I16.pack(len(data)) + data


def _nullable_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(data)) + data


def _topic_partitions(out: bytearray, topics: TopicPartitionsByName) -> None:
    out += _I32.pack(len(topics))
    for topic, partitions in topics:
        _string(out, topic)
        out += _I32.pack(len(partitions))
        for p in partitions:
            out += _I32.pack(p)
