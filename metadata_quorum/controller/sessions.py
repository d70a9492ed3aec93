"""`BrokerSessions`: when each broker was last heard from (soft state of the active controller).

Heartbeat times are not in the metadata log: only the active controller
tracks them, and a newly active controller starts every registered broker
with a fresh session (Kafka's ``BrokerHeartbeatManager`` does the same), so
a failover never fences brokers that were heartbeating the old controller.

The value is immutable; the facade swaps in the result of `touched`, so
commands that read sessions stay pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class BrokerSessions:
    """Last contact time (ms) per broker id."""

    last_contact_ms: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def fresh(cls, broker_ids: Iterable[int], now_ms: int) -> BrokerSessions:
        """Every broker in ``broker_ids`` with a session starting at ``now_ms``."""
        return cls(MappingProxyType(dict.fromkeys(broker_ids, now_ms)))

    def touched(self, broker_id: int, now_ms: int) -> BrokerSessions:
        """These sessions with ``broker_id`` heard from at ``now_ms`` (never moves back)."""
        contacts = dict(self.last_contact_ms)
        contacts[broker_id] = max(now_ms, contacts.get(broker_id, now_ms))
        return BrokerSessions(MappingProxyType(contacts))

    def without(self, broker_id: int) -> BrokerSessions:
        contacts = dict(self.last_contact_ms)
        contacts.pop(broker_id, None)
        return BrokerSessions(MappingProxyType(contacts))

    def has_valid_session(self, broker_id: int, now_ms: int, timeout_ms: int) -> bool:
        """Heard from within ``timeout_ms`` (``broker.session.timeout.ms``)."""
        last = self.last_contact_ms.get(broker_id)
        return last is not None and now_ms - last < timeout_ms

    def next_expiry_ms(self, timeout_ms: int) -> int | None:
        """When the oldest session expires, or None without sessions."""
        if not self.last_contact_ms:
            return None
        return min(self.last_contact_ms.values()) + timeout_ms
