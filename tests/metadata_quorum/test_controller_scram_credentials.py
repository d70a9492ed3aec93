"""SCRAM credentials (KIP-554): AlterUserScramCredentials in the controller
(Kafka's ScramControlManager checks and messages), replay into the image,
snapshots, and DescribeUserScramCredentials over the image."""

from __future__ import annotations

import pytest
from mq_builders import Ctx

from metadata_quorum.controller import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    alter_user_scram_credentials,
)
from metadata_quorum.delta import MetadataDelta, MetadataReplayError
from metadata_quorum.image import EMPTY_IMAGE, MetadataProvenance
from metadata_quorum.records import (
    RemoveUserScramCredentialRecord,
    ScramMechanism,
    UserScramCredentialRecord,
)
from metadata_quorum.scram_credentials import describe_user_scram_credentials
from raftlog.net.errors import ErrorCode
from raftlog.security.scram import credential_from_password, salted_password

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SALT = b"0123456789abcdef0123456789abcdef"


def upsert(user: str, mechanism: int = SHA256, iterations: int = 4096,
           password: str = "secret") -> ScramCredentialUpsertion:
    """Salted as a client would (with 1 iteration when out of bounds: refused anyway)."""
    name = ScramMechanism(mechanism).mechanism_name if mechanism in (1, 2) else "SCRAM-SHA-256"
    rounds = iterations if 4096 <= iterations <= 16384 else 1
    return ScramCredentialUpsertion(user, mechanism, iterations, SALT,
                                    salted_password(name, password, SALT, rounds))


def delete(user: str, mechanism: int = SHA256) -> ScramCredentialDeletion:
    return ScramCredentialDeletion(user, mechanism)


def alter(ctx: Ctx, *alterations: ScramCredentialDeletion | ScramCredentialUpsertion,
          ) -> list[tuple[str, ErrorCode, str | None]]:
    request = AlterUserScramCredentialsRequest(
        deletions=tuple(a for a in alterations if isinstance(a, ScramCredentialDeletion)),
        upsertions=tuple(a for a in alterations if isinstance(a, ScramCredentialUpsertion)))
    result = alter_user_scram_credentials(ctx.image, request)
    ctx.run(result)
    return [(r.user, r.error, r.message) for r in result.response]


def test_upsertions_derive_the_keys_and_replay_into_the_image() -> None:
    ctx = Ctx()
    assert alter(ctx, upsert("alice", SHA256, 8192), upsert("alice", SHA512),
                 upsert("bob", SHA512, password="other")) == [
        ("alice", ErrorCode.none, None), ("bob", ErrorCode.none, None)]
    # The controller stored what the client would derive from the password
    # itself: RFC 5802's StoredKey and ServerKey, with the client's salt.
    assert ctx.image.scram_credential("alice", "SCRAM-SHA-256") == credential_from_password(
        "SCRAM-SHA-256", "secret", 8192, SALT)
    assert ctx.image.scram_credential("alice", "SCRAM-SHA-512") == credential_from_password(
        "SCRAM-SHA-512", "secret", 4096, SALT)
    assert ctx.image.scram_credential("bob", "SCRAM-SHA-512") == credential_from_password(
        "SCRAM-SHA-512", "other", 4096, SALT)
    assert ctx.image.scram_credential("bob", "SCRAM-SHA-256") is None
    assert ctx.image.scram_credential("carol", "SCRAM-SHA-512") is None
    assert set(ctx.image.scram_credentials) == {
        ("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-512")}


def test_an_upsertion_replaces_and_a_deletion_removes_one_mechanism() -> None:
    ctx = Ctx()
    alter(ctx, upsert("alice", SHA256), upsert("alice", SHA512))
    assert alter(ctx, upsert("alice", SHA256, 10_000, password="new")) == [
        ("alice", ErrorCode.none, None)]
    replaced = ctx.image.scram_credential("alice", "SCRAM-SHA-256")
    assert replaced is not None and replaced.iterations == 10_000
    # One request may delete one mechanism and set another for the same user.
    assert alter(ctx, delete("alice", SHA512), upsert("alice", SHA256, 4096)) == [
        ("alice", ErrorCode.none, None)]
    assert ctx.image.scram_credential("alice", "SCRAM-SHA-512") is None
    assert alter(ctx, delete("alice", SHA256)) == [("alice", ErrorCode.none, None)]
    assert dict(ctx.image.scram_credentials) == {}


@pytest.mark.parametrize(("alteration", "error", "message"), [
    (upsert(""), ErrorCode.unacceptable_credential, "Username must not be empty"),
    (delete(""), ErrorCode.unacceptable_credential, "Username must not be empty"),
    (upsert("u", mechanism=3), ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
    (delete("u", mechanism=0), ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
    (upsert("u", iterations=4095), ErrorCode.unacceptable_credential, "Too few iterations"),
    (upsert("u", SHA512, iterations=100), ErrorCode.unacceptable_credential,
     "Too few iterations"),
    (upsert("u", iterations=16385), ErrorCode.unacceptable_credential, "Too many iterations"),
    (delete("u"), ErrorCode.resource_not_found,
     "Attempt to delete a user credential that does not exist"),
])
def test_kafkas_checks_and_messages(
    alteration: ScramCredentialDeletion | ScramCredentialUpsertion, error: ErrorCode,
    message: str,
) -> None:
    ctx = Ctx()
    before = ctx.image
    assert alter(ctx, alteration) == [(alteration.name, error, message)]
    assert ctx.image.scram_credentials == before.scram_credentials == {}


def test_iteration_bounds_are_inclusive() -> None:
    ctx = Ctx()
    assert alter(ctx, upsert("low", iterations=4096), upsert("high", SHA512, 16384)) == [
        ("low", ErrorCode.none, None), ("high", ErrorCode.none, None)]


@pytest.mark.parametrize("alterations", [
    (upsert("alice"), upsert("alice")),
    (delete("alice"), upsert("alice")),
    (delete("alice"), delete("alice")),
])
def test_the_same_credential_twice_is_a_duplicate_for_that_user(
    alterations: tuple[ScramCredentialDeletion | ScramCredentialUpsertion, ...],
) -> None:
    ctx = Ctx()
    alter(ctx, upsert("alice"))
    before = ctx.image.scram_credentials
    assert alter(ctx, *alterations, upsert("bob")) == [
        ("alice", ErrorCode.duplicate_resource,
         "A user credential cannot be altered twice in the same request"),
        ("bob", ErrorCode.none, None)]
    assert ctx.image.scram_credential("alice", "SCRAM-SHA-256") == before[
        ("alice", "SCRAM-SHA-256")]
    assert ctx.image.scram_credential("bob", "SCRAM-SHA-256") is not None


def test_a_users_alterations_are_all_or_nothing() -> None:
    ctx = Ctx()
    alter(ctx, upsert("alice", SHA256))
    # A good SHA-512 upsertion, a bad SHA-256 one: nothing happens to alice;
    # bob, in the same request, is set.
    assert alter(ctx, upsert("alice", SHA512), upsert("alice", SHA256, 100), upsert("bob")) == [
        ("alice", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("bob", ErrorCode.none, None)]
    assert ctx.image.scram_credential("alice", "SCRAM-SHA-512") is None
    # A deletion of a missing credential refuses the user's upsertion too.
    assert alter(ctx, delete("carol", SHA512), upsert("carol", SHA256)) == [
        ("carol", ErrorCode.resource_not_found,
         "Attempt to delete a user credential that does not exist")]
    assert ctx.image.scram_credential("carol", "SCRAM-SHA-256") is None


def test_the_command_mutates_nothing_and_only_successes_become_records() -> None:
    ctx = Ctx()
    image = ctx.image
    result = alter_user_scram_credentials(image, AlterUserScramCredentialsRequest(
        deletions=(delete("nobody"),), upsertions=(upsert("alice"), upsert("bad", 9))))
    assert image.scram_credentials == {}
    assert [type(r) for r in result.records] == [UserScramCredentialRecord]
    assert [r.user for r in result.response] == ["nobody", "alice", "bad"]
    # The salted password is not in the record, only the derived keys.
    record = result.records[0]
    assert isinstance(record, UserScramCredentialRecord)
    assert upsert("alice").salted_password not in (record.stored_key, record.server_key)


def test_a_users_deletions_are_written_before_its_upsertions() -> None:
    ctx = Ctx()
    alter(ctx, upsert("alice", SHA512))
    result = alter_user_scram_credentials(ctx.image, AlterUserScramCredentialsRequest(
        deletions=(delete("alice", SHA512),), upsertions=(upsert("alice", SHA256),)))
    assert [type(r) for r in result.records] == [RemoveUserScramCredentialRecord,
                                                 UserScramCredentialRecord]


def test_removing_a_credential_that_is_not_there_cannot_replay() -> None:
    delta = MetadataDelta(EMPTY_IMAGE)
    with pytest.raises(MetadataReplayError, match="no SCRAM-SHA-256 credential"):
        delta.replay(RemoveUserScramCredentialRecord("alice", SHA256))


def test_credentials_survive_a_snapshot() -> None:
    ctx = Ctx()
    alter(ctx, upsert("alice", SHA256, 8192), upsert("alice", SHA512), upsert("bob", SHA512))
    alter(ctx, delete("alice", SHA512))
    records = ctx.image.to_records()
    assert [type(r) for r in records].count(UserScramCredentialRecord) == 2
    delta = MetadataDelta(EMPTY_IMAGE)
    for record in records:
        delta.replay(record)
    assert delta.apply(ctx.image.provenance) == ctx.image


def test_an_unchanged_credential_map_is_shared_between_images() -> None:
    ctx = Ctx()
    alter(ctx, upsert("alice"))
    before = ctx.image.scram_credentials
    after = MetadataDelta(ctx.image).apply(
        MetadataProvenance(ctx.image.provenance.last_offset + 1, 0))
    assert after.scram_credentials is before


def test_describe_every_user_or_the_named_ones_like_kafka() -> None:
    ctx = Ctx()
    alter(ctx, upsert("bob", SHA512), upsert("alice", SHA512), upsert("alice", SHA256, 8192))
    credentials = ctx.image.scram_credentials
    for everyone in (None, []):
        described = describe_user_scram_credentials(credentials, everyone)
        assert [(d.user, d.error, d.credential_infos) for d in described] == [
            ("alice", ErrorCode.none, ((SHA256, 8192), (SHA512, 4096))),
            ("bob", ErrorCode.none, ((SHA512, 4096),))]
    named = describe_user_scram_credentials(credentials, ["bob", "carol", "alice", "alice"])
    assert [(d.user, d.error, d.message, d.credential_infos) for d in named] == [
        ("bob", ErrorCode.none, None, ((SHA512, 4096),)),
        ("carol", ErrorCode.resource_not_found,
         "Attempt to describe a user credential that does not exist: carol", ()),
        ("alice", ErrorCode.duplicate_resource,
         "Cannot describe SCRAM credentials for the same user twice in a single request: alice",
         ())]
    assert describe_user_scram_credentials(EMPTY_IMAGE.scram_credentials, None) == ()
