"""Client byte-rate quotas on the broker (KIP-13, KIP-55; throttling per KIP-219).

The metadata image carries the quotas (``MetadataImage.client_quotas``,
KIP-546); this module measures each client's byte rate and says how long to
throttle it. Two managers per broker (`ClientQuotas`), one per quota key:
``producer_byte_rate`` (the bytes of Produce requests) and
``consumer_byte_rate`` (the record bytes of consumer Fetch responses). Every
broker enforces the bound on its own share of a client's traffic, as Kafka's
do.

**Measuring.** A client's rate is Kafka's ``Rate`` over a ``SampledStat``
(`SampledStat`): up to ``quota.window.num`` samples of
``quota.window.size.seconds`` each; a record into a sample whose window has
passed starts a new one, and a sample older than ``num * size`` counts for
nothing. The rate is the sum of the live samples over the elapsed time since
the oldest one started, counted as at least ``num - 1`` full windows (so a
client's first request is not measured over a few milliseconds).

**Resolving** (Kafka's default quota callback, for principal ``user`` and
client id ``c``; the user is the connection's SASL user, `ANONYMOUS` on a
PLAINTEXT listener). The first of these entities that sets the manager's key gives
the bound:

====  ==============================  ===========================
 #    entity                          sensor (user, client id)
====  ==============================  ===========================
 1    users/<u>/clients/<c>           (u, c)
 2    users/<u>/clients/<default>     (u, c)
 3    users/<u>                       (u, "")  every client id of u
 4    users/<default>/clients/<c>     (u, c)
 5    users/<default>/clients/<def>   (u, c)
 6    users/<default>                 (u, "")
 7    clients/<c>                     ("", c)
 8    clients/<default>               ("", c)  each client id its own
====  ==============================  ===========================

None of them: the client is unlimited and nothing is recorded for it.
``ip`` entities are connection-rate quotas, not byte rates: ignored here.

**Throttling** (Kafka's ``ClientQuotaManager.throttleTime``): when the rate
after a record exceeds the bound, the throttle time is
``round((rate - bound) / bound * window_ms)``, the delay after which the
measured rate would be back at the bound.

Pure: no I/O, time comes in as ``now_ms``. With no entity setting a
manager's key, ``enabled`` is False and the handlers do nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from metadata_quorum.records import QuotaEntity
from raftlog.net.sasl import ANONYMOUS

__all__ = (
    "ANONYMOUS",
    "CONSUMER_BYTE_RATE",
    "INACTIVE_SENSOR_EXPIRATION_MS",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "ClientQuotaManager",
    "ClientQuotas",
    "ClientSensor",
    "QuotaWindow",
    "SampledStat",
    "SensorKey",
)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
#: KIP-124: percent of one request thread's time (`data_plane.broker.request_quotas`).
REQUEST_PERCENTAGE: Final = "request_percentage"
#: Kafka drops a client's quota sensors after an hour without a record.
INACTIVE_SENSOR_EXPIRATION_MS: Final = 3_600_000
# How often idle sensors are looked for (Kafka's sensor reaper runs every 30 s).
_EXPIRY_CHECK_INTERVAL_MS: Final = 30_000
_INT32_MAX: Final = 2**31 - 1

#: (user, client id) a sensor is kept under; "" for a part the level leaves out.
SensorKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` each."""

    num: int = 11
    size_ms: int = 1000

    def __post_init__(self) -> None:
        if self.num < 1:
            raise ValueError(f"quota.window.num must be >= 1, got {self.num}")
        if self.size_ms < 1:
            raise ValueError(f"the quota window size must be >= 1 ms, got {self.size_ms}")

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> QuotaWindow:
        """From broker settings (Kafka's defaults: 11 windows of 1 s)."""
        return cls(int(config.get("quota.window.num", "11")),
                   int(config.get("quota.window.size.seconds", "1")) * 1000)


class SampledStat:
    """Kafka's ``SampledStat`` of sums and counts, with ``Rate``'s window.

    Samples live in a ring of at most ``window.num`` slots: each holds the
    start of its window, the sum of the values recorded in it and how many.
    """

    __slots__ = ("_counts", "_current", "_starts", "_sums", "_window")

    def __init__(self, window: QuotaWindow) -> None:
        self._window = window
        self._starts: list[int] = []
        self._sums: list[float] = []
        self._counts: list[int] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` to the current sample, first starting a new one at
        ``now_ms`` if the current one's window has passed."""
        starts = self._starts
        if not starts:
            starts.append(now_ms)
            self._sums.append(0.0)
            self._counts.append(0)
            self._current = 0
        elif now_ms - starts[self._current] >= self._window.size_ms:
            current = (self._current + 1) % self._window.num
            if current >= len(starts):
                starts.append(now_ms)
                self._sums.append(0.0)
                self._counts.append(0)
            else:
                self._reset(current, now_ms)
            self._current = current
        self._sums[self._current] += value
        self._counts[self._current] += 1

    def total(self, now_ms: int) -> float:
        """The sum of the values in the live samples."""
        self._purge(now_ms)
        return math.fsum(self._sums)

    def count(self, now_ms: int) -> int:
        """How many values the live samples hold."""
        self._purge(now_ms)
        return sum(self._counts)

    def window_ms(self, now_ms: int) -> int:
        """Kafka's ``Rate.windowSize``: the time since the oldest live sample
        started, plus whatever full windows it lacks to make ``num - 1``;
        at least 1 ms."""
        self._purge(now_ms)
        size_ms = self._window.size_ms
        elapsed = now_ms - min(self._starts, default=now_ms)
        full = elapsed // size_ms
        lacking = self._window.num - 1 - full
        if lacking > 0:
            elapsed += lacking * size_ms
        return max(elapsed, 1)

    def rate(self, now_ms: int) -> float:
        """Kafka's ``Rate``: the live total per second of `window_ms`."""
        return self.total(now_ms) * 1000.0 / self.window_ms(now_ms)

    def _purge(self, now_ms: int) -> None:
        # Kafka's purgeObsoleteSamples: a sample that started num windows
        # ago or more is reset (it counts for nothing and is the newest).
        expire_ms = self._window.num * self._window.size_ms
        starts = self._starts
        for i, start in enumerate(starts):
            if now_ms - start >= expire_ms:
                self._reset(i, now_ms)

    def _reset(self, i: int, now_ms: int) -> None:
        self._starts[i] = now_ms
        self._sums[i] = 0.0
        self._counts[i] = 0


class ClientSensor:
    """One quota sensor: the bytes a client (or a user's client ids) sent or
    received, and the throttle times it was given (Kafka's ``byte-rate`` and
    ``throttle-time`` metrics of ``type=Produce`` / ``type=Fetch``)."""

    __slots__ = ("bytes", "key", "last_record_ms", "throttle", "throttles")

    def __init__(self, key: SensorKey, window: QuotaWindow, now_ms: int) -> None:
        self.key = key
        self.bytes = SampledStat(window)
        self.throttle = SampledStat(window)
        self.last_record_ms = now_ms
        #: Answers throttled since the sensor was created.
        self.throttles = 0

    def record_throttle(self, throttle_ms: int, now_ms: int) -> None:
        self.throttle.record(throttle_ms, now_ms)
        self.throttles += 1

    def throttle_time_avg_ms(self, now_ms: int) -> float:
        """The average throttle time over the window, 0 with none."""
        count = self.throttle.count(now_ms)
        return self.throttle.total(now_ms) / count if count else 0.0


@dataclass(frozen=True, slots=True)
class _Resolved:
    sensor_key: SensorKey
    bound: float


class ClientQuotaManager:
    """The sensors and bounds of one quota key (Kafka's ``ClientQuotaManager``).

    ``update`` takes each image's ``client_quotas``; ``enabled`` is True
    while some user or client-id entity sets ``quota_key``. The other
    methods may be called only while enabled (they answer as for an
    unlimited client otherwise).
    """

    def __init__(self, quota_key: str, window: QuotaWindow) -> None:
        self.quota_key = quota_key
        self.window = window
        #: Some entity sets the key: the handlers measure and throttle.
        self.enabled = False
        self._source: Mapping[QuotaEntity, Mapping[str, float]] | None = None
        # Entity -> bound, for the user / client-id entities that set the key.
        self._bounds: dict[QuotaEntity, float] = {}
        # (user, client id) -> its level's sensor key and bound, None: unlimited.
        self._resolved: dict[tuple[str, str], _Resolved | None] = {}
        self.sensors: dict[SensorKey, ClientSensor] = {}
        self._next_expiry_check_ms: int | None = None

    def update(self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> bool:
        """Take the image's quotas (a mapping the image shares while no quota
        changes: the same object is recognised at once); returns whether
        anything was re-read. Sensors are kept: a client whose level did not
        change keeps its measured rate under the new bound, as in Kafka;
        once no quota is left they go (nothing would expire them)."""
        if client_quotas is self._source:
            return False
        self._source = client_quotas
        key = self.quota_key
        self._bounds = {
            entity: float(quotas[key]) for entity, quotas in client_quotas.items()
            if key in quotas and all(kind in ("user", "client-id") for kind, _ in entity)
        }
        self._resolved.clear()
        self.enabled = bool(self._bounds)
        if not self.enabled:
            self.sensors.clear()
        return True

    def resolve(self, client_id: str, *, user: str = ANONYMOUS) -> tuple[SensorKey, float] | None:
        """(sensor key, bound) for the client, or None: no quota applies."""
        resolved = self._resolve(user, client_id)
        return None if resolved is None else (resolved.sensor_key, resolved.bound)

    def record_and_get_throttle_ms(
        self, client_id: str, value: float, now_ms: int, *, user: str = ANONYMOUS,
    ) -> int:
        """Record ``value`` bytes against the client's sensor; the throttle
        time in ms if that takes it over its bound, else 0. An unlimited
        client records nothing."""
        if self._next_expiry_check_ms is None or now_ms >= self._next_expiry_check_ms:
            self.expire_idle_sensors(now_ms)
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return 0
        sensor = self.sensors.get(resolved.sensor_key)
        if sensor is None:
            sensor = self.sensors[resolved.sensor_key] = ClientSensor(
                resolved.sensor_key, self.window, now_ms)
        sensor.bytes.record(value, now_ms)
        sensor.last_record_ms = now_ms
        throttle_ms = _throttle_ms(sensor.bytes, resolved.bound, now_ms)
        if throttle_ms:
            sensor.record_throttle(throttle_ms, now_ms)
        return throttle_ms

    def record_unless_over(
        self, client_id: str, value: float, now_ms: int, *, user: str = ANONYMOUS,
    ) -> tuple[int, bool]:
        """Kafka's accounting of a consumer fetch answer: record ``value``
        bytes; if that takes the client over its bound, take them back (Kafka's
        ``unrecordQuotaSensor``: the answer goes out empty) and return the
        throttle time with False. Except when the client's window held
        nothing before: then the answer goes out whole, throttled, so one
        answer bigger than what a window allows cannot hold a consumer back
        for good. Returns (throttle ms, whether the answer may carry the
        bytes); (0, True) for an unlimited client."""
        if self._next_expiry_check_ms is None or now_ms >= self._next_expiry_check_ms:
            self.expire_idle_sensors(now_ms)
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return 0, True
        sensor = self.sensors.get(resolved.sensor_key)
        if sensor is None:
            sensor = self.sensors[resolved.sensor_key] = ClientSensor(
                resolved.sensor_key, self.window, now_ms)
        had_bytes = sensor.bytes.total(now_ms) > 0
        sensor.bytes.record(value, now_ms)
        sensor.last_record_ms = now_ms
        throttle_ms = _throttle_ms(sensor.bytes, resolved.bound, now_ms)
        if not throttle_ms:
            return 0, True
        sensor.record_throttle(throttle_ms, now_ms)
        if had_bytes:
            sensor.bytes.record(-value, now_ms)
            return throttle_ms, False
        return throttle_ms, True

    def throttle_ms(self, client_id: str, now_ms: int, *, user: str = ANONYMOUS) -> int:
        """The throttle time the client has earned already (its rate over its
        bound) without recording bytes: 0 for an unlimited or unmeasured
        client. A throttle counts in the sensor's throttle-time metric."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return 0
        sensor = self.sensors.get(resolved.sensor_key)
        if sensor is None:
            return 0
        throttle_ms = _throttle_ms(sensor.bytes, resolved.bound, now_ms)
        if throttle_ms:
            sensor.record_throttle(throttle_ms, now_ms)
        return throttle_ms

    def max_value_in_window(self, client_id: str, *, user: str = ANONYMOUS) -> float | None:
        """Kafka's ``getMaxValueInQuotaWindow``: bound * (num - 1) * window
        size in seconds, the most one answer may carry (a consumer fetch's
        max bytes is capped at it); None for an unlimited client."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return None
        return resolved.bound * (self.window.num - 1) * self.window.size_ms / 1000.0

    def expire_idle_sensors(self, now_ms: int) -> int:
        """Drop the sensors without a record for an hour (Kafka's inactive
        sensor expiry), so a broker seeing many short-lived client ids keeps
        bounded state; returns how many went."""
        self._next_expiry_check_ms = now_ms + _EXPIRY_CHECK_INTERVAL_MS
        idle = [key for key, sensor in self.sensors.items()
                if now_ms - sensor.last_record_ms >= INACTIVE_SENSOR_EXPIRATION_MS]
        for key in idle:
            del self.sensors[key]
        # Resolutions are cheap to redo: forgetting them bounds the cache too.
        self._resolved.clear()
        return len(idle)

    def snapshot(self, now_ms: int) -> Iterator[tuple[SensorKey, float, float]]:
        """(sensor key, byte rate per second, average throttle time in ms)
        of every sensor: for the metrics, read at scrape time."""
        for key, sensor in list(self.sensors.items()):
            yield key, sensor.bytes.rate(now_ms), sensor.throttle_time_avg_ms(now_ms)

    def _resolve(self, user: str, client_id: str) -> _Resolved | None:
        cache_key = (user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        bounds = self._bounds
        resolved: _Resolved | None = None
        # Kafka's default quota callback: most specific first (module docstring).
        for entity, sensor_key in (
            ((("client-id", client_id), ("user", user)), (user, client_id)),
            ((("client-id", None), ("user", user)), (user, client_id)),
            ((("user", user),), (user, "")),
            ((("client-id", client_id), ("user", None)), (user, client_id)),
            ((("client-id", None), ("user", None)), (user, client_id)),
            ((("user", None),), (user, "")),
            ((("client-id", client_id),), ("", client_id)),
            ((("client-id", None),), ("", client_id)),
        ):
            bound = bounds.get(entity)
            if bound is not None:
                resolved = _Resolved(sensor_key, bound)
                break
        self._resolved[cache_key] = resolved
        return resolved


def _throttle_ms(stat: SampledStat, bound: float, now_ms: int) -> int:
    """Kafka's ``QuotaUtils.throttleTime`` once the rate exceeds ``bound``:
    ``(rate - bound) / bound * window`` rounded half up (Java's
    ``Math.round``); 0 within the bound. A bound of 0 or less (nothing
    allowed) holds the client off a whole window; capped at int32 for the
    wire."""
    rate = stat.rate(now_ms)
    if rate <= bound:
        return 0
    window_ms = stat.window_ms(now_ms)
    if bound <= 0:
        return min(window_ms, _INT32_MAX)
    return min(math.floor((rate - bound) / bound * window_ms + 0.5), _INT32_MAX)


class ClientQuotas:
    """One broker's client-quota managers, shared by all of its listeners:
    ``produce`` (``producer_byte_rate``), ``fetch`` (``consumer_byte_rate``)
    and ``request`` (``request_percentage``: its values are percent of a
    thread's time, not bytes; `data_plane.broker.request_quotas`).
    """

    __slots__ = ("fetch", "produce", "request", "window")

    def __init__(self, window: QuotaWindow | None = None) -> None:
        self.window = window or QuotaWindow()
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, self.window)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, self.window)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, self.window)

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> ClientQuotas:
        """With the window of ``quota.window.num`` / ``quota.window.size.seconds``."""
        return cls(QuotaWindow.from_config(config))

    def update(self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Take a metadata image's ``client_quotas`` (cheap when unchanged)."""
        self.produce.update(client_quotas)
        self.fetch.update(client_quotas)
        self.request.update(client_quotas)
