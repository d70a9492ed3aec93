"""__consumer_offsets keys and values: byte-compatible with Kafka's message schemas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.groups.records import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)


def test_offset_commit_key_v1_bytes() -> None:
    # version=1 | group "g" | topic "t" | partition 3
    expected = bytes.fromhex("000100016700017400000003")
    assert encode_key(OffsetCommitKey("g", "t", 3)) == expected
    assert decode_key(expected) == OffsetCommitKey("g", "t", 3)


def test_offset_commit_key_v0_decodes_the_same() -> None:
    assert decode_key(bytes.fromhex("000000016700017400000003")) == OffsetCommitKey("g", "t", 3)


def test_group_metadata_key_v2_bytes() -> None:
    assert encode_key(GroupMetadataKey("g")) == bytes.fromhex("0002000167")
    assert decode_key(bytes.fromhex("0002000167")) == GroupMetadataKey("g")


def test_kip848_key_versions_are_skipped() -> None:
    assert decode_key(bytes.fromhex("0003000167")) is None


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(offset=5, leader_epoch=2, metadata="m", commit_timestamp_ms=1000)
    expected = bytes.fromhex("000300000000000000050000000200016d00000000000003e8")
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_v1_has_expire_timestamp() -> None:
    data = bytes.fromhex("00010000000000000005000000000000000003e800000000000007d0")
    assert decode_offset_commit_value(data) == OffsetCommitValue(5, -1, "", 1000, 2000)


def test_group_metadata_value_v3_bytes() -> None:
    member = MemberMetadataValue("m1", None, "c", "h", 300, 10, b"S", b"A")
    value = GroupMetadataValue("consumer", 1, "range", "m1", 7, (member,))
    expected = (
        bytes.fromhex("0003")
        + b"\x00\x08consumer"
        + bytes.fromhex("00000001")
        + b"\x00\x05range"
        + b"\x00\x02m1"
        + bytes.fromhex("0000000000000007")
        + bytes.fromhex("00000001")
        + b"\x00\x02m1"
        + bytes.fromhex("ffff")  # null groupInstanceId
        + b"\x00\x01c"
        + b"\x00\x01h"
        + bytes.fromhex("0000012c")
        + bytes.fromhex("0000000a")
        + bytes.fromhex("00000001")
        + b"S"
        + bytes.fromhex("00000001")
        + b"A"
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_empty_group_value_writes_empty_protocol_type_and_null_protocol() -> None:
    value = GroupMetadataValue(None, 4, None, None, 9, ())
    data = encode_group_metadata_value(value)
    assert data == bytes.fromhex("0003000000000004ffffffff000000000000000900000000")
    assert decode_group_metadata_value(data) == value


def test_group_metadata_value_v0_uses_session_timeout_for_rebalance() -> None:
    data = (
        bytes.fromhex("0000")
        + b"\x00\x08consumer"
        + bytes.fromhex("00000001")
        + b"\x00\x05range\x00\x02m1"
        + bytes.fromhex("00000001")
        + b"\x00\x02m1\x00\x01c\x00\x01h"
        + bytes.fromhex("0000000a")
        + bytes.fromhex("0000000000000000")
    )
    value = decode_group_metadata_value(data)
    assert value.members[0].rebalance_timeout_ms == 10 and value.current_state_timestamp_ms == -1


def test_tombstone_decodes_to_none() -> None:
    assert decode_value(GroupMetadataKey("g"), None) is None


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", bytes.fromhex("ffff"), bytes.fromhex("000100"), bytes.fromhex("0002000167ff")],
)
def test_corrupt_keys_raise(data: bytes) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_key(data)


def test_unsupported_value_version_raises() -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_offset_commit_value(bytes.fromhex("0004") + bytes(20))


_text = st.text(max_size=8)
_members = st.builds(
    MemberMetadataValue,
    _text,
    st.none() | _text,
    _text,
    _text,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.binary(max_size=8),
    st.binary(max_size=8),
)


@given(
    st.builds(
        GroupMetadataValue,
        st.none() | st.text(min_size=1, max_size=8),
        st.integers(-(2**31), 2**31 - 1),
        st.none() | _text,
        st.none() | _text,
        st.integers(-1, 2**62),
        st.lists(_members, max_size=3).map(tuple),
    )
)
def test_group_metadata_value_round_trips(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@given(
    st.builds(
        OffsetCommitValue,
        st.integers(-1, 2**62),
        st.integers(-1, 2**31 - 1),
        _text,
        st.integers(0, 2**62),
    )
)
def test_offset_commit_value_round_trips(value: OffsetCommitValue) -> None:
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value
