"""controller.placement: round-robin placement properties, rack awareness."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.controller.placement import (
    PlacementBroker,
    PlacementError,
    place_replicas,
    rack_alternated,
)


@st.composite
def placements(draw: st.DrawFn, racks: bool):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 9))
    ids = draw(st.lists(st.integers(0, 100), unique=True, min_size=n, max_size=n))
    rack_names = ["r0", "r1", "r2"][: draw(st.integers(1, 3))]
    brokers = [PlacementBroker(b, draw(st.sampled_from(rack_names)) if racks else None)
               for b in ids]
    return (brokers, draw(st.integers(1, 30)), draw(st.integers(1, n)),
            draw(st.integers(0, 1000)), draw(st.integers(0, 1000)))


@settings(max_examples=300, deadline=None)
@given(placements(racks=False))
def test_replicas_are_distinct_and_leaders_balanced(args) -> None:  # type: ignore[no-untyped-def]
    brokers, partitions, rf, start, shift = args
    result = place_replicas(brokers, partitions, rf, start=start, shift=shift)
    assert len(result) == partitions
    for replicas in result:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= {b.broker_id for b in brokers}
    # Round-robin: preferred leaders differ by at most one across brokers.
    leaders = Counter(r[0] for r in result)
    counts = [leaders.get(b.broker_id, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    # Replica counts are balanced within each full round of n partitions.
    n = len(brokers)
    if partitions % n == 0:
        totals = Counter(b for r in result for b in r)
        assert len({totals[b.broker_id] for b in brokers}) == 1


@settings(max_examples=300, deadline=None)
@given(placements(racks=True))
def test_rack_aware_spreads_over_racks(args) -> None:  # type: ignore[no-untyped-def]
    brokers, partitions, rf, start, shift = args
    rack_of = {b.broker_id: b.rack for b in brokers}
    num_racks = len(set(rack_of.values()))
    result = place_replicas(brokers, partitions, rf, start=start, shift=shift)
    for replicas in result:
        assert len(set(replicas)) == rf
        # Every partition covers min(rf, racks) racks: one replica per rack first.
        assert len({rack_of[b] for b in replicas}) == min(rf, num_racks)
    leaders = Counter(r[0] for r in result)
    counts = [leaders.get(b.broker_id, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


def test_start_index_varies_the_first_leader() -> None:
    brokers = [PlacementBroker(i) for i in range(5)]
    firsts = {place_replicas(brokers, 1, 1, start=s, shift=0)[0][0] for s in range(5)}
    assert firsts == {0, 1, 2, 3, 4}


def test_followers_shift_every_round() -> None:
    brokers = [PlacementBroker(i) for i in range(4)]
    result = place_replicas(brokers, 8, 2, start=0, shift=0)
    assert result[:4] == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert result[4:] == [(0, 2), (1, 3), (2, 0), (3, 1)]


def test_rack_alternated_interleaves_racks() -> None:
    brokers = [PlacementBroker(0, "a"), PlacementBroker(1, "a"), PlacementBroker(2, "b"),
               PlacementBroker(3, "c"), PlacementBroker(4, "b")]
    assert [b.broker_id for b in rack_alternated(brokers)] == [0, 2, 3, 1, 4]


@pytest.mark.parametrize(("partitions", "rf", "n"), [(0, 1, 1), (1, 0, 1), (1, 3, 2)])
def test_impossible_placements_raise(partitions: int, rf: int, n: int) -> None:
    with pytest.raises(PlacementError):
        place_replicas([PlacementBroker(i) for i in range(n)], partitions, rf, start=0, shift=0)


def test_repeated_brokers_raise() -> None:
    with pytest.raises(PlacementError):
        place_replicas([PlacementBroker(1), PlacementBroker(1)], 1, 1, start=0, shift=0)
