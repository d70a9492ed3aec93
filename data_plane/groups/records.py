"""``__consumer_offsets`` record keys and values, byte-compatible with Kafka.

Every record's key and value start with an int16 schema version; the rest is
Kafka's non-flexible message encoding (int16-length strings, -1 for null;
int32-length bytes; int32-count arrays). Formats, from Kafka's
``group-coordinator/src/main/resources/common/message/*.json``:

- ``OffsetCommitKey`` (key versions 0 and 1): group string, topic string,
  partition int32. We write version 1, as Kafka does.
- ``OffsetCommitValue`` v3: offset int64, leaderEpoch int32, metadata string,
  commitTimestamp int64. (v0: no leaderEpoch; v1 adds expireTimestamp int64
  after commitTimestamp, v2 drops it; v4 is flexible.) We write v3 and read
  v0-v3.
- ``GroupMetadataKey`` (key version 2): group string.
- ``GroupMetadataValue`` v3: protocolType string, generation int32, protocol
  nullable string, leader nullable string, currentStateTimestamp int64 (v2+),
  members [memberId, groupInstanceId nullable (v3+), clientId, clientHost,
  rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes,
  assignment bytes]. We write v3 and read v0-v3.

A null value is a tombstone: the topic is compacted by key, so a tombstone
deletes the offset or the group (Kafka ``GroupMetadataManager``). Key
versions 3+ belong to KIP-848 consumer groups (``consumer_records``) and
other group types; ``decode_key`` returns None for them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CorruptOffsetsRecordError(ValueError):
    """A ``__consumer_offsets`` key or value that does not parse (tier 3 on replay)."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key of a committed offset: one per (group, topic, partition)."""

    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key of a group's membership record."""

    group_id: str


RecordKey = OffsetCommitKey | GroupMetadataKey


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset. ``leader_epoch`` is -1 when unknown (KIP-320)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    #: Only v1 values carry it; -1 otherwise (KIP-211 removed per-commit retention).
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """One member inside ``GroupMetadataValue``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    #: The member's metadata for the group's selected protocol.
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A group's persisted membership: written after each SyncGroup, when it empties, etc."""

    #: None for a group that only holds offsets (written as "", like Kafka).
    protocol_type: str | None
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadataValue, ...]


RecordValue = OffsetCommitValue | GroupMetadataValue


# --- encoding ----------------------------------------------------------------


def _string(out: bytearray, text: str | None) -> None:
    if text is None:
        out += _I16.pack(-1)
        return
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
    out += _I16.pack(len(data))
    out += data


def _bytes(out: bytearray, data: bytes) -> None:
    out += _I32.pack(len(data))
    out += data


def encode_key(key: RecordKey) -> bytes:
    """The record key's bytes (OffsetCommitKey v1 or GroupMetadataKey v2)."""
    out = bytearray()
    if isinstance(key, OffsetCommitKey):
        out += _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        _string(out, key.group_id)
        _string(out, key.topic)
        out += _I32.pack(key.partition)
    else:
        out += _I16.pack(GROUP_METADATA_KEY_VERSION)
        _string(out, key.group_id)
    return bytes(out)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """OffsetCommitValue v3 bytes."""
    out = bytearray(_I16.pack(OFFSET_COMMIT_VALUE_VERSION))
    out += _I64.pack(value.offset)
    out += _I32.pack(value.leader_epoch)
    _string(out, value.metadata)
    out += _I64.pack(value.commit_timestamp_ms)
    return bytes(out)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    """GroupMetadataValue v3 bytes."""
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    _string(out, value.protocol_type or "")
    out += _I32.pack(value.generation)
    _string(out, value.protocol)
    _string(out, value.leader)
    out += _I64.pack(value.current_state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _string(out, m.member_id)
        _string(out, m.group_instance_id)
        _string(out, m.client_id)
        _string(out, m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        _bytes(out, m.subscription)
        _bytes(out, m.assignment)
    return bytes(out)


def encode_value(value: RecordValue) -> bytes:
    """Dispatch on the value's type."""
    if isinstance(value, OffsetCommitValue):
        return encode_offset_commit_value(value)
    return encode_group_metadata_value(value)


# --- decoding ----------------------------------------------------------------


class RecordReader:
    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise CorruptOffsetsRecordError(
                f"need {n} bytes at {self._pos}, record has {len(self._data)}"
            )
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptOffsetsRecordError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise CorruptOffsetsRecordError("null in a non-nullable string field")
        return text

    def bytes_(self) -> bytes:
        n = self.i32()
        if n == -1:
            raise CorruptOffsetsRecordError("null in a non-nullable bytes field")
        return self._take(n)

    def done(self) -> None:
        # Extra bytes after a known version's fields mean corruption (for a
        # flexible version: after its top-level tagged fields; a newer layout
        # would bump the version).
        if self._pos != len(self._data):
            raise CorruptOffsetsRecordError(
                f"{len(self._data) - self._pos} trailing bytes after the record"
            )


def decode_key(data: bytes) -> RecordKey | None:
    """Parse a key; None for versions this classic-only coordinator does not use (3+).

    Raises CorruptOffsetsRecordError for malformed bytes or a negative version.
    """
    r = RecordReader(data)
    version = r.i16()
    if version in (0, 1):
        key: RecordKey = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    elif version >= 3:
        return None
    else:
        raise CorruptOffsetsRecordError(f"negative key version {version}")
    r.done()
    return key


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """Parse OffsetCommitValue v0-v3. Raises CorruptOffsetsRecordError."""
    r = RecordReader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise CorruptOffsetsRecordError(f"unsupported OffsetCommitValue version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.done()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Parse GroupMetadataValue v0-v3. Raises CorruptOffsetsRecordError."""
    r = RecordReader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise CorruptOffsetsRecordError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    count = r.i32()
    if count < 0:
        raise CorruptOffsetsRecordError(f"negative member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_first = version == 0
        rebalance_timeout = -1 if session_first else r.i32()
        session_timeout = r.i32()
        if session_first:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadataValue(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=r.bytes_(),
                assignment=r.bytes_(),
            )
        )
    r.done()
    return GroupMetadataValue(
        protocol_type=protocol_type or None,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp_ms=state_ts,
        members=tuple(members),
    )


def decode_value(key: RecordKey, data: bytes | None) -> RecordValue | None:
    """Parse the value that goes with ``key``; None for a tombstone."""
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_offset_commit_value(data)
    return decode_group_metadata_value(data)
