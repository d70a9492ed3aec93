"""Interoperability: batches from code no one here wrote decode with ours, and ours with theirs.

kafka-python (``kafka.record``) implements RecordBatch v2 with gzip, lz4 and
zstd; kio (``kio.records``) implements it uncompressed. Both are installed
as dev dependencies.
"""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch
from kio.records.schema import Record as KioRecord
from kio.records.schema import RecordHeader as KioHeader
from kio.records.writers import write_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from raftlog.records import (
    BatchBuilder,
    Compression,
    ControlRecordType,
    Header,
    Record,
    build_control_batch,
    decode_records,
    iter_batches,
    validate_batch,
    validate_batches,
)

T0 = 1_700_000_000_000  # a whole second: kio reads timestamps at 1 s resolution

# kafka-python codec ids equal Kafka's, and so ours.
KAFKA_PYTHON_CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]


def sample_records(count: int, base_offset: int = 0) -> list[Record]:
    """Keys, null keys, null values, empty values and headers, mixed."""
    records = []
    for i in range(count):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else (b"" if i % 11 == 4 else b"value-%d-" % i * (i % 13 + 20))
        headers = tuple(
            Header(f"h{j}", None if (i + j) % 4 == 0 else b"hv%d" % j) for j in range(i % 3)
        )
        records.append(Record(base_offset + i, T0 + 1000 * (i % 4), key, value, headers))
    return records


def ours(records: list[Record], compression: Compression, **kwargs: Any) -> bytes:
    builder = BatchBuilder(compression=compression, base_offset=records[0].offset, **kwargs)
    for r in records:
        builder.append(r.value, key=r.key, headers=r.headers, timestamp_ms=r.timestamp)
    return builder.build()


def kafka_python_batch(records: list[Record], compression: Compression) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for r in records:
        headers = [(h.key, h.value) for h in r.headers]
        builder.append(r.offset - records[0].offset, r.timestamp, r.key, r.value, headers)
    return bytes(builder.build())


def from_kafka_python(raw: bytes) -> list[Record]:
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    return [
        Record(
            r.offset,
            r.timestamp,
            r.key,
            r.value,
            tuple(Header(k, None if v is None else bytes(v)) for k, v in r.headers),
        )
        for r in batch
    ]


# ---- kafka-python ---------------------------------------------------------


@pytest.mark.parametrize("compression", KAFKA_PYTHON_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("count", [1, 250])
def test_kafka_python_batches_decode_with_ours(compression: Compression, count: int) -> None:
    records = sample_records(count)
    raw = kafka_python_batch(records, compression)
    header = validate_batch(raw)
    assert header.compression is compression
    assert header.records_count == count and header.last_offset_delta == count - 1
    assert decode_records(raw) == records


@pytest.mark.parametrize("compression", KAFKA_PYTHON_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("count", [1, 250])
def test_our_batches_decode_with_kafka_python(compression: Compression, count: int) -> None:
    records = sample_records(count, base_offset=500)
    raw = ours(records, compression, partition_leader_epoch=4)
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.compression_type == compression
    assert (batch.base_offset, batch.leader_epoch, batch.records_count) == (500, 4, count)
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert from_kafka_python(raw) == records


def test_kafka_python_reads_our_batches_back_to_back_after_offset_rewrite() -> None:
    from raftlog.records import rewrite_base_offset_and_epoch

    # A leader appends batches that all start at offset 0, then re-offsets them in place.
    buf = bytearray()
    for i, compression in enumerate(KAFKA_PYTHON_CODECS):
        start = len(buf)
        buf += ours(sample_records(10), compression)
        rewrite_base_offset_and_epoch(buf, start, 10 * i, 7)
    assert len(validate_batches(buf)) == 4
    offsets = []
    memory = MemoryRecords(bytes(buf))
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc() and batch.leader_epoch == 7
        offsets.extend(r.offset for r in batch)
    assert offsets == list(range(40))
    assert [h.base_offset for h, _ in iter_batches(buf)] == [0, 10, 20, 30]


def test_kafka_python_sees_our_control_batch_as_control() -> None:
    raw = build_control_batch(
        ControlRecordType.COMMIT,
        b"\x00\x00\x00\x00\x00\x05",
        timestamp_ms=T0,
        producer_id=9,
        producer_epoch=0,
    )
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert (record.version, record.type, record.commit) == (0, 1, True)


def test_kafka_python_rejects_our_batch_with_flipped_bit_as_we_do() -> None:
    raw = bytearray(ours(sample_records(3), Compression.NONE))
    raw[-2] ^= 0x08
    assert not DefaultRecordBatch(bytearray(raw)).validate_crc()
    from raftlog.records import CrcMismatchError

    with pytest.raises(CrcMismatchError):
        validate_batch(raw)


# ---- kio ------------------------------------------------------------------


def _kio_ts(ms: int) -> TZAwareMicros:
    return TZAwareMicros.parse(datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))


def kio_batch(records: list[Record]) -> bytes:
    new = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        partition_leader_epoch=i32(3),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=tuple(
            KioRecord(
                attributes=i8(0),
                timestamp=_kio_ts(r.timestamp),
                offset=i64(r.offset),
                key=r.key,
                value=r.value,
                headers=tuple(KioHeader(key=h.key.encode(), value=h.value) for h in r.headers),
            )
            for r in records
        ),
    )
    out = io.BytesIO()
    write_batch(out, new)
    return out.getvalue()


@pytest.mark.parametrize("count", [1, 100])
def test_kio_batches_decode_with_ours(count: int) -> None:
    records = sample_records(count, base_offset=1234)
    raw = kio_batch(records)
    header = validate_batch(raw)
    assert (header.base_offset, header.partition_leader_epoch, header.records_count) == (
        1234,
        3,
        count,
    )
    assert decode_records(raw) == records


@pytest.mark.parametrize("count", [1, 100])
def test_our_batches_decode_with_kio(count: int) -> None:
    records = sample_records(count, base_offset=77)
    raw = ours(records, Compression.NONE, producer_id=5, producer_epoch=1, base_sequence=10)
    batch, size = read_batch(raw, 0)
    assert size == len(raw)
    assert (batch.base_offset, batch.producer_id, batch.base_sequence) == (77, 5, 10)
    assert batch.crc == validate_batch(raw).crc
    decoded = [
        Record(
            r.offset,
            int(r.timestamp.timestamp() * 1000),
            r.key,
            r.value,
            tuple(Header(h.key.decode() if h.key else "", h.value) for h in r.headers),
        )
        for r in batch.records
    ]
    assert decoded == records


def test_our_bytes_equal_kio_bytes_for_the_same_records() -> None:
    # Byte-for-byte: two independent writers agree on every field and varint.
    records = sample_records(30, base_offset=0)
    ours_raw = bytearray(ours(records, Compression.NONE))
    kio_raw = kio_batch(records)
    from raftlog.records import rewrite_base_offset_and_epoch

    rewrite_base_offset_and_epoch(ours_raw, 0, 0, 3)  # kio's batch carries epoch 3
    assert bytes(ours_raw) == kio_raw


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD], ids=lambda c: c.name)
def test_our_bytes_equal_kafka_python_bytes(compression: Compression) -> None:
    # kafka-python's builder writes partitionLeaderEpoch 0 where ours writes
    # -1 (NO_PARTITION_LEADER_EPOCH, like Kafka's Java producer); that field is
    # outside the CRC, so align it and compare every byte.
    records = sample_records(30)
    mine = bytearray(ours(records, compression))
    theirs = kafka_python_batch(records, compression)
    assert mine[12:16] == b"\xff\xff\xff\xff" and theirs[12:16] == b"\x00\x00\x00\x00"
    mine[12:16] = theirs[12:16]
    assert bytes(mine) == theirs
