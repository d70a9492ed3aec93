"""Hypothesis: the reader only ever raises RecordError subclasses, fast; build/decode round-trips."""

from __future__ import annotations

import contextlib
import struct
import time

from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.records import (
    BATCH_HEADER_SIZE,
    BatchBuilder,
    Compression,
    Header,
    Record,
    RecordError,
    decode_records,
    iter_batches,
    parse_header,
    validate_batch,
    validate_batches,
)
from raftlog.records.varint import read_varint, read_varlong, write_varint, write_varlong

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
# Every reader call on one fuzzed input must finish well inside this.
MAX_SECONDS_PER_INPUT = 1.0
SMALL_LIMIT = 1 << 20

timestamps = st.integers(min_value=0, max_value=2**41)
maybe_bytes = st.none() | st.binary(max_size=64)
headers = st.lists(st.builds(Header, st.text(max_size=8), maybe_bytes), max_size=3)
record_inputs = st.lists(
    st.tuples(maybe_bytes, maybe_bytes, headers, timestamps), min_size=1, max_size=20
)
codecs = st.sampled_from(list(Compression))


def build(
    inputs: list[tuple[bytes | None, bytes | None, list[Header], int]],
    compression: Compression,
    base_offset: int = 0,
) -> bytes:
    builder = BatchBuilder(compression=compression, base_offset=base_offset)
    for key, value, hdrs, ts in inputs:
        builder.append(value, key=key, headers=hdrs, timestamp_ms=ts)
    return builder.build()


def reseal(raw: bytearray) -> bytes:
    """Fix the CRC (if there is room for one) so the mutation reaches the record parser."""
    if len(raw) >= BATCH_HEADER_SIZE:
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def read_everything(buf: bytes) -> None:
    """Drive every reader entry point; anything but RecordError fails the test."""
    started = time.monotonic()
    for call in (
        lambda: parse_header(buf),
        lambda: validate_batch(buf),
        lambda: validate_batches(buf),
        lambda: list(iter_batches(buf)),
        lambda: list(iter_batches(buf, validate_crc=False)),
        lambda: decode_records(buf, max_decompressed_bytes=SMALL_LIMIT),
        lambda: decode_records(buf, validate_crc=False, max_decompressed_bytes=SMALL_LIMIT),
    ):
        with contextlib.suppress(RecordError):
            call()
    assert time.monotonic() - started < MAX_SECONDS_PER_INPUT


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_record_errors(buf: bytes) -> None:
    read_everything(buf)


@FUZZ
@given(st.binary(min_size=0, max_size=300), st.integers(0, 4), st.integers(0, 2**31 - 1))
def test_random_records_section_behind_a_valid_header(
    section: bytes, codec: int, count: int
) -> None:
    # A correct header and CRC around garbage: the deepest path for random input.
    raw = bytearray(build([(None, b"v", [], 0)], Compression.NONE)[:BATCH_HEADER_SIZE] + section)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">h", raw, 21, codec)
    struct.pack_into(">i", raw, 57, count)
    read_everything(reseal(raw))


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    raw = bytearray(build(draw(record_inputs), draw(codecs)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "splice", "set_int", "insert"]))
        if not raw:
            break
        at = draw(st.integers(0, len(raw) - 1))
        if kind == "flip":
            raw[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del raw[at:]
        elif kind == "splice":
            end = draw(st.integers(at, len(raw)))
            raw[at:end] = draw(st.binary(max_size=16))
        elif kind == "set_int" and at + 4 <= len(raw):
            struct.pack_into(">i", raw, at, draw(st.integers(-(2**31), 2**31 - 1)))
        else:
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
    if draw(st.booleans()):
        return reseal(raw)
    return bytes(raw)


@FUZZ
@given(mutated_batches())
def test_mutated_valid_batches_raise_only_record_errors(buf: bytes) -> None:
    read_everything(buf)


@FUZZ
@given(st.lists(mutated_batches(), min_size=2, max_size=3))
def test_spliced_sequences_of_batches_raise_only_record_errors(bufs: list[bytes]) -> None:
    read_everything(b"".join(bufs))


@ROUND_TRIP
@given(record_inputs, codecs, st.integers(0, 2**40))
def test_build_then_decode_round_trips(
    inputs: list[tuple[bytes | None, bytes | None, list[Header], int]],
    compression: Compression,
    base_offset: int,
) -> None:
    raw = build(inputs, compression, base_offset)
    header = validate_batch(raw)
    assert header.size_in_bytes == len(raw)
    assert header.records_count == len(inputs)
    assert header.max_timestamp == max(ts for *_, ts in inputs)
    assert header.next_offset == base_offset + len(inputs)
    expected = [
        Record(base_offset + i, ts, key, value, tuple(hdrs))
        for i, (key, value, hdrs, ts) in enumerate(inputs)
    ]
    assert decode_records(raw) == expected


@ROUND_TRIP
@given(st.lists(st.tuples(record_inputs, codecs), min_size=1, max_size=4), st.integers(0, 200))
def test_iter_batches_finds_every_whole_batch_and_stops_at_a_cut(
    batches: list[tuple[list[tuple[bytes | None, bytes | None, list[Header], int]], Compression]],
    cut_back: int,
) -> None:
    raws = [build(inputs, codec) for inputs, codec in batches]
    buf = b"".join(raws)
    cut = max(0, len(buf) - cut_back)
    starts, pos = [], 0
    for raw in raws:
        if pos + len(raw) <= cut:
            starts.append(pos)
        pos += len(raw)
    assert [p for _, p in iter_batches(buf[:cut])] == starts
    assert [h.records_count for h in validate_batches(buf)] == [len(i) for i, _ in batches]


def _naive_zigzag(value: int, bits: int) -> bytes:
    unsigned = (value << 1) if value >= 0 else ((-value) << 1) - 1
    out = []
    while True:
        out.append(unsigned & 0x7F)
        unsigned >>= 7
        if not unsigned:
            break
    return bytes([b | 0x80 for b in out[:-1]] + out[-1:])


@settings(max_examples=300)
@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_varints_match_a_naive_reference(small: int, large: int) -> None:
    out = bytearray()
    write_varint(small, out)
    assert bytes(out) == _naive_zigzag(small, 32)
    assert read_varint(bytes(out), 0, len(out)) == (small, len(out))
    out = bytearray()
    write_varlong(large, out)
    assert bytes(out) == _naive_zigzag(large, 64)
    assert read_varlong(bytes(out), 0, len(out)) == (large, len(out))
