"""raftlog.runtime.wire: every KRaft message survives core -> kio -> bytes -> kio -> core."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req17
from kio.schema.fetch.v18 import request as fetch_req

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    HIGH_WATERMARK_UNSUPPORTED,
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
from raftlog.net import codec, registry
from raftlog.records import BatchBuilder
from raftlog.runtime import wire

LOCAL = 2


def _records() -> bytes:
    builder = BatchBuilder(base_offset=7, partition_leader_epoch=3)
    builder.append(b"x" * 100, timestamp_ms=1)
    builder.append(b"y", timestamp_ms=2)
    return builder.build()


def _request_over_bytes(body: Request, **kwargs: object) -> tuple[int | None, Request]:
    payload = wire.encode_request(body, destination=LOCAL, **kwargs)  # type: ignore[arg-type]
    assert wire.SUPPORTED_VERSIONS[payload.__api_key__][1] == payload.__version__
    frame = codec.encode_request(payload, correlation_id=11, client_id="raftlog-1")
    decoded = codec.decode_request(frame[4:])
    return wire.decode_request(decoded.body, local_id=LOCAL, cluster_id="c1")


def _response_over_bytes(body: Response, request: Request, version: int | None = None) -> Response:
    payload = wire.encode_response(
        body, version=version, endpoints={1: wire.Endpoint(1, "127.0.0.1", 19001)}
    )
    frame = codec.encode_response(payload, correlation_id=11)
    _, decoded = codec.decode_response(frame[4:], type(payload))
    return wire.decode_response(decoded, request)


REQUESTS: list[tuple[Request, int | None]] = [
    (VoteRequest(5, 1, 4, 120, pre_vote=False), 1),
    (VoteRequest(6, 3, 4, 0, pre_vote=True), 3),
    (BeginQuorumEpochRequest(9, 1), 1),
    (EndQuorumEpochRequest(9, 1, (3, 2)), 1),
    (FetchRequest(3, 9, 1234, 8, 500, 8 * 1024 * 1024), 3),
    (FetchRequest(-1, 9, 0, 0, 0, 1), None),  # anonymous observer
    (FetchRequest(3, 9, 1234, 8, 500, 1 << 20, high_watermark=1200), 3),  # KIP-1166
    (FetchRequest(3, 9, 0, 0, 500, 1 << 20, high_watermark=-1), 3),  # no HW known yet
    (FetchSnapshotRequest(4, 9, SnapshotId(100, 7), 4096, 1 << 20), 4),
    (DescribeQuorumRequest(), None),
]


@pytest.mark.parametrize(("body", "source"), REQUESTS, ids=lambda v: type(v).__name__)
def test_request_round_trip(body: Request, source: int | None) -> None:
    assert _request_over_bytes(body, cluster_id="c1") == (source, body)


SNAP = SnapshotId(100, 7)
RESPONSES: list[tuple[Response, Request]] = [
    (VoteResponse(Errors.NONE, 5, NO_LEADER, True), REQUESTS[0][0]),
    (VoteResponse(Errors.FENCED_LEADER_EPOCH, 6, 1, False), REQUESTS[1][0]),
    (BeginQuorumEpochResponse(Errors.NONE, 9, 1), REQUESTS[2][0]),
    (EndQuorumEpochResponse(Errors.NOT_LEADER_OR_FOLLOWER, 9, 3), REQUESTS[3][0]),
    (FetchResponse(Errors.NONE, 9, 1, 1200, 0, records=_records()), REQUESTS[4][0]),
    (
        FetchResponse(Errors.NONE, 9, 1, 1200, 0, diverging_epoch=DivergingEpoch(7, 1100)),
        REQUESTS[4][0],
    ),
    (FetchResponse(Errors.NONE, 9, 1, 1200, 100, snapshot_id=SNAP), REQUESTS[4][0]),
    (FetchResponse(Errors.FENCED_LEADER_EPOCH, 10, 2, -1, 0), REQUESTS[4][0]),
    (FetchSnapshotResponse(Errors.NONE, 9, 1, SNAP, 10_000, 4096, b"z" * 100), REQUESTS[8][0]),
    (FetchSnapshotResponse(Errors.SNAPSHOT_NOT_FOUND, 9, 1), REQUESTS[8][0]),
    (
        DescribeQuorumResponse(
            Errors.NONE,
            1,
            9,
            1200,
            (
                ReplicaState(1, 1300, 1_700_000_000_000, 1_700_000_000_000),
                ReplicaState(2, 1200, 5, 4),
            ),
            (ReplicaState(7, 900, 6, -1),),
        ),
        REQUESTS[9][0],
    ),
    (DescribeQuorumResponse(Errors.NOT_LEADER_OR_FOLLOWER, 1, 9, -1), REQUESTS[9][0]),
]


@pytest.mark.parametrize(("body", "request_body"), RESPONSES, ids=lambda v: type(v).__name__)
def test_response_round_trip(body: Response, request_body: Request) -> None:
    assert _response_over_bytes(body, request_body) == body


def test_fetch_request_uses_the_cluster_metadata_topic_id() -> None:
    payload = wire.encode_request(REQUESTS[4][0], destination=1)
    assert isinstance(payload, fetch_req.FetchRequest)
    assert payload.topics[0].topic_id == wire.METADATA_TOPIC_ID
    assert str(wire.METADATA_TOPIC_ID) == "00000000-0000-0000-0000-000000000001"
    assert payload.replica_state.replica_id == 3


def test_kip1166_fetch_v17_leaves_the_hw_out_and_reads_as_unsupported() -> None:
    body = FetchRequest(3, 9, 1234, 8, 500, 1 << 20, high_watermark=1200)
    payload = wire.encode_request(body, destination=LOCAL, fetch_version=17)
    assert isinstance(payload, fetch_req17.FetchRequest)
    frame = codec.encode_request(payload, correlation_id=11, client_id="raftlog-1")
    decoded = codec.decode_request(frame[4:])
    assert decoded.header.api_version == 17
    _, got = wire.decode_request(decoded.body, local_id=LOCAL)
    assert isinstance(got, FetchRequest)
    assert got.high_watermark == HIGH_WATERMARK_UNSUPPORTED
    assert got == FetchRequest(3, 9, 1234, 8, 500, 1 << 20)


def test_kip1166_fetch_v18_carries_the_hw_on_the_wire() -> None:
    payload = wire.encode_request(REQUESTS[6][0], destination=LOCAL)
    assert payload.__version__ == 18
    assert payload.topics[0].partitions[0].high_watermark == 1200


def test_kip1166_a_hw_below_minus_one_is_invalid_request() -> None:
    payload = wire.encode_request(REQUESTS[6][0], destination=LOCAL)
    part = payload.topics[0].partitions[0]
    bad = dataclasses.replace(payload, topics=(dataclasses.replace(
        payload.topics[0], partitions=(dataclasses.replace(part, high_watermark=-5),)),))
    with pytest.raises(wire.WireError) as raised:
        wire.decode_request(bad, local_id=LOCAL)
    assert raised.value.error_code == ErrorCode.invalid_request


def test_fetch_v16_is_unsupported_on_the_quorum_listener() -> None:
    from kio.schema.fetch.v16 import request as fetch_req16
    payload = wire.encode_request(REQUESTS[4][0], destination=LOCAL, fetch_version=17)
    old = registry.convert_request(payload, 16)
    assert isinstance(old, fetch_req16.FetchRequest)
    with pytest.raises(wire.WireError) as raised:
        wire.decode_request(old, local_id=LOCAL)
    assert raised.value.error_code == ErrorCode.unsupported_version


@pytest.mark.parametrize("version", [17, 18])
def test_fetch_response_at_each_served_version(version: int) -> None:
    body, request = RESPONSES[4]
    assert _response_over_bytes(body, request, version=version) == body
    payload = wire.encode_response(body, version=version)
    assert payload.__version__ == version


@pytest.mark.parametrize("version", [0, 1])
def test_describe_quorum_older_versions_keep_leader_hw_and_leos(version: int) -> None:
    body = RESPONSES[10][0]
    assert isinstance(body, DescribeQuorumResponse)
    got = _response_over_bytes(body, DescribeQuorumRequest(), version=version)
    assert isinstance(got, DescribeQuorumResponse)
    assert (got.leader_id, got.leader_epoch, got.high_watermark) == (1, 9, 1200)
    assert [(r.replica_id, r.log_end_offset) for r in got.current_voters] == [(1, 1300), (2, 1200)]
    if version == 0:  # v0 has no timestamps (KIP-836 added them in v1)
        assert got.current_voters[0].last_fetch_timestamp == -1
    else:
        assert got.current_voters == body.current_voters


def test_describe_quorum_request_at_v0_decodes() -> None:
    v0 = registry.convert_request(wire.encode_request(DescribeQuorumRequest(), destination=1), 0)
    assert wire.decode_request(v0, local_id=LOCAL) == (None, DescribeQuorumRequest())


def test_different_cluster_id_is_rejected() -> None:
    with pytest.raises(wire.WireError) as info:
        _request_over_bytes(REQUESTS[0][0], cluster_id="other")
    assert info.value.error_code is ErrorCode.inconsistent_cluster_id


def test_missing_cluster_id_is_accepted() -> None:
    assert _request_over_bytes(REQUESTS[2][0])[1] == REQUESTS[2][0]


def test_request_for_another_voter_is_rejected() -> None:
    payload = wire.encode_request(REQUESTS[0][0], destination=LOCAL + 1)
    with pytest.raises(wire.WireError) as info:
        wire.decode_request(payload, local_id=LOCAL)
    assert info.value.error_code is ErrorCode.invalid_request


def test_invalid_field_values_become_invalid_request() -> None:
    good = wire.encode_request(REQUESTS[0][0], destination=LOCAL)
    assert isinstance(good, type(good))
    import dataclasses

    topic = good.topics[0]  # type: ignore[attr-defined]
    bad_partition = dataclasses.replace(topic.partitions[0], last_offset=-5)
    bad = dataclasses.replace(
        good, topics=(dataclasses.replace(topic, partitions=(bad_partition,)),)
    )
    with pytest.raises(wire.WireError) as info:
        wire.decode_request(bad, local_id=LOCAL)
    assert info.value.error_code is ErrorCode.invalid_request


def test_fetch_for_another_topic_is_rejected() -> None:
    import dataclasses
    import uuid

    good = wire.encode_request(REQUESTS[4][0], destination=1)
    assert isinstance(good, fetch_req.FetchRequest)
    bad = dataclasses.replace(
        good, topics=(dataclasses.replace(good.topics[0], topic_id=uuid.uuid4()),)
    )
    with pytest.raises(wire.WireError):
        wire.decode_request(bad, local_id=1)


def test_top_level_error_becomes_an_error_response() -> None:
    from kio.schema.vote.v2 import response as vote_resp

    payload = vote_resp.VoteResponse(error_code=ErrorCode.cluster_authorization_failed, topics=())
    got = wire.decode_response(payload, REQUESTS[0][0])
    assert got == VoteResponse(Errors.UNKNOWN_SERVER_ERROR, 0, NO_LEADER, False)


def test_mismatched_response_is_rejected() -> None:
    payload = wire.encode_response(BeginQuorumEpochResponse(Errors.NONE, 1, 1))
    with pytest.raises(wire.WireError):
        wire.decode_response(payload, REQUESTS[0][0])


@pytest.mark.parametrize(("body", "_source"), REQUESTS, ids=lambda v: type(v).__name__)
def test_error_response_answers_every_request(body: Request, _source: int | None) -> None:
    response = wire.error_response(body, Errors.BROKER_NOT_AVAILABLE)
    assert response.error is Errors.BROKER_NOT_AVAILABLE
    assert response.leader_epoch == 0
