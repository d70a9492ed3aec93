"""Kafka RecordBatch v2, byte-compatible: build, validate, re-offset and read batches.

The on-disk and on-wire unit of raftlog (ARCHITECTURE.md, "Record
batches"). Batches stay opaque bytes on the hot path: ``validate_batch``
checks header and CRC32C without decompressing, and
``rewrite_base_offset_and_epoch`` re-offsets a batch in place (both fields
sit outside the CRC). ``BatchBuilder`` and ``decode_records`` are for
clients, tests and internal topics.

Modules, by role: ``batch`` (header, CRC, hot path), ``record`` (one
record's encoding), ``varint``, ``compression``, ``builder``, ``reader``,
``errors``. Everything public is re-exported here.
"""

from .batch import (
    BATCH_HEADER_SIZE,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    ControlRecordType,
    TimestampType,
    iter_batches,
    parse_header,
    rewrite_base_offset_and_epoch,
    stamp_log_append_time,
    validate_batch,
    validate_batches,
)
from .builder import (
    CONTROL_RECORD_KEY_VERSION,
    BatchBuilder,
    build_control_batch,
    control_record_key,
    parse_control_record_key,
)
from .errors import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionLimitError,
    InvalidMagicError,
    RecordCountMismatchError,
    RecordError,
    TruncatedBatchError,
    UnsupportedCompressionError,
    VarintError,
)
from .reader import DEFAULT_MAX_DECOMPRESSED_BYTES, decode_records
from .record import Header, Record

__all__ = [
    "BATCH_HEADER_SIZE",
    "CONTROL_RECORD_KEY_VERSION",
    "CURRENT_MAGIC",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "ControlRecordType",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionLimitError",
    "Header",
    "InvalidMagicError",
    "Record",
    "RecordCountMismatchError",
    "RecordError",
    "TimestampType",
    "TruncatedBatchError",
    "UnsupportedCompressionError",
    "VarintError",
    "build_control_batch",
    "control_record_key",
    "decode_records",
    "iter_batches",
    "parse_control_record_key",
    "parse_header",
    "rewrite_base_offset_and_epoch",
    "stamp_log_append_time",
    "validate_batch",
    "validate_batches",
]
