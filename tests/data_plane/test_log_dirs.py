"""Partition directories know their topic (``partition.metadata``), and a
broker that was down while a topic was deleted, re-created or moved away
neither serves the old topic's records as the new one's nor keeps the old
directory forever (`data_plane.broker.log_dirs`)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from data_plane.broker.log_dirs import (
    PARTITION_METADATA_FILE,
    delete_strays,
    read_topic_id,
    write_topic_id,
)
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder
from raftlog.storage import RealFileSystem


def _batch(value: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(value, key=b"k", timestamp_ms=1000)
    return builder.build()


def test_partition_metadata_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    fs = RealFileSystem()
    topic_id = uuid.uuid4()
    assert read_topic_id(fs, str(tmp_path)) is None
    write_topic_id(fs, str(tmp_path), topic_id)
    text = (tmp_path / PARTITION_METADATA_FILE).read_text()
    assert text.startswith("version: 0\ntopic_id: ")
    assert read_topic_id(fs, str(tmp_path)) == topic_id
    (tmp_path / PARTITION_METADATA_FILE).write_text("version: 0\ntopic_id: ???\n")
    assert read_topic_id(fs, str(tmp_path)) is None  # unreadable: as if absent


def test_only_unassigned_partition_log_dirs_are_strays(tmp_path: Path) -> None:
    for name, files in (("kept-0", ["00000000000000000000.log"]),
                        ("gone-3", ["00000000000000000000.log", "leader-epoch-checkpoint"]),
                        ("gone-4", [PARTITION_METADATA_FILE]),
                        ("__cluster_metadata-0", ["00000000000000000000.log"]),
                        ("not-a-log-1", ["notes.txt"]),
                        ("no-number-x", ["00000000000000000000.log"])):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_bytes(b"")
    (tmp_path / "meta.properties").write_text("x")
    deleted = delete_strays(RealFileSystem(), [str(tmp_path)], {("kept", 0)})
    assert sorted(os.path.basename(p) for p in deleted) == ["gone-3", "gone-4"]
    assert sorted(os.listdir(tmp_path)) == [
        "__cluster_metadata-0", "kept-0", "meta.properties", "no-number-x", "not-a-log-1"]


async def _run(log_dir: str) -> None:
    cluster = FakeMetadataCluster()
    cluster.register_broker(1, "127.0.0.1", 9001)
    cluster.create_topic("t", 1, 1, {"min.insync.replicas": "1"})
    cluster.create_topic("gone", 1, 1, {"min.insync.replicas": "1"})
    first = ReplicaManager(cluster.view(1), log_dirs=[log_dir])
    first.start()
    await asyncio.sleep(0)
    old_id = cluster.image.topic_ids["t"]
    hosted = first.get(("t", 0))
    assert hosted is not None
    assert read_topic_id(RealFileSystem(), hosted.directory) == old_id
    result = hosted.partition.append_records(_batch(b"old"), 1, 0)
    assert result.error == ErrorCode.none
    await first.close()

    # While the broker is down: "t" is deleted and created again, "gone" deleted.
    cluster.delete_topic("t")
    cluster.delete_topic("gone")
    cluster.create_topic("t", 1, 1, {"min.insync.replicas": "1"})
    new_id = cluster.image.topic_ids["t"]
    assert new_id != old_id
    assert os.path.isdir(os.path.join(log_dir, "gone-0"))
    await asyncio.sleep(0.01)  # the fake delivers its queued images (to no one running)

    second = ReplicaManager(cluster.view(1), log_dirs=[log_dir])
    second.start()
    await asyncio.sleep(0)
    # The image `start` applies may be half-replayed: strays wait for the
    # first delivered image (after registration, as the gate opens).
    assert os.path.isdir(os.path.join(log_dir, "gone-0"))
    cluster.register_broker(1, "127.0.0.1", 9001)
    await asyncio.sleep(0.01)
    hosted = second.get(("t", 0))
    assert hosted is not None
    # The old topic's record is not the new topic's: a fresh, empty log.
    assert hosted.partition.log.log_end_offset == 0
    assert read_topic_id(RealFileSystem(), hosted.directory) == new_id
    assert not os.path.exists(os.path.join(log_dir, "gone-0"))
    await second.close()


def test_a_broker_back_after_a_topic_was_recreated_or_deleted(tmp_path: Path) -> None:
    asyncio.run(_run(str(tmp_path)))


async def _start_on_an_empty_image(log_dir: str) -> None:
    cluster = FakeMetadataCluster()  # nothing replayed yet: no brokers, no topics
    replicas = ReplicaManager(cluster.view(1), log_dirs=[log_dir])
    replicas.start()
    await asyncio.sleep(0.01)
    assert os.path.isdir(os.path.join(log_dir, "t-0"))  # nothing deleted on an empty image
    # The first image with this broker's registration: now t-0 is a stray.
    cluster.register_broker(1, "127.0.0.1", 9001)
    await asyncio.sleep(0.01)
    assert not os.path.exists(os.path.join(log_dir, "t-0"))
    await replicas.close()


def test_strays_wait_for_an_image_with_the_brokers_registration(tmp_path: Path) -> None:
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(b"")
    asyncio.run(_start_on_an_empty_image(str(tmp_path)))
