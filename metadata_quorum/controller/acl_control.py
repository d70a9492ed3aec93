"""CreateAcls and DeleteAcls (KIP-801): validate, then write ACL records.

After Kafka's ``AclControlManager`` (design only). The ACLs live in the
metadata log: CreateAcls writes an AccessControlEntryRecord per new ACL and
DeleteAcls a RemoveAccessControlEntryRecord per ACL it matches; every
broker and controller replays them into ``MetadataImage.acls``.

CreateAcls answers each binding in request order:

- refused with INVALID_REQUEST and `metadata_quorum.acls.validate_new_acl`'s
  reason (Kafka's checks of ``AclApis`` and ``AclControlManager``, in
  Kafka's order), or when a string is too long for the record encoding;
- otherwise success. A binding equal to an ACL already stored, or to one
  earlier in the same request, is not stored again (Kafka's
  ``existingAcls`` set): still success, no record.

More than 10,000 new ACLs in one request (Kafka's
``MAX_RECORDS_PER_USER_OP``) store nothing: every binding is answered
POLICY_VIOLATION "Unable to perform excessively large batch operation.", as
Kafka's controller turns its ``BoundedListTooLongException`` into.

A new ACL's id is derived from the metadata log offset of the record that
adds it (and the cluster id), so commands stay pure and ids are unique over
the whole log; Kafka draws them at random. Either way the id travels in the
record, so replay is deterministic.

DeleteAcls answers each filter in request order with the ACLs it matched
(`AclBindingFilter.matches`, Kafka's semantics, including MATCH and ANY
pattern filters). An ACL matched by several filters is listed by each and
removed once (one record). A filter with an UNKNOWN resource type or
pattern type is refused INVALID_REQUEST "Unknown patternFilter.", one with
an UNKNOWN operation or permission type "Unknown entryFilter."
(``AclControlManager.validateFilter``). A filter that would take the
request past 10,000 removals is refused (UNKNOWN_SERVER_ERROR, Kafka's
``BoundedListTooLongException`` message) and removes nothing; Kafka also
answers UNKNOWN_SERVER_ERROR there, but without the message and after
already queueing part of that filter's removals.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from metadata_quorum.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    validate_new_acl,
)
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from raftlog import kafka_uuid
from raftlog.net.errors import ErrorCode

from .result import ControllerConfig, ControllerResult

__all__ = [
    "MAX_RECORDS_PER_USER_OP",
    "AclCreationResult",
    "CreateAclsRequest",
    "DeleteAclsFilterResult",
    "DeleteAclsRequest",
    "create_acls",
    "delete_acls",
    "new_acl_id",
]

#: Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP``.
MAX_RECORDS_PER_USER_OP: Final = 10_000
#: Kafka's messages (``EventHandlerExceptionInfo``, ``AclControlManager``).
EXCESSIVE_BATCH: Final = "Unable to perform excessively large batch operation."
UNKNOWN_PATTERN_FILTER: Final = "Unknown patternFilter."
UNKNOWN_ENTRY_FILTER: Final = "Unknown entryFilter."
TOO_MANY_REMOVALS: Final = (
    f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation.")
# The record encoding's limit on a string (int16 length); Kafka's is larger.
_MAX_STRING_BYTES: Final = (1 << 15) - 1


@dataclass(frozen=True, slots=True)
class CreateAclsRequest:
    """The bindings to store (unvalidated: any enum value, UNKNOWN included)."""

    creations: tuple[AclBinding, ...]


@dataclass(frozen=True, slots=True)
class AclCreationResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteAclsRequest:
    filters: tuple[AclBindingFilter, ...]


@dataclass(frozen=True, slots=True)
class DeleteAclsFilterResult:
    """What one filter removed (``matching_acls``), or why it was refused."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    matching_acls: tuple[AclBinding, ...] = ()


def create_acls(
    image: MetadataImage, request: CreateAclsRequest, config: ControllerConfig, *,
    next_offset: int,
) -> ControllerResult[tuple[AclCreationResult, ...]]:
    """One result per binding (see the module docstring). ``next_offset`` is
    the metadata log offset the first record will get."""
    existing = {acl.binding for acl in image.acls.values()}
    taken = set(image.acls)
    records: list[AccessControlEntryRecord] = []
    results: list[AclCreationResult] = []
    for binding in request.creations:
        reason = validate_new_acl(binding) or _encoding_error(binding)
        if reason is not None:
            results.append(AclCreationResult(ErrorCode.invalid_request, reason))
            continue
        if binding not in existing:
            existing.add(binding)
            acl_id = new_acl_id(config, next_offset + len(records), taken)
            taken.add(acl_id)
            records.append(AccessControlEntryRecord.from_acl(StandardAcl(acl_id, binding)))
        results.append(AclCreationResult())
    if len(records) > MAX_RECORDS_PER_USER_OP:
        refused = AclCreationResult(ErrorCode.policy_violation, EXCESSIVE_BATCH)
        return ControllerResult((), tuple(refused for _ in request.creations))
    return ControllerResult(tuple(records), tuple(results))


def delete_acls(
    image: MetadataImage, request: DeleteAclsRequest
) -> ControllerResult[tuple[DeleteAclsFilterResult, ...]]:
    """One result per filter (see the module docstring); the ACLs of each in
    the image's order."""
    removed: dict[uuid.UUID, None] = {}  # ordered: one record per ACL
    results: list[DeleteAclsFilterResult] = []
    for acl_filter in request.filters:
        reason = _filter_error(acl_filter)
        if reason is not None:
            results.append(DeleteAclsFilterResult(ErrorCode.invalid_request, reason))
            continue
        matched = [acl for acl in image.acls.values() if acl_filter.matches(acl.binding)]
        new = [acl.acl_id for acl in matched if acl.acl_id not in removed]
        if len(removed) + len(new) > MAX_RECORDS_PER_USER_OP:
            results.append(DeleteAclsFilterResult(ErrorCode.unknown_server_error,
                                                  TOO_MANY_REMOVALS))
            continue
        removed.update(dict.fromkeys(new))
        results.append(DeleteAclsFilterResult(
            matching_acls=tuple(acl.binding for acl in matched)))
    records = tuple(RemoveAccessControlEntryRecord(acl_id) for acl_id in removed)
    return ControllerResult(records, tuple(results))


def new_acl_id(config: ControllerConfig, offset: int, taken: Iterable[uuid.UUID]) -> uuid.UUID:
    """The id of the ACL whose record gets metadata log ``offset``: derived
    from the cluster id and the offset, never one in ``taken``, never one
    Kafka's ``Uuid`` reserves or prints with a leading ``-``."""
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog-acl:{config.cluster_id}")
    taken = set(taken)
    attempt = 0
    while True:
        candidate = uuid.uuid5(namespace, f"{offset}/{attempt}")
        if kafka_uuid.usable(candidate) and candidate not in taken:
            return candidate
        attempt += 1


def _encoding_error(binding: AclBinding) -> str | None:
    for name, value in (("Resource name", binding.resource_name),
                        ("Principal", binding.principal), ("Host", binding.host)):
        if len(value.encode("utf-8")) > _MAX_STRING_BYTES:
            return f"{name} is longer than {_MAX_STRING_BYTES} bytes"
    return None


def _filter_error(acl_filter: AclBindingFilter) -> str | None:
    if (acl_filter.resource_type is ResourceType.UNKNOWN
            or acl_filter.pattern_type is PatternType.UNKNOWN):
        return UNKNOWN_PATTERN_FILTER
    if (acl_filter.operation is AclOperation.UNKNOWN
            or acl_filter.permission is AclPermissionType.UNKNOWN):
        return UNKNOWN_ENTRY_FILTER
    return None
