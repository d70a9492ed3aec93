"""Metadata records (KIP-631) and their stable binary encoding.

Each metadata record is the *value* of one record in a Kafka v2 record batch
of the ``__cluster_metadata`` log (keys are null), as in KRaft.

Encoding of one record value (all integers big-endian, two's complement)::

    frame   := type:int16  version:int16  body
    body    := the record's fields, in the order of its ``FIELDS``, nothing after

    int8 / int16 / int32 / int64   fixed width
    bool        int8, 0 or 1 (anything else is an error)
    tri-state   int8: -1 = unchanged (None), 0 = false, 1 = true
    uuid        16 raw bytes (RFC 4122 byte order)
    string      int16 length N >= 0, then N bytes of UTF-8;
                nullable string: N = -1 means null
    int32[]     int32 count N >= 0, then N int32; nullable: N = -1 means null
    bytes       int32 length N >= 0, then N raw bytes
    string[]    int32 count N >= 0, then N (non-null) strings
    endpoint[]  int32 count, then per endpoint:
                string name, string host, int32 port, int16 security protocol

Record types (type id = Kafka's metadata apiKey), at version 0 unless said; the
fields are Kafka's, in Kafka's order, but encoded as above (Kafka's own
frames are flexible versions, with compact lengths and tagged fields):

    id  type                               body
    0   RegisterBroker                     int32 broker_id, uuid incarnation_id,
                                           int64 broker_epoch, endpoint[] listeners,
                                           nullable string rack, bool fenced,
                                           bool in_controlled_shutdown
    1   UnregisterBroker                   int32 broker_id, int64 broker_epoch
    2   Topic                              string name, uuid topic_id
    3   Partition (v1)                     int32 partition_id, uuid topic_id,
                                           int32[] replicas, int32[] isr,
                                           int32[] removing_replicas,
                                           int32[] adding_replicas, int32 leader,
                                           int8 leader_recovery_state,
                                           int32 leader_epoch, int32 partition_epoch,
                                           int32[] eligible_leader_replicas,
                                           int32[] last_known_elr
                                           (v0 ends at partition_epoch)
    4   Config                             int8 resource_type, string resource_name,
                                           string name, nullable string value
    5   PartitionChange                    int32 partition_id, uuid topic_id,
                                           nullable int32[] isr, int32 leader
                                           (-2 unchanged, -1 none),
                                           nullable int32[] replicas,
                                           nullable int32[] removing_replicas,
                                           nullable int32[] adding_replicas,
                                           int8 leader_recovery_state (-1 unchanged),
                                           nullable int32[] eligible_leader_replicas,
                                           nullable int32[] last_known_elr
                                           (v1; v0 ends at leader_recovery_state)
    7   FenceBroker                        int32 broker_id, int64 broker_epoch
    8   UnfenceBroker                      int32 broker_id, int64 broker_epoch
    9   RemoveTopic                        uuid topic_id
    10  DelegationToken                    string owner, string requester,
                                           string[] renewers (principals
                                           as "Type:name"),
                                           int64 issue_timestamp,
                                           int64 max_timestamp,
                                           int64 expiration_timestamp,
                                           string token_id
    11  UserScramCredential                string name, int8 mechanism
                                           (1 SCRAM-SHA-256, 2 SCRAM-SHA-512),
                                           bytes salt, bytes stored_key,
                                           bytes server_key, int32 iterations
    12  FeatureLevel                       string name, int16 feature_level
    15  ProducerIds                        int32 broker_id, int64 broker_epoch,
                                           int64 next_producer_id
    17  BrokerRegistrationChange           int32 broker_id, int64 broker_epoch,
                                           tri-state fenced,
                                           tri-state in_controlled_shutdown
    18  AccessControlEntry                 uuid acl_id, int8 resource_type,
                                           string resource_name, int8 pattern_type,
                                           string principal, string host,
                                           int8 operation, int8 permission_type
                                           (Kafka's codes, `metadata_quorum.acls`)
    19  RemoveAccessControlEntry           uuid acl_id
    20  NoOp                               (empty)
    22  RemoveUserScramCredential          string name, int8 mechanism
    26  RemoveDelegationToken              string token_id

Decoding rejects an unknown type (`UnknownRecordTypeError`), an unknown
version (`UnsupportedRecordVersionError`), truncation, trailing bytes and any
field value the record's validation refuses (`MetadataRecordError`). It
never raises anything else. Unlike Kafka's generated messages there are no
tagged fields: a new field means a new version. Older versions of a record
stay readable (its ``OLDER_VERSIONS``): they are a prefix of its fields, and
the missing ones take their defaults.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from raftlog.records import (
    NO_PARTITION_LEADER_EPOCH,
    BatchBuilder,
    Compression,
    RecordError,
    decode_records,
    parse_header,
)

from .codec import Reader
from .errors import MetadataRecordError, UnknownRecordTypeError, UnsupportedRecordVersionError
from .types import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    QUOTA_ENTITY_TYPES,
    RECORD_CLASSES,
    ZERO_UUID,
    AccessControlEntryRecord,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    DelegationTokenRecord,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderRecoveryState,
    MetadataRecord,
    MetadataRecordType,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    QuotaEntity,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    ScramMechanism,
    SecurityProtocol,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    check_partition_shape,
    check_quota_entity,
)

__all__ = [
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "QUOTA_ENTITY_TYPES",
    "ZERO_UUID",
    "AccessControlEntryRecord",
    "BrokerFeature",
    "BrokerRegistrationChangeRecord",
    "ClientQuotaRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "DelegationTokenRecord",
    "Endpoint",
    "FeatureLevelRecord",
    "FenceBrokerRecord",
    "LeaderRecoveryState",
    "MetadataBatch",
    "MetadataRecord",
    "MetadataRecordError",
    "MetadataRecordType",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "QuotaEntity",
    "RegisterBrokerRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveDelegationTokenRecord",
    "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord",
    "ScramMechanism",
    "SecurityProtocol",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnknownRecordTypeError",
    "UnregisterBrokerRecord",
    "UnsupportedRecordVersionError",
    "UserScramCredentialRecord",
    "build_metadata_batch",
    "check_partition_shape",
    "check_quota_entity",
    "decode_metadata_batch",
    "decode_record",
    "encode_record",
    "encode_records",
    "record_fields",
]

_FRAME = struct.Struct(">hh")


def encode_record(record: MetadataRecord) -> bytes:
    """The record's frame: type, version, then its fields (see the module docstring)."""
    out = bytearray(_FRAME.pack(int(record.TYPE), record.VERSION))
    for name, encode, _decode in record.FIELDS:
        encode(getattr(record, name), out)
    return bytes(out)


def encode_records(records: Iterable[MetadataRecord]) -> list[bytes]:
    """One encoded value per record, ready for ``KRaftCore.propose``."""
    return [encode_record(r) for r in records]


def decode_record(value: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode one record value. Raises only `MetadataRecordError` (and its subclasses)."""
    data = bytes(value)
    if len(data) < _FRAME.size:
        raise MetadataRecordError(f"record value of {len(data)} bytes is shorter than its frame")
    type_id, version = _FRAME.unpack_from(data)
    cls = RECORD_CLASSES.get(type_id)
    if cls is None:
        raise UnknownRecordTypeError(type_id)
    if version == cls.VERSION:
        layout = cls.FIELDS
    elif version in cls.OLDER_VERSIONS:
        layout = cls.FIELDS[:cls.OLDER_VERSIONS[version]]
    else:
        raise UnsupportedRecordVersionError(
            cls.TYPE.name, version, (*sorted(cls.OLDER_VERSIONS), cls.VERSION))
    reader = Reader(data)
    reader.pos = _FRAME.size
    fields = {name: decode(reader) for name, _encode, decode in layout}
    if reader.remaining:
        raise MetadataRecordError(f"{reader.remaining} trailing bytes after {cls.TYPE.name}")
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise MetadataRecordError(f"invalid {cls.TYPE.name}: {exc}") from None


def record_fields(record: MetadataRecord) -> dict[str, object]:
    """The record's fields as JSON-ready values (UUIDs and enums as strings/names,
    bytes as base64); its ``REDACTED`` fields (SCRAM salts and keys) and a
    sensitive config's value as ``"(redacted)"``, as Kafka's
    ``RecordRedactor`` prints them."""
    out: dict[str, object] = {}
    secret_value = isinstance(record, ConfigRecord) and record.sensitive
    for name, _encode, _decode in record.FIELDS:
        if name in record.REDACTED or (secret_value and name == "value"):
            out[name] = "(redacted)"
        else:
            out[name] = _jsonable(getattr(record, name))
    return out


def _jsonable(value: object) -> object:
    import base64
    import enum
    import uuid

    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")

    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Endpoint):
        return {
            "name": value.name, "host": value.host, "port": value.port,
            "securityProtocol": value.security_protocol.name,
        }
    if isinstance(value, BrokerFeature):
        return {"name": value.name, "minSupportedVersion": value.min_supported,
                "maxSupportedVersion": value.max_supported}
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    """The decoded records of one batch of the metadata log, with their offsets.

    A control batch (leader change, snapshot header/footer, ...) carries no
    metadata records: ``records`` is empty and ``is_control`` is True.
    """

    base_offset: int
    last_offset: int
    epoch: int
    is_control: bool
    records: tuple[tuple[int, MetadataRecord], ...]


def build_metadata_batch(
    records: Sequence[MetadataRecord],
    *,
    base_offset: int = 0,
    epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_ms: int = 0,
    compression: Compression = Compression.NONE,
) -> bytes:
    """One v2 batch whose record values are ``records``, encoded (keys null).

    Raises ValueError for an empty ``records`` (no empty batches).
    """
    builder = BatchBuilder(
        compression=compression, base_offset=base_offset, partition_leader_epoch=epoch
    )
    for record in records:
        builder.append(encode_record(record), timestamp_ms=timestamp_ms)
    return builder.build()


def decode_metadata_batch(batch: bytes | bytearray | memoryview) -> MetadataBatch:
    """Decode a whole v2 batch of the metadata log.

    Raises `MetadataRecordError` for a corrupt batch (wrapping raftlog's
    RecordError) or a record value that does not decode.
    """
    try:
        header = parse_header(batch)
        if header.is_control:
            return MetadataBatch(
                header.base_offset, header.last_offset, header.partition_leader_epoch, True, ()
            )
        raw = decode_records(batch)
    except RecordError as exc:
        raise MetadataRecordError(f"corrupt metadata batch: {exc}") from None
    decoded = []
    for rec in raw:
        if rec.value is None:
            raise MetadataRecordError(f"metadata record at offset {rec.offset} has a null value")
        decoded.append((rec.offset, decode_record(rec.value)))
    return MetadataBatch(
        header.base_offset, header.last_offset, header.partition_leader_epoch, False,
        tuple(decoded),
    )
