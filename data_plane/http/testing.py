"""`FakeBackend`: an in-memory `ClusterBackend` for REST tests (no node, no sockets).

A metadata image built from a few calls (`add_broker`, topics through
`create_topic`), logs as Python lists, a fixed high watermark per partition
(records above it are unreadable, as on a real broker), and groups set
directly. It answers like `NodeBackend` does: the same `RestError`s for
missing topics, partitions and groups, and for existing topics.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from metadata_quorum.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    frozen_mapping,
)
from metadata_quorum.records import Endpoint

from .backend import (
    FetchedRecord,
    FetchResult,
    GroupDescription,
    GroupSummary,
    PartitionLag,
    ProduceRecord,
    ProduceResult,
    QuorumReplica,
    QuorumView,
    RestError,
    default_partition,
)

__all__ = ("FakeBackend",)


@dataclass(slots=True)
class _Log:
    records: list[FetchedRecord] = field(default_factory=list)
    high_watermark: int = 0


class FakeBackend:
    """See the module docstring. ``hold_back`` records per partition stay above the HW."""

    def __init__(self, cluster_id: str = "fake-cluster", node_id: int = 1, brokers: int = 3,
                 default_partitions: int = 1, default_replication_factor: int = 1) -> None:
        self._cluster_id = cluster_id
        self._node_id = node_id
        self._image = MetadataImage()
        self.logs: dict[tuple[str, int], _Log] = {}
        self.groups: dict[str, GroupDescription] = {}
        self.committed: dict[str, dict[tuple[str, int], int]] = {}
        self.hold_back = 0
        self._defaults = (default_partitions, default_replication_factor)
        self._round_robin = itertools.count()
        for broker_id in range(1, brokers + 1):
            self.add_broker(broker_id)

    # ---- setup -------------------------------------------------------------------

    def add_broker(self, broker_id: int, *, fenced: bool = False) -> None:
        brokers = dict(self._image.brokers)
        brokers[broker_id] = BrokerRegistration(
            broker_id, 1, uuid.UUID(int=broker_id),
            (Endpoint("PLAINTEXT", "127.0.0.1", 9091 + broker_id),), None, fenced)
        self._set(brokers=brokers)

    def set_isr(self, topic: str, partition: int, isr: Sequence[int], leader: int) -> None:
        topic_image = self._image.topic_by_name(topic)
        assert topic_image is not None
        partitions = dict(topic_image.partitions)
        old = partitions[partition]
        partitions[partition] = PartitionRegistration(old.replicas, tuple(isr), leader,
                                                      old.leader_epoch + 1)
        topics = dict(self._image.topics)
        topics[topic_image.topic_id] = topic_image.with_partitions(frozen_mapping(partitions))
        self._set(topics=topics)

    def _set(self, **parts: object) -> None:
        image = self._image
        self._image = MetadataImage(
            brokers=frozen_mapping(dict(parts.get("brokers", image.brokers))),  # type: ignore[call-overload]
            topics=frozen_mapping(dict(parts.get("topics", image.topics))),  # type: ignore[call-overload]
            topic_ids=frozen_mapping(dict(parts.get("topic_ids", image.topic_ids))),  # type: ignore[call-overload]
        )

    # ---- ClusterBackend ------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def node_id(self) -> int:
        return self._node_id

    def image(self) -> MetadataImage:
        return self._image

    async def quorum(self) -> QuorumView:
        voters = tuple(QuorumReplica(b, 10, 0, 1, 1) for b in sorted(self._image.brokers))
        return QuorumView(1, 1, 10, voters, ())

    async def create_topic(self, name: str, partitions: int | None,
                           replication_factor: int | None,
                           configs: Mapping[str, str]) -> None:
        if self._image.topic_by_name(name) is not None:
            raise RestError(409, 40902, f"cannot create topic {name!r}: TOPIC_ALREADY_EXISTS")
        count = partitions or self._defaults[0]
        rf = replication_factor or self._defaults[1]
        brokers = sorted(self._image.brokers)
        if rf > len(brokers):
            raise RestError(400, 40002, f"cannot create topic {name!r}: "
                                        "INVALID_REPLICATION_FACTOR")
        topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        registrations = {}
        for p in range(count):
            replicas = tuple(brokers[(p + i) % len(brokers)] for i in range(rf))
            registrations[p] = PartitionRegistration(replicas, replicas, replicas[0], 0)
            self.logs[(name, p)] = _Log()
        topics = dict(self._image.topics)
        topics[topic_id] = TopicImage(name, topic_id, frozen_mapping(registrations))
        topic_ids = dict(self._image.topic_ids)
        topic_ids[name] = topic_id
        self._set(topics=topics, topic_ids=topic_ids)

    async def delete_topic(self, name: str) -> None:
        topic = self._image.topic_by_name(name)
        if topic is None:
            raise RestError(404, 40403, f"topic {name!r} not found")
        topics = dict(self._image.topics)
        del topics[topic.topic_id]
        topic_ids = dict(self._image.topic_ids)
        del topic_ids[name]
        self._set(topics=topics, topic_ids=topic_ids)
        for key in [k for k in self.logs if k[0] == name]:
            del self.logs[key]

    async def produce(self, topic: str, records: Sequence[ProduceRecord]) -> list[ProduceResult]:
        topic_image = self._image.topic_by_name(topic)
        if topic_image is None:
            raise RestError(404, 40403, f"topic {topic!r} not found")
        results = []
        for record in records:
            partition = record.partition
            if partition is None:
                partition = default_partition(record.key, len(topic_image.partitions),
                                              self._round_robin)
            if partition not in topic_image.partitions:
                raise RestError(404, 40402, f"partition {partition} of {topic!r} not found")
            log = self.logs[(topic, partition)]
            offset = len(log.records)
            timestamp = record.timestamp_ms if record.timestamp_ms is not None else 1000 + offset
            log.records.append(FetchedRecord(offset, timestamp, record.key, record.value,
                                             record.headers))
            log.high_watermark = max(0, len(log.records) - self.hold_back)
            results.append(ProduceResult(partition, offset, timestamp))
        return results

    async def fetch(self, topic: str, partition: int, offset: int,
                    max_records: int) -> FetchResult:
        log = self.logs.get((topic, partition))
        if log is None:
            raise RestError(404, 40402, f"partition {partition} of {topic!r} not found")
        if offset > len(log.records):
            raise RestError(416, 41601, f"fetch from {topic}-{partition}: OFFSET_OUT_OF_RANGE")
        visible = log.records[offset:log.high_watermark][:max_records]
        return FetchResult(tuple(visible), log.high_watermark, 0)

    async def list_groups(self) -> list[GroupSummary]:
        return [GroupSummary(g.group_id, g.state, g.protocol_type, g.coordinator_id)
                for g in sorted(self.groups.values(), key=lambda g: g.group_id)]

    async def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            raise RestError(404, 40404, f"consumer group {group_id!r} not found")
        return group

    async def group_lags(self, group_id: str) -> list[PartitionLag]:
        group = await self.describe_group(group_id)
        committed = self.committed.get(group_id, {})
        owners = {tp: m for m in group.members for tp in m.assignments}
        lags = []
        for key in sorted(set(committed) | set(owners)):
            log = self.logs.get(key)
            end = log.high_watermark if log is not None else -1
            current = committed.get(key, -1)
            owner = owners.get(key)
            lags.append(PartitionLag(key[0], key[1], current, end,
                                     end - current if current >= 0 and end >= 0 else -1,
                                     owner.member_id if owner else None,
                                     owner.client_id if owner else None))
        return lags

    async def end_offsets(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {k: self.logs[k].high_watermark for k in keys if k in self.logs}
