"""Sans-I/O codec, registry, ApiVersions and connection-core tests."""

from __future__ import annotations

import contextlib
import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from net_messages import (
    describe_quorum_request,
    metadata_request,
    metadata_response,
    vote_request,
    vote_response,
)

from raftlog.net import api_versions, codec, registry
from raftlog.net.connection import (
    ClientConnection,
    ImmediateResponse,
    IncomingRequest,
    ProtocolViolation,
    ServerConnection,
    build_error_response,
)
from raftlog.net.errors import (
    ErrorCode,
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    RequestDecodeError,
    ResponseDecodeError,
    UnknownApiKeyError,
    UnsupportedVersionError,
    VersionConversionError,
)

REQUESTS = [
    *(vote_request(v) for v in (0, 1, 2)),
    *(metadata_request(v) for v in (0, 4, 8, 9, 12, 13)),
    describe_quorum_request(0),
    api_versions.api_versions_request(0),
    api_versions.api_versions_request(3),
]


@pytest.mark.parametrize(
    "request_body", REQUESTS, ids=lambda r: f"{type(r).__name__}v{r.__version__}"
)
def test_request_round_trip_keeps_header_and_body(request_body: object) -> None:
    frame = codec.encode_request(request_body, correlation_id=12345, client_id="node-1")  # type: ignore[arg-type]
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    decoded = codec.decode_request(frame[4:])
    assert decoded.body == request_body
    assert decoded.header.correlation_id == 12345
    assert decoded.header.client_id == "node-1"
    assert decoded.header.api_key == request_body.__api_key__  # type: ignore[attr-defined]
    assert decoded.header.flexible == request_body.__flexible__  # type: ignore[attr-defined]


def test_request_header_v1_for_non_flexible_and_v2_for_flexible_versions() -> None:
    # Metadata became flexible at v9 (KIP-482); v8 still uses header v1.
    assert not registry.is_flexible(3, 8)
    assert registry.is_flexible(3, 9)
    assert registry.schemas(3, 8).request.__header_schema__ is HeaderV1
    assert registry.schemas(3, 9).request.__header_schema__ is HeaderV2
    v8 = codec.encode_request(metadata_request(8), 1, "abc")[4:]
    v9 = codec.encode_request(metadata_request(9), 1, "abc")[4:]
    # Header v1: key, version, correlation id, int16-length client id; v2 adds
    # an empty tagged-field section (one 0 byte) right after the client id.
    assert v8[:13] == struct.pack(">hhih", 3, 8, 1, 3) + b"abc"
    assert v9[:14] == struct.pack(">hhih", 3, 9, 1, 3) + b"abc\x00"


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    # Kafka: ApiVersionsResponse always uses response header v0 (KIP-511).
    for version in range(5):
        assert registry.schemas(18, version).response.__header_schema__ is ResponseHeaderV0
    assert registry.schemas(52, 2).response.__header_schema__ is not ResponseHeaderV0


@pytest.mark.parametrize("version", [0, 4, 9, 12, 13])
def test_response_round_trip(version: int) -> None:
    body = metadata_response(version)
    frame = codec.encode_response(body, correlation_id=77)
    assert codec.peek_correlation_id(frame[4:]) == 77
    assert codec.decode_response(frame[4:], type(body)) == (77, body)


def test_flexibility_of_unknown_newer_version_follows_newest_known() -> None:
    assert registry.is_flexible(18, 99)
    assert not registry.is_flexible(18, 0)
    with pytest.raises(UnknownApiKeyError):
        registry.is_flexible(9999, 0)


@settings(max_examples=60, deadline=None)
@given(
    bodies=st.lists(st.sampled_from(REQUESTS), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_frames_split_at_arbitrary_chunk_boundaries(bodies: list[object], cuts: list[int]) -> None:
    stream = b"".join(codec.encode_request(b, i, "c") for i, b in enumerate(bodies))  # type: ignore[arg-type]
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    decoder = codec.FrameDecoder()
    frames: list[bytes] = []
    for start, end in itertools.pairwise(points):
        frames.extend(decoder.feed(stream[start:end]))
    assert [codec.decode_request(f).body for f in frames] == bodies
    assert decoder.buffered_bytes == 0


def test_oversize_prefix_is_rejected_before_the_body_arrives() -> None:
    decoder = codec.FrameDecoder(max_frame_bytes=100)
    assert decoder.feed(struct.pack(">i", 100) + b"x" * 100) == [b"x" * 100]
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", 101))
    assert (info.value.size, info.value.max_bytes) == (101, 100)
    # The stream position is lost: the decoder stays broken.
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\0\0\0\1a")


def test_negative_size_prefix_is_invalid() -> None:
    with pytest.raises(InvalidFrameError):
        codec.FrameDecoder().feed(struct.pack(">i", -5))


def test_truncated_requests_are_decode_errors_but_trailing_bytes_are_ignored() -> None:
    frame = codec.encode_request(vote_request(2), 1, "c")[4:]
    with pytest.raises(InvalidFrameError):
        codec.decode_request(frame[:5])
    with pytest.raises(RequestDecodeError):
        codec.decode_request(frame[:-3])
    # Like Kafka (librdkafka relies on it for Metadata v12).
    assert codec.decode_request(frame + b"\x01\x00\x00").body == vote_request(2)
    # Responses stay strict: a peer we talk to must speak the schema exactly.
    response = codec.encode_response(vote_response(2), 1)[4:]
    with pytest.raises(ResponseDecodeError):
        codec.decode_response(response + b"\x00", type(vote_response(2)))


def test_kafka_error_codes_and_retriable_flags() -> None:
    # Pinned against Kafka's Errors.java; these are the codes raftlog relies on.
    expected = {
        "none": (0, False),
        "offset_out_of_range": (1, False),
        "corrupt_message": (2, True),
        "unknown_topic_or_partition": (3, True),
        "not_leader_or_follower": (6, True),
        "request_timed_out": (7, True),
        "message_too_large": (10, False),
        "not_coordinator": (16, True),
        "not_enough_replicas": (19, True),
        "not_enough_replicas_after_append": (20, True),
        "unsupported_version": (35, False),
        "topic_already_exists": (36, False),
        "invalid_partitions": (37, False),
        "invalid_replication_factor": (38, False),
        "not_controller": (41, True),
        "invalid_request": (42, False),
        "fenced_leader_epoch": (74, True),
        "unknown_leader_epoch": (75, True),
        "ineligible_replica": (107, False),
        "unknown_server_error": (-1, False),
    }
    actual = {name: (int(ErrorCode[name]), ErrorCode[name].retriable) for name in expected}
    assert actual == expected


def test_registry_maps_versions_to_matching_kio_classes() -> None:
    table = registry.api_registry([52, 53, 54, 55, 59])
    assert set(table) == {52, 53, 54, 55, 59}
    for key, versions in table.items():
        assert (min(versions), max(versions)) == registry.kio_version_range(key)
        for version, api in versions.items():
            assert api.request.__api_key__ == key and api.response.__version__ == version
    with pytest.raises(UnsupportedVersionError):
        registry.schemas(52, 99)


def test_convert_request_drops_only_default_fields() -> None:
    v1 = registry.convert_request(vote_request(2, pre_vote=False), 1)
    assert v1.__version__ == 1
    assert v1.topics[0].partitions[0].last_offset == 41  # type: ignore[attr-defined]
    # pre_vote=True cannot be expressed before v2 (KIP-996).
    with pytest.raises(VersionConversionError):
        registry.convert_request(vote_request(2, pre_vote=True), 1)
    # A v0 request lacks v1's voter id, which v1 requires: no silent default.
    with pytest.raises(VersionConversionError):
        registry.convert_request(vote_request(0), 1)


def test_error_response_only_for_schemas_with_a_top_level_error_code() -> None:
    body = build_error_response(registry.schemas(55, 2).response, ErrorCode.not_controller, "nope")
    assert body is not None
    assert body.error_code is ErrorCode.not_controller  # type: ignore[union-attr]
    assert body.error_message == "nope"  # type: ignore[union-attr]
    assert build_error_response(registry.schemas(3, 12).response, ErrorCode.not_controller) is None


def test_negotiate_picks_highest_common_version() -> None:
    local = {1: (4, 16), 3: (0, 12), 52: (0, 2), 60: (0, 1)}
    remote = {1: (0, 13), 3: (12, 13), 52: (3, 4), 18: (0, 3)}
    assert api_versions.negotiate(local, remote) == {1: 13, 3: 12}


def _server_events(
    connection: ServerConnection, body: object, correlation_id: int = 9
) -> list[object]:
    return list(connection.receive_data(codec.encode_request(body, correlation_id, "t")))  # type: ignore[arg-type]


def test_server_core_answers_api_versions_with_exactly_the_advertised_ranges() -> None:
    supported = {18: (0, 4), 52: (0, 2)}
    events = _server_events(ServerConnection(supported), api_versions.api_versions_request(3))
    assert len(events) == 1 and isinstance(events[0], ImmediateResponse)
    _, body = api_versions.decode_api_versions_response(events[0].data[4:], 3)
    assert body.error_code is ErrorCode.none  # type: ignore[union-attr]
    assert api_versions.peer_versions(body) == supported


def test_server_core_falls_back_to_v0_for_unsupported_api_versions_version() -> None:
    supported = {18: (0, 2), 52: (0, 2)}
    events = _server_events(ServerConnection(supported), api_versions.api_versions_request(3))
    assert isinstance(events[0], ImmediateResponse)
    # The client decodes with its own version and falls back to v0 on error 35.
    _, body = api_versions.decode_api_versions_response(events[0].data[4:], 3)
    assert body.__version__ == 0
    assert body.error_code is ErrorCode.unsupported_version  # type: ignore[union-attr]
    assert api_versions.peer_versions(body)[18] == (0, 2)


def test_server_core_rejects_invalid_client_software_name() -> None:
    request = api_versions.api_versions_request(3, software_name="-bad name-")
    events = _server_events(ServerConnection({18: (0, 4)}), request)
    assert isinstance(events[0], ImmediateResponse)
    _, body = api_versions.decode_api_versions_response(events[0].data[4:], 3)
    assert body.error_code is ErrorCode.invalid_request  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (vote_request(2), UnsupportedVersionError),  # served range is 0..1
        (metadata_request(12), UnsupportedVersionError),  # not served at all
    ],
)
def test_server_core_violation_for_unsupported_requests(body: object, error: type) -> None:
    connection = ServerConnection({18: (0, 4), 52: (0, 1)})
    events = _server_events(connection, body)
    assert len(events) == 1 and isinstance(events[0], ProtocolViolation)
    assert isinstance(events[0].error, error)
    # Dead afterwards, even for a valid request.
    assert isinstance(_server_events(connection, vote_request(1))[0], ProtocolViolation)


def test_server_core_unknown_api_key_is_a_violation() -> None:
    frame = struct.pack(">hhih", 999, 0, 1, -1)
    events = ServerConnection({18: (0, 4)}).receive_data(struct.pack(">i", len(frame)) + frame)
    assert isinstance(events[0], ProtocolViolation)
    assert isinstance(events[0].error, UnknownApiKeyError)


def test_server_core_yields_requests_before_a_violation_in_the_same_chunk() -> None:
    connection = ServerConnection({18: (0, 4), 52: (0, 2)})
    data = codec.encode_request(vote_request(2), 1, "t") + struct.pack(">i", -1)
    events = connection.receive_data(data)
    assert isinstance(events[0], IncomingRequest) and events[0].header.correlation_id == 1
    assert isinstance(events[1], ProtocolViolation)


def test_client_core_matches_pipelined_responses_by_correlation_id() -> None:
    client = ClientConnection("c", max_response_bytes=1 << 20)
    first, _ = client.send_request(vote_request(2))
    second, _ = client.send_request(vote_request(2))
    assert first != second and set(client.in_flight) == {first, second}
    reply = codec.encode_response(vote_response(2), second) + codec.encode_response(
        vote_response(2, ErrorCode.fenced_leader_epoch), first
    )
    responses = client.receive_data(reply)
    assert [c for c, _ in responses] == [second, first]
    assert responses[1][1].error_code is ErrorCode.fenced_leader_epoch  # type: ignore[attr-defined]
    with pytest.raises(ResponseDecodeError):
        client.receive_data(codec.encode_response(vote_response(2), 999))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), chunk=st.integers(min_value=1, max_value=64))
def test_decoders_raise_only_typed_errors_on_garbage(data: bytes, chunk: int) -> None:
    decoder = codec.FrameDecoder(max_frame_bytes=1024)
    try:
        for start in range(0, len(data), chunk):
            for frame in decoder.feed(data[start : start + chunk]):
                with contextlib.suppress(ProtocolError):
                    codec.decode_request(frame)
    except ProtocolError:
        pass
    # The frame content itself, as a request frame, decodes or raises typed errors.
    with contextlib.suppress(ProtocolError):
        codec.decode_request(data)
    events = ServerConnection({18: (0, 4), 52: (0, 2), 3: (0, 13)}, 1024).receive_data(data)
    assert all(not isinstance(e, ProtocolViolation) for e in events[:-1])


@settings(max_examples=200, deadline=None)
@given(
    api_key=st.sampled_from(sorted(registry.KIO_API_KEYS)),
    version=st.integers(min_value=-2, max_value=20),
    tail=st.binary(max_size=64),
)
def test_random_headers_with_random_bodies_raise_only_typed_errors(
    api_key: int, version: int, tail: bytes
) -> None:
    frame = struct.pack(">hhih", api_key, version, 1, 1) + b"c" + tail
    with contextlib.suppress(ProtocolError):
        codec.decode_request(frame)


# --- hand-written headers ------------------------------------------------------


def _kio_bytes(entity: object) -> bytes:
    import io

    from kio.serial import entity_writer

    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


@pytest.mark.parametrize("client_id", [None, "", "raftlog-replica-fetcher", "é"])
def test_hand_written_headers_match_kio_for_every_api_and_version(client_id: str | None) -> None:
    from kio.static.primitive import i16, i32

    for api_key in sorted(registry.KIO_API_KEYS):
        low, high = registry.kio_version_range(api_key)
        for version in range(low, high + 1):
            api = registry.schemas(api_key, version)
            header_cls = api.request.__header_schema__
            header = _kio_bytes(
                header_cls(
                    request_api_key=i16(api_key),
                    request_api_version=i16(version),
                    correlation_id=i32(7),
                    client_id=client_id,
                )
            )
            frame = codec.encode_request_frame(api_key, version, 7, client_id, b"body")
            assert frame == struct.pack(">i", len(header) + 4) + header + b"body"
            response_header_cls = api.response.__header_schema__
            response_header = _kio_bytes(response_header_cls(correlation_id=i32(9)))
            flexible = response_header_cls is not ResponseHeaderV0
            response = codec.encode_response_frame(9, flexible, b"x")
            assert response == struct.pack(">i", len(response_header) + 1) + response_header + b"x"


def _kio_request_header(frame: bytes, flexible: bool) -> tuple[int, str | None, int] | None:
    from kio.serial import entity_reader

    try:
        header, size = entity_reader(HeaderV2 if flexible else HeaderV1)(frame, 0)
    except Exception:
        return None
    return int(header.correlation_id), header.client_id, size


@settings(max_examples=1000, deadline=None)
@given(
    flexible=st.booleans(),
    client_id=st.one_of(st.none(), st.text(max_size=12), st.binary(max_size=12)),
    tags=st.lists(st.tuples(st.integers(0, 2**32 + 5), st.binary(max_size=6)), max_size=3),
    tail=st.binary(max_size=8),
    cut=st.integers(0, 40),
    noise=st.binary(max_size=40),
    use_noise=st.booleans(),
)
def test_hand_read_request_header_agrees_with_kio(
    flexible: bool,
    client_id: str | bytes | None,
    tags: list[tuple[int, bytes]],
    tail: bytes,
    cut: int,
    noise: bytes,
    use_noise: bool,
) -> None:
    # Well-formed-ish headers (raw client-id bytes may be bad UTF-8, tags may
    # overflow), truncated at random, or plain noise: both readers must
    # agree on the result or both refuse.
    def uvarint(value: int) -> bytes:
        out = bytearray()
        while True:
            byte = value & 0x7F
            value >>= 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)

    if use_noise:
        frame = struct.pack(">hh", 3, 12) + noise
    else:
        raw = client_id.encode() if isinstance(client_id, str) else client_id
        frame = struct.pack(">hhi", 3, 12, 77)
        frame += b"\xff\xff" if raw is None else struct.pack(">h", len(raw)) + raw
        if flexible:
            frame += uvarint(len(tags))
            for tag, value in tags:
                frame += uvarint(tag) + uvarint(len(value)) + value
        frame += tail
        frame = frame[: len(frame) - cut] if cut < len(frame) else frame[:4]
    expected = _kio_request_header(frame, flexible)
    try:
        ours: tuple[int, str | None, int] | None = codec._read_request_header(frame, flexible)
    except RequestDecodeError:
        ours = None
    assert ours == expected
