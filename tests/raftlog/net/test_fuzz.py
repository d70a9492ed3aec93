"""Hypothesis fuzzing of a live server: it must survive anything a peer sends."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from net_live_server import live_server
from net_messages import metadata_request, vote_request, vote_response

from raftlog.net import KafkaProtocolServer, RequestContext, codec, registry
from raftlog.net.api_versions import (
    api_versions_request,
    decode_api_versions_response,
    peer_versions,
)
from raftlog.net.errors import ErrorCode

MAX_REQUEST_BYTES = 4096
SUPPORTED = {52: (0, 2), 3: (0, 12)}


async def vote(context: RequestContext, body: Any) -> Any:
    return vote_response(context.api_version)


async def metadata(context: RequestContext, body: Any) -> Any:
    raise RuntimeError("metadata handler failure")


@pytest.fixture(scope="module")
def server() -> Iterator[KafkaProtocolServer]:
    with live_server(
        {52: vote, 3: metadata}, supported=SUPPORTED, max_request_bytes=MAX_REQUEST_BYTES
    ) as s:
        yield s


def send_and_drain(port: int, data: bytes) -> bytes:
    """Send ``data``, half-close, and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may already have hung up on an early bad prefix
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


def assert_server_answers_api_versions(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(codec.encode_request(api_versions_request(3), 99, "probe"))
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        correlation_id, body = decode_api_versions_response(_read_exactly(sock, size), 3)
    assert correlation_id == 99
    assert body.error_code is ErrorCode.none  # type: ignore[attr-defined]
    assert peer_versions(body) == {**SUPPORTED, 17: (0, 1), 18: (0, 4), 36: (0, 2)}


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "server closed the probe connection"
        data += chunk
    return data


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


valid_frames = st.sampled_from(
    [
        codec.encode_request(vote_request(2), 1, "f"),
        codec.encode_request(vote_request(0), 2, None),
        codec.encode_request(metadata_request(12), 3, "f"),
        codec.encode_request(api_versions_request(3), 4, "f"),
        codec.encode_request(api_versions_request(0), 5, "f"),
    ]
)
random_header_frames = st.builds(
    lambda key, version, corr, client, body: framed(
        struct.pack(">hhih", key, version, corr, len(client)) + client + body
    ),
    st.one_of(st.sampled_from(sorted(registry.KIO_API_KEYS)), st.integers(-32768, 32767)),
    st.integers(-5, 20),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=12),
    st.binary(max_size=200),
)
oversize_prefixes = st.integers(MAX_REQUEST_BYTES + 1, 2**31 - 1).map(
    lambda n: struct.pack(">i", n)
)
negative_prefixes = st.integers(-(2**31), -1).map(lambda n: struct.pack(">i", n))
truncated = st.tuples(valid_frames, st.integers(1, 40)).map(lambda t: t[0][: -t[1]])
mutated = st.tuples(valid_frames, st.integers(4, 200), st.integers(0, 255)).map(
    lambda t: t[0][: t[1] % len(t[0])] + bytes([t[2]]) + t[0][t[1] % len(t[0]) + 1 :]
)
garbage = st.binary(min_size=1, max_size=400)

attacks = st.lists(
    st.one_of(
        valid_frames,
        random_header_frames,
        oversize_prefixes,
        negative_prefixes,
        truncated,
        mutated,
        garbage,
    ),
    min_size=1,
    max_size=4,
).map(b"".join)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=attacks)
def test_live_server_survives_arbitrary_bytes(server: KafkaProtocolServer, data: bytes) -> None:
    reply = send_and_drain(server.port, data)
    # Whatever came back is a sequence of well-formed frames.
    frames = codec.FrameDecoder(1 << 20).feed(reply)
    assert sum(4 + len(f) for f in frames) == len(reply)
    assert_server_answers_api_versions(server.port)


def test_valid_pipeline_after_fuzzing_still_gets_every_answer(server: KafkaProtocolServer) -> None:
    requests = [codec.encode_request(vote_request(2), i, "after") for i in range(20)]
    reply = send_and_drain(server.port, b"".join(requests))
    frames = codec.FrameDecoder(1 << 20).feed(reply)
    assert [codec.peek_correlation_id(f) for f in frames] == list(range(20))
