"""Delegation tokens (KIP-48) in the metadata log: the two records (layout,
round trips, validation), replay into the image, snapshots, and the
helpers of `metadata_quorum.delegation_tokens`."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.delegation_tokens import find_token_by_hmac, principal_type, token_hmac
from metadata_quorum.delta import MetadataDelta, MetadataReplayError
from metadata_quorum.dump import format_record_payload
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from metadata_quorum.records import (
    DelegationTokenRecord,
    MetadataRecordError,
    MetadataRecordType,
    RemoveDelegationTokenRecord,
    build_metadata_batch,
    decode_metadata_batch,
    decode_record,
    encode_record,
    record_fields,
)


def token(token_id: str = "tok1", *, owner: str = "User:alice", requester: str = "User:alice",
          renewers: tuple[str, ...] = (), expiration: int = 2_000) -> DelegationTokenRecord:
    return DelegationTokenRecord(owner, requester, renewers, 1_000, 5_000, expiration, token_id)


def replay(image: MetadataImage, *records: DelegationTokenRecord | RemoveDelegationTokenRecord,
           ) -> MetadataImage:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(MetadataProvenance(image.provenance.last_offset + len(records), 1))


# --- the records --------------------------------------------------------------------


def test_type_ids_are_kafkas_metadata_api_keys() -> None:
    # DelegationTokenRecord.json (apiKey 10), RemoveDelegationTokenRecord.json (apiKey 26).
    assert MetadataRecordType.DELEGATION_TOKEN_RECORD == 10
    assert MetadataRecordType.REMOVE_DELEGATION_TOKEN_RECORD == 26


def test_layout_of_delegation_token_records_is_pinned() -> None:
    """Kafka's field order (owner, requester, renewers, issue, max, expiration,
    token id); a string array is an int32 count, then the strings."""
    record = DelegationTokenRecord("User:a", "User:b", ("User:c", "User:dd"), 1, 2, 3, "t")
    assert encode_record(record) == (
        struct.pack(">hhh", 10, 0, 6) + b"User:a" + struct.pack(">h", 6) + b"User:b"
        + struct.pack(">ih", 2, 6) + b"User:c" + struct.pack(">h", 7) + b"User:dd"
        + struct.pack(">qqq", 1, 2, 3) + struct.pack(">h", 1) + b"t")
    assert encode_record(RemoveDelegationTokenRecord("t")) == (
        struct.pack(">hhh", 26, 0, 1) + b"t")


principals = st.tuples(st.text(min_size=1, max_size=8).filter(lambda s: ":" not in s),
                       st.text(min_size=1, max_size=8)).map(lambda p: f"{p[0]}:{p[1]}")
int64s = st.integers(-(2**63), 2**63 - 1)
token_records = st.builds(
    DelegationTokenRecord, principals, principals, st.lists(principals, max_size=4).map(tuple),
    int64s, int64s, int64s, st.text(min_size=1, max_size=22))


@settings(max_examples=300, deadline=None)
@given(token_records)
def test_token_records_round_trip(record: DelegationTokenRecord) -> None:
    assert decode_record(encode_record(record)) == record
    remove = RemoveDelegationTokenRecord(record.token_id)
    assert decode_record(encode_record(remove)) == remove


def test_token_records_round_trip_in_a_batch() -> None:
    records = [token("a", renewers=("User:bob",)), RemoveDelegationTokenRecord("a")]
    batch = decode_metadata_batch(build_metadata_batch(records, base_offset=40, epoch=2))
    assert batch.records == ((40, records[0]), (41, records[1]))


@settings(max_examples=500, deadline=None)
@given(token_records, st.data())
def test_fuzz_mutated_token_records_raise_only_the_typed_error(
    record: DelegationTokenRecord, data: st.DataObject
) -> None:
    raw = bytearray(encode_record(record))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(4, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    with contextlib.suppress(MetadataRecordError):
        decoded = decode_record(bytes(raw))
        # What still decodes is a valid record: principals keep their shape.
        assert isinstance(decoded, DelegationTokenRecord)
        principal_type(decoded.owner)


def test_a_bad_renewer_count_is_a_typed_error() -> None:
    good = encode_record(DelegationTokenRecord("User:a", "User:a", (), 1, 2, 3, "t"))
    count_at = 4 + 8 + 8  # frame, then owner and requester ("User:a" each)
    for count in (-1, 1 << 30):
        raw = good[:count_at] + struct.pack(">i", count) + good[count_at + 4:]
        with pytest.raises(MetadataRecordError, match="bad string array count"):
            decode_record(raw)


def test_a_malformed_principal_on_the_wire_is_a_typed_error() -> None:
    raw = encode_record(DelegationTokenRecord("User:a", "User:a", (), 1, 2, 3, "t"))
    with pytest.raises(MetadataRecordError, match="principalType:principalName"):
        decode_record(raw.replace(b"User:a", b"User_a", 1))


@pytest.mark.parametrize(
    "build",
    [
        lambda: token(""),
        lambda: token(owner="alice"),
        lambda: token(owner=":alice"),
        lambda: token(owner="User:"),
        lambda: token(requester=""),
        lambda: token(renewers=("User:bob", "bob")),
        lambda: token(renewers=["User:bob"]),  # type: ignore[arg-type]
        lambda: token(renewers=(None,)),  # type: ignore[arg-type]
        lambda: token(expiration=1 << 63),
        lambda: DelegationTokenRecord("User:a", "User:a", (), 1.5, 2, 3, "t"),  # type: ignore[arg-type]
        lambda: DelegationTokenRecord("User:a", "User:a", (), True, 2, 3, "t"),
        lambda: RemoveDelegationTokenRecord(""),
        lambda: RemoveDelegationTokenRecord(7),  # type: ignore[arg-type]
    ],
)
def test_invalid_token_records_cannot_be_built(build: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        build()  # type: ignore[operator]


def test_token_records_dump_as_json_with_the_renewers_as_a_list() -> None:
    record = token("tok", renewers=("User:bob",))
    assert record_fields(record) == {
        "owner": "User:alice", "requester": "User:alice", "renewers": ["User:bob"],
        "issue_timestamp": 1_000, "max_timestamp": 5_000, "expiration_timestamp": 2_000,
        "token_id": "tok"}
    assert format_record_payload(encode_record(RemoveDelegationTokenRecord("tok"))) == (
        '{"type":"REMOVE_DELEGATION_TOKEN_RECORD","version":0,"data":{"token_id":"tok"}}')


# --- replay, image, snapshot ---------------------------------------------------------


def test_a_token_record_adds_the_token_and_a_later_one_replaces_it() -> None:
    image = replay(EMPTY_IMAGE, token("a"), token("b", owner="User:bob"))
    assert dict(image.delegation_tokens) == {"a": token("a"), "b": token("b", owner="User:bob")}
    renewed = token("a", expiration=4_000)
    image = replay(image, renewed)
    assert image.delegation_tokens["a"] == renewed
    assert list(image.delegation_tokens) == ["a", "b"]  # a renewal keeps its place


def test_a_remove_record_removes_the_token() -> None:
    image = replay(EMPTY_IMAGE, token("a"), token("b"))
    image = replay(image, RemoveDelegationTokenRecord("a"))
    assert list(image.delegation_tokens) == ["b"]
    # Created and removed in one delta: never in the image.
    image = replay(image, token("c"), RemoveDelegationTokenRecord("c"))
    assert list(image.delegation_tokens) == ["b"]


def test_removing_a_token_that_is_not_there_cannot_replay() -> None:
    """As for SCRAM credentials: the controller removes only tokens it has,
    so a miss means the log and this node disagree (a broken invariant)."""
    delta = MetadataDelta(replay(EMPTY_IMAGE, token("a")))
    with pytest.raises(MetadataReplayError, match="no delegation token 'zz' to remove"):
        delta.replay(RemoveDelegationTokenRecord("zz"))
    delta.replay(RemoveDelegationTokenRecord("a"))
    with pytest.raises(MetadataReplayError):
        delta.replay(RemoveDelegationTokenRecord("a"))  # the delta already removed it


def test_the_delta_sees_its_own_token_records() -> None:
    delta = MetadataDelta(replay(EMPTY_IMAGE, token("a")))
    assert delta.delegation_token("a") == token("a")
    delta.replay(token("b"))
    assert delta.delegation_token("b") == token("b")
    delta.replay(RemoveDelegationTokenRecord("a"))
    assert delta.delegation_token("a") is None


def test_an_unchanged_token_map_is_shared_between_images() -> None:
    image = replay(EMPTY_IMAGE, token("a"))
    after = MetadataDelta(image).apply(MetadataProvenance(image.provenance.last_offset + 1, 1))
    assert after.delegation_tokens is image.delegation_tokens
    with pytest.raises(TypeError):
        image.delegation_tokens["x"] = token("x")  # type: ignore[index]


def test_tokens_survive_a_snapshot() -> None:
    image = replay(EMPTY_IMAGE, token("a", renewers=("User:bob", "User:carol")),
                   token("b", owner="User:bob", requester="User:admin"),
                   token("a", renewers=("User:bob", "User:carol"), expiration=3_000),
                   token("c"), RemoveDelegationTokenRecord("c"))
    records = image.to_records()
    assert [r for r in records if isinstance(r, DelegationTokenRecord)] == [
        token("a", renewers=("User:bob", "User:carol"), expiration=3_000),
        token("b", owner="User:bob", requester="User:admin")]
    # Through the encoding, as a snapshot stores them.
    decoded = [record for _offset, record in
               decode_metadata_batch(build_metadata_batch(records)).records]
    reloaded = MetadataDelta(EMPTY_IMAGE)
    for record in decoded:
        reloaded.replay(record)
    assert reloaded.apply(image.provenance) == image


# --- helpers --------------------------------------------------------------------------


def test_token_hmac_is_hmac_sha512_of_the_token_id_under_the_secret() -> None:
    # RFC 4231 test case 2: key "Jefe".
    assert token_hmac("Jefe", "what do ya want for nothing?").hex() == (
        "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554"
        "9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737")
    # The key and the id as UTF-8 (not Latin-1), as Kafka's DelegationTokenManager.
    assert token_hmac("clé", "jéton") == hmac.new(
        "clé".encode(), "jéton".encode(), hashlib.sha512).digest()
    assert token_hmac("clé", "jéton") != hmac.new(
        "clé".encode("latin-1"), "jéton".encode("latin-1"), hashlib.sha512).digest()


def test_find_token_by_hmac_matches_only_the_hmac_under_this_secret() -> None:
    tokens = replay(EMPTY_IMAGE, token("a"), token("b")).delegation_tokens
    assert find_token_by_hmac(tokens, "secret", token_hmac("secret", "b")) == token("b")
    assert find_token_by_hmac(tokens, "secret", token_hmac("other", "b")) is None
    assert find_token_by_hmac(tokens, "secret", token_hmac("secret", "b")[:-1]) is None
    assert find_token_by_hmac(tokens, "secret", b"") is None
    assert find_token_by_hmac({}, "secret", token_hmac("secret", "a")) is None


@pytest.mark.parametrize(("principal", "kind"), [
    ("User:alice", "User"), ("Group:ops", "Group"), ("User:CN=a:b", "User")])
def test_principal_type_is_the_part_before_the_first_colon(principal: str, kind: str) -> None:
    assert principal_type(principal) == kind


@pytest.mark.parametrize("principal", ["alice", "", ":alice", "User:"])
def test_principal_type_refuses_what_is_not_type_colon_name(principal: str) -> None:
    with pytest.raises(ValueError, match="principalType:principalName"):
        principal_type(principal)
