"""`data_plane.txn.markers`: EndTxnMarker control batches, read without decoding data."""

from __future__ import annotations

import pytest

from data_plane.txn.markers import (
    EndTxnMarker,
    MarkerError,
    build_marker_batch,
    encode_marker_value,
    read_marker,
    scan_batches,
)
from raftlog.records import BatchBuilder, ControlRecordType, build_control_batch


def test_marker_batch_round_trips_with_coordinator_epoch() -> None:
    batch = build_marker_batch(42, 7, EndTxnMarker(True, 3), timestamp_ms=5)
    [(header, marker)] = list(scan_batches(batch))
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (42, 7)
    assert marker == EndTxnMarker(True, 3)
    assert EndTxnMarker(False, 0).control_type == ControlRecordType.ABORT


def test_scan_decodes_only_control_batches() -> None:
    b = BatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0)
    b.append(b"v", key=b"k", timestamp_ms=1)
    data = b.build() + build_marker_batch(1, 0, EndTxnMarker(False, 2), timestamp_ms=2)
    found = [m for _, m in scan_batches(data)]
    assert found == [None, EndTxnMarker(False, 2)]


def test_non_marker_control_record_reads_as_none() -> None:
    batch = build_control_batch(ControlRecordType.LEADER_CHANGE, b"\0\0", timestamp_ms=0)
    assert read_marker(batch) is None


def test_bad_marker_values_raise() -> None:
    short = build_control_batch(ControlRecordType.COMMIT, b"\0", timestamp_ms=0)
    with pytest.raises(MarkerError):
        read_marker(short)
    v9 = build_control_batch(ControlRecordType.ABORT, b"\0\x09\0\0\0\0", timestamp_ms=0)
    with pytest.raises(MarkerError):
        read_marker(v9)
    assert encode_marker_value(5) == b"\0\0\0\0\0\x05"
    with pytest.raises(ValueError):
        EndTxnMarker(True, 2**31)
    # -1 is what an admin abort sends for a producer that never saw a marker
    # (KIP-664); Kafka's marker takes any int32.
    assert read_marker(build_control_batch(
        ControlRecordType.ABORT, encode_marker_value(-1), timestamp_ms=0)) == EndTxnMarker(
        False, -1)
