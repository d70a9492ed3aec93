"""The partition replication core (`data_plane.partition`): scripted tests,
each named after the rule it checks. A small context builder wires real logs
on a `FakeFileSystem` to `Partition` objects and moves fetches between them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from data_plane.partition import (
    Acks,
    AlterPartitionResponse,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResult,
    FollowerFetchOutcome,
    Partition,
    PartitionState,
    PartitionStateError,
    ReplicationConfig,
    Role,
)
from data_plane.replication.partition import IdleFollowerFetch
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, build_control_batch, decode_records, iter_batches
from raftlog.records.batch import ControlRecordType
from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

TOPIC = "t"
REPLICAS = (1, 2, 3)


def batch(*values: bytes) -> bytes:
    b = BatchBuilder()
    for v in values:
        b.append(v, timestamp_ms=1_700_000_000_000)
    return b.build()


def state(leader: int, epoch: int, pe: int, isr: tuple[int, ...] = REPLICAS) -> PartitionState:
    return PartitionState(TOPIC, 0, leader=leader, leader_epoch=epoch, partition_epoch=pe,
                          replicas=REPLICAS, isr=isr)


@dataclass
class Ctx:
    """Three replicas of one partition, each with its own fake disk."""

    config: ReplicationConfig = field(
        default_factory=lambda: ReplicationConfig(replica_lag_time_max_ms=1_000,
                                                  min_insync_replicas=2))
    log_config: LogConfig = field(default_factory=LogConfig)
    clock: FakeClock = field(default_factory=FakeClock)
    parts: dict[int, Partition] = field(default_factory=dict)
    disks: dict[int, FakeFileSystem] = field(default_factory=dict)
    now_ms: int = 0

    def __post_init__(self) -> None:
        for r in REPLICAS:
            self.disks[r] = FakeFileSystem()
            log = Log.open(f"/d{r}", self.log_config, fs=self.disks[r], clock=self.clock)
            self.parts[r] = Partition(TOPIC, 0, local_id=r, log=log, config=self.config,
                                      broker_epoch=100 + r)

    def apply(self, s: PartitionState) -> None:
        for r, p in self.parts.items():
            (p.become_leader if s.leader == r else p.become_follower)(s, self.now_ms)

    def produce(self, leader: int, *values: bytes, acks: int = Acks.ALL) -> int:
        result = self.parts[leader].append_records(batch(*values), acks, self.now_ms)
        assert result.error == ErrorCode.none, result
        return result.base_offset

    def fetch_once(self, follower: int) -> tuple[FetchPartitionResult, FollowerFetchOutcome]:
        f = self.parts[follower]
        request = f.fetch_request(self.now_ms)
        assert request is not None
        result = self.parts[f.leader_id].handle_fetch(request, self.now_ms)
        return result, f.handle_fetch_response(request, result, self.now_ms)

    def replicate(self, *followers: int, rounds: int = 3) -> None:
        for _ in range(rounds):
            for f in followers:
                self.fetch_once(f)

    def values(self, r: int) -> list[bytes | None]:
        """Every record value in replica ``r``'s log (reads stop at segment ends)."""
        log = self.parts[r].log
        out: list[bytes | None] = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for header, pos in iter_batches(data):
                out += [rec.value for rec in decode_records(data, pos=pos)]
                offset = header.next_offset
        return out


@pytest.fixture
def ctx() -> Ctx:
    c = Ctx()
    c.apply(state(1, 1, 1))
    return c


# ---- transitions -------------------------------------------------------------------


def test_leader_epoch_fencing_ignores_metadata_with_an_older_leader_epoch(ctx: Ctx) -> None:
    assert ctx.parts[2].become_follower(state(1, 3, 3), 0)
    assert not ctx.parts[2].become_follower(state(3, 2, 4), 0)
    assert ctx.parts[2].leader_id == 1 and ctx.parts[2].leader_epoch == 3


def test_same_leader_epoch_with_newer_partition_epoch_refreshes_the_isr_only(ctx: Ctx) -> None:
    leader = ctx.parts[1]
    assert leader.become_leader(state(1, 1, 2, isr=(1, 2)), 0)
    assert leader.isr == (1, 2) and leader.leader_epoch == 1 and leader.partition_epoch == 2
    assert not leader.become_leader(state(1, 1, 2, isr=(1, 3)), 0)  # same partition epoch
    assert leader.isr == (1, 2)


def test_metadata_for_another_partition_or_wrong_role_is_caller_misuse(ctx: Ctx) -> None:
    with pytest.raises(PartitionStateError):
        ctx.parts[2].become_leader(state(1, 2, 2), 0)
    with pytest.raises(PartitionStateError):
        ctx.parts[1].become_follower(replace(state(2, 2, 2), topic="other"), 0)


def test_kip101_becoming_follower_does_not_truncate_to_the_high_watermark(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")  # HW stays 0: followers have not fetched
    assert ctx.parts[1].high_watermark == 0
    ctx.apply(state(2, 2, 2))
    assert ctx.parts[1].role is Role.FOLLOWER
    assert ctx.parts[1].log_end_offset == 2


# ---- produce -------------------------------------------------------------------


def test_append_assigns_offsets_and_stamps_the_leader_epoch(ctx: Ctx) -> None:
    assert ctx.produce(1, b"a", b"b") == 0
    result = ctx.parts[1].append_records(batch(b"c"), Acks.LEADER, 0)
    assert (result.base_offset, result.last_offset, result.leader_epoch) == (2, 2, 1)
    assert result.required_offset == 3
    assert ctx.parts[1].log.latest_epoch == 1


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_produce_with_unknown_acks_is_invalid_required_acks(ctx: Ctx, acks: int) -> None:
    assert ctx.parts[1].append_records(batch(b"a"), acks, 0).error == ErrorCode.invalid_required_acks


def test_produce_to_a_follower_is_not_leader_or_follower(ctx: Ctx) -> None:
    result = ctx.parts[2].append_records(batch(b"a"), Acks.ALL, 0)
    assert result.error == ErrorCode.not_leader_or_follower
    assert ctx.parts[2].log_end_offset == 0


def test_a_bad_crc_is_corrupt_message_and_nothing_is_written(ctx: Ctx) -> None:
    data = bytearray(batch(b"hello"))
    data[-1] ^= 0xFF
    assert ctx.parts[1].append_records(bytes(data), Acks.ALL, 0).error == ErrorCode.corrupt_message
    assert ctx.parts[1].log_end_offset == 0


def test_a_batch_over_message_max_bytes_is_message_too_large() -> None:
    c = Ctx(log_config=LogConfig(message_max_bytes=100))
    c.apply(state(1, 1, 1))
    result = c.parts[1].append_records(batch(b"x" * 200), Acks.ALL, 0)
    assert result.error == ErrorCode.message_too_large


def test_a_compacted_topic_refuses_records_without_a_key() -> None:
    c = Ctx(config=ReplicationConfig(compacted=True))
    c.apply(state(1, 1, 1))
    keyed = BatchBuilder()
    keyed.append(b"v", key=b"k", timestamp_ms=0)
    keyed.append(None, key=b"k", timestamp_ms=0)  # a tombstone has a key
    assert c.parts[1].append_records(keyed.build(), Acks.ALL, 0).error == ErrorCode.none
    mixed = BatchBuilder()
    mixed.append(b"v", key=b"k", timestamp_ms=0)
    mixed.append(b"v", timestamp_ms=0)
    result = c.parts[1].append_records(mixed.build(), Acks.ALL, 0)
    assert result.error == ErrorCode.invalid_record
    assert result.error_message is not None and "without key" in result.error_message
    assert c.parts[1].log_end_offset == 2


def _stamped(*timestamps: int) -> bytes:
    b = BatchBuilder()
    for ts in timestamps:
        b.append(b"v", timestamp_ms=ts)
    return b.build()


def test_create_time_timestamps_outside_the_kip_937_bounds_are_invalid_timestamp() -> None:
    now = 1_800_000_000_000
    c = Ctx(config=ReplicationConfig(message_timestamp_before_max_ms=60_000,
                                     message_timestamp_after_max_ms=3_600_000))
    c.apply(state(1, 1, 1))
    leader = c.parts[1]
    # Within [now - 1 min, now + 1 h], ends included; -1 (no timestamp) passes.
    ok = leader.append_records(_stamped(now - 60_000, now, -1, now + 3_600_000), Acks.LEADER,
                               0, wall_clock_ms=now)
    assert ok.error == ErrorCode.none
    # A later record out of order, earlier than the first, is still found:
    # the lower bound reads each record, not the batch header.
    early = leader.append_records(_stamped(now, now - 60_001), Acks.LEADER, 0, wall_clock_ms=now)
    assert early.error == ErrorCode.invalid_timestamp
    assert early.error_message == (
        f"Timestamp {now - 60_001} of message with offset 1 is out of range. "
        f"The timestamp should be within [{now - 60_000}, {now + 3_600_000}]")
    late = leader.append_records(_stamped(now, now + 3_600_001), Acks.LEADER, 0,
                                 wall_clock_ms=now)
    assert late.error == ErrorCode.invalid_timestamp
    assert late.error_message is not None and f"Timestamp {now + 3_600_001}" in late.error_message
    # Nothing of a refused request is appended.
    assert leader.log_end_offset == 4


def test_only_the_upper_timestamp_bound_is_checked_by_default_and_not_for_log_append_time() -> None:
    now = 1_800_000_000_000
    hour_ahead = ReplicationConfig(message_timestamp_after_max_ms=3_600_000)
    c = Ctx(config=hour_ahead)
    c.apply(state(1, 1, 1))
    # No lower bound: a record from 1970 is taken, one two hours ahead is not.
    assert c.parts[1].append_records(_stamped(0), Acks.LEADER, 0,
                                     wall_clock_ms=now).error == ErrorCode.none
    assert c.parts[1].append_records(_stamped(now + 7_200_000), Acks.LEADER, 0,
                                     wall_clock_ms=now).error == ErrorCode.invalid_timestamp
    # LogAppendTime: the broker's own stamp replaces the producer's, unchecked.
    stamped_by_log = Ctx(config=hour_ahead,
                         log_config=LogConfig(message_timestamp_type="LogAppendTime"))
    stamped_by_log.apply(state(1, 1, 1))
    assert stamped_by_log.parts[1].append_records(
        _stamped(now + 7_200_000), Acks.LEADER, 0, wall_clock_ms=now).error == ErrorCode.none


def test_producers_may_not_write_control_batches(ctx: Ctx) -> None:
    control = build_control_batch(ControlRecordType.COMMIT, b"\x00\x00\x00\x00\x00\x00", timestamp_ms=0, producer_id=1,
                                  producer_epoch=0)
    assert ctx.parts[1].append_records(control, Acks.ALL, 0).error == ErrorCode.invalid_record


def test_min_isr_acks_all_is_refused_before_the_append_when_the_isr_is_too_small() -> None:
    c = Ctx()
    c.apply(state(1, 1, 1, isr=(1,)))
    result = c.parts[1].append_records(batch(b"a"), Acks.ALL, 0)
    assert result.error == ErrorCode.not_enough_replicas
    assert c.parts[1].log_end_offset == 0
    # acks=1 does not need the ISR.
    assert c.parts[1].append_records(batch(b"a"), Acks.LEADER, 0).error == ErrorCode.none


def test_acks_all_completes_once_the_hw_reaches_the_last_offset_plus_one(ctx: Ctx) -> None:
    base = ctx.produce(1, b"a", b"b")
    leader = ctx.parts[1]
    assert leader.check_enough_replicas_reach_offset(base + 2, 1) == (False, ErrorCode.none)
    ctx.replicate(2, 3)
    assert leader.high_watermark == 2
    assert leader.check_enough_replicas_reach_offset(base + 2, 1) == (True, ErrorCode.none)


def test_not_enough_replicas_after_append_when_the_isr_shrank_while_waiting(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    leader = ctx.parts[1]
    leader.become_leader(state(1, 1, 2, isr=(1,)), 0)  # followers fenced by the controller
    # Below min.insync.replicas the HW holds (Kafka 3.7+, KIP-966's premise),
    # and the waiting produce is answered at once rather than at its timeout.
    assert leader.high_watermark == 0
    assert leader.check_enough_replicas_reach_offset(1, 1) == (
        True, ErrorCode.not_enough_replicas_after_append)


def test_the_hw_holds_below_min_isr_and_moves_once_the_isr_is_back(ctx: Ctx) -> None:
    """acks=1 records appended while the ISR is below min.insync.replicas stay
    above the HW (unreadable) until a follower has them and rejoins."""
    leader = ctx.parts[1]
    ctx.apply(state(1, 1, 2, isr=(1,)))
    ctx.produce(1, b"a", acks=Acks.LEADER)
    assert (leader.log.log_end_offset, leader.high_watermark) == (1, 0)
    ctx.replicate(2)  # 2 has the record, but is not in the ISR yet
    assert leader.high_watermark == 0
    ctx.apply(state(1, 1, 3, isr=(1, 2)))
    assert leader.high_watermark == 1


def test_the_minimum_the_hw_needs_is_at_most_the_replica_count() -> None:
    c = Ctx(config=ReplicationConfig(replica_lag_time_max_ms=1_000, min_insync_replicas=5))
    c.apply(state(1, 1, 1))
    c.produce(1, b"a", acks=Acks.LEADER)
    c.replicate(2, 3)
    assert c.parts[1].high_watermark == 1


def test_a_waiting_produce_fails_not_leader_once_leadership_moves(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    ctx.apply(state(2, 2, 2))
    assert ctx.parts[1].check_enough_replicas_reach_offset(1, 1) == (
        True, ErrorCode.not_leader_or_follower)


# ---- high watermark -------------------------------------------------------------------


def test_hw_is_the_minimum_leo_over_the_isr(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b", b"c")
    ctx.replicate(2)
    assert ctx.parts[1].high_watermark == 0  # broker 3 has not fetched
    ctx.fetch_once(3)
    ctx.fetch_once(3)  # the second fetch reports LEO 3
    ctx.fetch_once(2)
    assert ctx.parts[1].high_watermark == 3


def test_kip320_rule3_a_new_leader_hw_waits_until_every_isr_member_fetched_in_its_epoch(
    ctx: Ctx,
) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2, 3)
    ctx.apply(state(2, 2, 2))
    new_leader = ctx.parts[2]
    assert new_leader.leader_epoch_start_offset == 2
    hw_before = new_leader.high_watermark
    new_leader.append_records(batch(b"c"), Acks.ALL, 0)
    ctx.fetch_once(3)
    ctx.fetch_once(3)
    # Broker 1 (in the ISR) has not fetched in epoch 2: the HW cannot move past it.
    assert new_leader.high_watermark == hw_before
    ctx.fetch_once(1)
    ctx.fetch_once(1)
    ctx.fetch_once(3)
    assert new_leader.high_watermark == 3
    assert not new_leader.high_watermark_is_lagging


def test_hw_never_decreases_when_a_follower_fetches_from_a_lower_offset(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2, 3)
    assert ctx.parts[1].high_watermark == 2
    # Broker 3 lost its tail (crash) and fetches from offset 0 again.
    ctx.parts[1].handle_fetch(FetchPartition(0, 1, -1, replica_id=3, replica_epoch=103), 0)
    assert ctx.parts[1].high_watermark == 2


def test_kip497_hw_counts_the_maximal_isr_while_an_expansion_is_in_flight() -> None:
    c = Ctx()
    c.apply(state(1, 1, 1, isr=(1, 2)))
    leader = c.parts[1]
    c.produce(1, b"a")
    c.replicate(2, 3)  # broker 3 reaches the HW: expansion proposed
    assert leader.isr_change_in_flight and leader.maximal_isr == (1, 2, 3)
    request = leader.poll_alter_partition(0)
    assert request is not None and request.new_isr == (1, 2, 3)
    c.produce(1, b"b")
    c.replicate(2)
    # The HW does not pass broker 3, which may already be in the ISR.
    assert leader.high_watermark == 1
    c.fetch_once(3)  # gets "b"
    c.fetch_once(3)  # reports LEO 2
    assert leader.high_watermark == 2


def test_a_replica_added_in_the_same_leader_epoch_fetches_and_joins_the_isr_by_catching_up(
) -> None:
    """A reassignment adds a replica without a new leader epoch (KIP-455):
    the leader serves its fetches from then on, and proposes it for the ISR
    only once it has caught up; the HW never waits for it before that."""
    c = Ctx()
    two = PartitionState(TOPIC, 0, leader=1, leader_epoch=1, partition_epoch=1,
                         replicas=(1, 2), isr=(1, 2))
    c.parts[1].become_leader(two, 0)
    c.parts[2].become_follower(two, 0)
    leader = c.parts[1]
    c.produce(1, b"a", b"b")
    c.replicate(2)
    assert leader.high_watermark == 2
    three = replace(two, partition_epoch=2, replicas=(3, 1, 2))
    assert leader.become_leader(three, 0)
    c.parts[2].become_follower(three, 0)
    c.parts[3].become_follower(three, 0)
    assert leader.isr == (1, 2) and not leader.isr_change_in_flight
    result, _ = c.fetch_once(3)
    assert result.error == ErrorCode.none and not leader.isr_change_in_flight
    c.produce(1, b"c")
    c.replicate(2)
    assert leader.high_watermark == 3  # not waiting for broker 3
    c.replicate(3)
    assert c.values(3) == [b"a", b"b", b"c"]
    request = leader.poll_alter_partition(0)
    assert request is not None and request.new_isr == (1, 2, 3)
    # Removing it again needs a new leader epoch (the controller bumps it);
    # a same-epoch list without it stops serving it.
    assert leader.become_leader(replace(two, partition_epoch=3), 0)
    result, _ = c.fetch_once(3)
    assert result.error == ErrorCode.not_leader_or_follower


def test_an_acks_all_wait_survives_a_new_epoch_with_the_same_leader_but_not_a_break() -> None:
    """A reassignment that removes a follower bumps the leader epoch with the
    same leader: a produce waiting for the HW still completes. A replica
    that was a follower in between (its log may have been truncated) fails
    the wait instead."""
    c = Ctx()
    c.apply(state(1, 1, 1))
    leader = c.parts[1]
    offset = c.produce(1, b"a")
    assert leader.check_enough_replicas_reach_offset(offset + 1, 1) == (False, ErrorCode.none)
    two = PartitionState(TOPIC, 0, leader=1, leader_epoch=2, partition_epoch=2,
                         replicas=(1, 2), isr=(1, 2))
    assert leader.become_leader(two, 0)
    c.parts[2].become_follower(two, 0)
    assert leader.check_enough_replicas_reach_offset(offset + 1, 1) == (False, ErrorCode.none)
    c.replicate(2)
    assert leader.high_watermark == offset + 1
    assert leader.check_enough_replicas_reach_offset(offset + 1, 1) == (True, ErrorCode.none)
    # A wait from an epoch this replica did not lead through fails.
    later = c.produce(1, b"b")
    leader.become_follower(replace(two, leader=2, leader_epoch=3, partition_epoch=3), 0)
    leader.become_leader(replace(two, leader_epoch=4, partition_epoch=4), 0)
    assert leader.check_enough_replicas_reach_offset(later + 1, 2) == (
        True, ErrorCode.not_leader_or_follower)


# ---- ISR -------------------------------------------------------------------------


def test_isr_shrinks_after_replica_lag_time_max_without_catching_up(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    ctx.now_ms = 500
    ctx.replicate(2)  # broker 2 keeps up, broker 3 never fetches
    leader = ctx.parts[1]
    assert not leader.maybe_shrink_isr(1_000)
    ctx.now_ms = 1_400
    ctx.replicate(2)
    assert leader.maybe_shrink_isr(1_600)
    request = leader.poll_alter_partition(1_600)
    assert request is not None and request.new_isr == (1, 2)
    assert [p.broker_epoch for p in request.new_isr_with_epochs] == [101, 102]


def test_a_follower_fetching_at_the_leader_leo_is_caught_up_and_stays(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    for t in (300, 900, 1_500, 2_100):
        ctx.now_ms = t
        ctx.replicate(2, 3, rounds=1)
    assert not ctx.parts[1].maybe_shrink_isr(2_200)


def test_isr_expansion_requires_hw_epoch_start_and_a_fetch_in_the_current_epoch() -> None:
    c = Ctx()
    c.apply(state(1, 1, 1, isr=(1, 2)))
    c.produce(1, b"a", b"b")
    c.replicate(2)
    # Leadership moves to 2 (epoch 2) with a lagging HW; 3 has nothing.
    c.apply(state(2, 2, 2, isr=(2, 1)))
    leader = c.parts[2]
    assert leader.leader_epoch_start_offset == 2
    # Broker 3 fetching from 0 has reached the HW (0) but not the epoch start (2).
    c.fetch_once(3)
    assert not leader.isr_change_in_flight
    c.fetch_once(1)
    c.fetch_once(3)
    c.fetch_once(3)
    assert leader.isr_change_in_flight
    request = leader.poll_alter_partition(0)
    assert request is not None and request.new_isr == (2, 1, 3)


def test_kip841_a_fenced_replica_is_never_proposed_for_the_isr() -> None:
    c = Ctx()
    c.apply(state(1, 1, 1, isr=(1, 2)))
    c.parts[1].update_ineligible_replicas(frozenset({3}))
    c.replicate(2, 3)
    assert not c.parts[1].isr_change_in_flight


def test_only_one_alter_partition_is_in_flight_and_a_timeout_resends_it(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    leader = ctx.parts[1]
    assert leader.maybe_shrink_isr(5_000)
    assert not leader.maybe_shrink_isr(5_001)
    first = leader.poll_alter_partition(5_000)
    assert first is not None
    assert leader.poll_alter_partition(5_001) is None
    again = leader.poll_alter_partition(5_000 + ctx.config.alter_partition_timeout_ms)
    assert again == first


def test_alter_partition_success_applies_the_controller_isr_and_partition_epoch(ctx: Ctx) -> None:
    leader = ctx.parts[1]
    leader.maybe_shrink_isr(5_000)
    req = leader.poll_alter_partition(5_000)
    assert req is not None and req.new_isr == (1,)
    stale = AlterPartitionResponse(req.change_id + 7, ErrorCode.none, 1, 1, 9, (1,))
    assert not leader.handle_alter_partition_response(stale, 5_001)
    ok = AlterPartitionResponse(req.change_id, ErrorCode.none, 1, 1, 2, (1,))
    assert leader.handle_alter_partition_response(ok, 5_001)
    assert leader.isr == (1,) and leader.partition_epoch == 2 and not leader.isr_change_in_flight
    # The metadata record for the same change is now a no-op.
    assert not leader.become_leader(state(1, 1, 2, isr=(1,)), 5_002)


@pytest.mark.parametrize("error", [ErrorCode.ineligible_replica, ErrorCode.operation_not_attempted])
def test_alter_partition_not_applied_reverts_to_the_committed_isr(ctx: Ctx, error: ErrorCode) -> None:
    leader = ctx.parts[1]
    leader.maybe_shrink_isr(5_000)
    req = leader.poll_alter_partition(5_000)
    assert req is not None
    leader.handle_alter_partition_response(AlterPartitionResponse(req.change_id, error), 5_001)
    assert not leader.isr_change_in_flight and leader.isr == REPLICAS


@pytest.mark.parametrize("error", [ErrorCode.invalid_update_version, ErrorCode.fenced_leader_epoch])
def test_alter_partition_with_a_stale_view_waits_for_metadata(ctx: Ctx, error: ErrorCode) -> None:
    leader = ctx.parts[1]
    leader.maybe_shrink_isr(5_000)
    req = leader.poll_alter_partition(5_000)
    assert req is not None
    leader.handle_alter_partition_response(AlterPartitionResponse(req.change_id, error), 5_001)
    assert leader.isr_change_in_flight
    assert leader.poll_alter_partition(100_000) is None
    assert leader.become_leader(state(1, 1, 5, isr=(1, 2)), 5_002)
    assert not leader.isr_change_in_flight and leader.isr == (1, 2)


def test_a_retriable_alter_partition_error_is_retried_after_the_backoff(ctx: Ctx) -> None:
    leader = ctx.parts[1]
    leader.maybe_shrink_isr(5_000)
    req = leader.poll_alter_partition(5_000)
    assert req is not None
    leader.handle_alter_partition_response(
        AlterPartitionResponse(req.change_id, ErrorCode.request_timed_out), 5_001)
    assert leader.poll_alter_partition(5_002) is None
    assert leader.poll_alter_partition(5_001 + ctx.config.alter_partition_retry_backoff_ms) == req


# ---- serving fetches -------------------------------------------------------------------


def test_kip320_a_fetch_with_an_older_leader_epoch_is_fenced(ctx: Ctx) -> None:
    ctx.apply(state(1, 3, 2))
    result = ctx.parts[1].handle_fetch(FetchPartition(0, 2, replica_id=2), 0)
    assert result.error == ErrorCode.fenced_leader_epoch


def test_kip320_a_fetch_with_a_newer_leader_epoch_is_unknown_leader_epoch(ctx: Ctx) -> None:
    result = ctx.parts[1].handle_fetch(FetchPartition(0, 2, replica_id=2), 0)
    assert result.error == ErrorCode.unknown_leader_epoch


def test_fetch_from_a_follower_replica_is_not_leader_or_follower(ctx: Ctx) -> None:
    result = ctx.parts[2].handle_fetch(FetchPartition(0, 1), 0)
    assert result.error == ErrorCode.not_leader_or_follower


def test_kip392_a_follower_serves_a_consumer_below_its_own_high_watermark(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    ctx.replicate(2, 3)
    ctx.produce(1, b"b")
    ctx.fetch_once(2)  # follower 2 has b, but its HW (from the leader) is 1
    follower = ctx.parts[2]
    assert follower.log.log_end_offset == 2 and follower.high_watermark == 1
    result = follower.handle_fetch(FetchPartition(0, 1, from_any_replica=True), 0)
    assert result.error == ErrorCode.none
    assert [r.value for r in decode_records(result.records)] == [b"a"]
    assert (result.high_watermark, result.leader_id, result.leader_epoch) == (1, 1, 1)
    # Long poll: nothing readable at its HW, then the HW moves.
    at_hw = FetchPartition(1, 1, from_any_replica=True)
    assert follower.delayed_fetch_bytes(at_hw) == 0
    ctx.replicate(2, 3)
    readable = follower.delayed_fetch_bytes(at_hw)
    assert readable is not None and readable > 0
    # Epoch and range checks as a leader's.
    assert follower.handle_fetch(FetchPartition(0, 0, from_any_replica=True), 0).error == \
        ErrorCode.fenced_leader_epoch
    assert follower.handle_fetch(FetchPartition(0, 2, from_any_replica=True), 0).error == \
        ErrorCode.unknown_leader_epoch
    assert follower.handle_fetch(FetchPartition(9, 1, from_any_replica=True), 0).error == \
        ErrorCode.offset_out_of_range
    assert follower.delayed_fetch_bytes(FetchPartition(9, 1, from_any_replica=True)) is None


def test_kip392_the_rack_aware_choice_of_a_read_replica(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2, 3)
    leader = ctx.parts[1]
    racks = {1: "r1", 2: "r2", 3: "r2"}
    assert leader.preferred_read_replica(0, "r1", racks.get, 0) is None  # the leader's rack
    assert leader.preferred_read_replica(0, "r9", racks.get, 0) is None  # no replica there
    assert leader.preferred_read_replica(0, "", racks.get, 0) is None
    assert leader.preferred_read_replica(0, "r2", racks.get, 0) in (2, 3)
    # The most caught up: 3 fetches the next record, 2 does not.
    ctx.produce(1, b"c")
    ctx.fetch_once(3)
    ctx.fetch_once(3)
    assert leader.preferred_read_replica(0, "r2", racks.get, 0) == 3
    # Not beyond what a replica has, and only in-sync replicas.
    assert leader.preferred_read_replica(3, "r2", racks.get, 0) == 3
    assert leader.preferred_read_replica(4, "r2", racks.get, 0) is None
    assert leader.preferred_read_replica(0, "r2", {1: "r1", 2: "r2"}.get, 0) == 2
    ctx.apply(state(1, 1, 2, isr=(1, 3)))
    assert leader.preferred_read_replica(0, "r2", {1: "r1", 2: "r2"}.get, 0) is None


def test_kip320_leader_answers_diverging_epoch_and_does_not_count_the_fetch(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.apply(state(1, 3, 2))
    ctx.produce(1, b"c")
    # Broker 2 claims epoch 2 up to offset 4: the leader never had epoch 2.
    result = ctx.parts[1].handle_fetch(
        FetchPartition(4, 3, last_fetched_epoch=2, replica_id=2, replica_epoch=102), 0)
    assert result.error == ErrorCode.none and result.records == b""
    assert result.diverging_epoch == EpochEndOffset(1, 2)
    state2 = ctx.parts[1].follower_fetch_state(2)
    assert state2 is not None and state2[0] == -1  # LEO still unknown


def test_consumers_read_only_below_the_high_watermark(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    ctx.replicate(2, 3)
    ctx.produce(1, b"b")
    result = ctx.parts[1].handle_fetch(FetchPartition(0, 1), 0)
    assert [r.value for r in decode_records(result.records)] == [b"a"]
    assert ctx.parts[1].handle_fetch(FetchPartition(1, 1), 0).records == b""
    assert result.high_watermark == 1


def test_a_fetch_outside_log_start_and_leo_is_offset_out_of_range(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    assert ctx.parts[1].handle_fetch(FetchPartition(5, 1), 0).error == ErrorCode.offset_out_of_range


def test_delayed_fetch_bytes_counts_readable_bytes_and_asks_to_answer_on_change(ctx: Ctx) -> None:
    leader = ctx.parts[1]
    follower_req = FetchPartition(0, 1, replica_id=2)
    assert leader.delayed_fetch_bytes(follower_req) == 0
    ctx.produce(1, b"a")
    readable = leader.delayed_fetch_bytes(follower_req)
    assert readable is not None and readable > 0
    assert leader.delayed_fetch_bytes(FetchPartition(0, 1)) == 0  # consumer: HW is 0
    ctx.apply(state(2, 2, 2))
    assert leader.delayed_fetch_bytes(follower_req) is None


# ---- follower side -------------------------------------------------------------------


def test_follower_fetch_carries_leo_last_fetched_epoch_and_leader_epoch(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    ctx.replicate(2)
    request = ctx.parts[2].fetch_request(0)
    assert request is not None
    assert (request.fetch_offset, request.last_fetched_epoch, request.current_leader_epoch,
            request.replica_id, request.replica_epoch) == (1, 1, 1, 2, 102)
    assert ctx.parts[1].fetch_request(0) is None  # leaders do not fetch


def test_follower_takes_the_hw_as_min_of_leader_hw_and_own_leo(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2, 3)
    assert ctx.parts[2].high_watermark == 2
    fake = FetchPartitionResult(ErrorCode.none, high_watermark=50, log_end_offset=50)
    request = ctx.parts[2].fetch_request(0)
    assert request is not None
    ctx.parts[2].handle_fetch_response(request, fake, 0)
    assert ctx.parts[2].high_watermark == 2


def test_kip320_follower_truncates_to_the_leader_end_offset_for_its_last_fetched_epoch(
    ctx: Ctx,
) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2, 3)
    # Broker 1 writes two more records in epoch 1 that only it has, then loses leadership.
    ctx.produce(1, b"x", b"y")
    ctx.apply(state(2, 2, 2))
    ctx.produce(2, b"c")
    result, outcome = ctx.fetch_once(1)
    assert result.diverging_epoch == EpochEndOffset(1, 2)
    assert outcome is FollowerFetchOutcome.TRUNCATED
    assert ctx.parts[1].log_end_offset == 2
    ctx.replicate(1, 3)
    assert ctx.values(1) == ctx.values(2) == [b"a", b"b", b"c"]


def test_kip279_a_follower_lacking_the_leader_epoch_truncates_to_its_own_epoch_end_first() -> None:
    c = Ctx()
    c.apply(state(1, 1, 1))
    c.produce(1, b"a")
    c.replicate(2, 3)
    # Fast leader changes: 2 leads epoch 2 and writes one record only 3 gets,
    # then 3 leads epoch 3 and writes; 1 (last epoch 1) never saw epoch 2.
    c.apply(state(2, 2, 2))
    c.produce(2, b"e2")
    c.replicate(3)
    c.apply(state(3, 3, 3))
    c.produce(3, b"e3")
    # Broker 2 has epoch 2 at offset 1; broker 3 has it too, so 2 keeps it.
    c.replicate(2, 1)
    assert c.values(1) == c.values(2) == c.values(3) == [b"a", b"e2", b"e3"]


def test_kip279_divergence_across_two_epochs_converges_in_steps() -> None:
    c = Ctx()
    c.apply(state(1, 1, 1))
    c.produce(1, b"a")
    c.replicate(2, 3)
    c.apply(state(1, 2, 2))
    c.produce(1, b"only-on-1-epoch-2")
    c.apply(state(1, 3, 3))
    c.produce(1, b"only-on-1-epoch-3")
    c.apply(state(2, 4, 4))  # broker 2 was in the ISR with only offset 0
    c.produce(2, b"b")
    outcomes = []
    for _ in range(4):
        outcomes.append(c.fetch_once(1)[1])
    assert FollowerFetchOutcome.TRUNCATED in outcomes
    assert c.values(1) == c.values(2) == [b"a", b"b"]


def test_fenced_leader_epoch_stops_fetching_until_newer_metadata(ctx: Ctx) -> None:
    f = ctx.parts[2]
    request = f.fetch_request(0)
    assert request is not None
    outcome = f.handle_fetch_response(request, FetchPartitionResult(ErrorCode.fenced_leader_epoch), 0)
    assert outcome is FollowerFetchOutcome.WAIT_FOR_METADATA
    assert f.fetch_request(10_000) is None
    f.become_follower(state(3, 2, 2), 10_000)
    assert f.fetch_request(10_000) is not None


@pytest.mark.parametrize("error", [ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower])
def test_a_leader_behind_on_metadata_makes_the_follower_back_off_and_retry(
    ctx: Ctx, error: ErrorCode
) -> None:
    f = ctx.parts[2]
    request = f.fetch_request(0)
    assert request is not None
    assert f.handle_fetch_response(request, FetchPartitionResult(error), 0) is (
        FollowerFetchOutcome.RETRY_LATER)
    assert f.fetch_request(1) is None
    assert f.fetch_request(ctx.config.replica_fetch_backoff_ms) is not None


def test_a_response_to_a_request_from_another_epoch_or_offset_is_dropped(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    f = ctx.parts[2]
    request = f.fetch_request(0)
    assert request is not None
    result = ctx.parts[1].handle_fetch(request, 0)
    f.become_follower(state(3, 2, 2), 0)
    assert f.handle_fetch_response(request, result, 0) is FollowerFetchOutcome.STALE
    assert f.log_end_offset == 0


def test_a_follower_restarted_with_an_epoch_entry_but_no_batch_for_it_still_catches_up() -> None:
    """A leader writes its epoch to the checkpoint (synced) before the batch
    (not synced); a crash leaves the entry at the log end. Kafka's follower
    drops it when it truncates at the leader's answer; ours must too, or
    appending the new leader's older-epoch batches fails forever."""
    c = Ctx()
    c.apply(state(1, 1, 1))
    c.produce(1, b"a")
    c.parts[1].log.flush()
    c.produce(1, b"a2")
    c.replicate(2, 3)
    fs = c.parts[1].log._fs
    assert isinstance(fs, FakeFileSystem)

    def restart_broker_1() -> Log:
        fs.crash()
        log = Log.open("/d1", c.log_config, fs=fs, clock=c.clock)
        c.parts[1] = Partition(TOPIC, 0, local_id=1, log=log, config=c.config, broker_epoch=201)
        return log

    restart_broker_1()  # loses "a2"
    c.parts[1].become_leader(state(1, 2, 2), 0)
    c.produce(1, b"lost")  # epoch 2's entry is synced, its batch is not
    log = restart_broker_1()
    assert log.log_end_offset == 1 and log.latest_epoch == 2
    c.parts[1].become_follower(state(2, 3, 3), 0)
    c.parts[2].become_leader(state(2, 3, 3), 0)
    assert c.parts[1].last_fetched_epoch == 1
    c.replicate(1)
    assert c.values(1) == c.values(2) == [b"a", b"a2"]


def test_a_full_disk_when_dropping_the_stale_epoch_entry_backs_off_only_that_partition() -> None:
    """The same stale entry, but the disk is full when the follower drops it
    before its fetch: the checkpoint cannot be rewritten. The partition backs
    off (no exception: one raised here stopped the whole fetcher of its
    leader, every partition, found by a disk-full txn chaos soak). Once the
    disk has room it fetches and catches up."""
    c = Ctx()
    c.apply(state(1, 1, 1))
    c.produce(1, b"a")
    c.parts[1].log.flush()
    c.replicate(2, 3)
    fs = c.parts[1].log._fs
    assert isinstance(fs, FakeFileSystem)
    c.parts[1].become_leader(state(1, 2, 2), 0)
    c.produce(1, b"lost")  # epoch 2's entry is synced, its batch is not
    fs.crash()
    c.parts[1] = Partition(TOPIC, 0, local_id=1, log=Log.open("/d1", c.log_config, fs=fs,
                                                              clock=c.clock),
                           config=c.config, broker_epoch=201)
    c.parts[1].become_follower(state(2, 3, 3), 0)
    c.parts[2].become_leader(state(2, 3, 3), 0)
    c.produce(2, b"b")
    fs.full = True
    assert c.parts[1].fetch_request(0) is None  # backing off, nothing raised
    assert c.parts[1].fetch_request(0) is None
    fs.full = False
    c.now_ms = c.config.replica_fetch_backoff_ms
    request = c.parts[1].fetch_request(c.now_ms)
    assert request is not None and request.last_fetched_epoch == 1
    c.replicate(1)
    assert c.values(1) == c.values(2) == [b"a", b"b"]


def test_a_full_disk_during_a_divergence_truncation_retries_with_the_state_in_step() -> None:
    """Truncating on a DivergingEpoch rewrites the epoch checkpoint; with the
    disk full that write fails after the log was cut. The answer is
    RETRY_LATER (no exception up to the fetcher), the producer state follows
    the log as it now is, and the partition catches up once there is room."""
    c = Ctx()
    c.apply(state(1, 1, 1))
    c.produce(1, b"a")
    c.replicate(2, 3)
    c.apply(state(1, 2, 2))
    c.produce(1, b"x", acks=Acks.LEADER)  # epoch 2, never replicated
    c.apply(state(2, 3, 3))
    c.produce(2, b"b")
    fs = c.parts[1].log._fs
    assert isinstance(fs, FakeFileSystem)
    fs.full = True
    result, outcome = c.fetch_once(1)
    assert result.diverging_epoch is not None
    assert outcome is FollowerFetchOutcome.RETRY_LATER
    f = c.parts[1]
    f.txn.check_in_step(f.log)
    assert f.log.log_start_offset <= f.high_watermark <= f.log_end_offset
    fs.full = False
    c.now_ms = c.config.replica_fetch_backoff_ms
    c.replicate(1)
    assert c.values(1) == c.values(2) == [b"a", b"b"]
    f.txn.check_in_step(f.log)


def test_a_follower_ahead_of_its_leader_with_no_epoch_info_truncates_on_out_of_range(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2)
    f = ctx.parts[2]
    request = f.fetch_request(0)
    assert request is not None
    result = FetchPartitionResult(ErrorCode.offset_out_of_range, high_watermark=1,
                                  log_start_offset=0, log_end_offset=1)
    assert f.handle_fetch_response(request, result, 0) is FollowerFetchOutcome.TRUNCATED
    assert f.log_end_offset <= 1


# ---- a disk that fails ---------------------------------------------------------------


def test_a_failed_append_answers_kafka_storage_error_and_appends_nothing(ctx: Ctx) -> None:
    """Disk full on the leader: the produce gets KAFKA_STORAGE_ERROR (Kafka's
    answer for a log it cannot write), the log and producer state are as
    before, and the same produce succeeds once the disk is back. A follower
    whose disk fails keeps its log and retries the fetch later."""
    ctx.produce(1, b"a")
    leader = ctx.parts[1]
    ctx.disks[1].full = True
    result = leader.append_records(batch(b"b"), Acks.ALL, ctx.now_ms)
    assert result.error == ErrorCode.kafka_storage_error
    assert leader.log_end_offset == 1
    ctx.disks[1].full = False
    assert ctx.produce(1, b"b") == 1

    follower = ctx.parts[2]
    ctx.disks[2].full = True
    _, outcome = ctx.fetch_once(2)
    assert outcome is FollowerFetchOutcome.RETRY_LATER
    assert follower.log_end_offset == 0
    ctx.disks[2].full = False
    ctx.now_ms += ctx.config.replica_fetch_backoff_ms
    ctx.fetch_once(2)
    assert follower.log_end_offset == 2


# ---- idle follower fetches (the stored answer) --------------------------------------


def _caught_up(ctx: Ctx) -> None:
    ctx.produce(1, b"a", b"b")
    ctx.replicate(2, 3)
    assert ctx.parts[1].high_watermark == ctx.parts[1].log_end_offset == 2


def test_a_follower_builds_the_same_request_object_until_a_field_changes(ctx: Ctx) -> None:
    _caught_up(ctx)
    follower = ctx.parts[2]
    first = follower.fetch_request(ctx.now_ms)
    assert first is not None and first.fetch_offset == 2
    assert follower.fetch_request(ctx.now_ms) is first
    ctx.produce(1, b"c")
    ctx.fetch_once(2)  # appends: the log end moved
    second = follower.fetch_request(ctx.now_ms)
    assert second is not None and second is not first and second.fetch_offset == 3


def test_an_idle_follower_fetch_gets_the_stored_answer_and_stays_caught_up(ctx: Ctx) -> None:
    _caught_up(ctx)
    leader = ctx.parts[1]
    requests = {r: ctx.parts[r].fetch_request(0) for r in (2, 3)}
    answers = {r: leader.handle_fetch(req, 0) for r, req in requests.items() if req}
    # Well past replica.lag.time.max.ms (1,000), fetching the same requests.
    for t in range(300, 5_000, 300):
        for r, req in requests.items():
            assert req is not None
            assert leader.handle_fetch(req, t) is answers[r]
        assert not leader.maybe_shrink_isr(t)
    assert leader.isr == REPLICAS
    assert answers[2].error == ErrorCode.none and answers[2].records == b""
    assert answers[2].high_watermark == 2
    # The stored answers still recorded each fetch's time: right after an
    # append, a follower that fetched 300 ms ago is within the lag bound.
    ctx.now_ms = 5_000
    ctx.produce(1, b"c")
    assert not leader.maybe_shrink_isr(5_200)
    assert leader.isr == REPLICAS


def test_an_append_ends_the_stored_idle_answer(ctx: Ctx) -> None:
    _caught_up(ctx)
    leader = ctx.parts[1]
    request = ctx.parts[2].fetch_request(0)
    assert request is not None
    idle = leader.handle_fetch(request, 0)
    assert leader.handle_fetch(request, 0) is idle
    assert leader.delayed_fetch_bytes(request) == 0
    ctx.produce(1, b"c")
    readable = leader.delayed_fetch_bytes(request)
    assert readable is not None and readable > 0
    answer = leader.handle_fetch(request, 10)
    assert answer is not idle and [v for v in _values(answer.records)] == [b"c"]


def test_a_new_leader_epoch_ends_the_stored_idle_answer(ctx: Ctx) -> None:
    _caught_up(ctx)
    leader = ctx.parts[1]
    request = ctx.parts[2].fetch_request(0)
    assert request is not None
    assert leader.handle_fetch(request, 0) is leader.handle_fetch(request, 0)
    assert leader.become_leader(state(1, 2, 2), 0)  # re-elected in a newer epoch
    assert leader.handle_fetch(request, 0).error == ErrorCode.fenced_leader_epoch
    assert leader.delayed_fetch_bytes(request) is None


def test_no_stored_answer_while_the_high_watermark_waits_for_a_follower(ctx: Ctx) -> None:
    ctx.produce(1, b"a")
    ctx.replicate(2)  # broker 3 has not fetched: the HW waits for it
    leader = ctx.parts[1]
    assert leader.high_watermark < leader.log_end_offset
    request = ctx.parts[2].fetch_request(0)
    assert request is not None
    assert leader.handle_fetch(request, 0) is not leader.handle_fetch(request, 0)
    ctx.replicate(3)  # broker 3 catches up: the HW moves to the LEO
    assert leader.high_watermark == leader.log_end_offset
    assert leader.handle_fetch(request, 0).high_watermark == leader.log_end_offset


def _values(records: bytes) -> list[bytes | None]:
    return [rec.value for header, pos in iter_batches(records)
            for rec in decode_records(records, pos=pos)]


def test_a_session_refreshes_an_idle_partition_instead_of_serving_it(ctx: Ctx) -> None:
    _caught_up(ctx)
    leader = ctx.parts[1]
    requests = {r: ctx.parts[r].fetch_request(0) for r in (2, 3)}
    tokens = {}
    for r, req in requests.items():
        assert req is not None
        answer = leader.handle_fetch(req, 0)
        assert leader.idle_fetch(req, replace(answer)) is None  # not the stored answer
        tokens[r] = leader.idle_fetch(req, answer)
        assert tokens[r] is not None
    # Refreshing records each fetch like serving it: no shrink, and right
    # after an append a follower that "fetched" 300 ms ago is within the lag.
    for t in range(300, 5_000, 300):
        assert all(token is not None and token.refresh(t) for token in tokens.values())
        assert not leader.maybe_shrink_isr(t)
    ctx.now_ms = 5_000
    ctx.produce(1, b"c")
    assert not leader.maybe_shrink_isr(5_200)
    # The append ends the idle state: the session must serve the partition.
    assert not any(token is not None and token.refresh(5_300) for token in tokens.values())
    req = requests[2]
    assert req is not None
    assert _values(leader.handle_fetch(req, 5_300).records) == [b"c"]


class _ParkingSession:
    """A fetch session that parked the partition (`IdleParking`): its fetches
    skip it, so nothing refreshes the stored idle answers."""

    def __init__(self) -> None:
        self.last_fetch_ms = 0
        self.parked = True

    def parked_fetch_ms(self, idle: IdleFollowerFetch) -> int | None:
        return self.last_fetch_ms if self.parked else None


def _parked(
    ctx: Ctx, session: _ParkingSession, *followers: int
) -> dict[int, tuple[FetchPartition, IdleFollowerFetch]]:
    """Each follower's idle fetch at time 0, its stored answer parked by ``session``."""
    _caught_up(ctx)
    leader = ctx.parts[1]
    parked = {}
    for r in followers:
        req = ctx.parts[r].fetch_request(0)
        assert req is not None
        token = leader.idle_fetch(req, leader.handle_fetch(req, 0))
        assert token is not None
        token.parked_by = session
        parked[r] = (req, token)
    return parked


def test_the_isr_check_records_the_fetches_that_skipped_a_parked_partition(ctx: Ctx) -> None:
    session = _ParkingSession()
    _parked(ctx, session, 2, 3)
    leader = ctx.parts[1]
    # The session keeps fetching well past replica.lag.time.max.ms (1,000)
    # without refreshing: the ISR check counts its fetches.
    for t in range(300, 5_000, 300):
        session.last_fetch_ms = t
        assert not leader.maybe_shrink_isr(t + 200)
    assert leader.follower_fetch_state(2) == (leader.log_end_offset, 4_800, True)
    # The session stops fetching (its follower is gone); records arrive at
    # 5,000: the followers lag, caught up last at 4,800.
    ctx.now_ms = 5_000
    ctx.produce(1, b"e")
    assert not leader.maybe_shrink_isr(5_800)
    assert leader.maybe_shrink_isr(5_801)


def test_an_unparked_or_moved_partition_is_not_recorded_for_the_session(ctx: Ctx) -> None:
    session = _ParkingSession()
    _, token = _parked(ctx, session, 2)[2]
    leader = ctx.parts[1]
    session.last_fetch_ms = 500
    session.parked = False  # the session serves it again: its own fetches count
    token.settle()
    assert token.parked_by is None
    assert leader.follower_fetch_state(2) == (leader.log_end_offset, 0, True)
    token.parked_by = session
    session.parked = True
    ctx.now_ms = 600
    ctx.produce(1, b"d")  # the answer no longer stands: the follower is behind
    session.last_fetch_ms = 700
    token.settle()
    state2 = leader.follower_fetch_state(2)
    assert state2 is not None and state2[1] == 0


def test_unparking_after_a_change_records_the_sessions_last_fetch_before_it(ctx: Ctx) -> None:
    tokens = _parked(ctx, _ParkingSession(), 2, 3)
    leader = ctx.parts[1]
    ctx.now_ms = 5_000
    ctx.produce(1, b"f")  # the change that unparks them; the session last fetched at 4,900
    for _, token in tokens.values():
        token.unparked(4_900)
        assert token.parked_by is None
    state2 = leader.follower_fetch_state(2)
    assert state2 is not None and state2[1] == 4_900
    assert not leader.maybe_shrink_isr(5_900)
    # A stored answer that was replaced (the follower fetched anew) records nothing.
    req, token = tokens[2]
    assert leader.idle_fetch(req, leader.handle_fetch(req, 5_950)) is None
    token.unparked(6_000)
    state2 = leader.follower_fetch_state(2)
    assert state2 is not None and state2[1] == 4_900
