"""Codecs: framing Kafka clients expect, bounded decompression, malformed input."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c

from raftlog.records import (
    BATCH_HEADER_SIZE,
    BatchBuilder,
    Compression,
    CorruptRecordError,
    DecompressionLimitError,
    decode_records,
    validate_batch,
)
from raftlog.records.compression import compress, decompress

T0 = 1_700_000_000_000
COMPRESSED = [c for c in Compression if c is not Compression.NONE]


def batch_around(section: bytes, compression: Compression, count: int = 1) -> bytes:
    """A valid header (right length and CRC) around an arbitrary records section."""
    builder = BatchBuilder(compression=Compression.NONE)
    builder.append(b"a", timestamp_ms=T0)
    raw = bytearray(builder.build()[:BATCH_HEADER_SIZE] + section)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">h", raw, 21, int(compression))
    struct.pack_into(">i", raw, 57, count)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def one_record_section() -> bytes:
    builder = BatchBuilder()
    builder.append(b"payload", key=b"k", timestamp_ms=T0)
    return builder.build()[BATCH_HEADER_SIZE:]


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_codec_round_trip(codec: Compression) -> None:
    data = b"".join(b"record %d;" % i for i in range(5000))
    assert decompress(codec, compress(codec, data), limit=len(data)) == data


def test_framings_are_what_kafka_clients_write() -> None:
    data = b"abc" * 1000
    assert gzip.decompress(compress(Compression.GZIP, data)) == data
    assert zstandard.ZstdDecompressor().decompress(compress(Compression.ZSTD, data)) == data
    assert lz4.frame.decompress(compress(Compression.LZ4, data)) == data
    # xerial SnappyOutputStream: magic, version 1, compatible 1, then length-prefixed blocks.
    framed = compress(Compression.SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (length,) = struct.unpack_from(">i", framed, 16)
    assert bytes(cramjam.snappy.decompress_raw(framed[20 : 20 + length])) == data


def test_raw_snappy_and_multi_member_streams_are_accepted() -> None:
    section = one_record_section()
    raw_snappy = bytes(cramjam.snappy.compress_raw(section))
    assert decode_records(batch_around(raw_snappy, Compression.SNAPPY))[0].value == b"payload"
    # Two gzip members / two zstd frames are one stream.
    two = BatchBuilder()
    two.append(b"a", timestamp_ms=T0)
    two.append(b"b", timestamp_ms=T0)
    records = two.build()[BATCH_HEADER_SIZE:]
    half = records[: len(records) // 2], records[len(records) // 2 :]
    for codec, enc in (
        (Compression.GZIP, lambda b: gzip.compress(b)),
        (Compression.ZSTD, lambda b: zstandard.ZstdCompressor().compress(b)),
        (Compression.LZ4, lambda b: lz4.frame.compress(b)),
    ):
        stream = enc(half[0]) + enc(half[1])
        assert [r.value for r in decode_records(batch_around(stream, codec, 2))] == [b"a", b"b"]


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_decompression_bomb_raises_limit_error(codec: Compression) -> None:
    bomb = compress(codec, b"\x00" * (8 * 1024 * 1024))
    assert len(bomb) < 500_000
    raw = batch_around(bomb, codec)
    validate_batch(raw)  # the hot path never looks inside
    with pytest.raises(DecompressionLimitError):
        decode_records(raw, max_decompressed_bytes=1024 * 1024)


def test_zstd_bomb_memory_stays_bounded() -> None:
    # 1 GiB of zeros in a ~40 KB frame: decoding must stop near the limit, not inflate it all.
    compressor = zstandard.ZstdCompressor(level=1)
    chunk = b"\x00" * (1 << 20)
    writer = compressor.compressobj()
    bomb = b"".join(writer.compress(chunk) for _ in range(1024)) + writer.flush()
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.ZSTD, bomb, limit=4 * 1024 * 1024)


def test_limit_is_inclusive() -> None:
    data = b"y" * 1000
    for codec in Compression:
        assert decompress(codec, compress(codec, data), limit=1000) == data
        if codec is not Compression.NONE:
            with pytest.raises(DecompressionLimitError):
                decompress(codec, compress(codec, data), limit=999)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_truncated_or_garbage_compressed_data_is_corrupt(codec: Compression) -> None:
    stream = compress(codec, one_record_section() * 3)
    for bad in (stream[: len(stream) // 2], stream[:-1], b"\x00" * 40, b"", stream + b"junk!"):
        if codec is Compression.SNAPPY and bad == b"":
            # an empty raw snappy block is a valid empty stream; the count check catches it
            with pytest.raises(CorruptRecordError):
                decode_records(batch_around(bad, codec))
            continue
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad, limit=1 << 20)


def test_gzip_corrupt_deflate_is_typed() -> None:
    stream = bytearray(gzip.compress(b"hello" * 100))
    stream[15] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decompress(Compression.GZIP, bytes(stream), limit=1 << 20)
    assert zlib  # stdlib codec: no dependency


def test_xerial_snappy_bad_block_length_is_corrupt() -> None:
    framed = bytearray(compress(Compression.SNAPPY, b"z" * 100))
    struct.pack_into(">i", framed, 16, 10_000)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, bytes(framed), limit=1 << 20)
    struct.pack_into(">i", framed, 16, -1)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, bytes(framed), limit=1 << 20)
