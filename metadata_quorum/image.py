"""`MetadataImage`: the immutable cluster metadata at one offset of the metadata log.

After Kafka's ``image/`` package (design only): an image is never changed;
a `metadata_quorum.delta.MetadataDelta` replays records on top of one and
``apply()`` derives the next image. The derivation is copy-on-write per
part: brokers, topics and configs are separate mappings, and a topic that a
delta did not touch is shared, object for object, with the previous image.
So deriving an image after a few topic changes costs one shallow copy of the
topic index plus the changed topics, not a copy of every partition.

Mappings exposed by images are read-only views (``MappingProxyType``);
images compare by value and are not hashable.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from metadata_quorum.acls import StandardAcl
from metadata_quorum.records import (
    NO_LEADER,
    AccessControlEntryRecord,
    BrokerFeature,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    DelegationTokenRecord,
    Endpoint,
    FeatureLevelRecord,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    QuotaEntity,
    RegisterBrokerRecord,
    ScramMechanism,
    TopicRecord,
    UserScramCredentialRecord,
    check_partition_shape,
)
from raftlog.security.scram import ScramCredential

__all__ = [
    "EMPTY_IMAGE",
    "BrokerRegistration",
    "ConfigResource",
    "MetadataImage",
    "MetadataProvenance",
    "PartitionRegistration",
    "ScramCredentialKey",
    "TopicImage",
    "frozen_mapping",
]


K = TypeVar("K")
V = TypeVar("V")


def frozen_mapping(data: dict[K, V] | None = None) -> Mapping[K, V]:
    """A read-only view over ``data`` (the caller hands over ownership of the dict)."""
    return MappingProxyType(data if data is not None else {})


@dataclass(frozen=True, slots=True)
class MetadataProvenance:
    """Where an image stands in the metadata log.

    ``last_offset`` is the offset of the last record it includes (-1 for the
    empty image) and ``last_epoch`` that record's leader epoch.
    """

    last_offset: int = -1
    last_epoch: int = -1

    def __post_init__(self) -> None:
        if self.last_offset < -1 or self.last_epoch < -1:
            raise ValueError(f"bad provenance {self.last_offset}/{self.last_epoch}")


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One registered broker. ``epoch`` is the offset of its RegisterBroker
    record; ``features`` the feature level ranges its software declared."""

    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    features: tuple[BrokerFeature, ...] = ()

    @property
    def usable(self) -> bool:
        """KIP-841: may lead and be in an ISR (unfenced and not shutting down)."""
        return not self.fenced and not self.in_controlled_shutdown

    def supported_range(self, feature: str) -> tuple[int, int]:
        """The levels of ``feature`` this broker can run with: its declared
        range, or (0, 0) for a feature it did not declare (Kafka's reading
        of a registration without the feature: only "off")."""
        for f in self.features:
            if f.name == feature:
                return f.min_supported, f.max_supported
        return 0, 0

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.broker_id, incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch, listeners=self.listeners, rack=self.rack,
            fenced=self.fenced, in_controlled_shutdown=self.in_controlled_shutdown,
            features=self.features,
        )

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            broker_id=record.broker_id, epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id, listeners=record.listeners,
            rack=record.rack, fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            features=record.features,
        )


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's replicas, ISR, leader and epochs.

    Invariants (checked on construction): see
    `metadata_quorum.records.check_partition_shape`; epochs are >= 0.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    #: KIP-966: replicas outside the ISR that hold every record below the
    #: high watermark (the ISR shrank below ``min.insync.replicas`` without
    #: them), so they may be elected when the ISR is empty.
    elr: tuple[int, ...] = ()
    #: KIP-966: the last leader, kept once the ISR and ELR are both empty
    #: (for an operator's recovery); cleared when the partition has a leader.
    last_known_elr: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_partition_shape(
            self.replicas, self.isr, self.removing_replicas, self.adding_replicas, self.leader,
            self.elr,
        )
        if self.leader_epoch < 0 or self.partition_epoch < 0:
            raise ValueError("epochs are non-negative")

    @property
    def preferred_leader(self) -> int:
        """The first replica (Kafka's preferred replica)."""
        return self.replicas[0]

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``change``: partition epoch + 1 always, leader epoch
        + 1 whenever the record sets the leader (KIP-631), even to the same
        broker: a reassignment that removes replicas fences them that way
        (Kafka's replay does the same). Raises ValueError if the result breaks
        the partition invariants."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader_changed:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        state = self.leader_recovery_state
        if change.leader_recovery_state != -1:
            state = LeaderRecoveryState(change.leader_recovery_state)
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=(
                self.removing_replicas
                if change.removing_replicas is None
                else change.removing_replicas
            ),
            adding_replicas=(
                self.adding_replicas if change.adding_replicas is None else change.adding_replicas
            ),
            leader_recovery_state=state,
            elr=self.elr if change.eligible_leader_replicas is None else (
                change.eligible_leader_replicas),
            last_known_elr=self.last_known_elr if change.last_known_elr is None else (
                change.last_known_elr),
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(
            partition_id=partition_id, topic_id=topic_id, replicas=self.replicas,
            isr=self.isr, removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas, leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch, partition_epoch=self.partition_epoch,
            eligible_leader_replicas=self.elr, last_known_elr=self.last_known_elr,
        )

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=record.replicas, isr=record.isr, leader=record.leader,
            leader_epoch=record.leader_epoch, partition_epoch=record.partition_epoch,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader_recovery_state=record.leader_recovery_state,
            elr=record.eligible_leader_replicas, last_known_elr=record.last_known_elr,
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic and its partitions (ids 0..n-1)."""

    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=frozen_mapping)

    def with_partitions(self, partitions: Mapping[int, PartitionRegistration]) -> TopicImage:
        return replace(self, partitions=partitions)


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A config owner. ``(BROKER, "")`` holds cluster-wide defaults."""

    type: ConfigResourceType
    name: str


CLUSTER_DEFAULT_RESOURCE = ConfigResource(ConfigResourceType.BROKER, "")

#: A SCRAM credential's owner: (user name, mechanism name such as ``SCRAM-SHA-256``).
ScramCredentialKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata after replaying the log up to ``provenance.last_offset``.

    - ``brokers``: registrations by broker id;
    - ``topics``: by topic id, and ``topic_ids`` name -> id (same topics);
    - ``configs``: per resource, non-empty key -> value maps;
    - ``next_producer_id``: the first producer id not yet handed out;
    - ``features``: finalized feature levels;
    - ``client_quotas``: per client-quota entity (KIP-546), non-empty
      quota key -> value maps;
    - ``scram_credentials``: SCRAM credentials (KIP-554) by (user name,
      mechanism name); one flat mapping, so a SASL server's lookup on every
      login is one dict access (`scram_credential`);
    - ``acls``: ACLs (KIP-801) by id, in the order they were added;
    - ``delegation_tokens``: live delegation tokens (KIP-48) by token id,
      each as its latest DelegationTokenRecord (the record already holds
      every field a token has, and no HMAC: see
      `metadata_quorum.delegation_tokens`). Expired tokens stay until the
      controller's sweep removes them, so readers check the timestamps.
    """

    provenance: MetadataProvenance = MetadataProvenance()
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=frozen_mapping)
    topics: Mapping[uuid.UUID, TopicImage] = field(default_factory=frozen_mapping)
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=frozen_mapping)
    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=frozen_mapping)
    next_producer_id: int = 0
    features: Mapping[str, int] = field(default_factory=frozen_mapping)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(
        default_factory=frozen_mapping)
    scram_credentials: Mapping[ScramCredentialKey, ScramCredential] = field(
        default_factory=frozen_mapping)
    # ACLs (KIP-801) by id; the same mapping object until one changes.
    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=frozen_mapping)
    # Delegation tokens by id; the same mapping object until one changes.
    delegation_tokens: Mapping[str, DelegationTokenRecord] = field(
        default_factory=frozen_mapping)

    # --- lookups ------------------------------------------------------------

    def topic_by_name(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def iter_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition, by topic id insertion order then partition id."""
        for topic in self.topics.values():
            for partition_id, part in topic.partitions.items():
                yield topic, partition_id, part

    def is_usable(self, broker_id: int) -> bool:
        """Registered, unfenced and not in controlled shutdown (KIP-841)."""
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.usable

    def config(self, resource: ConfigResource) -> Mapping[str, str]:
        return self.configs.get(resource, _EMPTY_CONFIG)

    def topic_config(self, topic_name: str) -> Mapping[str, str]:
        return self.config(ConfigResource(ConfigResourceType.TOPIC, topic_name))

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism`` (``SCRAM-SHA-256`` or
        ``SCRAM-SHA-512``), or None; O(1)."""
        return self.scram_credentials.get((user, mechanism))

    # --- snapshots ----------------------------------------------------------

    def to_records(self) -> list[MetadataRecord]:
        """The image as records: replaying them into an empty image gives an equal
        image (with the provenance given to ``apply``). Order: features,
        brokers, topics with their partitions, configs, client quotas, SCRAM
        credentials, ACLs (in the image's order), delegation tokens (in the
        image's order), producer ids."""
        records: list[MetadataRecord] = [
            FeatureLevelRecord(name, level) for name, level in sorted(self.features.items())
        ]
        records.extend(b.to_record() for _id, b in sorted(self.brokers.items()))
        for topic in self.topics.values():
            records.append(TopicRecord(topic.name, topic.topic_id))
            records.extend(
                part.to_record(topic.topic_id, pid)
                for pid, part in sorted(topic.partitions.items())
            )
        for resource, entries in self.configs.items():
            records.extend(
                ConfigRecord(resource.type, resource.name, key, value)
                for key, value in sorted(entries.items())
            )
        for entity, quotas in self.client_quotas.items():
            records.extend(
                ClientQuotaRecord(entity, key, value) for key, value in sorted(quotas.items())
            )
        records.extend(
            UserScramCredentialRecord(
                user, ScramMechanism.from_mechanism_name(mechanism), credential.salt,
                credential.stored_key, credential.server_key, credential.iterations)
            for (user, mechanism), credential in sorted(self.scram_credentials.items(),
                                                        key=lambda item: item[0])
        )
        records.extend(AccessControlEntryRecord.from_acl(acl) for acl in self.acls.values())
        records.extend(self.delegation_tokens.values())
        if self.next_producer_id:
            records.append(ProducerIdsRecord(-1, -1, self.next_producer_id))
        return records


_EMPTY_CONFIG: Mapping[str, str] = frozen_mapping()

#: The image before any record.
EMPTY_IMAGE = MetadataImage()
