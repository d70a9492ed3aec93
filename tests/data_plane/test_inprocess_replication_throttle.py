"""Replication throttles (KIP-73) with real brokers in one process (fake
controller: configs go straight into its metadata image, as the
controller's ConfigRecords would).

A follower that was down comes back behind the leader and catches up:
- with the leader's throttle set, the leader holds the records back once
  its rate is over the bound; with the follower's, the follower leaves the
  partition out of its fetches. Either way the catch-up takes at least as
  long as the bound allows, and the measured rate stays near the bound;
- once the follower is back in the ISR it is no longer throttled: acks=all
  produces go through at full speed with the throttle still set (a rate of
  one byte per second), because an in-sync follower's fetch is what
  acknowledges them.

The quota window is 2 samples of 1 s (``replication.quota.window.num=2``;
Kafka's default is 11): a rate is measured over 1-2 s, so the burst before
throttling starts is about one second's worth (`_least_catch_up_s`).
Fetches carry at most 64 KiB (``replica.fetch.max.bytes``) and the
producer's batches are small, so a catch-up takes many fetches (a single
batch is always sent whole, KIP-74).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer

from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster

pytestmark = pytest.mark.timeout(120)

RATE = 200_000  # bytes per second
BACKLOG = 1_000  # records of VALUE
VALUE = b"v" * 1000
FETCH_BYTES = 64 * 1024
WINDOWS = 2  # replication.quota.window.num, of 1 s each


def _least_catch_up_s(backlog: int) -> float:
    """The shortest catch-up the throttle allows: Kafka's rate divides by
    at least ``WINDOWS - 1`` windows plus the time since the oldest sample
    began, so by time t about RATE * (WINDOWS - 1 + t) bytes pass, plus the
    fetch that crosses the bound."""
    return (backlog - FETCH_BYTES) / RATE - (WINDOWS - 1)


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 2, {
        "replication.quota.window.num": str(WINDOWS),
        "replication.quota.window.size.seconds": "1",
        # Many fetches per catch-up (one answer of 1 MiB would carry it all).
        "replica.fetch.max.bytes": str(FETCH_BYTES),
    })
    with ClusterThread(c) as ct:
        yield ct


def _produce(bootstrap: str, topic: str, count: int, acks: str) -> list[KafkaError]:
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        del msg
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "batch.size": 16384, "message.timeout.ms": 20_000})
    for _ in range(count):
        producer.produce(topic, VALUE, partition=0, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return errors


def _leo(ct: ClusterThread, broker: int, topic: str) -> int:
    """On the loop thread (a `wait_until` predicate) or off it: a plain read."""
    hosted = ct.cluster.brokers[broker].replicas.partitions.get((topic, 0))
    return -1 if hosted is None else int(hosted.partition.log_end_offset)


def _isr(ct: ClusterThread, topic: str) -> tuple[int, ...]:
    t = ct.cluster.controller.image.topic_by_name(topic)
    assert t is not None
    return tuple(t.partitions[0].isr)


def _behind_follower(ct: ClusterThread, topic: str) -> int:
    """Create ``topic`` (leader 1, follower 2), take broker 2 down, write
    the backlog with acks=1; returns the backlog's size in bytes."""
    ct.call(ct.cluster.controller.create_topic, topic, 1, 2)
    ct.run(ct.cluster.wait_until(lambda: _isr(ct, topic) == (1, 2)))
    ct.run(ct.cluster.kill_broker(2))
    assert _isr(ct, topic) == (1,)
    assert _produce(ct.cluster.bootstrap_servers, topic, BACKLOG, "1") == []
    hosted = ct.cluster.brokers[1].replicas.partitions[(topic, 0)]
    return int(ct.call(lambda: hosted.partition.log.size_in_bytes))


def _catch_up(ct: ClusterThread, topic: str) -> float:
    """Bring broker 2 back; seconds until it has the leader's log and is in the ISR."""
    target = _leo(ct, 1, topic)
    started = time.monotonic()
    ct.run(ct.cluster.start_broker(2))
    ct.run(ct.cluster.wait_until(lambda: _leo(ct, 2, topic) == target, timeout_s=60), 70)
    elapsed = time.monotonic() - started
    ct.run(ct.cluster.wait_until(lambda: _isr(ct, topic) == (1, 2), timeout_s=10))
    return elapsed


def _in_sync_follower_is_not_throttled(ct: ClusterThread, topic: str) -> None:
    # A rate of one byte per second: an in-sync follower would never keep up.
    for broker in (1, 2):
        for side in ("leader", "follower"):
            ct.call(ct.cluster.controller.set_broker_config, broker,
                    f"{side}.replication.throttled.rate", "1")
    leo = _leo(ct, 1, topic)
    assert _produce(ct.cluster.bootstrap_servers, topic, 300, "all") == []
    assert _leo(ct, 2, topic) == leo + 300  # replicated, not held back
    assert _isr(ct, topic) == (1, 2)


def _throttled_catch_up(ct: ClusterThread, topic: str, side: str, broker: int) -> None:
    """A follower comes back behind with ``side``'s throttle set on
    ``broker`` (1: the leader, 2: the follower) for partition 0 there; it
    catches up no faster than the throttle allows, the rate measured stays
    near the bound, the other side measures nothing, and once in sync the
    follower is no longer throttled."""
    backlog = _behind_follower(ct, topic)
    ct.call(ct.cluster.controller.set_topic_config, topic,
            f"{side}.replication.throttled.replicas", f"0:{broker}")
    ct.call(ct.cluster.controller.set_broker_config, broker,
            f"{side}.replication.throttled.rate", str(RATE))
    replicas = ct.cluster.brokers[broker].replicas
    if broker == 1:  # broker 2 applies its configs when it starts again
        ct.run(ct.cluster.wait_until(lambda: replicas.replication_quotas.leader.active))

    elapsed = _catch_up(ct, topic)
    print(f"{side} throttle {RATE} B/s: {backlog} bytes caught up in {elapsed:.2f} s")

    assert elapsed >= _least_catch_up_s(backlog), (elapsed, backlog)
    replicas = ct.cluster.brokers[broker].replicas  # broker 2 is a new one
    quota = getattr(replicas.replication_quotas, side)
    assert quota.active
    assert 0 < ct.call(quota.rate, replicas.now_ms()) <= 1.5 * RATE
    other = ct.cluster.brokers[3 - broker].replicas
    other_side = getattr(other.replication_quotas, "follower" if side == "leader" else "leader")
    assert other_side.stat.total(other.now_ms()) == 0
    _in_sync_follower_is_not_throttled(ct, topic)


def test_leader_throttle_bounds_a_catching_up_follower(cluster: ClusterThread) -> None:
    _throttled_catch_up(cluster, "lt", "leader", 1)


def test_follower_throttle_bounds_its_own_catch_up(cluster: ClusterThread) -> None:
    _throttled_catch_up(cluster, "ft", "follower", 2)


def test_without_a_throttle_nothing_is_measured(cluster: ClusterThread) -> None:
    ct = cluster
    _behind_follower(ct, "free")
    # Throttled replicas named, but no rate: the managers stay idle.
    ct.call(ct.cluster.controller.set_topic_config, "free",
            "leader.replication.throttled.replicas", "*")
    elapsed = _catch_up(ct, "free")
    print(f"no throttle: caught up in {elapsed:.2f} s")
    for broker in (1, 2):
        quotas = ct.cluster.brokers[broker].replicas.replication_quotas
        assert not quotas.leader.active and not quotas.follower.active
        assert quotas.leader.stat.total(0) == 0 == quotas.follower.stat.total(0)
