"""The group coordinator runtime: a `GroupCoordinatorShard` per led
``__consumer_offsets`` partition (Kafka's ``CoordinatorRuntime``).

What it does, and nothing more (every group decision is the shard's):

- **Loading.** After each metadata image it looks at the offsets partitions
  this broker hosts. Becoming leader (or a new leader epoch) loads a fresh
  shard by replaying the partition's log (``load_batch``) and
  ``complete_load``; losing leadership unloads it, answering parked
  JoinGroup/SyncGroup calls with NOT_COORDINATOR.
- **Writes.** A command runs synchronously on the shard; its records are
  appended as ONE batch to the partition (acks=all semantics, through the
  replica manager, so appends keep command order), and every reply of the
  result — including delayed replies to other members — is released once
  the high watermark reaches the log end offset after that append (for a
  result without records: the log end offset as it stands). A failed append
  answers the replies with `append_error_reply` and reloads the shard from
  the log, whose state the in-memory shard had run ahead of.
- **Committed reads.** Once an append is committed the runtime tells the
  shard (`mark_committed`), so OffsetFetch never returns an offset whose
  record is not committed yet.
- **Timers.** One task sleeps until the earliest shard deadline and calls
  ``tick``.

Times given to shards are wall-clock ms (commit timestamps are stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from data_plane.broker.led_partitions import reconcile_led_partitions
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.broker.waits import wait_event
from data_plane.groups import append_error_reply
from data_plane.groups.assignors import AssignmentTopic
from data_plane.groups.consumer_model import MappingTopicsView
from data_plane.groups.model import CoordinatorResult, GroupConfig, Reply, RequestHandle, Response
from data_plane.groups.partitioning import (
    DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
    OFFSETS_TOPIC,
    partition_for_group,
)
from data_plane.groups.shard import GroupCoordinatorShard
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, iter_batches
from raftlog.storage import Log

__all__ = ("GroupCoordinatorRuntime", "NotCoordinatorError")

log = logging.getLogger(__name__)

_LONG_MAX = (1 << 63) - 1


class NotCoordinatorError(Exception):
    """This broker does not (or no longer) coordinate the group."""

    def __init__(self, error: ErrorCode = ErrorCode.not_coordinator) -> None:
        super().__init__(error.name)
        self.error = error


@dataclass(slots=True)
class _Slot:
    shard: GroupCoordinatorShard
    leader_epoch: int


class GroupCoordinatorRuntime:
    """Runs the shards of the offsets partitions this broker leads."""

    def __init__(self, metadata: BrokerMetadata, replicas: ReplicaManager, *,
                 config: GroupConfig | None = None,
                 num_partitions: int = DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
                 rng: random.Random | None = None) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.config = config or GroupConfig()
        self.num_partitions = num_partitions
        self._rng = rng or random.Random()
        self._slots: dict[int, _Slot] = {}
        self._futures: dict[RequestHandle, asyncio.Future[Response]] = {}
        self._handles = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._closed = False
        self._topics_view: tuple[object, MappingTopicsView] | None = None

    # ==== lifecycle =================================================================

    def start(self) -> None:
        """Follow leadership of the offsets partitions; start the timer. On the loop."""
        self.replicas.add_listener(self.on_metadata)
        self.on_metadata()
        self._timer = asyncio.create_task(self._timer_loop(), name="group-coordinator-timer")

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for partition in list(self._slots):
            self._unload(partition)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def now_ms(self) -> int:
        return self.replicas.clock.wall_ms()

    # ==== leadership ================================================================

    def on_metadata(self) -> None:
        """Load shards for newly led offsets partitions, unload lost ones."""
        if self._closed:
            return
        reconcile_led_partitions(self.replicas, OFFSETS_TOPIC, self.num_partitions, self._slots,
                                 self._load, self._unload)
        self._wake.set()

    def _load(self, partition: int) -> None:
        hosted = self.replicas.get((OFFSETS_TOPIC, partition))
        assert hosted is not None
        p = hosted.partition
        shard = GroupCoordinatorShard(partition, self.config, rng=self._rng)
        shard.topics_source = self.topics_view
        count = 0
        for batch in _log_batches(p.log):
            for why in shard.load_batch(batch):
                log.warning("%s-%d: skipping an unreadable record (%s)", OFFSETS_TOPIC,
                            partition, why)
            count += 1
        shard.complete_load(self.now_ms())
        self._slots[partition] = _Slot(shard, p.leader_epoch)
        log.info("broker %d: loaded offsets partition %d (epoch %d, %d batches, %d groups)",
                 self.metadata.broker_id, partition, p.leader_epoch, count,
                 len(shard.group_ids()))

    def _unload(self, partition: int) -> None:
        slot = self._slots.pop(partition)
        for reply in slot.shard.unload():
            self._release(reply)
        log.info("broker %d: unloaded offsets partition %d", self.metadata.broker_id, partition)

    # ==== requests ==================================================================

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        """The loaded shard coordinating ``group_id``. Raises `NotCoordinatorError`."""
        slot = self._slots.get(partition_for_group(group_id, self.num_partitions))
        if slot is None:
            raise NotCoordinatorError()
        return slot.shard

    def topics_view(self) -> MappingTopicsView:
        """The metadata image's topics as consumer groups assign them (rebuilt
        only when the image changes)."""
        image = self.metadata.image
        cached = self._topics_view
        if cached is None or cached[0] is not image:
            view = MappingTopicsView(
                AssignmentTopic(t.topic_id, t.name, len(t.partitions)) for t in image.topics.values())
            self._topics_view = cached = (image, view)
        return cached[1]

    def shards(self) -> Iterator[GroupCoordinatorShard]:
        return (slot.shard for slot in self._slots.values())

    async def write(self, group_id: str,
                    command: Callable[[GroupCoordinatorShard, RequestHandle, int],
                                      CoordinatorResult]) -> Response:
        """Run a write command for ``group_id`` and await its own reply (which
        may come from a later command, e.g. a parked JoinGroup). Raises
        `NotCoordinatorError`."""
        partition = partition_for_group(group_id, self.num_partitions)
        slot = self._slots.get(partition)
        if slot is None:
            raise NotCoordinatorError()
        handle = next(self._handles)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._futures[handle] = future
        try:
            try:
                result = command(slot.shard, handle, self.now_ms())
            except Exception:
                # A coordinator bug: the shard may have changed its memory
                # without the records that say so. Rebuild it from its
                # partition (as a failed tick does) and let the request fail.
                log.exception("offsets partition %d: a command failed; reloading its groups",
                              partition)
                if self._slots.get(partition) is slot:
                    self._unload(partition)
                    self.on_metadata()
                raise
            self._dispatch(partition, slot, result)
            return await future
        finally:
            self._futures.pop(handle, None)

    def _dispatch(self, partition: int, slot: _Slot, result: CoordinatorResult) -> None:
        """Append the result's records now (keeping command order) and release
        its replies once committed."""
        key = (OFFSETS_TOPIC, partition)
        hosted = self.replicas.get(key)
        if hosted is None or not hosted.partition.is_leader:
            self._fail(partition, result, ErrorCode.not_leader_or_follower)
            return
        p = hosted.partition
        if result.records:
            # TxnOffsetCommit: one transactional batch of the producer, no
            # sequence (Kafka's coordinator-origin append); the partition
            # checks only its epoch, fencing a zombie's offsets.
            builder = (BatchBuilder() if result.txn is None else BatchBuilder(
                producer_id=result.txn.producer_id, producer_epoch=result.txn.producer_epoch,
                is_transactional=True))
            now = self.now_ms()
            for record in result.records:
                builder.append(record.value, key=record.key, timestamp_ms=now)
            append = p.append_records(bytearray(builder.build()), -1, self.replicas.now_ms(),
                                      wall_clock_ms=now, from_coordinator=True)
            if append.error == ErrorCode.invalid_producer_epoch:
                append = replace(append, error=ErrorCode.producer_fenced)
            if append.error != ErrorCode.none:
                self._fail(partition, result, append.error)
                return
            required = append.last_offset + 1
            epoch = append.leader_epoch
            self.replicas.on_local_append(key)
        else:
            required = p.log_end_offset
            epoch = p.leader_epoch
        if result.next_deadline_ms is not None:
            self._wake.set()
        task = asyncio.create_task(self._complete(partition, slot, result, required, epoch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, partition: int, slot: _Slot, result: CoordinatorResult,
                        required: int, epoch: int) -> None:
        error = await self.replicas.wait_for_high_watermark(
            (OFFSETS_TOPIC, partition), required, epoch, self.config.offsets_commit_timeout_ms)
        if error != ErrorCode.none:
            self._fail(partition, result, error)
            return
        if result.write_id is not None and self._slots.get(partition) is slot:
            slot.shard.mark_committed(result.write_id)
        for reply in result.replies:
            self._release(reply)

    def _fail(self, partition: int, result: CoordinatorResult, error: ErrorCode) -> None:
        log.warning("offsets partition %d: append failed (%s); reloading", partition, error.name)
        for reply in result.replies:
            self._release(append_error_reply(reply, error))
        slot = self._slots.get(partition)
        if slot is not None:
            self._unload(partition)
            self.on_metadata()

    def replay_txn_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker written by WriteTxnMarkers to offsets partition
        ``partition`` is committed: complete the producer's pending offsets
        (a shard loaded later replays the marker from the log instead)."""
        slot = self._slots.get(partition)
        if slot is not None:
            slot.shard.replay_txn_marker(producer_id, committed)

    def _release(self, reply: Reply) -> None:
        future = self._futures.get(reply.handle)
        if future is not None and not future.done():
            future.set_result(reply.response)

    # ==== timers ====================================================================

    async def _timer_loop(self) -> None:
        while True:
            now = self.now_ms()
            deadline = _LONG_MAX
            for partition, slot in list(self._slots.items()):
                due = slot.shard.next_deadline_ms()
                if due is not None and due <= now:
                    try:
                        self._dispatch(partition, slot, slot.shard.tick(now))
                    except Exception:
                        # A coordinator bug must neither end this task (session
                        # expiry would stop for every group here) nor spin on a
                        # deadline that stays due: drop the shard's state and
                        # rebuild it from its partition, as Kafka's coordinator
                        # unloads and reloads on an error.
                        log.exception("offsets partition %d: tick failed; reloading its groups",
                                      partition)
                        self._unload(partition)
                        self.on_metadata()
                        continue
                    due = slot.shard.next_deadline_ms()
                if due is not None:
                    deadline = min(deadline, due)
            self._wake.clear()
            delay_s = min(max(0.0, (deadline - self.now_ms()) / 1000.0), 1.0)
            await wait_event(self._wake, delay_s)  # cancel-safe (waits.py)


def _log_batches(segment_log: Log) -> Iterator[bytes]:
    """Every batch of the log, as bytes, in offset order."""
    offset = segment_log.log_start_offset
    while offset < segment_log.log_end_offset:
        data = segment_log.read(offset, 1 << 20).records
        last = -1
        for header, pos in iter_batches(data):
            yield bytes(data[pos:pos + header.size_in_bytes])
            last = header.next_offset
        if last < 0:
            return
        offset = last
