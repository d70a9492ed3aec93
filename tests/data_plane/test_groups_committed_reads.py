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
