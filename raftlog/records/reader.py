"""Reading the records out of a v2 batch."""

from __future__ import annotations

from .batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Buffer,
    TimestampType,
    parse_header,
    validate_batch,
)
from .compression import decompress
from .errors import RecordCountMismatchError, TruncatedBatchError
from .record import Record, decode_record

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
# The smallest possible record: length, attributes, timestampDelta,
# offsetDelta, keyLength, valueLength, headersCount -- one byte each.
_MIN_RECORD_SIZE = 7


def decode_records(
    batch: Buffer,
    *,
    pos: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    validate_crc: bool = True,
) -> list[Record]:
    """Decode every record of the batch at ``batch[pos:]``, with absolute offsets.

    Offsets are baseOffset + offsetDelta. Timestamps are baseTimestamp +
    timestampDelta, except in LOG_APPEND_TIME batches, where every record
    takes the batch's maxTimestamp (Kafka ``DefaultRecordBatch``). Bytes
    after the batch are ignored. Control batches decode like any other; see
    ``parse_control_record_key`` for their keys.

    Raises TruncatedBatchError, InvalidMagicError, CrcMismatchError (unless
    ``validate_crc`` is False), UnsupportedCompressionError,
    DecompressionLimitError (records section would exceed
    ``max_decompressed_bytes``), VarintError, CorruptRecordError for a
    malformed record, and RecordCountMismatchError when recordsCount
    disagrees with the records present (too few, or bytes left over).
    """
    header = validate_batch(batch, pos) if validate_crc else _parse_whole(batch, pos)
    view = memoryview(batch)
    section = view[pos + BATCH_HEADER_SIZE : pos + header.size_in_bytes]
    data = decompress(header.compression, section, limit=max_decompressed_bytes)
    return _decode_section(data, header)


def _parse_whole(batch: Buffer, pos: int) -> BatchHeader:
    header = parse_header(batch, pos)
    available = len(memoryview(batch)) - pos
    if available < header.size_in_bytes:
        raise TruncatedBatchError(
            f"batch at {pos} needs {header.size_in_bytes} bytes, buffer has {available}",
            pos=pos,
            needed=header.size_in_bytes,
            available=available,
        )
    return header


def _decode_section(data: bytes, header: BatchHeader) -> list[Record]:
    count = header.records_count
    if count < 0 or count * _MIN_RECORD_SIZE > len(data):
        raise RecordCountMismatchError(
            f"batch at baseOffset {header.base_offset}: recordsCount {count} cannot fit "
            f"in a {len(data)}-byte records section"
        )
    override = (
        header.max_timestamp if header.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    )
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        if pos >= len(data):
            raise RecordCountMismatchError(
                f"batch at baseOffset {header.base_offset}: recordsCount {count} but only "
                f"{len(records)} records present",
                pos=pos,
            )
        record, pos = decode_record(
            data,
            pos,
            base_offset=header.base_offset,
            base_timestamp=header.base_timestamp,
            timestamp_override=override,
        )
        records.append(record)
    if pos != len(data):
        raise RecordCountMismatchError(
            f"batch at baseOffset {header.base_offset}: {len(data) - pos} bytes left after "
            f"recordsCount {count} records",
            pos=pos,
        )
    return records
