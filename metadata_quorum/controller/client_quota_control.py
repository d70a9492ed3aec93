"""AlterClientQuotas (KIP-546): validate, then write ClientQuotaRecords.

After Kafka's ``ClientQuotaControlManager`` (design only). An entry names
one entity and a list of operations (set a key to a value, or remove it).
Entries are independent: a bad one is refused with its own error and the
others still apply. Only changes become records (setting a key to its
current value, or removing a key that is not set, writes nothing).

Valid entities are a user, a client id, or both (each part a name or the
default). ``ip`` entities and the keys raftlog does not enforce
(`metadata_quorum.client_quotas.NOT_ENFORCED_QUOTA_KEYS`) are refused with
INVALID_REQUEST and say why, rather than stored and silently ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from metadata_quorum.client_quotas import (
    CLIENT_ID,
    ENFORCED_QUOTA_KEYS,
    IP,
    NOT_ENFORCED_QUOTA_KEYS,
    USER,
)
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import ClientQuotaRecord, MetadataRecord, QuotaEntity
from raftlog.net.errors import ErrorCode

from .result import ControllerResult

__all__ = [
    "AlterClientQuotasRequest",
    "ClientQuotaAlteration",
    "ClientQuotaAlterationResult",
    "ClientQuotaOp",
    "alter_client_quotas",
]

_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ClientQuotaOp:
    """Set ``key`` to ``value``, or remove it (``value`` None)."""

    key: str
    value: float | None


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """One entry: the entity as the client sent it ((type, name or None) pairs,
    unvalidated) and its operations."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[ClientQuotaOp, ...]


@dataclass(frozen=True, slots=True)
class AlterClientQuotasRequest:
    entries: tuple[ClientQuotaAlteration, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class ClientQuotaAlterationResult:
    entity: tuple[tuple[str, str | None], ...]
    error: ErrorCode
    message: str | None = None


def alter_client_quotas(
    image: MetadataImage, request: AlterClientQuotasRequest
) -> ControllerResult[tuple[ClientQuotaAlterationResult, ...]]:
    records: list[MetadataRecord] = []
    results: list[ClientQuotaAlterationResult] = []
    for entry in request.entries:
        error, message, changes = _alter_one(image, entry)
        results.append(ClientQuotaAlterationResult(entry.entity, error, message))
        if error is ErrorCode.none and not request.validate_only:
            records.extend(changes)
    return ControllerResult(tuple(records), tuple(results))


def _alter_one(
    image: MetadataImage, entry: ClientQuotaAlteration
) -> tuple[ErrorCode, str | None, list[ClientQuotaRecord]]:
    entity, problem = _validate_entity(entry.entity)
    if problem is not None:
        return ErrorCode.invalid_request, problem, []
    keys = [op.key for op in entry.ops]
    if len(set(keys)) != len(keys):
        return ErrorCode.invalid_request, "A quota key appears more than once in one entry", []
    for op in entry.ops:
        problem = _validate_op(op)
        if problem is not None:
            return ErrorCode.invalid_request, problem, []
    current = image.client_quotas.get(entity, {})
    changes = []
    for op in entry.ops:
        if op.value is None:
            if op.key in current:
                changes.append(ClientQuotaRecord(entity, op.key, 0.0, remove=True))
        elif current.get(op.key) != op.value:
            changes.append(ClientQuotaRecord(entity, op.key, op.value))
    return ErrorCode.none, None, changes


def _validate_entity(
    raw: tuple[tuple[str, str | None], ...]
) -> tuple[QuotaEntity, str | None]:
    if not raw:
        return (), "Invalid empty client quota entity"
    types = [t for t, _ in raw]
    if len(set(types)) != len(types):
        return (), f"Duplicate entity type in {_describe(raw)}"
    for entity_type, name in raw:
        if entity_type == IP:
            return (), ("ip entities take only connection_creation_rate, and "
                        + NOT_ENFORCED_QUOTA_KEYS["connection_creation_rate"])
        if entity_type not in (USER, CLIENT_ID):
            return (), f"Unhandled client quota entity type: {entity_type}"
        if name is not None and not name:
            return (), (f"Empty {entity_type} name: use the default entity "
                        "(a null name) instead")
    return tuple(sorted(raw)), None


def _validate_op(op: ClientQuotaOp) -> str | None:
    if op.key in NOT_ENFORCED_QUOTA_KEYS:
        return f"Quota {op.key} is not supported: {NOT_ENFORCED_QUOTA_KEYS[op.key]}"
    if op.key not in ENFORCED_QUOTA_KEYS:
        return f"Invalid configuration key {op.key}"
    if op.value is None:
        return None
    value = op.value
    if not math.isfinite(value) or value != math.floor(value):
        return f"Configuration {op.key} must be a Long value"
    if not 1 <= value <= _INT64_MAX:
        return f"Proposed value for {op.key} is out of range: at least 1 byte per second"
    return None


def _describe(raw: tuple[tuple[str, str | None], ...]) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in raw)
