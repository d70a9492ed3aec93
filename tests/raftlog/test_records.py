"""Unit tests for raftlog.records: the v2 batch format, hot path and builder/reader."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from crc32c import crc32c

from raftlog.records import (
    BATCH_HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchBuilder,
    Compression,
    ControlRecordType,
    CorruptRecordError,
    CrcMismatchError,
    DecompressionLimitError,
    Header,
    InvalidMagicError,
    Record,
    RecordCountMismatchError,
    RecordError,
    TimestampType,
    TruncatedBatchError,
    UnsupportedCompressionError,
    VarintError,
    build_control_batch,
    control_record_key,
    decode_records,
    iter_batches,
    parse_control_record_key,
    parse_header,
    rewrite_base_offset_and_epoch,
    validate_batch,
    validate_batches,
)
from raftlog.records.varint import read_varint, read_varlong, write_varint, write_varlong

T0 = 1_700_000_000_000


def build(
    values: list[bytes | None],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    **kwargs: object,
) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, compression=compression, **kwargs)  # type: ignore[arg-type]
    for i, value in enumerate(values):
        builder.append(value, key=b"k%d" % i, timestamp_ms=T0 + i)
    return builder.build()


def reseal(batch: bytearray) -> bytes:
    """Recompute the CRC after editing a batch, so only the edit is wrong."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


# ---- header layout -------------------------------------------------------


def test_header_is_61_bytes_and_fields_sit_where_kafka_puts_them() -> None:
    builder = BatchBuilder(
        base_offset=100,
        partition_leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        is_transactional=True,
    )
    builder.append(b"a", timestamp_ms=T0 + 5)
    builder.append(b"b", timestamp_ms=T0)
    raw = builder.build()
    (
        base_offset,
        length,
        epoch,
        magic,
        crc,
        attrs,
        lod,
        base_ts,
        max_ts,
        pid,
        pepoch,
        seq,
        count,
    ) = struct.unpack_from(">qiibIhiqqqhii", raw)
    assert BATCH_HEADER_SIZE == 61
    assert (base_offset, epoch, magic, attrs, lod, pid, pepoch, seq, count) == (
        100,
        7,
        2,
        0x10,
        1,
        42,
        3,
        9,
        2,
    )
    assert length == len(raw) - 12
    assert (base_ts, max_ts) == (T0 + 5, T0 + 5)
    assert crc == crc32c(raw[21:])

    header = validate_batch(raw)
    assert header.crc == crc and header.batch_length == length
    assert header.is_transactional and not header.is_control
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert (header.last_offset, header.next_offset, header.size_in_bytes) == (101, 102, len(raw))


def test_defaults_are_kafkas_no_producer_values() -> None:
    header = parse_header(build([b"x"]))
    assert header.producer_id == NO_PRODUCER_ID == -1
    assert header.base_sequence == NO_SEQUENCE == -1
    assert header.partition_leader_epoch == NO_PARTITION_LEADER_EPOCH == -1
    assert header.producer_epoch == -1


@pytest.mark.parametrize("compression", list(Compression))
def test_compression_lives_in_attribute_bits_0_to_2_and_covers_records_only(
    compression: Compression,
) -> None:
    values: list[bytes | None] = [b"value-%d" % i * 20 for i in range(50)]
    raw = build(values, compression=compression)
    header = validate_batch(raw)
    assert header.attributes & 0x07 == compression
    assert header.compression is compression
    assert header.records_count == 50
    records = decode_records(raw)
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(50))


# ---- builder / reader round trip ----------------------------------------


def test_round_trip_keys_nulls_headers_and_offsets() -> None:
    builder = BatchBuilder(base_offset=1000)
    builder.append(b"v0", key=b"k0", headers=[Header("h", b"1"), ("n", None)], timestamp_ms=T0)
    builder.append(None, key=None, timestamp_ms=T0 - 10)
    builder.append(b"", key=b"", headers=[("ünï", b"")], timestamp_ms=T0 + 10)
    assert len(builder) == 3
    raw = builder.build()
    assert builder.estimated_size_bytes == len(raw)
    assert decode_records(raw) == [
        Record(1000, T0, b"k0", b"v0", (Header("h", b"1"), Header("n", None))),
        Record(1001, T0 - 10, None, None),
        Record(1002, T0 + 10, b"", b"", (Header("ünï", b""),)),
    ]
    header = validate_batch(raw)
    assert header.base_timestamp == T0 and header.max_timestamp == T0 + 10


def test_log_append_time_records_take_the_batch_max_timestamp() -> None:
    builder = BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time_ms=T0 + 99)
    builder.append(b"a", timestamp_ms=T0)
    builder.append(b"b", timestamp_ms=T0 + 1)
    raw = builder.build()
    header = validate_batch(raw)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == T0 + 99
    assert [r.timestamp for r in decode_records(raw)] == [T0 + 99, T0 + 99]


def test_estimated_size_grows_with_appends_so_callers_can_cap_batches() -> None:
    builder = BatchBuilder()
    assert builder.estimated_size_bytes == BATCH_HEADER_SIZE
    builder.append(b"x" * 100, timestamp_ms=T0)
    first = builder.estimated_size_bytes
    builder.append(b"x" * 100, timestamp_ms=T0)
    assert BATCH_HEADER_SIZE + 100 < first < builder.estimated_size_bytes


def test_builder_rejects_misuse() -> None:
    with pytest.raises(ValueError, match="no records"):
        BatchBuilder().build()
    with pytest.raises(TypeError):
        BatchBuilder().append("text", timestamp_ms=T0)  # type: ignore[arg-type]
    builder = BatchBuilder()
    builder.append(b"a", timestamp_ms=0)
    with pytest.raises(ValueError):
        builder.append(b"b", timestamp_ms=2**63 - 1 + 1)
    too_far = BatchBuilder(base_offset=2**63)
    too_far.append(b"a", timestamp_ms=0)
    with pytest.raises(ValueError, match="out of range"):
        too_far.build()


def test_decode_with_pos_ignores_surrounding_bytes() -> None:
    first, second = build([b"a"], base_offset=0), build([b"b", b"c"], base_offset=1)
    buf = first + second + b"\x00garbage"
    assert [r.value for r in decode_records(buf, pos=len(first))] == [b"b", b"c"]


# ---- control batches -----------------------------------------------------


def test_control_batch_is_flagged_and_its_key_is_version_then_type() -> None:
    raw = build_control_batch(
        ControlRecordType.LEADER_CHANGE,
        b"payload",
        timestamp_ms=T0,
        base_offset=8,
        partition_leader_epoch=3,
    )
    header = validate_batch(raw)
    assert header.is_control and header.attributes & 0x20
    assert not header.is_transactional
    (record,) = decode_records(raw)
    assert (
        record.key
        == struct.pack(">hh", 0, 2)
        == control_record_key(ControlRecordType.LEADER_CHANGE)
    )
    assert record.value == b"payload" and record.offset == 8
    assert parse_control_record_key(record.key) == (0, ControlRecordType.LEADER_CHANGE)


def test_commit_and_abort_markers_are_transactional() -> None:
    for kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raw = build_control_batch(
            kind, struct.pack(">hi", 0, 5), timestamp_ms=T0, producer_id=77, producer_epoch=1
        )
        header = validate_batch(raw)
        assert header.is_control and header.is_transactional and header.producer_id == 77


def test_parse_control_record_key_rejects_bad_keys() -> None:
    for key in (None, b"", b"\x00\x00\x00"):
        with pytest.raises(CorruptRecordError):
            parse_control_record_key(key)
    with pytest.raises(CorruptRecordError, match="unknown control record type"):
        parse_control_record_key(struct.pack(">hh", 0, 99))
    # Later key versions may append fields; only the first 4 bytes count.
    assert parse_control_record_key(struct.pack(">hhi", 1, 0, 7)) == (1, ControlRecordType.ABORT)


# ---- hot path ------------------------------------------------------------


def test_rewrite_base_offset_and_epoch_keeps_crc_valid() -> None:
    raw = build([b"a", b"b", b"c"])
    buf = bytearray(b"\xff" * 5 + raw)
    rewrite_base_offset_and_epoch(buf, 5, 12345, 9)
    header = validate_batch(buf, 5)
    assert (header.base_offset, header.partition_leader_epoch) == (12345, 9)
    assert header.crc == parse_header(raw).crc
    assert [r.offset for r in decode_records(buf, pos=5)] == [12345, 12346, 12347]
    # through a memoryview too
    view = memoryview(buf)
    rewrite_base_offset_and_epoch(view, 5, 1, 2)
    assert validate_batch(buf, 5).base_offset == 1


def test_rewrite_rejects_read_only_short_or_out_of_range() -> None:
    raw = build([b"a"])
    with pytest.raises(ValueError):
        rewrite_base_offset_and_epoch(memoryview(raw), 0, 1, 1)
    with pytest.raises(TruncatedBatchError):
        rewrite_base_offset_and_epoch(bytearray(10), 0, 1, 1)
    with pytest.raises(ValueError):
        rewrite_base_offset_and_epoch(bytearray(raw), 0, 2**63, 1)
    with pytest.raises(ValueError):
        rewrite_base_offset_and_epoch(bytearray(raw), 0, 1, 2**31)


def test_validate_batch_does_not_decompress() -> None:
    # A zstd batch whose records section is garbage still passes the header+CRC
    # check (the leader never decompresses), but decode_records refuses it.
    good = bytearray(build([b"x" * 100], compression=Compression.ZSTD))
    good[BATCH_HEADER_SIZE:] = b"\x00" * (len(good) - BATCH_HEADER_SIZE)
    bad = reseal(good)
    assert validate_batch(bad).compression is Compression.ZSTD
    with pytest.raises(CorruptRecordError):
        decode_records(bad)


def test_validate_batches_accepts_back_to_back_batches() -> None:
    batches = [
        build([b"a"], base_offset=0),
        build([b"b", b"c"], base_offset=1),
        build([b"d"], base_offset=3, compression=Compression.GZIP),
    ]
    headers = validate_batches(b"".join(batches))
    assert [h.base_offset for h in headers] == [0, 1, 3]
    assert validate_batches(b"") == []


def test_validate_batches_rejects_partial_tail_and_garbage() -> None:
    whole = build([b"a"]) + build([b"b"])
    with pytest.raises(TruncatedBatchError) as info:
        validate_batches(whole[:-1])
    assert info.value.pos == len(build([b"a"]))
    with pytest.raises(TruncatedBatchError):
        validate_batches(whole + b"\x00\x00\x00")


def test_iter_batches_stops_silently_at_a_partial_tail() -> None:
    batches = [build([b"a"], base_offset=0), build([b"b", b"c"], base_offset=1)]
    buf = b"".join(batches)
    full = list(iter_batches(buf))
    assert [(h.base_offset, p) for h, p in full] == [(0, 0), (1, len(batches[0]))]
    for cut in range(len(batches[0]), len(buf)):
        got = list(iter_batches(buf[:cut]))
        assert [h.base_offset for h, _ in got] == [0]
    assert list(iter_batches(b"")) == []
    assert [h.base_offset for h, _ in iter_batches(buf, len(batches[0]))] == [1]


def test_iter_batches_raises_on_bad_crc_unless_told_not_to() -> None:
    raw = bytearray(build([b"a", b"b"]))
    raw[-1] ^= 0x01
    with pytest.raises(CrcMismatchError) as info:
        list(iter_batches(bytes(raw)))
    assert info.value.pos == 0 and info.value.stored != info.value.computed
    assert [h.records_count for h, _ in iter_batches(bytes(raw), validate_crc=False)] == [2]


def test_iter_batches_raises_on_bad_length_or_magic_even_if_batch_is_partial() -> None:
    raw = bytearray(build([b"a"]))
    raw[16] = 1
    with pytest.raises(InvalidMagicError) as info:
        list(iter_batches(bytes(raw[:20])))
    assert info.value.magic == 1
    short = bytearray(build([b"a"]))
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(CorruptRecordError, match="batchLength 10"):
        list(iter_batches(bytes(short[:12])))


# ---- bad input: header level ---------------------------------------------


def test_parse_header_errors() -> None:
    raw = build([b"a"])
    with pytest.raises(TruncatedBatchError) as info:
        parse_header(raw[:60])
    assert (info.value.needed, info.value.available) == (61, 60)
    with pytest.raises(TruncatedBatchError):
        parse_header(raw, -1)
    bad_magic = bytearray(raw)
    bad_magic[16] = 0
    with pytest.raises(InvalidMagicError):
        parse_header(bad_magic)
    for length in (-1, 0, 48):
        bad_len = bytearray(raw)
        struct.pack_into(">i", bad_len, 8, length)
        with pytest.raises(CorruptRecordError):
            parse_header(bad_len)
    # the header alone is enough for parse_header, not for validate_batch
    assert parse_header(raw[:61]).records_count == 1
    with pytest.raises(TruncatedBatchError):
        validate_batch(raw[:61])


def test_crc_covers_attributes_to_end_but_not_offset_or_epoch() -> None:
    raw = build([b"hello"])
    for index in range(21, len(raw)):
        flipped = bytearray(raw)
        flipped[index] ^= 0x40
        with pytest.raises(CrcMismatchError):
            validate_batch(flipped)
    for index in [*range(0, 8), *range(12, 16)]:
        flipped = bytearray(raw)
        flipped[index] ^= 0x40
        validate_batch(flipped)  # outside the CRC: still valid


def test_negative_records_count_or_last_offset_delta_is_corrupt() -> None:
    for offset, value in ((57, -1), (23, -5)):
        raw = bytearray(build([b"a"]))
        struct.pack_into(">i", raw, offset, value)
        with pytest.raises(CorruptRecordError, match="negative"):
            validate_batch(reseal(raw))


def test_unknown_codec_id_raises_unsupported() -> None:
    raw = bytearray(build([b"a"]))
    struct.pack_into(">h", raw, 21, 6)
    with pytest.raises(UnsupportedCompressionError):
        decode_records(reseal(raw))


# ---- bad input: record level ---------------------------------------------


def test_records_count_too_high_or_too_low_raises_mismatch() -> None:
    for count in (3, 4, 1000, 2**31 - 1):
        raw = bytearray(build([b"a", b"b"]))
        struct.pack_into(">i", raw, 57, count)
        with pytest.raises(RecordCountMismatchError):
            decode_records(reseal(raw))
    raw = bytearray(build([b"a", b"b"]))
    struct.pack_into(">i", raw, 57, 1)
    with pytest.raises(RecordCountMismatchError, match="left after"):
        decode_records(reseal(raw))


def test_trailing_bytes_in_records_section_raise_mismatch() -> None:
    raw = bytearray(build([b"a"]))
    raw += b"\x00\x00"
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(RecordCountMismatchError):
        decode_records(reseal(raw))


def _batch_with_records_section(section: bytes, count: int = 1) -> bytes:
    raw = bytearray(build([b"a"]))[:BATCH_HEADER_SIZE] + section
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 57, count)
    return reseal(raw)


def test_over_long_varints_raise_varint_error() -> None:
    # record length as a 6-byte varint
    with pytest.raises(VarintError, match="longer than 5"):
        decode_records(_batch_with_records_section(b"\x80\x80\x80\x80\x80\x00" + b"\x00" * 10))
    # timestampDelta as an 11-byte varlong inside a record of length 20
    body = b"\x00" + b"\xff" * 10 + b"\x01" + b"\x00" * 8
    with pytest.raises(VarintError, match="longer than 10"):
        decode_records(_batch_with_records_section(bytes([len(body) * 2]) + body))


def test_negative_and_overrunning_lengths_are_corrupt() -> None:
    # record length -2 (zigzag 3)
    with pytest.raises(CorruptRecordError):
        decode_records(_batch_with_records_section(b"\x03" + b"\x00" * 10))
    # key length -2 inside a well-sized record: attrs, ts 0, offset 0, keylen -2
    body = b"\x00\x00\x00\x03\x01\x00\x00"
    with pytest.raises(CorruptRecordError, match="negative"):
        decode_records(_batch_with_records_section(bytes([len(body) * 2]) + body))
    # value length 50 but the record is shorter
    body = b"\x00\x00\x00\x01\x64\x00\x00"
    with pytest.raises(CorruptRecordError, match="runs past"):
        decode_records(_batch_with_records_section(bytes([len(body) * 2]) + body))


def test_null_header_key_and_bad_utf8_are_corrupt() -> None:
    null_key = b"\x00\x00\x00\x01\x01\x02\x01\x00"
    with pytest.raises(CorruptRecordError, match="null header key"):
        decode_records(_batch_with_records_section(bytes([len(null_key) * 2]) + null_key))
    bad_utf8 = b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_records(_batch_with_records_section(bytes([len(bad_utf8) * 2]) + bad_utf8))


def test_record_length_disagreeing_with_fields_is_corrupt() -> None:
    body = b"\x00\x00\x00\x01\x01\x00" + b"\x00"  # one spare byte inside the record
    with pytest.raises(CorruptRecordError, match="fields use"):
        decode_records(_batch_with_records_section(bytes([len(body) * 2]) + body))


def test_every_error_is_a_record_error() -> None:
    for cls in (
        CorruptRecordError,
        TruncatedBatchError,
        InvalidMagicError,
        CrcMismatchError,
        VarintError,
        RecordCountMismatchError,
        DecompressionLimitError,
        UnsupportedCompressionError,
    ):
        assert issubclass(cls, RecordError)
    for cls in (
        TruncatedBatchError,
        InvalidMagicError,
        CrcMismatchError,
        VarintError,
        RecordCountMismatchError,
    ):
        assert issubclass(cls, CorruptRecordError)


# ---- varints -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_matches_kafka_zigzag(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varint(value, out)
    assert bytes(out) == encoded
    assert read_varint(encoded, 0, len(encoded)) == (value, len(encoded))


def test_varlong_extremes_and_range_checks() -> None:
    for value in (2**63 - 1, -(2**63)):
        out = bytearray()
        write_varlong(value, out)
        assert len(out) == 10
        assert read_varlong(bytes(out), 0, len(out)) == (value, 10)
    with pytest.raises(ValueError):
        write_varint(2**31, bytearray())
    with pytest.raises(VarintError, match="does not fit"):
        read_varint(b"\xff\xff\xff\xff\x1f", 0, 5)
    with pytest.raises(VarintError, match="cut off"):
        read_varint(b"\x80\x80", 0, 2)


def test_at_offset_is_replace_of_the_base_offset_only() -> None:
    builder = BatchBuilder(producer_id=7, producer_epoch=2, base_sequence=11)
    for i in range(3):
        builder.append(b"v%d" % i, timestamp_ms=1_000 + i)
    header = parse_header(builder.build())
    moved = header.at_offset(42)
    assert moved == dataclasses.replace(header, base_offset=42)
    assert moved.base_offset == 42 and header.base_offset == 0
