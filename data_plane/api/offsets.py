"""ListOffsets (v1-10) and OffsetForLeaderEpoch (v2-4), answered by the leader.

ListOffsets: earliest (-2) is the log start offset, latest (-1) the high
watermark (the last stable offset for READ_COMMITTED) (consumers never see past it; OFFSET_NOT_AVAILABLE while a new
leader's HW is still below its epoch start, KIP-207), and a timestamp the
first offset whose record timestamp is >= it, found through the segments'
time indexes and batch headers (one batch is decoded to pick the record).
Max timestamp (-3, v7, KIP-734) is the record with the largest timestamp
below that bound, from the segments' max timestamps (one batch decoded).
There is no tiered storage, so earliest-local (-4, v8, KIP-405) is the log
start offset, as earliest is, and latest-tiered (-5, v9, KIP-1005) finds no
offset (-1), as from a Kafka log without remote storage. v10's timeout
(KIP-1075) bounds remote lookups, of which there are none.
All are fenced by the current leader epoch (KIP-320).

ACLs (with an authorizer), as Kafka's KafkaApis: ListOffsets needs DESCRIBE
on each topic; OffsetForLeaderEpoch needs CLUSTER_ACTION on the cluster
(followers) or else DESCRIBE on each topic (consumers validating their
position, KIP-320). An unauthorized topic's partitions are answered
TOPIC_AUTHORIZATION_FAILED before anything is looked up.
"""

from __future__ import annotations

import bisect
from typing import Any, Final

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from data_plane.replication.partition import Partition
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.records import RecordError, decode_records, iter_batches
from raftlog.storage import Log

__all__ = ("handle_list_offsets", "handle_offset_for_leader_epoch", "offset_for_timestamp")

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4  # v8, KIP-405
LATEST_TIERED_TIMESTAMP: Final = -5  # v9, KIP-1005
_SCAN_BYTES: Final = 1 << 20


def _leader_or_error(
    api: BrokerApiContext, name: str, index: int, current_leader_epoch: int
) -> tuple[Partition | None, ErrorCode]:
    if index < 0:
        return None, ErrorCode.unknown_topic_or_partition
    hosted = api.replicas.get((name, index))
    if hosted is None:
        return None, api.replicas.missing_partition_error((name, index))
    p = hosted.partition
    if current_leader_epoch >= 0 and current_leader_epoch != p.leader_epoch:
        return None, (ErrorCode.fenced_leader_epoch if current_leader_epoch < p.leader_epoch
                      else ErrorCode.unknown_leader_epoch)
    if not p.is_leader:
        return None, ErrorCode.not_leader_or_follower
    return p, ErrorCode.none


def _describable(api: BrokerApiContext, ctx: RequestContext, names: Any) -> set[str] | None:
    """The topics among ``names`` the principal may DESCRIBE (one check per
    topic); None without an authorizer (all)."""
    if api.authorization is None:
        return None
    return {name for name in {str(n) for n in names}
            if api.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)}


async def handle_list_offsets(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    # KIP-98: READ_COMMITTED (v2+) lists offsets below the last stable offset.
    read_committed = int(getattr(request, "isolation_level", 0)) == 1
    allowed = _describable(api, ctx, (t.name for t in request.topics))
    topics_out = []
    for topic in request.topics:
        parts_out = []
        if allowed is not None and str(topic.name) not in allowed:
            topics_out.append({"name": topic.name, "partitions": [
                {"partition_index": part.partition_index,
                 "error_code": ErrorCode.topic_authorization_failed,
                 "timestamp": -1, "offset": -1, "leader_epoch": -1}
                for part in topic.partitions]})
            continue
        for part in topic.partitions:
            index = int(part.partition_index)
            p, error = _leader_or_error(api, str(topic.name), index,
                                        int(getattr(part, "current_leader_epoch", -1)))
            out: dict[str, object] = {"partition_index": index, "error_code": error,
                                      "timestamp": -1, "offset": -1, "leader_epoch": -1}
            if p is not None:
                out.update(_list_offset(p, int(part.timestamp), read_committed))
            parts_out.append(out)
        topics_out.append({"name": topic.name, "partitions": parts_out})
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "topics": topics_out})


def _list_offset(p: Partition, timestamp: int, read_committed: bool = False
                 ) -> dict[str, object]:
    bound = p.last_stable_offset if read_committed else p.high_watermark
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        # No tiered storage: the local log starts where the log does.
        return {"offset": p.log.log_start_offset, "leader_epoch": _epoch_at(p.log, p.log.log_start_offset)}
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return {}  # nothing is tiered: no offset (-1), as Kafka without remote storage
    if timestamp == LATEST_TIMESTAMP:
        if p.high_watermark_is_lagging:
            return {"error_code": ErrorCode.offset_not_available}
        return {"offset": bound, "leader_epoch": _epoch_at(p.log, bound - 1)}
    if timestamp == MAX_TIMESTAMP:
        found = offset_of_max_timestamp(p.log, bound)
    elif timestamp < 0:
        return {"error_code": ErrorCode.invalid_request}
    else:
        found = offset_for_timestamp(p.log, timestamp, bound)
    if found is None:
        return {}
    offset, record_ts = found
    return {"offset": offset, "timestamp": record_ts, "leader_epoch": _epoch_at(p.log, offset)}


def _epoch_at(log: Log, offset: int) -> int:
    epoch = -1
    for entry in log.epoch_entries:
        if entry.start_offset <= offset:
            epoch = entry.epoch
        else:
            break
    return epoch


def offset_for_timestamp(log: Log, timestamp: int, max_offset: int) -> tuple[int, int] | None:
    """The first (offset, timestamp) below ``max_offset`` whose record
    timestamp is >= ``timestamp``, or None (Kafka's ``fetchOffsetByTimestamp``)."""
    for segment in log.segments:
        if segment.max_timestamp < timestamp or segment.base_offset >= max_offset:
            continue
        entries = segment.time_index.entries()
        i = bisect.bisect_left([t for t, _ in entries], timestamp)
        position = entries[i - 1][1] if i > 0 else segment.base_offset
        position = max(position, log.log_start_offset)
        while position < min(segment.next_offset, max_offset):
            data = log.read(position, _SCAN_BYTES, max_offset).records
            if not data:
                break
            try:
                for header, at in iter_batches(data, validate_crc=False):
                    if header.max_timestamp >= timestamp:
                        for record in decode_records(data, pos=at, validate_crc=False):
                            if record.timestamp >= timestamp and position <= record.offset < max_offset:
                                return record.offset, record.timestamp
                    position = header.next_offset
            except RecordError:
                return None
    return None


def offset_of_max_timestamp(log: Log, max_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with the largest timestamp
    below ``max_offset`` (KIP-734), or None for an empty range.

    Each segment knows its largest batch timestamp and the batch holding
    it; only a segment whose maximum lies at or past ``max_offset`` (the
    uncommitted tail) has its batch headers scanned. The winning batch is
    decoded to pick the record."""
    best: tuple[int, int] | None = None  # (timestamp, last offset of its batch)
    for segment in log.segments:
        if segment.base_offset >= max_offset or segment.max_timestamp < 0:
            continue
        candidate: tuple[int, int] | None
        if segment.offset_of_max_timestamp < max_offset:
            candidate = (segment.max_timestamp, segment.offset_of_max_timestamp)
        else:
            candidate = _max_below(segment.iter_headers(), max_offset)
        if candidate is not None and (best is None or candidate[0] > best[0]):
            best = candidate
    if best is None:
        return None
    timestamp, last_offset = best
    position = max(last_offset, log.log_start_offset)
    data = log.read(position, 1, max_offset).records  # the batch holding it
    try:
        records = decode_records(data, validate_crc=False) if data else []
    except RecordError:
        return None
    for record in records:
        if record.timestamp == timestamp and record.offset >= log.log_start_offset:
            return record.offset, record.timestamp
    return None


def _max_below(headers: Any, max_offset: int) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for header, _ in headers:
        if header.last_offset >= max_offset:
            break
        if best is None or header.max_timestamp > best[0]:
            best = (header.max_timestamp, header.last_offset)
    return best if best is not None and best[0] >= 0 else None


async def handle_offset_for_leader_epoch(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    # First a follower's right (Kafka asks it of everyone, quietly), then
    # a consumer's per topic.
    allowed = None
    if not api.authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        allowed = _describable(api, ctx, (t.topic for t in request.topics))
    topics_out = []
    for topic in request.topics:
        parts_out = []
        if allowed is not None and str(topic.topic) not in allowed:
            topics_out.append({"topic": topic.topic, "partitions": [
                {"error_code": ErrorCode.topic_authorization_failed,
                 "partition": part.partition, "leader_epoch": -1, "end_offset": -1}
                for part in topic.partitions]})
            continue
        for part in topic.partitions:
            index = int(part.partition)
            p, error = _leader_or_error(api, str(topic.topic), index,
                                        int(getattr(part, "current_leader_epoch", -1)))
            out: dict[str, object] = {"error_code": error, "partition": index,
                                      "leader_epoch": -1, "end_offset": -1}
            if p is not None:
                epoch, end = p.log.end_offset_for_epoch(int(part.leader_epoch))
                out.update(leader_epoch=epoch, end_offset=end if epoch >= 0 else -1)
            parts_out.append(out)
        topics_out.append({"topic": topic.topic, "partitions": parts_out})
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "topics": topics_out})
