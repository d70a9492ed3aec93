"""Client quotas (KIP-546): which keys raftlog enforces, and DescribeClientQuotas
over an image.

A quota belongs to an entity: a user, a client id, or a user and a client id
(each part a name or that type's default). The controller writes them as
ClientQuotaRecords (`metadata_quorum.controller.client_quota_control`); the
image holds them in ``MetadataImage.client_quotas``; brokers enforce the
byte rates (`data_plane.broker.client_quotas`), the active controller the
mutation rate (`data_plane.controller_mutation_quota`), and brokers answer
DescribeClientQuotas from their image with `describe_client_quotas`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from metadata_quorum.records import QuotaEntity
from raftlog.net.errors import ErrorCode

__all__ = [
    "CLIENT_ID",
    "CONNECTION_CREATION_RATE",
    "CONTROLLER_MUTATION_RATE",
    "ENFORCED_QUOTA_KEYS",
    "IP",
    "IP_QUOTA_KEYS",
    "NOT_ENFORCED_QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "DescribeResult",
    "FilterComponent",
    "MatchType",
    "describe_client_quotas",
]

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

#: KIP-599: partitions created or deleted per second, enforced by the active
#: controller (`data_plane.controller_mutation_quota`).
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

#: KIP-124: percent of one request thread's time per client, enforced by
#: brokers (`data_plane.broker.request_quotas`).
REQUEST_PERCENTAGE = "request_percentage"

#: The quota keys enforced on user and client-id entities: bytes per second
#: per client, throttled by brokers as Kafka's ClientQuotaManager throttles,
#: `REQUEST_PERCENTAGE` and `CONTROLLER_MUTATION_RATE` (Kafka's ``QuotaConfigs``).
ENFORCED_QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate",
                                 REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE})

#: KIP-612: new connections per second from one address, the only key of an
#: ``ip`` entity (an address, or the default for every address).
CONNECTION_CREATION_RATE = "connection_creation_rate"
IP_QUOTA_KEYS = frozenset({CONNECTION_CREATION_RATE})

#: Kafka's other quota keys, which raftlog would refuse rather than store and
#: silently not enforce: key -> why (none now).
NOT_ENFORCED_QUOTA_KEYS: Mapping[str, str] = {}


class MatchType(IntEnum):
    """DescribeClientQuotas filter component match types."""

    EXACT = 0  # the entity's name of this type is ``match``
    DEFAULT = 1  # the entity has this type's default
    ANY = 2  # the entity has this type, any name or the default


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeResult:
    error: ErrorCode
    message: str | None
    entries: tuple[tuple[QuotaEntity, Mapping[str, float]], ...] = ()


def describe_client_quotas(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    components: Sequence[FilterComponent],
    strict: bool,
) -> DescribeResult:
    """The entities matching every component (and, when ``strict``, having
    no other entity types), with their quotas: Kafka's filter semantics.
    A filter naming a type twice, an unknown match type, an exact match
    without a name, or ``ip`` together with ``user``/``client-id`` is
    INVALID_REQUEST."""
    wanted: dict[str, FilterComponent] = {}
    for c in components:
        if c.entity_type in wanted:
            return DescribeResult(ErrorCode.invalid_request,
                                  f"Entity type {c.entity_type} cannot appear more than once "
                                  "in the filter.")
        if c.match_type not in tuple(MatchType):
            return DescribeResult(ErrorCode.invalid_request,
                                  f"Unknown match type {c.match_type}")
        if c.match_type == MatchType.EXACT and c.match is None:
            return DescribeResult(ErrorCode.invalid_request,
                                  f"An exact match on {c.entity_type} needs a name")
        wanted[c.entity_type] = c
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        return DescribeResult(ErrorCode.invalid_request,
                              "Invalid entity filter component combination: an ip filter "
                              "component cannot be used with user or client-id components.")
    entries = []
    for entity, values in quotas.items():
        names = dict(entity)
        if strict and len(names) != len(wanted):
            continue
        if all(_matches(c, names) for c in wanted.values()):
            entries.append((entity, values))
    entries.sort(key=lambda e: [(t, n is not None, n or "") for t, n in e[0]])
    return DescribeResult(ErrorCode.none, None, tuple(entries))


def _matches(component: FilterComponent, names: Mapping[str, str | None]) -> bool:
    if component.entity_type not in names:
        return False
    name = names[component.entity_type]
    if component.match_type == MatchType.EXACT:
        return name == component.match
    if component.match_type == MatchType.DEFAULT:
        return name is None
    return True
