"""metadata_quorum.acls: the standard authorizer's decisions (KIP-801) and
ACL filters, including a model check against a brute-force reading of
Kafka's rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    parse_principal,
    validate_new_acl,
)

A = AclOperation
T = ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(name: str, op: AclOperation = A.READ, permission: AclPermissionType = ALLOW,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = LIT,
        kind: ResourceType = T.TOPIC) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def can(authorizer: Authorizer, op: AclOperation, name: str, principal: str = "User:alice",
        host: str = "10.0.0.1", kind: ResourceType = T.TOPIC) -> bool:
    return authorizer.authorize(principal, host, op, kind, name)


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not can(Authorizer([]), A.READ, "orders")
    assert can(Authorizer([], allow_if_no_acl=True), A.READ, "orders")


def test_super_users_may_do_anything_even_under_deny() -> None:
    authorizer = Authorizer([acl("orders", A.ALL, DENY, principal="User:admin")],
                            super_users=frozenset({"User:admin"}))
    assert can(authorizer, A.DELETE, "orders", principal="User:admin")
    assert not can(authorizer, A.DELETE, "orders", principal="User:bob")


def test_literal_prefixed_and_wildcard_patterns() -> None:
    authorizer = Authorizer([acl("orders"), acl("pay", pattern=PRE), acl("*", A.WRITE)])
    assert can(authorizer, A.READ, "orders")
    assert not can(authorizer, A.READ, "orders2")  # a literal is not a prefix
    assert can(authorizer, A.READ, "payments") and can(authorizer, A.READ, "pay")
    assert not can(authorizer, A.READ, "pa")
    assert can(authorizer, A.WRITE, "anything")


def test_deny_beats_allow_and_allow_implies_describe_only() -> None:
    authorizer = Authorizer([acl("orders", A.ALL), acl("orders", A.WRITE, DENY)])
    assert can(authorizer, A.READ, "orders")
    assert not can(authorizer, A.WRITE, "orders")
    implied = Authorizer([acl("t", A.WRITE), acl("c", A.ALTER_CONFIGS)])
    assert can(implied, A.DESCRIBE, "t") and can(implied, A.DESCRIBE_CONFIGS, "c")
    assert not can(implied, A.READ, "t")
    # A DENY implies nothing: DENY READ does not deny DESCRIBE.
    deny_read = Authorizer([acl("t", A.DESCRIBE), acl("t", A.READ, DENY)])
    assert can(deny_read, A.DESCRIBE, "t") and not can(deny_read, A.READ, "t")


def test_principal_and_host_must_match() -> None:
    authorizer = Authorizer([acl("t", host="10.0.0.1"), acl("t", A.WRITE, principal="User:*")])
    assert can(authorizer, A.READ, "t", host="10.0.0.1")
    assert not can(authorizer, A.READ, "t", host="10.0.0.2")
    assert not can(authorizer, A.READ, "t", principal="User:bob")
    assert can(authorizer, A.WRITE, "t", principal="User:bob")


def test_an_acl_for_someone_else_makes_the_resource_closed() -> None:
    authorizer = Authorizer([acl("t", principal="User:bob")], allow_if_no_acl=True)
    assert not can(authorizer, A.READ, "t")  # t has ACLs: allow-everyone no longer applies
    assert can(authorizer, A.READ, "other")


def test_resource_types_are_separate() -> None:
    authorizer = Authorizer([acl("g1", kind=T.GROUP)])
    assert can(authorizer, A.READ, "g1", kind=T.GROUP)
    assert not can(authorizer, A.READ, "g1", kind=T.TOPIC)


def test_authorize_any_follows_kip_679() -> None:
    allow_one = Authorizer([acl("t1", A.WRITE)])
    assert allow_one.authorize_any("User:alice", "h", A.WRITE, T.TOPIC)
    assert not allow_one.authorize_any("User:bob", "h", A.WRITE, T.TOPIC)
    # A DENY on the same literal, a covering prefix or the wildcard cancels it.
    for deny in (acl("t1", A.WRITE, DENY), acl("t", A.WRITE, DENY, pattern=PRE),
                 acl("*", A.WRITE, DENY)):
        assert not Authorizer([acl("t1", A.WRITE), deny]).authorize_any(
            "User:alice", "h", A.WRITE, T.TOPIC), deny
    # A narrower DENY leaves the prefixed ALLOW standing.
    assert Authorizer([acl("t", A.WRITE, pattern=PRE), acl("t1", A.WRITE, DENY)]).authorize_any(
        "User:alice", "h", A.WRITE, T.TOPIC)
    assert Authorizer([], allow_if_no_acl=True).authorize_any("User:x", "h", A.WRITE, T.TOPIC)


def test_filters_select_like_kafkas() -> None:
    acls = [acl("orders"), acl("ord", pattern=PRE), acl("*"), acl("other"),
            acl("g", kind=T.GROUP)]
    match = AclBindingFilter(T.TOPIC, "orders", PatternType.MATCH)
    assert [a.resource_name for a in acls if match.matches(a)] == ["orders", "ord", "*"]
    literal = AclBindingFilter(T.TOPIC, "orders", LIT)
    assert [a.resource_name for a in acls if literal.matches(a)] == ["orders"]
    assert sum(AclBindingFilter().matches(a) for a in acls) == 5
    assert [a.resource_name for a in acls
            if AclBindingFilter(T.GROUP).matches(a)] == ["g"]
    assert not AclBindingFilter(principal="User:bob").matches(acls[0])


@pytest.mark.parametrize("binding,words", [
    (acl("t", kind=T.ANY), "Invalid resourceType"),
    (acl("t", pattern=PatternType.MATCH), "Invalid patternType"),
    (acl("t", A.ANY), "Invalid operation"),
    (acl("t", permission=AclPermissionType.ANY), "Invalid permissionType"),
    (acl("", A.READ), "Invalid empty resource name"),
    (acl("x", A.ALTER, kind=T.CLUSTER), CLUSTER_NAME),
    (acl("t", principal="alice"), "no colon is present"),
])
def test_invalid_new_acls_are_named(binding: AclBinding, words: str) -> None:
    reason = validate_new_acl(binding)
    assert reason is not None and words in reason


def test_a_valid_acl_and_principals() -> None:
    assert validate_new_acl(acl(CLUSTER_NAME, A.ALTER, kind=T.CLUSTER)) is None
    assert parse_principal("User:CN=a,O=b") == ("User", "CN=a,O=b")


# --- model check ------------------------------------------------------------------

NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
OPS = [A.READ, A.WRITE, A.DESCRIBE, A.ALL, A.ALTER, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS]

acls_strategy = st.lists(st.builds(
    AclBinding,
    st.just(T.TOPIC), st.sampled_from(NAMES), st.sampled_from([LIT, PRE]),
    st.sampled_from(PRINCIPALS), st.sampled_from(["*", "h1"]), st.sampled_from(OPS),
    st.sampled_from([ALLOW, DENY])), max_size=8)


def reference(acls: list[AclBinding], principal: str, host: str, op: AclOperation,
              name: str, allow_if_no_acl: bool) -> bool:
    """Kafka's rules read literally, over every ACL."""
    def pattern_matches(a: AclBinding) -> bool:
        if a.pattern_type is LIT:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    def op_matches(a: AclBinding) -> bool:
        if a.operation in (A.ALL, op):
            return True
        if a.permission is ALLOW and op is A.DESCRIBE:
            return a.operation in (A.READ, A.WRITE, A.DELETE, A.ALTER)
        if a.permission is ALLOW and op is A.DESCRIBE_CONFIGS:
            return a.operation is A.ALTER_CONFIGS
        return False

    on_resource = [a for a in acls if pattern_matches(a)]
    applying = [a for a in on_resource if a.principal in (principal, "User:*")
                and a.host in ("*", host) and op_matches(a)]
    if any(a.permission is DENY for a in applying):
        return False
    if any(a.permission is ALLOW for a in applying):
        return True
    return not on_resource and allow_if_no_acl


@settings(max_examples=300, deadline=None)
@given(acls_strategy, st.sampled_from(PRINCIPALS[:2]), st.sampled_from(["h1", "h2"]),
       st.sampled_from([*OPS[:3], A.DELETE, A.DESCRIBE_CONFIGS]),
       st.sampled_from(["a", "ab", "abc", "b", "c", "*"]), st.booleans())
def test_authorize_equals_the_literal_reading_of_kafkas_rules(
    acls: list[AclBinding], principal: str, host: str, op: AclOperation, name: str,
    allow_if_no_acl: bool,
) -> None:
    authorizer = Authorizer(acls, allow_if_no_acl=allow_if_no_acl)
    assert authorizer.authorize(principal, host, op, T.TOPIC, name) == reference(
        acls, principal, host, op, name, allow_if_no_acl)
