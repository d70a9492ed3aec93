"""metadata_quorum.loader: committed batches and snapshots into images."""

from __future__ import annotations

import uuid

import pytest

from metadata_quorum.delta import MetadataReplayError
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.loader import MetadataLoader, build_snapshot_batches
from metadata_quorum.records import (
    MetadataRecordError,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
    build_metadata_batch,
)
from raftlog.consensus.ready import CommittedBatch, SnapshotLoad
from raftlog.consensus.snapshot import SnapshotId
from raftlog.records import ControlRecordType, build_control_batch

TID = uuid.UUID(int=4)


def batch(base: int, *records, epoch: int = 1) -> CommittedBatch:  # type: ignore[no-untyped-def]
    return CommittedBatch(base, base + len(records) - 1, epoch, False,
                          build_metadata_batch(list(records), base_offset=base, epoch=epoch))


def test_commits_advance_the_image_and_its_provenance() -> None:
    loader = MetadataLoader()
    loader.handle_commit(CommittedBatch(0, 0, 1, True, build_control_batch(
        ControlRecordType.LEADER_CHANGE, b"\x00", timestamp_ms=0)))
    assert loader.image.provenance.last_offset == 0
    image = loader.handle_commit(batch(1, TopicRecord("t", TID),
                                       PartitionRecord(0, TID, (1,), (1,), leader=1)))
    assert image.provenance.last_offset == 2 and image.topic_by_name("t") is not None


def test_already_included_batches_are_skipped_and_overlaps_rejected() -> None:
    loader = MetadataLoader()
    first = batch(0, TopicRecord("t", TID))
    loader.handle_commit(first)
    assert loader.handle_commit(first) is loader.image
    with pytest.raises(ValueError):
        loader.handle_commit(batch(0, TopicRecord("u", uuid.UUID(int=5)),
                                   TopicRecord("v", uuid.UUID(int=6))))


def test_bad_records_stop_the_node() -> None:
    loader = MetadataLoader()
    with pytest.raises(MetadataReplayError):
        loader.handle_commit(batch(0, PartitionChangeRecord(0, TID, leader=1)))
    with pytest.raises(MetadataRecordError):
        loader.handle_commit(CommittedBatch(0, 0, 1, False, b"\x00" * 70))


def test_snapshot_load_replaces_the_image_and_skips_control_batches() -> None:
    loader = MetadataLoader()
    loader.handle_commit(batch(0, TopicRecord("t", TID),
                               PartitionRecord(0, TID, (1,), (1,), leader=1)))
    image = loader.image
    data = (build_control_batch(ControlRecordType.SNAPSHOT_HEADER, b"\x00", timestamp_ms=0)
            + build_snapshot_batches(image, records_per_batch=1)
            + build_control_batch(ControlRecordType.SNAPSHOT_FOOTER, b"\x00", timestamp_ms=0,
                                  base_offset=3))
    other = MetadataLoader()
    other.handle_commit(batch(0, TopicRecord("zzz", uuid.UUID(int=8))))
    assert other.handle_load_snapshot(SnapshotLoad(SnapshotId(2, 1), data)) == image
    assert build_snapshot_batches(EMPTY_IMAGE) == b""


def test_corrupt_snapshot_is_a_typed_error() -> None:
    data = bytearray(build_snapshot_batches(MetadataLoader().handle_commit(
        batch(0, TopicRecord("t", TID)))))
    data[-1] ^= 0xFF
    with pytest.raises(MetadataRecordError):
        MetadataLoader().handle_load_snapshot(SnapshotLoad(SnapshotId(1, 1), bytes(data)))
