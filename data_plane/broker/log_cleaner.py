"""The broker's log cleaner (Kafka's ``LogCleaner`` with one cleaner thread).

Every ``log.cleaner.backoff.ms`` (15 s by default), and again at once after
a pass, it looks at every hosted replica of a compacted topic
(``cleanup.policy`` includes ``compact``), leader or follower, as every
Kafka broker compacts its own replicas, and cleans the one with the
highest dirty ratio among those that reach ``min.cleanable.dirty.ratio``
or hold a dirty record older than ``max.compaction.lag.ms``.

A pass (`raftlog.storage.cleaner.clean`) runs in a worker thread: it does
per-record work (decompressing, reading keys) that must not hold up the
event loop. Its upper bound is read on the loop first: the replica's high
watermark and last stable offset, so nothing a new leader could still
truncate, and no open transaction, is compacted against.

``log.cleaner.enable=false`` turns it off, as in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from typing import TYPE_CHECKING

from data_plane.broker.waits import wait_event
from data_plane.replication.types import TopicPartition
from data_plane.txn.lso import txn_index_file_name
from raftlog.storage.cleaner import (
    CleanResult,
    CompactionConfig,
    clean,
    dirty_state,
    needs_cleaning,
)
from raftlog.storage.segment import LogSegment

if TYPE_CHECKING:
    from data_plane.broker.replica_manager import HostedPartition, ReplicaManager

log = logging.getLogger(__name__)

#: A replica whose pass failed is left alone this long (Kafka marks its log
#: directory uncleanable until a restart).
FAILURE_BACKOFF_MS = 600_000
#: log.cleaner.dedupe.buffer.size's default (Kafka's: 128 MiB).
DEDUPE_BUFFER_BYTES = "134217728"


class LogCleaner:
    """Compacts this broker's compacted replicas in the background."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stop = threading.Event()
        # The pass running in the worker thread, if any (close waits for it).
        self._running: asyncio.Future[CleanResult | None] | None = None
        #: The replica a pass is cleaning now (off the event loop), if any: a
        #: log-dir move does not swap its log meanwhile.
        self.cleaning: tuple[str, int] | None = None
        self._failed_until: dict[TopicPartition, int] = {}
        #: Totals since start, for /metrics.
        self.passes = 0
        #: Passes that stopped early at log.cleaner.dedupe.buffer.size.
        self.map_full_passes = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_removed = 0
        self.last_result: CleanResult | None = None
        self.last_duration_ms = 0
        self.max_dirty_ratio = 0.0

    def start(self) -> None:
        """Start the cleaner task (on the event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="log-cleaner")

    async def close(self) -> None:
        """Stop: a pass in progress stops at its next batch, and its
        half-written copy is deleted; nothing is swapped after this returns."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._running is not None:
            # The pass stops at its next batch (CleanerStopped); wait for it,
            # so nothing touches a log after the replica manager closes it.
            await asyncio.wait([self._running], timeout=60)
            if self._running.done() and not self._running.cancelled():
                self._running.exception()  # retrieved: CleanerStopped is expected here

    def wake(self) -> None:
        """Look for work now rather than after the backoff (tests, admin)."""
        self._wake.set()

    async def _run(self) -> None:
        while not self._stop.is_set():
            config = self._replicas.broker_config
            cleaned = False
            if config.get("log.cleaner.enable", "true") == "true":
                try:
                    cleaned = await self.clean_dirtiest()
                except asyncio.CancelledError:
                    raise
                except Exception:  # pragma: no cover - clean_dirtiest logs its own
                    log.exception("log cleaner failed")
            if not cleaned:
                self._wake.clear()
                backoff_s = max(int(config.get("log.cleaner.backoff.ms", "15000")), 1) / 1000.0
                await wait_event(self._wake, backoff_s)

    def _candidates(
        self, now_ms: int
    ) -> list[tuple[float, TopicPartition, HostedPartition, int, CompactionConfig]]:
        found = []
        max_ratio = 0.0
        for key, hosted in list(self._replicas.partitions.items()):
            config = hosted.compaction
            if (config is None or self._failed_until.get(key, 0) > now_ms
                    or key in self._replicas.moves.moves):  # copied elsewhere meanwhile
                continue
            p = hosted.partition
            upper = min(p.high_watermark, p.last_stable_offset)
            state = dirty_state(p.log, upper, now_ms, config.min_compaction_lag_ms)
            max_ratio = max(max_ratio, state.ratio)
            if needs_cleaning(state, config, now_ms):
                found.append((state.ratio, key, hosted, upper, config))
        self.max_dirty_ratio = max_ratio
        return found

    async def clean_dirtiest(self) -> bool:
        """Clean the dirtiest replica that needs it; False if none does."""
        try:
            return await self._clean_dirtiest()
        finally:
            running = self._running
            if running is not None and not running.done():  # cancelled: it still runs
                running.add_done_callback(lambda _: setattr(self, "cleaning", None))
            else:
                self.cleaning = None

    async def _clean_dirtiest(self) -> bool:
        now_ms = self._replicas.clock.wall_ms()
        candidates = self._candidates(now_ms)
        if not candidates:
            return False
        ratio, key, hosted, upper, config = max(candidates, key=lambda c: c[0])
        segment_log = hosted.partition.log
        started = self._replicas.clock.monotonic_ms()
        fs, directory = self._replicas.fs, hosted.directory

        def can_merge(segment: LogSegment) -> bool:
            # A segment's transaction index file is named by its base offset.
            return not fs.exists(os.path.join(directory, txn_index_file_name(segment.base_offset)))

        map_bytes = int(self._replicas.broker_config.get(
            "log.cleaner.dedupe.buffer.size", DEDUPE_BUFFER_BYTES))
        self._running = asyncio.get_running_loop().run_in_executor(None, functools.partial(
            clean, segment_log, upper, now_ms, config, stop=self._stop, can_merge=can_merge,
            max_map_bytes=map_bytes))
        self.cleaning = key
        try:
            result = await asyncio.shield(self._running)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if self._stop.is_set() or hosted is not self._replicas.partitions.get(key):
                return False  # shutting down, or the replica went away
            self._failed_until[key] = now_ms + FAILURE_BACKOFF_MS
            log.error("%s-%d: log cleaning failed, retrying in %d s: %r",
                      key[0], key[1], FAILURE_BACKOFF_MS // 1000, e)
            return False
        if result is None:
            return False
        self.passes += 1
        self.map_full_passes += result.map_full
        self.bytes_read += result.bytes_read
        self.bytes_written += result.bytes_written
        self.records_removed += result.records_removed
        self.last_result = result
        self.last_duration_ms = self._replicas.clock.monotonic_ms() - started
        log.info(
            "%s-%d: cleaned offsets %d..%d (dirty ratio %.2f) in %d ms: %d keys, "
            "%d of %d records removed (%d tombstones, %d of aborted transactions), "
            "%d markers removed, %d segments rewritten, %d -> %d bytes%s%s",
            key[0], key[1], result.first_dirty_offset, result.end_offset, ratio,
            self.last_duration_ms, result.keys,
            result.records_removed, result.records_read, result.tombstones_removed,
            result.aborted_records_removed, result.markers_removed,
            result.segments_rewritten, result.bytes_read, result.bytes_written,
            " (stopped: the log was truncated meanwhile)" if result.aborted else "",
            " (the key map reached log.cleaner.dedupe.buffer.size: the next pass goes on)"
            if result.map_full else "")
        return not result.aborted
