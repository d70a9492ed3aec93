"""Hypothesis stateful test: a Log over the fake disk against a simple model.

The model is a list of batches (offset range, epoch, exact bytes) plus the log
start offset. Random leader and follower appends, reads, rolls, truncations,
delete-records, retention passes, flushes, clean restarts and crashes (with
and without torn tails) run against both. After every crash the reopened log
must hold exactly the batches below the flushed offset at the crash (plus,
with torn tails, possibly some whole batches after it), and every segment's
indexes must equal the ones a full scan builds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storage_helpers import LOG_DIR, make_batch

from raftlog.records import iter_batches, parse_header, rewrite_base_offset_and_epoch
from raftlog.storage import EpochEntry, LeaderEpochCache, Log, LogConfig, LogSegment
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

CONFIG = LogConfig(
    segment_bytes=700,
    index_interval_bytes=120,
    retention_ms=60_000,
    retention_bytes=-1,
    flush_messages=9,
)


@dataclass(frozen=True)
class ModelBatch:
    base: int
    last: int
    epoch: int
    data: bytes


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs = FakeFileSystem()
        self.fs.make_dirs(LOG_DIR)
        self.clock = FakeClock()
        self.rng = random.Random(0)
        self.log = Log.open(LOG_DIR, CONFIG, fs=self.fs, clock=self.clock)
        self.batches: list[ModelBatch] = []  # everything in the lineage, even below the start
        self.start = 0
        self.end = 0
        self.epoch = 0
        self.tag = 0
        # Mirrors the log's epoch cache operation by operation (the cache's own
        # rules are tested against a naive reference in test_storage_epoch_cache).
        self.epochs = LeaderEpochCache()

    # --- helpers ------------------------------------------------------------

    def _build(self, records: int) -> bytes:
        self.tag += 1
        # Values up to 20 bytes keep 3 batches of 4 records under segment.bytes.
        return make_batch(
            records, value_size=self.tag % 20 + 1, timestamp_ms=self.clock.wall_ms(), tag=self.tag
        )

    def _expected_bytes(self, from_offset: int, to_offset: int) -> bytes:
        return b"".join(
            b.data for b in self.batches if b.last >= from_offset and b.last < to_offset
        )

    def _expected_epochs(self) -> list[EpochEntry]:
        return self.epochs.entries

    def _read_everything(self) -> bytes:
        out = bytearray()
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 10_000).records
            out += data
            offset = list(iter_batches(data))[-1][0].next_offset
        return bytes(out)

    def _reopen(self) -> None:
        self.log = Log.open(LOG_DIR, CONFIG, fs=self.fs, clock=self.clock)

    def _check_indexes_match_a_scan(self) -> None:
        for segment in self.log.segments:
            scanned = LogSegment.open_existing(self.fs, LOG_DIR, segment.base_offset, CONFIG, 0)
            result = scanned.recover()
            assert result.truncated_bytes == 0
            assert scanned.offset_index.entries() == segment.offset_index.entries()
            assert scanned.time_index.entries() == segment.time_index.entries()
            assert scanned.next_offset == segment.next_offset
            assert scanned.max_timestamp == segment.max_timestamp
            scanned.close()

    # --- rules --------------------------------------------------------------

    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), bump=st.booleans())
    def append_as_leader(self, sizes: list[int], bump: bool) -> None:
        self.epoch += bump
        raw = [self._build(n) for n in sizes]
        info = self.log.append_as_leader(b"".join(raw), self.epoch, self.clock.wall_ms())
        if self.epoch > self.epochs.latest_epoch:
            self.epochs.assign(self.epoch, self.end)
        assert info.first_offset == self.end
        for data in raw:
            buf = bytearray(data)
            rewrite_base_offset_and_epoch(buf, 0, self.end, self.epoch)
            last = self.end + parse_header(data).last_offset_delta
            self.batches.append(ModelBatch(self.end, last, self.epoch, bytes(buf)))
            self.end = last + 1
        assert info.last_offset == self.end - 1

    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), bump=st.booleans())
    def append_as_follower(self, sizes: list[int], bump: bool) -> None:
        self.epoch += bump
        payload = bytearray()
        for n in sizes:
            self.tag += 1
            data = make_batch(
                n,
                base_offset=self.end,
                epoch=self.epoch,
                tag=self.tag,
                timestamp_ms=self.clock.wall_ms(),
            )
            self.batches.append(ModelBatch(self.end, self.end + n - 1, self.epoch, data))
            if self.epoch > self.epochs.latest_epoch:
                self.epochs.assign(self.epoch, self.end)
            self.end += n
            payload += data
        self.log.append_as_follower(bytes(payload), self.clock.wall_ms())

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        max_bytes = data.draw(st.integers(1, 600))
        got = self.log.read(offset, max_bytes).records
        # What a long-polling fetch counts, also below a bound (the HW or LSO).
        assert self.log.readable_bytes(offset, max_bytes) == len(got)
        bound = data.draw(st.integers(offset, self.end))
        assert self.log.readable_bytes(offset, max_bytes, bound) == len(
            self.log.read(offset, max_bytes, bound).records)
        if offset == self.end:
            assert got == b""
            return
        first = next(b for b in self.batches if b.last >= offset)
        assert got.startswith(first.data)
        assert got == self._expected_bytes(offset, self.end)[: len(got)]
        assert len(got) <= max(max_bytes, len(first.data))

    @rule()
    def roll(self) -> None:
        self.log.roll(self.clock.wall_ms())

    @rule(ms=st.integers(0, 40_000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.end

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(offset)
        if offset < self.end:
            # Per batch: the batch holding the offset goes whole.
            self.end = next(b for b in self.batches if b.last >= offset).base
            self.batches = [b for b in self.batches if b.last < offset]
            self.start = min(self.start, self.end)
        # Kafka's UnifiedLog.truncateTo: the epoch cache loses entries that
        # start at or after the (new) end even when no batch goes (a leader's
        # epoch checkpointed before its first batch, which a crash lost).
        self.epochs.truncate_from_end(self.end)
        assert self.log.log_end_offset == self.end

    @rule(gap=st.integers(0, 5))
    def truncate_fully_and_start_at(self, gap: int) -> None:
        offset = self.end + gap
        self.log.truncate_fully_and_start_at(offset)
        self.batches = []
        self.start = self.end = offset
        self.epochs.clear()

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start + 1, self.end))
        assert self.log.delete_records_before(offset)
        self.start = offset
        self.epochs.truncate_from_start(offset)

    @rule()
    def apply_retention(self) -> None:
        now = self.clock.wall_ms()
        segments_before = self.log.segments
        deleted = self.log.apply_retention(now)
        gone = segments_before[:deleted]
        for segment in gone:
            assert now - segment.max_timestamp > CONFIG.retention_ms
        if deleted:
            self.start = max(self.start, gone[-1].next_offset)
            self.epochs.truncate_from_start(self.start)

    @rule()
    def clean_restart(self) -> None:
        self.log.close()
        self._reopen()
        assert self.log.opened_cleanly
        assert self.log.recovered_segment_count == 0
        self._check_indexes_match_a_scan()

    @rule(torn=st.booleans(), seed=st.integers(0, 2**32))
    def crash(self, torn: bool, seed: int) -> None:
        flushed = self.log.flushed_offset
        assert flushed <= self.end
        self.fs.crash(random.Random(seed), torn=torn)
        self._reopen()
        new_end = self.log.log_end_offset
        if torn:
            assert flushed <= new_end <= self.end
        else:
            assert new_end == flushed
        assert new_end == self.start or any(b.last + 1 == new_end for b in self.batches)
        event(
            f"crash: torn={torn}, lost data={new_end < self.end}, kept data={new_end > self.start}"
        )
        self.batches = [b for b in self.batches if b.last < new_end]
        self.end = new_end
        # Epochs whose first batch was lost go; one starting at the end may stay.
        self.epochs.truncate_from_end(new_end + 1)
        self._check_indexes_match_a_scan()

    # --- invariants -----------------------------------------------------------

    @invariant()
    def offsets_and_epochs_match(self) -> None:
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.end
        assert self.log.flushed_offset <= self.end
        assert self.log.epoch_entries == self._expected_epochs()

    @invariant()
    def content_matches(self) -> None:
        got = self._read_everything()
        assert got == self._expected_bytes(self.start, self.end)

    def teardown(self) -> None:
        self.log.close()


LogMachine.TestCase.settings = settings(max_examples=800, stateful_step_count=50, deadline=None)
TestLogAgainstModel = LogMachine.TestCase
