"""KIP-848 __consumer_offsets records: byte-compatible with Kafka's ConsumerGroup* schemas.

The expected bytes here are written out from the JSON schemas by hand (struct
for fixed-width fields, literal bytes for varints), not with the module's own
helpers, so a bug shared by the encoder and the decoder still fails a test.
"""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.groups.consumer_records import (
    MEMBER_STATE_STABLE,
    MEMBER_STATE_UNREVOKED_PARTITIONS,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from data_plane.groups.records import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    OffsetCommitKey,
    encode_key,
)

T1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
T2 = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")

METADATA_KEY = ConsumerGroupMetadataKey("g")
MEMBER_KEY = ConsumerGroupMemberMetadataKey("g", "m")
TARGET_METADATA_KEY = ConsumerGroupTargetAssignmentMetadataKey("g")
TARGET_MEMBER_KEY = ConsumerGroupTargetAssignmentMemberKey("g", "m")
CURRENT_KEY = ConsumerGroupCurrentMemberAssignmentKey("g", "m")
VALUE_KEYS: list[ConsumerKey] = [
    METADATA_KEY,
    MEMBER_KEY,
    TARGET_METADATA_KEY,
    TARGET_MEMBER_KEY,
    CURRENT_KEY,
]


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


V0 = b"\x00\x00"  # int16 value version 0
NO_TAGS = b"\x00"  # an empty tagged-fields section


# --- keys --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        # int16 record type, then int16-length strings.
        (ConsumerGroupMetadataKey("g"), "0003 0001 67"),
        (ConsumerGroupPartitionMetadataKey("g"), "0004 0001 67"),
        (ConsumerGroupMemberMetadataKey("g", "mm"), "0005 0001 67 0002 6d6d"),
        (ConsumerGroupTargetAssignmentMetadataKey("g"), "0006 0001 67"),
        (ConsumerGroupTargetAssignmentMemberKey("g", "m"), "0007 0001 67 0001 6d"),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), "0008 0001 67 0001 6d"),
        (ConsumerGroupRegularExpressionKey("g", "t.*"), "0010 0001 67 0003 742e2a"),
    ],
)
def test_key_bytes_are_the_record_type_then_int16_strings(key: ConsumerKey, expected: str) -> None:
    assert encode_consumer_key(key) == bytes.fromhex(expected)
    assert decode_consumer_key(bytes.fromhex(expected)) == key


@pytest.mark.parametrize("record_type", [0, 1, 2, 9, 10, 15, 17, 0x7FFF])
def test_key_types_outside_kip848_consumer_groups_decode_to_none(record_type: int) -> None:
    assert decode_consumer_key(struct.pack(">h", record_type) + b"\x00\x01g") is None


def test_classic_keys_decode_to_none() -> None:
    assert decode_consumer_key(encode_key(OffsetCommitKey("g", "t", 0))) is None
    assert decode_consumer_key(encode_key(GroupMetadataKey("g"))) is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        bytes.fromhex("ffff 0001 67"),  # negative record type
        bytes.fromhex("0003"),  # no group id
        bytes.fromhex("0003 0002 67"),  # truncated group id
        bytes.fromhex("0003 ffff"),  # null group id
        bytes.fromhex("0003 fffe"),  # negative length
        bytes.fromhex("0003 0001 ff"),  # not UTF-8
        bytes.fromhex("0003 0001 67 00"),  # trailing byte
        bytes.fromhex("0005 0001 67"),  # member id missing
        bytes.fromhex("0010 0001 67 ffff"),  # null regex
    ],
)
def test_corrupt_keys_raise(data: bytes) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_consumer_key(data)


# --- values: bytes from the schemas --------------------------------------------


def test_metadata_value_without_hash_writes_no_tagged_field() -> None:
    # Epoch int32, then the tagged-fields section: MetadataHash is at its default 0.
    expected = V0 + i32(5) + NO_TAGS
    value = ConsumerGroupMetadataValue(epoch=5)
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(METADATA_KEY, expected) == value


def test_metadata_value_writes_metadata_hash_as_tag_0() -> None:
    # One tagged field: tag 0, size 8, int64 (KIP-1101).
    expected = V0 + i32(5) + b"\x01" + b"\x00" + b"\x08" + i64(-2)
    value = ConsumerGroupMetadataValue(epoch=5, metadata_hash=-2)
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(METADATA_KEY, expected) == value


def test_metadata_value_skips_creation_time_and_unknown_tags() -> None:
    # Tag 1 is CreationTimeMs (KIP-1282); tag 300 is unknown (varint ac 02).
    data = (
        V0
        + i32(7)
        + b"\x03"
        + b"\x00\x08"
        + i64(99)
        + b"\x01\x08"
        + i64(1_700_000_000_000)
        + b"\xac\x02\x03abc"
    )
    assert decode_consumer_value(METADATA_KEY, data) == ConsumerGroupMetadataValue(7, 99)


def test_member_metadata_value_bytes() -> None:
    expected = (
        V0
        + b"\x00"  # InstanceId null
        + b"\x02r"  # RackId "r": compact length 1 + 1
        + b"\x02c"  # ClientId
        + b"\x03/h"  # ClientHost
        + b"\x03" + b"\x03t1" + b"\x03t2"  # SubscribedTopicNames: compact count 2 + 1
        + b"\x00"  # SubscribedTopicRegex null
        + i32(30_000)  # RebalanceTimeoutMs
        + b"\x08uniform"  # ServerAssignor
        + NO_TAGS  # no ClassicMemberMetadata
    )  # fmt: skip
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id="r",
        client_id="c",
        client_host="/h",
        subscribed_topic_names=("t1", "t2"),
        subscribed_topic_regex=None,
        server_assignor="uniform",
        rebalance_timeout_ms=30_000,
    )
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(MEMBER_KEY, expected) == value


def test_member_metadata_value_long_string_uses_a_two_byte_varint() -> None:
    # 200 bytes: compact length 201 = 0b1_1001001 -> c9 01.
    host = "h" * 200
    expected = (
        V0 + b"\x02i" + b"\x00" + b"\x01" + b"\xc9\x01" + host.encode()
        + b"\x01" + b"\x02." + i32(-1) + b"\x00" + NO_TAGS
    )  # fmt: skip
    value = ConsumerGroupMemberMetadataValue("i", None, "", host, (), ".", None, -1)
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(MEMBER_KEY, expected) == value


def test_member_metadata_value_with_classic_member_metadata() -> None:
    # Tag 0: ClassicMemberMetadata, present (a classic-protocol member of a
    # consumer group, KIP-848 online migration): a nullable struct, so a
    # presence varint 1, then SessionTimeoutMs and SupportedProtocols [Name,
    # Metadata], as Kafka's generated writer lays it out.
    classic = b"\x01" + i32(45_000) + b"\x02" + b"\x06range" + b"\x03\x00\x01" + NO_TAGS + NO_TAGS
    data = (
        V0 + b"\x00" + b"\x00" + b"\x02c" + b"\x02h" + b"\x02" + b"\x02t" + b"\x00"
        + i32(-1) + b"\x00" + b"\x01" + b"\x00" + bytes([len(classic)]) + classic
    )  # fmt: skip
    value = ConsumerGroupMemberMetadataValue(
        None, None, "c", "h", ("t",), None, None, -1,
        ClassicMemberMetadata(45_000, (("range", b"\x00\x01"),)))
    assert decode_consumer_value(MEMBER_KEY, data) == value
    assert encode_consumer_value(value) == data


def test_member_metadata_value_with_a_null_classic_member_metadata_tag() -> None:
    # The tag present with the struct null (presence varint 0) reads as None.
    data = (
        V0 + b"\x00" + b"\x00" + b"\x02c" + b"\x02h" + b"\x02" + b"\x02t" + b"\x00"
        + i32(-1) + b"\x00" + b"\x01" + b"\x00" + b"\x01" + b"\x00"
    )  # fmt: skip
    assert decode_consumer_value(MEMBER_KEY, data) == ConsumerGroupMemberMetadataValue(
        None, None, "c", "h", ("t",), None, None, -1
    )


def test_target_assignment_metadata_value_bytes() -> None:
    expected = V0 + i32(12) + NO_TAGS
    value = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=12)
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(TARGET_METADATA_KEY, expected) == value


def test_target_assignment_metadata_value_skips_assignment_timestamp() -> None:
    # Tag 0: AssignmentTimestamp int64 (KIP-1263).
    data = V0 + i32(12) + b"\x01\x00\x08" + i64(1_700_000_000_000)
    assert decode_consumer_value(TARGET_METADATA_KEY, data) == (
        ConsumerGroupTargetAssignmentMetadataValue(12)
    )


def test_target_assignment_member_value_bytes() -> None:
    expected = (
        V0
        + b"\x03"  # TopicPartitions: 2 topics
        + T1.bytes + b"\x03" + i32(0) + i32(2) + NO_TAGS
        + T2.bytes + b"\x01" + NO_TAGS  # no partitions
        + NO_TAGS
    )  # fmt: skip
    value = ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 2)), (T2, ())))
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(TARGET_MEMBER_KEY, expected) == value


def test_current_member_assignment_value_bytes() -> None:
    expected = (
        V0
        + i32(10)  # MemberEpoch
        + i32(9)  # PreviousMemberEpoch
        + b"\x01"  # State: UNREVOKED_PARTITIONS
        + b"\x02" + T1.bytes + b"\x02" + i32(1) + NO_TAGS  # AssignedPartitions
        + b"\x02" + T2.bytes + b"\x03" + i32(3) + i32(4) + NO_TAGS  # PartitionsPendingRevocation
        + NO_TAGS
    )  # fmt: skip
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=10,
        previous_member_epoch=9,
        state=MEMBER_STATE_UNREVOKED_PARTITIONS,
        assigned_partitions=((T1, (1,)),),
        partitions_pending_revocation=((T2, (3, 4)),),
    )
    assert encode_consumer_value(value) == expected
    assert decode_consumer_value(CURRENT_KEY, expected) == value


def test_current_member_assignment_value_skips_assignment_epochs() -> None:
    # TopicPartitions tag 0: AssignmentEpochs, nullable []int32 aligned with
    # Partitions (KIP-1251): compact count 1 + 1, int32 7.
    epochs = b"\x02" + i32(7)
    data = (
        V0 + i32(8) + i32(7) + b"\x00"
        + b"\x02" + T1.bytes + b"\x02" + i32(0) + b"\x01\x00" + bytes([len(epochs)]) + epochs
        + b"\x01" + NO_TAGS
    )  # fmt: skip
    assert decode_consumer_value(CURRENT_KEY, data) == ConsumerGroupCurrentMemberAssignmentValue(
        8, 7, MEMBER_STATE_STABLE, ((T1, (0,)),), ()
    )


@pytest.mark.parametrize(
    "key",
    [ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupRegularExpressionKey("g", "x")],
)
def test_values_of_keys_the_coordinator_ignores_decode_to_none(key: ConsumerKey) -> None:
    assert decode_consumer_value(key, b"\x00\x00anything") is None


# --- values: corruption -------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "data"),
    [
        (METADATA_KEY, b""),
        (METADATA_KEY, b"\x00"),
        (METADATA_KEY, b"\x00\x01" + i32(1) + NO_TAGS),  # version 1 is not defined
        (METADATA_KEY, b"\xff\xff" + i32(1) + NO_TAGS),  # negative version
        (METADATA_KEY, V0 + i32(1)),  # tagged-fields section missing
        (METADATA_KEY, V0 + i32(1) + NO_TAGS + b"\x00"),  # trailing byte
        (METADATA_KEY, V0 + i32(1) + b"\x01\x00\x04" + i32(0)),  # 4-byte MetadataHash
        (METADATA_KEY, V0 + i32(1) + b"\x01\x05\x08" + i64(0)[:4]),  # tag cut short
        (METADATA_KEY, V0 + i32(1) + b"\xff\xff\xff\xff\x0f"),  # count overflows int32
        (METADATA_KEY, V0 + i32(1) + b"\x80\x80\x80\x80\x80\x00"),  # 6-byte varint
        (METADATA_KEY, V0 + i32(1) + b"\x7f"),  # 127 tagged fields in no bytes
        (MEMBER_KEY, V0 + b"\x00\x00" + b"\x00"),  # null ClientId
        (MEMBER_KEY, V0 + b"\x00\x00\x02c\x02h" + b"\x00"),  # null SubscribedTopicNames
        (MEMBER_KEY, V0 + b"\x00\x00\x02\xff"),  # ClientId not UTF-8
        (MEMBER_KEY, V0 + b"\x00\x00\x82\x80\x02" + b"x" * 0x8001),  # string over 0x7FFF
        (MEMBER_KEY, V0 + b"\x00\x00\x02c\x02h" + b"\xff\xff\xff\x7f"),  # huge topic count
        (TARGET_METADATA_KEY, V0 + i32(1)[:3]),
        (TARGET_MEMBER_KEY, V0 + b"\x00" + NO_TAGS),  # null TopicPartitions
        (TARGET_MEMBER_KEY, V0 + b"\x02" + T1.bytes[:15]),  # truncated uuid
        # null Partitions
        (TARGET_MEMBER_KEY, V0 + b"\x02" + T1.bytes + b"\x00" + NO_TAGS + NO_TAGS),
        (CURRENT_KEY, V0 + i32(1) + i32(0) + b"\x00" + b"\x01"),  # PendingRevocation missing
    ],
)
def test_corrupt_values_raise(key: ConsumerKey, data: bytes) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_consumer_value(key, data)


@pytest.mark.parametrize(
    "value",
    [
        ConsumerGroupMetadataValue(epoch=2**31),
        ConsumerGroupMetadataValue(epoch=0, metadata_hash=2**63),
        ConsumerGroupCurrentMemberAssignmentValue(1, 0, 128, (), ()),
        ConsumerGroupTargetAssignmentMemberValue(((T1, (-(2**31) - 1,)),)),
        ConsumerGroupMemberMetadataValue(None, None, "c", "h" * 0x8000, (), None, None, -1),
    ],
)
def test_values_that_do_not_fit_the_schema_are_refused(value: ConsumerValue) -> None:
    with pytest.raises(ValueError):
        encode_consumer_value(value)


def test_keys_with_overlong_strings_are_refused() -> None:
    encode_consumer_key(ConsumerGroupMetadataKey("g" * 0x7FFF))
    with pytest.raises(ValueError):
        encode_consumer_key(ConsumerGroupMetadataKey("g" * 0x8000))


# --- properties ----------------------------------------------------------------

_i8 = st.integers(-(2**7), 2**7 - 1)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_text = st.text(max_size=12)
_topic_partitions = st.lists(
    st.tuples(st.uuids(), st.lists(_i32, max_size=4).map(tuple)), max_size=4
).map(tuple)

_keys = st.one_of(
    st.builds(ConsumerGroupMetadataKey, _text),
    st.builds(ConsumerGroupPartitionMetadataKey, _text),
    st.builds(ConsumerGroupMemberMetadataKey, _text, _text),
    st.builds(ConsumerGroupTargetAssignmentMetadataKey, _text),
    st.builds(ConsumerGroupTargetAssignmentMemberKey, _text, _text),
    st.builds(ConsumerGroupCurrentMemberAssignmentKey, _text, _text),
    st.builds(ConsumerGroupRegularExpressionKey, _text, _text),
)
_values: st.SearchStrategy[tuple[ConsumerKey, ConsumerValue]] = st.one_of(
    st.builds(ConsumerGroupMetadataValue, _i32, _i64).map(lambda v: (METADATA_KEY, v)),
    st.builds(
        ConsumerGroupMemberMetadataValue,
        st.none() | _text,
        st.none() | _text,
        _text,
        _text,
        st.lists(_text, max_size=4).map(tuple),
        st.none() | _text,
        st.none() | _text,
        _i32,
    ).map(lambda v: (MEMBER_KEY, v)),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, _i32).map(
        lambda v: (TARGET_METADATA_KEY, v)
    ),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, _topic_partitions).map(
        lambda v: (TARGET_MEMBER_KEY, v)
    ),
    st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        _i32,
        _i32,
        _i8,
        _topic_partitions,
        _topic_partitions,
    ).map(lambda v: (CURRENT_KEY, v)),
)


@given(_keys)
def test_keys_round_trip(key: ConsumerKey) -> None:
    assert decode_consumer_key(encode_consumer_key(key)) == key


@given(_values)
def test_values_round_trip(pair: tuple[ConsumerKey, ConsumerValue]) -> None:
    key, value = pair
    assert decode_consumer_value(key, encode_consumer_value(value)) == value


@given(_values)
def test_every_truncation_of_a_value_raises(pair: tuple[ConsumerKey, ConsumerValue]) -> None:
    key, value = pair
    data = encode_consumer_value(value)
    for end in range(len(data)):
        with pytest.raises(CorruptOffsetsRecordError):
            decode_consumer_value(key, data[:end])


@given(_values, st.integers(1, 2**20), st.binary(max_size=20))
def test_unknown_top_level_tags_are_skipped(
    pair: tuple[ConsumerKey, ConsumerValue], tag: int, payload: bytes
) -> None:
    # Append one more tagged field (an unknown tag, so no schema field) to the
    # top-level section: bump its count and add tag, size, bytes. Our
    # top-level sections hold at most one field, so the count is one byte.
    key, value = pair
    data = bytearray(encode_consumer_value(value))
    if isinstance(value, ConsumerGroupMetadataValue) and value.metadata_hash != 0:
        start = len(data) - 11  # count, tag 0, size 8, int64
    else:
        start = len(data) - 1
    assert data[start] in (0, 1)
    data[start] += 1
    data += _varint(tag) + _varint(len(payload)) + payload
    assert decode_consumer_value(key, bytes(data)) == value


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


@given(st.binary(max_size=64))
def test_arbitrary_key_bytes_raise_only_corrupt_record_errors(data: bytes) -> None:
    with contextlib.suppress(CorruptOffsetsRecordError):
        decode_consumer_key(data)


@given(st.sampled_from(VALUE_KEYS), st.binary(max_size=96))
def test_arbitrary_value_bytes_raise_only_corrupt_record_errors(
    key: ConsumerKey, data: bytes
) -> None:
    with contextlib.suppress(CorruptOffsetsRecordError):
        decode_consumer_value(key, V0 + data)


@given(_values, st.data())
def test_mutated_values_raise_only_corrupt_record_errors(
    pair: tuple[ConsumerKey, ConsumerValue], data: st.DataObject
) -> None:
    _, value = pair
    mutated = bytearray(encode_consumer_value(value))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(mutated)))
        match data.draw(st.sampled_from(["set", "insert", "delete"])):
            case "set" if at < len(mutated):
                mutated[at] = data.draw(st.integers(0, 255))
            case "insert":
                mutated[at:at] = data.draw(st.binary(min_size=1, max_size=4))
            case _:
                del mutated[at : at + 1]
    for target in VALUE_KEYS:
        with contextlib.suppress(CorruptOffsetsRecordError):
            decode_consumer_value(target, bytes(mutated))
