"""OffsetFetch reads at the committed point: an offset whose record the
broker has not yet seen committed (HW below it) is never returned, and a
shard rebuilt from the log agrees with what was shown."""

from __future__ import annotations

import random

from data_plane.groups.model import (
    NO_GENERATION,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    TopicPartition,
)
from data_plane.groups.shard import GroupCoordinatorShard

TP = TopicPartition("t", 0)


def commit(shard: GroupCoordinatorShard, handle: int, offset: int) -> int | None:
    request = OffsetCommitRequest("g", NO_GENERATION, "", (OffsetCommitPartition("t", 0, offset),))
    result = shard.handle_offset_commit(handle, request, 1_000)
    assert result.records, "a commit writes a record"
    return result.write_id


def fetched(shard: GroupCoordinatorShard) -> int:
    response = shard.handle_offset_fetch(OffsetFetchRequest("g", (TP,)))
    return response.partitions[0].offset


def test_offset_fetch_hides_a_commit_until_its_record_is_committed() -> None:
    shard = GroupCoordinatorShard(0, rng=random.Random(1))
    first = commit(shard, 1, 10)
    assert first is not None
    assert fetched(shard) == -1  # record appended, HW not past it yet
    shard.mark_committed(first)
    assert fetched(shard) == 10
    second = commit(shard, 2, 20)
    third = commit(shard, 3, 30)
    assert second is not None and third is not None and first < second < third
    assert fetched(shard) == 10
    shard.mark_committed(second)
    assert fetched(shard) == 20
    shard.mark_committed(third)
    assert fetched(shard) == 30


def test_results_without_offsets_carry_no_write_id() -> None:
    shard = GroupCoordinatorShard(0, rng=random.Random(1))
    result = shard.tick(5_000)
    assert result.write_id is None


def test_loading_skips_a_record_that_does_not_parse() -> None:
    """A garbage record in the partition (a client could produce to
    ``__consumer_offsets`` before that was refused) is skipped on load, with
    the reason returned; the commits around it still load. The load used to
    raise CorruptOffsetsRecordError there."""
    from data_plane.groups.records import (
        OffsetCommitKey,
        OffsetCommitValue,
        encode_key,
        encode_offset_commit_value,
    )
    from raftlog.records import BatchBuilder

    def commit_record(offset: int) -> tuple[bytes, bytes]:
        return (encode_key(OffsetCommitKey("g", "t", 0)), encode_offset_commit_value(
            OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="",
                              commit_timestamp_ms=1_000)))

    builder = BatchBuilder()
    for key, value in (commit_record(10), (b"\xff\xfejunk", b"garbage"), commit_record(20)):
        builder.append(value, key=key, timestamp_ms=1_000)
    shard = GroupCoordinatorShard(0, rng=random.Random(1))
    skipped = shard.load_batch(builder.build())
    assert len(skipped) == 1 and skipped[0].startswith("offset 1: ")
    shard.complete_load(1_000)
    assert fetched(shard) == 20
