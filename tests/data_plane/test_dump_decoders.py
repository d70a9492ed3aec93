"""`raftlog dump-log --offsets-decoder / --transaction-log-decoder`: the
coordinators' records as JSON, from the bytes their encoders write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_plane.cli import main
from data_plane.dump_decoders import offsets_record, transaction_log_record
from data_plane.groups import consumer_records, records
from data_plane.txn.txn_log import TxnLogRecord, encode_record
from raftlog.records import BatchBuilder


def _parts(line: str) -> tuple[object, object]:
    key_text, _, payload_text = line.removeprefix("key: ").partition(" payload: ")
    return json.loads(key_text), json.loads(payload_text)


def test_a_committed_offset_and_its_tombstone() -> None:
    key = records.OffsetCommitKey("g", "t", 3)
    value = records.OffsetCommitValue(offset=42, leader_epoch=5, metadata="m",
                                      commit_timestamp_ms=1000)
    line = offsets_record(records.encode_key(key), records.encode_value(value))
    assert _parts(line) == (
        {"type": "OffsetCommitKey", "data": {"groupId": "g", "topic": "t", "partition": 3}},
        {"data": {"offset": 42, "leaderEpoch": 5, "metadata": "m", "commitTimestampMs": 1000,
                  "expireTimestampMs": -1}})
    assert _parts(offsets_record(records.encode_key(key), None))[1] is None


def test_a_classic_group_and_a_consumer_protocol_group() -> None:
    member = records.MemberMetadataValue("m1", None, "c", "/h", 300, 100, b"\x00\x01", b"")
    value = records.GroupMetadataValue("consumer", 2, "range", "m1", 7, (member,))
    key, payload = _parts(offsets_record(records.encode_key(records.GroupMetadataKey("g")),
                                         records.encode_value(value)))
    assert key == {"type": "GroupMetadataKey", "data": {"groupId": "g"}}
    assert payload["data"]["members"][0]["subscription"] == "AAE="  # type: ignore[index]
    modern = consumer_records.ConsumerGroupMetadataKey("k")
    line = offsets_record(consumer_records.encode_consumer_key(modern),
                          consumer_records.encode_consumer_value(
                              consumer_records.ConsumerGroupMetadataValue(epoch=9)))
    assert _parts(line) == ({"type": "ConsumerGroupMetadataKey", "data": {"groupId": "k"}},
                            {"data": {"epoch": 9, "metadataHash": 0}})


def test_undecodable_bytes_say_so() -> None:
    assert offsets_record(b"\xff\xff", b"").startswith("key: <not decodable: ")
    assert transaction_log_record(b"\x00", None).startswith("key: <not decodable: ")
    assert offsets_record(None, None) == "key: null payload: null"


def test_a_transaction_log_record() -> None:
    key, value = encode_record(TxnLogRecord("tx", None))
    assert _parts(transaction_log_record(key, value)) == (
        {"type": "TransactionLogKey", "data": {"transactionalId": "tx"}}, None)


def test_dump_log_decodes_a_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = records.encode_key(records.OffsetCommitKey("g", "t", 0))
    value = records.encode_value(records.OffsetCommitValue(7, -1, "", 1))
    path = tmp_path / "00000000000000000000.log"
    builder = BatchBuilder(base_offset=0)
    builder.append(value, key=key, timestamp_ms=1)
    path.write_bytes(builder.build())
    assert main(["dump-log", "--offsets-decoder", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("| offset: 0 CreateTime: ")
    assert '"topic":"t"' in out[-1] and '"offset":7' in out[-1]
