"""`MetadataDelta`: records replayed on top of a `MetadataImage`, then applied.

This is the only place metadata state changes. The active controller,
standby controllers and brokers all run exactly this code on the same
records (KIP-631 "replay"), so they derive equal images.

Usage::

    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)          # MetadataReplayError if it cannot apply
    image = delta.apply(MetadataProvenance(last_offset, last_epoch))

A record that does not apply to the state (an unknown topic, a stale broker
epoch, a partition change that breaks the partition invariants) means the
log and this node disagree: `MetadataReplayError` is a broken invariant
(STYLE.md section 8, tier 3) and the node must stop.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TypeVar

from metadata_quorum.acls import StandardAcl
from metadata_quorum.image import (
    BrokerRegistration,
    ConfigResource,
    MetadataImage,
    MetadataProvenance,
    PartitionRegistration,
    ScramCredentialKey,
    TopicImage,
    frozen_mapping,
)
from metadata_quorum.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    DelegationTokenRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
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
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from raftlog.security.scram import ScramCredential

__all__ = ["MetadataDelta", "MetadataReplayError"]


class MetadataReplayError(Exception):
    """A record does not apply to the current state: a broken invariant; stop the node."""

    def __init__(self, record: MetadataRecord, reason: str) -> None:
        super().__init__(f"cannot replay {type(record).__name__}: {reason}")
        self.record = record
        self.reason = reason


class _TopicChange:
    """A topic created or changed in this delta: base partitions plus overrides."""

    __slots__ = ("base", "changed", "name", "topic_id")

    def __init__(self, base: TopicImage) -> None:
        self.name = base.name
        self.topic_id = base.topic_id
        self.base = base
        self.changed: dict[int, PartitionRegistration] = {}

    def partition(self, partition_id: int) -> PartitionRegistration | None:
        found = self.changed.get(partition_id)
        return found if found is not None else self.base.partitions.get(partition_id)

    def build(self) -> TopicImage:
        if not self.changed:
            return self.base
        partitions = dict(self.base.partitions)
        partitions.update(self.changed)
        return self.base.with_partitions(frozen_mapping(partitions))


class MetadataDelta:
    """Changes on top of ``image``; `replay` records, then `apply` once.

    Lookups (`broker`, `topic_id`, `partition`, `scram_credential`, `acl`,
    `delegation_token`) see the replayed records.
    """

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._topics: dict[uuid.UUID, _TopicChange | None] = {}
        self._names: dict[str, uuid.UUID | None] = {}
        self._configs: dict[ConfigResource, dict[str, str]] = {}
        self._next_producer_id: int | None = None
        self._features: dict[str, int] | None = None
        self._client_quotas: dict[QuotaEntity, dict[str, float]] = {}
        # Set (a credential) or removed (None) by this delta.
        self._scram: dict[ScramCredentialKey, ScramCredential | None] = {}
        # ACLs (KIP-801) added (the ACL) or removed (None) by this delta, by id.
        self._acls: dict[uuid.UUID, StandardAcl | None] = {}
        # Delegation tokens (KIP-48) set (the latest record) or removed (None), by id.
        self._tokens: dict[str, DelegationTokenRecord | None] = {}

    @property
    def image(self) -> MetadataImage:
        """The image this delta started from."""
        return self._image

    # --- lookups through the delta ------------------------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._image.brokers.get(broker_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        if name in self._names:
            return self._names[name]
        return self._image.topic_ids.get(name)

    def _topic_change(self, topic_id: uuid.UUID) -> _TopicChange | None:
        if topic_id in self._topics:
            return self._topics[topic_id]
        base = self._image.topics.get(topic_id)
        if base is None:
            return None
        change = _TopicChange(base)
        self._topics[topic_id] = change
        return change

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        if topic_id in self._topics:
            change = self._topics[topic_id]
            return None if change is None else change.partition(partition_id)
        return self._image.partition(topic_id, partition_id)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        key = (user, mechanism)
        if key in self._scram:
            return self._scram[key]
        return self._image.scram_credential(user, mechanism)

    def acl(self, acl_id: uuid.UUID) -> StandardAcl | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self._image.acls.get(acl_id)

    def delegation_token(self, token_id: str) -> DelegationTokenRecord | None:
        if token_id in self._tokens:
            return self._tokens[token_id]
        return self._image.delegation_tokens.get(token_id)

    @property
    def changed_topic_ids(self) -> frozenset[uuid.UUID]:
        """Topics created, changed or removed by this delta."""
        return frozenset(self._topics)

    @property
    def changed_broker_ids(self) -> frozenset[int]:
        return frozenset(self._brokers)

    # --- replay ---------------------------------------------------------------

    def replay(self, record: MetadataRecord) -> None:
        """Apply one record to the delta. Raises `MetadataReplayError` if it cannot apply."""
        match record:
            case RegisterBrokerRecord():
                self._replay_register(record)
            case UnregisterBrokerRecord():
                self._broker_at_epoch(record, record.broker_id, record.broker_epoch)
                self._brokers[record.broker_id] = None
            case FenceBrokerRecord():
                self._change_broker(record, record.broker_id, record.broker_epoch, fenced=True)
            case UnfenceBrokerRecord():
                self._change_broker(record, record.broker_id, record.broker_epoch, fenced=False)
            case BrokerRegistrationChangeRecord():
                self._change_broker(
                    record, record.broker_id, record.broker_epoch, fenced=record.fenced,
                    in_controlled_shutdown=record.in_controlled_shutdown,
                )
            case TopicRecord():
                self._replay_topic(record)
            case RemoveTopicRecord():
                self._replay_remove_topic(record)
            case PartitionRecord():
                self._replay_partition(record)
            case PartitionChangeRecord():
                self._replay_partition_change(record)
            case ConfigRecord():
                self._replay_config(record)
            case ClientQuotaRecord():
                quotas = self._client_quotas.get(record.entity)
                if quotas is None:
                    quotas = dict(self._image.client_quotas.get(record.entity, {}))
                    self._client_quotas[record.entity] = quotas
                if record.remove:
                    quotas.pop(record.key, None)
                else:
                    quotas[record.key] = record.value
            case UserScramCredentialRecord():
                key = (record.name, record.mechanism.mechanism_name)
                self._scram[key] = ScramCredential(
                    salt=record.salt, stored_key=record.stored_key,
                    server_key=record.server_key, iterations=record.iterations)
            case RemoveUserScramCredentialRecord():
                key = (record.name, record.mechanism.mechanism_name)
                if self.scram_credential(*key) is None:
                    # Kafka's ScramControlManager: the controller checked it exists.
                    raise MetadataReplayError(
                        record, f"no {key[1]} credential for user {key[0]!r} to remove")
                self._scram[key] = None
            case AccessControlEntryRecord():
                # Kafka's AclControlManager.replay: a known id is overwritten.
                self._acls[record.acl_id] = record.to_acl()
            case RemoveAccessControlEntryRecord():
                if self.acl(record.acl_id) is None:
                    # Kafka's AclControlManager: the controller removes only ACLs it has.
                    raise MetadataReplayError(record, f"no ACL with id {record.acl_id} to remove")
                self._acls[record.acl_id] = None
            case DelegationTokenRecord():
                # A new token, or a renewal/expiry of one: the record is the
                # whole token, so it replaces (Kafka's DelegationTokenDelta).
                self._tokens[record.token_id] = record
            case RemoveDelegationTokenRecord():
                if self.delegation_token(record.token_id) is None:
                    # As for SCRAM credentials and ACLs: the controller removes
                    # only tokens it has, so a miss means the log and this node
                    # disagree (Kafka's DelegationTokenDelta would ignore it).
                    raise MetadataReplayError(
                        record, f"no delegation token {record.token_id!r} to remove")
                self._tokens[record.token_id] = None
            case ProducerIdsRecord():
                current = self._current_next_producer_id()
                if record.next_producer_id < current:
                    raise MetadataReplayError(
                        record, f"next producer id {record.next_producer_id} < {current}"
                    )
                self._next_producer_id = record.next_producer_id
            case FeatureLevelRecord():
                if self._features is None:
                    self._features = dict(self._image.features)
                if record.feature_level == 0:
                    self._features.pop(record.name, None)
                else:
                    self._features[record.name] = record.feature_level
            case NoOpRecord():
                pass

    def _current_next_producer_id(self) -> int:
        if self._next_producer_id is not None:
            return self._next_producer_id
        return self._image.next_producer_id

    def _replay_register(self, record: RegisterBrokerRecord) -> None:
        previous = self.broker(record.broker_id)
        # Broker epochs are record offsets, so a later registration always
        # carries a larger epoch (KIP-631). Equal epochs only in a snapshot
        # reload, which starts from an empty image.
        if previous is not None and record.broker_epoch <= previous.epoch:
            raise MetadataReplayError(
                record, f"broker epoch {record.broker_epoch} <= current {previous.epoch}"
            )
        self._brokers[record.broker_id] = BrokerRegistration.from_record(record)

    def _broker_at_epoch(
        self, record: MetadataRecord, broker_id: int, epoch: int
    ) -> BrokerRegistration:
        broker = self.broker(broker_id)
        if broker is None:
            raise MetadataReplayError(record, f"broker {broker_id} is not registered")
        if broker.epoch != epoch:
            raise MetadataReplayError(
                record, f"broker {broker_id} has epoch {broker.epoch}, record says {epoch}"
            )
        return broker

    def _change_broker(
        self,
        record: MetadataRecord,
        broker_id: int,
        epoch: int,
        *,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
    ) -> None:
        broker = self._broker_at_epoch(record, broker_id, epoch)
        if fenced is not None:
            broker = replace(broker, fenced=fenced)
            if not fenced:
                # Unfencing ends any controlled shutdown of an earlier life.
                broker = replace(broker, in_controlled_shutdown=False)
        if in_controlled_shutdown is not None:
            broker = replace(broker, in_controlled_shutdown=in_controlled_shutdown)
        self._brokers[broker_id] = broker

    def _replay_topic(self, record: TopicRecord) -> None:
        if self.topic_id(record.name) is not None:
            raise MetadataReplayError(record, f"topic {record.name!r} already exists")
        if self._topic_change(record.topic_id) is not None:
            raise MetadataReplayError(record, f"topic id {record.topic_id} already in use")
        self._topics[record.topic_id] = _TopicChange(TopicImage(record.name, record.topic_id))
        self._names[record.name] = record.topic_id

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        change = self._topic_change(record.topic_id)
        if change is None:
            raise MetadataReplayError(record, f"unknown topic id {record.topic_id}")
        self._topics[record.topic_id] = None
        self._names[change.name] = None
        # Kafka drops a deleted topic's configs with it.
        self._configs[ConfigResource(ConfigResourceType.TOPIC, change.name)] = {}

    def _replay_partition(self, record: PartitionRecord) -> None:
        change = self._topic_change(record.topic_id)
        if change is None:
            raise MetadataReplayError(record, f"unknown topic id {record.topic_id}")
        if change.partition(record.partition_id) is not None:
            raise MetadataReplayError(
                record, f"partition {record.partition_id} of {change.name} already exists"
            )
        change.changed[record.partition_id] = PartitionRegistration.from_record(record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        change = self._topic_change(record.topic_id)
        if change is None:
            raise MetadataReplayError(record, f"unknown topic id {record.topic_id}")
        current = change.partition(record.partition_id)
        if current is None:
            raise MetadataReplayError(
                record, f"unknown partition {record.partition_id} of {change.name}"
            )
        try:
            change.changed[record.partition_id] = current.merge(record)
        except ValueError as exc:
            raise MetadataReplayError(record, str(exc)) from None

    def _replay_config(self, record: ConfigRecord) -> None:
        resource = ConfigResource(record.resource_type, record.resource_name)
        entries = self._configs.get(resource)
        if entries is None:
            entries = dict(self._image.config(resource))
            self._configs[resource] = entries
        if record.value is None:
            entries.pop(record.name, None)
        else:
            entries[record.name] = record.value

    # --- apply ----------------------------------------------------------------

    def apply(self, provenance: MetadataProvenance) -> MetadataImage:
        """The image after every replayed record, standing at ``provenance``.

        Unchanged parts are shared with the base image. Raises ValueError if
        ``provenance`` is behind the base image's.
        """
        image = self._image
        if provenance.last_offset < image.provenance.last_offset:
            raise ValueError(
                f"provenance {provenance.last_offset} is behind the image's "
                f"{image.provenance.last_offset}"
            )
        brokers = image.brokers
        if self._brokers:
            new_brokers = dict(brokers)
            for broker_id, broker in self._brokers.items():
                if broker is None:
                    new_brokers.pop(broker_id, None)
                else:
                    new_brokers[broker_id] = broker
            brokers = frozen_mapping(new_brokers)
        topics, topic_ids = image.topics, image.topic_ids
        if self._topics:
            new_topics = dict(topics)
            for topic_id, change in self._topics.items():
                if change is None:
                    new_topics.pop(topic_id, None)
                else:
                    new_topics[topic_id] = change.build()
            topics = frozen_mapping(new_topics)
        if self._names:
            new_ids = dict(topic_ids)
            for name, maybe_id in self._names.items():
                if maybe_id is None:
                    new_ids.pop(name, None)
                else:
                    new_ids[name] = maybe_id
            topic_ids = frozen_mapping(new_ids)
        return MetadataImage(
            provenance=provenance,
            brokers=brokers,
            topics=topics,
            topic_ids=topic_ids,
            configs=_overlay(image.configs, self._configs),
            next_producer_id=self._current_next_producer_id(),
            features=image.features if self._features is None else frozen_mapping(
                dict(self._features)
            ),
            client_quotas=_overlay(image.client_quotas, self._client_quotas),
            scram_credentials=self._apply_scram(image.scram_credentials),
            acls=self._apply_acls(image.acls),
            delegation_tokens=self._apply_tokens(image.delegation_tokens),
        )

    def _apply_scram(
        self, base: Mapping[ScramCredentialKey, ScramCredential]
    ) -> Mapping[ScramCredentialKey, ScramCredential]:
        """``base`` with this delta's credential changes; the same object when
        there are none (readers can tell by identity)."""
        if not self._scram:
            return base
        merged = dict(base)
        for key, credential in self._scram.items():
            if credential is None:
                merged.pop(key, None)
            else:
                merged[key] = credential
        return frozen_mapping(merged)

    def _apply_acls(
        self, base: Mapping[uuid.UUID, StandardAcl]
    ) -> Mapping[uuid.UUID, StandardAcl]:
        """``base`` with this delta's ACL changes; the same object when no ACL
        record was replayed (a broker's authorizer is rebuilt only when the
        mapping is a new object)."""
        if not self._acls:
            return base
        merged = dict(base)
        for acl_id, acl in self._acls.items():
            if acl is None:
                merged.pop(acl_id, None)
            else:
                merged[acl_id] = acl
        return frozen_mapping(merged)

    def _apply_tokens(
        self, base: Mapping[str, DelegationTokenRecord]
    ) -> Mapping[str, DelegationTokenRecord]:
        """``base`` with this delta's token changes; the same object when no
        token record was replayed (readers can tell by identity)."""
        if not self._tokens:
            return base
        merged = dict(base)
        for token_id, token in self._tokens.items():
            if token is None:
                merged.pop(token_id, None)
            else:
                merged[token_id] = token
        return frozen_mapping(merged)


K = TypeVar("K")
V = TypeVar("V")


def _overlay(
    base: Mapping[K, Mapping[str, V]], changed: dict[K, dict[str, V]]
) -> Mapping[K, Mapping[str, V]]:
    """``base`` with each changed owner's entries replaced (configs per
    resource, quotas per entity); an owner left with none is dropped. The
    same object when nothing changed, so readers can tell by identity."""
    if not changed:
        return base
    merged = dict(base)
    for owner, entries in changed.items():
        if entries:
            merged[owner] = frozen_mapping(dict(entries))
        else:
            merged.pop(owner, None)
    return frozen_mapping(merged)
