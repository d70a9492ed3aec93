"""Minimal reproductions of cluster bugs the chaos suite found, kept as
strict xfails: each fails today for the reason given and turns into an
XPASS (a failure, with ``strict=True``) once the bug is fixed, so whoever
fixes it removes the marker. chaos/ does not fix code outside chaos/.
"""

from __future__ import annotations

from pathlib import Path

import pytest


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
