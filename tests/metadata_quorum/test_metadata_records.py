"""metadata_quorum.records: round trips, the documented layout, typed errors, fuzzing."""

from __future__ import annotations

import contextlib
import struct
import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_quorum.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    QUOTA_ENTITY_TYPES,
    AccessControlEntryRecord,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderRecoveryState,
    MetadataRecord,
    MetadataRecordError,
    MetadataRecordType,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    ScramMechanism,
    SecurityProtocol,
    TopicRecord,
    UnfenceBrokerRecord,
    UnknownRecordTypeError,
    UnregisterBrokerRecord,
    UnsupportedRecordVersionError,
    UserScramCredentialRecord,
    build_metadata_batch,
    decode_metadata_batch,
    decode_record,
    encode_record,
    record_fields,
)
from raftlog.records import ControlRecordType, build_control_batch
from raftlog.security.scram import SCRAM_MECHANISMS, credential_from_password

TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
INC = uuid.UUID("11111111-2222-3333-4444-555555555555")

# --- strategies --------------------------------------------------------------

ids = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 2**63 - 1)
uuids = st.uuids(allow_nil=False)
short_text = st.text(max_size=20)
topic_names = st.from_regex(r"[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,30}", fullmatch=True)
id_sets = st.lists(st.integers(0, 50), unique=True, max_size=6).map(tuple)
endpoints = st.builds(
    Endpoint, st.text(min_size=1, max_size=10), short_text, st.integers(0, 65535),
    st.sampled_from(SecurityProtocol),
)
broker_feature_lists = st.lists(
    st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 2**15 - 1),
              st.integers(0, 2**15 - 1)).map(
        lambda t: BrokerFeature(t[0], min(t[1], t[2]), max(t[1], t[2]))),
    max_size=3, unique_by=lambda f: f.name,
).map(tuple)


@st.composite
def partition_records(draw: st.DrawFn) -> PartitionRecord:
    replicas = draw(st.lists(st.integers(0, 50), unique=True, min_size=1, max_size=6))
    isr = [r for r in replicas if draw(st.booleans())]
    leader = draw(st.sampled_from(isr)) if isr and draw(st.booleans()) else NO_LEADER
    rest = [r for r in replicas if draw(st.booleans())]
    split = draw(st.integers(0, len(rest)))
    return PartitionRecord(
        draw(ids), draw(uuids), tuple(replicas), tuple(isr), tuple(rest[:split]),
        tuple(rest[split:]), leader, draw(st.sampled_from(LeaderRecoveryState)),
        draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 2**31 - 1)),
    )


@st.composite
def scram_records(draw: st.DrawFn) -> UserScramCredentialRecord:
    mechanism = draw(st.sampled_from(ScramMechanism))
    size = mechanism.digest_size
    return UserScramCredentialRecord(
        draw(st.text(min_size=1, max_size=20)), mechanism, draw(st.binary(max_size=40)),
        draw(st.binary(min_size=size, max_size=size)),
        draw(st.binary(min_size=size, max_size=size)), draw(st.integers(1, 2**31 - 1)))


acl_records = st.builds(
    AccessControlEntryRecord, uuids,
    st.sampled_from([t for t in ResourceType if t > ResourceType.ANY]),
    st.text(min_size=1, max_size=20), st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    short_text, short_text, st.sampled_from([o for o in AclOperation if o > AclOperation.ANY]),
    st.sampled_from([AclPermissionType.DENY, AclPermissionType.ALLOW]))

records_strategy: st.SearchStrategy[MetadataRecord] = st.one_of(
    st.builds(RegisterBrokerRecord, ids, uuids, epochs,
              st.lists(endpoints, max_size=3, unique_by=lambda e: e.name).map(tuple),
              st.none() | short_text, st.booleans(), st.booleans(), broker_feature_lists),
    st.builds(UnregisterBrokerRecord, ids, epochs),
    st.builds(FenceBrokerRecord, ids, epochs),
    st.builds(UnfenceBrokerRecord, ids, epochs),
    st.builds(BrokerRegistrationChangeRecord, ids, epochs, st.none() | st.booleans(),
              st.none() | st.booleans()),
    st.builds(TopicRecord, topic_names.filter(lambda n: n not in (".", "..")), uuids),
    st.builds(RemoveTopicRecord, uuids),
    partition_records(),
    st.builds(PartitionChangeRecord, ids, uuids, st.none() | id_sets,
              st.integers(NO_LEADER_CHANGE, 2**31 - 1), st.none() | id_sets,
              st.none() | id_sets, st.none() | id_sets, st.integers(-1, 1)),
    st.builds(ConfigRecord, st.sampled_from(ConfigResourceType), short_text,
              st.text(min_size=1, max_size=20), st.none() | short_text),
    st.builds(ProducerIdsRecord, st.integers(-1, 2**31 - 1), st.integers(-1, 2**63 - 1),
              st.integers(0, 2**63 - 1)),
    st.builds(FeatureLevelRecord, st.text(min_size=1, max_size=20), st.integers(0, 2**15 - 1)),
    st.builds(ClientQuotaRecord,
              st.lists(st.tuples(st.sampled_from(QUOTA_ENTITY_TYPES), st.none() | short_text),
                       min_size=1, max_size=3, unique_by=lambda p: p[0]).map(tuple),
              st.text(min_size=1, max_size=20),
              st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
    scram_records(),
    st.builds(RemoveUserScramCredentialRecord, st.text(min_size=1, max_size=20),
              st.sampled_from(ScramMechanism)),
    acl_records,
    st.builds(RemoveAccessControlEntryRecord, uuids),
    st.just(NoOpRecord()),
)


# --- round trips ----------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(records_strategy)
def test_every_record_round_trips(record: MetadataRecord) -> None:
    assert decode_record(encode_record(record)) == record


@settings(max_examples=50, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=20), st.integers(0, 10**9),
       st.integers(0, 1000))
def test_batches_round_trip_with_offsets(
    records: list[MetadataRecord], base: int, epoch: int
) -> None:
    batch = decode_metadata_batch(build_metadata_batch(records, base_offset=base, epoch=epoch))
    assert batch.base_offset == base and batch.epoch == epoch and not batch.is_control
    assert batch.records == tuple((base + i, r) for i, r in enumerate(records))
    assert batch.last_offset == base + len(records) - 1


def test_control_batch_decodes_as_control_without_records() -> None:
    data = build_control_batch(ControlRecordType.LEADER_CHANGE, b"\x00", timestamp_ms=1,
                               base_offset=7, partition_leader_epoch=3)
    batch = decode_metadata_batch(data)
    assert (batch.is_control, batch.records, batch.base_offset, batch.epoch) == (True, (), 7, 3)


# --- the documented layout is stable ---------------------------------------------


def test_layout_of_topic_record_is_the_documented_frame() -> None:
    encoded = encode_record(TopicRecord("ab", TID))
    assert encoded == struct.pack(">hhh", 2, 0, 2) + b"ab" + TID.bytes


def test_layout_of_partition_change_uses_minus_one_for_unchanged_lists() -> None:
    encoded = encode_record(PartitionChangeRecord(3, TID, isr=(1, 2)))
    expected = (
        struct.pack(">hhi", 5, 1, 3) + TID.bytes + struct.pack(">iii", 2, 1, 2)
        + struct.pack(">i", NO_LEADER_CHANGE) + struct.pack(">iii", -1, -1, -1)
        + struct.pack(">b", -1) + struct.pack(">ii", -1, -1)
    )
    assert encoded == expected


def test_version_0_partition_records_still_decode() -> None:
    """Logs written before KIP-966's fields (v0) stay readable: the new
    fields take their defaults (unchanged / empty)."""
    change_v0 = (
        struct.pack(">hhi", 5, 0, 3) + TID.bytes + struct.pack(">iii", 2, 1, 2)
        + struct.pack(">i", NO_LEADER_CHANGE) + struct.pack(">iii", -1, -1, -1)
        + struct.pack(">b", -1)
    )
    assert decode_record(change_v0) == PartitionChangeRecord(3, TID, isr=(1, 2))
    record = PartitionRecord(0, TID, (1, 2, 3), (1, 2), leader=1, leader_epoch=4,
                             partition_epoch=5)
    partition_v0 = bytearray(encode_record(record)[:-8])  # without the two empty lists
    partition_v0[2:4] = struct.pack(">h", 0)
    assert decode_record(bytes(partition_v0)) == record
    with pytest.raises(UnsupportedRecordVersionError, match=r"supported: \[0, 1\]"):
        decode_record(struct.pack(">hh", 5, 2) + bytes(change_v0[4:]))


def test_elr_fields_round_trip_and_are_checked() -> None:
    record = PartitionRecord(0, TID, (1, 2, 3), (1,), leader=1,
                             eligible_leader_replicas=(2, 3), last_known_elr=(3,))
    assert decode_record(encode_record(record)) == record
    change = PartitionChangeRecord(0, TID, isr=(), leader=-1, eligible_leader_replicas=(1, 2),
                                   last_known_elr=(1,))
    assert decode_record(encode_record(change)) == change
    with pytest.raises(ValueError, match="overlap"):
        PartitionRecord(0, TID, (1, 2, 3), (1, 2), leader=1, eligible_leader_replicas=(2,))
    with pytest.raises(ValueError, match="not a subset"):
        PartitionRecord(0, TID, (1, 2, 3), (1,), leader=1, eligible_leader_replicas=(4,))


def test_layout_of_register_broker_record_is_pinned() -> None:
    record = RegisterBrokerRecord(1, INC, 42, (Endpoint("PLAINTEXT", "h", 9092),), None,
                                  True, False, (BrokerFeature("f.version", 0, 3),))
    body = (INC.hex + "000000000000002a"
            "00000001" "0009" + b"PLAINTEXT".hex() + "0001" + b"h".hex() + "00002384" "0000"
            "ffff" "01" "00")
    # Version 1 (KIP-584): the features follow, name, min and max each.
    assert encode_record(record).hex() == (
        "0000" "0001" "00000001" + body
        + "00000001" "0009" + b"f.version".hex() + "0000" "0003"
    )
    # A version 0 record (a log written before features) reads with none.
    v0 = bytes.fromhex("0000" "0000" "00000001" + body)
    assert decode_record(v0) == replace(record, features=())


def test_broker_features_are_checked_and_round_trip() -> None:
    features = (BrokerFeature("a", 0, 1), BrokerFeature("b", 2, 2))
    record = RegisterBrokerRecord(1, INC, 1, features=features)
    assert decode_record(encode_record(record)) == record
    with pytest.raises(ValueError, match="distinct"):
        RegisterBrokerRecord(1, INC, 1, features=(BrokerFeature("a", 0, 1),) * 2)
    with pytest.raises(ValueError):
        BrokerFeature("a", 2, 1)  # max below min
    with pytest.raises(ValueError):
        BrokerFeature("a", -1, 1)
    raw = bytearray(encode_record(RegisterBrokerRecord(1, INC, 1, features=(features[0],))))
    raw[-4:] = struct.pack(">hh", 1, 0)  # max below min on the wire
    with pytest.raises(MetadataRecordError, match="broker feature"):
        decode_record(bytes(raw))


def test_tristate_encoding_of_registration_change() -> None:
    for value, byte in ((None, b"\xff"), (False, b"\x00"), (True, b"\x01")):
        encoded = encode_record(BrokerRegistrationChangeRecord(1, 2, fenced=value))
        assert encoded[16] == byte[0]


def test_type_ids_are_kafkas_metadata_api_keys() -> None:
    assert MetadataRecordType.REGISTER_BROKER_RECORD == 0
    assert MetadataRecordType.PARTITION_CHANGE_RECORD == 5
    assert MetadataRecordType.PRODUCER_IDS_RECORD == 15
    assert MetadataRecordType.BROKER_REGISTRATION_CHANGE_RECORD == 17
    assert MetadataRecordType.NO_OP_RECORD == 20
    # KIP-554: UserScramCredentialRecord.json and RemoveUserScramCredentialRecord.json.
    assert MetadataRecordType.USER_SCRAM_CREDENTIAL_RECORD == 11
    assert MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL_RECORD == 22


def test_layout_of_scram_credential_records_is_pinned() -> None:
    """Kafka's field order (name, mechanism, salt, stored key, server key,
    iterations) in this encoding: bytes are an int32 length then the bytes."""
    stored, server = bytes(range(32)), bytes(range(32, 64))
    record = UserScramCredentialRecord("al", ScramMechanism.SCRAM_SHA_256, b"\x01\x02", stored,
                                       server, 8192)
    assert encode_record(record) == (
        struct.pack(">hhh", 11, 0, 2) + b"al" + struct.pack(">b", 1)
        + struct.pack(">i", 2) + b"\x01\x02" + struct.pack(">i", 32) + stored
        + struct.pack(">i", 32) + server + struct.pack(">i", 8192))
    remove = RemoveUserScramCredentialRecord("al", ScramMechanism.SCRAM_SHA_512)
    assert encode_record(remove) == struct.pack(">hhh", 22, 0, 2) + b"al" + struct.pack(">b", 2)


def test_layout_of_acl_records_is_pinned() -> None:
    """KIP-801: Kafka's AccessControlEntryRecord.json (type 18) fields in
    Kafka's order, its enums as Kafka's int8 codes; RemoveAccessControlEntry
    (type 19) is the id alone."""
    assert MetadataRecordType.ACCESS_CONTROL_ENTRY_RECORD == 18
    assert MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY_RECORD == 19
    record = AccessControlEntryRecord(INC, ResourceType.TOPIC, "t", PatternType.PREFIXED,
                                      "User:a", "*", AclOperation.WRITE, AclPermissionType.DENY)
    assert encode_record(record) == (
        struct.pack(">hh", 18, 0) + INC.bytes + struct.pack(">bh", 2, 1) + b"t"
        + struct.pack(">bh", 4, 6) + b"User:a" + struct.pack(">h", 1) + b"*"
        + struct.pack(">bb", 4, 2))
    assert encode_record(RemoveAccessControlEntryRecord(INC)) == (
        struct.pack(">hh", 19, 0) + INC.bytes)
    assert record_fields(record) == {
        "acl_id": str(INC), "resource_type": "TOPIC", "resource_name": "t",
        "pattern_type": "PREFIXED", "principal": "User:a", "host": "*", "operation": "WRITE",
        "permission_type": "DENY"}
    assert AccessControlEntryRecord.from_acl(record.to_acl()) == record


def test_an_acl_record_with_an_unknown_code_is_a_typed_error() -> None:
    good = encode_record(AccessControlEntryRecord(
        INC, ResourceType.GROUP, "g", PatternType.LITERAL, "User:a", "*", AclOperation.READ,
        AclPermissionType.ALLOW))
    for patched, words in ((good[:-1] + b"\x01", "permission_type ANY"),
                           (good[:-1] + b"\x09", "AclPermissionType")):
        with pytest.raises(MetadataRecordError, match=words):
            decode_record(patched)


def test_scram_mechanism_types_are_kafkas() -> None:
    assert {m.mechanism_name: int(m) for m in ScramMechanism} == {
        name: kind for name, (_hash, kind) in SCRAM_MECHANISMS.items()}
    assert ScramMechanism.from_mechanism_name("SCRAM-SHA-512") is ScramMechanism.SCRAM_SHA_512
    with pytest.raises(ValueError):
        ScramMechanism.from_mechanism_name("SCRAM-SHA-1")


def test_scram_secrets_are_redacted_in_dumps_and_reprs() -> None:
    credential = credential_from_password("SCRAM-SHA-512", "pw", 4096, b"salt")
    record = UserScramCredentialRecord("alice", ScramMechanism.SCRAM_SHA_512, credential.salt,
                                       credential.stored_key, credential.server_key, 4096)
    assert record_fields(record) == {
        "name": "alice", "mechanism": "SCRAM_SHA_512", "salt": "(redacted)",
        "stored_key": "(redacted)", "server_key": "(redacted)", "iterations": 4096}
    assert credential.stored_key.hex() not in repr(record)
    assert "salt" not in repr(record) and "iterations=4096" in repr(record)


def test_negative_bytes_length_is_rejected() -> None:
    raw = struct.pack(">hhh", 11, 0, 1) + b"a" + struct.pack(">bi", 1, -2)
    with pytest.raises(MetadataRecordError, match="negative bytes length"):
        decode_record(raw)


# --- typed decode errors ------------------------------------------------------------


def test_unknown_type_is_a_typed_error() -> None:
    with pytest.raises(UnknownRecordTypeError) as info:
        decode_record(struct.pack(">hh", 999, 0))
    assert info.value.type_id == 999


def test_unknown_version_is_a_typed_error() -> None:
    with pytest.raises(UnsupportedRecordVersionError) as info:
        decode_record(struct.pack(">hh", 2, 7) + b"\x00\x01a" + TID.bytes)
    assert (info.value.version, info.value.supported) == (7, (0,))


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x02\x00"])
def test_short_frame_is_rejected(data: bytes) -> None:
    with pytest.raises(MetadataRecordError):
        decode_record(data)


def test_truncated_and_trailing_bytes_are_rejected() -> None:
    encoded = encode_record(TopicRecord("abc", TID))
    for cut in range(4, len(encoded)):
        with pytest.raises(MetadataRecordError):
            decode_record(encoded[:cut])
    with pytest.raises(MetadataRecordError, match="trailing"):
        decode_record(encoded + b"\x00")


def test_bad_boolean_byte_is_rejected() -> None:
    encoded = bytearray(encode_record(FeatureLevelRecord("x", 1)))
    bad = bytearray(encode_record(RegisterBrokerRecord(1, INC, 1)))
    bad[-5] = 2  # in_controlled_shutdown, before the (empty) features' count
    with pytest.raises(MetadataRecordError, match="boolean"):
        decode_record(bytes(bad))
    assert decode_record(bytes(encoded)) == FeatureLevelRecord("x", 1)


def test_field_validation_failure_on_decode_is_a_typed_error() -> None:
    # A PartitionRecord whose leader is not in its ISR.
    raw = bytearray(encode_record(PartitionRecord(0, TID, (1, 2), (1,), leader=1)))
    leader_pos = 4 + 4 + 16 + 12 + 8 + 4 + 4
    raw[leader_pos:leader_pos + 4] = struct.pack(">i", 2)
    with pytest.raises(MetadataRecordError, match="not in the ISR"):
        decode_record(bytes(raw))


def test_invalid_utf8_is_a_typed_error() -> None:
    with pytest.raises(MetadataRecordError, match="UTF-8"):
        decode_record(struct.pack(">hhh", 2, 0, 1) + b"\xff" + TID.bytes)


def test_corrupt_batch_is_a_typed_error() -> None:
    batch = bytearray(build_metadata_batch([NoOpRecord()]))
    batch[-1] ^= 0xFF
    with pytest.raises(MetadataRecordError, match="corrupt"):
        decode_metadata_batch(bytes(batch))


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_garbage_raises_only_the_typed_error(data: bytes) -> None:
    with contextlib.suppress(MetadataRecordError):
        decode_record(data)


@settings(max_examples=800, deadline=None)
@given(records_strategy, st.data())
def test_fuzz_mutated_records_raise_only_the_typed_error(
    record: MetadataRecord, data: st.DataObject
) -> None:
    raw = bytearray(encode_record(record))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    with contextlib.suppress(MetadataRecordError):
        decode_record(bytes(raw))


# --- construction-time validation ------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: TopicRecord("bad name", TID),
        lambda: TopicRecord("..", TID),
        lambda: TopicRecord("x" * 250, TID),
        lambda: TopicRecord("ok", uuid.UUID(int=0)),
        lambda: PartitionRecord(0, TID, (), ()),
        lambda: PartitionRecord(0, TID, (1, 1), (1,), leader=1),
        lambda: PartitionRecord(0, TID, (1, 2), (3,)),
        lambda: PartitionRecord(0, TID, (1, 2), (1,), leader=2),
        lambda: PartitionRecord(0, TID, (1, 2), (1,), (2,), (2,)),
        lambda: PartitionRecord(-1, TID, (1,), (1,)),
        lambda: PartitionRecord(0, TID, (1,), (1,), leader_epoch=-1),
        lambda: PartitionChangeRecord(0, TID, leader=-3),
        lambda: PartitionChangeRecord(0, TID, leader_recovery_state=2),
        lambda: PartitionChangeRecord(0, TID, isr=(1, 1)),
        lambda: RegisterBrokerRecord(-1, INC, 0),
        lambda: RegisterBrokerRecord(1, INC, -1),
        lambda: RegisterBrokerRecord(1, INC, 0, (Endpoint("A", "h", 1), Endpoint("A", "h", 2))),
        lambda: RegisterBrokerRecord(1, INC, 0, fenced=1),  # type: ignore[arg-type]
        lambda: Endpoint("", "h", 1),
        lambda: Endpoint("A", "h", 70000),
        lambda: ConfigRecord(ConfigResourceType.TOPIC, "t", "", "v"),
        lambda: ConfigRecord(3, "t", "k", "v"),  # type: ignore[arg-type]
        lambda: ProducerIdsRecord(-2, 0, 0),
        lambda: ProducerIdsRecord(1, 1, -1),
        lambda: FeatureLevelRecord("", 1),
        lambda: FeatureLevelRecord("f", 1 << 15),
        lambda: FenceBrokerRecord(1, True),  # type: ignore[arg-type]
        lambda: UserScramCredentialRecord("", ScramMechanism.SCRAM_SHA_256, b"", bytes(32),
                                          bytes(32), 4096),
        lambda: UserScramCredentialRecord("u", 3, b"", bytes(32), bytes(32), 4096),  # type: ignore[arg-type]
        lambda: UserScramCredentialRecord("u", ScramMechanism.SCRAM_SHA_512, b"", bytes(32),
                                          bytes(64), 4096),
        lambda: UserScramCredentialRecord("u", ScramMechanism.SCRAM_SHA_256, b"", bytes(32),
                                          bytes(32), 0),
        lambda: UserScramCredentialRecord("u", ScramMechanism.SCRAM_SHA_256, "s",  # type: ignore[arg-type]
                                          bytes(32), bytes(32), 4096),
        lambda: RemoveUserScramCredentialRecord("", ScramMechanism.SCRAM_SHA_256),
        lambda: RemoveUserScramCredentialRecord("u", 0),  # type: ignore[arg-type]
        lambda: AccessControlEntryRecord(INC, ResourceType.ANY, "t", PatternType.LITERAL,
                                         "User:a", "*", AclOperation.READ,
                                         AclPermissionType.ALLOW),
        lambda: AccessControlEntryRecord(INC, ResourceType.TOPIC, "t", PatternType.MATCH,
                                         "User:a", "*", AclOperation.READ,
                                         AclPermissionType.ALLOW),
        lambda: AccessControlEntryRecord(INC, ResourceType.TOPIC, "t", PatternType.LITERAL,
                                         "User:a", "*", AclOperation.UNKNOWN,
                                         AclPermissionType.ALLOW),
        lambda: AccessControlEntryRecord(INC, ResourceType.TOPIC, "t", PatternType.LITERAL,
                                         "User:a", "*", AclOperation.READ, 7),  # type: ignore[arg-type]
        lambda: AccessControlEntryRecord(INC, ResourceType.TOPIC, "", PatternType.LITERAL,
                                         "User:a", "*", AclOperation.READ,
                                         AclPermissionType.ALLOW),
        lambda: AccessControlEntryRecord(INC, ResourceType.TOPIC, "t", PatternType.LITERAL,
                                         None, "*", AclOperation.READ,  # type: ignore[arg-type]
                                         AclPermissionType.ALLOW),
        lambda: RemoveAccessControlEntryRecord("id"),  # type: ignore[arg-type]
    ],
)
def test_invalid_records_cannot_be_built(build: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        build()  # type: ignore[operator]


def test_record_fields_are_json_ready() -> None:
    fields = record_fields(PartitionRecord(0, TID, (1, 2), (1,), leader=1))
    assert fields["topic_id"] == str(TID)
    assert fields["replicas"] == [1, 2]
    assert fields["leader_recovery_state"] == "RECOVERED"
