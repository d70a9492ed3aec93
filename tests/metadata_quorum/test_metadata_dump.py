"""metadata_quorum.dump: kafka-dump-log --cluster-metadata-decoder style output."""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_quorum.dump import dump_metadata_log, format_record_payload
from metadata_quorum.records import (
    AccessControlEntryRecord,
    NoOpRecord,
    PartitionRecord,
    RemoveAccessControlEntryRecord,
    ScramMechanism,
    TopicRecord,
    UserScramCredentialRecord,
    build_metadata_batch,
    encode_record,
)
from raftlog.records import ControlRecordType, build_control_batch

TID = uuid.UUID(int=3)


def log_bytes() -> bytes:
    return (
        build_control_batch(ControlRecordType.LEADER_CHANGE, b"\x00", timestamp_ms=5,
                            partition_leader_epoch=1)
        + build_metadata_batch([TopicRecord("t", TID), PartitionRecord(0, TID, (1,), (1,), leader=1)],
                               base_offset=1, epoch=1, timestamp_ms=7)
    )


def test_one_line_per_batch_and_per_record() -> None:
    lines = list(dump_metadata_log(log_bytes()))
    assert len(lines) == 5
    assert lines[0].startswith("baseOffset: 0 lastOffset: 0 count: 1")
    assert "isControl: true" in lines[0] and "isvalid: true" in lines[0]
    assert "controlType: LEADER_CHANGE(2)" in lines[1]
    assert lines[2].startswith("baseOffset: 1 lastOffset: 2 count: 2")
    assert "CreateTime: 7" in lines[2] and "compresscodec: none" in lines[2]
    assert lines[3].startswith("| offset: 1 CreateTime: 7 keySize: -1")
    payload = json.loads(lines[4].split("payload: ", 1)[1])
    assert payload["type"] == "PARTITION_RECORD" and payload["version"] == 1
    assert payload["data"]["topic_id"] == str(TID) and payload["data"]["leader"] == 1
    assert payload["data"]["eligible_leader_replicas"] == []
    assert payload["data"]["last_known_elr"] == []


def test_headers_only() -> None:
    lines = list(dump_metadata_log(log_bytes(), print_records=False))
    assert len(lines) == 2 and all(line.startswith("baseOffset") for line in lines)


def test_crc_mismatch_is_shown_not_raised() -> None:
    data = bytearray(build_metadata_batch([NoOpRecord()]))
    data[-1] ^= 0x01
    lines = list(dump_metadata_log(bytes(data)))
    assert "isvalid: false" in lines[0]


def test_torn_tail_is_reported() -> None:
    data = log_bytes()
    lines = list(dump_metadata_log(data + data[:30]))
    assert lines[-1] == f"Found 30 invalid bytes at the end of the input at position {len(data)}"


def test_undecodable_payload_is_shown() -> None:
    assert format_record_payload(b"\x7f\x7f\x00\x00").startswith("<undecodable metadata record")
    assert format_record_payload(None) == "<null value>"
    assert json.loads(format_record_payload(encode_record(NoOpRecord())))["type"] == "NO_OP_RECORD"


def test_scram_salts_and_keys_are_redacted() -> None:
    """As Kafka's RecordRedactor prints a UserScramCredentialRecord."""
    record = UserScramCredentialRecord("alice", ScramMechanism.SCRAM_SHA_256, b"NaCl",
                                       b"k" * 32, b"v" * 32, 8192)
    lines = list(dump_metadata_log(build_metadata_batch([record], base_offset=3, epoch=1)))
    payload = json.loads(lines[1].split("payload: ", 1)[1])
    assert payload == {"type": "USER_SCRAM_CREDENTIAL_RECORD", "version": 0, "data": {
        "name": "alice", "mechanism": "SCRAM_SHA_256", "salt": "(redacted)",
        "stored_key": "(redacted)", "server_key": "(redacted)", "iterations": 8192}}


def test_acl_records_are_dumped_with_kafkas_enum_names() -> None:
    acl_id = uuid.UUID(int=7)
    batch = build_metadata_batch([
        AccessControlEntryRecord(acl_id, ResourceType.TOPIC, "orders", PatternType.LITERAL,
                                 "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
        RemoveAccessControlEntryRecord(acl_id)], base_offset=4, epoch=1)
    payloads = [json.loads(line.split("payload: ", 1)[1])
                for line in dump_metadata_log(batch) if "payload: " in line]
    assert payloads == [
        {"type": "ACCESS_CONTROL_ENTRY_RECORD", "version": 0, "data": {
            "acl_id": str(acl_id), "resource_type": "TOPIC", "resource_name": "orders",
            "pattern_type": "LITERAL", "principal": "User:alice", "host": "*",
            "operation": "READ", "permission_type": "ALLOW"}},
        {"type": "REMOVE_ACCESS_CONTROL_ENTRY_RECORD", "version": 0,
         "data": {"acl_id": str(acl_id)}}]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_dump_never_raises_on_garbage(data: bytes) -> None:
    for line in dump_metadata_log(log_bytes() + data):
        assert isinstance(line, str)
