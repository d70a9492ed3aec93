"""Building v2 batches: for clients, tests and internal topics."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from .batch import (
    BATCH_HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Compression,
    ControlRecordType,
    TimestampType,
    make_attributes,
    pack_header,
)
from .compression import compress
from .errors import CorruptRecordError
from .record import HeaderLike, as_headers, encode_record
from .varint import INT32_MAX

#: Control record keys are version 0 today (Kafka ``ControlRecordType``).
CONTROL_RECORD_KEY_VERSION = 0
_CONTROL_KEY = struct.Struct(">hh")


class BatchBuilder:
    """Accumulates records and builds one v2 batch.

    Records get offset deltas 0, 1, 2, ... in append order. The batch's
    baseTimestamp is the first record's timestamp and maxTimestamp the
    largest (Kafka ``MemoryRecordsBuilder``); with LOG_APPEND_TIME,
    maxTimestamp is ``log_append_time_ms`` when given. Timestamps are always
    passed in (STYLE.md section 1).

    Raises ValueError for out-of-range arguments and TypeError for bytes
    given as anything other than ``bytes``.
    """

    def __init__(
        self,
        *,
        compression: Compression = Compression.NONE,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        log_append_time_ms: int | None = None,
    ) -> None:
        self._compression = Compression(compression)
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._attributes = make_attributes(
            self._compression,
            TimestampType(timestamp_type),
            is_transactional=is_transactional,
            is_control=is_control,
        )
        self._log_append_time_ms = (
            log_append_time_ms if timestamp_type == TimestampType.LOG_APPEND_TIME else None
        )
        self._records = bytearray()
        self._count = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = -1

    def __len__(self) -> int:
        """Records appended so far."""
        return self._count

    @property
    def estimated_size_bytes(self) -> int:
        """Size of the batch if built now without compression (an upper bound in practice).

        Callers cap batches with it (e.g. ``batch.size``, ``max.message.bytes``).
        """
        return BATCH_HEADER_SIZE + len(self._records)

    def append(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Iterable[HeaderLike] = (),
        timestamp_ms: int,
    ) -> None:
        """Add a record with the next offset delta.

        Raises ValueError if the batch is full (2^31 - 1 records) or the
        timestamp delta overflows int64, TypeError for non-bytes key/value.
        """
        for name, data in (("key", key), ("value", value)):
            if data is not None and not isinstance(data, bytes):
                raise TypeError(f"record {name} must be bytes or None, got {type(data).__name__}")
        if self._count >= INT32_MAX:
            raise ValueError("batch already holds the maximum number of records")
        base_timestamp = timestamp_ms if self._base_timestamp is None else self._base_timestamp
        encode_record(
            self._records,
            offset_delta=self._count,
            timestamp_delta=timestamp_ms - base_timestamp,
            key=key,
            value=value,
            headers=as_headers(headers),
        )
        self._base_timestamp = base_timestamp
        self._max_timestamp = max(self._max_timestamp, timestamp_ms)
        self._count += 1

    def build(self) -> bytes:
        """The batch's bytes, CRC filled in, records compressed as configured.

        Raises ValueError if no record was appended (Kafka never writes an
        empty batch from a builder) or a header field is out of range.
        """
        if self._count == 0 or self._base_timestamp is None:
            raise ValueError("cannot build a batch with no records")
        max_timestamp = self._max_timestamp
        if self._log_append_time_ms is not None:
            max_timestamp = self._log_append_time_ms
        return pack_header(
            compress(self._compression, self._records),
            base_offset=self._base_offset,
            partition_leader_epoch=self._partition_leader_epoch,
            attributes=self._attributes,
            last_offset_delta=self._count - 1,
            base_timestamp=self._base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            records_count=self._count,
        )


def control_record_key(
    kind: ControlRecordType, *, version: int = CONTROL_RECORD_KEY_VERSION
) -> bytes:
    """The key of a control record: int16 version, int16 type (Kafka ``ControlRecordType``)."""
    return _CONTROL_KEY.pack(version, int(kind))


def parse_control_record_key(key: bytes | None) -> tuple[int, ControlRecordType]:
    """Split a control record key into (version, type).

    Like Kafka, only the first 4 bytes are read, so later versions may
    append fields. Raises CorruptRecordError for a null or short key, a
    negative version, or a type this code does not know.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key {key!r} is shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        return version, ControlRecordType(kind)
    except ValueError:
        raise CorruptRecordError(f"unknown control record type {kind}") from None


def build_control_batch(
    kind: ControlRecordType,
    value: bytes,
    *,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    is_transactional: bool | None = None,
    compression: Compression = Compression.NONE,
) -> bytes:
    """A control batch (attribute bit 5) holding one control record of ``kind``.

    ``value`` is the type-specific payload, already encoded (e.g. the
    EndTxnMarker for ABORT/COMMIT, LeaderChangeMessage for LEADER_CHANGE).
    ``is_transactional`` defaults to True for ABORT/COMMIT markers, which
    Kafka writes into transactional batches (KIP-98), and False otherwise
    (KRaft control records, KIP-595/630/853).
    """
    if is_transactional is None:
        is_transactional = kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT)
    builder = BatchBuilder(
        compression=compression,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=is_transactional,
        is_control=True,
    )
    builder.append(value, key=control_record_key(kind), timestamp_ms=timestamp_ms)
    return builder.build()
