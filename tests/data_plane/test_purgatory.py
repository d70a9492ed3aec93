"""Delayed operations (`data_plane.purgatory`): completion by key, expiry by
deadline, and the DelayedProduce / DelayedFetch conditions, against a fake
replica view; plus a Hypothesis model of the deadline bookkeeping."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.purgatory import (
    DelayedFetch,
    DelayedOperation,
    DelayedProduce,
    FetchOutcome,
    ProduceWait,
    Purgatory,
)
from data_plane.replication.types import FetchPartition, TopicPartition
from raftlog.net.errors import ErrorCode

A: TopicPartition = ("t", 0)
B: TopicPartition = ("t", 1)


@dataclass
class FakeReplica:
    """What DelayedProduce/DelayedFetch ask of a partition."""

    high_watermark: int = 0
    leader_epoch: int = 1
    leader: bool = True
    maximal_isr_size: int = 3
    min_isr: int = 2
    readable: int | None = 0

    def check_enough_replicas_reach_offset(self, required: int, epoch: int) -> tuple[bool, ErrorCode]:
        if not self.leader or epoch != self.leader_epoch:
            return True, ErrorCode.not_leader_or_follower
        if self.high_watermark < required:
            return False, ErrorCode.none
        if self.maximal_isr_size < self.min_isr:
            return True, ErrorCode.not_enough_replicas_after_append
        return True, ErrorCode.none

    def delayed_fetch_bytes(self, request: FetchPartition) -> int | None:
        return self.readable


def produce(replicas: dict[TopicPartition, FakeReplica], waits: dict[TopicPartition, int],
            deadline: int = 100) -> DelayedProduce:
    return DelayedProduce({k: ProduceWait(v, 1) for k, v in waits.items()}, deadline_ms=deadline,
                          lookup=replicas.get)


def test_acks_all_completes_when_the_hw_reaches_the_required_offset() -> None:
    replicas = {A: FakeReplica()}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    op = produce(replicas, {A: 5})
    assert not purgatory.try_complete_else_watch(op, 0)
    assert purgatory.check_and_complete(A, 1) == []
    replicas[A].high_watermark = 5
    assert purgatory.check_and_complete(A, 2) == [op]
    assert op.outcome == {A: ErrorCode.none} and len(purgatory) == 0
    assert purgatory.next_deadline_ms() is None


def test_an_already_satisfied_produce_completes_without_being_watched() -> None:
    replicas = {A: FakeReplica(high_watermark=9)}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    assert purgatory.try_complete_else_watch(produce(replicas, {A: 5}), 0)
    assert len(purgatory) == 0


def test_isr_below_min_isr_when_the_hw_arrives_is_not_enough_replicas_after_append() -> None:
    replicas = {A: FakeReplica(maximal_isr_size=1)}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    op = produce(replicas, {A: 1})
    purgatory.try_complete_else_watch(op, 0)
    replicas[A].high_watermark = 1
    purgatory.check_and_complete(A, 1)
    assert op.outcome == {A: ErrorCode.not_enough_replicas_after_append}


def test_leadership_lost_while_waiting_is_not_leader_or_follower() -> None:
    replicas = {A: FakeReplica()}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    op = produce(replicas, {A: 1})
    purgatory.try_complete_else_watch(op, 0)
    replicas[A].leader = False
    assert purgatory.check_and_complete(A, 1) == [op]
    assert op.outcome == {A: ErrorCode.not_leader_or_follower}


def test_a_produce_past_its_request_timeout_expires_with_request_timed_out() -> None:
    replicas = {A: FakeReplica(), B: FakeReplica(high_watermark=3)}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    op = produce(replicas, {A: 1, B: 3}, deadline=50)
    purgatory.try_complete_else_watch(op, 0)
    assert purgatory.next_deadline_ms() == 50
    assert purgatory.expire(49) == []
    assert purgatory.expire(50) == [op]
    # B was already done; only A timed out.
    assert op.outcome == {B: ErrorCode.none, A: ErrorCode.request_timed_out}
    assert purgatory.watched(A) == purgatory.watched(B) == 0


def test_a_multi_partition_produce_waits_for_every_partition() -> None:
    replicas = {A: FakeReplica(), B: FakeReplica()}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    op = produce(replicas, {A: 1, B: 1})
    purgatory.try_complete_else_watch(op, 0)
    replicas[A].high_watermark = 1
    assert purgatory.check_and_complete(A, 1) == []
    replicas[B].high_watermark = 1
    assert purgatory.check_and_complete(B, 2) == [op]
    assert purgatory.watched(A) == 0


def test_delayed_fetch_completes_on_min_bytes_or_expires_at_max_wait() -> None:
    replicas = {A: FakeReplica(readable=0)}
    purgatory: Purgatory[DelayedFetch] = Purgatory()
    op = DelayedFetch({A: FetchPartition(0)}, min_bytes=100, deadline_ms=500, lookup=replicas.get)
    assert not purgatory.try_complete_else_watch(op, 0)
    replicas[A].readable = 60
    assert purgatory.check_and_complete(A, 10) == []
    replicas[A].readable = 120
    assert purgatory.check_and_complete(A, 20) == [op]
    assert op.outcome is FetchOutcome.SATISFIED
    late = DelayedFetch({A: FetchPartition(0)}, min_bytes=1_000, deadline_ms=500,
                        lookup=replicas.get)
    purgatory.try_complete_else_watch(late, 30)
    assert purgatory.expire(500) == [late] and late.outcome is FetchOutcome.EXPIRED


def test_delayed_fetch_answers_at_once_when_a_partition_must_respond() -> None:
    replicas = {A: FakeReplica(readable=0)}
    purgatory: Purgatory[DelayedFetch] = Purgatory()
    op = DelayedFetch({A: FetchPartition(0)}, min_bytes=1, deadline_ms=500, lookup=replicas.get)
    purgatory.try_complete_else_watch(op, 0)
    replicas[A].readable = None  # leadership moved, epoch fenced or diverged
    assert purgatory.check_and_complete(A, 1) == [op]


def test_cancel_and_double_watch() -> None:
    replicas = {A: FakeReplica()}
    purgatory: Purgatory[DelayedProduce] = Purgatory()
    op = produce(replicas, {A: 1})
    purgatory.try_complete_else_watch(op, 0)
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(op, 0)
    assert purgatory.cancel(op) and not purgatory.cancel(op)
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None


class _Never(DelayedOperation):
    def try_complete(self, now_ms: int, changed: Hashable | None = None) -> bool:
        return False

    def on_expiration(self, now_ms: int) -> None:
        pass


@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=40),
       st.lists(st.integers(0, 60), max_size=10))
def test_expiry_returns_exactly_the_due_operations_in_deadline_order(
    ops: list[tuple[int, bool]], expiries: list[int]
) -> None:
    purgatory: Purgatory[_Never] = Purgatory()
    live: list[_Never] = []
    for deadline, on_b in ops:
        op = _Never([B if on_b else A], deadline)
        purgatory.try_complete_else_watch(op, 0)
        live.append(op)
    for now in sorted(expiries):
        due = sorted((o for o in live if o.deadline_ms <= now), key=lambda o: o.deadline_ms)
        got = purgatory.expire(now)
        assert [o.deadline_ms for o in got] == [o.deadline_ms for o in due]
        assert {id(o) for o in got} == {id(o) for o in due}
        live = [o for o in live if o.deadline_ms > now]
        assert len(purgatory) == len(live)
        expected_next = min((o.deadline_ms for o in live), default=None)
        assert purgatory.next_deadline_ms() == expected_next


def test_delayed_fetch_rechecks_only_the_partition_that_changed() -> None:
    # Every append re-checks each parked follower fetch; with tens of
    # partitions per fetch, asking them all made each append O(partitions).
    asked: list[TopicPartition] = []

    class Counting(FakeReplica):
        def __init__(self, key: TopicPartition, readable: int | None) -> None:
            super().__init__(readable=readable)
            self.key = key

        def delayed_fetch_bytes(self, request: FetchPartition) -> int | None:
            asked.append(self.key)
            return self.readable

    replicas = {k: Counting(k, 0) for k in (A, B)}
    purgatory: Purgatory[DelayedFetch] = Purgatory()
    op = DelayedFetch({A: FetchPartition(0), B: FetchPartition(0)}, min_bytes=100,
                      deadline_ms=500, lookup=replicas.get)
    assert not purgatory.try_complete_else_watch(op, 0)
    assert sorted(asked) == [A, B]
    asked.clear()
    replicas[A].readable = 60
    assert purgatory.check_and_complete(A, 1) == [] and asked == [A]
    asked.clear()
    replicas[B].readable = 50  # 60 (A, remembered) + 50 >= 100
    assert purgatory.check_and_complete(B, 2) == [op] and asked == [B]
    assert op.outcome is FetchOutcome.SATISFIED
    # A partition that must answer now completes the fetch whichever one changed.
    asked.clear()
    replicas[A].readable, replicas[B].readable = 0, 0
    other = DelayedFetch({A: FetchPartition(0), B: FetchPartition(0)}, min_bytes=1,
                         deadline_ms=500, lookup=replicas.get)
    purgatory.try_complete_else_watch(other, 3)
    replicas[B].readable = None
    assert purgatory.check_and_complete(B, 4) == [other]


def test_a_satisfied_delayed_fetch_names_the_partitions_to_read_again() -> None:
    # The shell reads again only these; the others had nothing new.
    replicas = {A: FakeReplica(readable=0), B: FakeReplica(readable=0)}
    purgatory: Purgatory[DelayedFetch] = Purgatory()
    op = DelayedFetch({A: FetchPartition(0), B: FetchPartition(0)}, min_bytes=1,
                      deadline_ms=500, lookup=replicas.get)
    assert op.changed_partitions() is None
    purgatory.try_complete_else_watch(op, 0)
    replicas[B].readable = 10
    assert purgatory.check_and_complete(B, 1) == [op]
    assert op.changed_partitions() == {B}
    must = DelayedFetch({A: FetchPartition(0), B: FetchPartition(0)}, min_bytes=1,
                        deadline_ms=500, lookup=replicas.get)
    replicas[B].readable = 0
    purgatory.try_complete_else_watch(must, 2)
    replicas[A].readable = None  # must answer (e.g. the epoch moved)
    assert purgatory.check_and_complete(A, 3) == [must]
    assert must.changed_partitions() == {A}
    expired = DelayedFetch({A: FetchPartition(0)}, min_bytes=1, deadline_ms=10,
                           lookup={A: FakeReplica(readable=0)}.get)
    purgatory.try_complete_else_watch(expired, 4)
    assert purgatory.expire(10) == [expired] and expired.changed_partitions() is None


class FakeParking:
    """A follower session's parked partitions (`FetchParking`), by hand."""

    def __init__(self, parked: dict[TopicPartition, FetchPartition]) -> None:
        self.parked = dict(parked)
        self.woken: dict[TopicPartition, FetchPartition] = {}

    def unpark(self, key: TopicPartition) -> bool:
        if key in self.parked:
            self.woken[key] = self.parked.pop(key)
            return True
        return key in self.woken


def test_parked_partitions_are_watched_through_the_parking_and_asked_once_woken() -> None:
    # A fetch session's parked (idle) partitions: not asked at the first
    # check, not watched one by one; a change unparks them and checks the
    # purgatory under the parking.
    asked: list[TopicPartition] = []

    class Counting(FakeReplica):
        def delayed_fetch_bytes(self, request: FetchPartition) -> int | None:
            asked.append(self.key)
            return self.readable

        key: TopicPartition = A

    replicas = {A: Counting(readable=0), B: Counting(readable=0)}
    replicas[B].key = B
    purgatory: Purgatory[DelayedFetch] = Purgatory()
    parking = FakeParking({B: FetchPartition(3)})
    op = DelayedFetch({A: FetchPartition(0)}, min_bytes=1, deadline_ms=500,
                      lookup=replicas.get, parking=parking)
    assert not purgatory.try_complete_else_watch(op, 0)
    assert asked == [A]
    assert purgatory.watched(parking) == 1 and purgatory.watched(B) == 0
    # B changes without bytes for the fetch (its log start moved): asked, still nothing.
    assert parking.unpark(B)
    assert purgatory.check_and_complete(parking, 1) == []
    assert asked == [A, B]
    assert op.requests[B] == FetchPartition(3)
    # B changes again, with bytes: the parking still asks for it.
    replicas[B].readable = 10
    assert parking.unpark(B)
    assert purgatory.check_and_complete(parking, 2) == [op]
    assert op.changed_partitions() == {B}
    # Only parked partitions: nothing is asked until one is woken.
    asked.clear()
    replicas[B].readable = 0
    parking = FakeParking({A: FetchPartition(0), B: FetchPartition(0)})
    only_parked = DelayedFetch({}, min_bytes=1, deadline_ms=500, lookup=replicas.get,
                               parking=parking)
    assert not purgatory.try_complete_else_watch(only_parked, 3)
    assert asked == []
    replicas[A].readable = None  # must answer (a leader change)
    assert parking.unpark(A)
    assert purgatory.check_and_complete(parking, 4) == [only_parked]
    assert asked == [A]
    assert only_parked.changed_partitions() == {A}


def test_a_partition_woken_before_the_long_poll_starts_is_asked_at_the_first_check() -> None:
    # A change between parking and watching (the fetch yields while reading).
    replicas = {A: FakeReplica(readable=0), B: FakeReplica(readable=5)}
    parking = FakeParking({B: FetchPartition(1)})
    assert parking.unpark(B)
    op = DelayedFetch({A: FetchPartition(0)}, min_bytes=1, deadline_ms=500,
                      lookup=replicas.get, parking=parking)
    purgatory: Purgatory[DelayedFetch] = Purgatory()
    assert purgatory.try_complete_else_watch(op, 0)
