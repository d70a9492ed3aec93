"""Fetch (v4-16) for consumers and followers.

Versions differ in how they name things, not in what they mean: topics by
name (< v13) or id (v13+); the replica id top-level (< v15) or in
``ReplicaState`` with the broker epoch (v15+, KIP-903). Everything is mapped
to `FetchPartition` and served by the replica manager (long poll in the fetch
purgatory, KIP-320 epoch checks and DivergingEpoch in the partition core).
Isolation (KIP-98): READ_COMMITTED consumers read only below the last stable
offset and get the aborted transactions overlapping their read, so they can
drop aborted records; every answer reports the LSO.
Fetch sessions (KIP-227) are not kept: every answer has session id 0, which
tells clients to send full requests.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from data_plane.api.common import NO_THROTTLE_MS, BrokerApiContext
from data_plane.api.encoders import FetchPartitionData, encode_fetch_response
from data_plane.broker.replica_manager import FetchParams
from data_plane.replication.types import (
    CONSUMER_REPLICA_ID,
    FetchPartition,
    FetchPartitionResult,
    TopicPartition,
)
from raftlog.net import EncodedBody, RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("MAX_FETCH_WAIT_MS", "handle_fetch")

MAX_FETCH_WAIT_MS: Final = 60_000
READ_COMMITTED: Final = 1
_INT32_MAX: Final = 2**31 - 1
# Leader hints ride along with these errors (Fetch v12+ CurrentLeader, KIP-951).
_HINTED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                     ErrorCode.unknown_leader_epoch})


async def handle_fetch(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if version >= 15:
        replica_id = int(request.replica_state.replica_id)
        replica_epoch = int(request.replica_state.replica_epoch)
    else:
        replica_id = int(getattr(request, "replica_id", CONSUMER_REPLICA_ID))
        replica_epoch = -1
    if replica_id < 0:
        replica_id = CONSUMER_REPLICA_ID
    read_committed = (replica_id < 0
                      and int(getattr(request, "isolation_level", 0)) == READ_COMMITTED)
    image = api.image
    requests: dict[TopicPartition, FetchPartition] = {}
    errors: dict[tuple[int, int], ErrorCode] = {}
    # (response topic label: id (v13+) or name, [partition indexes]) in request order.
    layout: list[tuple[str | uuid.UUID | None, list[int]]] = []
    names: list[str | None] = []
    for t_index, topic in enumerate(request.topics):
        if version >= 13:
            topic_id = topic.topic_id
            found = image.topics.get(topic_id) if topic_id is not None else None
            name = found.name if found is not None else None
            missing = ErrorCode.unknown_topic_id
            label: str | uuid.UUID | None = topic_id
        else:
            name = str(topic.topic)
            missing = ErrorCode.unknown_topic_or_partition
            label = name
        names.append(name)
        indexes: list[int] = []
        for part in topic.partitions:
            index = int(part.partition)
            indexes.append(index)
            if name is None:
                errors[(t_index, index)] = missing
                continue
            if index < 0:
                errors[(t_index, index)] = ErrorCode.unknown_topic_or_partition
                continue
            if int(part.fetch_offset) < 0:
                errors[(t_index, index)] = ErrorCode.offset_out_of_range
                continue
            requests[(name, index)] = FetchPartition(
                fetch_offset=int(part.fetch_offset),
                current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
                last_fetched_epoch=int(getattr(part, "last_fetched_epoch", -1)),
                max_bytes=max(0, int(part.partition_max_bytes)),
                replica_id=replica_id,
                replica_epoch=replica_epoch,
                log_start_offset=int(getattr(part, "log_start_offset", -1)),
                read_committed=read_committed,
            )
        layout.append((label, indexes))
    max_bytes = int(getattr(request, "max_bytes", _INT32_MAX))
    params = FetchParams(
        max_wait_ms=min(max(int(request.max_wait.total_seconds() * 1000), 0), MAX_FETCH_WAIT_MS),
        min_bytes=max(int(request.min_bytes), 0),
        max_bytes=max(max_bytes, 0),
        from_follower=replica_id >= 0,
    )
    results = await api.replicas.fetch(requests, params) if requests else {}
    topics_out: list[tuple[str | uuid.UUID | None, list[FetchPartitionData]]] = []
    for t_index, (label, indexes) in enumerate(layout):
        name = names[t_index]
        partitions_out = []
        for index in indexes:
            error = errors.get((t_index, index))
            if error is not None:
                result = FetchPartitionResult(error)
            elif name is None:
                result = FetchPartitionResult(ErrorCode.unknown_topic_id)
            else:
                result = results.get((name, index), FetchPartitionResult(
                    ErrorCode.unknown_topic_or_partition))
            partitions_out.append(_partition(api, name, index, result, read_committed))
        topics_out.append((label, partitions_out))
    # Hand-encoded (data_plane.api.encoders): a follower's fetch answer is on
    # every acks=all produce's critical path.
    record_bytes = tuple(
        (label, size) for label, parts in topics_out
        if (size := sum(len(p.records) for p in parts if p.records))
    )
    return EncodedBody(encode_fetch_response(
        version, topics_out, error_code=ErrorCode.none.value, session_id=0,
        throttle_time_ms=NO_THROTTLE_MS,
    ), record_bytes)


def _partition(
    api: BrokerApiContext, name: str | None, index: int, result: FetchPartitionResult,
    read_committed: bool,
) -> FetchPartitionData:
    lso = result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark
    diverging = result.diverging_epoch
    current_leader = None
    if result.error in _HINTED and name is not None:
        current_leader = api.replicas.leader_hint((name, index))
    return FetchPartitionData(
        partition_index=index,
        error_code=result.error.value,
        high_watermark=result.high_watermark,
        last_stable_offset=lso,
        log_start_offset=result.log_start_offset,
        records=result.records,
        # Kafka sends null to READ_UNCOMMITTED consumers, a list otherwise.
        aborted_transactions=result.aborted_transactions if read_committed else None,
        preferred_read_replica=-1,
        diverging_epoch=(None if diverging is None
                         else (diverging.epoch, diverging.end_offset)),
        current_leader=current_leader,
    )
