"""Transaction markers: COMMIT/ABORT control batches (KIP-98).

A marker is a control batch (attribute bit 5) in a transactional batch,
stamped with the producer id and epoch of the transaction it ends, holding
one control record whose key is ``(version=0, type)`` and whose value is
Kafka's ``EndTxnMarker``: ``version int16 (0), coordinatorEpoch int32``.
The coordinator epoch fences markers from a deposed transaction coordinator
(TRANSACTION_COORDINATOR_FENCED on the partition).

Reading a marker decodes the single record of a control batch; data batches
are never decoded (headers only on the produce and recovery paths).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from raftlog.records import (
    BatchHeader,
    ControlRecordType,
    build_control_batch,
    decode_records,
    iter_batches,
    parse_control_record_key,
)

END_TXN_MARKER_VERSION = 0
_MARKER_VALUE = struct.Struct(">hi")

Buffer = bytes | bytearray | memoryview


class MarkerError(ValueError):
    """A control batch whose marker cannot be read (corrupt or unknown version)."""


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """What a COMMIT/ABORT control record says."""

    commit: bool
    coordinator_epoch: int

    def __post_init__(self) -> None:
        # Any int32, as Kafka's EndTransactionMarker: an admin abort
        # (kafka-transactions.sh abort, AdminClient.abortTransaction) may send
        # -1 for a producer whose partition never saw a marker; the producer
        # state's coordinator-epoch fencing compares it like any other.
        if not -(2**31) <= self.coordinator_epoch < 2**31:
            raise ValueError(f"coordinator epoch {self.coordinator_epoch} is not an int32")

    @property
    def control_type(self) -> ControlRecordType:
        return ControlRecordType.COMMIT if self.commit else ControlRecordType.ABORT


@dataclass(frozen=True, slots=True)
class TxnMarkerRequest:
    """One WriteTxnMarkers entry for one partition (Kafka ``WritableTxnMarker``).

    The coordinator produces these; the marker channel groups them by
    partition leader and sends WriteTxnMarkers.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    topic: str
    partition: int


def encode_marker_value(coordinator_epoch: int) -> bytes:
    """The EndTxnMarker value bytes (version 0)."""
    return _MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTxnMarker,
    *,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A control batch ending ``producer_id``'s transaction, ready for ``append_as_leader``."""
    return build_control_batch(
        marker.control_type,
        encode_marker_value(marker.coordinator_epoch),
        timestamp_ms=timestamp_ms,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
    )


def read_marker(batch: Buffer, pos: int = 0) -> EndTxnMarker | None:
    """The marker in the control batch at ``batch[pos:]``; None for other control
    records (KRaft's LEADER_CHANGE etc.). Raises `MarkerError` if unreadable."""
    records = decode_records(batch, pos=pos, validate_crc=False)
    if len(records) != 1:
        raise MarkerError(f"control batch holds {len(records)} records, expected 1")
    record = records[0]
    try:
        _, kind = parse_control_record_key(record.key)
    except ValueError as e:
        raise MarkerError(str(e)) from e
    if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return None
    value = record.value
    if value is None or len(value) < _MARKER_VALUE.size:
        raise MarkerError("EndTxnMarker value is missing or short")
    version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if version != END_TXN_MARKER_VERSION:
        raise MarkerError(f"EndTxnMarker version {version} is not supported")
    return EndTxnMarker(kind == ControlRecordType.COMMIT, coordinator_epoch)


def scan_batches(buf: Buffer) -> Iterator[tuple[BatchHeader, EndTxnMarker | None]]:
    """``(header, marker)`` for each whole batch of ``buf`` (log bytes).

    Data batches cost one header parse; only control batches (one record
    each) are decoded. CRCs are not re-checked: the log validated them.
    This is the input of `ProducerStateManager.load_from_batches`.
    """
    view = memoryview(buf)
    for header, pos in iter_batches(view, validate_crc=False):
        marker = None
        if header.is_control and header.is_transactional:
            marker = read_marker(view[pos : pos + header.size_in_bytes])
        yield header, marker
