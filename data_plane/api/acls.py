"""ACLs (KIP-801) on the Kafka protocol: DescribeAcls (v1-3), CreateAcls
(v1-3) and DeleteAcls (v1-3).

DescribeAcls is answered by any broker from its metadata image, as Kafka's
brokers answer it from their authorizer's copy of the ACLs; CreateAcls and
DeleteAcls are forwarded to the active controller (KIP-590), which runs
`metadata_quorum.controller.acl_control` and answers once the records are
committed. A broker serves its image's ACLs, so a new ACL shows up in its
DescribeAcls (and counts in its authorizer) once it has replayed the record.

Authorization (Kafka's ``AclApis``): CreateAcls and DeleteAcls need ALTER
on the CLUSTER resource, DescribeAcls DESCRIBE on it; refused, every
creation / every filter / the whole description answers
CLUSTER_AUTHORIZATION_FAILED, and nothing is forwarded. A broker without an
authorizer (no ``authorizer.class.name``) answers all three
SECURITY_DISABLED, as Kafka does: ACLs it would not enforce are not taken.

Wire enum values are Kafka's codes (`metadata_quorum.acls`); a code this
side does not know reads as UNKNOWN, as Kafka's ``fromCode`` reads it, and
is refused with INVALID_REQUEST per item (Kafka fails the whole request's
parsing there). The controller listener (`data_plane.controller_api`) and
the in-process fake controller translate with the same helpers.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final, TypeVar

from data_plane.api.admin import CREATE_ACLS_KEY, DELETE_ACLS_KEY, _forward
from data_plane.api.build import build, response_class
from metadata_quorum.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from metadata_quorum.controller.acl_control import (
    AclCreationResult,
    CreateAclsRequest,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
)
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

if TYPE_CHECKING:
    from data_plane.api.common import BrokerApiContext

__all__ = (
    "create_failed",
    "create_request",
    "create_response_values",
    "delete_failed",
    "delete_request",
    "delete_response_values",
    "describe_error",
    "describe_response_values",
    "handle_create_acls",
    "handle_delete_acls",
    "handle_describe_acls",
)

DESCRIBE_ACLS_KEY: Final = 29
_NO_THROTTLE: Final = datetime.timedelta(0)
_NOT_ALTER: Final = "not authorized to ALTER the cluster"
_FORWARD_FAILED: Final = "forwarding to the controller failed; the outcome is unknown"
_NO_AUTHORIZER: Final = "No Authorizer is configured."

E = TypeVar("E", bound=IntEnum)


def _code(enum: type[E], code: int) -> E:
    """Kafka's ``fromCode``: the member, or UNKNOWN (0) for a code not known."""
    try:
        return enum(int(code))
    except ValueError:
        return enum(0)


# --- CreateAcls -----------------------------------------------------------------


def create_request(body: Any) -> CreateAclsRequest:
    """A kio CreateAclsRequest as the controller's command input."""
    return CreateAclsRequest(tuple(
        AclBinding(_code(ResourceType, c.resource_type), str(c.resource_name),
                   _code(PatternType, c.resource_pattern_type), str(c.principal), str(c.host),
                   _code(AclOperation, c.operation), _code(AclPermissionType, c.permission_type))
        for c in body.creations))


def create_failed(body: Any, error: ErrorCode,
                  message: str | None = None) -> tuple[AclCreationResult, ...]:
    """``error`` for every creation (Kafka's ``getErrorResponse`` shape)."""
    return tuple(AclCreationResult(error, message) for _ in body.creations)


def create_response_values(results: Iterable[AclCreationResult]) -> Mapping[str, object]:
    """A CreateAclsResponse body for `build`."""
    return {"throttle_time": _NO_THROTTLE, "results": [
        {"error_code": r.error, "error_message": r.message} for r in results]}


async def handle_create_acls(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """CreateAcls (``kafka-acls.sh --add``): ALTER on the cluster, then
    forwarded; answered once the controller has committed the ACLs."""
    if api.authorization is None:
        return build(response_class(request), create_response_values(create_failed(
            request, ErrorCode.security_disabled, _NO_AUTHORIZER)))
    if not api.authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(response_class(request), create_response_values(create_failed(
            request, ErrorCode.cluster_authorization_failed, _NOT_ALTER)))
    return await _forward(api, request, CREATE_ACLS_KEY, create_response_values(
        create_failed(request, ErrorCode.request_timed_out, _FORWARD_FAILED)))


# --- DeleteAcls -----------------------------------------------------------------


def _filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
            host: str | None, operation: int, permission: int) -> AclBindingFilter:
    return AclBindingFilter(
        _code(ResourceType, resource_type), name, _code(PatternType, pattern_type), principal,
        host, _code(AclOperation, operation), _code(AclPermissionType, permission))


def delete_request(body: Any) -> DeleteAclsRequest:
    """A kio DeleteAclsRequest as the controller's command input."""
    return DeleteAclsRequest(tuple(
        _filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                f.principal_filter, f.host_filter, f.operation, f.permission_type)
        for f in body.filters))


def delete_failed(body: Any, error: ErrorCode,
                  message: str | None = None) -> tuple[DeleteAclsFilterResult, ...]:
    """``error`` for every filter, nothing matched (Kafka's ``getErrorResponse``)."""
    return tuple(DeleteAclsFilterResult(error, message) for _ in body.filters)


def delete_response_values(results: Iterable[DeleteAclsFilterResult]) -> Mapping[str, object]:
    """A DeleteAclsResponse body for `build`."""
    return {"throttle_time": _NO_THROTTLE, "filter_results": [
        {"error_code": r.error, "error_message": r.message, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None,
             "resource_type": int(b.resource_type), "resource_name": b.resource_name,
             "pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
             "operation": int(b.operation), "permission_type": int(b.permission)}
            for b in r.matching_acls]}
        for r in results]}


async def handle_delete_acls(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DeleteAcls (``kafka-acls.sh --remove``): ALTER on the cluster, then
    forwarded; each filter answered with the ACLs it removed."""
    if api.authorization is None:
        return build(response_class(request), delete_response_values(delete_failed(
            request, ErrorCode.security_disabled, _NO_AUTHORIZER)))
    if not api.authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(response_class(request), delete_response_values(delete_failed(
            request, ErrorCode.cluster_authorization_failed, _NOT_ALTER)))
    return await _forward(api, request, DELETE_ACLS_KEY, delete_response_values(
        delete_failed(request, ErrorCode.request_timed_out, _FORWARD_FAILED)))


# --- DescribeAcls ---------------------------------------------------------------


def describe_response_values(acls: Mapping[uuid.UUID, StandardAcl],
                             body: Any) -> Mapping[str, object]:
    """A DescribeAclsResponse body for `build`: the ACLs of an image that
    ``body``'s filter matches, grouped by resource pattern, in the image's
    order. INVALID_REQUEST for a filter with an UNKNOWN element."""
    acl_filter = _filter(body.resource_type_filter, body.resource_name_filter,
                         body.pattern_type_filter, body.principal_filter, body.host_filter,
                         body.operation, body.permission_type)
    if 0 in (acl_filter.resource_type, acl_filter.pattern_type, acl_filter.operation,
             acl_filter.permission):  # UNKNOWN, in each of the four enums
        return describe_error(ErrorCode.invalid_request,
                              "DescribeAclsRequest contains UNKNOWN elements")
    groups: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for acl in acls.values():
        b = acl.binding
        if acl_filter.matches(b):
            groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None,
            "resources": [
                {"resource_type": int(kind), "resource_name": name, "pattern_type": int(pattern),
                 "acls": [{"principal": b.principal, "host": b.host,
                           "operation": int(b.operation), "permission_type": int(b.permission)}
                          for b in bindings]}
                for (kind, name, pattern), bindings in groups.items()]}


def describe_error(error: ErrorCode, message: str | None) -> Mapping[str, object]:
    """A DescribeAclsResponse body for `build` that says only ``error``."""
    return {"throttle_time": _NO_THROTTLE, "error_code": error, "error_message": message,
            "resources": []}


async def handle_describe_acls(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    """DescribeAcls (``kafka-acls.sh --list``): DESCRIBE on the cluster, then
    this broker's image."""
    if api.authorization is None:
        return build(response_class(request), describe_error(ErrorCode.security_disabled,
                                                             _NO_AUTHORIZER))
    if not api.authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(response_class(request), describe_error(
            ErrorCode.cluster_authorization_failed, "not authorized to DESCRIBE the cluster"))
    return build(response_class(request), describe_response_values(api.image.acls, request))


