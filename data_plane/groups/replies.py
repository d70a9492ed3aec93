"""What to answer when a result's records could not be appended.

Kafka's coordinator maps the append error to a coordinator error so clients
rediscover the coordinator or retry (``GroupMetadataManager``/
``CoordinatorRuntime``): a lost leadership becomes NOT_COORDINATOR, an
unavailable or slow partition COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from dataclasses import replace

from raftlog.net.errors import ErrorCode

from .consumer_model import ConsumerGroupHeartbeatResponse
from .model import (
    DeleteGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    Reply,
    SyncGroupResponse,
)

_E = ErrorCode

_APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    _E.unknown_topic_or_partition: _E.coordinator_not_available,
    _E.not_enough_replicas: _E.coordinator_not_available,
    _E.not_enough_replicas_after_append: _E.coordinator_not_available,
    _E.request_timed_out: _E.coordinator_not_available,
    _E.not_leader_or_follower: _E.not_coordinator,
    _E.kafka_storage_error: _E.not_coordinator,
    # A TxnOffsetCommit from a fenced producer epoch (the partition's epoch check).
    _E.producer_fenced: _E.producer_fenced,
}


def coordinator_error_for_append(append_error: ErrorCode) -> ErrorCode:
    """The error a client sees when the coordinator's append failed with ``append_error``."""
    return _APPEND_ERRORS.get(append_error, _E.unknown_server_error)


def append_error_reply(reply: Reply, append_error: ErrorCode) -> Reply:
    """``reply`` with its success replaced by the coordinator error for ``append_error``."""
    error = coordinator_error_for_append(append_error)
    r = reply.response
    match r:
        case JoinGroupResponse():
            return Reply(reply.handle, JoinGroupResponse(error=error, member_id=r.member_id))
        case SyncGroupResponse():
            return Reply(reply.handle, SyncGroupResponse(error=error))
        case HeartbeatResponse():
            return Reply(reply.handle, HeartbeatResponse(error))
        case LeaveGroupResponse():
            return Reply(reply.handle, LeaveGroupResponse(error=error))
        case OffsetCommitResponse():
            parts = tuple(replace(p, error=error) for p in r.partitions)
            return Reply(reply.handle, OffsetCommitResponse(parts))
        case OffsetDeleteResponse():
            return Reply(reply.handle, OffsetDeleteResponse(error=error))
        case DeleteGroupsResponse():
            results = tuple(replace(g, error=error) for g in r.results)
            return Reply(reply.handle, DeleteGroupsResponse(results))
        case ConsumerGroupHeartbeatResponse():
            return Reply(reply.handle, ConsumerGroupHeartbeatResponse(error, member_id=r.member_id))
