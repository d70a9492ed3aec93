"""Controller mutation quotas (KIP-599): partitions created or deleted per second.

An entity's ``controller_mutation_rate`` bounds how fast its clients may
create topics, add partitions and delete topics. The active controller
enforces it (Kafka's ``ControllerMutationQuotaManager``): brokers forward
the three requests in an Envelope that carries the client's principal and
client id, and the quota is resolved from them as the byte-rate quotas are
(`data_plane.broker.client_quotas`: user and client id, most specific
first).

**Token bucket.** Each sensor (user, client id) holds tokens, refilled at
the quota's rate up to a burst of ``rate * controller.quota.window.num *
controller.quota.window.size.seconds`` (11 s of the rate by default), and
starts full. Each topic a request creates, grows or deletes takes as many
tokens as partitions it adds or removes; the count may take the bucket
below zero.

**Strict and permissive.** CreateTopics v6+, CreatePartitions v3+ and
DeleteTopics v5+ are strict: a topic met while the bucket is below zero is
refused with THROTTLING_QUOTA_EXCEEDED, and the answer's ``throttle_time_ms``
says how long until the bucket is back at zero (``-tokens / rate``, in ms,
rounded half up). Older versions, whose clients do not know the error, are
permissive: everything is accepted and charged, and the throttle time is
only reported. A request is accepted whole while the bucket is at zero or
above, so one request may overdraw it and the next is refused.

Pure: no I/O, time comes in as ``now_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Final

from data_plane.broker.client_quotas import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    ClientQuotaManager,
    QuotaWindow,
    SampledStat,
    SensorKey,
)
from metadata_quorum.client_quotas import CONTROLLER_MUTATION_RATE
from metadata_quorum.records import QuotaEntity
from raftlog.net.sasl import ANONYMOUS

__all__ = (
    "STRICT_SINCE",
    "ControllerMutationQuotas",
    "MutationQuota",
    "TokenBucket",
)

#: The first version of each API that is refused rather than only throttled
#: (api key -> version): CreateTopics, CreatePartitions, DeleteTopics.
STRICT_SINCE: Final = {19: 6, 37: 3, 20: 5}

_INT32_MAX: Final = 2**31 - 1
_EXPIRY_CHECK_INTERVAL_MS: Final = 30_000


class TokenBucket:
    """Kafka's ``TokenBucket`` stat: ``tokens`` refill at ``rate`` per
    second up to ``burst``; a record takes tokens away. With it, the
    sensor's ``mutation-rate`` and ``throttle-time`` stats (metrics)."""

    __slots__ = ("burst", "last_ms", "last_used_ms", "mutations", "rate", "throttles", "tokens")

    def __init__(self, rate: float, burst: float, now_ms: int,
                 window: QuotaWindow | None = None) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last_ms = now_ms
        self.last_used_ms = now_ms
        self.mutations = SampledStat(window or QuotaWindow())
        self.throttles = SampledStat(window or QuotaWindow())

    def refill(self, now_ms: int) -> float:
        """The tokens at ``now_ms``."""
        elapsed = max(0, now_ms - self.last_ms)
        self.tokens = min(self.burst, self.tokens + self.rate * elapsed / 1000.0)
        self.last_ms = max(self.last_ms, now_ms)
        return self.tokens

    def take(self, value: float, now_ms: int) -> None:
        self.refill(now_ms)
        self.tokens = min(self.burst, self.tokens - value)
        self.last_used_ms = now_ms
        self.mutations.record(value, now_ms)

    def throttle_ms(self) -> int:
        """How long until the bucket is back at zero: Kafka's
        ``round(-tokens / rate * 1000)``; 0 when it is not below zero."""
        if self.tokens >= 0:
            return 0
        return min(math.floor(-self.tokens / self.rate * 1000.0 + 0.5), _INT32_MAX)


class MutationQuota:
    """One request's view of its client's bucket (Kafka's strict or
    permissive ``ControllerMutationQuota``); `charge` is called once per
    topic, after the topic's own checks passed."""

    __slots__ = ("_bucket", "_now_ms", "_throttle_ms", "strict")

    def __init__(self, bucket: TokenBucket, *, strict: bool, now_ms: int) -> None:
        self._bucket = bucket
        self.strict = strict
        self._now_ms = now_ms
        self._throttle_ms = 0

    def charge(self, partitions: int) -> bool:
        """Take ``partitions`` tokens; False (nothing taken) when strict and
        the bucket is already below zero: the topic is refused with
        THROTTLING_QUOTA_EXCEEDED."""
        bucket = self._bucket
        if self.strict:
            if bucket.refill(self._now_ms) < 0:
                self._throttle_ms = bucket.throttle_ms()
                bucket.throttles.record(self._throttle_ms, self._now_ms)
                return False
            bucket.take(partitions, self._now_ms)
            return True
        bucket.take(partitions, self._now_ms)
        self._throttle_ms = bucket.throttle_ms()
        if self._throttle_ms:
            bucket.throttles.record(self._throttle_ms, self._now_ms)
        return True

    @property
    def throttle_time_ms(self) -> int:
        """The answer's ``throttle_time_ms``: the wait a refusal (strict) or
        an overdraft (permissive) earned in this request, else 0. (A strict
        request that overdraws the bucket without being refused reports 0,
        as Kafka's does; the next one is refused.)"""
        return self._throttle_ms


class ControllerMutationQuotas:
    """The active controller's buckets: one per sensor, made on first use,
    dropped after an hour unused (by then full again)."""

    def __init__(self, window: QuotaWindow | None = None) -> None:
        self.window = window or QuotaWindow()
        self._bounds = ClientQuotaManager(CONTROLLER_MUTATION_RATE, self.window)
        self.buckets: dict[SensorKey, TokenBucket] = {}
        self._next_expiry_ms: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> ControllerMutationQuotas:
        """``controller.quota.window.num`` windows of
        ``controller.quota.window.size.seconds`` (Kafka's 11 of 1 s)."""
        return cls(QuotaWindow(int(config.get("controller.quota.window.num", "11")),
                               int(config.get("controller.quota.window.size.seconds", "1"))
                               * 1000))

    def update(self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Take the committed image's quotas (cheap when unchanged)."""
        if self._bounds.update(client_quotas) and not self._bounds.enabled:
            self.buckets.clear()

    def quota_for(
        self, client_id: str, now_ms: int, *, user: str = ANONYMOUS, strict: bool,
    ) -> MutationQuota | None:
        """The request's quota, or None when no entity bounds the client."""
        if not self._bounds.enabled:
            return None
        if self._next_expiry_ms is None or now_ms >= self._next_expiry_ms:
            self._expire(now_ms)
        resolved = self._bounds.resolve(client_id, user=user)
        if resolved is None:
            return None
        key, rate = resolved
        burst = rate * self.window.num * self.window.size_ms / 1000.0
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket(rate, burst, now_ms, self.window)
        elif bucket.rate != rate:
            # A changed quota: the tokens so far count, under the new bound.
            bucket.refill(now_ms)
            bucket.rate, bucket.burst = rate, burst
            bucket.tokens = min(bucket.tokens, burst)
        return MutationQuota(bucket, strict=strict, now_ms=now_ms)

    def snapshot(self, now_ms: int) -> Iterator[tuple[SensorKey, float, float, float]]:
        """(sensor key, tokens, partitions per second, average throttle time
        in ms) of every bucket, over the quota window: Kafka's
        ``ControllerMutation`` metrics, read at scrape time."""
        for key, bucket in list(self.buckets.items()):
            throttled = bucket.throttles.count(now_ms)
            yield (key, bucket.refill(now_ms), bucket.mutations.rate(now_ms),
                   bucket.throttles.total(now_ms) / throttled if throttled else 0.0)

    def _expire(self, now_ms: int) -> None:
        self._next_expiry_ms = now_ms + _EXPIRY_CHECK_INTERVAL_MS
        for key in [k for k, b in self.buckets.items()
                    if now_ms - b.last_used_ms >= INACTIVE_SENSOR_EXPIRATION_MS]:
            del self.buckets[key]
