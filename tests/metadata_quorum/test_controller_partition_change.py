"""controller.partition_change: the election rules, against a naive reference."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.controller.partition_change import (
    Election,
    build_partition_change,
    isr_without,
)
from metadata_quorum.image import PartitionRegistration
from metadata_quorum.records import NO_LEADER, NO_LEADER_CHANGE, LeaderRecoveryState

TID = uuid.UUID(int=9)


def naive_leader(part: PartitionRegistration, isr: tuple[int, ...], ok: set[int],
                 unclean: bool, election: Election) -> tuple[int, tuple[int, ...]]:
    """Reference: the rules of the module docstring, written the obvious way."""
    candidates = [r for r in part.replicas if r in isr and r in ok]
    if election is Election.PREFERRED and part.replicas[0] in candidates:
        return part.replicas[0], isr
    if part.leader in candidates:
        return part.leader, isr
    if candidates:
        return candidates[0], isr
    if unclean:
        anyone = [r for r in part.replicas if r in ok]
        if anyone:
            return anyone[0], (anyone[0],)
    return NO_LEADER, isr


@st.composite
def scenarios(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    replicas = tuple(draw(st.lists(st.integers(0, 6), unique=True, min_size=1, max_size=5)))
    isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from((NO_LEADER, *isr)))
    part = PartitionRegistration(replicas, isr, leader, draw(st.integers(0, 5)),
                                 draw(st.integers(0, 5)))
    target = tuple(r for r in replicas if draw(st.booleans())) or None
    ok = set(draw(st.lists(st.integers(0, 6), unique=True)))
    return part, target, ok, draw(st.booleans()), draw(st.sampled_from(Election))


@settings(max_examples=600, deadline=None)
@given(scenarios())
def test_election_matches_naive_reference(scenario) -> None:  # type: ignore[no-untyped-def]
    part, target, ok, unclean, election = scenario
    record = build_partition_change(TID, 0, part, is_acceptable=ok.__contains__,
                                    target_isr=target, unclean=unclean, election=election)
    isr = part.isr if target is None else target
    want_leader, want_isr = naive_leader(part, isr, ok, unclean, election)
    after = part if record is None else part.merge(record)
    assert (after.leader, after.isr) == (want_leader, want_isr)
    # Never an unacceptable leader; epochs bump exactly as KIP-631 says.
    assert after.leader == NO_LEADER or after.leader in ok
    if record is not None:
        assert after.partition_epoch == part.partition_epoch + 1
        assert record.leader_changed == (after.leader != part.leader)
        assert after.leader_epoch == part.leader_epoch + (after.leader != part.leader)
    else:
        assert after == part
    unclean_happened = after.leader != NO_LEADER and after.leader not in isr
    if unclean_happened:
        assert unclean and after.isr == (after.leader,)
        assert after.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_unchanged_fields_use_the_sentinels() -> None:
    part = PartitionRegistration((1, 2, 3), (1, 2, 3), 1)
    record = build_partition_change(TID, 0, part, is_acceptable=lambda b: True,
                                    target_isr=(1, 2))
    assert record is not None
    assert record.leader == NO_LEADER_CHANGE and record.isr == (1, 2)
    assert record.replicas is None and record.leader_recovery_state == -1


def test_nothing_to_change_gives_no_record() -> None:
    part = PartitionRegistration((1, 2), (1, 2), 1)
    assert build_partition_change(TID, 0, part, is_acceptable=lambda b: True) is None


def test_isr_without_keeps_the_last_member() -> None:
    assert isr_without((1, 2, 3), 2) == (1, 3)
    assert isr_without((2,), 2) == (2,)
    assert isr_without((1,), 2) == (1,)
