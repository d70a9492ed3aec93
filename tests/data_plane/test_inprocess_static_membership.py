"""Static membership (KIP-345) with a real client against the in-process cluster.

A member with ``group.instance.id`` that closes does not leave the group
(librdkafka sends no LeaveGroup for a static member), so nothing rebalances;
when it comes back under the same instance id within ``session.timeout.ms``
it gets its old assignment and the other member sees no revocation. A static
member that stays away past the session timeout is removed and the group
rebalances without it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP

from data_plane.testing.inprocess_cluster import ClusterThread

pytestmark = pytest.mark.timeout(180)

TOPIC = "static"
PARTITIONS = 6
SESSION_MS = 6000


@pytest.fixture
def cluster(groups_cluster: ClusterThread) -> ClusterThread:
    return groups_cluster


class StaticMember:
    """A confluent-kafka consumer polling in a thread, recording its callbacks."""

    def __init__(self, bootstrap: str, instance_id: str) -> None:
        self.events: list[tuple[str, tuple[int, ...]]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "static-group",
            "group.instance.id": instance_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "heartbeat.interval.ms": 300,
            "session.timeout.ms": SESSION_MS,
        })
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _record(self, kind: str, parts: list[CTP]) -> None:
        with self.lock:
            self.events.append((kind, tuple(sorted(p.partition for p in parts))))

    def _run(self) -> None:
        try:
            self.consumer.subscribe(
                [TOPIC],
                on_assign=lambda c, parts: self._record("assign", parts),
                on_revoke=lambda c, parts: self._record("revoke", parts),
                on_lost=lambda c, parts: self._record("lost", parts),
            )
            while not self.stop.is_set():
                self.consumer.poll(0.1)
            self.consumer.close()
        except BaseException as e:
            self.errors.append(e)

    def assigned(self) -> tuple[int, ...] | None:
        """The current assignment (from the callbacks), None before the first."""
        with self.lock:
            current: tuple[int, ...] | None = None
            for kind, parts in self.events:
                if kind == "assign":
                    current = parts
                elif current is not None:
                    current = tuple(p for p in current if p not in parts)
            return current

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.errors == []


def _wait(predicate: Callable[[], Any], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_a_static_member_restarting_within_the_session_timeout_keeps_its_partitions(
    cluster: ClusterThread,
) -> None:
    c = cluster.cluster
    cluster.call(c.controller.create_topic, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    bootstrap = c.bootstrap_servers
    a = StaticMember(bootstrap, "instance-a")
    b = StaticMember(bootstrap, "instance-b")
    both = lambda: (a.assigned() and b.assigned()  # noqa: E731
                    and len(a.assigned() or ()) + len(b.assigned() or ()) == PARTITIONS)
    _wait(both)
    time.sleep(1.0)  # settled: no further rebalance is pending
    first_a, first_b = a.assigned(), b.assigned()
    assert first_a is not None and first_b is not None
    assert set(first_a) | set(first_b) == set(range(PARTITIONS))
    b_events = len(b.events)

    a.close()  # a static member's close sends no LeaveGroup
    time.sleep(1.0)
    a2 = StaticMember(bootstrap, "instance-a")  # same instance id, well within the session
    _wait(lambda: a2.assigned() is not None, 30)
    time.sleep(1.0)
    assert a2.assigned() == first_a
    assert b.events[b_events:] == [], f"member b saw a rebalance: {b.events[b_events:]}"
    assert b.assigned() == first_b

    a2.close()  # gone for good: after the session timeout the group rebalances
    _wait(lambda: b.assigned() == tuple(range(PARTITIONS)), SESSION_MS / 1000 + 30)
    b.close()
