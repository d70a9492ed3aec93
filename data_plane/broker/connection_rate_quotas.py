"""Per-address connection-creation rate quotas (KIP-612, Kafka's
``ConnectionQuotas`` ip rate sensors).

The metadata image carries ``ip`` client-quota entities (KIP-546 records):
an address, or the default for every address, with
``connection_creation_rate`` (new connections per second). Each new
connection from an address that has a bound is recorded in that address's
rate sensor (Kafka's ``Rate`` over ``quota.window.num`` windows of
``quota.window.size.seconds``, `client_quotas.SampledStat`); when the rate
after the record is above the bound the connection is refused. The record
counts even when refused, so a client that keeps reconnecting stays over
its bound until it slows down, as in Kafka.

Kafka closes a throttled connection after a delay (the time the rate needs
to come back under the bound); here it is closed as it is accepted, like the
node's other connection limits (`raftlog.net.connection_quotas`).

An address with no entity of its own takes the default entity's bound; with
neither it is unlimited and nothing is recorded for it. A bound of 0 refuses
every connection from the address. Pure but for the clock, which is injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

from data_plane.broker.client_quotas import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    QuotaWindow,
    SampledStat,
)
from metadata_quorum.client_quotas import CONNECTION_CREATION_RATE, IP
from metadata_quorum.records import QuotaEntity
from raftlog.net.connection_quotas import normal_address

__all__ = ("IpConnectionRates",)

_EXPIRY_CHECK_INTERVAL_MS: Final = 30_000


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class IpConnectionRates:
    """The ip quotas of one node and a rate sensor per address with a bound.

    `check` is the `raftlog.net.connection_quotas.ConnectionQuotas` rate
    check; `update` takes the image's client quotas (call it when they change).
    """

    def __init__(self, window: QuotaWindow, *, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.window = window
        self._clock_ms = clock_ms
        self._bounds: dict[str, float] = {}
        self._default: float | None = None
        self._sensors: dict[str, tuple[SampledStat, list[int]]] = {}
        self._next_expiry_ms = 0
        #: Connections refused for their address's rate since start.
        self.throttled = 0

    @property
    def enabled(self) -> bool:
        return self._default is not None or bool(self._bounds)

    def update(self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Take the ``ip`` entities' ``connection_creation_rate`` bounds."""
        bounds: dict[str, float] = {}
        default: float | None = None
        for entity, values in client_quotas.items():
            if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
                continue
            name = entity[0][1]
            rate = float(values[CONNECTION_CREATION_RATE])
            if name is None:
                default = rate
            else:
                bounds[normal_address(name)] = rate
        self._bounds, self._default = bounds, default
        for ip in [ip for ip in self._sensors if self.bound_for(ip) is None]:
            del self._sensors[ip]

    def bound_for(self, ip: str) -> float | None:
        """Connections per second allowed from ``ip`` (None: unlimited)."""
        bound = self._bounds.get(ip)
        return self._default if bound is None else bound

    def check(self, ip: str) -> str | None:
        """Record a new connection from ``ip``; why it is refused, or None."""
        if not self.enabled:
            return None
        ip = normal_address(ip)
        bound = self.bound_for(ip)
        if bound is None:
            return None
        now_ms = self._clock_ms()
        self._expire(now_ms)
        entry = self._sensors.get(ip)
        if entry is None:
            entry = self._sensors[ip] = (SampledStat(self.window), [now_ms])
        stat, last = entry
        stat.record(1.0, now_ms)
        last[0] = now_ms
        rate = stat.rate(now_ms)
        if rate > bound:
            self.throttled += 1
            return (f"{ip} opened connections at {rate:.1f}/s, over its "
                    f"connection_creation_rate of {bound:g}/s")
        return None

    def rate(self, ip: str) -> float:
        """The measured connection rate of ``ip`` (0 without a sensor)."""
        entry = self._sensors.get(normal_address(ip))
        return 0.0 if entry is None else entry[0].rate(self._clock_ms())

    def _expire(self, now_ms: int) -> None:
        # Kafka drops a quota sensor after an hour without a record.
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + _EXPIRY_CHECK_INTERVAL_MS
        for ip in [ip for ip, (_, last) in self._sensors.items()
                   if now_ms - last[0] >= INACTIVE_SENSOR_EXPIRATION_MS]:
            del self._sensors[ip]
