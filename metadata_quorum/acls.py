"""ACLs and the standard authorizer (KIP-801), sans-I/O.

An ACL allows or denies one principal, from one host (or ``*``), one
operation on resources of one type: one name (LITERAL; ``*`` is every
name) or every name that starts with a prefix (PREFIXED). The ACLs live in
the metadata log (``AccessControlEntryRecord``, type 18, and
``RemoveAccessControlEntryRecord``, type 19), so every broker and
controller authorizes from its own metadata image.

`Authorizer.authorize` follows Kafka's ``StandardAuthorizer``:

- a super user (``super.users``) may do anything;
- among the ACLs whose pattern matches the resource, whose principal is the
  requester's or ``User:*`` and whose host is the requester's or ``*``:
  any DENY for the operation (or ALL) denies; else any ALLOW for it allows;
- an ALLOW for READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one
  for ALTER_CONFIGS also allows DESCRIBE_CONFIGS (a DENY implies nothing);
- with no matching ALLOW: denied if the resource has any ACL at all (for
  anyone), else ``allow.everyone.if.no.acl.found`` decides (false).

Kafka's numbering of the enums is used everywhere (records, wire, CLI).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

__all__ = (
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourceType",
    "StandardAcl",
    "parse_principal",
    "validate_new_acl",
)

#: The name of the one CLUSTER resource.
CLUSTER_NAME: Final = "kafka-cluster"
#: A LITERAL resource name, or a host, that matches every one.
WILDCARD: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations whose ALLOW also allows DESCRIBE / DESCRIBE_CONFIGS.
_IMPLIES: Final = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ,
                                      AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS,
                                              AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL's content (Kafka's ``AclBinding``: resource pattern and entry)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """An ACL in the metadata image: its id and its binding."""

    acl_id: uuid.UUID
    binding: AclBinding


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select (Kafka's ``AclBindingFilter``):
    None for a field that matches anything; pattern type ANY matches every
    pattern with that name, MATCH every pattern that would apply to a
    resource of that name (the literal, ``*`` and every prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation not in (AclOperation.ANY, acl.operation):
            return False
        return self.permission in (AclPermissionType.ANY, acl.permission)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type is PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type is PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return acl.pattern_type is PatternType.PREFIXED and name.startswith(acl.resource_name)
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return name is None or name == acl.resource_name


def parse_principal(text: str) -> tuple[str, str]:
    """``Type:name`` -> (type, name), as Kafka's ``KafkaPrincipal.fromString``.
    Raises ValueError."""
    kind, colon, name = text.partition(":")
    if not colon or not kind or not name:
        raise ValueError("expected a string in format principalType:principalName but got "
                         + text)
    return kind, name


def validate_new_acl(acl: AclBinding) -> str | None:
    """Why a CreateAcls entry cannot be stored, or None: Kafka's checks and
    messages, in Kafka's order (``AclApis.handleCreateAcls``'s two, then
    ``AclControlManager.validateNewAcl``'s). A principal needs only a colon
    and a host is not checked, as in Kafka."""
    if acl.resource_type is ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if acl.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "Invalid resourceType " + acl.resource_type.name
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + acl.pattern_type.name
    if acl.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return "Invalid operation " + acl.operation.name
    if acl.permission in (AclPermissionType.ANY, AclPermissionType.UNKNOWN):
        return "Invalid permissionType " + acl.permission.name
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present "
                "separating the principal type from the principal name)")
    return None


class Authorizer:
    """Authorization over one set of ACLs (a metadata image's); immutable.

    ``super_users``: principals (``User:name``) allowed everything.
    ``allow_if_no_acl``: Kafka's ``allow.everyone.if.no.acl.found``."""

    def __init__(self, acls: Iterable[AclBinding], super_users: frozenset[str] = frozenset(),
                 allow_if_no_acl: bool = False) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        # resource type -> name -> ACLs, for LITERAL (with "*") and PREFIXED.
        self._literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        for acl in acls:
            index = self._literal if acl.pattern_type is PatternType.LITERAL else self._prefixed
            index.setdefault(acl.resource_type, {}).setdefault(acl.resource_name, []).append(acl)
            self._by_type.setdefault(acl.resource_type, []).append(acl)

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the
        resource (see the module docstring)."""
        if principal in self.super_users:
            return True
        allowed = False
        has_acls = False
        for acl in self._applicable(resource_type, name):
            has_acls = True
            result = _result(acl, principal, host, operation)
            if result is AclPermissionType.DENY:
                return False
            if result is AclPermissionType.ALLOW:
                allowed = True
        if allowed:
            return True
        return not has_acls and self.allow_if_no_acl

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of the
        type (Kafka's ``authorizeByResourceType``, KIP-679): an ALLOW that no
        DENY of the same or a wider pattern cancels."""
        if principal in self.super_users:
            return True
        acls = self._by_type.get(resource_type, [])
        denies = [a for a in acls if a.permission is AclPermissionType.DENY
                  and _result(a, principal, host, operation) is AclPermissionType.DENY]
        if any(d.pattern_type is PatternType.LITERAL and d.resource_name == WILDCARD
               for d in denies):
            return False
        for acl in acls:
            if acl.permission is not AclPermissionType.ALLOW or _result(
                    acl, principal, host, operation) is not AclPermissionType.ALLOW:
                continue
            if not any(_covers(d, acl) for d in denies):
                return True
        return not acls and self.allow_if_no_acl

    def _applicable(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        literal = self._literal.get(resource_type)
        if literal:
            yield from literal.get(name, ())
            if name != WILDCARD:
                yield from literal.get(WILDCARD, ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for end in range(1, len(name) + 1):
                yield from prefixed.get(name[:end], ())


def _result(acl: AclBinding, principal: str, host: str,
            operation: AclOperation) -> AclPermissionType | None:
    """ALLOW or DENY if ``acl`` applies to the request, else None (its
    resource pattern is assumed to match)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation is AclOperation.ALL or acl.operation is operation:
        return acl.permission
    implied = _IMPLIES.get(operation)
    if acl.permission is AclPermissionType.ALLOW and implied is not None \
            and acl.operation in implied:
        return acl.permission
    return None


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether ``deny``'s pattern covers every resource ``allow``'s does."""
    if deny.pattern_type is PatternType.LITERAL:
        return deny.resource_name == WILDCARD or (
            allow.pattern_type is PatternType.LITERAL
            and deny.resource_name == allow.resource_name)
    return allow.resource_name.startswith(deny.resource_name)


def acls_of(acls: Mapping[uuid.UUID, StandardAcl]) -> list[AclBinding]:
    """The bindings of an image's ACLs."""
    return [acl.binding for acl in acls.values()]
