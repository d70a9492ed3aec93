"""Seeded simulation of producer state, transactions and markers on one partition.

One partition leader log (real `raftlog.storage.Log` on `FakeFileSystem`,
small segments so snapshots are taken at rolls), a high watermark that lags
the log end, idempotent producers (<= 5 in flight, resending on timeouts),
transactional producers driven through a `TransactionCoordinator`, markers
delayed in a queue, leader changes (truncate to the HW, rebuild producer state
from snapshot + tail or the full log) and coordinator failovers (replay
``__transaction_state``, resend markers). Invariants, checked after every
event (issue 6 §4):

- no duplicate and no gap from an idempotent producer (per producer id and
  epoch, the log's sequences are 0, 1, 2, ... exactly once), even when a
  resend reaches the leader before an older batch;
- no aborted record below any LSO is ever shown to read_committed (every
  offset a read_committed read showed is checked against the final outcome).

A failure raises `SimulationFailure` naming the seed; the seed replays it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from data_plane.txn.coordinator import TransactionCoordinator, TxnResult
from data_plane.txn.lso import AbortedTxnIndex, last_stable_offset, visible_offsets_read_committed
from data_plane.txn.markers import EndTxnMarker, TxnMarkerRequest, build_marker_batch, scan_batches
from data_plane.txn.producer_state import LoggedBatch, ProducerStateManager
from data_plane.txn.txn_log import TxnLogRecord, partition_for
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder
from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

TOPIC = ("t", 0)


class SimulationFailure(AssertionError):
    def __init__(self, seed: int, message: str) -> None:
        super().__init__(f"seed {seed}: {message}")
        self.seed = seed


@dataclass
class _Ids:
    next_id: int = 1000

    def next_producer_id(self) -> int:
        self.next_id += 1
        return self.next_id


@dataclass
class _Producer:
    pid: int = -1
    epoch: int = 0
    next_seq: int = 0
    in_flight: list[tuple[int, int | None]] = field(default_factory=list)  # (seq, offset)
    tid: str | None = None
    phase: str = "init"  # transactional: init, begin, send, end
    sent_in_txn: int = 0


@dataclass
class SimReport:
    seed: int
    appended_batches: int
    leader_changes: int
    coordinator_failovers: int
    commits: int
    aborts: int
    reordered_resends: int = 0


class TxnSimulation:
    def __init__(self, seed: int, steps: int = 300, *,
                 psm_factory: Callable[[], ProducerStateManager] = ProducerStateManager
                 ) -> None:
        self.seed = seed
        self.psm_factory = psm_factory
        self.rng = random.Random(seed)
        self.steps = steps
        self.fs = FakeFileSystem()
        self.clock = FakeClock(wall_ms=1_700_000_000_000, monotonic_ms=0)
        self.log = Log.open("/p", LogConfig(segment_bytes=700), fs=self.fs, clock=self.clock)
        self.psm = self.psm_factory()
        self.index = AbortedTxnIndex()
        self.snapshots: dict[int, bytes] = {}
        self.hw = 0
        self.leader_epoch = 0
        self.ids = _Ids()
        tid = "sim-txn"
        self.coord_epoch = 0
        self.coordinator = TransactionCoordinator(partition_for(tid), 0, self.ids)
        self.txn_log: list[TxnLogRecord] = []
        self.markers: list[TxnMarkerRequest] = []
        self.producers = [_Producer(pid=1, epoch=0), _Producer(pid=2, epoch=0),
                          _Producer(tid=tid)]
        self.shown: set[int] = set()
        self.report = SimReport(seed, 0, 0, 0, 0, 0)

    # ==== the run ===================================================================

    def run(self) -> SimReport:
        actions = [self._produce] * 6 + [self._txn_step] * 3 + [
            self._advance_hw, self._advance_hw, self._deliver_marker, self._deliver_marker,
            self._leader_change, self._coordinator_failover, self._read_committed]
        for step in range(self.steps):
            self.clock.advance(self.rng.randint(1, 50))
            self.rng.choice(actions)()
            if step % 4 == 0:  # a full log scan: every few events keeps 200 seeds fast
                self._check_idempotence()
        while self.markers:
            self._deliver_marker()
        self._advance_hw(to_end=True)
        self._read_committed()
        self._check_idempotence()
        self._check_aborted_never_shown()
        return self.report

    # ==== events ====================================================================

    def _append(self, data: bytes, marker: EndTxnMarker | None) -> tuple[int, int]:
        segments = len(self.log.segments)
        [(header, _)] = list(scan_batches(data))
        info = self.log.append_as_leader(data, self.leader_epoch)
        done = self.psm.update(header, info.first_offset, info.last_offset, marker)
        if done is not None:
            self.index.append_completed([done])
        if len(self.log.segments) != segments:  # rolled: snapshot (the shell's roll hook)
            snap = self.psm.take_snapshot()
            self.snapshots[snap.offset] = snap.data
        self.report.appended_batches += 1
        return info.first_offset, info.last_offset

    def _send(self, p: _Producer, seq: int, transactional: bool) -> None:
        builder = BatchBuilder(producer_id=p.pid, producer_epoch=p.epoch, base_sequence=seq,
                               is_transactional=transactional)
        builder.append(b"v%d" % seq, timestamp_ms=self.clock.wall_ms())
        data = builder.build()
        [(header, _)] = list(scan_batches(data))
        verdict = self.psm.validate_append(header, self.clock.wall_ms())
        entry = next(i for i, (s, _) in enumerate(p.in_flight) if s == seq)
        if verdict.is_duplicate:
            p.in_flight[entry] = (seq, verdict.first_offset)
        elif verdict.should_append:
            first, _ = self._append(data, None)
            p.in_flight[entry] = (seq, first)
        elif verdict.error not in (ErrorCode.out_of_order_sequence_number,
                                   ErrorCode.invalid_producer_epoch):
            raise SimulationFailure(self.seed, f"unexpected {verdict}")

    def _produce(self) -> None:
        p = self.rng.choice(self.producers[:2])
        self._pump(p, transactional=False)

    def _pump(self, p: _Producer, *, transactional: bool) -> None:
        """Ack what the HW covers; send new or resend the oldest (timeout)."""
        while p.in_flight and p.in_flight[0][1] is not None and p.in_flight[0][1] < self.hw:
            p.in_flight.pop(0)
        lost = any(offset is None for _, offset in p.in_flight)
        # The client sends in sequence order on one connection: after a failure
        # it retries what is unacknowledged before anything new (KIP-98).
        if not lost and len(p.in_flight) < 5 and self.rng.random() < 0.6:
            p.in_flight.append((p.next_seq, None))
            p.next_seq += 1
            self._send(p, p.in_flight[-1][0], transactional)
        elif p.in_flight:
            # A timeout: resend everything in flight, in order (the client does).
            # But a batch may reach the leader before an older one: the older
            # went to a stale leader, and after a metadata refresh the client
            # sent the next one to the new leader (librdkafka does this).
            order = list(p.in_flight)
            if len(order) > 1 and self.rng.random() < 0.3:
                order.append(order.pop(0))
                self.report.reordered_resends += 1
            for seq, _ in order:
                self._send(p, seq, transactional)

    def _txn_step(self) -> None:
        p = self.producers[2]
        assert p.tid is not None
        now = self.clock.wall_ms()
        c = self.coordinator
        if p.phase == "init":
            r = self._coord(c.handle_init_producer_id(p.tid, 60_000, now))
            if r.response.error == ErrorCode.none:
                p.pid, p.epoch, p.next_seq, p.in_flight = (r.response.producer_id,
                                                           r.response.producer_epoch, 0, [])
                p.phase = "begin"
        elif p.phase == "begin":
            r = self._coord(c.handle_add_partitions(p.tid, p.pid, p.epoch, [TOPIC], now))
            if r.response.error == ErrorCode.none:
                p.phase, p.sent_in_txn = "send", 0
            elif r.response.error == ErrorCode.producer_fenced:
                p.phase = "init"
        elif p.phase == "send" and (p.sent_in_txn < 4 or p.in_flight):
            before = p.next_seq
            self._pump(p, transactional=True)
            p.sent_in_txn += p.next_seq - before
        elif p.phase == "send":
            commit = self.rng.random() < 0.5
            r = self._coord(c.handle_end_txn(p.tid, p.pid, p.epoch, commit, now))
            if r.response.error == ErrorCode.none:
                if commit:
                    self.report.commits += 1
                else:
                    self.report.aborts += 1
                p.phase = "begin"
            elif r.response.error == ErrorCode.producer_fenced:
                p.phase = "init"

    def _coord(self, result: TxnResult) -> TxnResult:
        self.coordinator.apply(result)
        self.txn_log.extend(result.records)
        self.markers.extend(result.markers)
        return result

    def _deliver_marker(self) -> None:
        if not self.markers:
            return
        m = self.markers.pop(self.rng.randrange(len(self.markers)))
        verdict = self.psm.validate_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch)
        if verdict.should_append:
            marker = EndTxnMarker(m.commit, m.coordinator_epoch)
            data = build_marker_batch(m.producer_id, m.producer_epoch, marker,
                                      timestamp_ms=self.clock.wall_ms())
            self._append(data, marker)
        elif verdict.error != ErrorCode.transaction_coordinator_fenced:
            raise SimulationFailure(self.seed, f"marker rejected: {verdict}")
        if m.coordinator_epoch == self.coord_epoch:
            done = self.coordinator.handle_marker_written(m.transactional_id,
                                                          (m.topic, m.partition),
                                                          self.clock.wall_ms())
            if done is not None:
                self._coord(done)

    def _advance_hw(self, to_end: bool = False) -> None:
        leo = self.log.log_end_offset
        self.hw = leo if to_end else self.rng.randint(self.hw, leo)
        self.psm.on_high_watermark(self.hw)

    def _leader_change(self) -> None:
        """The new leader has the log up to the HW only; it rebuilds producer
        state from the latest snapshot at or below + the tail (or the log)."""
        self.report.leader_changes += 1
        self.leader_epoch += 1
        self.log.truncate_to(self.hw)
        self.index.truncate_to(self.log.log_end_offset)
        leo = self.log.log_end_offset
        self.psm = self.psm_factory()
        for name in self.psm.truncate_to(leo, dict(self.snapshots), self._batches_from):
            self.snapshots.pop(int(name.split(".")[0]), None)
        if self.rng.random() < 0.3:  # no usable snapshot: rebuild from the whole log
            full = self.psm_factory()
            full.truncate_to(leo, {}, self._batches_from)
            if full.state_key() != self.psm.state_key():
                raise SimulationFailure(self.seed, "snapshot + tail differs from full replay")
            self.psm = full
        self.psm.on_high_watermark(self.hw)
        for p in self.producers:  # appended-but-unacked batches may be gone: resend
            p.in_flight = [(s, None) for s, _ in p.in_flight]

    def _batches_from(self, start: int) -> list[LoggedBatch]:
        out: list[LoggedBatch] = []
        offset = max(start, self.log.log_start_offset)
        while offset < self.log.log_end_offset:
            chunk = self.log.read(offset, 1 << 20).records
            batches = list(scan_batches(chunk))
            out.extend(batches)
            offset = batches[-1][0].last_offset + 1
        return out

    def _coordinator_failover(self) -> None:
        self.report.coordinator_failovers += 1
        self.coord_epoch += 1
        old = self.coordinator
        self.coordinator = TransactionCoordinator(old.partition, self.coord_epoch, self.ids)
        self.markers.extend(self.coordinator.load(enumerate(self.txn_log)))

    def _read_committed(self) -> None:
        lso = last_stable_offset(self.hw, self.psm.first_unstable_offset())
        fetch = self.rng.randint(0, lso)
        batches = [h for h, _ in self._batches_from(fetch) if h.last_offset < lso]
        shown = visible_offsets_read_committed(
            [(h.base_offset, h.last_offset, h.producer_id, h.is_transactional, h.is_control)
             for h in batches if h.last_offset >= fetch],
            self.index.aborted_transactions(fetch, lso))
        self.shown.update(shown)

    # ==== invariants ================================================================

    def _check_idempotence(self) -> None:
        seqs: dict[tuple[int, int], list[int]] = {}
        for h, _ in self._batches_from(0):
            if h.producer_id >= 0 and not h.is_control:
                seqs.setdefault((h.producer_id, h.producer_epoch), []).append(h.base_sequence)
        for key, got in seqs.items():
            if got != list(range(len(got))):
                raise SimulationFailure(self.seed, f"producer {key}: sequences {got}")

    def _check_aborted_never_shown(self) -> None:
        open_txn: dict[int, list[int]] = {}
        aborted: set[int] = set()
        for h, marker in self._batches_from(0):
            if marker is not None:
                offsets = open_txn.pop(h.producer_id, [])
                if not marker.commit:
                    aborted.update(offsets)
            elif h.is_transactional:
                open_txn.setdefault(h.producer_id, []).extend(
                    range(h.base_offset, h.last_offset + 1))
        for offsets in open_txn.values():
            aborted.update(offsets)  # never committed
        bad = sorted(self.shown & aborted)
        if bad:
            raise SimulationFailure(self.seed, f"aborted offsets shown to read_committed: {bad}")


def run_seeds(seeds: range, steps: int = 300) -> list[SimReport]:
    return [TxnSimulation(seed, steps).run() for seed in seeds]
