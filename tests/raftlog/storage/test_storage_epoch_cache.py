"""Leader-epoch cache: Kafka's LeaderEpochFileCache rules, the
OffsetForLeaderEpoch answer against a naive reference, and the checkpoint."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.storage import CorruptCheckpointError, EpochEntry, LeaderEpochCache
from raftlog.storage.epoch_cache import (
    LeaderEpochCheckpointFile,
    decode_checkpoint,
    encode_checkpoint,
)
from raftlog.testing.disk import FakeFileSystem


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def test_assign_appends_new_epochs_and_ignores_the_same_epoch_later() -> None:
    c = LeaderEpochCache()
    assert c.latest_epoch == -1
    assert c.assign(1, 0)
    assert c.assign(3, 10)
    assert not c.assign(3, 15)  # same epoch, later offset: no-op (Kafka)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 10)]
    assert (c.earliest_epoch, c.latest_epoch) == (1, 3)


def test_assign_same_epoch_lower_offset_replaces_it() -> None:
    c = cache((1, 0), (3, 10))
    assert c.assign(3, 8)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 8)]


def test_assign_lower_epoch_truncates_conflicting_entries() -> None:
    # Kafka: entries with epoch >= new or start >= new start are removed.
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.assign(4, 15)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(4, 15)]


def test_assign_rejects_negative_values() -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(-1, 0)


def test_end_offset_for_is_the_offset_for_leader_epoch_answer() -> None:
    c = cache((1, 0), (3, 10), (6, 25))
    leo = 40
    assert c.end_offset_for(1, leo) == (1, 10)
    assert c.end_offset_for(2, leo) == (1, 10)  # largest epoch <= 2 is 1
    assert c.end_offset_for(3, leo) == (3, 25)
    assert c.end_offset_for(5, leo) == (3, 25)
    assert c.end_offset_for(6, leo) == (6, 40)  # latest epoch ends at the LEO
    assert c.end_offset_for(9, leo) == (6, 40)
    assert c.end_offset_for(0, leo) == (0, 0)  # below the earliest: (asked, earliest start), as Kafka
    assert c.end_offset_for(-1, leo) == (-1, -1)
    assert LeaderEpochCache().end_offset_for(3, leo) == (-1, -1)


def test_truncate_from_end_drops_entries_at_or_after_the_offset() -> None:
    c = cache((1, 0), (3, 10), (6, 25))
    assert c.truncate_from_end(25)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 10)]
    assert not c.truncate_from_end(11)
    assert c.truncate_from_end(0)
    assert c.entries == []


def test_truncate_from_start_rebases_the_epoch_covering_the_new_start() -> None:
    c = cache((1, 0), (3, 10), (6, 25))
    assert c.truncate_from_start(12)
    assert c.entries == [EpochEntry(3, 12), EpochEntry(6, 25)]
    assert not c.truncate_from_start(5)
    assert c.truncate_from_start(25)
    assert c.entries == [EpochEntry(6, 25)]
    assert c.truncate_from_start(30)
    assert c.entries == [EpochEntry(6, 30)]


def test_clear() -> None:
    c = cache((1, 0))
    assert c.clear()
    assert not c.clear()


@given(
    starts=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 200)), max_size=10),
    requested=st.integers(-1, 35),
    extra=st.integers(0, 50),
)
def test_end_offset_for_matches_a_naive_reference(
    starts: list[tuple[int, int]], requested: int, extra: int
) -> None:
    c = LeaderEpochCache()
    for epoch, offset in starts:
        c.assign(epoch, offset)
    entries = c.entries
    for a, b in itertools.pairwise(entries):
        assert a.epoch < b.epoch and a.start_offset < b.start_offset
    leo = (entries[-1].start_offset if entries else 0) + extra
    # Naive: scan every entry for the largest epoch <= requested.
    below = [e for e in entries if e.epoch <= requested]
    if requested < 0 or not entries:
        expected = (-1, -1)
    elif not below:
        expected = (requested, entries[0].start_offset)
    else:
        floor = below[-1]
        later = [e for e in entries if e.epoch > floor.epoch]
        expected = (floor.epoch, later[0].start_offset if later else leo)
    assert c.end_offset_for(requested, leo) == expected


def test_checkpoint_text_is_kafkas_format() -> None:
    data = encode_checkpoint([EpochEntry(0, 0), EpochEntry(4, 120)])
    assert data == b"0\n2\n0 0\n4 120\n"
    assert decode_checkpoint(data) == [EpochEntry(0, 0), EpochEntry(4, 120)]
    assert decode_checkpoint(encode_checkpoint([])) == []


@pytest.mark.parametrize(
    "bad", [b"", b"1\n0\n", b"0\n2\n1 0\n", b"0\n1\n1\n", b"0\n2\n3 5\n2 9\n", b"\xff"]
)
def test_corrupt_checkpoint_raises_a_typed_error(bad: bytes) -> None:
    with pytest.raises(CorruptCheckpointError):
        decode_checkpoint(bad)


def test_checkpoint_file_is_replaced_durably() -> None:
    fs = FakeFileSystem()
    fs.make_dirs("/log")
    f = LeaderEpochCheckpointFile(fs, "/log")
    assert f.read() == []
    f.write([EpochEntry(2, 7)])
    fs.crash()  # the write fsynced file and directory before returning
    assert f.read() == [EpochEntry(2, 7)]
    assert fs.list_dir("/log") == ["leader-epoch-checkpoint"]
