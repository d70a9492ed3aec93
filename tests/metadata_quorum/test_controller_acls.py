"""ACLs (KIP-801) in the controller: CreateAcls and DeleteAcls with Kafka's
AclControlManager rules and messages, replay into the image, snapshots."""

from __future__ import annotations

import uuid

import pytest
from mq_builders import Ctx, apply_records

from metadata_quorum.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from metadata_quorum.controller import (
    CreateAclsRequest,
    DeleteAclsRequest,
    create_acls,
    delete_acls,
)
from metadata_quorum.controller.acl_control import (
    EXCESSIVE_BATCH,
    MAX_RECORDS_PER_USER_OP,
    new_acl_id,
)
from metadata_quorum.delta import MetadataDelta, MetadataReplayError
from metadata_quorum.image import EMPTY_IMAGE, MetadataProvenance
from metadata_quorum.records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    TopicRecord,
)
from raftlog import kafka_uuid
from raftlog.net.errors import ErrorCode

T, P, Op = ResourceType, PatternType, AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(name: str = "orders", op: AclOperation = Op.READ, permission: AclPermissionType = ALLOW,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = P.LITERAL,
        kind: ResourceType = T.TOPIC) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def create(ctx: Ctx, *bindings: AclBinding) -> list[tuple[ErrorCode, str | None]]:
    result = create_acls(ctx.image, CreateAclsRequest(bindings), ctx.config,
                         next_offset=ctx.next_offset)
    ctx.run(result)
    return [(r.error, r.message) for r in result.response]


def delete(ctx: Ctx, *filters: AclBindingFilter) -> list[tuple[ErrorCode, list[AclBinding]]]:
    result = delete_acls(ctx.image, DeleteAclsRequest(filters))
    ctx.run(result)
    return [(r.error, list(r.matching_acls)) for r in result.response]


def stored(ctx: Ctx) -> list[AclBinding]:
    return [a.binding for a in ctx.image.acls.values()]


OK = (ErrorCode.none, None)


def test_created_acls_replay_into_the_image_with_their_ids() -> None:
    ctx = Ctx()
    first, second = acl(), acl("ord", Op.WRITE, DENY, pattern=P.PREFIXED)
    assert create(ctx, first, second) == [OK, OK]
    assert stored(ctx) == [first, second]
    # Each id is derived from the offset of the record that adds the ACL.
    ids = list(ctx.image.acls)
    assert ids == [new_acl_id(ctx.config, 0, ()), new_acl_id(ctx.config, 1, ())]
    assert all(kafka_uuid.usable(i) for i in ids) and len(set(ids)) == 2
    assert all(ctx.image.acls[i].acl_id == i for i in ids)


def test_an_acl_that_exists_or_repeats_in_the_request_is_success_without_a_record() -> None:
    """Kafka's AclControlManager keeps a set of the ACLs it has: an equal
    binding (all seven fields) is answered success and stored once."""
    ctx = Ctx()
    create(ctx, acl())
    result = create_acls(ctx.image, CreateAclsRequest((acl(), acl(host="10.0.0.1"),
                                                       acl(host="10.0.0.1"))),
                         ctx.config, next_offset=ctx.next_offset)
    assert [r.error for r in result.response] == [ErrorCode.none] * 3
    assert [r.host for r in result.records] == ["10.0.0.1"]  # type: ignore[union-attr]
    ctx.run(result)
    assert stored(ctx) == [acl(), acl(host="10.0.0.1")]


@pytest.mark.parametrize("binding,message", [
    # AclApis.handleCreateAcls, before the controller:
    (acl("x", Op.ALTER, kind=T.CLUSTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("", Op.ALTER, kind=T.CLUSTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(""), "Invalid empty resource name"),
    (acl("", kind=T.ANY), "Invalid empty resource name"),
    # AclControlManager.validateNewAcl, in its order:
    (acl(kind=T.ANY, pattern=P.MATCH), "Invalid resourceType ANY"),
    (acl(kind=T.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl(pattern=P.ANY, op=Op.ANY), "Invalid patternType ANY"),
    (acl(pattern=P.MATCH), "Invalid patternType MATCH"),
    (acl(pattern=P.UNKNOWN), "Invalid patternType UNKNOWN"),
    (acl(op=Op.ANY, permission=AclPermissionType.ANY), "Invalid operation ANY"),
    (acl(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (acl(permission=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (acl(principal="alice"), "Could not parse principal from `alice` (no colon is present "
                             "separating the principal type from the principal name)"),
    # The record encoding's limit.
    (acl("x" * 40_000), "Resource name is longer than 32767 bytes"),
    (acl(principal="User:" + "a" * 40_000), "Principal is longer than 32767 bytes"),
])
def test_invalid_acls_are_refused_with_kafkas_messages(binding: AclBinding, message: str) -> None:
    ctx = Ctx()
    assert create(ctx, binding, acl("fine")) == [(ErrorCode.invalid_request, message), OK]
    assert stored(ctx) == [acl("fine")]


def test_what_kafka_accepts_is_accepted() -> None:
    """Kafka checks a principal for a colon only, and the host not at all."""
    ctx = Ctx()
    odd = [acl(principal="User:"), acl(principal=":x"), acl(host=""), acl("*"),
           acl(CLUSTER_NAME, Op.CLUSTER_ACTION, kind=T.CLUSTER),
           acl("k", Op.ALL, kind=T.TRANSACTIONAL_ID), acl("u", Op.CREATE_TOKENS, kind=T.USER)]
    assert create(ctx, *odd) == [OK] * len(odd)
    assert stored(ctx) == odd


def test_more_than_ten_thousand_new_acls_store_nothing() -> None:
    """Kafka: MAX_RECORDS_PER_USER_OP, then POLICY_VIOLATION for every binding."""
    ctx = Ctx()
    many = [acl(f"t{i}") for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    answers = create(ctx, *many, acl(""))
    assert set(answers) == {(ErrorCode.policy_violation, EXCESSIVE_BATCH)}
    assert len(answers) == len(many) + 1 and not ctx.image.acls
    # Repeats count once: 10,001 equal bindings are one new ACL.
    assert create(ctx, *[acl()] * (MAX_RECORDS_PER_USER_OP + 1))[0] == OK
    assert stored(ctx) == [acl()]


def test_filters_delete_what_they_match_and_an_acl_matched_twice_is_removed_once() -> None:
    ctx = Ctx()
    orders, prefixed, wildcard, bob = (acl(), acl("ord", pattern=P.PREFIXED), acl("*"),
                                       acl("orders", Op.WRITE, principal="User:bob"))
    create(ctx, orders, prefixed, wildcard, bob)
    match = AclBindingFilter(T.TOPIC, "orders", P.MATCH, principal="User:alice")
    literal = AclBindingFilter(T.TOPIC, "orders", P.LITERAL)
    result = delete_acls(ctx.image, DeleteAclsRequest((match, literal)))
    assert [(r.error, list(r.matching_acls)) for r in result.response] == [
        (ErrorCode.none, [orders, prefixed, wildcard]), (ErrorCode.none, [orders, bob])]
    assert [type(r) for r in result.records] == [RemoveAccessControlEntryRecord] * 4
    assert len({r.acl_id for r in result.records}) == 4  # type: ignore[union-attr]
    ctx.run(result)
    assert not ctx.image.acls
    assert delete(ctx, AclBindingFilter()) == [(ErrorCode.none, [])]


@pytest.mark.parametrize("acl_filter,message", [
    (AclBindingFilter(resource_type=T.UNKNOWN), "Unknown patternFilter."),
    (AclBindingFilter(pattern_type=P.UNKNOWN), "Unknown patternFilter."),
    (AclBindingFilter(operation=Op.UNKNOWN), "Unknown entryFilter."),
    (AclBindingFilter(permission=AclPermissionType.UNKNOWN), "Unknown entryFilter."),
])
def test_an_unknown_filter_is_refused_and_the_others_still_apply(
    acl_filter: AclBindingFilter, message: str
) -> None:
    ctx = Ctx()
    create(ctx, acl())
    result = delete_acls(ctx.image, DeleteAclsRequest((acl_filter, AclBindingFilter())))
    assert [(r.error, r.message) for r in result.response] == [
        (ErrorCode.invalid_request, message), (ErrorCode.none, None)]
    ctx.run(result)
    assert not ctx.image.acls


def test_replay_keeps_the_acls_mapping_while_no_acl_changes() -> None:
    """The broker's authorizer is rebuilt when the mapping object changes."""
    ctx = Ctx()
    create(ctx, acl())
    before = ctx.image.acls
    after = apply_records(ctx.image, [TopicRecord("t", uuid.UUID(int=9))])
    assert after.acls is before
    ctx.image = after
    create(ctx, acl("other"))
    assert ctx.image.acls is not before and len(ctx.image.acls) == 2


def test_removing_an_unknown_acl_is_a_replay_error() -> None:
    delta = MetadataDelta(EMPTY_IMAGE)
    with pytest.raises(MetadataReplayError, match="no ACL"):
        delta.replay(RemoveAccessControlEntryRecord(uuid.UUID(int=5)))
    # An add then a remove in one delta is fine.
    record = AccessControlEntryRecord(uuid.UUID(int=6), T.GROUP, "g", P.LITERAL, "User:a", "*",
                                      Op.READ, ALLOW)
    delta.replay(record)
    delta.replay(RemoveAccessControlEntryRecord(record.acl_id))
    assert delta.apply(MetadataProvenance(1, 1)).acls == {}


def test_a_snapshot_keeps_every_acl_and_its_order() -> None:
    ctx = Ctx()
    create(ctx, acl("b"), acl("a"), acl("c", Op.ALL, DENY, pattern=P.PREFIXED))
    delete(ctx, AclBindingFilter(T.TOPIC, "a"))
    create(ctx, acl("a"))
    records = ctx.image.to_records()
    assert [type(r) for r in records] == [AccessControlEntryRecord] * 3
    reloaded = apply_records(EMPTY_IMAGE, records)
    assert list(reloaded.acls.items()) == list(ctx.image.acls.items())
    assert stored(ctx) == [acl("b"), acl("c", Op.ALL, DENY, pattern=P.PREFIXED), acl("a")]


def test_new_ids_avoid_taken_ones() -> None:
    config = Ctx().config
    first = new_acl_id(config, 7, ())
    assert new_acl_id(config, 7, ()) == first  # pure
    second = new_acl_id(config, 7, {first})
    assert second != first and kafka_uuid.usable(second)
