"""Batches captured byte for byte from librdkafka decode exactly (see tests/fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from raftlog.records import (
    BatchBuilder,
    Compression,
    CrcMismatchError,
    Header,
    Record,
    decode_records,
    rewrite_base_offset_and_epoch,
    validate_batch,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T0 = 1_700_000_000_000

# The records tests/fixtures/capture_client_batch.py produced, written out
# independently here so a wrong capture cannot agree with itself.
EXPECTED = [
    Record(0, T0, b"key-0", b"value-0", (Header("trace-id", b"abc123"),)),
    Record(1, T0 + 1, None, b"value-1 with no key"),
    Record(2, T0 + 2, b"key-2", None, (Header("a", b"1"), Header("b", None))),
    Record(3, T0 + 5, b"key-3", b"x" * 300),
    Record(
        4,
        T0 + 3,
        b"key-4",
        "h\u00e9llo w\u00f6rld".encode(),
        (Header("\u00fcnicode", b"\xff\x00"),),
    ),
]

CODECS = {
    "none": Compression.NONE,
    "zstd": Compression.ZSTD,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
}


def load(codec: str) -> bytes:
    return (FIXTURES / f"librdkafka_{codec}.bin").read_bytes()


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batch_header_and_records(codec: str) -> None:
    raw = load(codec)
    header = validate_batch(raw)
    assert header.size_in_bytes == len(raw)
    assert header.compression is CODECS[codec]
    assert (header.records_count, header.last_offset_delta) == (5, 4)
    assert (header.base_timestamp, header.max_timestamp) == (T0, T0 + 5)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_control and not header.is_transactional
    assert decode_records(raw) == EXPECTED


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batch_survives_leader_rewrite(codec: str) -> None:
    raw = bytearray(load(codec))
    rewrite_base_offset_and_epoch(raw, 0, 1000, 12)
    assert validate_batch(raw).partition_leader_epoch == 12
    assert [r.offset for r in decode_records(raw)] == [1000, 1001, 1002, 1003, 1004]
    # and a third party still accepts the rewritten bytes
    assert DefaultRecordBatch(bytearray(raw)).validate_crc()


def test_librdkafka_batch_with_a_flipped_bit_is_rejected() -> None:
    raw = bytearray(load("zstd"))
    raw[100] ^= 0x01
    with pytest.raises(CrcMismatchError):
        validate_batch(raw)


def test_our_uncompressed_batch_equals_librdkafkas_byte_for_byte() -> None:
    # librdkafka writes partitionLeaderEpoch 0 on produce; ours writes -1
    # (Kafka's NO_PARTITION_LEADER_EPOCH) by default, so ask for 0.
    builder = BatchBuilder(partition_leader_epoch=0)
    for record in EXPECTED:
        builder.append(
            record.value, key=record.key, headers=record.headers, timestamp_ms=record.timestamp
        )
    assert builder.build() == load("none")
