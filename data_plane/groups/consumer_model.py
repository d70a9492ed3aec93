"""Inputs and outputs of the KIP-848 consumer protocol commands
(ConsumerGroupHeartbeat, ConsumerGroupDescribe): frozen dataclasses, no wire
types. ``wire.py`` maps them from and to kio.

The coordinator assigns partitions by topic id and needs the topics' current
metadata to do it; the broker hands it a `TopicsView` of its metadata image.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from raftlog.net.errors import ErrorCode

from .assignors import AssignmentTopic

__all__ = (
    "ConsumerGroupDescription",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "ConsumerMemberDescription",
    "DescribedTopicPartitions",
    "MappingTopicsView",
    "TopicPartitions",
    "TopicsView",
)

#: (topic id, partition indexes) as the protocol carries an assignment.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class TopicsView(Protocol):
    """The topics the metadata image holds, as the coordinator needs them."""

    def by_name(self, name: str) -> AssignmentTopic | None: ...

    def by_id(self, topic_id: uuid.UUID) -> AssignmentTopic | None: ...

    def names(self) -> Iterable[str]: ...


class MappingTopicsView:
    """A `TopicsView` over a fixed collection of topics."""

    def __init__(self, topics: Iterable[AssignmentTopic]) -> None:
        self._by_id: dict[uuid.UUID, AssignmentTopic] = {t.topic_id: t for t in topics}
        self._by_name: dict[str, AssignmentTopic] = {t.name: t for t in self._by_id.values()}

    def by_name(self, name: str) -> AssignmentTopic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> AssignmentTopic | None:
        return self._by_id.get(topic_id)

    def names(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_id)

    def as_mapping(self) -> Mapping[uuid.UUID, AssignmentTopic]:
        return self._by_id


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat (API 68). None in an optional field means
    "unchanged since the last heartbeat"; a join (epoch 0) must carry the
    rebalance timeout, a subscription and an empty ``owned``."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: The partitions the member owns now (``TopicPartitions``).
    owned: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    #: v0: the coordinator names a joining member; v1 (KIP-1082): the client does.
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: The member's assignment, when it changed or the request was a full one.
    assignment: TopicPartitions | None = None


#: (topic id, topic name, partition indexes), as ConsumerGroupDescribe shows them.
DescribedTopicPartitions = tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: DescribedTopicPartitions
    target_assignment: DescribedTopicPartitions
    #: The member speaks the classic protocol (JoinGroup, SyncGroup) inside
    #: a consumer group (KIP-848 migration); ConsumerGroupDescribe v1's
    #: MemberType 0, else 1.
    classic: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """ConsumerGroupDescribe for one group (API 69)."""

    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()
    #: The ACL operations the requester may do on the group (a bitfield by
    #: Kafka's operation codes); INT32_MIN when not asked.
    authorized_operations: int = -(2**31)
