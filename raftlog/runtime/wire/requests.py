"""Requests: the core's KRaft requests to kio request entities and back."""

from __future__ import annotations

import datetime
import typing
from typing import Any

from kio.schema.begin_quorum_epoch.v1 import request as bqe_req
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.end_quorum_epoch.v1 import request as eqe_req
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req17
from kio.schema.fetch.v18 import request as fetch_req
from kio.schema.fetch_snapshot.v1 import request as fs_req
from kio.schema.types import BrokerId
from kio.schema.vote.v2 import request as vote_req
from kio.static.primitive import i8, i32, i32Timedelta, i64, u16
from kio.static.protocol import RequestPayload

from raftlog.consensus.messages import (
    ANONYMOUS_REPLICA,
    HIGH_WATERMARK_UNSUPPORTED,
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    Request,
    VoteRequest,
)
from raftlog.consensus.snapshot import SnapshotId
from raftlog.runtime.wire.common import (
    _PARTITION,
    _TOPIC_NAME,
    DESCRIBE_QUORUM_KEY,
    FETCH_VERSION,
    METADATA_PARTITION,
    METADATA_TOPIC_ID,
    SUPPORTED_VERSIONS,
    Endpoint,
    WireError,
    _single_partition,
)


def encode_request(
    body: Request,
    *,
    destination: int,
    cluster_id: str | None = None,
    local_endpoint: Endpoint | None = None,
    fetch_version: int = FETCH_VERSION,
) -> RequestPayload:
    """The kio request carrying ``body`` to node ``destination``.

    ``local_endpoint`` is this node's own listener, advertised in
    BeginQuorumEpoch/EndQuorumEpoch (KIP-853). A Fetch goes at
    ``fetch_version``: 18 carries the fetcher's high watermark (KIP-1166),
    17 (for a peer that serves no more) leaves it out. Raises TypeError for
    a body that is not a request, ValueError for another Fetch version.
    """
    leader_endpoints = () if local_endpoint is None else (local_endpoint,)
    match body:
        case VoteRequest():
            return vote_req.VoteRequest(
                cluster_id=cluster_id,
                voter_id=BrokerId(destination),
                topics=(
                    vote_req.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(
                            vote_req.PartitionData(
                                partition_index=_PARTITION,
                                replica_epoch=i32(body.candidate_epoch),
                                replica_id=BrokerId(body.candidate_id),
                                replica_directory_id=None,
                                voter_directory_id=None,
                                last_offset_epoch=i32(body.last_offset_epoch),
                                last_offset=i64(body.last_offset),
                                pre_vote=body.pre_vote,
                            ),
                        ),
                    ),
                ),
            )
        case BeginQuorumEpochRequest():
            return bqe_req.BeginQuorumEpochRequest(
                cluster_id=cluster_id,
                voter_id=BrokerId(destination),
                topics=(
                    bqe_req.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(
                            bqe_req.PartitionData(
                                partition_index=_PARTITION,
                                voter_directory_id=None,
                                leader_id=BrokerId(body.leader_id),
                                leader_epoch=i32(body.leader_epoch),
                            ),
                        ),
                    ),
                ),
                leader_endpoints=tuple(
                    bqe_req.LeaderEndpoint(name=e.listener, host=e.host, port=u16(e.port))
                    for e in leader_endpoints
                ),
            )
        case EndQuorumEpochRequest():
            return eqe_req.EndQuorumEpochRequest(
                cluster_id=cluster_id,
                topics=(
                    eqe_req.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(
                            eqe_req.PartitionData(
                                partition_index=_PARTITION,
                                leader_id=BrokerId(body.leader_id),
                                leader_epoch=i32(body.leader_epoch),
                                preferred_candidates=tuple(
                                    eqe_req.ReplicaInfo(
                                        candidate_id=BrokerId(c), candidate_directory_id=None
                                    )
                                    for c in body.preferred_successors
                                ),
                            ),
                        ),
                    ),
                ),
                leader_endpoints=tuple(
                    eqe_req.LeaderEndpoint(name=e.listener, host=e.host, port=u16(e.port))
                    for e in leader_endpoints
                ),
            )
        case FetchRequest():
            if fetch_version not in (17, 18):
                raise ValueError(f"Fetch v{fetch_version} is not sent by a quorum node")
            schema: Any = fetch_req if fetch_version == 18 else fetch_req17
            extra: dict[str, Any] = (
                {} if fetch_version == 17 else {"high_watermark": i64(body.high_watermark)})
            return typing.cast(RequestPayload, schema.FetchRequest(
                cluster_id=cluster_id,
                replica_state=schema.ReplicaState(
                    replica_id=BrokerId(body.replica_id), replica_epoch=i64(-1)
                ),
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=body.max_wait_ms)),
                min_bytes=i32(1),
                max_bytes=i32(body.max_bytes),
                isolation_level=i8(0),
                topics=(
                    schema.FetchTopic(
                        topic_id=METADATA_TOPIC_ID,
                        partitions=(
                            schema.FetchPartition(
                                partition=_PARTITION,
                                current_leader_epoch=i32(body.leader_epoch),
                                fetch_offset=i64(body.fetch_offset),
                                last_fetched_epoch=i32(body.last_fetched_epoch),
                                log_start_offset=i64(-1),
                                partition_max_bytes=i32(body.max_bytes),
                                **extra,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            ))
        case FetchSnapshotRequest():
            return fs_req.FetchSnapshotRequest(
                cluster_id=cluster_id,
                replica_id=BrokerId(body.replica_id),
                max_bytes=i32(body.max_bytes),
                topics=(
                    fs_req.TopicSnapshot(
                        name=_TOPIC_NAME,
                        partitions=(
                            fs_req.PartitionSnapshot(
                                partition=_PARTITION,
                                current_leader_epoch=i32(body.leader_epoch),
                                snapshot_id=fs_req.SnapshotId(
                                    end_offset=i64(body.snapshot_id.end_offset),
                                    epoch=i32(body.snapshot_id.epoch),
                                ),
                                position=i64(body.position),
                            ),
                        ),
                    ),
                ),
            )
        case DescribeQuorumRequest():
            return dq_req.DescribeQuorumRequest(
                topics=(
                    dq_req.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(dq_req.PartitionData(partition_index=_PARTITION),),
                    ),
                )
            )
    raise TypeError(f"not a request: {body!r}")


def decode_request(
    payload: RequestPayload, *, local_id: int, cluster_id: str | None = None
) -> tuple[int | None, Request]:
    """``(source node id or None, request)`` for a kio request addressed to ``local_id``.

    The source is None for DescribeQuorum and for an anonymous observer's
    Fetch/FetchSnapshot (replica id -1). Raises `WireError` with
    INCONSISTENT_CLUSTER_ID (both sides know a cluster id and they differ),
    INVALID_REQUEST (not exactly ``__cluster_metadata-0``, fields the core
    rejects, a voter id naming another node) or UNSUPPORTED_VERSION.
    """
    api_key, version = payload.__api_key__, payload.__version__
    low, high = SUPPORTED_VERSIONS.get(api_key, (-1, -1))
    if api_key != DESCRIBE_QUORUM_KEY and not low <= version <= high:
        raise WireError(ErrorCode.unsupported_version, f"api {api_key} v{version}")
    _check_cluster_id(getattr(payload, "cluster_id", None), cluster_id)
    try:
        return _decode_request(payload, local_id)
    except ValueError as exc:  # the core's message validation
        raise WireError(ErrorCode.invalid_request, str(exc)) from exc


def _decode_request(payload: RequestPayload, local_id: int) -> tuple[int | None, Request]:
    match payload:
        case vote_req.VoteRequest():
            _check_voter_id(payload.voter_id, local_id)
            vp = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")
            vote = VoteRequest(
                candidate_epoch=int(vp.replica_epoch),
                candidate_id=int(vp.replica_id),
                last_offset_epoch=int(vp.last_offset_epoch),
                last_offset=int(vp.last_offset),
                pre_vote=bool(vp.pre_vote),
            )
            return _node_id(vote.candidate_id), vote
        case bqe_req.BeginQuorumEpochRequest():
            _check_voter_id(payload.voter_id, local_id)
            bp = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")
            begin = BeginQuorumEpochRequest(int(bp.leader_epoch), int(bp.leader_id))
            return begin.leader_id, begin
        case eqe_req.EndQuorumEpochRequest():
            ep = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")
            end = EndQuorumEpochRequest(
                int(ep.leader_epoch),
                int(ep.leader_id),
                tuple(int(c.candidate_id) for c in ep.preferred_candidates),
            )
            return _node_id(end.leader_id), end
        case fetch_req.FetchRequest() | fetch_req17.FetchRequest():
            if len(payload.topics) != 1 or payload.topics[0].topic_id != METADATA_TOPIC_ID:
                raise WireError(ErrorCode.invalid_request, "Fetch must name __cluster_metadata")
            partitions = payload.topics[0].partitions
            if len(partitions) != 1 or partitions[0].partition != METADATA_PARTITION:
                raise WireError(ErrorCode.invalid_request, "Fetch must name partition 0")
            fp = partitions[0]
            replica_id = int(payload.replica_state.replica_id)
            fetch = FetchRequest(
                replica_id=replica_id,
                leader_epoch=int(fp.current_leader_epoch),
                fetch_offset=int(fp.fetch_offset),
                last_fetched_epoch=max(0, int(fp.last_fetched_epoch)),
                max_wait_ms=_millis(payload.max_wait),
                max_bytes=max(1, min(int(payload.max_bytes), int(fp.partition_max_bytes))),
                high_watermark=int(getattr(fp, "high_watermark", HIGH_WATERMARK_UNSUPPORTED)),
            )
            return (None if replica_id == ANONYMOUS_REPLICA else _node_id(replica_id)), fetch
        case fs_req.FetchSnapshotRequest():
            sp = _single_partition(payload.topics, "name", "partitions", "partition")
            replica_id = int(payload.replica_id)
            snap = FetchSnapshotRequest(
                replica_id=replica_id,
                leader_epoch=int(sp.current_leader_epoch),
                snapshot_id=SnapshotId(int(sp.snapshot_id.end_offset), int(sp.snapshot_id.epoch)),
                position=int(sp.position),
                max_bytes=max(1, int(payload.max_bytes)),
            )
            return (None if replica_id == ANONYMOUS_REPLICA else _node_id(replica_id)), snap
    if payload.__api_key__ == DESCRIBE_QUORUM_KEY:
        topics = typing.cast(Any, payload).topics
        _single_partition(topics, "topic_name", "partitions", "partition_index")
        return None, DescribeQuorumRequest()
    raise WireError(ErrorCode.invalid_request, f"not a KRaft request: {type(payload).__name__}")


def _check_cluster_id(theirs: str | None, ours: str | None) -> None:
    # Kafka's KafkaRaftClient.hasValidClusterId: a request without a cluster
    # id is accepted (older senders); a different one is rejected.
    if theirs is not None and ours is not None and theirs != ours:
        raise WireError(ErrorCode.inconsistent_cluster_id, f"cluster id {theirs!r} != {ours!r}")


def _check_voter_id(voter_id: int, local_id: int) -> None:
    # KIP-853: -1 means "not given" (older senders).
    if voter_id not in (-1, local_id):
        raise WireError(
            ErrorCode.invalid_request, f"request for voter {voter_id}, this is {local_id}"
        )


def _node_id(value: int) -> int:
    if value < 0:
        raise WireError(ErrorCode.invalid_request, f"bad node id {value}")
    return value


def _millis(value: datetime.timedelta) -> int:
    return max(0, int(value.total_seconds() * 1000))
