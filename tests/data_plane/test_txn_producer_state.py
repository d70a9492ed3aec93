"""`data_plane.txn.producer_state`: KIP-98 dedupe, KIP-360 epochs, transactions,
rebuild, snapshots, truncation, expiry; plus a Hypothesis model of resends."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.txn.markers import EndTxnMarker
from data_plane.txn.producer_state import (
    ALL_FORGOTTEN,
    INT32_MAX,
    BatchMetadata,
    ProducerStateError,
    ProducerStateManager,
    SnapshotError,
    batch_last_sequence,
    decode_snapshot,
    in_sequence,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchHeader

PID = 1000


def hdr(pid: int = PID, epoch: int = 0, seq: int = 0, n: int = 1, *, base: int = 0,
        txn: bool = False, control: bool = False, ts: int = 0) -> BatchHeader:
    attributes = (0x10 if txn else 0) | (0x20 if control else 0)
    return BatchHeader(base, 49 + 10 * n, 0, 2, 0, attributes, n - 1, ts, ts, pid, epoch,
                       seq, n)


class Ctx:
    """A leader log of headers: validates, appends and applies like the partition hook."""

    def __init__(self) -> None:
        self.psm = ProducerStateManager()
        self.log: list[tuple[BatchHeader, EndTxnMarker | None]] = []
        self.leo = 0

    def produce(self, h: BatchHeader, now_ms: int = 0) -> tuple[ErrorCode, int, int]:
        verdict = self.psm.validate_append(h, now_ms)
        if verdict.is_duplicate:
            return verdict.error, verdict.first_offset, verdict.last_offset
        if not verdict.should_append:
            return verdict.error, -1, -1
        return (ErrorCode.none, *self._append(h, None))

    def marker(self, pid: int, epoch: int, commit: bool, coord: int = 0, ts: int = 0
               ) -> ErrorCode:
        verdict = self.psm.validate_marker(pid, epoch, coord)
        if not verdict.should_append:
            return verdict.error
        self._append(hdr(pid, epoch, -1, txn=True, control=True, ts=ts),
                     EndTxnMarker(commit, coord))
        return ErrorCode.none

    def _append(self, h: BatchHeader, marker: EndTxnMarker | None) -> tuple[int, int]:
        first = self.leo
        placed = hdr(h.producer_id, h.producer_epoch, h.base_sequence, h.records_count,
                     base=first, txn=h.is_transactional, control=h.is_control,
                     ts=h.max_timestamp)
        self.leo = placed.last_offset + 1
        self.log.append((placed, marker))
        self.psm.update(placed, first, placed.last_offset, marker)
        return first, placed.last_offset


# ---- sequences -------------------------------------------------------------------


def test_kip98_in_order_batches_are_accepted_and_retained_up_to_five() -> None:
    c = Ctx()
    for i in range(7):
        assert c.produce(hdr(seq=2 * i, n=2))[0] == ErrorCode.none
    entry = c.psm.entry(PID)
    assert entry is not None
    assert [b.first_seq for b in entry.batches] == [4, 6, 8, 10, 12]
    assert entry.batches[-1] == BatchMetadata(12, 13, 12, 13)


def test_kip98_duplicate_returns_the_original_offsets_and_appends_nothing() -> None:
    c = Ctx()
    c.produce(hdr(pid=7, seq=0, n=3))
    c.produce(hdr(seq=0, n=2))
    c.produce(hdr(seq=2, n=2))
    leo = c.leo
    assert c.produce(hdr(seq=0, n=2)) == (ErrorCode.duplicate_sequence_number, 3, 4)
    assert c.produce(hdr(seq=2, n=2)) == (ErrorCode.duplicate_sequence_number, 5, 6)
    assert c.leo == leo


def test_kip98_resend_older_than_the_retained_five_is_out_of_order() -> None:
    c = Ctx()
    for i in range(6):
        c.produce(hdr(seq=i))
    assert c.produce(hdr(seq=0))[0] == ErrorCode.out_of_order_sequence_number
    assert c.produce(hdr(seq=1))[0] == ErrorCode.duplicate_sequence_number


def test_kip98_gap_in_sequence_is_out_of_order() -> None:
    c = Ctx()
    c.produce(hdr(seq=0, n=2))
    assert c.produce(hdr(seq=3))[0] == ErrorCode.out_of_order_sequence_number
    # a batch overlapping a retained one without matching it exactly
    assert c.produce(hdr(seq=1))[0] == ErrorCode.out_of_order_sequence_number


def test_new_producer_must_start_at_sequence_zero() -> None:
    c = Ctx()
    assert c.psm.max_forgotten_producer_id == -1
    error, _, _ = c.produce(hdr(seq=4242))
    assert error == ErrorCode.out_of_order_sequence_number
    assert c.log == []
    assert c.produce(hdr(seq=0))[0] == ErrorCode.none
    assert c.produce(hdr(seq=1))[0] == ErrorCode.none


def test_batches_reordered_across_a_leader_change_land_in_sequence_order() -> None:
    """The lost-write race: seq 0-49 went to a stale leader, and seq 50-99
    reaches the new leader first. Accepting 50-99 there would make the resent
    0-49 neither next nor a retained duplicate (a lost write)."""
    c = Ctx()
    assert c.produce(hdr(seq=50, n=50))[0] == ErrorCode.out_of_order_sequence_number
    assert c.produce(hdr(seq=0, n=50)) == (ErrorCode.none, 0, 49)
    assert c.produce(hdr(seq=50, n=50)) == (ErrorCode.none, 50, 99)
    assert [h.base_sequence for h, _ in c.log] == [0, 50]


def test_kip360_forgotten_producer_is_accepted_at_any_sequence_after_expiry() -> None:
    psm = ProducerStateManager(producer_id_expiration_ms=1000)
    psm.update(hdr(pid=1, seq=0, ts=100), 0, 0)
    assert psm.remove_expired_producers(1100) == [1]
    assert psm.max_forgotten_producer_id == 1
    assert psm.validate_append(hdr(pid=1, seq=4242), 1100).should_append
    # it cannot tell a lower id it never saw from a forgotten one...
    assert psm.validate_append(hdr(pid=0, seq=7), 1100).should_append
    # ...but ids come from increasing blocks: a higher one is new
    assert psm.validate_append(hdr(pid=2, seq=7), 1100).error == \
        ErrorCode.out_of_order_sequence_number


def test_kip360_producer_removed_by_retention_is_accepted_at_any_sequence() -> None:
    c = _busy_log()
    assert c.psm.validate_append(hdr(pid=1, seq=99), 0).error == \
        ErrorCode.out_of_order_sequence_number
    c.psm.truncate_head(5)
    assert c.psm.max_forgotten_producer_id == 1
    assert c.psm.validate_append(hdr(pid=1, seq=99), 0).should_append
    assert c.psm.validate_append(hdr(pid=4, seq=99), 0).error == \
        ErrorCode.out_of_order_sequence_number


def test_kip360_truncate_head_that_removes_no_producer_forgets_nothing() -> None:
    c = _busy_log()
    c.psm.truncate_head(1)
    assert c.psm.producer_ids == frozenset({1, 2, 3})
    assert c.psm.max_forgotten_producer_id == -1


def test_state_not_built_from_offset_zero_may_have_forgotten_any_producer() -> None:
    reset = ProducerStateManager()
    reset.reset(40)
    assert reset.max_forgotten_producer_id == ALL_FORGOTTEN
    assert reset.validate_append(hdr(pid=9, seq=3), 0).should_append
    gap = ProducerStateManager()
    gap.update(hdr(pid=1, seq=0), 10, 10)  # batches 0..9 never applied
    assert gap.max_forgotten_producer_id == ALL_FORGOTTEN
    assert gap.validate_append(hdr(pid=9, seq=3), 0).should_append
    from_zero = ProducerStateManager()
    from_zero.reset(0)
    assert from_zero.max_forgotten_producer_id == -1


def test_older_epoch_is_invalid_producer_epoch() -> None:
    c = Ctx()
    c.produce(hdr(epoch=3, seq=0))
    assert c.produce(hdr(epoch=2, seq=1))[0] == ErrorCode.invalid_producer_epoch


def test_kip360_new_epoch_must_start_at_sequence_zero() -> None:
    c = Ctx()
    c.produce(hdr(epoch=0, seq=0))
    assert c.produce(hdr(epoch=1, seq=1))[0] == ErrorCode.out_of_order_sequence_number
    assert c.produce(hdr(epoch=1, seq=0))[0] == ErrorCode.none
    entry = c.psm.entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1
    # a batch of the old epoch with a retained range is no longer a duplicate
    assert c.produce(hdr(epoch=0, seq=0))[0] == ErrorCode.invalid_producer_epoch


def test_sequence_wraps_at_int32_max() -> None:
    assert batch_last_sequence(INT32_MAX - 1, 3) == 1
    assert batch_last_sequence(INT32_MAX, 0) == INT32_MAX
    assert in_sequence(INT32_MAX, 0) and not in_sequence(INT32_MAX, 1)
    c = Ctx()
    assert c.produce(hdr(seq=0, n=INT32_MAX - 1))[0] == ErrorCode.none
    assert c.produce(hdr(seq=INT32_MAX - 1, n=2))[0] == ErrorCode.none
    assert c.produce(hdr(seq=0, n=2))[0] == ErrorCode.none
    assert c.produce(hdr(seq=INT32_MAX - 1, n=2))[0] == ErrorCode.duplicate_sequence_number


def test_multi_batch_request_is_validated_in_order() -> None:
    psm = ProducerStateManager()
    ok = psm.validate_batches([hdr(seq=0, n=2), hdr(seq=2), hdr(pid=5, seq=0)], 0)
    assert ok.should_append
    new_pid_skips = psm.validate_batches([hdr(seq=0, n=2), hdr(pid=5, seq=9)], 0)
    assert new_pid_skips.error == ErrorCode.out_of_order_sequence_number
    bad = psm.validate_batches([hdr(seq=0, n=2), hdr(seq=3)], 0)
    assert bad.error == ErrorCode.out_of_order_sequence_number


def test_non_idempotent_batches_are_not_tracked() -> None:
    c = Ctx()
    assert c.produce(hdr(pid=-1, epoch=-1, seq=-1))[0] == ErrorCode.none
    assert c.psm.producer_ids == frozenset()
    assert c.psm.map_end_offset == 1


def test_idempotent_batch_without_sequence_is_invalid_record() -> None:
    assert ProducerStateManager().validate_append(hdr(seq=-1), 0).error == ErrorCode.invalid_record


def test_update_below_the_map_end_offset_is_a_broken_invariant() -> None:
    c = Ctx()
    c.produce(hdr(seq=0, n=3))
    with pytest.raises(ProducerStateError):
        c.psm.update(hdr(seq=3), 1, 1)


# ---- transactions ----------------------------------------------------------------


def test_kip98_transaction_opens_at_first_batch_and_marker_completes_it() -> None:
    c = Ctx()
    c.produce(hdr(pid=9, seq=0, n=2))
    c.produce(hdr(seq=0, n=2, txn=True))
    c.produce(hdr(seq=2, txn=True))
    assert c.psm.ongoing_transactions() == {PID: 2}
    assert c.psm.first_unstable_offset() == 2
    assert c.marker(PID, 0, commit=False, coord=3) == ErrorCode.none
    assert c.psm.ongoing_transactions() == {}
    # not yet replicated: still holds the LSO back
    assert c.psm.first_unstable_offset() == 2
    c.psm.on_high_watermark(6)
    assert c.psm.first_unstable_offset() is None


def test_completed_txn_records_lso_of_next_open_txn() -> None:
    psm = ProducerStateManager()
    psm.update(hdr(pid=1, txn=True), 0, 0)
    psm.update(hdr(pid=2, txn=True), 1, 1)
    done = psm.update(hdr(pid=1, seq=-1, txn=True, control=True), 2, 2, EndTxnMarker(False, 0))
    assert done is not None and (done.first_offset, done.last_offset) == (0, 2)
    assert done.is_aborted and done.last_stable_offset == 1
    done2 = psm.update(hdr(pid=2, seq=-1, txn=True, control=True), 3, 3, EndTxnMarker(True, 0))
    assert done2 is not None and not done2.is_aborted and done2.last_stable_offset == 4


def test_non_transactional_batch_inside_a_transaction_is_invalid_txn_state() -> None:
    c = Ctx()
    c.produce(hdr(seq=0, txn=True))
    assert c.produce(hdr(seq=1))[0] == ErrorCode.invalid_txn_state


def test_marker_from_older_coordinator_epoch_is_fenced() -> None:
    c = Ctx()
    c.produce(hdr(seq=0, txn=True))
    assert c.marker(PID, 0, commit=True, coord=5) == ErrorCode.none
    c.produce(hdr(seq=1, txn=True))
    assert c.marker(PID, 0, commit=True, coord=4) == ErrorCode.transaction_coordinator_fenced


def test_marker_with_older_producer_epoch_is_invalid_producer_epoch() -> None:
    c = Ctx()
    c.produce(hdr(epoch=2, seq=0, txn=True))
    assert c.marker(PID, 1, commit=False) == ErrorCode.invalid_producer_epoch


def test_kip890_marker_with_bumped_epoch_aborts_and_restarts_sequences() -> None:
    c = Ctx()
    c.produce(hdr(epoch=0, seq=0, txn=True))
    assert c.marker(PID, 1, commit=False) == ErrorCode.none
    entry = c.psm.entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and not entry.batches
    assert c.produce(hdr(epoch=1, seq=5, txn=True))[0] == ErrorCode.out_of_order_sequence_number
    assert c.produce(hdr(epoch=1, seq=0, txn=True))[0] == ErrorCode.none
    assert c.produce(hdr(epoch=0, seq=1, txn=True))[0] == ErrorCode.invalid_producer_epoch


# ---- rebuild, snapshots, truncation, expiry --------------------------------------


def _busy_log() -> Ctx:
    c = Ctx()
    c.produce(hdr(pid=1, seq=0, n=3, ts=10))
    c.produce(hdr(pid=2, seq=0, txn=True, ts=11))
    c.produce(hdr(pid=1, seq=3, ts=12))
    c.produce(hdr(pid=3, epoch=4, seq=0, n=2, txn=True, ts=13))
    c.marker(2, 0, commit=False, coord=1, ts=14)
    c.produce(hdr(pid=2, seq=1, txn=True, ts=15))
    c.produce(hdr(pid=-1, epoch=-1, seq=-1, ts=16))
    return c


def test_rebuilding_from_the_log_equals_the_live_state() -> None:
    live = _busy_log()
    rebuilt = ProducerStateManager()
    completed = rebuilt.load_from_batches(live.log)
    assert rebuilt.state_key() == live.psm.state_key()
    assert [t.producer_id for t in completed] == [2]


def test_snapshot_round_trip_and_file_name() -> None:
    live = _busy_log()
    snap = live.psm.take_snapshot()
    assert snap.file_name == "00000000000000000010.snapshot" == snapshot_file_name(10)
    assert parse_snapshot_file_name(snap.file_name) == 10
    assert parse_snapshot_file_name("00000000000000000010.log") is None
    restored = ProducerStateManager()
    restored.load_snapshot(snap.data)
    assert restored.state_key() == live.psm.state_key()
    assert restored.ongoing_transactions() == live.psm.ongoing_transactions()
    assert restored.max_forgotten_producer_id == -1


def test_snapshot_keeps_the_max_forgotten_producer_id() -> None:
    live = _busy_log()
    live.psm.truncate_head(5)
    restored = ProducerStateManager()
    restored.load_snapshot(live.psm.take_snapshot().data)
    assert restored.max_forgotten_producer_id == 1
    assert restored.state_key() == live.psm.state_key()


def test_version_1_snapshot_is_read_as_having_forgotten_producers() -> None:
    live = _busy_log()
    v2 = live.psm.take_snapshot().data
    # v1: the v2 layout without the int64 after the entry count
    body = v2[6:18] + v2[26:]
    v1 = struct.pack(">hI", 1, crc32c(body)) + body
    offset, entries, max_forgotten = decode_snapshot(v1)
    assert offset == 10 and len(entries) == 3 and max_forgotten == ALL_FORGOTTEN
    restored = ProducerStateManager()
    restored.load_snapshot(v1)
    assert restored.state_key()[1] == live.psm.state_key()[1]  # the same entries


def test_snapshot_plus_tail_equals_the_live_state() -> None:
    live = _busy_log()
    mid = Ctx()
    mid.psm.load_from_batches(live.log[:3])
    snap = mid.psm.take_snapshot()
    restored = ProducerStateManager()
    restored.load_snapshot(snap.data)
    restored.load_from_batches(live.log)  # batches below the snapshot are skipped
    assert restored.state_key() == live.psm.state_key()


@pytest.mark.parametrize("damage", ["crc", "version", "truncated", "trailing", "short"])
def test_damaged_snapshot_is_rejected(damage: str) -> None:
    data = bytearray(_busy_log().psm.take_snapshot().data)
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "version":
        data[1] = 9
    elif damage == "truncated":
        del data[-3:]
    elif damage == "trailing":
        data += b"\0"
    else:
        data = data[:4]
    with pytest.raises(SnapshotError):
        decode_snapshot(bytes(data))


def test_truncate_to_drops_later_snapshots_and_rebuilds_from_an_earlier_one() -> None:
    live = _busy_log()
    snaps: dict[int, bytes] = {}
    step = ProducerStateManager()
    for i, batch in enumerate(live.log):
        step.load_from_batches([batch])
        if i in (1, 4):
            snaps[step.map_end_offset] = step.take_snapshot().data
    snaps[0] = b"corrupt"  # skipped in favour of an older one / full replay
    cut = 6  # keep batches with last offset < 6
    kept = [b for b in live.log if b[0].last_offset < cut]
    expected = ProducerStateManager()
    expected.load_from_batches(kept)
    psm = live.psm
    deleted = psm.truncate_to(cut, snaps, lambda start: [b for b in kept
                                                         if b[0].last_offset >= start])
    assert deleted == [snapshot_file_name(o) for o in sorted(snaps) if o > cut]
    assert psm.state_key() == expected.state_key()


def test_truncate_to_without_usable_snapshot_replays_the_whole_log() -> None:
    live = _busy_log()
    psm = ProducerStateManager()
    assert psm.truncate_to(100, {5: b"junk"}, lambda start: live.log) == [snapshot_file_name(5)]
    assert psm.state_key() == live.psm.state_key()


def test_producer_expires_after_inactivity_unless_a_transaction_is_open() -> None:
    psm = ProducerStateManager(producer_id_expiration_ms=1000)
    psm.update(hdr(pid=1, seq=0, ts=100), 0, 0)
    psm.update(hdr(pid=2, seq=0, ts=100, txn=True), 1, 1)
    # an expired producer is treated as unknown even before the sweep runs
    assert psm.validate_append(hdr(pid=1, seq=77), 1100).should_append
    assert psm.validate_append(hdr(pid=1, seq=77), 1099).error == \
        ErrorCode.out_of_order_sequence_number
    assert psm.remove_expired_producers(1099) == []
    assert psm.remove_expired_producers(1100) == [1]
    assert psm.producer_ids == frozenset({2})


def test_truncate_head_forgets_producers_below_the_log_start() -> None:
    c = _busy_log()
    c.psm.truncate_head(5)
    assert c.psm.producer_ids == frozenset({2, 3})
    with pytest.raises(ValueError):
        ProducerStateManager(producer_id_expiration_ms=0)


# ---- property: resends with up to 5 in flight --------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send", "resend", "ack", "leader", "snap"]),
                          st.integers(0, 4)), max_size=80),
       st.integers(5, 25))
def test_kip98_random_resends_with_five_in_flight_never_duplicate_or_gap(
        schedule: list[tuple[str, int]], total: int) -> None:
    """Naive reference: the log must hold sequences 0..k-1 exactly once, in order,
    and each append/duplicate answer must name where that batch really is."""
    c = Ctx()
    snaps: dict[int, bytes] = {}
    next_to_send = 0
    in_flight: list[int] = []  # sequence numbers (1-record batches), oldest first
    where: dict[int, int] = {}  # seq -> offset in the log (reference)
    for action, arg in schedule + [("drain", 0)] * (2 * total + 12):
        if action == "send" and len(in_flight) < 5 and next_to_send < total:
            in_flight.append(next_to_send)
            next_to_send += 1
            seq = in_flight[-1]
        elif action == "resend" and in_flight:
            seq = in_flight[arg % len(in_flight)]
        elif action == "ack" and in_flight and in_flight[0] in where:
            in_flight.pop(0)
            continue
        elif action == "leader":
            # new leader: rebuild from snapshot + tail, or the full log
            c.psm = ProducerStateManager()
            c.psm.truncate_to(c.leo, snaps, lambda s: c.log)
            continue
        elif action == "snap":
            snaps[c.psm.map_end_offset] = c.psm.take_snapshot().data
            continue
        elif action == "drain":
            if in_flight and in_flight[0] in where:
                in_flight.pop(0)
                continue
            if not in_flight and next_to_send < total:
                in_flight.append(next_to_send)
                next_to_send += 1
            if not in_flight:
                continue
            seq = in_flight[0]
        else:
            continue
        error, first, _ = c.produce(hdr(seq=seq))
        if error == ErrorCode.none:
            assert seq not in where
            where[seq] = first
        elif error == ErrorCode.duplicate_sequence_number:
            assert where[seq] == first
        else:
            assert error == ErrorCode.out_of_order_sequence_number
            assert seq not in where and seq - 1 not in where
        sequences = [h.base_sequence for h, _ in c.log]
        assert sequences == list(range(len(sequences)))
    assert len(c.log) == total
