"""Replication throttles (KIP-73): a bound on the bytes per second that
catching-up replicas move, so that a reassignment or a replica rebuilding
its log does not take the brokers' disks and network from the clients.

Two managers per broker, as Kafka's ``ReplicationQuotaManager``s:

- **leader**: what this broker, as leader, sends to followers of its
  throttled partitions. Bound: the broker's dynamic
  ``leader.replication.throttled.rate``; partitions: the
  ``leader.replication.throttled.replicas`` entries of each topic that name
  this broker (``partition:broker``, or ``*`` for every partition).
- **follower**: what this broker, as follower, fetches for its throttled
  partitions (``follower.replication.throttled.rate`` and
  ``follower.replication.throttled.replicas``).

Only a replica outside the ISR is ever held back: an in-sync follower's
fetch is what moves the high watermark and acknowledges acks=all produces,
so throttling it would throttle the producers. Kafka's rules:

- **Leader** (``ReplicaManager.shouldLeaderThrottle``): a follower's fetch
  of a throttled partition, by a follower not in the ISR, while the leader
  rate is over its bound, is answered with no records (the fetch still
  counts for the follower's state), and its readable bytes do not complete
  the long poll (``DelayedFetch``), so the follower waits out
  ``replica.fetch.wait.max.ms`` instead of spinning.
- **Follower** (``ReplicaFetcherThread.shouldFollowerThrottle``): while the
  follower rate is over its bound, a throttled partition this broker is not
  in the ISR of is left out of the next fetch request.
- **Measuring**: the record bytes of throttled partitions actually sent
  (leader) or received (follower) are recorded, in sync or not, into a rate
  over ``replication.quota.window.num`` samples of
  ``replication.quota.window.size.seconds`` (Kafka's defaults: 11 of 1 s;
  the client quotas' `SampledStat`). The rate is over its bound when it
  exceeds it.

A third manager, **alter_log_dirs**, bounds the bytes this broker copies
when it moves replicas between its log dirs (AlterReplicaLogDirs, Kafka's
``ReplicaAlterLogDirsThread`` quota): the dynamic broker config
``replica.alter.log.dirs.io.max.bytes.per.second``, over every move, in
sync or not (a move's copy acknowledges nothing). While it is exceeded the
moves wait (`data_plane.broker.log_dir_moves`).

The rates default to Long.MAX_VALUE (unbounded), and a manager with no
bound or no throttled partition is not ``active``: the fetch paths then do
one attribute test and nothing else. Pure: time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from data_plane.broker.client_quotas import QuotaWindow, SampledStat
from data_plane.replication.types import TopicPartition

# The config names, as the controller validates them.
from metadata_quorum.controller.configuration_control import (
    ALTER_LOG_DIRS_IO_MAX_RATE,
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
)

__all__ = (
    "ALL_PARTITIONS",
    "ALTER_LOG_DIRS_IO_MAX_RATE",
    "FOLLOWER_THROTTLED_RATE",
    "FOLLOWER_THROTTLED_REPLICAS",
    "LEADER_THROTTLED_RATE",
    "LEADER_THROTTLED_REPLICAS",
    "ReplicationQuotaManager",
    "ReplicationQuotas",
    "parse_throttled_replicas",
)

_LONG_MAX: Final = (1 << 63) - 1


class _AllPartitions:
    """``*``: every partition of the topic is throttled on every broker."""

    __slots__ = ()

    def __contains__(self, partition: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL_PARTITIONS"


ALL_PARTITIONS: Final = _AllPartitions()
Throttled = frozenset[int] | _AllPartitions


def parse_throttled_replicas(value: str, broker_id: int) -> Throttled:
    """The partitions a ``*.replication.throttled.replicas`` value throttles
    on ``broker_id`` (Kafka's ``TopicConfigHandler.parseThrottledPartitions``):
    ``*`` is all of them; otherwise the ``partition:broker`` entries naming
    this broker. Entries that do not parse are ignored (the controller
    validates the value; this only guards a hand-written one)."""
    value = value.strip()
    if value == "*":
        return ALL_PARTITIONS
    partitions: set[int] = set()
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not sep or not partition.isdigit() or not broker.isdigit():
            continue
        if int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)


class ReplicationQuotaManager:
    """One direction's throttle: the bound, the throttled partitions, and
    the measured rate of their replication bytes."""

    __slots__ = ("active", "bound", "every_partition", "name", "stat", "throttled")

    def __init__(self, name: str, window: QuotaWindow) -> None:
        self.name = name
        #: Bytes per second; None: unbounded (Long.MAX_VALUE, the default).
        self.bound: int | None = None
        #: Topic -> its throttled partitions on this broker.
        self.throttled: dict[str, Throttled] = {}
        #: Every partition is throttled (`throttled` is then empty).
        self.every_partition = False
        self.stat = SampledStat(window)
        #: A bound and at least one throttled partition: only then is
        #: anything checked or recorded on the fetch paths.
        self.active = False

    def update(self, bound: int | None, throttled: Mapping[str, Throttled] | None) -> None:
        """``throttled``: per topic, its throttled partitions on this
        broker; None: every partition (the log-dir moves' bound)."""
        self.bound = bound if bound is not None and bound < _LONG_MAX else None
        self.every_partition = throttled is None
        self.throttled = {} if throttled is None else {
            topic: parts for topic, parts in throttled.items()
            if parts is ALL_PARTITIONS or parts}
        self.active = self.bound is not None and (self.every_partition or bool(self.throttled))

    def is_throttled(self, key: TopicPartition) -> bool:
        """Whether ``key`` is a throttled partition on this broker
        (Kafka's ``ReplicationQuotaManager.isThrottled``)."""
        if self.every_partition:
            return True
        parts = self.throttled.get(key[0])
        return parts is not None and key[1] in parts

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """Whether the measured rate is over the bound."""
        bound = self.bound
        return bound is not None and self.stat.rate(now_ms) > bound

    def record(self, nbytes: int, now_ms: int) -> None:
        self.stat.record(nbytes, now_ms)

    def rate(self, now_ms: int) -> float:
        """Bytes per second over the quota window (the ``byte-rate`` metric)."""
        return self.stat.rate(now_ms)

    def record_throttled(self, sizes: Iterable[tuple[TopicPartition, int]], now_ms: int) -> int:
        """Record the bytes of the throttled partitions among ``sizes``;
        returns how many."""
        total = sum(size for key, size in sizes if size and self.is_throttled(key))
        if total:
            self.record(total, now_ms)
        return total


class ReplicationQuotas:
    """The broker's leader and follower replication throttles, and the
    bound on its log-dir moves."""

    __slots__ = ("alter_log_dirs", "follower", "leader")

    def __init__(self, window: QuotaWindow) -> None:
        self.leader = ReplicationQuotaManager("leader", window)
        self.follower = ReplicationQuotaManager("follower", window)
        self.alter_log_dirs = ReplicationQuotaManager("alter_log_dirs", window)

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> ReplicationQuotas:
        """Empty managers with the window of ``replication.quota.window.num``
        and ``replication.quota.window.size.seconds`` (read once, as Kafka's
        are read-only settings)."""
        return cls(QuotaWindow(
            int(config.get("replication.quota.window.num", "11")),
            int(config.get("replication.quota.window.size.seconds", "1")) * 1000))

    def update(
        self, broker_config: Mapping[str, str],
        topic_configs: Iterable[tuple[str, Mapping[str, str]]], broker_id: int,
    ) -> None:
        """Apply the broker's rates and every topic's throttled replicas."""
        leader: dict[str, Throttled] = {}
        follower: dict[str, Throttled] = {}
        for topic, config in topic_configs:
            value = config.get(LEADER_THROTTLED_REPLICAS)
            if value:
                leader[topic] = parse_throttled_replicas(value, broker_id)
            value = config.get(FOLLOWER_THROTTLED_REPLICAS)
            if value:
                follower[topic] = parse_throttled_replicas(value, broker_id)
        self.leader.update(_rate(broker_config, LEADER_THROTTLED_RATE), leader)
        self.follower.update(_rate(broker_config, FOLLOWER_THROTTLED_RATE), follower)
        self.alter_log_dirs.update(_rate(broker_config, ALTER_LOG_DIRS_IO_MAX_RATE), None)


def _rate(config: Mapping[str, str], key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    try:
        return max(0, int(value))
    except ValueError:
        return None
