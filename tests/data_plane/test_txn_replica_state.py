"""`ReplicaTxnState` wired into the `Partition` core, on fake disks: producer
state follows appends, rolls (snapshots + .txnindex), truncation and reopen."""

from __future__ import annotations

from dataclasses import replace

from data_plane.replication.partition import Partition
from data_plane.replication.types import Acks, PartitionState, ReplicationConfig
from data_plane.txn.lso import txn_index_file_name
from data_plane.txn.markers import EndTxnMarker
from data_plane.txn.producer_state import parse_snapshot_file_name
from data_plane.txn.replica_state import ReplicaTxnState
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, BatchHeader, parse_header
from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

REPLICAS = (1, 2, 3)
TS = 1_700_000_000_000


def state(leader: int, epoch: int) -> PartitionState:
    return PartitionState("t", 0, leader=leader, leader_epoch=epoch, partition_epoch=epoch,
                          replicas=REPLICAS, isr=REPLICAS)


def batch(pid: int, seq: int, n: int = 4, *, txn: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=txn)
    for i in range(n):
        b.append(b"value-%d-" % (seq + i) + b"x" * 60, timestamp_ms=TS)
    return b.build()


class Cluster:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.fs = {r: FakeFileSystem() for r in REPLICAS}
        self.config = ReplicationConfig(replica_lag_time_max_ms=10_000, min_insync_replicas=1)
        self.log_config = LogConfig(segment_bytes=1024)
        self.parts = {r: self.open(r) for r in REPLICAS}

    def open(self, r: int) -> Partition:
        log = Log.open(f"/d{r}", self.log_config, fs=self.fs[r], clock=self.clock)
        return Partition("t", 0, local_id=r, log=log, config=self.config,
                         txn_state=ReplicaTxnState(f"/d{r}", self.fs[r]))

    def apply(self, s: PartitionState, replicas: tuple[int, ...] = REPLICAS) -> None:
        for r in replicas:
            p = self.parts[r]
            (p.become_leader if s.leader == r else p.become_follower)(s, 0)

    def replicate(self, *followers: int) -> None:
        for _ in range(50):
            for f in followers:
                p = self.parts[f]
                request = p.fetch_request(0)
                assert request is not None
                result = self.parts[p.leader_id].handle_fetch(request, 0)
                p.handle_fetch_response(request, result, 0)

    def snapshots(self, r: int) -> list[int]:
        names = self.fs[r].list_dir(f"/d{r}")
        return sorted(o for o in map(parse_snapshot_file_name, names) if o is not None)


def test_followers_track_producer_state_and_snapshot_at_every_roll() -> None:
    c = Cluster()
    c.apply(state(1, 1))
    for seq in range(0, 200, 4):
        assert c.parts[1].append_records(batch(7, seq), Acks.LEADER, 0).error == ErrorCode.none
    c.replicate(2, 3)
    leader = c.parts[1]
    assert leader.log_end_offset == 200 and len(leader.log.segments) > 3
    for r in REPLICAS:
        p = c.parts[r]
        p.txn.check_in_step(p.log)
        assert p.txn.producers.state_key() == leader.txn.producers.state_key()
        # One snapshot per roll, each at a segment base.
        bases = [s.base_offset for s in p.log.segments]
        assert c.snapshots(r) == bases[1:]


def test_snapshots_above_a_truncation_point_are_always_deleted() -> None:
    """The rule the txn simulation found: after divergence truncation, no
    snapshot above the new log end survives, and the state equals the new
    leader's (a stale snapshot would resurrect truncated producer state)."""
    c = Cluster()
    c.apply(state(1, 1))
    for seq in range(0, 40, 4):
        c.parts[1].append_records(batch(7, seq), Acks.LEADER, 0)
    c.replicate(2, 3)
    # Replica 1 writes more that never replicates, rolling segments (snapshots above).
    for seq in range(40, 160, 4):
        c.parts[1].append_records(batch(7, seq), Acks.LEADER, 0)
    assert max(c.snapshots(1)) > 40
    # Replica 2 takes over; a different producer writes.
    c.apply(state(2, 2), (2, 3))
    for seq in range(0, 20, 4):
        assert c.parts[2].append_records(batch(9, seq), Acks.LEADER, 0).error == ErrorCode.none
    c.apply(state(2, 2), (1,))
    c.replicate(1, 3)
    p1, p2 = c.parts[1], c.parts[2]
    assert p1.log_end_offset == p2.log_end_offset == 60
    assert all(o <= p1.log_end_offset for o in c.snapshots(1))
    assert p1.txn.producers.state_key() == p2.txn.producers.state_key()
    entry = p1.txn.producers.entry(7)
    assert entry is not None and entry.last_seq == 39  # not 159: the truncated tail is gone
    # Reopen from disk: snapshot + tail give the same state.
    p1.log.close()
    reopened = c.open(1)
    assert reopened.txn.producers.state_key() == p2.txn.producers.state_key()


def test_resend_to_a_new_leader_is_a_duplicate_with_original_offsets() -> None:
    c = Cluster()
    c.apply(state(1, 1))
    results = [c.parts[1].append_records(batch(7, seq), Acks.ALL, 0) for seq in range(0, 24, 4)]
    c.replicate(2, 3)
    c.apply(state(2, 2))
    again = c.parts[2].append_records(batch(7, 20), Acks.ALL, 0)
    assert (again.error, again.base_offset, again.last_offset) == (
        ErrorCode.none, results[-1].base_offset, results[-1].last_offset)
    assert c.parts[2].log_end_offset == 24
    gap = c.parts[2].append_records(batch(7, 40), Acks.ALL, 0)
    assert gap.error == ErrorCode.out_of_order_sequence_number


def test_aborted_index_and_lso_follow_markers_on_every_replica() -> None:
    c = Cluster()
    c.apply(state(1, 1))
    leader = c.parts[1]
    leader.append_records(batch(5, 0, txn=True), Acks.ALL, 0)  # offsets 0..3, open txn
    leader.append_records(batch(6, 0), Acks.ALL, 0)  # 4..7 plain idempotent
    c.replicate(2, 3)
    assert leader.high_watermark == 8
    assert leader.txn.last_stable_offset(leader.high_watermark) == 0
    result = leader.append_txn_marker(5, 0, EndTxnMarker(False, 3), timestamp_ms=TS)
    assert (result.error, result.base_offset) == (ErrorCode.none, 8)
    c.replicate(2, 3)
    for r in REPLICAS:
        p = c.parts[r]
        assert p.txn.last_stable_offset(p.high_watermark) == 9
        aborted = p.txn.aborted_transactions(0, 9)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(5, 0, 8)]
    stale = leader.append_txn_marker(5, 0, EndTxnMarker(True, 2), timestamp_ms=TS)
    assert stale.error == ErrorCode.transaction_coordinator_fenced


def test_reopen_with_the_log_start_inside_a_batch() -> None:
    """DeleteRecords to an offset inside a batch, then a restart without a
    producer-state snapshot (a SIGKILL): the state replays from the log
    start, which lies inside the first batch. That batch used to be refused
    ("applied below map end offset") and the broker exited at start-up,
    again at every restart. Kafka replays the batch: its producer's sequence
    is still the latest."""
    c = Cluster()
    c.apply(state(1, 1))
    assert c.parts[1].append_records(batch(7, 0, n=10), Acks.LEADER, 0).error == ErrorCode.none
    c.replicate(2, 3)
    leader = c.parts[1]
    assert leader.high_watermark == 10 and len(leader.log.segments) == 1
    assert leader.delete_records(6)[:2] == (ErrorCode.none, 6)
    assert leader.log.log_start_offset == 6
    assert c.snapshots(1) == []
    reopened = c.open(1)  # the old instance was never closed: no snapshot at shutdown
    assert reopened.log.log_start_offset == 6
    entry = reopened.txn.producers.entry(7)
    assert entry is not None and entry.last_seq == 9
    reopened.txn.check_in_step(reopened.log)
    # The producer carries on in sequence; a replay of its batch is a duplicate.
    c.apply(state(1, 2), (1,))
    c.parts[1] = reopened
    reopened.become_leader(state(1, 2), 0)
    again = reopened.append_records(batch(7, 0, n=10), Acks.LEADER, 0)
    assert (again.error, again.base_offset) == (ErrorCode.none, 0)
    assert reopened.append_records(batch(7, 10), Acks.LEADER, 0).error == ErrorCode.none


def test_the_lso_never_falls_below_the_log_start() -> None:
    """DeleteRecords may move the log start past an open transaction's first
    offset (it is bounded by the HW, not the LSO). Kafka then reports the
    log start as the LSO; below it a read_committed consumer that seeks to
    the end (ListOffsets latest) would land before the log start."""
    c = Cluster()
    c.apply(state(1, 1))
    leader = c.parts[1]
    assert leader.append_records(batch(7, 0, txn=True), Acks.LEADER, 0).error == ErrorCode.none
    assert leader.append_records(batch(9, 0, n=10), Acks.LEADER, 0).error == ErrorCode.none
    c.replicate(2, 3)
    assert (leader.high_watermark, leader.last_stable_offset) == (14, 0)
    assert leader.delete_records(10)[:2] == (ErrorCode.none, 10)
    assert leader.last_stable_offset == 10


def test_a_full_disk_at_a_roll_raises_nothing_and_no_snapshot_vouches_for_a_missing_index() -> None:
    """The segment rolled by an append that fit, but the disk filled before
    the rolled segment's .txnindex was written. The append stands (no
    exception after the log took it), no snapshot is written while that
    index is missing, the index is written at the next roll once there is
    room, and a reopen still knows the aborted transaction."""
    c = Cluster()
    c.apply(state(1, 1), (1,))
    leader = c.parts[1]
    assert leader.append_records(batch(5, 0, txn=True), Acks.LEADER, 0).error == ErrorCode.none
    assert leader.append_txn_marker(5, 0, EndTxnMarker(False, 3),
                                    timestamp_ms=TS).error == ErrorCode.none
    first_segment = leader.log.segments[0].base_offset
    fs = c.fs[1]

    def roll_with(full: bool) -> None:
        segments = len(leader.log.segments)
        seq = 100 * segments
        while len(leader.log.segments) == segments:
            fs.full = False  # the batch itself fits ...
            leader.txn.note_segment(leader.log)
            result = leader.log.append_as_leader(batch(9, seq), 1)
            fs.full = full  # ... the files written at the roll do not
            leader.txn.apply_appended(leader.log, _placed_of(result.first_offset, 9, seq))
            seq += 4
        fs.full = False

    roll_with(full=True)
    index = f"/d1/{txn_index_file_name(first_segment)}"
    assert not fs.exists(index) and c.snapshots(1) == []
    leader.txn.check_in_step(leader.log)
    roll_with(full=False)
    assert fs.exists(index) and c.snapshots(1) == [leader.log.segments[-1].base_offset]
    leader.log.close()
    reopened = c.open(1)
    aborted = reopened.txn.aborted_transactions(0, reopened.log_end_offset)
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(5, 0)]


def _placed_of(first_offset: int, pid: int, seq: int) -> list[tuple[BatchHeader, None]]:
    header = parse_header(batch(pid, seq))
    return [(replace(header, base_offset=first_offset), None)]
