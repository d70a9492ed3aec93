"""The metadata record types (KIP-631), their validation and their field layout.

Each record is a frozen dataclass. ``__post_init__`` rejects values the
encoding cannot carry or that no correct controller writes (TypeError or
ValueError); the decoder turns those into `MetadataRecordError`. The field
order in ``FIELDS`` *is* the wire layout and must never change for a
published version: add a new version instead.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from metadata_quorum.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    parse_principal,
)
from metadata_quorum.topic_names import topic_name_error

from .codec import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    Decoder,
    Encoder,
    Reader,
    check_bool,
    check_broker_ids,
    check_bytes,
    check_int,
    check_string,
    check_uuid,
    dec_bool,
    dec_bytes,
    dec_float64,
    dec_int8,
    dec_int16,
    dec_int32,
    dec_int32s,
    dec_int64,
    dec_nullable_int32s,
    dec_nullable_string,
    dec_string,
    dec_strings,
    dec_tristate,
    dec_uuid,
    enc_bool,
    enc_bytes,
    enc_float64,
    enc_int8,
    enc_int16,
    enc_int32,
    enc_int32s,
    enc_int64,
    enc_nullable_int32s,
    enc_nullable_string,
    enc_string,
    enc_strings,
    enc_tristate,
    enc_uuid,
)
from .errors import MetadataRecordError

#: Leader sentinel: no leader (PartitionRecord and PartitionChangeRecord).
NO_LEADER = -1
#: PartitionChangeRecord leader sentinel: the leader is unchanged (KIP-631).
NO_LEADER_CHANGE = -2
#: The zero UUID is Kafka's "no topic id" and never names a topic.
ZERO_UUID = uuid.UUID(int=0)


class MetadataRecordType(IntEnum):
    """Record type ids: Kafka's metadata apiKeys, so dumps read the same."""

    REGISTER_BROKER_RECORD = 0
    UNREGISTER_BROKER_RECORD = 1
    TOPIC_RECORD = 2
    PARTITION_RECORD = 3
    CONFIG_RECORD = 4
    PARTITION_CHANGE_RECORD = 5
    FENCE_BROKER_RECORD = 7
    UNFENCE_BROKER_RECORD = 8
    REMOVE_TOPIC_RECORD = 9
    DELEGATION_TOKEN_RECORD = 10
    USER_SCRAM_CREDENTIAL_RECORD = 11
    FEATURE_LEVEL_RECORD = 12
    CLIENT_QUOTA_RECORD = 14
    PRODUCER_IDS_RECORD = 15
    BROKER_REGISTRATION_CHANGE_RECORD = 17
    ACCESS_CONTROL_ENTRY_RECORD = 18
    REMOVE_ACCESS_CONTROL_ENTRY_RECORD = 19
    NO_OP_RECORD = 20
    REMOVE_USER_SCRAM_CREDENTIAL_RECORD = 22
    REMOVE_DELEGATION_TOKEN_RECORD = 26


class SecurityProtocol(IntEnum):
    """Kafka's ``SecurityProtocol`` ids."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


class ScramMechanism(IntEnum):
    """Kafka's SCRAM mechanism types (``ScramMechanism.type()``), the int8 its
    SCRAM records and AlterUserScramCredentials carry."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL name: ``SCRAM-SHA-256``."""
        return self.name.replace("_", "-")

    @classmethod
    def from_mechanism_name(cls, mechanism_name: str) -> ScramMechanism:
        """The mechanism whose SASL name is ``mechanism_name``; ValueError if none."""
        for mechanism in cls:
            if mechanism.mechanism_name == mechanism_name:
                return mechanism
        raise ValueError(f"not a SCRAM mechanism: {mechanism_name!r}")

    @property
    def digest_size(self) -> int:
        """Bytes of the mechanism's hash: the length of its stored and server keys."""
        return 32 if self is ScramMechanism.SCRAM_SHA_256 else 64


class LeaderRecoveryState(IntEnum):
    """KIP-704: RECOVERING after an unclean election, until the leader says it recovered."""

    RECOVERED = 0
    RECOVERING = 1


class ConfigResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` ids (BROKER with name "" = cluster default)."""

    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One broker listener: where clients reach the broker."""

    name: str
    host: str
    port: int
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT

    def __post_init__(self) -> None:
        check_string("listener name", self.name)
        if not self.name:
            raise ValueError("listener name must not be empty")
        check_string("host", self.host)
        check_int("port", self.port, 0, 65535)
        object.__setattr__(self, "security_protocol", SecurityProtocol(self.security_protocol))


def _enc_endpoints(v: tuple[Endpoint, ...], out: bytearray) -> None:
    enc_int32(len(v), out)
    for e in v:
        enc_string(e.name, out)
        enc_string(e.host, out)
        enc_int32(e.port, out)
        enc_int16(int(e.security_protocol), out)


def _dec_endpoints(r: Reader) -> tuple[Endpoint, ...]:
    n = r.int32()
    if n < 0 or n > r.remaining:  # every endpoint takes >= 10 bytes, so this bounds n
        raise MetadataRecordError(f"bad endpoint count {n}")
    out = []
    for _ in range(n):
        name, host, port, proto = dec_string(r), dec_string(r), r.int32(), r.int16()
        try:
            out.append(Endpoint(name, host, port, SecurityProtocol(proto)))
        except (TypeError, ValueError) as exc:
            raise MetadataRecordError(f"bad endpoint: {exc}") from None
    return tuple(out)


def _check_feature_name(field_name: str, name: str) -> None:
    check_string(field_name, name)
    if not name:
        raise ValueError("feature name must not be empty")


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    """A feature level range a broker's software supports (KIP-584; Kafka's
    ``BrokerFeature`` in RegisterBrokerRecord): it can run with any
    finalized level from ``min_supported`` to ``max_supported``."""

    name: str
    min_supported: int
    max_supported: int

    def __post_init__(self) -> None:
        _check_feature_name("feature name", self.name)
        check_int("min_supported", self.min_supported, 0, INT16_MAX)
        check_int("max_supported", self.max_supported, self.min_supported, INT16_MAX)


def _enc_features(v: tuple[BrokerFeature, ...], out: bytearray) -> None:
    enc_int32(len(v), out)
    for f in v:
        enc_string(f.name, out)
        enc_int16(f.min_supported, out)
        enc_int16(f.max_supported, out)


def _dec_features(r: Reader) -> tuple[BrokerFeature, ...]:
    n = r.int32()
    if n < 0 or n > r.remaining:  # every feature takes >= 6 bytes, so this bounds n
        raise MetadataRecordError(f"bad feature count {n}")
    out = []
    for _ in range(n):
        name, low, high = dec_string(r), r.int16(), r.int16()
        try:
            out.append(BrokerFeature(name, low, high))
        except (TypeError, ValueError) as exc:
            raise MetadataRecordError(f"bad broker feature: {exc}") from None
    return tuple(out)


def _int8(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_int8, dec_int8)


def _int16(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_int16, dec_int16)


def _int32(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_int32, dec_int32)


def _int64(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_int64, dec_int64)


def _bool(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_bool, dec_bool)


def _tri(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_tristate, dec_tristate)


def _uuid(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_uuid, dec_uuid)


def _str(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_string, dec_string)


def _nstr(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_nullable_string, dec_nullable_string)


def _strs(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_strings, dec_strings)


def _ids(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_int32s, dec_int32s)


def _nids(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_nullable_int32s, dec_nullable_int32s)


class _RecordBase:
    """Behaviour shared by every record: the frame type/version and field layout.

    ``REDACTED`` names fields that dumps and logs must not show (Kafka's
    ``RecordRedactor``): they print as ``(redacted)``.
    """

    __slots__ = ()
    TYPE: ClassVar[MetadataRecordType]
    VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = ()
    #: Older versions still read: version -> how many leading ``FIELDS`` it
    #: has (the rest take their defaults). Logs written before a field was
    #: added stay readable.
    OLDER_VERSIONS: ClassVar[dict[int, int]] = {}
    REDACTED: ClassVar[frozenset[str]] = frozenset()


def _check_broker(record: object, *, epoch_min: int = 0) -> None:
    check_int("broker_id", getattr(record, "broker_id"), 0, INT32_MAX)  # noqa: B009
    check_int("broker_epoch", getattr(record, "broker_epoch"), epoch_min, INT64_MAX)  # noqa: B009


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(_RecordBase):
    """A broker registration; replaces any earlier one for ``broker_id``.

    ``broker_epoch`` is the metadata log offset of this record (KIP-631), so
    epochs are unique and grow with every registration. Version 1 adds
    ``features``, the feature level ranges the broker's software supports
    (KIP-584); a version 0 record read from an older log has none.
    """

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.REGISTER_BROKER_RECORD
    VERSION: ClassVar[int] = 1
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("broker_id"), _uuid("incarnation_id"), _int64("broker_epoch"),
        ("listeners", _enc_endpoints, _dec_endpoints), _nstr("rack"),
        _bool("fenced"), _bool("in_controlled_shutdown"),
        ("features", _enc_features, _dec_features),
    )
    OLDER_VERSIONS: ClassVar[dict[int, int]] = {0: 7}

    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    listeners: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    features: tuple[BrokerFeature, ...] = ()

    def __post_init__(self) -> None:
        _check_broker(self)
        check_uuid("incarnation_id", self.incarnation_id)
        if not isinstance(self.listeners, tuple) or not all(
            isinstance(e, Endpoint) for e in self.listeners
        ):
            raise TypeError("listeners must be a tuple of Endpoint")
        if len({e.name for e in self.listeners}) != len(self.listeners):
            raise ValueError("listener names must be distinct")
        if not isinstance(self.features, tuple) or not all(
            isinstance(f, BrokerFeature) for f in self.features
        ):
            raise TypeError("features must be a tuple of BrokerFeature")
        if len({f.name for f in self.features}) != len(self.features):
            raise ValueError("feature names must be distinct")
        check_string("rack", self.rack, nullable=True)
        check_bool("fenced", self.fenced)
        check_bool("in_controlled_shutdown", self.in_controlled_shutdown)


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord(_RecordBase):
    """Removes the broker's registration (its epoch must match)."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.UNREGISTER_BROKER_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("broker_id"), _int64("broker_epoch"),
    )

    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _check_broker(self)


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord(_RecordBase):
    """Fences the broker at ``broker_epoch``: it may lead nothing and be in no ISR (KIP-841)."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.FENCE_BROKER_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("broker_id"), _int64("broker_epoch"),
    )

    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _check_broker(self)


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord(_RecordBase):
    """Unfences the broker at ``broker_epoch`` (it caught up with the metadata log)."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.UNFENCE_BROKER_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("broker_id"), _int64("broker_epoch"),
    )

    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        _check_broker(self)


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord(_RecordBase):
    """Changes flags of a registration; None = unchanged (encoded -1, else 0/1)."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.BROKER_REGISTRATION_CHANGE_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("broker_id"), _int64("broker_epoch"), _tri("fenced"),
        _tri("in_controlled_shutdown"),
    )

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None

    def __post_init__(self) -> None:
        _check_broker(self)
        for name in ("fenced", "in_controlled_shutdown"):
            value = getattr(self, name)
            if value is not None:
                check_bool(name, value)


@dataclass(frozen=True, slots=True)
class TopicRecord(_RecordBase):
    """Creates a topic; its partitions follow as PartitionRecords."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.TOPIC_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (_str("name"), _uuid("topic_id"))

    name: str
    topic_id: uuid.UUID

    def __post_init__(self) -> None:
        error = topic_name_error(self.name)
        if error is not None:
            raise ValueError(error)
        check_uuid("topic_id", self.topic_id)
        if self.topic_id == ZERO_UUID:
            raise ValueError("topic_id must not be the zero UUID")


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(_RecordBase):
    """Deletes a topic, its partitions and its configs."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_TOPIC_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (_uuid("topic_id"),)

    topic_id: uuid.UUID

    def __post_init__(self) -> None:
        check_uuid("topic_id", self.topic_id)


def check_partition_shape(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    removing: tuple[int, ...],
    adding: tuple[int, ...],
    leader: int,
    elr: tuple[int, ...] = (),
) -> None:
    """Raise ValueError unless the replica sets are consistent.

    Invariants: at least one replica; ISR, ELR, removing and adding replicas
    are subsets of the replicas; removing and adding are disjoint, and so
    are the ISR and the ELR (KIP-966); the leader is NO_LEADER or an ISR
    member (an unclean election shrinks the ISR to the new leader, KIP-704;
    an election from the ELR makes the ISR the new leader).
    """
    if not replicas:
        raise ValueError("a partition has at least one replica")
    members = set(replicas)
    for name, group in (("isr", isr), ("eligible_leader_replicas", elr),
                        ("removing_replicas", removing), ("adding_replicas", adding)):
        if not set(group) <= members:
            raise ValueError(f"{name} {group} is not a subset of replicas {replicas}")
    if set(removing) & set(adding):
        raise ValueError("removing_replicas and adding_replicas overlap")
    if set(isr) & set(elr):
        raise ValueError(f"isr {isr} and eligible_leader_replicas {elr} overlap")
    if leader != NO_LEADER and leader not in isr:
        raise ValueError(f"leader {leader} is not in the ISR {isr}")


@dataclass(frozen=True, slots=True)
class PartitionRecord(_RecordBase):
    """Creates a partition, or states it whole in a snapshot.

    Version 1 adds KIP-966's ``eligible_leader_replicas`` and
    ``last_known_elr`` (Kafka's PartitionRecord v2 fields).
    """

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.PARTITION_RECORD
    VERSION: ClassVar[int] = 1
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("partition_id"), _uuid("topic_id"), _ids("replicas"), _ids("isr"),
        _ids("removing_replicas"), _ids("adding_replicas"), _int32("leader"),
        ("leader_recovery_state", enc_int8, dec_int8), _int32("leader_epoch"),
        _int32("partition_epoch"), _ids("eligible_leader_replicas"), _ids("last_known_elr"),
    )
    OLDER_VERSIONS: ClassVar[dict[int, int]] = {0: 10}

    partition_id: int
    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    leader_epoch: int = 0
    partition_epoch: int = 0
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_int("partition_id", self.partition_id, 0, INT32_MAX)
        check_uuid("topic_id", self.topic_id)
        for name in ("replicas", "isr", "removing_replicas", "adding_replicas",
                     "eligible_leader_replicas", "last_known_elr"):
            check_broker_ids(name, getattr(self, name))
        check_int("leader", self.leader, NO_LEADER, INT32_MAX)
        object.__setattr__(
            self, "leader_recovery_state", LeaderRecoveryState(self.leader_recovery_state)
        )
        check_int("leader_epoch", self.leader_epoch, 0, INT32_MAX)
        check_int("partition_epoch", self.partition_epoch, 0, INT32_MAX)
        check_partition_shape(
            self.replicas, self.isr, self.removing_replicas, self.adding_replicas, self.leader,
            self.eligible_leader_replicas,
        )
        if not set(self.last_known_elr) <= set(self.replicas):
            raise ValueError(f"last_known_elr {self.last_known_elr} is not a subset of "
                             f"replicas {self.replicas}")


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(_RecordBase):
    """Changes a partition; None fields and ``leader == NO_LEADER_CHANGE`` are unchanged.

    Replaying it bumps the partition epoch, and the leader epoch when it sets
    the leader, to another broker or the same one (KIP-631; the epochs are not
    carried in the record).
    ``leader_recovery_state`` -1 = unchanged. Version 1 adds KIP-966's
    ``eligible_leader_replicas`` and ``last_known_elr`` (None = unchanged).
    """

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.PARTITION_CHANGE_RECORD
    VERSION: ClassVar[int] = 1
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("partition_id"), _uuid("topic_id"), _nids("isr"), _int32("leader"),
        _nids("replicas"), _nids("removing_replicas"), _nids("adding_replicas"),
        ("leader_recovery_state", enc_int8, dec_int8), _nids("eligible_leader_replicas"),
        _nids("last_known_elr"),
    )
    OLDER_VERSIONS: ClassVar[dict[int, int]] = {0: 8}

    partition_id: int
    topic_id: uuid.UUID
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_int("partition_id", self.partition_id, 0, INT32_MAX)
        check_uuid("topic_id", self.topic_id)
        for name in ("isr", "replicas", "removing_replicas", "adding_replicas",
                     "eligible_leader_replicas", "last_known_elr"):
            check_broker_ids(name, getattr(self, name), nullable=True)
        check_int("leader", self.leader, NO_LEADER_CHANGE, INT32_MAX)
        check_int("leader_recovery_state", self.leader_recovery_state, -1, 1)

    @property
    def leader_changed(self) -> bool:
        return self.leader != NO_LEADER_CHANGE


@dataclass(frozen=True, slots=True)
class ConfigRecord(_RecordBase):
    """Sets (``value`` not None) or deletes (``value`` None) one config key."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.CONFIG_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        ("resource_type", enc_int8, dec_int8), _str("resource_name"), _str("name"),
        _nstr("value"),
    )

    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", ConfigResourceType(self.resource_type))
        check_string("resource_name", self.resource_name)
        check_string("name", self.name)
        if not self.name:
            raise ValueError("config name must not be empty")
        check_string("value", self.value, nullable=True)

    @property
    def sensitive(self) -> bool:
        """A secret's value (a keystore or key password, an inline private
        key: Kafka's PASSWORD-typed configs), which dumps print as
        ``(redacted)``, as Kafka's ``RecordRedactor`` does."""
        return self.name.endswith(("password", "ssl.keystore.key"))


#: The entity types of client quotas (KIP-546), each at most once per entity.
QUOTA_ENTITY_TYPES = ("client-id", "ip", "user")

QuotaEntity = tuple[tuple[str, "str | None"], ...]
"""A client-quota entity: (entity type, name) pairs sorted by type; a None
name is that type's default (``--entity-default``)."""


def _enc_quota_entity(v: QuotaEntity, out: bytearray) -> None:
    enc_int32(len(v), out)
    for entity_type, name in v:
        enc_string(entity_type, out)
        enc_nullable_string(name, out)


def _dec_quota_entity(r: Reader) -> QuotaEntity:
    n = r.int32()
    if n < 0 or n > r.remaining:  # each part takes >= 4 bytes, so this bounds n
        raise MetadataRecordError(f"bad quota entity count {n}")
    return tuple((dec_string(r), dec_nullable_string(r)) for _ in range(n))


def check_quota_entity(entity: object) -> QuotaEntity:
    """``entity`` as a `QuotaEntity` (sorted by type), or ValueError/TypeError."""
    if not isinstance(entity, tuple) or not entity:
        raise TypeError("a quota entity is a non-empty tuple of (type, name) pairs")
    parts = []
    for part in entity:
        if not isinstance(part, tuple) or len(part) != 2:
            raise TypeError("a quota entity part is an (entity type, name or None) pair")
        entity_type, name = part
        check_string("entity type", entity_type)
        check_string("entity name", name, nullable=True)
        if entity_type not in QUOTA_ENTITY_TYPES:
            raise ValueError(f"unknown quota entity type {entity_type!r}")
        parts.append((entity_type, name))
    if len({t for t, _ in parts}) != len(parts):
        raise ValueError("a quota entity names each entity type at most once")
    return tuple(sorted(parts))


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord(_RecordBase):
    """Sets (``remove`` False) or removes one quota key of one client-quota
    entity (KIP-546): e.g. ``producer_byte_rate`` of client-id ``app``."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.CLIENT_QUOTA_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        ("entity", _enc_quota_entity, _dec_quota_entity), _str("key"),
        ("value", enc_float64, dec_float64), _bool("remove"),
    )

    entity: QuotaEntity
    key: str
    value: float
    remove: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "entity", check_quota_entity(self.entity))
        check_string("key", self.key)
        if not self.key:
            raise ValueError("quota key must not be empty")
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool):
            raise TypeError("quota value must be a number")
        object.__setattr__(self, "value", float(self.value))
        if not math.isfinite(self.value):
            raise ValueError("quota value must be finite")
        check_bool("remove", self.remove)


def _bytes(name: str) -> tuple[str, Encoder, Decoder]:
    return (name, enc_bytes, dec_bytes)


def _check_scram_user(record: object) -> None:
    name = getattr(record, "name")  # noqa: B009
    check_string("name", name)
    if not name:
        raise ValueError("a SCRAM user name must not be empty")


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord(_RecordBase):
    """Sets one user's credential for one SCRAM mechanism (KIP-554), replacing
    any earlier one. The controller derives ``stored_key`` and ``server_key``
    from the salted password the client sent; the password itself is never
    stored. Kafka's field order: name, mechanism, salt, stored key, server
    key, iterations."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.USER_SCRAM_CREDENTIAL_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _str("name"), ("mechanism", enc_int8, dec_int8), _bytes("salt"), _bytes("stored_key"),
        _bytes("server_key"), _int32("iterations"),
    )
    REDACTED: ClassVar[frozenset[str]] = frozenset({"salt", "stored_key", "server_key"})

    name: str
    mechanism: ScramMechanism
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def __post_init__(self) -> None:
        _check_scram_user(self)
        object.__setattr__(self, "mechanism", ScramMechanism(self.mechanism))
        check_bytes("salt", self.salt)
        for name in ("stored_key", "server_key"):
            value = getattr(self, name)
            check_bytes(name, value)
            # Invariant: both keys are one hash long (the controller derives them).
            if len(value) != self.mechanism.digest_size:
                raise ValueError(f"{name} of {self.mechanism.mechanism_name} is "
                                 f"{self.mechanism.digest_size} bytes, not {len(value)}")
        check_int("iterations", self.iterations, 1, INT32_MAX)


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord(_RecordBase):
    """Removes one user's credential for one SCRAM mechanism (KIP-554); it must exist."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _str("name"), ("mechanism", enc_int8, dec_int8),
    )

    name: str
    mechanism: ScramMechanism

    def __post_init__(self) -> None:
        _check_scram_user(self)
        object.__setattr__(self, "mechanism", ScramMechanism(self.mechanism))


def _check_principal(name: str, value: str) -> None:
    """A ``Type:name`` principal with both parts non-empty (``User:alice``)."""
    check_string(name, value)
    parse_principal(value)


def _check_token_id(record: object) -> None:
    token_id = getattr(record, "token_id")  # noqa: B009
    check_string("token_id", token_id)
    if not token_id:
        raise ValueError("a delegation token id must not be empty")


@dataclass(frozen=True, slots=True)
class DelegationTokenRecord(_RecordBase):
    """Creates a delegation token (KIP-48), or replaces one with a new
    expiration (a renewal, or an expiry that is not immediate). Kafka's
    record 10, its fields in Kafka's order.

    Principals are ``Type:name`` strings. The token's HMAC (its password) is
    not stored: every node recomputes it from ``delegation.token.secret.key``
    and the token id (`metadata_quorum.delegation_tokens.token_hmac`), so the
    log and snapshots hold nothing a reader could log in with. Timestamps
    are ms since the epoch; the record does not order them, since they come
    from the clock of whichever controller was active (Kafka checks none).
    """

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.DELEGATION_TOKEN_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _str("owner"), _str("requester"), _strs("renewers"), _int64("issue_timestamp"),
        _int64("max_timestamp"), _int64("expiration_timestamp"), _str("token_id"),
    )

    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int
    token_id: str

    def __post_init__(self) -> None:
        _check_principal("owner", self.owner)
        _check_principal("requester", self.requester)
        if not isinstance(self.renewers, tuple):
            raise TypeError("renewers must be a tuple of principals")
        for renewer in self.renewers:
            _check_principal("renewer", renewer)
        for name in ("issue_timestamp", "max_timestamp", "expiration_timestamp"):
            check_int(name, getattr(self, name), INT64_MIN, INT64_MAX)
        _check_token_id(self)


@dataclass(frozen=True, slots=True)
class RemoveDelegationTokenRecord(_RecordBase):
    """Removes a delegation token (Kafka's record 26): expired at once by its
    owner or a renewer, or swept after its expiry; it must exist."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_DELEGATION_TOKEN_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (_str("token_id"),)

    token_id: str

    def __post_init__(self) -> None:
        _check_token_id(self)


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord(_RecordBase):
    """Adds one ACL (KIP-801, Kafka's record 18): its id, then its binding's
    fields in Kafka's order. Only a storable ACL: a concrete resource type,
    a LITERAL or PREFIXED pattern with a name, a concrete operation, ALLOW
    or DENY (what `metadata_quorum.acls.validate_new_acl` lets through; its
    other checks are the controller's, not the record's, so a log written
    under older rules still decodes)."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.ACCESS_CONTROL_ENTRY_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _uuid("acl_id"), _int8("resource_type"), _str("resource_name"), _int8("pattern_type"),
        _str("principal"), _str("host"), _int8("operation"), _int8("permission_type"),
    )

    acl_id: uuid.UUID
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        check_uuid("acl_id", self.acl_id)
        for name, enum, refused in (
            ("resource_type", ResourceType, (ResourceType.UNKNOWN, ResourceType.ANY)),
            ("pattern_type", PatternType,
             (PatternType.UNKNOWN, PatternType.ANY, PatternType.MATCH)),
            ("operation", AclOperation, (AclOperation.UNKNOWN, AclOperation.ANY)),
            ("permission_type", AclPermissionType,
             (AclPermissionType.UNKNOWN, AclPermissionType.ANY)),
        ):
            value = enum(getattr(self, name))
            if value in refused:
                raise ValueError(f"{name} {value.name} is a filter value, not an ACL's")
            object.__setattr__(self, name, value)
        for name in ("resource_name", "principal", "host"):
            check_string(name, getattr(self, name))
        if not self.resource_name:
            raise ValueError("an ACL's resource name must not be empty")

    @classmethod
    def from_acl(cls, acl: StandardAcl) -> AccessControlEntryRecord:
        b = acl.binding
        return cls(acl.acl_id, b.resource_type, b.resource_name, b.pattern_type, b.principal,
                   b.host, b.operation, b.permission)

    def to_acl(self) -> StandardAcl:
        return StandardAcl(self.acl_id, AclBinding(
            self.resource_type, self.resource_name, self.pattern_type, self.principal,
            self.host, self.operation, self.permission_type))


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord(_RecordBase):
    """Removes the ACL with this id (Kafka's record 19); it must exist."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (_uuid("acl_id"),)

    acl_id: uuid.UUID

    def __post_init__(self) -> None:
        check_uuid("acl_id", self.acl_id)


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(_RecordBase):
    """The producer-id block boundary: ids below ``next_producer_id`` are handed out.

    ``broker_id``/``broker_epoch`` name the broker that got the block, or -1
    in a snapshot.
    """

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.PRODUCER_IDS_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _int32("broker_id"), _int64("broker_epoch"), _int64("next_producer_id"),
    )

    broker_id: int
    broker_epoch: int
    next_producer_id: int

    def __post_init__(self) -> None:
        check_int("broker_id", self.broker_id, -1, INT32_MAX)
        check_int("broker_epoch", self.broker_epoch, -1, INT64_MAX)
        check_int("next_producer_id", self.next_producer_id, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord(_RecordBase):
    """Sets a finalized feature level (e.g. ``metadata.version``); 0 removes it."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.FEATURE_LEVEL_RECORD
    FIELDS: ClassVar[tuple[tuple[str, Encoder, Decoder], ...]] = (
        _str("name"), _int16("feature_level"),
    )

    name: str
    feature_level: int

    def __post_init__(self) -> None:
        _check_feature_name("name", self.name)
        check_int("feature_level", self.feature_level, 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class NoOpRecord(_RecordBase):
    """Does nothing; lets the log (and broker catch-up) advance when idle (KIP-835)."""

    TYPE: ClassVar[MetadataRecordType] = MetadataRecordType.NO_OP_RECORD


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
    | TopicRecord
    | RemoveTopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ConfigRecord
    | ClientQuotaRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | DelegationTokenRecord
    | RemoveDelegationTokenRecord
    | ProducerIdsRecord
    | FeatureLevelRecord
    | NoOpRecord
)

RECORD_CLASSES: dict[int, type[MetadataRecord]] = {
    int(cls.TYPE): cls
    for cls in (
        RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord,
        BrokerRegistrationChangeRecord, TopicRecord, RemoveTopicRecord, PartitionRecord,
        PartitionChangeRecord, ConfigRecord, ClientQuotaRecord, UserScramCredentialRecord,
        RemoveUserScramCredentialRecord, AccessControlEntryRecord, RemoveAccessControlEntryRecord,
        DelegationTokenRecord, RemoveDelegationTokenRecord, ProducerIdsRecord, FeatureLevelRecord,
        NoOpRecord,
    )
}
