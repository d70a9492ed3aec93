"""`data_plane.txn.coordinator` and `txn_metadata`: KIP-98/KIP-360 coordinator rules."""

from __future__ import annotations

import itertools

import pytest

from data_plane.txn.coordinator import TransactionCoordinator, TxnResult
from data_plane.txn.txn_log import GROUP_METADATA_TOPIC, TxnLogRecord, partition_for
from data_plane.txn.txn_metadata import (
    VALID_PREVIOUS,
    IllegalTxnTransitionError,
    TxnMetadata,
    TxnState,
)
from raftlog.net.errors import ErrorCode

TID = "tx-app"
P = partition_for(TID)
TP = ("orders", 0)
TP2 = ("orders", 1)


class Ids:
    def __init__(self) -> None:
        self._ids = itertools.count(1000)

    def next_producer_id(self) -> int:
        return next(self._ids)


class Ctx:
    def __init__(self) -> None:
        self.c = TransactionCoordinator(P, coordinator_epoch=3, allocator=Ids())
        self.log: list[TxnLogRecord] = []

    def run(self, result: TxnResult) -> TxnResult:
        self.c.apply(result)
        self.log.extend(result.records)
        return result

    def init(self, now: int = 0, expected: tuple[int, int] | None = None) -> TxnResult:
        return self.run(self.c.handle_init_producer_id(TID, 60_000, now, expected))

    def begin(self, pid: int, epoch: int, now: int = 0) -> TxnResult:
        return self.run(self.c.handle_add_partitions(TID, pid, epoch, [TP, TP2], now))

    def end(self, pid: int, epoch: int, commit: bool, now: int = 0) -> TxnResult:
        return self.run(self.c.handle_end_txn(TID, pid, epoch, commit, now))

    def write_markers(self, result: TxnResult, now: int = 0) -> TxnResult | None:
        done = None
        for marker in result.markers:
            done = self.c.handle_marker_written(TID, (marker.topic, marker.partition), now)
            if done is not None:
                self.run(done)
        return done


def test_transition_table_is_enforced() -> None:
    m = TxnMetadata(TID, 1, 0, 1000, TxnState.EMPTY)
    for target, sources in VALID_PREVIOUS.items():
        if TxnState.EMPTY in sources:
            assert m.transition_to(target).state == target
        else:
            with pytest.raises(IllegalTxnTransitionError):
                m.transition_to(target)
    with pytest.raises(ValueError):
        TxnMetadata(TID, 1, 0, 0, TxnState.EMPTY)


def test_init_without_transactional_id_allocates_and_writes_nothing() -> None:
    r = Ctx().c.handle_init_producer_id(None, 60_000, 0)
    assert r.records == () and r.response.producer_id == 1000


def test_commit_flow_prepare_markers_complete() -> None:
    x = Ctx()
    init = x.init().response
    assert (init.error, init.producer_epoch) == (ErrorCode.none, 0)
    pid = init.producer_id
    assert x.begin(pid, 0, now=5).response.error == ErrorCode.none
    assert x.c.metadata(TID) is not None and x.c.metadata(TID).state == TxnState.ONGOING  # type: ignore[union-attr]
    end = x.end(pid, 0, commit=True)
    assert end.response.error == ErrorCode.none
    assert {(m.topic, m.partition, m.commit, m.coordinator_epoch) for m in end.markers} == {
        ("orders", 0, True, 3), ("orders", 1, True, 3)}
    # while markers are pending
    assert x.end(pid, 0, commit=True).response.error == ErrorCode.concurrent_transactions
    assert x.end(pid, 0, commit=False).response.error == ErrorCode.invalid_txn_state
    assert x.begin(pid, 0).response.error == ErrorCode.concurrent_transactions
    assert x.init().response.error == ErrorCode.concurrent_transactions
    done = x.write_markers(end)
    assert done is not None
    assert x.c.metadata(TID).state == TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert x.end(pid, 0, commit=True).response.error == ErrorCode.none  # retry
    assert x.end(pid, 0, commit=False).response.error == ErrorCode.invalid_txn_state


def test_producer_checks() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    assert x.c.handle_add_partitions("other", pid, 0, [TP], 0).response.error in (
        ErrorCode.invalid_producer_id_mapping, ErrorCode.not_coordinator)
    assert x.begin(pid + 1, 0).response.error == ErrorCode.invalid_producer_id_mapping
    assert x.begin(pid, 1).response.error == ErrorCode.producer_fenced
    assert x.end(pid, 0, commit=True).response.error == ErrorCode.invalid_txn_state  # EMPTY
    not_mine = next(t for t in (f"t{i}" for i in range(100)) if partition_for(t) != P)
    assert x.c.handle_init_producer_id(not_mine, 1000, 0).response.error == \
        ErrorCode.not_coordinator
    assert x.c.handle_init_producer_id(TID, 10**9, 0).response.error == \
        ErrorCode.invalid_transaction_timeout


def test_add_offsets_adds_the_groups_consumer_offsets_partition() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    x.run(x.c.handle_add_offsets(TID, pid, 0, "my-group", 0))
    assert x.c.metadata(TID).partitions == frozenset(  # type: ignore[union-attr]
        {(GROUP_METADATA_TOPIC, partition_for("my-group"))})
    again = x.c.handle_add_partitions(TID, pid, 0, [(GROUP_METADATA_TOPIC,
                                                     partition_for("my-group"))], 1)
    assert again.records == () and again.response.error == ErrorCode.none


def test_reinit_fences_zombie_by_epoch_and_aborts_its_ongoing_txn() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    x.begin(pid, 0)
    fence = x.init()
    assert fence.response.error == ErrorCode.concurrent_transactions
    assert all(not m.commit and m.producer_epoch == 1 for m in fence.markers)
    # the zombie (epoch 0) is fenced
    assert x.end(pid, 0, commit=True).response.error == ErrorCode.producer_fenced
    x.write_markers(fence)
    assert x.c.metadata(TID).state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
    retry = x.init().response
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, pid, 2)


def test_kip360_expected_epoch_and_retry_of_a_bump() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    bumped = x.init(expected=(pid, 0)).response
    assert (bumped.error, bumped.producer_epoch) == (ErrorCode.none, 1)
    again = x.init(expected=(pid, 0))
    assert again.records == () and again.response.producer_epoch == 1
    assert x.init(expected=(pid, 7)).response.error == ErrorCode.producer_fenced


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    m = x.c.metadata(TID)
    assert m is not None
    x.c.replay(TxnLogRecord(TID, m.transition_to(TxnState.EMPTY, producer_epoch=32766)))
    r = x.init().response
    assert r.producer_id != pid and r.producer_epoch == 0


def test_transaction_timeout_aborts_with_epoch_bump() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    x.begin(pid, 0, now=1000)
    assert x.c.tick(61_000) == []
    [abort] = x.c.tick(61_001)
    x.run(abort)
    assert all(not m.commit and m.producer_epoch == 1 for m in abort.markers)
    assert x.end(pid, 0, commit=True).response.error == ErrorCode.producer_fenced
    x.write_markers(abort)
    assert x.c.metadata(TID).state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]


def test_transactional_id_expires_to_a_tombstone() -> None:
    x = Ctx()
    x.init(now=0)
    [expire] = x.c.tick(86_400_000)
    x.run(expire)
    assert expire.records == (TxnLogRecord(TID, None),) and x.c.metadata(TID) is None


def test_failover_resends_markers_of_prepared_txns_and_completes_them() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    x.begin(pid, 0)
    end = x.end(pid, 0, commit=True)
    # the old coordinator dies before any marker is acknowledged
    successor = TransactionCoordinator(P, coordinator_epoch=4, allocator=Ids())
    resend = successor.load(enumerate(x.log))
    assert {(m.topic, m.partition) for m in resend} == {(m.topic, m.partition)
                                                        for m in end.markers}
    assert all(m.commit and m.coordinator_epoch == 4 for m in resend)
    done = None
    for m in resend:
        done = successor.handle_marker_written(TID, (m.topic, m.partition), 1)
    assert done is not None
    successor.apply(done)
    assert successor.metadata(TID).state == TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert successor.handle_marker_written(TID, TP, 2) is None


def test_replayed_state_equals_live_state() -> None:
    x = Ctx()
    pid = x.init().response.producer_id
    x.begin(pid, 0)
    x.write_markers(x.end(pid, 0, commit=False))
    x.begin(pid, 0)
    other = TransactionCoordinator(P, coordinator_epoch=4, allocator=Ids())
    assert other.load(enumerate(x.log)) == []
    assert other.metadata(TID) == x.c.metadata(TID)
