"""Connection-creation rate quotas (KIP-612, Kafka's ``ConnectionQuotas``
rate sensors): per address (``ip`` client-quota entities, `IpConnectionRates`)
and per node and listener (``max.connection.creation.rate``,
`ConnectionCreationRates`).

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

__all__ = ("ConnectionCreationRates", "IpConnectionRates")

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


class ConnectionCreationRates:
    """KIP-612's ``max.connection.creation.rate`` (the node, over every
    listener but the exempt ones) and each listener's
    ``listener.name.<listener>.max.connection.creation.rate``: how long a
    new connection waits (`raftlog.net.connection_quotas.ConnectionQuotas`'s
    ``creation_throttle``).

    As Kafka's acceptor, one listener takes its connections one after the
    other: each is recorded in the rate sensors (the node's and its
    listener's, Kafka's ``Rate`` over ``quota.window.num`` windows of
    ``quota.window.size.seconds``) when its turn comes, and waits the
    throttle time that record earns (``(rate - bound) / bound * window``,
    at most one window, Kafka's ``boundedThrottleTime``) before it is
    served; the next one's turn comes after that. So a burst beyond the
    bound is served at about the bound, in order. Pure but for the clock.
    """

    def __init__(self, window: QuotaWindow, *, node_rate: int, listener_rates: Mapping[str, int],
                 exempt_listeners: frozenset[str] = frozenset(),
                 clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.window = window
        self._clock_ms = clock_ms
        self._node = (SampledStat(window), float(node_rate)) if node_rate < _UNBOUNDED else None
        self._listeners = {name: (SampledStat(window), float(rate))
                           for name, rate in listener_rates.items() if rate < _UNBOUNDED}
        self._exempt = exempt_listeners
        # Listener -> when its acceptor takes the next connection.
        self._next_turn_ms: dict[str | None, int] = {}
        #: Connections that had to wait, since start.
        self.throttled = 0
        # Listener -> its waits (ms) over the quota window, for the metric.
        self._waits: dict[str | None, SampledStat] = {}

    @property
    def enabled(self) -> bool:
        return self._node is not None or bool(self._listeners)

    def throttle_ms(self, listener: str | None) -> int:
        """Record a new connection on ``listener``; how long it waits (0: none)."""
        sensors = []
        if self._node is not None and listener not in self._exempt:
            sensors.append(self._node)
        if listener is not None and (own := self._listeners.get(listener)) is not None:
            sensors.append(own)
        if not sensors:
            return 0
        now_ms = self._clock_ms()
        turn = max(now_ms, self._next_turn_ms.get(listener, now_ms))
        wait = 0
        for stat, bound in sensors:
            stat.record(1.0, turn)
            wait = max(wait, _bounded_throttle_ms(stat, bound, turn, self.window.size_ms))
        self._next_turn_ms[listener] = turn + wait
        delay = turn + wait - now_ms
        if delay > 0:
            self.throttled += 1
        waits = self._waits.get(listener)
        if waits is None:
            waits = self._waits[listener] = SampledStat(self.window)
        waits.record(delay, now_ms)
        return delay

    def average_wait_ms(self) -> dict[str | None, float]:
        """Each listener's average wait of a new connection (ms) over the
        quota window: Kafka's ``connection-accept-throttle-time``."""
        now_ms = self._clock_ms()
        out = {}
        for listener, waits in self._waits.items():
            count = waits.count(now_ms)
            out[listener] = waits.total(now_ms) / count if count else 0.0
        return out


_UNBOUNDED: Final = 2**31 - 1


def _bounded_throttle_ms(stat: SampledStat, bound: float, now_ms: int, most_ms: int) -> int:
    """Kafka's ``QuotaUtils.boundedThrottleTime`` for a rate sensor: 0 within
    the bound, else ``(rate - bound) / bound * window``, at most ``most_ms``
    (a bound of 0 waits the most)."""
    rate = stat.rate(now_ms)
    if rate <= bound:
        return 0
    if bound <= 0:
        return most_ms
    return min(int((rate - bound) / bound * stat.window_ms(now_ms)), most_ms)
