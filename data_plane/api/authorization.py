"""Authorizing broker requests against the ACLs (KIP-801's StandardAuthorizer
semantics, `metadata_quorum.acls`).

With ``authorizer.class.name`` unset (the default) a broker authorizes
nothing: every check here answers yes without looking at anything. Set, a
request's principal is ``User:<name>`` of its connection's SASL login
(``User:ANONYMOUS`` on a PLAINTEXT listener) and its host the peer's
address; the ACLs are the broker's metadata image's, so a CreateAcls counts
on a broker once it has replayed it.

The static settings reach the handlers through the broker's static config
(`ReplicaManager.static_config`), under Kafka's names, so an in-process
cluster enables it the same way a node does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from metadata_quorum.acls import AclOperation, Authorizer, ResourceType, acls_of
from raftlog.net import RequestContext

if TYPE_CHECKING:
    from data_plane.api.common import BrokerApiContext
    from metadata_quorum.image import MetadataImage

__all__ = ("AUTHORIZER_SETTINGS", "SUPPORTED_OPERATIONS", "AclAuthorization", "RequestAcls",
           "authorized_operations", "principal_of")

#: Static settings read here (Kafka's names).
AUTHORIZER_SETTINGS: Final = ("authorizer.class.name", "super.users",
                              "allow.everyone.if.no.acl.found")


def principal_of(context: RequestContext) -> str:
    return f"User:{context.user}"


class AclAuthorization:
    """One broker's authorizer: its settings and the `Authorizer` of the
    latest image's ACLs (rebuilt only when they change)."""

    def __init__(self, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: object = None
        self._authorizer = Authorizer((), super_users, allow_if_no_acl)

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> AclAuthorization | None:
        """None when ``authorizer.class.name`` is unset (authorize nothing)."""
        if not str(config.get("authorizer.class.name", "") or ""):
            return None
        users = frozenset(u.strip() for u in str(config.get("super.users", "")).split(";")
                          if u.strip())
        allow = str(config.get("allow.everyone.if.no.acl.found", "false")).lower() == "true"
        return cls(users, allow)

    def authorizer(self, image: MetadataImage) -> Authorizer:
        acls = image.acls
        if acls is not self._acls:
            self._authorizer = Authorizer(acls_of(acls), self.super_users, self.allow_if_no_acl)
            self._acls = acls
        return self._authorizer

    def authorize(self, image: MetadataImage, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        host = context.peer[0] if context.peer is not None else ""
        return self.authorizer(image).authorize(principal_of(context), host, operation,
                                                resource_type, name)

    def authorize_any(self, image: MetadataImage, context: RequestContext,
                      operation: AclOperation, resource_type: ResourceType) -> bool:
        host = context.peer[0] if context.peer is not None else ""
        return self.authorizer(image).authorize_any(principal_of(context), host, operation,
                                                    resource_type)


class RequestAcls:
    """One request's principal against the broker's ACLs, for many checks:
    the image's authorizer, the principal and the host are looked up once
    (what Kafka's ``AuthHelper.filterByAuthorized`` batches)."""

    __slots__ = ("_authorizer", "_host", "_principal")

    def __init__(self, authorizer: Authorizer, context: RequestContext) -> None:
        self._authorizer = authorizer
        self._principal = principal_of(context)
        self._host = context.peer[0] if context.peer is not None else ""

    @classmethod
    def of(cls, api: BrokerApiContext, context: RequestContext) -> RequestAcls | None:
        """None when the broker has no authorizer (everything is allowed)."""
        authorization = api.authorization
        if authorization is None:
            return None
        return cls(authorization.authorizer(api.image), context)

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return self._authorizer.authorize(self._principal, self._host, operation,
                                          resource_type, name)

    def allows_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """KIP-679's ``authorizeByResourceType``."""
        return self._authorizer.authorize_any(self._principal, self._host, operation,
                                              resource_type)

    def allowed(self, operation: AclOperation, resource_type: ResourceType,
                names: Iterable[str]) -> set[str]:
        """The names the principal may do ``operation`` on (each checked once)."""
        return {n for n in set(names) if self.allows(operation, resource_type, n)}


#: The operations each resource type supports (Kafka's
#: AclEntry.supportedOperations): what an authorized-operations bitfield covers.
SUPPORTED_OPERATIONS: Final = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def authorized_operations(api: BrokerApiContext, ctx: RequestContext,
                          resource_type: ResourceType, name: str) -> int:
    """The operations the principal may do on the resource, among those its
    type supports, as a bitfield: bit ``1 << operation`` (Kafka's
    AuthHelper.authorizedOperations and Utils.to32BitField). Every supported
    one without an authorizer."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if api.authorize(ctx, operation, resource_type, name):
            bits |= 1 << operation
    return bits
