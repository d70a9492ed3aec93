"""KIP-848 consumer-group records of ``__consumer_offsets``, byte-compatible with Kafka.

The classic-protocol records (key versions 0-2) live in ``records.py``; this
module holds the records of the consumer protocol (KIP-848). Kafka's
coordinator record serde (``CoordinatorRecordSerde``) lays them out as::

    key   = int16 record type, then the key message (non-flexible: int16-length strings)
    value = int16 value version, then the value message at that version

Every value below is flexible at all its versions ("flexibleVersions": "0+"):
compact strings (unsigned varint length + 1, 0 for null), compact arrays
(unsigned varint count + 1), a uuid as its 16 big-endian bytes, and a tagged
fields section (unsigned varint count, then per field: tag, size, bytes) at
the end of every struct, nested ones included. Tagged fields are written only
when they differ from their default; tags we do not model are skipped on
read, as Kafka keeps them as unknown tagged fields.

Schemas, from Kafka's ``group-coordinator/src/main/resources/common/message/``
(each value has one version, 0; earlier drafts marked "KIP-848 is in
development" were never released and are not read):

- 3 ``ConsumerGroupMetadataKey``: GroupId.
  ``ConsumerGroupMetadataValue`` v0: Epoch int32; tagged MetadataHash int64
  (tag 0, default 0, KIP-1101); tagged CreationTimeMs int64 (tag 1, default
  -1, KIP-1282), which we skip on read and never write.
- 4 ``ConsumerGroupPartitionMetadataKey``: GroupId. We decode the key only;
  the value (the group's subscribed topic metadata, superseded by
  MetadataHash) has no codec here.
- 5 ``ConsumerGroupMemberMetadataKey``: GroupId, MemberId.
  ``ConsumerGroupMemberMetadataValue`` v0: InstanceId nullable string, RackId
  nullable string, ClientId string, ClientHost string, SubscribedTopicNames
  []string, SubscribedTopicRegex nullable string, RebalanceTimeoutMs int32
  (default -1), ServerAssignor nullable string; tagged ClassicMemberMetadata
  (tag 0, nullable struct, default null: a classic-protocol member's
  SessionTimeoutMs int32 and SupportedProtocols [Name string, Metadata
  bytes], KIP-848's online migration); written only when set.
- 6 ``ConsumerGroupTargetAssignmentMetadataKey``: GroupId.
  ``ConsumerGroupTargetAssignmentMetadataValue`` v0: AssignmentEpoch int32;
  tagged AssignmentTimestamp int64 (tag 0, default 0, KIP-1263), skipped on
  read and never written.
- 7 ``ConsumerGroupTargetAssignmentMemberKey``: GroupId, MemberId.
  ``ConsumerGroupTargetAssignmentMemberValue`` v0: TopicPartitions
  [TopicId uuid, Partitions []int32].
- 8 ``ConsumerGroupCurrentMemberAssignmentKey``: GroupId, MemberId.
  ``ConsumerGroupCurrentMemberAssignmentValue`` v0: MemberEpoch int32,
  PreviousMemberEpoch int32, State int8 (``MEMBER_STATE_*``),
  AssignedPartitions and PartitionsPendingRevocation, both [TopicId uuid,
  Partitions []int32, tagged AssignmentEpochs nullable []int32 (tag 0,
  default null, KIP-1251), which we skip on read and never write].
- 16 ``ConsumerGroupRegularExpressionKey``: GroupId, RegularExpression. Key
  only, like type 4: the value (the topics a regex resolved to) has no codec.

A null value is a tombstone and is the caller's business, as in
``records.py``.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from .records import CorruptOffsetsRecordError, RecordReader

CONSUMER_GROUP_METADATA_TYPE = 3
CONSUMER_GROUP_PARTITION_METADATA_TYPE = 4
CONSUMER_GROUP_MEMBER_METADATA_TYPE = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE = 8
CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE = 16

#: Every ConsumerGroup* value schema defines version 0 only.
CONSUMER_VALUE_VERSION = 0

# Kafka's MemberState codes for ConsumerGroupCurrentMemberAssignmentValue.State
# (org.apache.kafka.coordinator.group.modern.MemberState). Kafka maps a code it
# does not know to UNKNOWN; we keep the raw int8.
MEMBER_STATE_STABLE = 0
MEMBER_STATE_UNREVOKED_PARTITIONS = 1
MEMBER_STATE_UNRELEASED_PARTITIONS = 2
MEMBER_STATE_UNKNOWN = 127

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# Kafka's generated code caps every string at 0x7FFF UTF-8 bytes, compact or not.
_MAX_STRING_BYTES = 0x7FFF
# A Kafka unsigned varint is at most 5 bytes and read into a Java int; counts
# and lengths that do not fit a non-negative int32 are corrupt.
_MAX_VARINT_BYTES = 5
_MAX_VARINT = 0x7FFFFFFF

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""Partitions per topic id, in record order (Kafka's ``[]TopicPartition(s)``)."""


# --- keys --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    """Type 3: a consumer group's epoch record."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    """Type 4: a group's subscribed-topic metadata (decoded, value ignored on replay)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    """Type 5: one member's subscription and client details."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    """Type 6: the epoch of the group's target assignment."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    """Type 7: one member's share of the target assignment."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    """Type 8: one member's current assignment and reconciliation state."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    """Type 16: a resolved subscription regex (decoded, value ignored on replay)."""

    group_id: str
    regular_expression: str


ConsumerKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)


# --- values ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    """The group epoch; bumped whenever subscriptions or topic metadata change."""

    epoch: int
    #: KIP-1101 hash of the subscribed topics' metadata; 0 (the default) is not written.
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group
    (KIP-848 online migration): its session timeout and JoinGroup protocols,
    as (name, metadata) pairs."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    """A member's client details and subscription."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    #: None when the member lets the coordinator pick its default assignor.
    server_assignor: str | None
    rebalance_timeout_ms: int
    #: None for a member that speaks the consumer protocol.
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    """The group epoch the target assignment was computed for."""

    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    """A member's partitions in the target assignment."""

    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """A member's epochs, reconciliation state and the partitions it owns or must revoke."""

    member_epoch: int
    previous_member_epoch: int
    #: A ``MEMBER_STATE_*`` code (int8).
    state: int
    assigned_partitions: TopicPartitions
    partitions_pending_revocation: TopicPartitions


ConsumerValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)


# --- encoding ----------------------------------------------------------------


def encode_consumer_key(key: ConsumerKey) -> bytes:
    """The key's bytes: int16 record type, then its fields as int16-length strings.

    Raises ValueError for a string longer than 0x7FFF UTF-8 bytes (or not encodable).
    """
    match key:
        case ConsumerGroupMetadataKey(group_id):
            return _key(CONSUMER_GROUP_METADATA_TYPE, group_id)
        case ConsumerGroupPartitionMetadataKey(group_id):
            return _key(CONSUMER_GROUP_PARTITION_METADATA_TYPE, group_id)
        case ConsumerGroupMemberMetadataKey(group_id, member_id):
            return _key(CONSUMER_GROUP_MEMBER_METADATA_TYPE, group_id, member_id)
        case ConsumerGroupTargetAssignmentMetadataKey(group_id):
            return _key(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE, group_id)
        case ConsumerGroupTargetAssignmentMemberKey(group_id, member_id):
            return _key(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE, group_id, member_id)
        case ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id):
            return _key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE, group_id, member_id)
        case ConsumerGroupRegularExpressionKey(group_id, regular_expression):
            return _key(CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE, group_id, regular_expression)
    raise TypeError(f"not a consumer-group key: {key!r}")


def encode_consumer_value(value: ConsumerValue) -> bytes:
    """The value's bytes at version 0 (the only version of each schema).

    Raises ValueError for a number outside its field's range or a string longer
    than 0x7FFF UTF-8 bytes; TypeError for a value of another type.
    """
    out = bytearray(_I16.pack(CONSUMER_VALUE_VERSION))
    match value:
        case ConsumerGroupMetadataValue():
            _pack(out, _I32, value.epoch, "epoch")
            if value.metadata_hash == 0:
                _uvarint(out, 0)
            else:
                # One tagged field: tag 0 (MetadataHash), size 8, int64.
                _uvarint(out, 1)
                _uvarint(out, 0)
                _uvarint(out, _I64.size)
                _pack(out, _I64, value.metadata_hash, "metadata_hash")
        case ConsumerGroupMemberMetadataValue():
            _compact_string(out, value.instance_id)
            _compact_string(out, value.rack_id)
            _compact_string(out, _not_null(value.client_id, "client_id"))
            _compact_string(out, _not_null(value.client_host, "client_host"))
            _uvarint(out, len(value.subscribed_topic_names) + 1)
            for name in value.subscribed_topic_names:
                _compact_string(out, _not_null(name, "subscribed_topic_names"))
            _compact_string(out, value.subscribed_topic_regex)
            _pack(out, _I32, value.rebalance_timeout_ms, "rebalance_timeout_ms")
            _compact_string(out, value.server_assignor)
            classic = value.classic_member_metadata
            if classic is None:
                _uvarint(out, 0)
            else:
                # One tagged field: tag 0, a nullable struct (a presence
                # varint 1, then the struct), as Kafka's generated writer.
                body = bytearray([1])
                _pack(body, _I32, classic.session_timeout_ms, "session_timeout_ms")
                _uvarint(body, len(classic.supported_protocols) + 1)
                for name, metadata in classic.supported_protocols:
                    _compact_string(body, _not_null(name, "supported_protocols"))
                    _uvarint(body, len(metadata) + 1)
                    body += metadata
                    _uvarint(body, 0)
                _uvarint(body, 0)
                _uvarint(out, 1)
                _uvarint(out, 0)
                _uvarint(out, len(body))
                out += body
        case ConsumerGroupTargetAssignmentMetadataValue():
            _pack(out, _I32, value.assignment_epoch, "assignment_epoch")
            _uvarint(out, 0)
        case ConsumerGroupTargetAssignmentMemberValue():
            _topic_partitions(out, value.topic_partitions)
            _uvarint(out, 0)
        case ConsumerGroupCurrentMemberAssignmentValue():
            _pack(out, _I32, value.member_epoch, "member_epoch")
            _pack(out, _I32, value.previous_member_epoch, "previous_member_epoch")
            _pack(out, _I8, value.state, "state")
            _topic_partitions(out, value.assigned_partitions)
            _topic_partitions(out, value.partitions_pending_revocation)
            _uvarint(out, 0)
        case _:
            raise TypeError(f"not a consumer-group value: {value!r}")
    return bytes(out)


def _key(record_type: int, *fields: str) -> bytes:
    out = bytearray(_I16.pack(record_type))
    for text in fields:
        data = _utf8(text)
        out += _I16.pack(len(data))
        out += data
    return bytes(out)


def _utf8(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > _MAX_STRING_BYTES:
        raise ValueError(f"string of {len(data)} bytes is longer than Kafka's {_MAX_STRING_BYTES}")
    return data


def _not_null(text: str | None, field: str) -> str:
    if text is None:
        raise ValueError(f"{field} is not nullable")
    return text


def _pack(out: bytearray, fmt: struct.Struct, number: int, field: str) -> None:
    try:
        out += fmt.pack(number)
    except struct.error as exc:
        raise ValueError(f"{field}={number!r} does not fit its field: {exc}") from None


def _uvarint(out: bytearray, number: int) -> None:
    if not 0 <= number <= _MAX_VARINT:
        raise ValueError(f"{number} does not fit an unsigned varint count or length")
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)


def _compact_string(out: bytearray, text: str | None) -> None:
    if text is None:
        _uvarint(out, 0)
        return
    data = _utf8(text)
    _uvarint(out, len(data) + 1)
    out += data


def _topic_partitions(out: bytearray, topics: TopicPartitions) -> None:
    _uvarint(out, len(topics) + 1)
    for topic_id, partitions in topics:
        out += topic_id.bytes
        _uvarint(out, len(partitions) + 1)
        for partition in partitions:
            _pack(out, _I32, partition, "partition")
        _uvarint(out, 0)  # the TopicPartition struct's tagged fields


# --- decoding ----------------------------------------------------------------


def decode_consumer_key(data: bytes) -> ConsumerKey | None:
    """Parse a key of type 3-8 or 16; None for any other non-negative type.

    Types 0-2 are classic records (``records.decode_key``); 9-15 and 17+ are
    share and streams groups, which we do not run. Raises
    CorruptOffsetsRecordError for a negative type, truncation, a bad or null
    string, non-UTF-8 or trailing bytes.
    """
    r = _Reader(data)
    record_type = r.i16()
    key: ConsumerKey
    match record_type:
        case 3:
            key = ConsumerGroupMetadataKey(r.string())
        case 4:
            key = ConsumerGroupPartitionMetadataKey(r.string())
        case 5:
            key = ConsumerGroupMemberMetadataKey(r.string(), r.string())
        case 6:
            key = ConsumerGroupTargetAssignmentMetadataKey(r.string())
        case 7:
            key = ConsumerGroupTargetAssignmentMemberKey(r.string(), r.string())
        case 8:
            key = ConsumerGroupCurrentMemberAssignmentKey(r.string(), r.string())
        case 16:
            key = ConsumerGroupRegularExpressionKey(r.string(), r.string())
        case _ if record_type < 0:
            raise CorruptOffsetsRecordError(f"negative record type {record_type}")
        case _:
            return None
    r.done()
    return key


def decode_consumer_value(key: ConsumerKey, data: bytes) -> ConsumerValue | None:
    """Parse the (non-null) value that goes with ``key``; None for types 4 and 16.

    Raises CorruptOffsetsRecordError for a version other than 0, truncation,
    a bad length or count, a null in a non-nullable field, non-UTF-8, or
    bytes after the top-level tagged fields.
    """
    match key:
        case ConsumerGroupPartitionMetadataKey() | ConsumerGroupRegularExpressionKey():
            return None
    r = _Reader(data)
    version = r.i16()
    if version != CONSUMER_VALUE_VERSION:
        raise CorruptOffsetsRecordError(
            f"unsupported value version {version} for {type(key).__name__}"
        )
    value: ConsumerValue
    match key:
        case ConsumerGroupMetadataKey():
            value = _metadata_value(r)
        case ConsumerGroupMemberMetadataKey():
            value = _member_metadata_value(r)
        case ConsumerGroupTargetAssignmentMetadataKey():
            value = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=r.i32())
            r.tagged_fields()  # AssignmentTimestamp (tag 0) is not modelled
        case ConsumerGroupTargetAssignmentMemberKey():
            value = ConsumerGroupTargetAssignmentMemberValue(r.topic_partitions())
            r.tagged_fields()
        case ConsumerGroupCurrentMemberAssignmentKey():
            value = ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=r.i32(),
                previous_member_epoch=r.i32(),
                state=r.i8(),
                assigned_partitions=r.topic_partitions(),
                partitions_pending_revocation=r.topic_partitions(),
            )
            r.tagged_fields()
        case _:
            raise TypeError(f"not a consumer-group key: {key!r}")
    r.done()
    return value


def _metadata_value(r: _Reader) -> ConsumerGroupMetadataValue:
    epoch = r.i32()
    metadata_hash = 0
    for tag, field in r.tagged_fields():
        # Tag 1 (CreationTimeMs) and newer tags are not modelled. Like Kafka's
        # generated readers, a repeated tag overwrites the earlier one.
        if tag == 0:
            if len(field) != _I64.size:
                raise CorruptOffsetsRecordError(f"MetadataHash tag of {len(field)} bytes, not 8")
            metadata_hash = int(_I64.unpack(field)[0])
    return ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash)


def _member_metadata_value(r: _Reader) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.compact_nullable_string()
    rack_id = r.compact_nullable_string()
    client_id = r.compact_string()
    client_host = r.compact_string()
    topic_names = tuple(r.compact_string() for _ in range(r.compact_count()))
    topic_regex = r.compact_nullable_string()
    rebalance_timeout_ms = r.i32()
    server_assignor = r.compact_nullable_string()
    classic = None
    for tag, field in r.tagged_fields():
        if tag == 0:  # a repeated tag overwrites the earlier one, as in Kafka
            classic = _classic_member_metadata(field)
    return ConsumerGroupMemberMetadataValue(
        instance_id=instance_id,
        rack_id=rack_id,
        client_id=client_id,
        client_host=client_host,
        subscribed_topic_names=topic_names,
        subscribed_topic_regex=topic_regex,
        server_assignor=server_assignor,
        rebalance_timeout_ms=rebalance_timeout_ms,
        classic_member_metadata=classic,
    )


def _classic_member_metadata(field: bytes) -> ClassicMemberMetadata | None:
    r = _Reader(field)
    if r.uvarint() == 0:
        r.done()
        return None
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(r.compact_count()):
        name = r.compact_string()
        n = r.uvarint()
        if n == 0:
            raise CorruptOffsetsRecordError("null in the non-nullable Metadata field")
        protocols.append((name, r._take(n - 1)))
        r.tagged_fields()
    r.tagged_fields()
    r.done()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


class _Reader(RecordReader):
    """`records.RecordReader` plus the flexible versions' encodings (compact
    strings and arrays, uvarints, uuids, tagged fields); every failure is a
    CorruptOffsetsRecordError."""

    __slots__ = ()

    def _remaining(self) -> int:
        return len(self._data) - self._pos

    def i8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def uuid_(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def uvarint(self) -> int:
        number = 0
        for i in range(_MAX_VARINT_BYTES):
            byte = self._take(1)[0]
            number |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if number > _MAX_VARINT:
                    raise CorruptOffsetsRecordError(f"varint {number} overflows an int32")
                return number
        raise CorruptOffsetsRecordError(f"varint longer than {_MAX_VARINT_BYTES} bytes")

    def _text(self, n: int) -> str:
        if n > _MAX_STRING_BYTES:
            raise CorruptOffsetsRecordError(f"string length {n} exceeds {_MAX_STRING_BYTES}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptOffsetsRecordError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        """A non-flexible (int16-length) string; keys use only these."""
        n = self.i16()
        if n == -1:
            raise CorruptOffsetsRecordError("null in a non-nullable string field")
        if n < 0:
            raise CorruptOffsetsRecordError(f"negative string length {n}")
        return self._text(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def compact_string(self) -> str:
        text = self.compact_nullable_string()
        if text is None:
            raise CorruptOffsetsRecordError("null in a non-nullable string field")
        return text

    def compact_count(self) -> int:
        """A non-nullable compact array's element count."""
        n = self.uvarint()
        if n == 0:
            raise CorruptOffsetsRecordError("null in a non-nullable array field")
        # Every element takes at least one byte: refuse counts the record cannot hold
        # before allocating for them (Kafka checks the same).
        if n - 1 > self._remaining():
            raise CorruptOffsetsRecordError(
                f"array of {n - 1} elements, {self._remaining()} bytes left"
            )
        return n - 1

    def topic_partitions(self) -> TopicPartitions:
        topics = []
        for _ in range(self.compact_count()):
            topic_id = self.uuid_()
            partitions = tuple(self.i32() for _ in range(self.compact_count()))
            self.tagged_fields()  # AssignmentEpochs (tag 0) is not modelled
            topics.append((topic_id, partitions))
        return tuple(topics)

    def tagged_fields(self) -> list[tuple[int, bytes]]:
        """A struct's tagged fields as (tag, bytes), in record order."""
        fields = []
        count = self.uvarint()
        if count * 2 > self._remaining():  # a tag and a size: two bytes at least
            raise CorruptOffsetsRecordError(
                f"{count} tagged fields, {self._remaining()} bytes left"
            )
        for _ in range(count):
            tag = self.uvarint()
            fields.append((tag, self._take(self.uvarint())))
        return fields
