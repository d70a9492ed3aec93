"""A failed write takes its log directory offline (Kafka's
LogDirFailureChannel), and a node whose log dir failed stops, as a Kafka
broker whose every log dir failed shuts down: its leaderships then move to
in-sync replicas that can still write, instead of the partitions it leads
answering KAFKA_STORAGE_ERROR for as long as its disk stays full.

The replica manager tests use the fake file system's full-disk switch; the
process test fills a real node's tmpfs data dir (root only, else skipped)."""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import Deliveries

from chaos.nemesis import process
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder
from raftlog.storage import ReportingFileSystem
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE
from raftlog.testing.disk import FakeFileSystem


def _batch(value: bytes = b"v") -> bytes:
    builder = BatchBuilder()
    builder.append(value, key=b"k", timestamp_ms=1000)
    return builder.build()


# --- the file-system hook ---------------------------------------------------------------


def test_failed_writes_are_reported_and_expected_errors_are_not() -> None:
    fake = FakeFileSystem()
    fake.make_dirs("/d")
    reports: list[tuple[str, int | None]] = []
    fs = ReportingFileSystem(fake, lambda path, e: reports.append((path, e.errno)))
    handle = fs.open("/d/a.log", create=True)
    handle.append(b"x")
    with pytest.raises(FileNotFoundError):
        fs.open("/d/missing")  # a lookup: not a failure of the directory
    with pytest.raises(FileNotFoundError):
        fs.remove("/d/missing")
    assert reports == []
    fake.full = True
    with pytest.raises(OSError):
        handle.append(b"y")
    assert reports == [("/d/a.log", errno.ENOSPC)]
    assert handle.read_at(0, 10) == b"x"  # reads pass through, unreported
    fake.full = False
    handle.append(b"z")
    assert len(reports) == 1


# --- the replica manager ------------------------------------------------------------


async def _leader_with_full_disk(tmp: str) -> tuple[ReplicaManager, FakeFileSystem, Any]:
    cluster = FakeMetadataCluster()
    for broker in (1, 2, 3):
        cluster.register_broker(broker, "127.0.0.1", 9000 + broker)
    cluster.create_topic("t", 1, 3, {})
    fake = FakeFileSystem()
    replicas = ReplicaManager(cluster.view(1), log_dirs=[tmp], fs=fake)
    replicas.start()
    await asyncio.sleep(0)
    key = ("t", 0)
    hosted = replicas.get(key)
    assert hosted is not None and hosted.partition.is_leader
    outcome = (await replicas.append_records({key: _batch()}, acks=1, timeout_ms=1000))[key]
    assert outcome.error == ErrorCode.none
    assert replicas.offline_log_dirs == {}
    fake.full = True
    return replicas, fake, key


def test_a_failed_append_takes_the_log_dir_offline_and_wakes_the_node() -> None:
    async def go() -> None:
        replicas, fake, key = await _leader_with_full_disk("/data")
        waiter = asyncio.create_task(replicas.wait_log_dir_failure())
        await asyncio.sleep(0)
        assert not waiter.done()
        outcome = (await replicas.append_records({key: _batch(b"w")}, acks=1,
                                                 timeout_ms=1000))[key]
        # Answered as before; the directory is now offline and the node told.
        assert outcome.error == ErrorCode.kafka_storage_error
        assert list(replicas.offline_log_dirs) == ["/data"]
        assert replicas.offline_log_dirs["/data"].errno == errno.ENOSPC
        assert await asyncio.wait_for(waiter, 1) == "/data"
        # A failed directory gets no clean-shutdown marker: the next open
        # recovers its logs as after a crash.
        fake.full = False
        await replicas.close()
        assert not fake.exists(os.path.join("/data", "t-0", CLEAN_SHUTDOWN_FILE))

    asyncio.run(go())


def test_a_healthy_close_still_writes_the_clean_shutdown_marker() -> None:
    async def go() -> None:
        replicas, fake, _ = await _leader_with_full_disk("/data")
        fake.full = False
        await replicas.close()
        assert replicas.offline_log_dirs == {}
        assert fake.exists(os.path.join("/data", "t-0", CLEAN_SHUTDOWN_FILE))

    asyncio.run(go())


# --- a real node -------------------------------------------------------------------


@pytest.fixture
def cluster_with_small_disks(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three nodes, each with its data dir on its own 64 MiB tmpfs."""
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast())
    cluster = LocalCluster(tmp_path / "cluster", layout)
    mounted: list[Path] = []
    try:
        for node in layout.nodes:
            data = cluster.data_dir(node.node_id)
            data.mkdir(parents=True, exist_ok=True)
            try:
                process.mount_tmpfs(data, 64 << 20)
            except (subprocess.CalledProcessError, FileNotFoundError) as exc:
                pytest.skip(f"cannot mount a tmpfs for a node's data dir (needs root): {exc}")
            mounted.append(data)
        cluster.up()
        yield cluster
    finally:
        cluster.stop()
        for data in mounted:
            process.free_disk(data)
            process.umount(data)


@pytest.mark.slow
def test_a_node_whose_disk_fills_stops_and_its_partitions_move(
        cluster_with_small_disks: LocalCluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = cluster_with_small_disks
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("full", 1, 3, config={"min.insync.replicas": "2"})])[
        "full"].result(30)
    deadline = time.monotonic() + 30
    victim = -1
    while victim < 0 and time.monotonic() < deadline:
        partitions = admin.list_topics("full", timeout=10).topics["full"].partitions
        victim = partitions[0].leader if 0 in partitions else -1
        time.sleep(0.1)
    assert victim > 0  # the partition's leader: its disk fills
    reports = Deliveries()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 60_000})
    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            producer.produce("full", b"r%06d" % sent, partition=0, on_delivery=reports)
            sent += 1
            producer.poll(0.002)

    produce_for(1.0)
    assert producer.flush(30) == 0 and reports.acked, reports.failed[:3]
    process.fill_disk(cluster.data_dir(victim), leave_bytes=0)
    filled_at = time.monotonic()
    deadline = filled_at + 30
    while cluster.is_alive(victim) and time.monotonic() < deadline:
        produce_for(0.05)
    assert cluster.exit_code(victim) == 1, "the node with the full disk did not stop"
    stopped_after = time.monotonic() - filled_at
    produce_for(3.0)
    assert producer.flush(60) == 0
    log_text = cluster.server_log(victim)
    assert "Shutdown broker because all log dirs in" in log_text, log_text[-3000:]
    assert "Traceback" not in log_text, log_text[-3000:]  # its exit wrote nothing more
    # The operator's heal: room on the disk, then a start. Its logs, closed
    # without the clean-shutdown marker, are recovered and it rejoins.
    process.free_disk(cluster.data_dir(victim))
    cluster.start(victim)
    cluster.wait_ready(60)
    produce_for(1.0)
    assert producer.flush(60) == 0
    assert not reports.failed, reports.failed[:3]
    assert sorted(reports.acked) == list(range(sent)), "every record acknowledged once"
    times = sorted(reports.acked_at)
    window = max(b - a for a, b in itertools.pairwise(times) if b >= filled_at)
    print(f"\nlog dir failure: node {victim} (leader) stopped {stopped_after:.2f} s after "
          f"its disk filled; {sent} records acknowledged, none failed; write "
          f"unavailability window {window * 1000:.0f} ms")
