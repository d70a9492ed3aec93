"""AlterClientQuotas (KIP-546): validate, then write ClientQuotaRecords.

After Kafka's ``ClientQuotaControlManager`` (design only). An entry names
one entity and a list of operations (set a key to a value, or remove it).
Entries are independent: a bad one is refused with its own error and the
others still apply. Only changes become records (setting a key to its
current value, or removing a key that is not set, writes nothing).

Valid entities are a user, a client id, or both (each part a name or the
default), taking the byte-rate keys, ``request_percentage`` (KIP-124,
above 0) and ``controller_mutation_rate`` (KIP-599, partitions per
second, above 0); or an ``ip`` alone (an IP address or
the default), taking only ``connection_creation_rate`` (KIP-612). The keys
raftlog does not enforce (`metadata_quorum.client_quotas.NOT_ENFORCED_QUOTA_KEYS`)
are refused with INVALID_REQUEST and say why, rather than stored and
silently ignored.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from metadata_quorum.client_quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONTROLLER_MUTATION_RATE,
    ENFORCED_QUOTA_KEYS,
    IP,
    IP_QUOTA_KEYS,
    NOT_ENFORCED_QUOTA_KEYS,
    REQUEST_PERCENTAGE,
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
_INT32_MAX = (1 << 31) - 1


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
    """Each entry is checked against the committed quotas. An entity named
    again in the same request is refused (INVALID_REQUEST, "Ignoring
    duplicate entity"), as Kafka's controller does; the first entry for it
    stands."""
    records: list[MetadataRecord] = []
    results: list[ClientQuotaAlterationResult] = []
    seen: set[frozenset[tuple[str, str | None]]] = set()
    for entry in request.entries:
        entity = frozenset(entry.entity)  # the components in any order name one entity
        if entity in seen:
            results.append(ClientQuotaAlterationResult(
                entry.entity, ErrorCode.invalid_request,
                f"Ignoring duplicate entity {_describe(entry.entity)}"))
            continue
        seen.add(entity)
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
    is_ip = entity[0][0] == IP
    for op in entry.ops:
        problem = _validate_ip_op(op) if is_ip else _validate_op(op)
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
    if IP in types:
        if len(raw) != 1:
            return (), (f"Invalid quota entity combination {_describe(raw)}: an ip entity "
                        "cannot be combined with user or client-id")
        name = raw[0][1]
        if name is None:
            return ((IP, None),), None
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return (), f"{name} is not a valid IP address"
        return ((IP, str(address)),), None
    for entity_type, name in raw:
        if entity_type not in (USER, CLIENT_ID):
            return (), f"Unhandled client quota entity type: {entity_type}"
        if name is not None and not name:
            return (), (f"Empty {entity_type} name: use the default entity "
                        "(a null name) instead")
    return tuple(sorted(raw)), None


def _validate_ip_op(op: ClientQuotaOp) -> str | None:
    """KIP-612: an ip entity takes connections per second, an int >= 0."""
    if op.key not in IP_QUOTA_KEYS:
        return f"Invalid configuration key {op.key} for an ip entity (it takes {CONNECTION_CREATION_RATE})"
    return _validate_whole(op, "an Int", 0, _INT32_MAX,
                           f"0 to {_INT32_MAX} connections per second")


def _validate_op(op: ClientQuotaOp) -> str | None:
    if op.key in NOT_ENFORCED_QUOTA_KEYS:
        return f"Quota {op.key} is not supported: {NOT_ENFORCED_QUOTA_KEYS[op.key]}"
    if op.key not in ENFORCED_QUOTA_KEYS:
        return f"Invalid configuration key {op.key}"
    if op.key == CONTROLLER_MUTATION_RATE:
        # A Double in Kafka; above zero here, since a rate of zero would
        # refill nothing and refuse every mutation after the first for good.
        if op.value is not None and not (math.isfinite(op.value) and op.value > 0):
            return (f"Proposed value for {op.key} is out of range: above 0 partitions "
                    "per second")
        return None
    if op.key == REQUEST_PERCENTAGE:
        # A Double in Kafka; above zero here, since a client allowed no
        # time at all would be held off a whole window at every request.
        if op.value is not None and not (math.isfinite(op.value) and op.value > 0):
            return (f"Proposed value for {op.key} is out of range: above 0 percent of a "
                    "request thread")
        return None
    return _validate_whole(op, "a Long", 1, _INT64_MAX, "at least 1 byte per second")


def _validate_whole(op: ClientQuotaOp, kind: str, low: int, high: int, bounds: str) -> str | None:
    """A whole number in [low, high] (None: a removal, always fine)."""
    value = op.value
    if value is None:
        return None
    if not math.isfinite(value) or value != math.floor(value):
        return f"Configuration {op.key} must be {kind} value"
    if not low <= value <= high:
        return f"Proposed value for {op.key} is out of range: {bounds}"
    return None


def _describe(raw: tuple[tuple[str, str | None], ...]) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in raw)
