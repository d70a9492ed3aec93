"""Minimal reproductions of cluster bugs the chaos suite found, kept as
strict xfails: each fails today for the reason given and turns into an
XPASS (a failure, with ``strict=True``) once the bug is fixed, so whoever
fixes it removes the marker. chaos/ does not fix code outside chaos/.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from raftlog.clock import SystemClock
from raftlog.records.batch import validate_batch
from raftlog.records.builder import BatchBuilder
from raftlog.storage.config import LogConfig
from raftlog.storage.files import RealFileSystem
from raftlog.storage.log import Log


def _batch(i: int, size: int) -> bytes:
    b = BatchBuilder()
    b.append(b"%d" % i + b"x" * size, timestamp_ms=0)
    return b.build()


@pytest.mark.xfail(
    strict=True,
    reason="cluster bug: an append that fails with ENOSPC leaves its partly "
    "written batch in the segment; the next append lands after the torn bytes, "
    "so reads of that offset range return garbage and crash recovery truncates "
    "at the torn bytes, losing later acknowledged records (found by the "
    "disk-full nemesis as replica divergence, seed 11 of the netns run)",
)
def test_a_failed_enospc_append_leaves_no_torn_bytes(tmp_path: Path) -> None:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print(f"SKIP: cannot mount tmpfs: {r.stderr.strip()}")
        pytest.skip(f"cannot mount tmpfs: {r.stderr.strip()}")
    logs: list[Log] = []
    try:
        directory = str(mnt / "t-0")
        config = LogConfig(segment_index_bytes=4096)

        def open_log() -> Log:
            log = Log.open(directory, config, fs=RealFileSystem(), clock=SystemClock())
            logs.append(log)
            return log

        log = open_log()
        log.append_as_leader(_batch(0, 100), leader_epoch=0)
        st = os.statvfs(mnt)
        ballast = mnt / "ballast"
        ballast.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 3000 - 4096))
        with pytest.raises(OSError):
            log.append_as_leader(_batch(1, 20000), leader_epoch=0)  # disk full
        ballast.unlink()  # the disk is healed
        log.append_as_leader(_batch(2, 100), leader_epoch=0)
        assert log.log_end_offset == 2
        # Offset 1 must read back as the batch that holds it, not torn bytes.
        header = validate_batch(log.read(1, 1 << 20).records)  # raises on torn bytes
        assert header.base_offset == 1
        # A crash now (no clean shutdown) must not lose offset 1.
        assert open_log().log_end_offset == 2
    finally:
        for log in logs:
            log.close()
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.long
@pytest.mark.xfail(
    strict=True,
    reason="cluster bug: an internal topic's replication factor is min(3, brokers "
    "unfenced in the asking broker's image) at first use "
    "(data_plane/broker/coordinators.py ensure_internal_topic), and stays so; "
    "Kafka refuses to create it until transaction.state.log.replication.factor "
    "brokers are up. In a netns txn soak (seed 42) __transaction_state got RF 1 "
    "at start-up and, with min.insync.replicas=2, InitProducerId answered "
    "COORDINATOR_NOT_AVAILABLE for the whole run",
)
def test_internal_topics_get_their_full_replication_factor(tmp_path: Path) -> None:
    import asyncio
    import time

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from chaos.db import ChaosDB
    from data_plane.local_cluster import Timeouts

    async def main() -> list[int]:
        db = ChaosDB(tmp_path / "c", 3, mode="proxy", timeouts=Timeouts.fast())
        try:
            await db.setup()
            assert db.cluster is not None
            await db.kill_node("n3")
            deadline = time.monotonic() + 30
            while (await db.cluster.probe_async()).unfenced != frozenset({1, 2}):
                assert time.monotonic() < deadline, "n3 never fenced"
                await asyncio.sleep(0.5)
            p = Producer(
                {
                    "bootstrap.servers": db.bootstrap_servers(),
                    "transactional.id": "t1",
                    "log_level": 0,
                }
            )
            await asyncio.to_thread(p.init_transactions, 30)  # first use: creates the topic
            await db.start_node("n3")
            await db.wait_ready(60)
            admin = AdminClient({"bootstrap.servers": db.bootstrap_servers(), "log_level": 0})
            md = admin.list_topics("__transaction_state", timeout=10)
            parts = md.topics["__transaction_state"].partitions.values()
            return sorted({len(pm.replicas) for pm in parts})
        finally:
            await db.teardown()

    assert asyncio.run(main()) == [3]
