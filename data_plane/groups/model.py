"""The group coordinator's inputs and outputs: frozen dataclasses, no wire types.

Requests mirror the classic group APIs (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete) minus protocol versioning;
``wire.py`` maps them from and to kio. Error codes are kio's ``ErrorCode``.

Write commands return a ``CoordinatorResult``: the records to append to the
shard's ``__consumer_offsets`` partition and the ``Reply``s to release once
those records are durable (see ``CoordinatorResult``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from raftlog.net.errors import ErrorCode

from .consumer_model import ConsumerGroupHeartbeatResponse

#: An opaque token the broker attaches to a request whose answer may come
#: later (JoinGroup, SyncGroup) or from another call (``tick``). Each handle
#: given to the shard gets exactly one ``Reply``, or is returned by ``unload``.
RequestHandle = Hashable

#: The member id a client sends before it has one (Kafka ``UNKNOWN_MEMBER_ID``).
UNKNOWN_MEMBER_ID = ""
#: Generation id of commits from groups without membership ("simple" consumers).
NO_GENERATION = -1


class GroupConfigError(ValueError):
    """Group coordinator settings that do not fit together, naming the
    broker setting (Kafka's name) at fault."""

    def __init__(self, setting: str, detail: str) -> None:
        super().__init__(f"{setting} {detail}")
        self.setting = setting
        self.detail = detail


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Broker settings the coordinator uses, with Kafka's names and defaults."""

    #: ``group.initial.rebalance.delay.ms``: how long a new (Empty) group waits for more joiners.
    initial_rebalance_delay_ms: int = 3000
    #: ``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``.
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    #: ``group.max.size``.
    max_size: int = 2**31 - 1
    #: ``offsets.retention.minutes`` (7 days) in ms.
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    #: ``offsets.retention.check.interval.ms``.
    offsets_retention_check_interval_ms: int = 600_000
    #: ``offset.metadata.max.bytes``.
    offset_metadata_max_bytes: int = 4096
    #: ``offsets.commit.timeout.ms``: how long a commit (or any group write)
    #: waits for its records to reach every in-sync replica of the offsets
    #: partition before it is answered with an error instead.
    offsets_commit_timeout_ms: int = 5000
    #: KIP-848 consumer groups: ``group.consumer.session.timeout.ms``,
    #: ``group.consumer.heartbeat.interval.ms``, ``group.consumer.max.size``
    #: and ``group.consumer.assignors`` (the first is the default).
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    #: ``group.consumer.migration.policy`` (KIP-848 online migration, Kafka
    #: 4's default): whether a non-empty classic group is converted when a
    #: consumer-protocol member joins ("upgrade"), and a consumer group whose
    #: last consumer-protocol member leaves goes back to classic ("downgrade").
    #: Empty groups convert either way whatever the policy.
    consumer_migration_policy: str = "bidirectional"

    @property
    def online_upgrade(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def online_downgrade(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "downgrade")

    def __post_init__(self) -> None:
        def refuse(setting: str, why: str) -> NoReturn:
            raise GroupConfigError(setting, why)

        for name, setting in (*_INTEGER_SETTINGS.items(),
                              ("offsets_retention_ms", "offsets.retention.minutes")):
            minimum = _MINIMUMS.get(name, 1)
            if getattr(self, name) < minimum:
                refuse(setting, f"must be >= {minimum}")
        if self.max_session_timeout_ms < self.min_session_timeout_ms:
            refuse("group.max.session.timeout.ms",
                   f"must be >= group.min.session.timeout.ms ({self.min_session_timeout_ms}), "
                   f"got {self.max_session_timeout_ms}")
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            refuse("group.consumer.heartbeat.interval.ms",
                   "must be below group.consumer.session.timeout.ms "
                   f"({self.consumer_session_timeout_ms}), got {self.consumer_heartbeat_interval_ms}")
        if not self.consumer_assignors:
            refuse("group.consumer.assignors", "must name at least one assignor")
        if self.consumer_migration_policy not in ("bidirectional", "upgrade", "downgrade",
                                                  "disabled"):
            refuse("group.consumer.migration.policy",
                   "must be bidirectional, upgrade, downgrade or disabled")


#: Lower bounds of `GroupConfig`'s integer fields other than 1 (Kafka's).
_MINIMUMS: Mapping[str, int] = {"initial_rebalance_delay_ms": 0, "offset_metadata_max_bytes": 0}

#: `GroupConfig`'s integer fields and the broker settings (Kafka's names) that set them.
_INTEGER_SETTINGS: Mapping[str, str] = {
    "initial_rebalance_delay_ms": "group.initial.rebalance.delay.ms",
    "min_session_timeout_ms": "group.min.session.timeout.ms",
    "max_session_timeout_ms": "group.max.session.timeout.ms",
    "max_size": "group.max.size",
    "offsets_retention_check_interval_ms": "offsets.retention.check.interval.ms",
    "offset_metadata_max_bytes": "offset.metadata.max.bytes",
    "offsets_commit_timeout_ms": "offsets.commit.timeout.ms",
    "consumer_session_timeout_ms": "group.consumer.session.timeout.ms",
    "consumer_heartbeat_interval_ms": "group.consumer.heartbeat.interval.ms",
    "consumer_max_size": "group.consumer.max.size",
}


def group_config(settings: Mapping[str, str]) -> GroupConfig:
    """The group coordinator's settings from the broker's (Kafka's names); a
    setting left out keeps Kafka's default. `GroupConfigError` if they do not
    fit together (`GroupConfig`'s checks)."""
    values: dict[str, object] = {
        field: int(settings[name]) for field, name in _INTEGER_SETTINGS.items() if name in settings}
    if "offsets.retention.minutes" in settings:
        values["offsets_retention_ms"] = int(settings["offsets.retention.minutes"]) * 60_000
    if "group.consumer.assignors" in settings:
        values["consumer_assignors"] = tuple(settings["group.consumer.assignors"].split(","))
    if "group.consumer.migration.policy" in settings:
        values["consumer_migration_policy"] = \
            settings["group.consumer.migration.policy"].strip().lower()
    return GroupConfig(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -------------------------


@dataclass(frozen=True, slots=True)
class JoinProtocol:
    """A protocol the member supports (e.g. an assignor name) with its opaque metadata."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    #: True for JoinGroup v4+: an unknown member first gets MEMBER_ID_REQUIRED (KIP-394).
    require_known_member_id: bool = True
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    #: Only the leader receives the members (with their metadata) to run the assignor.
    members: tuple[JoinGroupMember, ...] = ()
    #: KIP-814: a static leader that rejoined without a rebalance must not reassign.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    #: Only the leader sends assignments: member id -> opaque assignment.
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    #: LeaveGroup v3+ carries a batch (KIP-345); v0-v2 is a batch of one.
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


# --- offsets -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    partitions: tuple[OffsetCommitPartition, ...]
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside a transaction (KIP-98, KIP-447 adds the member fields)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[OffsetCommitPartition, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    #: None fetches every committed partition of the group.
    partitions: tuple[TopicPartition, ...] | None = None
    #: KIP-447: answer UNSTABLE_OFFSET_COMMIT while a transactional commit is pending.
    require_stable: bool = False
    #: OffsetFetch v9 (KIP-848): the asking member and its member epoch, checked
    #: against a consumer group's (None / -1: not asked by a member).
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    group_id: str
    error: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error: ErrorCode
    partitions: tuple[PartitionResult, ...] = ()


# --- group administration ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    #: ListGroups v4+ (KIP-518); empty = no filter. Kafka's state names, case-insensitive.
    states_filter: frozenset[str] = frozenset()
    #: ListGroups v5+ (KIP-848): "classic", "consumer"; case-insensitive.
    types_filter: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error: ErrorCode
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: Empty unless the group is Stable (Kafka ``GroupSummary``).
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups for one group. An unknown group is state "Dead" with no members."""

    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...] = ()
    #: DescribeGroups v6+ (why a group is not described).
    error_message: str | None = None
    #: DescribeGroups v3+: a bitfield of the ACL operations the requester may
    #: do on the group (bit = Kafka's operation code); INT32_MIN when not asked.
    authorized_operations: int = -(2**31)


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    group_id: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeleteGroupsResult, ...]


Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetDeleteResponse
    | DeleteGroupsResponse
    | ConsumerGroupHeartbeatResponse
)


# --- results -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to the request that carried ``handle``."""

    handle: RequestHandle
    response: Response


@dataclass(frozen=True, slots=True)
class OffsetsRecord:
    """One ``__consumer_offsets`` record; ``value`` None is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TxnProducer:
    """Write the result's records as one transactional batch of this producer (KIP-98)."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """What a shard command produced.

    The shard has already applied the change to its in-memory state. The
    broker must:

    1. append ``records`` (if any) to the shard's partition, in the order the
       results were returned, as one batch (transactional for ``txn``);
    2. once the high watermark reaches the log end offset as it stood after
       that append (for a result without records: as it stands now), send
       every ``Reply``;
    3. if the append fails (leadership lost, timeout), answer the replies
       with ``append_error_reply`` and unload/reload the shard: the in-memory
       state ran ahead of the log.

    ``next_deadline_ms`` is when ``tick`` must next be called (None: no timer).
    """

    records: tuple[OffsetsRecord, ...] = ()
    replies: tuple[Reply, ...] = ()
    next_deadline_ms: int | None = None
    txn: TxnProducer | None = None
    #: Set when the result changed offsets: once its records are committed the
    #: broker calls ``mark_committed(write_id)`` so OffsetFetch shows them.
    write_id: int | None = None
