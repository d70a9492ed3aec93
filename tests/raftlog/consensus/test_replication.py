"""Scripted tests of Fetch, the high watermark, check-quorum, observers,
snapshots and proposals, named after the KIP-595 / KIP-630 / Raft rule."""

from __future__ import annotations

from typing import Any

import pytest

from raftlog.consensus.errors import Errors, NotLeaderError
from raftlog.consensus.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from raftlog.consensus.ready import CommittedBatch, SnapshotLoad
from raftlog.consensus.roles import ElectionState
from raftlog.consensus.snapshot import SnapshotId
from raftlog.records import decode_records
from raftlog.testing.context import RaftTestContext, leader_batch, seed_log
from raftlog.testing.memory_log import MemoryLog


def _leader(voters: tuple[int, ...] = (1, 2, 3), epochs: list[int] | None = None,
            **config: Any) -> RaftTestContext:
    log = MemoryLog()
    seed_log(log, epochs or [])
    stored = ElectionState(max(epochs)) if epochs else None
    ctx = RaftTestContext(voters=voters, log=log, stored=stored, **config)
    ctx.with_elected_leader()
    ctx.clear_sent()
    return ctx


# -- Fetch: divergence and snapshots ------------------------------------------


def test_kip595_leader_answers_mismatched_last_fetched_epoch_with_diverging_epoch() -> None:
    ctx = _leader(epochs=[1, 1, 3])  # leader log: epoch 1 ends at 2, epoch 3 at 3
    ctx.follower_fetch(2, fetch_offset=4, last_fetched_epoch=2)
    _, resp = ctx.assert_sent(FetchResponse, 2)
    assert resp.diverging_epoch == DivergingEpoch(epoch=1, end_offset=2)
    assert resp.records == b""


def test_kip595_follower_truncates_to_leader_end_offset_for_diverging_epoch() -> None:
    log = MemoryLog()
    seed_log(log, [1, 1, 2, 2])
    ctx = RaftTestContext(log=log, stored=ElectionState(2)).with_leader(3, epoch=4)
    req = ctx.answer_fetch(diverging_epoch=DivergingEpoch(1, 2))
    assert (req.fetch_offset, req.last_fetched_epoch) == (4, 2)
    assert ctx.log.end_offset() == 2
    # The next fetch resumes from the truncation point.
    _, again = ctx.assert_sent(FetchRequest, 3, fetch_offset=2, last_fetched_epoch=1)
    assert again.leader_epoch == 4


def test_kip595_follower_appends_fetched_records_and_learns_hw() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.answer_fetch(records=leader_batch(1, b"a", b"b"), high_watermark=2)
    assert ctx.log.end_offset() == 2
    assert ctx.core.high_watermark == 2
    committed = [e for e in ctx.events if isinstance(e, CommittedBatch)]
    assert [c.base_offset for c in committed] == [0]
    # The next fetch acknowledges offset 2, and the log was flushed before it went out.
    ctx.assert_sent(FetchRequest, 2, fetch_offset=2)
    assert ctx.log.flushed_offset() == 2


def test_fetch_response_with_unexpected_correlation_id_is_ignored() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.deliver(2, FetchResponse(Errors.NONE, 1, 2, 0, 0,
                                 diverging_epoch=DivergingEpoch(0, 0)), 999_999)
    ctx.assert_sent(FetchRequest, 2, fetch_offset=0)  # the original one, unanswered


def test_kip630_fetch_below_log_start_returns_snapshot_id() -> None:
    ctx = _leader(voters=(1, 2, 3), epochs=[1])
    ctx.follower_fetch(2, ctx.log.end_offset(), 2)
    ctx.propose(b"a", b"b")
    ctx.advance_time(ctx.config.append_linger_ms)
    ctx.follower_fetch(2, ctx.log.end_offset(), 2)
    end = ctx.core.applied_offset
    assert end == ctx.log.end_offset()
    ctx.core.create_snapshot(end, b"state", 2)
    assert ctx.log.start_offset() == end
    ctx.clear_sent()
    ctx.follower_fetch(3, 0, 0)
    _, resp = ctx.assert_sent(FetchResponse, 3)
    assert resp.snapshot_id == SnapshotId(end, 2)
    ctx.deliver(3, FetchSnapshotRequest(3, 2, SnapshotId(end, 2), 1, 3), 5)
    _, chunk = ctx.assert_sent(FetchSnapshotResponse, 3)
    assert (chunk.position, chunk.size, chunk.unaligned_records) == (1, 5, b"tat")


def test_kip630_follower_downloads_snapshot_in_chunks_and_loads_it() -> None:
    ctx = RaftTestContext(fetch_snapshot_max_bytes=4).with_leader(2, epoch=3)
    sid = SnapshotId(10, 3)
    ctx.answer_fetch(snapshot_id=sid, log_start_offset=10)
    data = b"0123456789"
    position = 0
    while position < len(data):
        env, req = ctx.assert_sent(FetchSnapshotRequest, 2, position=position)
        chunk = data[position:position + req.max_bytes]
        ctx.deliver(2, FetchSnapshotResponse(Errors.NONE, 3, 2, sid, len(data), position, chunk),
                    env.correlation_id)
        position += len(chunk)
    loads = [e for e in ctx.events if isinstance(e, SnapshotLoad)]
    assert loads == [SnapshotLoad(sid, data)]
    assert ctx.log.start_offset() == 10 and ctx.log.end_offset() == 10
    assert ctx.core.high_watermark == 10
    ctx.assert_sent(FetchRequest, 2, fetch_offset=10, last_fetched_epoch=3)


# -- long poll ----------------------------------------------------------------


def test_kip595_leader_parks_empty_fetch_until_new_records_arrive() -> None:
    ctx = _leader()
    end = ctx.log.end_offset()
    ctx.follower_fetch(2, end, 1, max_wait_ms=500)
    ctx.assert_nothing_sent(FetchResponse)
    ctx.propose(b"x")
    ctx.advance_time(ctx.config.append_linger_ms)
    _, resp = ctx.assert_sent(FetchResponse, 2)
    assert [r.value for r in decode_records(resp.records)] == [b"x"]


def test_kip595_parked_fetch_is_answered_empty_at_max_wait() -> None:
    ctx = _leader()
    ctx.follower_fetch(2, ctx.log.end_offset(), 1, max_wait_ms=300)
    ctx.advance_time(299)
    ctx.assert_nothing_sent(FetchResponse)
    ctx.advance_time(1)
    ctx.assert_sent(FetchResponse, 2, records=b"", error=Errors.NONE)


def test_kip1166_empty_fetch_from_a_replica_behind_the_leaders_hw_is_answered_at_once() -> None:
    ctx = _leader()
    end = ctx.log.end_offset()
    ctx.follower_fetch(2, end, 1)  # commits the LEADER_CHANGE batch
    hw = ctx.core.high_watermark
    assert hw == end
    ctx.clear_sent()
    # Replica 3 has the records but not the HW: no parking, the HW now.
    ctx.follower_fetch(3, end, 1, max_wait_ms=500, high_watermark=0)
    ctx.assert_sent(FetchResponse, 3, records=b"", high_watermark=hw)


def test_kip1166_the_fetch_that_moves_the_hw_is_answered_with_it() -> None:
    ctx = _leader()
    end = ctx.log.end_offset()
    assert ctx.core.high_watermark < end
    # The acknowledging fetch moves the HW past what its sender knew.
    ctx.follower_fetch(2, end, 1, max_wait_ms=500, high_watermark=ctx.core.high_watermark)
    ctx.assert_sent(FetchResponse, 2, records=b"", high_watermark=end)


def test_kip1166_empty_fetch_that_knows_the_hw_is_parked() -> None:
    ctx = _leader()
    end = ctx.log.end_offset()
    ctx.follower_fetch(2, end, 1)
    ctx.clear_sent()
    ctx.follower_fetch(3, end, 1, max_wait_ms=500, high_watermark=ctx.core.high_watermark)
    ctx.assert_nothing_sent(FetchResponse)
    ctx.advance_time(500)
    ctx.assert_sent(FetchResponse, 3, records=b"")


def test_kip1166_empty_fetch_without_a_hw_is_parked_as_before() -> None:
    ctx = _leader()
    end = ctx.log.end_offset()
    ctx.follower_fetch(2, end, 1)
    ctx.clear_sent()
    ctx.follower_fetch(3, end, 1, max_wait_ms=500)  # Fetch v17: HIGH_WATERMARK_UNSUPPORTED
    ctx.assert_nothing_sent(FetchResponse)


def test_kip1166_follower_sends_the_hw_it_knows() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    first = ctx.answer_fetch(records=leader_batch(1, b"a"), high_watermark=1)
    assert first.high_watermark == 0  # the log start: nothing known committed
    ctx.assert_sent(FetchRequest, 2, fetch_offset=1, high_watermark=1)


# -- high watermark ------------------------------------------------------------


def test_kip595_hw_is_majority_of_voter_offsets_with_leader_counting_flushed_offset() -> None:
    ctx = _leader(voters=(1, 2, 3, 4, 5))
    end = ctx.log.end_offset()  # the LEADER_CHANGE batch is flushed
    ctx.follower_fetch(2, end, 1)
    assert ctx.core.high_watermark == 0  # leader + 1 of 5
    ctx.follower_fetch(3, end, 1)
    assert ctx.core.high_watermark == end  # leader + 2 of 5


def test_kip595_leader_unflushed_records_do_not_count_toward_hw() -> None:
    ctx = _leader(voters=(1, 2, 3))
    ctx.follower_fetch(2, ctx.log.end_offset(), 1)
    hw = ctx.core.high_watermark
    # Appended but not flushed: a follower acknowledging it is not enough,
    # because the leader's own copy is volatile (only 1 durable copy of 3).
    ctx.core.propose([b"v"], ctx.now_ms)
    ctx.core.tick(ctx.now_ms + ctx.config.append_linger_ms)
    ctx.now_ms += ctx.config.append_linger_ms
    assert ctx.log.flushed_offset() < ctx.log.end_offset()
    leader = ctx.core.quorum.role
    assert not leader.update_local(ctx.log.flushed_offset(), ctx.now_ms)  # type: ignore[union-attr]
    assert ctx.core.high_watermark == hw


def test_raft_figure8_hw_advances_only_past_an_entry_of_the_leaders_epoch() -> None:
    ctx = _leader(voters=(1, 2, 3), epochs=[1, 1, 1])
    start = 3  # LEADER_CHANGE of epoch 2 sits at offset 3
    # A follower holding the old-epoch entries does not commit them.
    ctx.follower_fetch(2, start, 1)
    assert ctx.core.high_watermark == 0
    ctx.follower_fetch(2, start + 1, 2)
    assert ctx.core.high_watermark == start + 1


def test_kip595_hw_never_decreases() -> None:
    ctx = _leader(voters=(1, 2, 3))
    end = ctx.log.end_offset()
    ctx.follower_fetch(2, end, 1)
    assert ctx.core.high_watermark == end
    # Follower 2 truncates (lower fetch offset): the HW stays.
    ctx.follower_fetch(2, 0, 0)
    assert ctx.core.high_watermark == end


def test_kip595_observer_fetches_never_move_hw() -> None:
    ctx = _leader(voters=(1, 2, 3))
    ctx.follower_fetch(7, ctx.log.end_offset(), 1)
    ctx.follower_fetch(8, ctx.log.end_offset(), 1)
    assert ctx.core.high_watermark == 0
    described = ctx.core.describe_quorum()
    assert [o.replica_id for o in described.observers] == [7, 8]


def test_kip836_describe_quorum_reports_voters_and_observers() -> None:
    ctx = _leader(voters=(1, 2, 3))
    end = ctx.log.end_offset()
    ctx.follower_fetch(2, end, 1)
    ctx.follower_fetch(9, end, 1)
    ctx.deliver(9, DescribeQuorumRequest(), 4)
    _, resp = ctx.assert_sent(DescribeQuorumResponse, 9, error=Errors.NONE, leader_id=1,
                              leader_epoch=1, high_watermark=end)
    voters = {v.replica_id: v for v in resp.current_voters}
    assert voters[2].log_end_offset == end and voters[2].last_caught_up_timestamp == ctx.now_ms
    assert voters[3].log_end_offset == -1
    assert [o.replica_id for o in resp.observers] == [9]


# -- check-quorum ----------------------------------------------------------------


def test_kip595_check_quorum_leader_resigns_without_fetches_from_a_majority() -> None:
    ctx = _leader(voters=(1, 2, 3))
    ctx.advance_time(ctx.config.fetch_timeout_ms)
    assert ctx.core.role_name == "Resigned"
    ctx.assert_sent(EndQuorumEpochRequest)
    with pytest.raises(NotLeaderError):
        ctx.propose(b"late")


def test_kip595_check_quorum_keeps_leader_with_majority_fetching() -> None:
    ctx = _leader(voters=(1, 2, 3))
    for _ in range(4):
        ctx.advance_time(ctx.config.fetch_timeout_ms // 2)
        ctx.follower_fetch(2, ctx.log.end_offset(), 1)
    assert ctx.core.is_leader


# -- observers --------------------------------------------------------------------


def test_kip595_observer_discovers_the_leader_from_any_voter() -> None:
    ctx = RaftTestContext(local_id=7, voters=(1, 2, 3))
    ctx.tick()  # the runtime ticks once at start
    env, req = ctx.assert_sent(FetchRequest)
    assert req.replica_id == 7
    ctx.deliver(env.destination, FetchResponse(Errors.NOT_LEADER_OR_FOLLOWER, 4, 3, -1, 0),
                env.correlation_id)
    assert ctx.core.role_name == "Follower"
    assert ctx.core.leader_and_epoch().leader_id == 3
    ctx.assert_sent(FetchRequest, 3, leader_epoch=4)


def test_kip595_observer_never_stands_for_election() -> None:
    ctx = RaftTestContext(local_id=7, voters=(1, 2, 3))
    ctx.advance_time(ctx.config.election_timeout_ms * 5)
    assert ctx.core.role_name == "Unattached"
    assert ctx.core.epoch == 0


# -- proposals ---------------------------------------------------------------------


def test_kip595_proposal_on_follower_raises_not_leader_with_known_leader() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=2)
    with pytest.raises(NotLeaderError) as info:
        ctx.propose(b"x")
    assert (info.value.leader_id, info.value.epoch) == (3, 2)


def test_append_linger_batches_proposals_into_one_batch() -> None:
    ctx = _leader()
    start = ctx.log.end_offset()
    assert ctx.propose(b"a") == start
    assert ctx.propose(b"b", b"c") == start + 2
    assert ctx.log.end_offset() == start  # still lingering
    ctx.advance_time(ctx.config.append_linger_ms)
    batch = ctx.log.batch_containing(start)
    assert batch is not None and (batch.base_offset, batch.next_offset) == (start, start + 3)


def test_append_batch_closes_at_size_cap_before_linger() -> None:
    ctx = _leader(append_max_batch_bytes=10)
    start = ctx.log.end_offset()
    ctx.propose(b"0123456789")
    assert ctx.log.end_offset() == start + 1


def test_committed_batches_are_delivered_in_order_once_hw_passes() -> None:
    ctx = _leader()
    offset = ctx.propose(b"hello")
    ctx.advance_time(ctx.config.append_linger_ms)
    ctx.follower_fetch(2, offset + 1, 1)
    committed = [e for e in ctx.events if isinstance(e, CommittedBatch)]
    assert [c.is_control for c in committed] == [True, False]
    assert [r.value for r in decode_records(committed[-1].data)] == [b"hello"]


# -- every parked fetch gets an answer -------------------------------------------


def test_kip595_parked_fetch_is_answered_not_leader_with_new_leader_when_leadership_ends() -> None:
    ctx = _leader()
    epoch = ctx.core.epoch
    ctx.follower_fetch(2, ctx.log.end_offset(), epoch, max_wait_ms=500)
    ctx.assert_nothing_sent(FetchResponse)
    # A newer leader (3) announces itself: the old leader's purgatory is
    # completed with NOT_LEADER_OR_FOLLOWER and the new epoch/leader as hints.
    ctx.deliver(3, BeginQuorumEpochRequest(epoch + 1, 3))
    env, _resp = ctx.assert_sent(FetchResponse, 2, error=Errors.NOT_LEADER_OR_FOLLOWER,
                                leader_epoch=epoch + 1, leader_id=3)
    assert env.correlation_id == 1002


def test_kip595_parked_fetch_is_answered_when_check_quorum_resigns() -> None:
    ctx = _leader()
    ctx.follower_fetch(2, ctx.log.end_offset(), ctx.core.epoch,
                       max_wait_ms=ctx.config.fetch_timeout_ms * 10)
    while ctx.core.is_leader:
        ctx.advance_time(100)
    assert ctx.core.role_name == "Resigned"
    ctx.assert_sent(FetchResponse, 2, error=Errors.NOT_LEADER_OR_FOLLOWER)


def test_kip595_second_fetch_from_one_source_answers_the_parked_one() -> None:
    ctx = _leader()
    end, epoch = ctx.log.end_offset(), ctx.core.epoch
    ctx.deliver(2, FetchRequest(2, epoch, end, epoch, 500, 1 << 20), correlation_id=7)
    ctx.deliver(2, FetchRequest(2, epoch, end, epoch, 500, 1 << 20), correlation_id=8)
    env, _resp = ctx.assert_sent(FetchResponse, 2, error=Errors.NONE, records=b"")
    assert env.correlation_id == 7
    ctx.assert_nothing_sent(FetchResponse)  # the new one is parked in its place
    ctx.advance_time(500)
    env, _ = ctx.assert_sent(FetchResponse, 2)
    assert env.correlation_id == 8


# -- STYLE.md section 8, tier 1: bad peer input never stops the node ---------------


def _corrupt(batch: bytes) -> bytes:
    data = bytearray(batch)
    data[-1] ^= 0xFF  # inside the CRC-covered part: the CRC no longer matches
    return bytes(data)


def test_style8_memory_log_append_as_follower_raises_value_error_on_corrupt_batch() -> None:
    # The ReplicatedLog port documents ValueError (not the codec's RecordError).
    with pytest.raises(ValueError, match="corrupt"):
        MemoryLog().append_as_follower(_corrupt(leader_batch(1, b"a")))


def test_style8_corrupt_fetched_records_are_dropped_and_refetched_after_backoff() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.answer_fetch(records=_corrupt(leader_batch(1, b"a")), high_watermark=1)
    assert ctx.log.end_offset() == 0 and ctx.core.high_watermark == 0
    assert ctx.core.role_name == "Follower"
    ctx.assert_nothing_sent(FetchRequest)  # not at once: after retry.backoff.ms
    ctx.advance_time(ctx.config.retry_backoff_ms)
    ctx.assert_sent(FetchRequest, 2, fetch_offset=0)


def test_style8_fetched_batch_from_a_later_epoch_than_the_leaders_is_dropped() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.answer_fetch(records=leader_batch(5, b"a"))
    assert ctx.log.end_offset() == 0 and ctx.log.last_fetched_epoch() == 0


def test_style8_diverging_epoch_below_the_committed_offset_is_dropped_not_obeyed() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.answer_fetch(records=leader_batch(1, b"a", b"b"), high_watermark=2)
    assert ctx.core.applied_offset == 2
    ctx.answer_fetch(diverging_epoch=DivergingEpoch(0, 0))
    assert ctx.log.end_offset() == 2 and ctx.core.role_name == "Follower"


def test_style8_snapshot_offer_below_the_applied_offset_is_dropped() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.answer_fetch(records=leader_batch(1, b"a", b"b"), high_watermark=2)
    ctx.answer_fetch(snapshot_id=SnapshotId(1, 1))
    ctx.advance_time(ctx.config.retry_backoff_ms)
    ctx.assert_nothing_sent(FetchSnapshotRequest)
    ctx.assert_sent(FetchRequest, 2, fetch_offset=2)


def test_style8_high_watermark_inside_a_batch_does_not_spin_the_ready_loop() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    # The context drains until has_ready() is false: this used to loop forever.
    ctx.answer_fetch(records=leader_batch(1, b"a", b"b"), high_watermark=1)
    assert ctx.core.applied_offset == 0 and not ctx.core.has_ready()
    ctx.answer_fetch(high_watermark=2)
    assert ctx.core.applied_offset == 2


# -- Ready ordering: what may be sent before the flush ---------------------------


def test_raft_thesis_10_2_1_leader_sends_unflushed_records_before_its_own_flush() -> None:
    ctx = _leader(append_linger_ms=0)
    ctx.follower_fetch(2, ctx.log.end_offset(), 1, max_wait_ms=500)
    before = len(ctx.readies)
    ctx.propose(b"x")
    ready = ctx.readies[before]
    assert ready.flush_log_to == ctx.log.end_offset()
    assert [type(e.body) for e in ready.messages] == [FetchResponse]
    # The leader's answer may overlap its own fsync: its HW counts only what
    # it has flushed, so the records promise nothing about its disk.
    assert ready.send_before_persist


def test_kip595_follower_fetch_acknowledging_records_waits_for_the_flush() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=2)
    ctx.answer_fetch(records=leader_batch(2, b"a", b"b"), high_watermark=0)
    ready = ctx.readies[-1]
    assert ready.flush_log_to == 2
    assert any(isinstance(e.body, FetchRequest) for e in ready.messages)
    assert not ready.send_before_persist  # the fetch offset acknowledges records 0..1


def test_kip595_ready_with_an_election_state_never_sends_before_persisting() -> None:
    ctx = _leader(append_linger_ms=0)
    ctx.core.propose([b"y"], ctx.now_ms)  # appended, not flushed: no drain
    higher = BeginQuorumEpochRequest(ctx.core.epoch + 1, 2)
    ctx.core.step(Envelope(2, 1, higher, 7), ctx.now_ms)
    ready = ctx.core.ready()
    assert ready.election_state is not None and ready.flush_log_to is not None
    assert not ready.send_before_persist  # the answer promises the new epoch is durable
