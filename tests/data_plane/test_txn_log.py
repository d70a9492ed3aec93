"""`data_plane.txn.txn_log`: Kafka's partition hashing and TransactionLog v0 records."""

from __future__ import annotations

import pytest

from data_plane.txn.txn_log import (
    TxnLogError,
    TxnLogRecord,
    decode_record,
    encode_record,
    java_string_hash,
    kafka_abs,
    partition_for,
)
from data_plane.txn.txn_metadata import TxnMetadata, TxnState


def test_java_string_hash_matches_java() -> None:
    # Values of "x".hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("\U0001F600") == 55357 * 31 + 56832  # two UTF-16 code units
    assert kafka_abs(-(1 << 31)) == 0 and kafka_abs(-5) == 5
    assert partition_for("polygenelubricants") == 0
    assert partition_for("hello") == 99162322 % 50
    with pytest.raises(ValueError):
        partition_for("x", 0)


def test_record_round_trip_and_tombstone() -> None:
    m = TxnMetadata("tx-1", 4000, 3, 60000, TxnState.ONGOING,
                    frozenset({("t", 1), ("t", 0), ("u", 2)}), 100, 200)
    key, value = encode_record(TxnLogRecord("tx-1", m))
    assert key == b"\x00\x00\x00\x04tx-1"
    assert value is not None and value[:2] == b"\x00\x00"
    assert decode_record(key, value) == TxnLogRecord("tx-1", m)
    assert decode_record(key, None) == TxnLogRecord("tx-1", None)


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_damaged_records_raise(cut: int) -> None:
    m = TxnMetadata("a", 1, 0, 1000, TxnState.EMPTY)
    key, value = encode_record(TxnLogRecord("a", m))
    assert value is not None
    with pytest.raises(TxnLogError):
        decode_record(key, value[:-cut])
    with pytest.raises(TxnLogError):
        decode_record(b"\x00\x01" + key[2:], value)
    with pytest.raises(TxnLogError):
        decode_record(key, b"\x00\x09" + value[2:])
    with pytest.raises(TxnLogError):
        decode_record(key, value[:16] + b"\x09" + value[17:])
