"""Request quotas (KIP-124, ``request_percentage``): the loop time a handler
uses is measured step by step (`raftlog.net.request_time`), charged to its
client (`data_plane.broker.request_quotas`), and a client over its quota
gets throttle times and a muted connection; follower fetches and other
clients are not held back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.metadata.v12 import request as md_req

from data_plane.broker.client_quotas import ClientQuotaManager, QuotaWindow
from data_plane.broker.request_quotas import (
    CLIENT_THROTTLES_FROM,
    NANOS_TO_PERCENT,
    RequestQuota,
)
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.net import RequestContext
from raftlog.net.client import KafkaProtocolClient
from raftlog.net.request_time import RequestClock, timed

pytestmark = pytest.mark.timeout(120)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_timed_counts_the_steps_and_not_the_waits() -> None:
    async def handler(gate: asyncio.Future[str]) -> str:
        _busy(0.02)
        got = await gate  # the wait: not the handler's loop time
        _busy(0.02)
        await asyncio.sleep(0)
        return got + "!"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[str] = loop.create_future()
        loop.call_later(1.0, gate.set_result, "done")
        clock = RequestClock()
        started = time.perf_counter()
        assert await timed(handler(gate), clock) == "done!"
        assert time.perf_counter() - started >= 1.0
        assert 0.04e9 <= clock.spent_ns < 0.9e9

    asyncio.run(main())


def test_timed_passes_errors_and_cancellation_through() -> None:
    async def fails(gate: asyncio.Future[None]) -> None:
        await gate

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        loop.call_soon(gate.set_exception, ValueError("bad"))
        with pytest.raises(ValueError, match="bad"):
            await timed(fails(gate), RequestClock())
        waiting = loop.create_future()
        task = asyncio.ensure_future(timed(fails(waiting), RequestClock()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert waiting.cancelled()  # the cancellation reached the awaited future

    asyncio.run(main())


def _context(api_key: int, client_id: str = "app", clock: RequestClock | None = None) -> Any:
    return RequestContext(api_key=api_key, api_version=12, correlation_id=1, client_id=client_id,
                          peer=None, listener_name="PLAINTEXT", clock=clock)


def test_request_quota_charges_percent_of_a_thread_and_caps_the_throttle() -> None:
    window = QuotaWindow(2, 1000)
    manager = ClientQuotaManager("request_percentage", window)
    now = [10_000]
    quota = RequestQuota(manager, lambda: now[0])
    assert not quota.enabled
    manager.update({(("client-id", "app"),): {"request_percentage": 10.0}})
    assert quota.enabled
    # 50 ms of loop time in a window of at least 1 s: 5 percent, within 10.
    assert quota.record(_context(3), 50_000_000) == 0
    assert manager.sensors[("", "app")].bytes.total(now[0]) == pytest.approx(
        50_000_000 * NANOS_TO_PERCENT)
    # Another 150 ms: 20 percent, twice the quota: (20 - 10) / 10 x 1 s.
    assert quota.record(_context(3), 150_000_000) == 1000
    # Far over: capped at one window (Kafka's request-quota cap).
    assert quota.record(_context(3), 5_000_000_000) == 1000
    # Exempt: node-to-node requests and the SASL exchange.
    for key in (27, 58, 17, 36):
        assert quota.record(_context(key), 5_000_000_000) == 0
    # Another client id is not under a quota.
    assert quota.record(_context(3, client_id="other"), 5_000_000_000) == 0


def test_charge_marks_the_request_and_exempt_charges_nothing() -> None:
    manager = ClientQuotaManager("request_percentage", QuotaWindow(2, 1000))
    manager.update({(("client-id", "app"),): {"request_percentage": 0.001}})
    quota = RequestQuota(manager, lambda: 5_000)
    assert quota.charge(_context(1)) == 0  # not timed (quotas were off at its start)
    clock = RequestClock()
    _busy(0.002)
    context = _context(1, clock=clock)
    assert quota.charge(context) > 0 and clock.charged
    exempt = RequestClock()
    RequestQuota.exempt(_context(1, clock=exempt))
    assert exempt.charged


def test_client_throttling_versions_follow_kip_219() -> None:
    quota = RequestQuota(ClientQuotaManager("request_percentage", QuotaWindow()), lambda: 0)
    assert not quota.client_throttles(0, 5) and quota.client_throttles(0, 6)  # Produce
    assert not quota.client_throttles(1, 7) and quota.client_throttles(1, 8)  # Fetch
    assert not quota.client_throttles(3, 5) and quota.client_throttles(3, 12)  # Metadata
    assert quota.client_throttles(75, 0)  # DescribeTopicPartitions: every version
    assert not quota.client_throttles(60, 1)  # DescribeCluster: never (Kafka's default)
    assert not quota.client_throttles(23, 4)  # OffsetForLeaderEpoch: never
    assert CLIENT_THROTTLES_FROM[18] == 2  # ApiVersions


# --- against an in-process cluster ------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path_factory.mktemp("requests")), 3, {
        "quota.window.num": "2", "quota.window.size.seconds": "1",
        "min.insync.replicas": "2"})
    with ClusterThread(c) as ct:
        ct.call(c.controller.create_topic, "rq", 1, 3, {"min.insync.replicas": "2"})
        ct.run(c.wait_until(lambda: any(
            k[0] == "rq" and h.partition.is_leader
            for b in c.brokers.values() for k, h in b.replicas.partitions.items())))
        yield ct


def _metadata_throttles(ct: ClusterThread, client_id: str, count: int) -> list[int]:
    """``count`` Metadata v12 requests as ``client_id`` to broker 1: each
    answer's throttle time (ms)."""
    async def run() -> list[int]:
        client = KafkaProtocolClient("127.0.0.1", ct.cluster.brokers[1].server.port,
                                     client_id=client_id, request_timeout_ms=10_000)
        try:
            out = []
            for _ in range(count):
                response = await client.send(md_req.MetadataRequest(
                    topics=None, allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False), 12)
                out.append(int(response.throttle_time.total_seconds() * 1000))
            return out
        finally:
            await client.close()
    return asyncio.run(run())


def test_a_client_over_its_request_quota_is_throttled_and_others_are_not(
    cluster: ClusterThread,
) -> None:
    c = cluster.cluster
    cluster.call(c.controller.set_client_quota, (("client-id", "busy"),),
                 "request_percentage", 0.01)
    broker = c.brokers[1]
    cluster.run(c.wait_until(lambda: broker.replicas.request_quota.enabled))
    started = time.monotonic()
    throttles = _metadata_throttles(cluster, "busy", 6)
    elapsed = time.monotonic() - started
    # 0.01 percent is 0.1 ms of loop time a second: a Metadata answer costs
    # more, so the client is throttled, each time by at most one window.
    assert max(throttles) > 0 and all(0 <= t <= 1000 for t in throttles), throttles
    # The mute held the client back (the requests alone take milliseconds).
    assert elapsed > 1.0
    sensor = cluster.call(broker.replicas.client_quotas.request.sensors.get, ("", "busy"))
    assert sensor is not None and sensor.throttles > 0
    # Another client id is not bounded, nor measured.
    assert _metadata_throttles(cluster, "free", 40) == [0] * 40
    assert cluster.call(broker.replicas.client_quotas.request.sensors.get, ("", "free")) is None


def test_produce_answers_carry_the_request_throttle_and_followers_are_exempt(
    cluster: ClusterThread,
) -> None:
    c = cluster.cluster
    # The default client id: every client, the brokers' fetchers included
    # if they were charged.
    cluster.call(c.controller.set_client_quota, (("client-id", None),),
                 "request_percentage", 0.01)
    leader = c.leader_of("rq", 0)
    broker = c.brokers[leader]
    cluster.run(c.wait_until(lambda: broker.replicas.client_quotas.request.resolve("x")
                             is not None))
    throttled: list[Any] = []
    acked: list[int] = []
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "client.id": "writer",
                         "acks": "all", "linger.ms": 0, "throttle_cb": throttled.append})
    for i in range(8):
        producer.produce("rq", b"%d" % i, partition=0,
                         on_delivery=lambda err, msg: acked.append(msg.offset())
                         if err is None else None)
        producer.flush(30)
    assert len(acked) == 8  # acks=all: the followers kept replicating
    assert throttled, "the producer was never told of a throttle time"
    # No follower's fetch was charged: only the clients' sensors exist.
    for b in c.brokers.values():
        sensors = cluster.call(lambda b=b: list(b.replicas.client_quotas.request.sensors))
        assert all(not client.startswith("raftlog") for _, client in sensors), sensors
    cluster.call(c.controller.set_client_quota, (("client-id", None),),
                 "request_percentage", None)
