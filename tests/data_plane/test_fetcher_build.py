"""The follower fetcher rebuilds only the partitions that may have changed
(`data_plane.broker.fetcher._Fetcher._build`): those the last answer named,
those without a request last time, and all of them after metadata changes
or once per `_FULL_BUILD_INTERVAL_MS`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from data_plane.broker.fetcher import _FULL_BUILD_INTERVAL_MS, _Fetcher
from data_plane.replication.types import FetchPartition, Role, TopicPartition

LEADER = 1
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
class StubReplicas:
    now: int = 0
    hosted: dict[TopicPartition, StubHosted] = field(default_factory=dict)

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
