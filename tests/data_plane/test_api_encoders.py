"""The hand-written Produce and Fetch response encoders against kio.

For every version the broker serves, random responses are encoded by hand
and checked two ways: byte for byte against kio's writer applied to the
entity `data_plane.api.build` makes from the same values (the handlers'
former path), and decoded by kio's reader back to that same entity.
"""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from data_plane.api.build import build
from data_plane.api.encoders import (
    FetchPartitionData,
    NodeEndpoint,
    ProducePartitionData,
    ReplicaFetchPartition,
    encode_fetch_response,
    encode_produce_response,
    encode_replica_fetch_request,
)
from data_plane.kafka_api import BROKER_API_VERSIONS, FETCH, PRODUCE
from raftlog.net import registry
from raftlog.net.errors import ErrorCode

ERRORS = [e.value for e in ErrorCode][:40]
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
offsets = st.one_of(st.integers(-1, 1000), i64)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
records = st.one_of(st.none(), st.binary(max_size=300))
pairs = st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**40))

produce_partitions = st.builds(
    ProducePartitionData,
    index=i32,
    error_code=st.sampled_from(ERRORS),
    base_offset=offsets,
    log_start_offset=offsets,
    error_message=st.one_of(st.none(), names),
    current_leader=st.one_of(st.none(), st.just((-1, -1)), st.tuples(i32, i32)),
)
node_endpoints = st.lists(st.builds(
    NodeEndpoint, node_id=i32, host=names, port=i32, rack=st.one_of(st.none(), names),
), max_size=3)
fetch_partitions = st.builds(
    FetchPartitionData,
    partition_index=i32,
    error_code=st.sampled_from(ERRORS),
    high_watermark=offsets,
    last_stable_offset=offsets,
    log_start_offset=offsets,
    records=records,
    aborted_transactions=st.one_of(st.none(), st.lists(st.tuples(i64, i64), max_size=3)),
    preferred_read_replica=st.integers(-1, 10),
    diverging_epoch=st.one_of(st.none(), st.just((-1, -1)), pairs),
    current_leader=st.one_of(st.none(), st.just((-1, -1)), st.tuples(i32, i32)),
)


def _kio_bytes(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _kio_read(cls: type, data: bytes) -> object:
    entity, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    return entity


def _versions(api_key: int) -> list[int]:
    low, high = BROKER_API_VERSIONS[api_key]
    return list(range(low, high + 1))


def _endpoints_description(endpoints: list[NodeEndpoint]) -> list[dict[str, object]]:
    return [{"node_id": e.node_id, "host": e.host, "port": e.port, "rack": e.rack}
            for e in endpoints]


def _produce_description(
    topics: list[tuple[str, list[ProducePartitionData]]], throttle_ms: int,
    endpoints: list[NodeEndpoint],
) -> dict[str, object]:
    return {
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": ErrorCode(p.error_code),
                        "base_offset": p.base_offset,
                        "log_append_time": None,
                        "log_start_offset": p.log_start_offset,
                        "record_errors": [],
                        "error_message": p.error_message,
                        **({} if p.current_leader is None else {"current_leader": {
                            "leader_id": p.current_leader[0],
                            "leader_epoch": p.current_leader[1]}}),
                    }
                    for p in parts
                ],
            }
            for name, parts in topics
        ],
        "throttle_time": datetime.timedelta(milliseconds=throttle_ms),
        "node_endpoints": _endpoints_description(endpoints),
    }


@pytest.mark.parametrize("version", _versions(PRODUCE))
@settings(max_examples=60, deadline=None)
@given(
    topics=st.lists(st.tuples(names, st.lists(produce_partitions, max_size=3)), max_size=3),
    throttle_ms=st.integers(0, 10_000),
    endpoints=node_endpoints,
)
def test_produce_response_matches_kio(
    version: int, topics: list[tuple[str, list[ProducePartitionData]]], throttle_ms: int,
    endpoints: list[NodeEndpoint],
) -> None:
    # Versions before 10 have no leader hints: `build` drops them, as the
    # encoder must.
    cls = registry.schemas(PRODUCE, version).response
    expected = build(cls, _produce_description(topics, throttle_ms, endpoints))
    ours = encode_produce_response(version, topics, throttle_ms, endpoints)
    assert ours == _kio_bytes(expected)
    assert _kio_read(cls, ours) == expected


def _fetch_description(
    version: int,
    topics: list[tuple[object, list[FetchPartitionData]]],
    error_code: int,
    session_id: int,
    endpoints: list[NodeEndpoint] | None = None,
) -> dict[str, object]:
    topics_out = []
    for label, parts in topics:
        partitions = []
        for p in parts:
            out: dict[str, object] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode(p.error_code),
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "log_start_offset": p.log_start_offset,
                "aborted_transactions": (
                    None
                    if p.aborted_transactions is None
                    else [{"producer_id": a, "first_offset": b} for a, b in p.aborted_transactions]
                ),
                "preferred_read_replica": p.preferred_read_replica,
                "records": p.records,
            }
            if p.diverging_epoch is not None:
                out["diverging_epoch"] = {
                    "epoch": p.diverging_epoch[0],
                    "end_offset": p.diverging_epoch[1],
                }
            if p.current_leader is not None:
                out["current_leader"] = {
                    "leader_id": p.current_leader[0],
                    "leader_epoch": p.current_leader[1],
                }
            partitions.append(out)
        key = "topic_id" if version >= 13 else "topic"
        topics_out.append({key: label, "partitions": partitions})
    return {
        "throttle_time": datetime.timedelta(0),
        "error_code": ErrorCode(error_code),
        "session_id": session_id,
        "responses": topics_out,
        "node_endpoints": _endpoints_description(endpoints or []),
    }


@pytest.mark.parametrize("version", _versions(FETCH))
@settings(max_examples=60, deadline=None)
@given(data=st.data(), error_code=st.sampled_from(ERRORS), session_id=i32)
def test_fetch_response_matches_kio(
    version: int, data: st.DataObject, error_code: int, session_id: int
) -> None:
    labels = st.uuids() if version >= 13 else names
    topics = data.draw(
        st.lists(st.tuples(labels, st.lists(fetch_partitions, max_size=3)), max_size=3)
    )
    endpoints = data.draw(node_endpoints)
    cls = registry.schemas(FETCH, version).response
    expected = build(cls, _fetch_description(version, topics, error_code, session_id, endpoints))
    ours = encode_fetch_response(version, topics, error_code=error_code, session_id=session_id,
                                 node_endpoints=endpoints)
    assert ours == _kio_bytes(expected)
    assert _kio_read(cls, ours) == expected


def test_fetch_response_by_id_with_unknown_topic_writes_the_zero_uuid() -> None:
    # An unknown topic id is answered under the id None (kio: the zero UUID).
    cls = registry.schemas(FETCH, 16).response
    part = FetchPartitionData(0, ErrorCode.unknown_topic_id.value, -1, -1, -1, b"")
    ours = encode_fetch_response(16, [(None, [part])])
    expected = build(cls, _fetch_description(16, [(None, [part])], 0, 0))
    assert ours == _kio_bytes(expected)
    assert _kio_read(cls, ours) == expected


def test_encoders_refuse_versions_they_do_not_know() -> None:
    with pytest.raises(ValueError):
        encode_produce_response(2, [])
    with pytest.raises(ValueError):
        encode_produce_response(11, [])
    with pytest.raises(ValueError):
        encode_fetch_response(17, [])
    with pytest.raises(ValueError):
        encode_fetch_response(13, [("by-name", [])])
    with pytest.raises(ValueError):
        encode_fetch_response(12, [(uuid.uuid4(), [])])


fetch_request_partitions = st.builds(
    ReplicaFetchPartition,
    partition=i32,
    current_leader_epoch=i32,
    fetch_offset=i64,
    last_fetched_epoch=i32,
    log_start_offset=i64,
    partition_max_bytes=i32,
)


@settings(max_examples=100, deadline=None)
@given(
    replica=st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**62)),
    max_wait_ms=st.integers(0, 2**31 - 1),
    min_bytes=i32,
    max_bytes=i32,
    isolation_level=st.integers(0, 1),
    topics=st.lists(
        st.tuples(st.uuids(), st.lists(fetch_request_partitions, max_size=3)), max_size=3
    ),
    session=st.one_of(st.none(), st.tuples(i32, i32)),
    forgotten=st.lists(st.tuples(st.uuids(), st.lists(i32, max_size=4)), max_size=3),
)
def test_replica_fetch_request_matches_kio(
    replica: tuple[int, int],
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    topics: list[tuple[uuid.UUID, list[ReplicaFetchPartition]]],
    session: tuple[int, int] | None,
    forgotten: list[tuple[uuid.UUID, list[int]]],
) -> None:
    # session None: the defaults, no session (0, -1) and nothing forgotten.
    from kio.schema.fetch.v16 import request as fetch_req

    expected = fetch_req.FetchRequest(
        replica_state=fetch_req.ReplicaState(
            replica_id=replica[0],  # type: ignore[arg-type]
            replica_epoch=replica[1],
        ),  # type: ignore[arg-type]
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),  # type: ignore[arg-type]
        min_bytes=min_bytes,
        max_bytes=max_bytes,  # type: ignore[arg-type]
        isolation_level=isolation_level,  # type: ignore[arg-type]
        topics=tuple(
            fetch_req.FetchTopic(
                topic_id=tid,
                partitions=tuple(
                    fetch_req.FetchPartition(
                        partition=p.partition,  # type: ignore[arg-type]
                        current_leader_epoch=p.current_leader_epoch,  # type: ignore[arg-type]
                        fetch_offset=p.fetch_offset,  # type: ignore[arg-type]
                        last_fetched_epoch=p.last_fetched_epoch,  # type: ignore[arg-type]
                        log_start_offset=p.log_start_offset,  # type: ignore[arg-type]
                        partition_max_bytes=p.partition_max_bytes,  # type: ignore[arg-type]
                    )
                    for p in parts
                ),
            )
            for tid, parts in topics
        ),
        session_id=0 if session is None else session[0],  # type: ignore[arg-type]
        session_epoch=-1 if session is None else session[1],  # type: ignore[arg-type]
        forgotten_topics_data=() if session is None else tuple(
            fetch_req.ForgottenTopic(topic_id=tid, partitions=tuple(indexes))  # type: ignore[arg-type]
            for tid, indexes in forgotten
        ),
        rack_id="",
    )
    session_args: dict[str, object] = {} if session is None else {
        "session_id": session[0], "session_epoch": session[1], "forgotten_topics": forgotten,
    }
    ours = encode_replica_fetch_request(
        replica_id=replica[0],
        replica_epoch=replica[1],
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        topics=topics,
        **session_args,  # type: ignore[arg-type]
    )
    assert ours == _kio_bytes(expected)
    assert _kio_read(fetch_req.FetchRequest, ours) == expected
