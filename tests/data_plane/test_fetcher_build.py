"""The follower fetcher rebuilds only the partitions that may have changed
(`data_plane.broker.fetcher._Fetcher._build`): those the last answer named,
those without a request last time, and all of them after metadata changes
or once per `_FULL_BUILD_INTERVAL_MS`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from data_plane.broker.client_quotas import QuotaWindow
from data_plane.broker.fetcher import _FULL_BUILD_INTERVAL_MS, _Fetcher
from data_plane.broker.replication_quotas import ReplicationQuotas
from data_plane.replication.types import FetchPartition, Role, TopicPartition

LEADER = 1
SELF = 2
KEYS: list[TopicPartition] = [("t", i) for i in range(6)]


@dataclass
class StubPartition:
    key: TopicPartition
    asked: list[TopicPartition]
    offset: int = 0
    backing_off: bool = False
    role: Role = Role.FOLLOWER
    leader_id: int = LEADER
    last: FetchPartition | None = None
    isr: tuple[int, ...] = (LEADER, SELF)

    def fetch_request(self, now_ms: int) -> FetchPartition | None:
        self.asked.append(self.key)
        if self.backing_off:
            return None
        if self.last is None or self.last.fetch_offset != self.offset:
            self.last = FetchPartition(self.offset, 3, 3, 1 << 20, replica_id=2)
        return self.last


@dataclass
class StubHosted:
    partition: StubPartition


@dataclass
class StubMetadata:
    broker_id: int = SELF


@dataclass
class StubReplicas:
    now: int = 0
    hosted: dict[TopicPartition, StubHosted] = field(default_factory=dict)
    metadata: StubMetadata = field(default_factory=StubMetadata)
    replication_quotas: ReplicationQuotas = field(
        default_factory=lambda: ReplicationQuotas(QuotaWindow(2, 1000)))

    def now_ms(self) -> int:
        return self.now

    def get(self, key: TopicPartition) -> StubHosted | None:
        return self.hosted.get(key)


def _fetcher() -> tuple[_Fetcher, StubReplicas, list[TopicPartition]]:
    asked: list[TopicPartition] = []
    replicas = StubReplicas(hosted={k: StubHosted(StubPartition(k, asked)) for k in KEYS})
    fetcher = _Fetcher(cast(Any, replicas), LEADER, ("127.0.0.1", 1), cast(Any, None))
    fetcher.partitions = set(KEYS)
    topic_id = uuid.uuid4()
    fetcher.topic_ids = dict.fromkeys(KEYS, topic_id)
    return fetcher, replicas, asked


def test_only_changed_or_waiting_partitions_are_rebuilt_between_full_passes() -> None:
    fetcher, replicas, asked = _fetcher()
    first = fetcher._build()
    assert sorted(asked) == KEYS and set(first) == set(KEYS)
    asked.clear()
    assert fetcher._build() == first and asked == []  # nothing changed: nothing asked
    # An answer named t-2 (it appended): only t-2 is asked, and its new request is used.
    replicas.hosted[("t", 2)].partition.offset = 5
    assert fetcher._stale is not None
    fetcher._stale.add(("t", 2))
    again = fetcher._build()
    assert asked == [("t", 2)] and again[("t", 2)].fetch_offset == 5
    assert fetcher._wanted[("t", 2)][1].fetch_offset == 5
    asked.clear()
    # A partition backing off has no request and is asked again every time.
    replicas.hosted[("t", 4)].partition.backing_off = True
    fetcher._stale.add(("t", 4))
    assert ("t", 4) not in fetcher._build() and ("t", 4) not in fetcher._wanted
    asked.clear()
    fetcher._build()
    assert asked == [("t", 4)]
    replicas.hosted[("t", 4)].partition.backing_off = False
    assert ("t", 4) in fetcher._build()
    asked.clear()
    fetcher._build()
    assert asked == []
    # Metadata changed: everything again.
    fetcher.rebuild_all()
    fetcher._build()
    assert sorted(asked) == KEYS
    asked.clear()
    # And at least once per interval, whatever happened.
    replicas.now += _FULL_BUILD_INTERVAL_MS
    fetcher._build()
    assert sorted(asked) == KEYS


def test_a_partition_that_moved_to_another_leader_leaves_the_request() -> None:
    fetcher, replicas, _ = _fetcher()
    fetcher._build()
    replicas.hosted[("t", 1)].partition.leader_id = 3
    fetcher.rebuild_all()  # the metadata change that moved it also rebuilds
    assert ("t", 1) not in fetcher._build()
    assert ("t", 1) not in fetcher._wanted


def test_a_throttled_catching_up_partition_sits_out_while_over_the_rate() -> None:
    """KIP-73's follower side: a partition in ``follower.replication.throttled.replicas``
    that this broker is not in the ISR of is left out while the follower rate
    is over its bound; in-sync and unthrottled partitions are always asked."""
    fetcher, replicas, _ = _fetcher()
    replicas.hosted[("t", 0)].partition.isr = (LEADER,)  # catching up, throttled
    replicas.hosted[("t", 1)].partition.isr = (LEADER,)  # catching up, not throttled
    quota = replicas.replication_quotas.follower
    quota.update(1000, {"t": frozenset({0, 2})})  # t-2 is throttled but in sync
    assert set(fetcher._build()) == set(KEYS), "under the bound: everything is fetched"
    quota.record(5000, replicas.now)  # over the bound
    fetcher.rebuild_all()
    built = fetcher._build()
    assert ("t", 0) not in built and ("t", 0) not in fetcher._wanted
    assert set(built) == set(KEYS) - {("t", 0)}
    # Held, it is looked at on every build, and fetched once the rate is back under.
    replicas.now += 10_000  # both windows have passed
    assert ("t", 0) in fetcher._build()
