"""Responses: the core's KRaft responses to kio response entities and back,
and the error responses the runtime makes up for failed requests."""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Mapping
from typing import Any

from kio.schema.begin_quorum_epoch.v1 import response as bqe_resp
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.end_quorum_epoch.v1 import response as eqe_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.fetch.v18 import response as fetch_resp18
from kio.schema.fetch_snapshot.v1 import response as fs_resp
from kio.schema.types import BrokerId
from kio.schema.vote.v2 import response as vote_resp
from kio.static.primitive import Records, i32, i32Timedelta, i64, u16
from kio.static.protocol import ResponsePayload

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
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
from raftlog.runtime.wire.common import (
    _PARTITION,
    _TOPIC_NAME,
    DESCRIBE_QUORUM_KEY,
    METADATA_PARTITION,
    METADATA_TOPIC_ID,
    Endpoint,
    WireError,
    _from_kio,
    _single_partition,
    _to_kio,
)


def encode_response(
    body: Response,
    *,
    version: int | None = None,
    endpoints: Mapping[int, Endpoint] | None = None,
) -> ResponsePayload:
    """The kio response carrying ``body`` (at ``version``; only DescribeQuorum
    and Fetch have more than one). ``endpoints`` fills KIP-853 node endpoints
    for the leader named in the response. Raises TypeError for a non-response."""
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
            # v18 changed only the request (KIP-1166): the same answer, v18's class.
            return _encode_fetch_response(body, endpoints,
                                          fetch_resp18 if version == 18 else fetch_resp)
        case FetchSnapshotResponse():
            return _encode_fetch_snapshot_response(body, endpoints)
        case DescribeQuorumResponse():
            return _encode_describe_quorum(body, 2 if version is None else version, endpoints)
    raise TypeError(f"not a response: {body!r}")


def _encode_fetch_response(
    body: FetchResponse, endpoints: Mapping[int, Endpoint], schema: Any = fetch_resp
) -> ResponsePayload:
    diverging = body.diverging_epoch
    snapshot = body.snapshot_id
    partition = schema.PartitionData(
        partition_index=_PARTITION,
        error_code=_to_kio(body.error),
        high_watermark=i64(body.high_watermark),
        last_stable_offset=i64(-1),
        log_start_offset=i64(body.log_start_offset),
        diverging_epoch=schema.EpochEndOffset(
            epoch=i32(diverging.epoch), end_offset=i64(diverging.end_offset)
        )
        if diverging is not None
        else schema.EpochEndOffset(),
        current_leader=schema.LeaderIdAndEpoch(
            leader_id=BrokerId(body.leader_id), leader_epoch=i32(body.leader_epoch)
        ),
        snapshot_id=schema.SnapshotId(
            end_offset=i64(snapshot.end_offset), epoch=i32(snapshot.epoch)
        )
        if snapshot is not None
        else schema.SnapshotId(),
        aborted_transactions=None,
        preferred_read_replica=BrokerId(-1),
        records=Records(body.records),
    )
    return typing.cast(ResponsePayload, schema.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(
            schema.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(partition,)),
        ),
        node_endpoints=tuple(
            schema.NodeEndpoint(node_id=BrokerId(e.node_id), host=e.host, port=i32(e.port))
            for e in _leader_endpoints(body.leader_id, endpoints)
        ),
    ))


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
        case FetchRequest(), fetch_resp.FetchResponse() | fetch_resp18.FetchResponse():
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
