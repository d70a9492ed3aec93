"""What the REST API asks of a node (`ClusterBackend`), and the real one (`NodeBackend`).

The REST layer (`data_plane.http.rest`) only translates HTTP to these calls
and their results to JSON; `ClusterBackend` is the seam that lets it be
tested against an in-memory fake (`data_plane.http.testing`).

`NodeBackend` answers reads of cluster state (brokers, topics, partitions,
leaders, ISRs) from the node's own metadata image, and does everything else
the way a Kafka client would, over the Kafka protocol
(`raftlog.net.KafkaProtocolClient`, encoded by kio):

- create/delete topics: CreateTopics/DeleteTopics to a live broker (this
  node's own listener first), which forwards them to the active controller;
- produce: one v2 batch per partition (Kafka's default partitioner: murmur2
  of the key, round-robin without one) in a Produce (acks=all) to the
  partition's leader, retried on a retriable error after the image moves;
- consume: Fetch v12 (read_uncommitted, so up to the high watermark) from
  the leader; control batches are skipped;
- groups: ListGroups to every live broker, FindCoordinator then
  DescribeGroups/OffsetFetch at the coordinator, ListOffsets (latest) at
  each partition's leader for the lag;
- quorum: the local Raft core's DescribeQuorum if this node leads, else
  DescribeQuorum to the controllers.

Every failure surfaces as `RestError` (HTTP status, REST error code, message).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.delete_topics.v6 import request as dt_req
from kio.schema.delete_topics.v6 import response as dt_resp
from kio.schema.describe_groups.v5 import request as dg_req
from kio.schema.describe_groups.v5 import response as dg_resp
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.fetch.v12 import request as f_req
from kio.schema.fetch.v12 import response as f_resp
from kio.schema.find_coordinator.v4 import request as fc_req
from kio.schema.find_coordinator.v4 import response as fc_resp
from kio.schema.list_groups.v4 import request as lg_req
from kio.schema.list_groups.v4 import response as lg_resp
from kio.schema.list_offsets.v6 import request as lo_req
from kio.schema.list_offsets.v6 import response as lo_resp
from kio.schema.offset_fetch.v8 import request as of_req
from kio.schema.offset_fetch.v8 import response as of_resp
from kio.schema.produce.v9 import request as p_req
from kio.schema.produce.v9 import response as p_resp
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from data_plane.groups.describe import parse_assignment
from metadata_quorum.image import BrokerRegistration, MetadataImage
from raftlog.consensus.messages import DescribeQuorumRequest
from raftlog.net import KafkaProtocolClient
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode, TransportError
from raftlog.records import BatchBuilder, decode_records, iter_batches
from raftlog.records.partitioner import partition_for_key
from raftlog.runtime import wire

__all__ = (
    "ClusterBackend",
    "FetchResult",
    "FetchedRecord",
    "GroupDescription",
    "GroupMember",
    "GroupSummary",
    "NodeBackend",
    "PartitionLag",
    "ProduceRecord",
    "ProduceResult",
    "QuorumReplica",
    "QuorumView",
    "RestError",
    "error_for_kafka_code",
)

_TIMEOUT_MS = 30_000
_COORDINATOR_WAIT_S = 10.0


class RestError(Exception):
    """A REST failure: HTTP ``status``, Confluent-style ``error_code``, a message."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


def error_for_kafka_code(code: int, what: str) -> RestError:
    """Map a Kafka error code (from a broker's answer) to a `RestError`."""
    try:
        error = ErrorCode(code)
        name = error.name
    except ValueError:
        return RestError(500, 50002, f"{what}: Kafka error {code}")
    message = f"{what}: {name.upper()}"
    match error:
        case ErrorCode.unknown_topic_or_partition | ErrorCode.unknown_topic_id:
            return RestError(404, 40403, message)
        case ErrorCode.group_id_not_found:
            return RestError(404, 40404, message)
        case ErrorCode.topic_already_exists:
            return RestError(409, 40902, message)
        case ErrorCode.offset_out_of_range:
            return RestError(416, 41601, message)
        case ErrorCode.message_too_large | ErrorCode.record_list_too_large:
            return RestError(413, 41301, message)
        case (ErrorCode.invalid_partitions | ErrorCode.invalid_replication_factor
              | ErrorCode.invalid_topic_exception | ErrorCode.invalid_config
              | ErrorCode.invalid_request | ErrorCode.invalid_replica_assignment
              | ErrorCode.policy_violation | ErrorCode.invalid_record
              | ErrorCode.corrupt_message | ErrorCode.invalid_timestamp):
            return RestError(400, 40002, message)
    if error.retriable or error in (ErrorCode.not_controller, ErrorCode.coordinator_not_available):
        return RestError(503, 50301, message)
    return RestError(500, 50002, message)


# ---- data ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """One record to produce; ``partition`` None: the default partitioner picks."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ProduceResult:
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class FetchedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: tuple[FetchedRecord, ...]
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class QuorumReplica:
    replica_id: int
    log_end_offset: int
    lag: int  # the leader's log end offset minus this replica's
    last_fetch_timestamp_ms: int
    last_caught_up_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class QuorumView:
    leader_id: int
    epoch: int
    high_watermark: int
    voters: tuple[QuorumReplica, ...]
    observers: tuple[QuorumReplica, ...]


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignments: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator_id: int
    members: tuple[GroupMember, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    current_offset: int  # committed; -1 if none
    log_end_offset: int  # what a consumer can read up to (the HW)
    lag: int
    consumer_id: str | None
    client_id: str | None


class ClusterBackend(Protocol):
    """What the REST API needs from a node. Methods raise `RestError`."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def node_id(self) -> int: ...

    def image(self) -> MetadataImage:
        """The node's latest metadata image."""
        ...

    async def quorum(self) -> QuorumView: ...

    async def create_topic(self, name: str, partitions: int | None,
                           replication_factor: int | None,
                           configs: Mapping[str, str]) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def produce(self, topic: str, records: Sequence[ProduceRecord]) -> list[ProduceResult]:
        """Append ``records`` with acks=all; results in the order given."""
        ...

    async def fetch(self, topic: str, partition: int, offset: int,
                    max_records: int) -> FetchResult:
        """At most ``max_records`` records from ``offset``, below the high watermark."""
        ...

    async def list_groups(self) -> list[GroupSummary]: ...

    async def describe_group(self, group_id: str) -> GroupDescription: ...

    async def group_lags(self, group_id: str) -> list[PartitionLag]: ...

    async def end_offsets(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The latest readable offset (HW) of each of ``keys`` that has a leader."""
        ...


# ---- the default partitioner ----------------------------------------------------------


def default_partition(key: bytes | None, partitions: int, counter: Iterable[int]) -> int:
    """Kafka's choice: ``toPositive(murmur2(key)) % n``, else the next round-robin slot."""
    if key is None:
        return next(iter(counter)) % partitions
    return partition_for_key(key, partitions)


# ---- the real node ------------------------------------------------------------------


def _timeout(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


class NodeBackend:
    """`ClusterBackend` of a running node (see the module docstring).

    ``image`` returns the node's latest metadata image; ``driver`` is the
    node's `RaftDriver` (None on none); ``voters`` maps controller ids to
    their controller listener; ``listener_name`` picks which broker listener
    to dial, and ``security`` is how to connect to it (TLS and SASL as it needs).
    """

    def __init__(
        self,
        *,
        cluster_id: str,
        node_id: int,
        image: Any,
        driver: Any,
        voters: Mapping[int, tuple[str, int]],
        listener_name: str | None,
        security: ConnectionSecurity = PLAINTEXT_SECURITY,
    ) -> None:
        self._cluster_id = cluster_id
        self._node_id = node_id
        self._image = image
        self._driver = driver
        self._voters = dict(voters)
        self._listener_name = listener_name
        self._security = security
        self._clients: dict[tuple[str, int], KafkaProtocolClient] = {}
        self._round_robin = itertools.count()

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def node_id(self) -> int:
        return self._node_id

    def image(self) -> MetadataImage:
        image: MetadataImage = self._image()
        return image

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    # ---- plumbing ----------------------------------------------------------------

    def _client(self, address: tuple[str, int]) -> KafkaProtocolClient:
        client = self._clients.get(address)
        if client is None:
            client = KafkaProtocolClient(
                *address, client_id=f"raftlog-rest-{self._node_id}",
                request_timeout_ms=_TIMEOUT_MS + 5000, connect_timeout_ms=2000,
                reconnect_backoff_max_ms=200, security=self._security,
            )
            self._clients[address] = client
        return client

    def _address(self, broker: BrokerRegistration) -> tuple[str, int] | None:
        endpoints = broker.listeners
        for endpoint in endpoints:
            if endpoint.name == self._listener_name:
                return (endpoint.host, endpoint.port)
        return (endpoints[0].host, endpoints[0].port) if endpoints else None

    def _broker_address(self, broker_id: int) -> tuple[str, int]:
        broker = self.image().brokers.get(broker_id)
        address = None if broker is None else self._address(broker)
        if address is None:
            raise RestError(503, 50302, f"broker {broker_id} has no known address")
        return address

    def _live_brokers(self) -> list[int]:
        brokers = [b.broker_id for b in self.image().brokers.values() if b.usable]
        brokers.sort(key=lambda b: (b != self._node_id, b))  # this node first
        if not brokers:
            raise RestError(503, 50302, "no live broker")
        return brokers

    async def _send(self, address: tuple[str, int], request: Any, version: int) -> Any:
        try:
            return await self._client(address).send(request, version)
        except TransportError as exc:
            raise RestError(503, 50303, f"{address[0]}:{address[1]}: {exc}") from None

    async def _to_any_broker(self, request: Any, version: int) -> Any:
        last: RestError | None = None
        for broker_id in self._live_brokers():
            try:
                return await self._send(self._broker_address(broker_id), request, version)
            except RestError as exc:
                last = exc
        assert last is not None
        raise last

    def _leader_or_raise(self, topic: str, partition: int) -> int:
        image = self.image()
        topic_image = image.topic_by_name(topic)
        if topic_image is None:
            raise RestError(404, 40403, f"topic {topic!r} not found")
        registration = topic_image.partitions.get(partition)
        if registration is None:
            raise RestError(404, 40402, f"partition {partition} of {topic!r} not found")
        if registration.leader < 0:
            raise RestError(503, 50304, f"partition {topic}-{partition} has no leader")
        return registration.leader

    # ---- topics -------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int | None,
                           replication_factor: int | None,
                           configs: Mapping[str, str]) -> None:
        request = ct_req.CreateTopicsRequest(
            topics=(ct_req.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(-1 if partitions is None else partitions),
                replication_factor=i16(-1 if replication_factor is None else replication_factor),
                assignments=(),
                configs=tuple(ct_req.CreatableTopicConfig(name=k, value=v)
                              for k, v in configs.items()),
            ),),
            timeout=_timeout(_TIMEOUT_MS),
            validate_only=False,
        )
        response: ct_resp.CreateTopicsResponse = await self._to_any_broker(request, 7)
        result = response.topics[0]
        if result.error_code != ErrorCode.none:
            error = error_for_kafka_code(result.error_code, f"cannot create topic {name!r}")
            if result.error_message:
                error.message += f": {result.error_message}"
            raise error
        await self._wait_image(lambda image: image.topic_by_name(name) is not None)

    async def delete_topic(self, name: str) -> None:
        if self.image().topic_by_name(name) is None:
            raise RestError(404, 40403, f"topic {name!r} not found")
        request = dt_req.DeleteTopicsRequest(
            topics=(dt_req.DeleteTopicState(name=TopicName(name), topic_id=uuid.UUID(int=0)),),
            timeout=_timeout(_TIMEOUT_MS),
        )
        response: dt_resp.DeleteTopicsResponse = await self._to_any_broker(request, 6)
        result = response.responses[0]
        if result.error_code != ErrorCode.none:
            raise error_for_kafka_code(result.error_code, f"cannot delete topic {name!r}")
        await self._wait_image(lambda image: image.topic_by_name(name) is None)

    async def _wait_image(self, ready: Any, timeout_s: float = 5.0) -> None:
        """Until this node's image shows the change (read-your-writes for the caller)."""
        deadline = time.monotonic() + timeout_s
        while not ready(self.image()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    # ---- produce ------------------------------------------------------------------

    async def produce(self, topic: str, records: Sequence[ProduceRecord]) -> list[ProduceResult]:
        topic_image = self.image().topic_by_name(topic)
        if topic_image is None:
            raise RestError(404, 40403, f"topic {topic!r} not found")
        count = len(topic_image.partitions)
        placed: dict[int, list[int]] = {}
        for i, record in enumerate(records):
            partition = record.partition
            if partition is None:
                partition = default_partition(record.key, count, self._round_robin)
            elif partition not in topic_image.partitions:
                raise RestError(404, 40402, f"partition {partition} of {topic!r} not found")
            placed.setdefault(partition, []).append(i)
        now_ms = int(time.time() * 1000)
        results: dict[int, ProduceResult] = {}
        outcomes = await asyncio.gather(*(
            self._produce_partition(topic, partition, [records[i] for i in indexes], now_ms)
            for partition, indexes in placed.items()
        ))
        for (partition, indexes), (base_offset, timestamps) in zip(
                placed.items(), outcomes, strict=True):
            for n, i in enumerate(indexes):
                results[i] = ProduceResult(partition, base_offset + n, timestamps[n])
        return [results[i] for i in range(len(records))]

    async def _produce_partition(self, topic: str, partition: int,
                                 records: Sequence[ProduceRecord],
                                 now_ms: int) -> tuple[int, list[int]]:
        builder = BatchBuilder()
        timestamps = []
        for record in records:
            timestamp = now_ms if record.timestamp_ms is None else record.timestamp_ms
            timestamps.append(timestamp)
            builder.append(record.value, key=record.key, headers=record.headers,
                           timestamp_ms=timestamp)
        batch = builder.build()
        deadline = time.monotonic() + _TIMEOUT_MS / 1000
        while True:
            leader = self._leader_or_raise(topic, partition)
            request = p_req.ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=_timeout(_TIMEOUT_MS),
                topic_data=(p_req.TopicProduceData(name=TopicName(topic), partition_data=(
                    p_req.PartitionProduceData(index=i32(partition), records=Records(batch)),),),),
            )
            response: p_resp.ProduceResponse = await self._send(
                self._broker_address(leader), request, 9)
            answer = response.responses[0].partition_responses[0]
            code = ErrorCode(answer.error_code)
            if code == ErrorCode.none:
                return int(answer.base_offset), timestamps
            # NOT_LEADER and friends: wait for the image to move, then again.
            if code.retriable and code not in (ErrorCode.not_enough_replicas,
                                               ErrorCode.not_enough_replicas_after_append,
                                               ErrorCode.request_timed_out) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                continue
            error = error_for_kafka_code(code, f"produce to {topic}-{partition}")
            if answer.error_message:
                error.message += f": {answer.error_message}"
            raise error

    # ---- consume ------------------------------------------------------------------

    async def fetch(self, topic: str, partition: int, offset: int,
                    max_records: int) -> FetchResult:
        leader = self._leader_or_raise(topic, partition)
        request = f_req.FetchRequest(
            replica_id=BrokerId(-1), max_wait=_timeout(0), min_bytes=i32(0),
            max_bytes=i32(4 * 1024 * 1024), isolation_level=i8(0), session_id=i32(0),
            session_epoch=i32(-1),
            topics=(f_req.FetchTopic(topic=TopicName(topic), partitions=(f_req.FetchPartition(
                partition=i32(partition), current_leader_epoch=i32(-1), fetch_offset=i64(offset),
                last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                partition_max_bytes=i32(1024 * 1024)),)),),
            forgotten_topics_data=(), rack_id="",
        )
        response: f_resp.FetchResponse = await self._send(
            self._broker_address(leader), request, 12)
        if response.error_code != ErrorCode.none:
            raise error_for_kafka_code(response.error_code, f"fetch from {topic}-{partition}")
        data = response.responses[0].partitions[0]
        if data.error_code != ErrorCode.none:
            raise error_for_kafka_code(data.error_code, f"fetch from {topic}-{partition}")
        out: list[FetchedRecord] = []
        raw = bytes(data.records or b"")
        for header, pos in iter_batches(raw):
            if header.is_control:
                continue
            for record in decode_records(raw, pos=pos):
                if record.offset < offset or record.offset >= data.high_watermark:
                    continue
                out.append(FetchedRecord(
                    record.offset, record.timestamp, record.key, record.value,
                    tuple((h.key, h.value) for h in record.headers)))
                if len(out) >= max_records:
                    break
            if len(out) >= max_records:
                break
        return FetchResult(tuple(out), int(data.high_watermark), int(data.log_start_offset))

    # ---- groups -------------------------------------------------------------------

    async def list_groups(self) -> list[GroupSummary]:
        groups: dict[str, GroupSummary] = {}
        for broker_id in self._live_brokers():
            request = lg_req.ListGroupsRequest(states_filter=())
            response: lg_resp.ListGroupsResponse = await self._send(
                self._broker_address(broker_id), request, 4)
            if response.error_code != ErrorCode.none:
                continue  # e.g. COORDINATOR_LOAD_IN_PROGRESS: as kafka-consumer-groups does
            for group in response.groups:
                groups[str(group.group_id)] = GroupSummary(
                    str(group.group_id), group.group_state, group.protocol_type, broker_id)
        return sorted(groups.values(), key=lambda g: g.group_id)

    async def _coordinator(self, group_id: str) -> int:
        request = fc_req.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group_id,))
        response: fc_resp.FindCoordinatorResponse = await self._to_any_broker(request, 4)
        coordinator = response.coordinators[0]
        if coordinator.error_code != ErrorCode.none:
            raise error_for_kafka_code(coordinator.error_code, f"group {group_id!r}")
        return int(coordinator.node_id)

    async def describe_group(self, group_id: str) -> GroupDescription:
        # While __consumer_offsets is created or a coordinator moves or loads,
        # the answer is retriable: retry for a while, as Kafka's admin client does.
        deadline = time.monotonic() + _COORDINATOR_WAIT_S
        while True:
            try:
                coordinator = await self._coordinator(group_id)
                request = dg_req.DescribeGroupsRequest(
                    groups=(GroupId(group_id),), include_authorized_operations=False)
                response: dg_resp.DescribeGroupsResponse = await self._send(
                    self._broker_address(coordinator), request, 5)
                group = response.groups[0]
                if group.error_code != ErrorCode.none:
                    raise error_for_kafka_code(group.error_code, f"group {group_id!r}")
                break
            except RestError as exc:
                if exc.status != 503 or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.2)
        if group.group_state == "Dead":
            raise RestError(404, 40404, f"consumer group {group_id!r} not found")
        members = tuple(
            GroupMember(
                m.member_id, m.client_id, m.client_host,
                tuple((tp.topic, tp.partition)
                      for tp in parse_assignment(m.member_assignment) or ()),
            )
            for m in group.members
        )
        return GroupDescription(group_id, group.group_state, group.protocol_type,
                                group.protocol_data, coordinator, members)

    async def group_lags(self, group_id: str) -> list[PartitionLag]:
        description = await self.describe_group(group_id)
        request = of_req.OffsetFetchRequest(
            groups=(of_req.OffsetFetchRequestGroup(group_id=GroupId(group_id), topics=None),),
            require_stable=False,
        )
        response: of_resp.OffsetFetchResponse = await self._send(
            self._broker_address(description.coordinator_id), request, 8)
        group = response.groups[0]
        if group.error_code != ErrorCode.none:
            raise error_for_kafka_code(group.error_code, f"group {group_id!r}")
        committed: dict[tuple[str, int], int] = {}
        for topic in group.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                    committed[(str(topic.name), int(p.partition_index))] = int(p.committed_offset)
        owners: dict[tuple[str, int], GroupMember] = {}
        for member in description.members:
            for tp in member.assignments:
                owners[tp] = member
        keys = sorted(set(committed) | set(owners))
        ends = await self.end_offsets(keys)
        lags = []
        for key in keys:
            current = committed.get(key, -1)
            end = ends.get(key, -1)
            owner = owners.get(key)
            lags.append(PartitionLag(
                key[0], key[1], current, end,
                max(0, end - current) if current >= 0 and end >= 0 else -1,
                owner.member_id if owner else None, owner.client_id if owner else None,
            ))
        return lags

    async def end_offsets(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The latest offset (the HW: what consumers can read to) of each of ``keys``
        that has a leader, by ListOffsets at the leaders."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in keys:
            try:
                by_leader.setdefault(self._leader_or_raise(topic, partition), []).append(
                    (topic, partition))
            except RestError:
                continue  # deleted or offline: no end offset (lag -1)
        ends: dict[tuple[str, int], int] = {}
        for leader, tps in by_leader.items():
            topics: dict[str, list[int]] = {}
            for topic, partition in tps:
                topics.setdefault(topic, []).append(partition)
            request = lo_req.ListOffsetsRequest(
                replica_id=BrokerId(-1), isolation_level=i8(0),
                topics=tuple(lo_req.ListOffsetsTopic(name=TopicName(t), partitions=tuple(
                    lo_req.ListOffsetsPartition(partition_index=i32(p),
                                                current_leader_epoch=i32(-1),
                                                timestamp=i64(-1))
                    for p in ps)) for t, ps in topics.items()),
            )
            response: lo_resp.ListOffsetsResponse = await self._send(
                self._broker_address(leader), request, 6)
            for topic_response in response.topics:
                for p in topic_response.partitions:
                    if p.error_code == ErrorCode.none:
                        ends[(str(topic_response.name), int(p.partition_index))] = int(p.offset)
        return ends

    # ---- quorum -------------------------------------------------------------------

    async def quorum(self) -> QuorumView:
        driver = self._driver
        if driver is not None and driver.core.is_leader:
            local = await driver.describe_quorum()
            if int(local.error) == 0:
                return _quorum_view(local.leader_id, local.leader_epoch, local.high_watermark,
                                    local.current_voters, local.observers)
        request = wire.encode_request(DescribeQuorumRequest(), destination=-1)
        last = "no controller answered"
        leader_hint = None if driver is None else driver.core.quorum.leader_id()
        order = sorted(self._voters, key=lambda v: (v != leader_hint, v))
        for voter in order:
            try:
                response: dq_resp.DescribeQuorumResponse = await self._send(
                    self._voters[voter], request, 2)
            except RestError as exc:
                last = exc.message
                continue
            if response.error_code != ErrorCode.none:
                last = ErrorCode(response.error_code).name
                continue
            partition = response.topics[0].partitions[0]
            if partition.error_code != ErrorCode.none:
                last = ErrorCode(partition.error_code).name
                continue
            return _quorum_view(int(partition.leader_id), int(partition.leader_epoch),
                                int(partition.high_watermark), partition.current_voters,
                                partition.observers)
        raise RestError(503, 50305, f"cannot describe the quorum: {last}")


def _quorum_view(leader_id: int, epoch: int, high_watermark: int,
                 voters: Iterable[Any], observers: Iterable[Any]) -> QuorumView:
    voters = tuple(voters)
    leader_end = max((int(v.log_end_offset) for v in voters if int(v.replica_id) == leader_id),
                     default=high_watermark)

    def replica(state: Any) -> QuorumReplica:
        end = int(state.log_end_offset)
        return QuorumReplica(int(state.replica_id), end, max(0, leader_end - end) if end >= 0
                             else -1, _ms(state.last_fetch_timestamp),
                             _ms(state.last_caught_up_timestamp))

    return QuorumView(leader_id, epoch, high_watermark, tuple(replica(v) for v in voters),
                      tuple(replica(o) for o in observers))


def _ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
