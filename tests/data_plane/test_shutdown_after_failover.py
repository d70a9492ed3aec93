"""Regression: SIGTERM after a failover exits promptly with code 0.

Bug (found building chaos/): after controlled shutdown was granted, a node
that had become a partition leader after a failover kept heartbeating and
never exited; `LocalCluster.stop` SIGKILLed it after its timeout. Cause:
Python 3.11's ``asyncio.wait_for`` swallows a cancellation that arrives in
the same loop iteration as the awaited event (CPython gh-86296). The
replica fetcher slept with ``wait_for(wake.wait(), t)``; the metadata change
of the controlled shutdown set ``wake`` just before the shutdown hook
cancelled the fetcher, the fetcher lived on and the hook awaited it
forever. Fix: `data_plane.broker.waits.wait_event` (``asyncio.timeout``) in
every such background loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from data_plane.broker.waits import wait_event
from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts


async def _sleeper(wake: asyncio.Event, use_wait_event: bool) -> int:
    loops = 0
    while loops < 5:
        loops += 1
        if use_wait_event:
            await wait_event(wake, 1.0)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 1.0)
        wake.clear()
    return loops


async def _cancel_as_event_fires(use_wait_event: bool) -> bool:
    """True if the task was cancelled; False if it swallowed the cancel."""
    wake = asyncio.Event()
    task = asyncio.create_task(_sleeper(wake, use_wait_event))
    await asyncio.sleep(0.01)
    wake.set()
    await asyncio.sleep(0)  # the event's waiter completes...
    task.cancel()  # ...and the cancel lands in the same loop iteration
    try:
        await asyncio.wait_for(task, 10)
    except asyncio.CancelledError:
        return True
    return False


def test_wait_event_propagates_a_cancel_that_races_the_event() -> None:
    assert asyncio.run(_cancel_as_event_fires(use_wait_event=True))


def test_wait_event_times_out_and_returns_on_set() -> None:
    async def go() -> tuple[bool, bool]:
        ev = asyncio.Event()
        timed_out = await wait_event(ev, 0.01)
        ev.set()
        return timed_out, await wait_event(ev, 1.0)

    assert asyncio.run(go()) == (False, True)


@pytest.mark.slow
def test_sigterm_after_failover_exits_quickly_with_code_0(tmp_path: object) -> None:
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2", "auto.create.topics.enable": "false"})
    cluster = LocalCluster(str(tmp_path), layout)
    cluster.up(40)
    stop = threading.Event()
    fatal: list[str] = []
    acked: list[tuple[int, int, bytes]] = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("t", 3, 3)])["t"].result(15)
        cluster.wait_topic("t", 3)

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                fatal.append(str(err))

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))

        def produce() -> None:
            p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                          "enable.idempotence": True, "log_level": 0, "error_cb": on_error})
            i = 0
            while not stop.is_set() and not fatal:
                p.produce("t", str(i).encode(), partition=i % 3, on_delivery=on_delivery)
                p.poll(0.005)
                i += 1
            p.flush(5)

        def consume() -> None:
            c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g",
                          "auto.offset.reset": "earliest", "log_level": 0})
            c.subscribe(["t"])
            while not stop.is_set():
                c.poll(0.1)
            c.close()

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        time.sleep(2)
        leader = admin.list_topics("t", timeout=5).topics["t"].partitions[0].leader
        cluster.kill(leader)  # failover: the others take over its partitions
        time.sleep(4)
        cluster.start(leader)
        asyncio.run(cluster.wait_ready_async(30))
        time.sleep(2)
        # One node SIGTERMed alone, then all at once (what LocalCluster.stop does).
        other = next(n.node_id for n in layout.nodes if n.node_id != leader)
        started = time.monotonic()
        assert cluster.kill(other, signal.SIGTERM, timeout_s=8) == 0
        assert time.monotonic() - started < 8
        cluster.start(other)
        asyncio.run(cluster.wait_ready_async(30))
        time.sleep(1)
    finally:
        stop.set()
    for t in threads:
        t.join(10)
    try:
        # The graceful restarts above must not cost the idempotent producer
        # its session (librdkafka's fatal OUT_OF_ORDER_SEQUENCE_NUMBER) nor
        # any acknowledged record (see test_replica_manager_shutdown.py).
        assert fatal == []
        assert len(acked) > 100
        stored = _read_all(cluster.bootstrap_servers, "t", 3)
        lost = [a for a in acked if stored.get((a[0], a[1])) != a[2]]
        assert lost == [], f"{len(lost)} of {len(acked)} acknowledged records lost: {lost[:5]}"
    finally:
        started = time.monotonic()
        ended = cluster.stop(timeout_s=8)
    assert set(ended.values()) == {"stopped"}, ended
    assert time.monotonic() - started < 8


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], bytes | None]:
    """Every record of ``topic`` by (partition, offset), read to the end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify",
                  "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 0})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[tuple[int, int], bytes | None] = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            out[(msg.partition(), msg.offset())] = msg.value()
    finally:
        c.close()
    assert len(at_end) == partitions, f"read did not reach the end of {topic}"
    return out
