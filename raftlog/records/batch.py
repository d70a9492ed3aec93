"""The 61-byte RecordBatch v2 header, its CRC, and the hot-path checks.

Layout (Kafka protocol guide, "Record Batch"; KIP-98)::

    offset  size  field
         0     8  baseOffset            -- outside the CRC
         8     4  batchLength           bytes after this field
        12     4  partitionLeaderEpoch  -- outside the CRC
        16     1  magic (= 2)
        17     4  crc                   CRC32C (Castagnoli) of bytes 21..end
        21     2  attributes            bits 0-2 codec, 3 timestamp type,
                                        4 transactional, 5 control,
                                        6 delete horizon (KIP-534)
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61     -  records (possibly compressed)

Everything here reads the header with one ``struct.unpack_from`` and checks
the CRC over a memoryview slice: no copies, no decompression, no record
parsing. That is what a leader does on produce and what recovery does on
every batch of a segment.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import Final

from crc32c import crc32c

from raftlog.values import value

from .errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidMagicError,
    TruncatedBatchError,
)

Buffer = bytes | bytearray | memoryview

BATCH_HEADER_SIZE: Final = 61
#: baseOffset + batchLength: the bytes not counted by batchLength (Kafka's LOG_OVERHEAD).
LOG_OVERHEAD: Final = 12
#: baseOffset, batchLength, partitionLeaderEpoch, magic: enough to size and classify a batch.
HEADER_SIZE_UP_TO_MAGIC: Final = 17
CURRENT_MAGIC: Final = 2

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_TIMESTAMP: Final = -1

# Byte positions within a batch.
_BATCH_LENGTH_OFFSET: Final = 8
_PARTITION_LEADER_EPOCH_OFFSET: Final = 12
_MAGIC_OFFSET: Final = 16
_CRC_OFFSET: Final = 17
#: The CRC covers attributes through the end of the batch (KIP-98), so the
#: leader may rewrite baseOffset and partitionLeaderEpoch without recomputing it.
CRC_START: Final = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
assert _HEADER.size == BATCH_HEADER_SIZE

_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_DELETE_HORIZON_BIT: Final = 0x40


class Compression(IntEnum):
    """Codec ids in attribute bits 0-2 (Kafka ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Attribute bit 3: who set the timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The ``type`` in a control record's key (Kafka ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def make_attributes(
    compression: Compression,
    timestamp_type: TimestampType,
    *,
    is_transactional: bool,
    is_control: bool,
) -> int:
    """The int16 attributes word for these flags."""
    attributes = int(compression) & _COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    return attributes


# BatchHeader has no __post_init__ on purpose: it is a parsed view built on
# the hot path, and parse_header has already checked what matters (magic,
# length). Validating in __post_init__ would double the cost of a produce.
@value
class BatchHeader:
    """Every field of a v2 batch header, as read from the wire."""

    base_offset: int
    #: Bytes after the batchLength field; >= BATCH_HEADER_SIZE - LOG_OVERHEAD.
    batch_length: int
    partition_leader_epoch: int
    magic: int
    #: Unsigned CRC32C of bytes CRC_START..end, as stored (not necessarily verified).
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    def at_offset(self, base_offset: int) -> BatchHeader:
        """This header with ``base_offset`` (the offset a log assigned):
        ``dataclasses.replace`` spelled out, which costs several times less
        (it runs once per appended batch)."""
        return BatchHeader(
            base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
            self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
            self.producer_id, self.producer_epoch, self.base_sequence, self.records_count,
        )

    @property
    def compression(self) -> Compression:
        """The codec; raises UnsupportedCompressionError for ids 5-7."""
        from .compression import codec_from_attributes

        return codec_from_attributes(self.attributes)

    @property
    def compression_id(self) -> int:
        """The raw codec id from attribute bits 0-2 (never raises)."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: baseTimestamp holds the delete horizon of a compacted batch."""
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset after this batch: ``last_offset + 1``."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        """Whole batch size on the wire: ``batch_length + 12``."""
        return self.batch_length + LOG_OVERHEAD


def _view(buf: Buffer) -> memoryview:
    view = memoryview(buf)
    if view.ndim != 1 or view.format not in ("B", "b", "c"):
        view = view.cast("B")
    return view


def _check_size_and_magic(view: memoryview, pos: int) -> int:
    """Check batchLength and magic at ``pos``; return the whole batch size.

    Needs HEADER_SIZE_UP_TO_MAGIC bytes (the caller checks).
    """
    batch_length = _INT32.unpack_from(view, pos + _BATCH_LENGTH_OFFSET)[0]
    if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at {pos}: batchLength {batch_length} is smaller than the "
            f"{BATCH_HEADER_SIZE - LOG_OVERHEAD} bytes a v2 header needs",
            pos=pos,
        )
    magic = view[pos + _MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        raise InvalidMagicError(
            f"batch at {pos}: magic {magic}, expected {CURRENT_MAGIC}", pos=pos, magic=magic
        )
    return int(batch_length) + LOG_OVERHEAD


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header of the batch at ``buf[pos:]`` without checking the CRC.

    Only the header's bytes need be present; the records may be missing, so
    storage can size a batch before reading all of it.

    Raises TruncatedBatchError if fewer than 61 bytes remain (or ``pos`` is
    negative), CorruptRecordError if batchLength is too small for a header,
    InvalidMagicError if magic is not 2.
    """
    view = _view(buf)
    available = len(view) - pos
    if pos < 0 or available < BATCH_HEADER_SIZE:
        raise TruncatedBatchError(
            f"batch header at {pos} needs {BATCH_HEADER_SIZE} bytes, buffer has {max(available, 0)}",
            pos=pos,
            needed=BATCH_HEADER_SIZE,
            available=max(available, 0),
        )
    _check_size_and_magic(view, pos)
    return BatchHeader(*_HEADER.unpack_from(view, pos))


def _check_crc(view: memoryview, pos: int, header: BatchHeader) -> None:
    computed = crc32c(view[pos + CRC_START : pos + header.size_in_bytes])
    if computed != header.crc:
        raise CrcMismatchError(
            f"batch at {pos} (baseOffset {header.base_offset}): stored CRC "
            f"{header.crc:#010x}, computed {computed:#010x}",
            pos=pos,
            stored=header.crc,
            computed=computed,
        )


def _check_counts(pos: int, header: BatchHeader) -> None:
    # Never produced by a correct writer, and they would make next_offset lie.
    if header.records_count < 0:
        raise CorruptRecordError(
            f"batch at {pos}: negative recordsCount {header.records_count}", pos=pos
        )
    if header.last_offset_delta < 0 and header.records_count > 0:
        raise CorruptRecordError(
            f"batch at {pos}: negative lastOffsetDelta {header.last_offset_delta}", pos=pos
        )


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check the whole batch at ``buf[pos:]``: header, length, counts and CRC32C.

    Does not decompress or parse records. Bytes after the batch are ignored.

    Raises TruncatedBatchError if the buffer ends before the batch does,
    CorruptRecordError for a bad length or negative counts,
    InvalidMagicError, CrcMismatchError.
    """
    view = _view(buf)
    header = parse_header(view, pos)
    available = len(view) - pos
    if available < header.size_in_bytes:
        raise TruncatedBatchError(
            f"batch at {pos} (baseOffset {header.base_offset}) needs "
            f"{header.size_in_bytes} bytes, buffer has {available}",
            pos=pos,
            needed=header.size_in_bytes,
            available=available,
        )
    _check_counts(pos, header)
    _check_crc(view, pos, header)
    return header


def validate_batches(buf: Buffer) -> list[BatchHeader]:
    """Check that ``buf`` is whole, valid batches end to end (the produce path).

    Returns their headers in order ([] for an empty buffer). A partial batch
    at the end raises TruncatedBatchError; any other defect raises as
    validate_batch does, with ``pos`` relative to ``buf``.
    """
    view = _view(buf)
    headers: list[BatchHeader] = []
    pos = 0
    end = len(view)
    while pos < end:
        header = validate_batch(view, pos)
        headers.append(header)
        pos += header.size_in_bytes
    return headers


def iter_batches(
    buf: Buffer, pos: int = 0, *, validate_crc: bool = True
) -> Iterator[tuple[BatchHeader, int]]:
    """Yield ``(header, start position)`` for each whole batch from ``pos``.

    Stops silently at a partial batch at the end of the buffer, as Kafka's
    fetch path does (a fetch response may cut the last batch; recovery stops
    at a torn tail). The caller learns where the whole batches end from the
    last yielded ``start + header.size_in_bytes``.

    Raises, at the first bad batch: CorruptRecordError (batchLength too
    small, negative counts), InvalidMagicError, or CrcMismatchError (unless
    ``validate_crc`` is False). Like Kafka's ``ByteBufferLogInputStream``,
    the length and magic are checked as soon as their bytes are present,
    even if the rest of the batch is not.
    """
    view = _view(buf)
    end = len(view)
    while True:
        available = end - pos
        if available < LOG_OVERHEAD:
            return
        length = _INT32.unpack_from(view, pos + _BATCH_LENGTH_OFFSET)[0]
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"batch at {pos}: batchLength {length} is smaller than the "
                f"{BATCH_HEADER_SIZE - LOG_OVERHEAD} bytes a v2 header needs",
                pos=pos,
            )
        if available < HEADER_SIZE_UP_TO_MAGIC:
            return
        size = _check_size_and_magic(view, pos)
        if available < size:
            return
        header = BatchHeader(*_HEADER.unpack_from(view, pos))
        _check_counts(pos, header)
        if validate_crc:
            _check_crc(view, pos, header)
        yield header, pos
        pos += size


def rewrite_base_offset_and_epoch(
    buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Set baseOffset and partitionLeaderEpoch of the batch at ``buf[pos:]`` in place.

    Both fields lie outside the CRC (KIP-98), so the batch stays valid and
    nothing is recompressed: this is how a leader assigns offsets.

    Raises TruncatedBatchError if the buffer cannot hold the fields, and
    ValueError if a value is outside int64 / int32 or ``buf`` is read-only.
    """
    view = _view(buf)
    if view.readonly:
        raise ValueError("rewrite_base_offset_and_epoch needs a writable buffer")
    if pos < 0 or len(view) - pos < HEADER_SIZE_UP_TO_MAGIC:
        raise TruncatedBatchError(
            f"batch at {pos}: buffer too short to rewrite baseOffset/partitionLeaderEpoch",
            pos=pos,
            needed=HEADER_SIZE_UP_TO_MAGIC,
            available=max(len(view) - pos, 0),
        )
    try:
        _INT64.pack_into(view, pos, base_offset)
        _INT32.pack_into(view, pos + _PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    except struct.error as exc:
        raise ValueError(
            f"baseOffset {base_offset} / partitionLeaderEpoch {partition_leader_epoch} out of range"
        ) from exc


_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_OFFSET: Final = 21
_MAX_TIMESTAMP_OFFSET: Final = 35


def stamp_log_append_time(
    head: bytearray | memoryview, now_ms: int, body: Buffer | None = None
) -> None:
    """Mark a batch LOG_APPEND_TIME with maxTimestamp ``now_ms`` and refresh
    its CRC (Kafka's ``setMaxTimestamp(LOG_APPEND_TIME, now)`` for
    ``message.timestamp.type=LogAppendTime``): both fields are inside the
    CRC, the records are not touched (readers take every record's timestamp
    from maxTimestamp).

    ``head`` is the whole batch, or, with ``body``, its 61-byte header (the
    records section follows in ``body``, which stays unread but for the CRC).
    Raises ValueError for a read-only or short ``head``.
    """
    view = _view(head)
    if view.readonly or len(view) < BATCH_HEADER_SIZE:
        raise ValueError("stamp_log_append_time needs a writable batch header")
    (attributes,) = _ATTRIBUTES.unpack_from(view, _ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(view, _ATTRIBUTES_OFFSET, attributes | _TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(view, _MAX_TIMESTAMP_OFFSET, now_ms)
    if body is None:
        size = LOG_OVERHEAD + _INT32.unpack_from(view, _BATCH_LENGTH_OFFSET)[0]
        crc = crc32c(view[CRC_START:size])
    else:
        crc = crc32c(_view(body), crc32c(view[CRC_START:BATCH_HEADER_SIZE]))
    _UINT32.pack_into(view, _CRC_OFFSET, crc)


def pack_header(
    records: Buffer,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    """Assemble a whole batch: the header with batchLength and CRC filled in, then ``records``.

    Raises ValueError if a field is out of range for its wire type.
    """
    out = bytearray(BATCH_HEADER_SIZE + len(records))
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(records),
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from exc
    out[BATCH_HEADER_SIZE:] = records
    _UINT32.pack_into(out, _CRC_OFFSET, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
