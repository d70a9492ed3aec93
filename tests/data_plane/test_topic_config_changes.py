"""Topic configs and the open logs: a changed config reaches them (Kafka's
``UnifiedLog.updateConfig``), and retention follows ``cleanup.policy``.

The broker opened each log with the topic's config at the time and never
looked again, so a config altered later (IncrementalAlterConfigs) changed
DescribeConfigs but not the log: segments kept rolling at the old
``segment.bytes``, retention kept the old ``retention.ms``.
"""

from __future__ import annotations

import asyncio
import tempfile

from data_plane.broker.replica_manager import ReplicaManager
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder

KEY = ("t", 0)


def _batch(i: int) -> bytes:
    builder = BatchBuilder()
    builder.append(b"v" * 200, key=str(i).encode(), timestamp_ms=1_700_000_000_000 + i)
    return builder.build()


async def _run() -> None:
    cluster = FakeMetadataCluster()
    cluster.register_broker(1, "127.0.0.1", 9001)
    cluster.create_topic("t", 1, 1)
    replicas = ReplicaManager(cluster.view(1), log_dirs=[tempfile.mkdtemp()])
    replicas.start()
    await asyncio.sleep(0)
    hosted = replicas.get(KEY)
    assert hosted is not None
    log = hosted.partition.log
    assert log.config.segment_bytes == 1 << 30

    async def produce(i: int) -> ErrorCode:
        out = await replicas.append_records({KEY: _batch(i)}, acks=1, timeout_ms=1000)
        return out[KEY].error

    for i in range(5):
        assert await produce(i) == ErrorCode.none
    assert len(log.segments) == 1

    # segment.bytes down to about two batches: the next appends roll.
    cluster.set_topic_config("t", "segment.bytes", "600")
    await asyncio.sleep(0)
    assert log.config.segment_bytes == 600
    for i in range(5, 11):
        assert await produce(i) == ErrorCode.none
    assert len(log.segments) >= 4

    # max.message.bytes down below a batch: the append is refused, nothing is written.
    end = log.log_end_offset
    cluster.set_topic_config("t", "max.message.bytes", "100")
    await asyncio.sleep(0)
    assert await produce(11) == ErrorCode.message_too_large
    assert log.log_end_offset == end

    # Removing the topic's own values restores the defaults.
    cluster.set_topic_config("t", "max.message.bytes", None)
    cluster.set_topic_config("t", "segment.bytes", None)
    await asyncio.sleep(0)
    assert log.config.segment_bytes == 1 << 30 and log.config.message_max_bytes == 1048588
    assert await produce(12) == ErrorCode.none

    # retention.ms reaches the log too (the retention check reads log.config).
    cluster.set_topic_config("t", "retention.ms", "3600000")
    await asyncio.sleep(0)
    assert log.config.retention_ms == 3_600_000
    await replicas.close()


def test_altered_topic_configs_apply_to_the_open_log() -> None:
    asyncio.run(_run())


def test_retention_deletes_only_with_cleanup_policy_delete() -> None:
    # Kafka deletes by retention only under cleanup.policy=delete; with no
    # log cleaner here, a compacted topic keeps every segment rather than
    # losing the latest value of a key (a group's last commit).
    from data_plane.broker.log_configs import TOPIC_CONFIG_DEFAULTS, log_config

    def config(**overrides: str) -> dict[str, str]:
        return {**TOPIC_CONFIG_DEFAULTS, "retention.bytes": "1000", **overrides}

    assert log_config(config()).retention_ms == 604_800_000
    assert log_config(config()).retention_bytes == 1000
    assert log_config(config(**{"cleanup.policy": "compact,delete"})).retention_ms == 604_800_000
    compacted = log_config(config(**{"cleanup.policy": "compact"}))
    assert (compacted.retention_ms, compacted.retention_bytes) == (-1, -1)
