"""HW and ISR maths (`data_plane.replication.isr`) against naive references
(Hypothesis), plus the HW of a whole leader under random fetch schedules."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.partition import (
    can_join_isr,
    divergence_truncation_offset,
    high_watermark_candidate,
    is_caught_up,
    next_high_watermark,
    next_last_caught_up_time_ms,
)
from data_plane.replication.leader import LeaderState
from data_plane.replication.types import EpochEndOffset, ReplicationConfig

offsets = st.integers(min_value=0, max_value=1_000)
replica_ids = st.integers(min_value=1, max_value=6)


@given(
    leader_leo=offsets,
    isr=st.sets(replica_ids, max_size=5),
    leos=st.dictionaries(replica_ids, st.integers(min_value=-1, max_value=1_000)),
)
def test_hw_candidate_is_the_min_leo_over_the_isr_with_unknown_members_pinning_it(
    leader_leo: int, isr: set[int], leos: dict[int, int]
) -> None:
    local = 0
    members = {local} | isr
    # Naive reference: list every member's LEO (unknown = -1) and take the min.
    everyone = [leader_leo] + [leos.get(r, -1) for r in sorted(members) if r != local]
    expected = sorted(everyone)[0]
    assert high_watermark_candidate(leader_leo, local, members, leos) == expected
    assert high_watermark_candidate(leader_leo, local, members, leos) <= leader_leo


@given(current=offsets, candidate=st.integers(min_value=-1, max_value=1_000))
def test_the_hw_never_decreases(current: int, candidate: int) -> None:
    new = next_high_watermark(current, candidate)
    assert new >= current and new in (current, candidate)


@given(
    committed=st.sets(replica_ids, max_size=4),
    proposed=st.sets(replica_ids, max_size=4),
    leader_leo=offsets,
    leos=st.dictionaries(replica_ids, offsets),
)
def test_kip497_hw_over_the_maximal_isr_is_at_most_the_hw_over_either_isr(
    committed: set[int], proposed: set[int], leader_leo: int, leos: dict[int, int]
) -> None:
    maximal = committed | proposed
    hw_max = high_watermark_candidate(leader_leo, 0, maximal, leos)
    assert hw_max <= high_watermark_candidate(leader_leo, 0, committed, leos)
    assert hw_max <= high_watermark_candidate(leader_leo, 0, proposed, leos)
    # Whatever the controller decides, every member of the outcome has the HW.
    for r in maximal:
        assert leos.get(r, -1) >= hw_max


@given(
    fetch_offset=offsets, leader_leo=offsets, last_caught_up=offsets,
    last_fetch_leader_leo=offsets, last_fetch_time=offsets,
    dt=st.integers(min_value=0, max_value=500),
)
def test_last_caught_up_time_follows_kafka_rules(
    fetch_offset: int, leader_leo: int, last_caught_up: int, last_fetch_leader_leo: int,
    last_fetch_time: int, dt: int,
) -> None:
    now = last_fetch_time + dt
    got = next_last_caught_up_time_ms(
        fetch_offset=fetch_offset, leader_log_end_offset=leader_leo,
        last_caught_up_time_ms=last_caught_up, last_fetch_leader_log_end_offset=last_fetch_leader_leo,
        last_fetch_time_ms=last_fetch_time, fetch_time_ms=now)
    if fetch_offset >= leader_leo:
        expected = max(last_caught_up, now)
    elif fetch_offset >= last_fetch_leader_leo:
        expected = max(last_caught_up, last_fetch_time)
    else:
        expected = last_caught_up
    assert got == expected and got >= last_caught_up


@given(leo=offsets, leader_leo=offsets, caught=offsets, now=offsets,
       lag=st.integers(min_value=0, max_value=300))
def test_caught_up_means_at_the_leader_leo_or_within_the_lag_time(
    leo: int, leader_leo: int, caught: int, now: int, lag: int
) -> None:
    expected = leo == leader_leo or now - caught <= lag
    assert is_caught_up(log_end_offset=leo, leader_log_end_offset=leader_leo,
                        last_caught_up_time_ms=caught, now_ms=now,
                        replica_lag_time_max_ms=lag) is expected


@given(leo=st.integers(min_value=-1, max_value=100), hw=offsets, start=offsets, fetched=st.booleans())
def test_isr_expansion_needs_hw_epoch_start_and_a_fetch_in_the_epoch(
    leo: int, hw: int, start: int, fetched: bool
) -> None:
    ok = can_join_isr(log_end_offset=leo, high_watermark=hw, leader_epoch_start_offset=start,
                      fetched_in_current_epoch=fetched)
    assert ok == (fetched and leo >= max(hw, start))


@settings(max_examples=300)
@given(
    leader_epochs=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6,
                           unique=True).map(sorted),
    follower_epochs=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6,
                             unique=True).map(sorted),
    data=st.data(),
)
def test_kip320_divergence_truncation_keeps_only_the_common_prefix_and_progresses(
    leader_epochs: list[int], follower_epochs: list[int], data: st.DataObject
) -> None:
    """Model logs as runs of offsets per epoch sharing a common prefix of runs.

    Repeating (leader answers DivergingEpoch, follower truncates) must end
    with the follower's log a prefix of the leader's, never cutting the
    common prefix, and every step must shrink the follower's log.
    """
    common = data.draw(st.integers(min_value=0, max_value=min(len(leader_epochs),
                                                               len(follower_epochs))))
    # An epoch's records come from its one leader: beyond the common prefix
    # the follower holds only epochs the leader never had.
    floor = leader_epochs[common - 1] if common else 0
    follower_epochs = leader_epochs[:common] + [e for e in follower_epochs
                                                if e > floor and e not in leader_epochs]
    lengths_l = [data.draw(st.integers(1, 4)) for _ in leader_epochs]
    lengths_f = lengths_l[:common] + [data.draw(st.integers(1, 4))
                                      for _ in follower_epochs[common:]]
    leader_log = [e for e, n in zip(leader_epochs, lengths_l, strict=True) for _ in range(n)]
    follower_log = [e for e, n in zip(follower_epochs, lengths_f, strict=True) for _ in range(n)]
    common_len = sum(lengths_l[:common])

    def end_for(log: list[int], epoch: int) -> tuple[int, int]:
        smaller = [e for e in log if e <= epoch]
        if not log:
            return -1, -1
        if not smaller:
            return epoch, 0
        best = max(smaller)
        later = [i for i, e in enumerate(log) if e > best]
        return best, later[0] if later else len(log)

    for _ in range(20):
        if not follower_log:
            break
        last = follower_log[-1]
        epoch, end = end_for(leader_log, last)
        if epoch == last and end >= len(follower_log):
            break  # no divergence: the follower is a prefix
        target = divergence_truncation_offset(EpochEndOffset(epoch, end),
                                              end_for(follower_log, epoch),
                                              len(follower_log), 0)
        assert target < len(follower_log)
        assert target >= min(common_len, len(follower_log))
        follower_log = follower_log[:target]
    assert follower_log == leader_log[:len(follower_log)]


# ---- the idle-partition refresh is the general fetch update, specialised ----


def _leader_with(state: dict[str, int | bool]) -> LeaderState:
    leader = LeaderState(
        topic="t", partition=0, local_id=1, local_broker_epoch=1, leader_epoch=3,
        partition_epoch=1, epoch_start_offset=0, replicas=(1, 2), isr=(1, 2),
        config=ReplicationConfig(), now_ms=0, change_ids=itertools.count(),
    )
    follower = leader.followers[2]
    for name, value in state.items():
        setattr(follower, name, value)
    return leader


@settings(max_examples=300, deadline=None)
@given(
    before=st.fixed_dictionaries({
        "log_end_offset": st.integers(-1, 50),
        "log_start_offset": st.integers(-1, 50),
        "last_fetch_leader_log_end_offset": st.integers(-1, 50),
        "last_fetch_time_ms": st.integers(0, 1_000),
        "last_caught_up_time_ms": st.integers(0, 1_000),
        "broker_epoch": st.integers(-1, 9),
        "fetched_in_current_epoch": st.booleans(),
    }),
    log_end=st.integers(0, 50), log_start=st.integers(0, 50), broker_epoch=st.integers(0, 9),
    now_ms=st.integers(0, 2_000),
)
def test_record_fetch_at_log_end_matches_the_general_update(
    before: dict[str, int | bool], log_end: int, log_start: int, broker_epoch: int, now_ms: int,
) -> None:
    general, special = _leader_with(before), _leader_with(before)
    general.update_follower_fetch_state(
        2, fetch_offset=log_end, log_start_offset=log_start, broker_epoch=broker_epoch,
        leader_log_end_offset=log_end, now_ms=now_ms)
    special.record_fetch_at_log_end(2, log_end, log_start, broker_epoch, now_ms)
    assert special.followers[2] == general.followers[2]
