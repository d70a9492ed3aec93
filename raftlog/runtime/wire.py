"""Mapping between the core's KRaft messages and kio (Kafka protocol) entities.

Pure functions, no I/O. The transport (``raftlog.net``) frames and encodes
the kio entities; this module only decides which fields carry what.

Versions (what Kafka 4.0's ``KafkaRaftClient`` sends, and the highest kio has
where that matters):

====================  ===  ==============================================
API                   ver  why
====================  ===  ==============================================
Vote (52)              2   KIP-996 ``PreVote`` exists only from v2
BeginQuorumEpoch (53)  1   KIP-853 shape (flexible, leader endpoints)
EndQuorumEpoch (54)    1   KIP-853 shape (``PreferredCandidates``)
Fetch (1)             17   KRaft fetches by topic id from v13 (KIP-516);
                           v15 carries ``ReplicaState`` (KIP-903), v17
                           the replica directory id; Kafka 4.0's raft
                           client and observers send v17
FetchSnapshot (59)     1   KIP-853 shape
DescribeQuorum (55)   0-2  served at every version, so the Kafka 3.x and
                           4.x ``kafka-metadata-quorum.sh`` both work
====================  ===  ==============================================

The Raft APIs are served at exactly one version each: only raftlog nodes
(and Kafka nodes of the same generation) send them.

Every KRaft RPC addresses the single partition ``__cluster_metadata-0``; from
Fetch v13 on the topic travels as its fixed topic id
``00000000-0000-0000-0000-000000000001`` (Kafka's
``Topic.CLUSTER_METADATA_TOPIC_ID``). A request naming another topic or
partition is answered with INVALID_REQUEST (Kafka answers
UNKNOWN_TOPIC_OR_PARTITION per partition; the effect, a rejected request,
is the same for a raft peer).

Which node a request comes from is part of each request body (the
candidate, the leader, the fetching replica). `decode_request` returns it
as the envelope source, or None when the body does not name one
(DescribeQuorum, an anonymous observer fetch).

Errors: bad peer input raises `WireError` with the Kafka error code to
answer with (STYLE.md section 8, tier 1); the caller answers or drops.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.begin_quorum_epoch.v1 import request as bqe_req
from kio.schema.begin_quorum_epoch.v1 import response as bqe_resp
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.end_quorum_epoch.v1 import request as eqe_req
from kio.schema.end_quorum_epoch.v1 import response as eqe_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.fetch_snapshot.v1 import request as fs_req
from kio.schema.fetch_snapshot.v1 import response as fs_resp
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v2 import request as vote_req
from kio.schema.vote.v2 import response as vote_resp
from kio.static.primitive import Records, i8, i32, i32Timedelta, i64, u16
from kio.static.protocol import RequestPayload, ResponsePayload

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    ANONYMOUS_REPLICA,
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ReplicaState,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.snapshot import SnapshotId
from raftlog.net import registry

__all__ = (
    "API_KEYS",
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "SUPPORTED_VERSIONS",
    "Endpoint",
    "WireError",
    "convert_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
)

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0
METADATA_TOPIC_ID: Final = uuid.UUID(int=1)
"""Kafka's ``Topic.CLUSTER_METADATA_TOPIC_ID`` (``AAAAAAAAAAAAAAAAAAAAAQ``)."""

VOTE_KEY: Final = 52
BEGIN_QUORUM_EPOCH_KEY: Final = 53
END_QUORUM_EPOCH_KEY: Final = 54
FETCH_KEY: Final = 1
FETCH_SNAPSHOT_KEY: Final = 59
DESCRIBE_QUORUM_KEY: Final = 55

API_KEYS: Final = (
    VOTE_KEY,
    BEGIN_QUORUM_EPOCH_KEY,
    END_QUORUM_EPOCH_KEY,
    FETCH_KEY,
    FETCH_SNAPSHOT_KEY,
    DESCRIBE_QUORUM_KEY,
)

SUPPORTED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = types.MappingProxyType(
    {
        VOTE_KEY: (2, 2),
        BEGIN_QUORUM_EPOCH_KEY: (1, 1),
        END_QUORUM_EPOCH_KEY: (1, 1),
        FETCH_KEY: (17, 17),
        FETCH_SNAPSHOT_KEY: (1, 1),
        DESCRIBE_QUORUM_KEY: (0, 2),
    }
)
"""``api_key -> (min, max)`` served by a quorum node for the Raft APIs."""

REQUEST_TYPES: Final = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    DescribeQuorumRequest,
)
"""The classes of `raftlog.consensus.messages.Request`, for isinstance checks."""

RESPONSE_TYPES: Final = (
    VoteResponse,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    DescribeQuorumResponse,
)
"""The classes of `raftlog.consensus.messages.Response`."""

CONTROLLER_LISTENER: Final = "CONTROLLER"

_TOPIC_NAME: Final = TopicName(METADATA_TOPIC)
_PARTITION: Final = i32(METADATA_PARTITION)


class WireError(Exception):
    """A request that cannot be mapped; answer it with ``error_code``."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(f"{error_code.name}: {message}")
        self.error_code = error_code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """A node's controller listener (KIP-853 ``LeaderEndpoints``/``NodeEndpoints``)."""

    node_id: int
    host: str
    port: int
    listener: str = CONTROLLER_LISTENER


# =========================================================================
# Requests
# =========================================================================


def encode_request(
    body: Request,
    *,
    destination: int,
    cluster_id: str | None = None,
    local_endpoint: Endpoint | None = None,
) -> RequestPayload:
    """The kio request carrying ``body`` to node ``destination``.

    ``local_endpoint`` is this node's own listener, advertised in
    BeginQuorumEpoch/EndQuorumEpoch (KIP-853). Raises TypeError for a body
    that is not a request.
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
            return fetch_req.FetchRequest(
                cluster_id=cluster_id,
                replica_state=fetch_req.ReplicaState(
                    replica_id=BrokerId(body.replica_id), replica_epoch=i64(-1)
                ),
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=body.max_wait_ms)),
                min_bytes=i32(1),
                max_bytes=i32(body.max_bytes),
                isolation_level=i8(0),
                topics=(
                    fetch_req.FetchTopic(
                        topic_id=METADATA_TOPIC_ID,
                        partitions=(
                            fetch_req.FetchPartition(
                                partition=_PARTITION,
                                current_leader_epoch=i32(body.leader_epoch),
                                fetch_offset=i64(body.fetch_offset),
                                last_fetched_epoch=i32(body.last_fetched_epoch),
                                log_start_offset=i64(-1),
                                partition_max_bytes=i32(body.max_bytes),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
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
    if api_key != DESCRIBE_QUORUM_KEY and SUPPORTED_VERSIONS.get(api_key, (-1, -1))[0] != version:
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
        case fetch_req.FetchRequest():
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


def _single_partition(topics: Any, name_field: str, partitions_field: str, index_field: str) -> Any:
    if len(topics) != 1 or getattr(topics[0], name_field) != METADATA_TOPIC:
        raise WireError(ErrorCode.invalid_request, "request must name __cluster_metadata only")
    partitions = getattr(topics[0], partitions_field)
    if len(partitions) != 1 or getattr(partitions[0], index_field) != METADATA_PARTITION:
        raise WireError(ErrorCode.invalid_request, "request must name partition 0 only")
    return partitions[0]


def _millis(value: datetime.timedelta) -> int:
    return max(0, int(value.total_seconds() * 1000))


# =========================================================================
# Responses
# =========================================================================


def encode_response(
    body: Response,
    *,
    version: int | None = None,
    endpoints: Mapping[int, Endpoint] | None = None,
) -> ResponsePayload:
    """The kio response carrying ``body`` (at ``version``; only DescribeQuorum
    has more than one). ``endpoints`` fills KIP-853 node endpoints for the
    leader named in the response. Raises TypeError for a non-response."""
    endpoints = endpoints or {}
    match body:
        case VoteResponse():
            return vote_resp.VoteResponse(
                error_code=ErrorCode.none,
                topics=(
                    vote_resp.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(
                            vote_resp.PartitionData(
                                partition_index=_PARTITION,
                                error_code=_to_kio(body.error),
                                leader_id=BrokerId(body.leader_id),
                                leader_epoch=i32(body.leader_epoch),
                                vote_granted=body.vote_granted,
                            ),
                        ),
                    ),
                ),
                node_endpoints=tuple(
                    vote_resp.NodeEndpoint(
                        node_id=BrokerId(e.node_id), host=e.host, port=u16(e.port)
                    )
                    for e in _leader_endpoints(body.leader_id, endpoints)
                ),
            )
        case BeginQuorumEpochResponse():
            return bqe_resp.BeginQuorumEpochResponse(
                error_code=ErrorCode.none,
                topics=(
                    bqe_resp.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(
                            bqe_resp.PartitionData(
                                partition_index=_PARTITION,
                                error_code=_to_kio(body.error),
                                leader_id=BrokerId(body.leader_id),
                                leader_epoch=i32(body.leader_epoch),
                            ),
                        ),
                    ),
                ),
                node_endpoints=tuple(
                    bqe_resp.NodeEndpoint(
                        node_id=BrokerId(e.node_id), host=e.host, port=u16(e.port)
                    )
                    for e in _leader_endpoints(body.leader_id, endpoints)
                ),
            )
        case EndQuorumEpochResponse():
            return eqe_resp.EndQuorumEpochResponse(
                error_code=ErrorCode.none,
                topics=(
                    eqe_resp.TopicData(
                        topic_name=_TOPIC_NAME,
                        partitions=(
                            eqe_resp.PartitionData(
                                partition_index=_PARTITION,
                                error_code=_to_kio(body.error),
                                leader_id=BrokerId(body.leader_id),
                                leader_epoch=i32(body.leader_epoch),
                            ),
                        ),
                    ),
                ),
                node_endpoints=tuple(
                    eqe_resp.NodeEndpoint(
                        node_id=BrokerId(e.node_id), host=e.host, port=u16(e.port)
                    )
                    for e in _leader_endpoints(body.leader_id, endpoints)
                ),
            )
        case FetchResponse():
            return _encode_fetch_response(body, endpoints)
        case FetchSnapshotResponse():
            return _encode_fetch_snapshot_response(body, endpoints)
        case DescribeQuorumResponse():
            return _encode_describe_quorum(body, 2 if version is None else version, endpoints)
    raise TypeError(f"not a response: {body!r}")


def _encode_fetch_response(
    body: FetchResponse, endpoints: Mapping[int, Endpoint]
) -> ResponsePayload:
    diverging = body.diverging_epoch
    snapshot = body.snapshot_id
    partition = fetch_resp.PartitionData(
        partition_index=_PARTITION,
        error_code=_to_kio(body.error),
        high_watermark=i64(body.high_watermark),
        last_stable_offset=i64(-1),
        log_start_offset=i64(body.log_start_offset),
        diverging_epoch=fetch_resp.EpochEndOffset(
            epoch=i32(diverging.epoch), end_offset=i64(diverging.end_offset)
        )
        if diverging is not None
        else fetch_resp.EpochEndOffset(),
        current_leader=fetch_resp.LeaderIdAndEpoch(
            leader_id=BrokerId(body.leader_id), leader_epoch=i32(body.leader_epoch)
        ),
        snapshot_id=fetch_resp.SnapshotId(
            end_offset=i64(snapshot.end_offset), epoch=i32(snapshot.epoch)
        )
        if snapshot is not None
        else fetch_resp.SnapshotId(),
        aborted_transactions=None,
        preferred_read_replica=BrokerId(-1),
        records=Records(body.records),
    )
    return fetch_resp.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(
            fetch_resp.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(partition,)),
        ),
        node_endpoints=tuple(
            fetch_resp.NodeEndpoint(node_id=BrokerId(e.node_id), host=e.host, port=i32(e.port))
            for e in _leader_endpoints(body.leader_id, endpoints)
        ),
    )


def _encode_fetch_snapshot_response(
    body: FetchSnapshotResponse, endpoints: Mapping[int, Endpoint]
) -> ResponsePayload:
    snapshot = body.snapshot_id
    return fs_resp.FetchSnapshotResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        topics=(
            fs_resp.TopicSnapshot(
                name=_TOPIC_NAME,
                partitions=(
                    fs_resp.PartitionSnapshot(
                        index=_PARTITION,
                        error_code=_to_kio(body.error),
                        snapshot_id=fs_resp.SnapshotId(
                            end_offset=i64(-1 if snapshot is None else snapshot.end_offset),
                            epoch=i32(-1 if snapshot is None else snapshot.epoch),
                        ),
                        current_leader=fs_resp.LeaderIdAndEpoch(
                            leader_id=BrokerId(body.leader_id), leader_epoch=i32(body.leader_epoch)
                        ),
                        size=i64(body.size),
                        position=i64(body.position),
                        unaligned_records=Records(body.unaligned_records),
                    ),
                ),
            ),
        ),
        node_endpoints=tuple(
            fs_resp.NodeEndpoint(node_id=BrokerId(e.node_id), host=e.host, port=u16(e.port))
            for e in _leader_endpoints(body.leader_id, endpoints)
        ),
    )


def _encode_describe_quorum(
    body: DescribeQuorumResponse, version: int, endpoints: Mapping[int, Endpoint]
) -> ResponsePayload:
    def replica(state: ReplicaState) -> dq_resp.ReplicaState:
        return dq_resp.ReplicaState(
            replica_id=BrokerId(state.replica_id),
            replica_directory_id=None,
            log_end_offset=i64(state.log_end_offset),
            last_fetch_timestamp=i64(state.last_fetch_timestamp),
            last_caught_up_timestamp=i64(state.last_caught_up_timestamp),
        )

    voter_ids = {r.replica_id for r in body.current_voters}
    v2 = dq_resp.DescribeQuorumResponse(
        error_code=ErrorCode.none,
        error_message=None,
        topics=(
            dq_resp.TopicData(
                topic_name=_TOPIC_NAME,
                partitions=(
                    dq_resp.PartitionData(
                        partition_index=_PARTITION,
                        error_code=_to_kio(body.error),
                        error_message=None,
                        leader_id=BrokerId(body.leader_id),
                        leader_epoch=i32(body.leader_epoch),
                        high_watermark=i64(body.high_watermark),
                        current_voters=tuple(replica(r) for r in body.current_voters),
                        observers=tuple(replica(r) for r in body.observers),
                    ),
                ),
            ),
        ),
        nodes=tuple(
            dq_resp.Node(
                node_id=BrokerId(e.node_id),
                listeners=(dq_resp.Listener(name=e.listener, host=e.host, port=u16(e.port)),),
            )
            for node_id, e in sorted(endpoints.items())
            if node_id in voter_ids
        ),
    )
    return convert_response(v2, version)


def convert_response(payload: ResponsePayload, version: int) -> ResponsePayload:
    """``payload`` rebuilt as the same API's response class at (older)
    ``version``: fields are matched by name, recursively; fields the older
    version lacks are dropped. Only for responses whose newer fields are
    informational (DescribeQuorum timestamps and nodes, Produce's
    record errors). Raises UnsupportedVersionError for a version kio lacks."""
    if payload.__version__ == version:
        return payload
    target = registry.schemas(payload.__api_key__, version).response
    return typing.cast(ResponsePayload, _down_convert(payload, target))


def _down_convert(source: object, target: type) -> object:
    kwargs: dict[str, object] = {}
    hints = typing.get_type_hints(target)
    for field in dataclasses.fields(target):
        value = getattr(source, field.name)
        nested = _entity_type(hints[field.name])
        if nested is not None and isinstance(value, tuple):
            value = tuple(_down_convert(item, nested) for item in value)
        elif nested is not None and value is not None:
            value = _down_convert(value, nested)
        kwargs[field.name] = value
    return target(**kwargs)


def _entity_type(annotation: object) -> type | None:
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return annotation
    for arg in typing.get_args(annotation):
        found = _entity_type(arg)
        if found is not None:
            return found
    return None


def _leader_endpoints(leader_id: int, endpoints: Mapping[int, Endpoint]) -> tuple[Endpoint, ...]:
    endpoint = endpoints.get(leader_id)
    return () if endpoint is None else (endpoint,)


def decode_response(payload: ResponsePayload, request: Request) -> Response:
    """The core's response for the kio ``payload`` answering ``request``.

    A top-level error (the peer's shell failed the whole request) becomes an
    error response with epoch 0 and no leader, which the core treats like
    any failed request. Raises `WireError` (INVALID_REQUEST) when the
    payload does not answer ``request`` or has fields the core rejects.
    """
    top_error = ErrorCode(getattr(payload, "error_code", ErrorCode.none))
    if top_error is not ErrorCode.none:
        return error_response(request, _from_kio(top_error))
    try:
        return _decode_response(payload, request)
    except (ValueError, IndexError, AttributeError) as exc:
        raise WireError(ErrorCode.invalid_request, f"bad response: {exc}") from exc


def _decode_response(payload: ResponsePayload, request: Request) -> Response:
    match request, payload:
        case VoteRequest(), vote_resp.VoteResponse():
            vp = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")
            error = _from_kio(vp.error_code)
            return VoteResponse(
                error,
                max(0, int(vp.leader_epoch)),
                int(vp.leader_id),
                bool(vp.vote_granted) and error is Errors.NONE,
            )
        case BeginQuorumEpochRequest(), bqe_resp.BeginQuorumEpochResponse():
            bp = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")
            return BeginQuorumEpochResponse(
                _from_kio(bp.error_code), max(0, int(bp.leader_epoch)), int(bp.leader_id)
            )
        case EndQuorumEpochRequest(), eqe_resp.EndQuorumEpochResponse():
            ep = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")
            return EndQuorumEpochResponse(
                _from_kio(ep.error_code), max(0, int(ep.leader_epoch)), int(ep.leader_id)
            )
        case FetchRequest(), fetch_resp.FetchResponse():
            if len(payload.responses) != 1 or payload.responses[0].topic_id != METADATA_TOPIC_ID:
                raise ValueError("Fetch response must name __cluster_metadata")
            partitions = payload.responses[0].partitions
            if len(partitions) != 1 or partitions[0].partition_index != METADATA_PARTITION:
                raise ValueError("Fetch response must name partition 0")
            fp = partitions[0]
            error = _from_kio(fp.error_code)
            diverging = None
            if fp.diverging_epoch.epoch >= 0 and fp.diverging_epoch.end_offset >= 0:
                diverging = DivergingEpoch(
                    int(fp.diverging_epoch.epoch), int(fp.diverging_epoch.end_offset)
                )
            snapshot = None
            if fp.snapshot_id.epoch >= 0 and fp.snapshot_id.end_offset >= 0:
                snapshot = SnapshotId(int(fp.snapshot_id.end_offset), int(fp.snapshot_id.epoch))
            records = bytes(fp.records) if fp.records is not None else b""
            if error is not Errors.NONE:
                diverging, snapshot, records = None, None, b""
            return FetchResponse(
                error=error,
                leader_epoch=max(0, int(fp.current_leader.leader_epoch)),
                leader_id=int(fp.current_leader.leader_id),
                high_watermark=max(-1, int(fp.high_watermark)),
                log_start_offset=int(fp.log_start_offset),
                records=records,
                diverging_epoch=diverging,
                snapshot_id=snapshot,
            )
        case FetchSnapshotRequest(), fs_resp.FetchSnapshotResponse():
            sp = _single_partition(payload.topics, "name", "partitions", "index")
            error = _from_kio(sp.error_code)
            snapshot = None
            if error is Errors.NONE:
                snapshot = SnapshotId(int(sp.snapshot_id.end_offset), int(sp.snapshot_id.epoch))
            return FetchSnapshotResponse(
                error=error,
                leader_epoch=max(0, int(sp.current_leader.leader_epoch)),
                leader_id=int(sp.current_leader.leader_id),
                snapshot_id=snapshot,
                size=int(sp.size) if error is Errors.NONE else 0,
                position=int(sp.position) if error is Errors.NONE else 0,
                unaligned_records=bytes(sp.unaligned_records) if error is Errors.NONE else b"",
            )
        case DescribeQuorumRequest(), _ if payload.__api_key__ == DESCRIBE_QUORUM_KEY:
            return _decode_describe_quorum(payload)
    raise ValueError(f"{type(payload).__name__} does not answer {type(request).__name__}")


def _decode_describe_quorum(payload: Any) -> DescribeQuorumResponse:
    dp = _single_partition(payload.topics, "topic_name", "partitions", "partition_index")

    def replica(state: Any) -> ReplicaState:
        return ReplicaState(
            int(state.replica_id),
            int(state.log_end_offset),
            int(getattr(state, "last_fetch_timestamp", -1)),
            int(getattr(state, "last_caught_up_timestamp", -1)),
        )

    return DescribeQuorumResponse(
        error=_from_kio(dp.error_code),
        leader_id=int(dp.leader_id),
        leader_epoch=max(0, int(dp.leader_epoch)),
        high_watermark=int(dp.high_watermark),
        current_voters=tuple(replica(r) for r in dp.current_voters),
        observers=tuple(replica(r) for r in dp.observers),
    )


def error_response(request: Request, error: Errors) -> Response:
    """The response the core gets when ``request`` failed with ``error`` before
    any peer answered (BROKER_NOT_AVAILABLE on a lost connection,
    REQUEST_TIMED_OUT on a timeout: Kafka's ``KafkaNetworkChannel``) or when
    the peer answered with a top-level error. Epoch 0 and no leader: it tells
    the core nothing about the quorum."""
    match request:
        case VoteRequest():
            return VoteResponse(error, 0, NO_LEADER, False)
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(error, 0, NO_LEADER)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(error, 0, NO_LEADER)
        case FetchRequest():
            return FetchResponse(error, 0, NO_LEADER, -1, -1)
        case FetchSnapshotRequest():
            return FetchSnapshotResponse(error, 0, NO_LEADER)
        case DescribeQuorumRequest():
            return DescribeQuorumResponse(error, NO_LEADER, 0, -1)
    raise TypeError(f"not a request: {request!r}")


_ERRORS_BY_CODE: Final = {int(e): e for e in Errors}


def _to_kio(error: Errors) -> ErrorCode:
    return ErrorCode(int(error))


def _from_kio(code: int) -> Errors:
    # A code the core has no name for is still an error to it.
    return _ERRORS_BY_CODE.get(int(code), Errors.UNKNOWN_SERVER_ERROR)
