"""The broker's replicas: one `Partition` core per hosted replica, and the
asyncio shell around them (Kafka's ``ReplicaManager``).

What this shell does, and nothing more (every replication decision is the
core's, `data_plane.replication.partition`):

- **Metadata.** It subscribes to `BrokerMetadata` and applies each image:
  it opens ``<log.dirs>/<topic>-<partition>`` for every partition that names
  this broker a replica (with the partition's `LogConfig` from topic configs
  over broker defaults), calls ``become_leader``/``become_follower`` with
  the image's epochs, and stops, closes and deletes replicas whose topic was
  deleted or that moved away. Listeners (the fetcher manager) hear after.
- **Timers.** One task sleeps until the earliest of: a purgatory deadline
  (`Purgatory.next_deadline_ms`), the next ISR-shrink check (every
  ``replica.lag.time.max.ms / 2``, as Kafka), an AlterPartition retry (only
  while a change is pending), the flush check (``log.flush.scheduler.interval.ms``)
  and the retention check (``log.retention.check.interval.ms``). Watching a
  request with an earlier deadline wakes it; nothing polls per request.
- **AlterPartition.** Whatever `Partition.poll_alter_partition` returns is
  sent through `BrokerMetadata.alter_partition`; the answer goes back to
  `Partition.handle_alter_partition_response`.
- **Purgatories.** Appends, follower fetches (which move the HW, and the
  follower log starts DeleteRecords waits for), ISR commits and role
  changes call ``check_and_complete`` for their partition.
- **Flushing** follows Kafka: no fsync per write; the log's
  ``flush.messages``/``flush.ms`` (defaults: never) decide, plus a sync of
  everything on close. Durability comes from replication (acks=all).
- **Failed log directories** (Kafka's ``LogDirFailureChannel``). Every file
  write goes through a `ReportingFileSystem`; a write that fails (disk full,
  I/O error) marks its log directory offline (`offline_log_dirs`) and
  completes `wait_log_dir_failure`. The node stops on it, as a Kafka broker
  whose every log directory has failed shuts down, so the controller fences
  it and moves its leaderships to in-sync replicas that can still write.
  Until then the failed write is answered as before (KAFKA_STORAGE_ERROR).

Batches stay opaque bytes from the request to the log and back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from data_plane.broker.client_quotas import ClientQuotas
from data_plane.broker.log_cleaner import LogCleaner
from data_plane.broker.log_configs import (
    RACK_AWARE_REPLICA_SELECTOR,
    broker_config,
    compaction_config,
    effective_topic_config,
    log_config,
    replication_config,
)
from data_plane.broker.log_dir_moves import LogDirMoves, discard_future, recover_moves
from data_plane.broker.log_dirs import delete_strays, read_topic_id, write_topic_id
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.replication_quotas import ReplicationQuotas
from data_plane.broker.request_quotas import RequestQuota
from data_plane.broker.waits import wait_event
from data_plane.purgatory import (
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    FetchParking,
    ProduceWait,
    Purgatory,
    ReplicaView,
)
from data_plane.replication.partition import IdleFollowerFetch, Partition
from data_plane.replication.types import (
    NO_LEADER,
    AlterPartitionRequest,
    AppendResult,
    FetchPartition,
    FetchPartitionResult,
    PartitionState,
    Role,
    TopicPartition,
)
from data_plane.txn.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from data_plane.txn.replica_state import ReplicaTxnState
from metadata_quorum.image import MetadataImage
from metadata_quorum.records.types import ConfigResourceType
from metadata_quorum.topic_names import INTERNAL_TOPICS
from raftlog import kafka_uuid
from raftlog.clock import Clock, SystemClock
from raftlog.net.errors import ErrorCode
from raftlog.storage import ConfigError, FileSystem, Log, RealFileSystem, ReportingFileSystem
from raftlog.storage.cleaner import CompactionConfig
from raftlog.values import value

__all__ = ("FetchParams", "HostedPartition", "ProduceOutcome", "ReplicaManager")

UNSAFE_ACK_ENV = "RAFTLOG_UNSAFE_ACK_BEFORE_HW"
UNSAFE_CONFIRM_ENV = "RAFTLOG_I_KNOW_THIS_IS_UNSAFE"


def unsafe_ack_before_hw_enabled() -> bool:
    """The deliberately unsafe, test-only mode (chaos/ must catch it): with
    ``RAFTLOG_UNSAFE_ACK_BEFORE_HW=1`` the leader acknowledges acks=all at
    append time instead of at the HW, so a leader crash loses acked writes.
    Off by default; refused (start-up fails) unless
    ``RAFTLOG_I_KNOW_THIS_IS_UNSAFE=1`` is also set."""
    if os.environ.get(UNSAFE_ACK_ENV) != "1":
        return False
    if os.environ.get(UNSAFE_CONFIRM_ENV) != "1":
        raise RuntimeError(f"{UNSAFE_ACK_ENV}=1 loses acknowledged writes; refusing to start "
                           f"without {UNSAFE_CONFIRM_ENV}=1 (test-only)")
    log.warning("UNSAFE test-only mode: acks=all is acknowledged before the high watermark")
    return True

log = logging.getLogger(__name__)

_LONG_MAX = (1 << 63) - 1


@dataclass(slots=True)
class HostedPartition:
    """A replica this broker hosts: its core, topic id and directory."""

    partition: Partition
    topic_id: uuid.UUID
    directory: str
    #: The log cleaner's settings; None unless the topic is compacted.
    compaction: CompactionConfig | None = None


@value
class ProduceOutcome:
    """One partition of a produce: the append result and the final error
    (after the acks=all wait, if any)."""

    error: ErrorCode
    append: AppendResult


@value
class FetchParams:
    """The request-level part of a Fetch (Kafka's ``FetchParams``)."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    from_follower: bool
    #: A consumer's rack (Fetch v11+ ``RackId``): with
    #: ``replica.selector.class`` the rack-aware selector, a leader points
    #: it at an in-sync follower in its rack (KIP-392).
    client_rack: str | None = None


class ReplicaManager:
    """Every replica this broker hosts, driven by metadata (see the module docstring).

    ``static_config`` holds ``server.properties`` (Kafka names); broker and
    topic defaults come from `data_plane.broker.log_configs`.
    """

    def __init__(
        self,
        metadata: BrokerMetadata,
        *,
        log_dirs: Sequence[str],
        static_config: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        fs: FileSystem | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.unsafe_ack_before_hw = unsafe_ack_before_hw_enabled()
        self.metadata = metadata
        self.log_dirs = tuple(log_dirs)
        self.static_config = dict(static_config or {})
        self.clock = clock or SystemClock()
        self.fs = ReportingFileSystem(fs or RealFileSystem(), self._log_dir_failed)
        #: Log directory -> the write error that took it offline.
        self.offline_log_dirs: dict[str, OSError] = {}
        self._log_dir_failure = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self._strays_checked = False
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("produce")
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch")
        self.delete_records_purgatory: Purgatory[DelayedDeleteRecords] = Purgatory(
            "delete_records")
        self.broker_config: dict[str, str] = broker_config(
            self.static_config, metadata.image, metadata.broker_id
        )
        # Client byte-rate quotas (Kafka's QuotaManagers), one pair per broker
        # for all of its listeners; the window settings are read once, as
        # Kafka's are read-only. Each image's quotas are applied below.
        self.client_quotas = ClientQuotas.from_config(self.broker_config)
        #: KIP-124, for the listeners (`request_quotas`).
        self.request_quota = RequestQuota(self.client_quotas.request, self.now_ms)
        # Replication throttles (KIP-73), leader and follower; set from each image.
        self.replication_quotas = ReplicationQuotas.from_config(self.broker_config)
        self._waiters: dict[int, asyncio.Future[None]] = {}
        # Partition -> the follower sessions that parked it (`park`), by id,
        # held weakly: this registry never keeps a dropped session alive.
        self._parked: dict[TopicPartition, dict[int, weakref.ref[FetchParking]]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._close_hooks: list[Callable[[], Awaitable[None]]] = []
        self._alter_pending: set[TopicPartition] = set()
        self._alter_in_flight: set[TopicPartition] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._sleep_until_ms = _LONG_MAX
        self._next_shrink_ms = 0
        self._next_flush_ms = 0
        self._next_retention_ms = 0
        self._background: set[asyncio.Task[None]] = set()
        self.cleaner = LogCleaner(self)
        #: Replicas moving to another log dir (AlterReplicaLogDirs).
        self.moves = LogDirMoves(self)
        #: Replica directory name -> the future log of a move a stop
        #: interrupted, until the replica is opened (`recover_moves`).
        self._unresumed_moves: dict[str, str] = {}
        self._started = False
        self._closed = False

    # ==== lifecycle =================================================================

    def start(self) -> None:
        """Apply the current image, subscribe to later ones, start the timer task.
        Must run on the event loop."""
        if self._started:
            raise RuntimeError("replica manager already started")
        self._started = True
        self._loop = asyncio.get_running_loop()
        # Moves a stop interrupted, before any replica directory is looked
        # for: each resumes when its replica is opened.
        self._unresumed_moves = recover_moves(self.fs, self.log_dirs)
        self.metadata.subscribe(self._on_image)
        self._apply_image(self.metadata.image)
        self._timer_task = asyncio.create_task(self._timer_loop(), name="replica-manager-timer")
        self.cleaner.start()

    async def close(self) -> None:
        """Stop timers, answer waiters, flush and close every log (clean shutdown)."""
        if self._closed:
            return
        self._closed = True
        await self.cleaner.close()
        await self.moves.close()
        for hook in self._close_hooks:
            try:
                await hook()
            except Exception:
                log.exception("close hook failed")
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        # Stop leading first, then settle what still waits: a pending acks=all
        # produce is answered NOT_LEADER_OR_FOLLOWER (its records may not be
        # committed; the client retries with the same sequence), never
        # success. Waking a waiter whose operation is not complete used to
        # acknowledge un-replicated records on a controlled shutdown.
        for hosted in self.partitions.values():
            hosted.partition.stop()
        now = self.now_ms()
        for key in list(self.partitions):
            self._wake_purgatories(key, now)
        for future in self._waiters.values():
            if not future.done():
                future.set_result(None)
        for hosted in self.partitions.values():
            segment_log = hosted.partition.log
            # A failed directory gets no more writes, not even the
            # clean-shutdown marker: its logs are recovered at the next open.
            segment_log.close(clean=self._log_dir_of(segment_log.directory)
                              not in self.offline_log_dirs)
        self.partitions.clear()

    async def wait_log_dir_failure(self) -> str:
        """Return once a log directory has failed (a write to it raised):
        the first failed directory."""
        await self._log_dir_failure.wait()
        return next(iter(self.offline_log_dirs))

    def _log_dir_failed(self, path: str, error: OSError) -> None:
        """`ReportingFileSystem`'s report: the log directory holding ``path``
        goes offline (once). May run on a worker thread (the log cleaner)."""
        directory = self._log_dir_of(path)
        if directory in self.offline_log_dirs:
            return
        self.offline_log_dirs[directory] = error
        log.critical("log directory %s failed (%s on %s): stopping serving logs in it",
                     directory, error, path)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._log_dir_failure.set()
        else:
            loop.call_soon_threadsafe(self._log_dir_failure.set)

    def _log_dir_of(self, path: str) -> str:
        """The configured log directory ``path`` is under (``path``'s own
        directory if none is: never expected)."""
        real = os.path.abspath(path)
        for directory in self.log_dirs:
            root = os.path.abspath(directory)
            if real == root or real.startswith(root + os.sep):
                return directory
        return os.path.dirname(path)

    def add_close_hook(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook`` first thing in `close` (coordinators stop before the logs)."""
        self._close_hooks.append(hook)

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every applied image (the fetcher manager)."""
        self._listeners.append(listener)

    def now_ms(self) -> int:
        return self.clock.monotonic_ms()

    # ==== lookups ===================================================================

    def get(self, key: TopicPartition) -> HostedPartition | None:
        return self.partitions.get(key)

    def _replica_view(self, key: TopicPartition) -> ReplicaView | None:
        hosted = self.partitions.get(key)
        return None if hosted is None else hosted.partition

    def missing_partition_error(self, key: TopicPartition) -> ErrorCode:
        """The error for a partition this broker does not host: NOT_LEADER_OR_FOLLOWER
        if the metadata knows it (the client's metadata is stale), else
        UNKNOWN_TOPIC_OR_PARTITION."""
        topic = self.metadata.image.topic_by_name(key[0])
        if topic is not None and key[1] in topic.partitions:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition

    # ==== metadata ==================================================================

    def _on_image(self, image: MetadataImage, previous: MetadataImage | None) -> None:
        del previous
        if self._closed:
            return
        assigned = self._apply_image(image)
        if not self._strays_checked and self.metadata.broker_id in image.brokers:
            # The first image delivered to the data side is past this
            # broker's registration (`MetadataPublisher.open_gate`): current
            # enough to tell which directories are no longer ours
            # (`log_dirs`). Never the image `start` applies, which may be
            # empty or half-replayed.
            self._strays_checked = True
            delete_strays(self.fs, self.log_dirs, assigned)
            for name, future_dir in self._unresumed_moves.items():
                discard_future(future_dir, f"the metadata does not assign {name} to this broker")
            self._unresumed_moves.clear()

    def _apply_image(self, image: MetadataImage) -> set[TopicPartition]:
        """Open, reconfigure and close replicas as ``image`` assigns them;
        returns the partitions it assigns to this broker."""
        broker_id = self.metadata.broker_id
        broker_epoch = self.metadata.broker_epoch
        self.broker_config = broker_config(self.static_config, image, broker_id)
        self.client_quotas.update(image.client_quotas)
        self.replication_quotas.update(
            self.broker_config,
            ((resource.name, entries) for resource, entries in image.configs.items()
             if resource.type is ConfigResourceType.TOPIC),
            broker_id)
        now = self.now_ms()
        seen: set[TopicPartition] = set()
        touched: list[TopicPartition] = []
        for topic, partition_id, reg in image.iter_partitions():
            if broker_id not in reg.replicas:
                continue
            key = (topic.name, partition_id)
            seen.add(key)
            hosted = self.partitions.get(key)
            if hosted is not None and hosted.topic_id != topic.topic_id:
                # Deleted and re-created under the same name: a different log.
                self._remove(key, delete=True)
                hosted = None
            topic_config = effective_topic_config(
                self.broker_config, image.topic_config(topic.name)
            )
            if hosted is None:
                hosted = self._open(key, topic.topic_id, topic_config)
                self._resume_move(key, hosted)
            p = hosted.partition
            p.config = replication_config(self.broker_config, topic_config)
            self._reconfigure_log(key, hosted, topic_config)
            hosted.compaction = self._compaction(key, topic_config)
            p.broker_epoch = broker_epoch
            p.update_ineligible_replicas(
                frozenset(r for r in reg.replicas if not image.is_usable(r))
            )
            state = PartitionState(
                topic=topic.name, partition=partition_id, leader=reg.leader,
                leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch,
                replicas=reg.replicas, isr=reg.isr,
            )
            changed = (
                p.become_leader(state, now) if reg.leader == broker_id
                else p.become_follower(state, now)
            )
            if changed:
                touched.append(key)
                self._maybe_send_alter_partition(key)
        for key in [k for k in self.partitions if k not in seen]:
            self._remove(key, delete=True)
            touched.append(key)
        for key in touched:
            self._wake_purgatories(key, now)
        for listener in self._listeners:
            listener()
        return seen

    def _open(
        self, key: TopicPartition, topic_id: uuid.UUID, topic_config: Mapping[str, str]
    ) -> HostedPartition:
        name = f"{key[0]}-{key[1]}"
        directory = next(
            (os.path.join(d, name) for d in self.log_dirs if self.fs.exists(os.path.join(d, name))),
            None,
        )
        if directory is not None:
            found = read_topic_id(self.fs, directory)
            if found is not None and found != topic_id:
                # A replica of an earlier topic of the same name, deleted
                # while this broker was down (`log_dirs`).
                log.warning("%s holds a replica of topic id %s, not %s: deleting it",
                            directory, kafka_uuid.to_text(found), kafka_uuid.to_text(topic_id))
                shutil.rmtree(directory, ignore_errors=True)
                directory = None
        if directory is None:
            # The log dir hosting the fewest of our partitions (Kafka's default placement).
            counts = {d: 0 for d in self.log_dirs}
            for hosted in self.partitions.values():
                parent = os.path.dirname(hosted.directory)
                if parent in counts:
                    counts[parent] += 1
            directory = os.path.join(min(self.log_dirs, key=lambda d: counts[d]), name)
        segment_log = Log.open(directory, log_config(topic_config), fs=self.fs, clock=self.clock)
        if read_topic_id(self.fs, directory) is None:
            write_topic_id(self.fs, directory, topic_id)
        partition = Partition(
            key[0], key[1], local_id=self.metadata.broker_id, log=segment_log,
            config=replication_config(self.broker_config, topic_config),
            broker_epoch=self.metadata.broker_epoch,
            txn_state=ReplicaTxnState(
                directory, self.fs,
                producer_id_expiration_ms=int(self.broker_config.get(
                    "producer.id.expiration.ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS))),
        )
        hosted = HostedPartition(partition, topic_id, directory)
        self.partitions[key] = hosted
        log.info("hosting %s-%d in %s", key[0], key[1], directory)
        return hosted

    @staticmethod
    def _reconfigure_log(
        key: TopicPartition, hosted: HostedPartition, topic_config: Mapping[str, str]
    ) -> None:
        """Apply a changed topic config (IncrementalAlterConfigs, a changed
        broker default) to the open log. A value the log cannot take (the
        controller validates them, so only a bad static default) keeps the
        old settings."""
        segment_log = hosted.partition.log
        try:
            config = log_config(topic_config)
        except ConfigError as e:
            log.error("%s-%d: keeping the log settings: %s", key[0], key[1], e)
            return
        if config != segment_log.config:
            segment_log.reconfigure(config)
            log.info("%s-%d: log settings changed: %s", key[0], key[1], config)

    @staticmethod
    def _compaction(
        key: TopicPartition, topic_config: Mapping[str, str]
    ) -> CompactionConfig | None:
        try:
            return compaction_config(topic_config)
        except ValueError as e:
            log.error("%s-%d: not compacting, a compaction setting is bad: %s", key[0], key[1], e)
            return None

    def _remove(self, key: TopicPartition, *, delete: bool) -> None:
        self.moves.cancel(key)
        hosted = self.partitions.pop(key)
        hosted.partition.stop()
        hosted.partition.log.close()
        self._alter_pending.discard(key)
        if delete:
            shutil.rmtree(hosted.directory, ignore_errors=True)
            log.info("deleted replica %s-%d", key[0], key[1])

    # ==== produce ===================================================================

    async def append_records(
        self, entries: Mapping[TopicPartition, bytes], *, acks: int, timeout_ms: int
    ) -> dict[TopicPartition, ProduceOutcome]:
        """Append to every partition we lead; for acks=all, wait (DelayedProduce)
        until each successful append is committed or ``timeout_ms`` passes."""
        now = self.now_ms()
        results: dict[TopicPartition, AppendResult] = {}
        for key, records in entries.items():
            hosted = self.partitions.get(key)
            if hosted is None:
                results[key] = AppendResult(self.missing_partition_error(key))
                continue
            result = hosted.partition.append_records(
                records, acks, now, wall_clock_ms=self.clock.wall_ms())
            results[key] = result
            if result.error == ErrorCode.none:
                self._wake_purgatories(key, now)
        outcomes = {k: ProduceOutcome(r.error, r) for k, r in results.items()}
        waits = {
            k: ProduceWait(r.required_offset, r.leader_epoch)
            for k, r in results.items() if r.error == ErrorCode.none
        }
        if acks != -1 or not waits or self.unsafe_ack_before_hw:
            return outcomes  # (unsafe test-only mode: acks=all acked at append time)
        op = DelayedProduce(waits, deadline_ms=now + max(0, timeout_ms), lookup=self._replica_view)
        if not self.produce_purgatory.try_complete_else_watch(op, now):
            await self._wait_for(op)
        for key in waits:
            # No outcome = the wait ended without an answer (shutdown): the
            # records may or may not commit, so the answer is indefinite.
            error = op.outcome.get(key, ErrorCode.request_timed_out)
            outcomes[key] = ProduceOutcome(error, results[key])
        return outcomes

    async def wait_for_high_watermark(
        self, key: TopicPartition, required_offset: int, leader_epoch: int, timeout_ms: int
    ) -> ErrorCode:
        """Wait until the partition we lead in ``leader_epoch`` has a HW of at
        least ``required_offset`` (DelayedProduce's test, as for acks=all).
        Coordinators use it to hold replies until their records are committed."""
        now = self.now_ms()
        op = DelayedProduce({key: ProduceWait(required_offset, leader_epoch)},
                            deadline_ms=now + max(0, timeout_ms), lookup=self._replica_view)
        if not self.produce_purgatory.try_complete_else_watch(op, now):
            await self._wait_for(op)
        return op.outcome.get(key, ErrorCode.request_timed_out)

    def on_local_append(self, key: TopicPartition) -> None:
        """A coordinator appended to ``key`` directly through its `Partition`:
        wake what waits on it (long-polling fetches, a single-replica HW move)."""
        self._wake_purgatories(key, self.now_ms())

    # ==== DeleteRecords =============================================================

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int
    ) -> dict[TopicPartition, tuple[ErrorCode, int, str | None]]:
        """DeleteRecords: per partition we lead, move the log start offset
        (`Partition.delete_records`), then wait (DelayedDeleteRecords) until
        every eligible replica's log start reached it or ``timeout_ms``
        passes. Per partition: (error, low watermark, message). The internal
        topics refuse (INVALID_TOPIC_EXCEPTION), as in Kafka."""
        now = self.now_ms()
        results: dict[TopicPartition, tuple[ErrorCode, int, str | None]] = {}
        targets: dict[TopicPartition, int] = {}
        for key, offset in offsets.items():
            if key[0] in INTERNAL_TOPICS:
                # Kafka's deleteRecordsOnLocalLog: the coordinators' state.
                results[key] = (ErrorCode.invalid_topic_exception, -1,
                                f"Cannot delete records of internal topic {key[0]}")
                continue
            hosted = self.partitions.get(key)
            if hosted is None:
                results[key] = (self.missing_partition_error(key), -1, None)
                continue
            error, target, message = hosted.partition.delete_records(offset)
            if error != ErrorCode.none:
                results[key] = (error, -1, message)
                continue
            targets[key] = target
            self._wake_purgatories(key, now)  # the log start moved: fetches answer it
        if not targets:
            return results
        op = DelayedDeleteRecords(targets, deadline_ms=now + max(0, timeout_ms),
                                  lookup=self._replica_view)
        if not self.delete_records_purgatory.try_complete_else_watch(op, now):
            await self._wait_for(op)
        for key in targets:
            error, low = op.outcome.get(key, (ErrorCode.request_timed_out, -1))
            results[key] = (error, low, None)
        return results

    # ==== fetch =====================================================================

    async def fetch(
        self, requests: Mapping[TopicPartition, FetchPartition], params: FetchParams,
        parking: FetchParking | None = None,
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """Serve a Fetch: read now; if fewer than ``min_bytes`` are readable and
        nothing needs an immediate answer, long-poll (DelayedFetch) and read again.

        ``parking``: the follower session's parked partitions (`park`), not
        read now; a long poll also waits on them, and one that changes while
        the fetch waits is read and answered with the others (its key is in
        the result, not in ``requests``)."""
        results = await self._read_acks_first(requests, params)
        if (params.max_wait_ms <= 0 or not (requests or parking)
                or (requests and self._fetch_can_answer_now(results, params))):
            return results
        now = self.now_ms()
        op = DelayedFetch(
            requests, min_bytes=params.min_bytes,
            deadline_ms=now + params.max_wait_ms, lookup=self._replica_view, parking=parking,
            held_back=(self._leader_throttled
                       if params.from_follower and self.replication_quotas.leader.active
                       else None),
        )
        # ``op.requests``: ``requests`` and the parked partitions woken meanwhile.
        if self.fetch_purgatory.try_complete_else_watch(op, now):
            return self._read_all(op.requests, params)
        await self._wait_for(op)
        changed = op.changed_partitions()
        if changed is None or len(changed) == len(op.requests):
            return self._read_all(op.requests, params)
        # Read again only what changed while waiting: new records, or a HW
        # or log start that moved (a follower's answer carries them, and a
        # stale one would be sent again, corrected, with the next answer).
        # The rest would read the same; their first answers stand. The
        # follower state was updated by the first read, as Kafka updates it
        # only then (ReplicaManager.fetchMessages, not DelayedFetch.onComplete).
        changed = set(changed)
        partitions = self.partitions
        for key, first in results.items():
            if key in changed:
                continue
            hosted = partitions.get(key)
            if hosted is not None and (
                    first.high_watermark != hosted.partition.high_watermark
                    or first.log_start_offset != hosted.partition.log.log_start_offset):
                changed.add(key)
        if len(changed) == len(op.requests):
            return self._read_all(op.requests, params)
        fresh = self._read_all({k: r for k, r in op.requests.items() if k in changed}, params)
        merged = {key: fresh.get(key, results[key]) for key in requests}
        for key, result in fresh.items():
            merged.setdefault(key, result)
        return merged

    def park(self, key: TopicPartition, parking: FetchParking) -> None:
        """A follower session skips ``key`` from now on: call
        ``parking.unpark(key)`` when it changes, and check the fetch
        purgatory under ``parking`` if it asks to (`FetchParking`)."""
        parkers = self._parked.get(key)
        if parkers is None:
            parkers = self._parked[key] = {}
        parkers[id(parking)] = weakref.ref(parking)

    def idle_fetch(
        self, key: TopicPartition, request: FetchPartition, result: FetchPartitionResult
    ) -> IdleFollowerFetch | None:
        """`Partition.idle_fetch` of ``key``: the partition's stored idle answer
        if ``result`` is it."""
        hosted = self.partitions.get(key)
        return None if hosted is None else hosted.partition.idle_fetch(request, result)

    async def _read_acks_first(
        self, requests: Mapping[TopicPartition, FetchPartition], params: FetchParams
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """`_read_all`, but a follower's fetch first serves the partitions whose
        high watermark waits for followers, then yields once before the rest.

        A follower fetch names every partition the follower has from us, most
        of them idle (``__consumer_offsets``). The fetch that acknowledges a
        produce's batch moves the HW and completes the DelayedProduce when its
        partition is served; the produce's answer goes out only when this task
        yields. Serving that partition first and yielding puts the answer
        ahead of the idle partitions. Each partition is served exactly as in
        one pass (the byte budget carries over); only the order changes."""
        if len(requests) < 2 or not next(iter(requests.values())).is_from_follower:
            return self._read_all(requests, params)
        urgent: dict[TopicPartition, FetchPartition] = {}
        for key, request in requests.items():
            hosted = self.partitions.get(key)
            if hosted is not None and hosted.partition.high_watermark < hosted.partition.log_end_offset:
                urgent[key] = request
        if not urgent or len(urgent) == len(requests):
            return self._read_all(requests, params)
        first = self._read_all(urgent, params)
        used = sum(len(r.records) for r in first.values())
        await asyncio.sleep(0)  # the produces this completed answer now
        rest = self._read_all({k: r for k, r in requests.items() if k not in urgent},
                              replace(params, max_bytes=max(0, params.max_bytes - used)))
        return {key: first[key] if key in first else rest[key] for key in requests}

    @staticmethod
    def _fetch_can_answer_now(
        results: Mapping[TopicPartition, FetchPartitionResult], params: FetchParams
    ) -> bool:
        total = 0
        for result in results.values():
            if (result.error != ErrorCode.none or result.diverging_epoch is not None
                    or result.preferred_read_replica >= 0):
                return True
            total += len(result.records)
        return total >= params.min_bytes

    def _leader_throttled(self, key: TopicPartition, request: FetchPartition) -> bool:
        """Whether a follower's fetch of ``key`` is held back by the leader
        replication throttle (KIP-73; Kafka's ``shouldLeaderThrottle``): a
        throttled partition, a follower outside the ISR, the rate over its
        bound. Its records are then not sent, and do not complete a long poll."""
        quota = self.replication_quotas.leader
        if not quota.is_throttled(key):
            return False
        hosted = self.partitions.get(key)
        if hosted is None or request.replica_id in hosted.partition.isr:
            return False
        return quota.is_quota_exceeded(self.now_ms())

    def record_leader_replication(
        self, results: Mapping[TopicPartition, FetchPartitionResult]
    ) -> None:
        """Count a follower fetch answer's records of throttled partitions
        against the leader replication throttle (Kafka records them once
        the answer is built, in sync or not)."""
        quota = self.replication_quotas.leader
        if quota.active:
            quota.record_throttled(
                ((key, len(r.records)) for key, r in results.items() if r.records),
                self.now_ms())

    def _read_all(
        self, requests: Mapping[TopicPartition, FetchPartition], params: FetchParams
    ) -> dict[TopicPartition, FetchPartitionResult]:
        now = self.now_ms()
        remaining = params.max_bytes
        results: dict[TopicPartition, FetchPartitionResult] = {}
        throttled = params.from_follower and self.replication_quotas.leader.active
        rack = params.client_rack if params.client_rack and self.rack_aware_reads else None
        for key, request in requests.items():
            hosted = self.partitions.get(key)
            if hosted is None:
                results[key] = FetchPartitionResult(self.missing_partition_error(key))
                continue
            p = hosted.partition
            if rack and p.is_leader:
                preferred = p.preferred_read_replica(request.fetch_offset, rack, self._rack_of,
                                                     now)
                if preferred is not None:
                    # Nothing read: the consumer goes to ``preferred`` (Kafka's answer).
                    results[key] = FetchPartitionResult(
                        ErrorCode.none, high_watermark=p.high_watermark,
                        log_start_offset=p.log.log_start_offset,
                        log_end_offset=p.log_end_offset, leader_id=p.leader_id,
                        leader_epoch=p.leader_epoch, preferred_read_replica=preferred)
                    continue
            if remaining <= 0 and not request.is_from_follower and p.is_leader:
                # The response is full (fetch.max.bytes): answer the position only.
                results[key] = FetchPartitionResult(
                    ErrorCode.none, high_watermark=p.high_watermark,
                    log_start_offset=p.log.log_start_offset, log_end_offset=p.log_end_offset,
                    leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                )
                continue
            hw_before = p.high_watermark
            if remaining < request.max_bytes:
                request = replace(request, max_bytes=max(remaining, 0))
            result = p.handle_fetch(request, now)
            if throttled and result.records and self._leader_throttled(key, request):
                # Read, the follower's fetch state updated, the records held
                # back (Kafka reads and answers an empty record set).
                result = replace(result, records=b"")
            results[key] = result
            remaining -= len(result.records)
            if request.is_from_follower and p.is_leader:
                if p.high_watermark != hw_before:
                    self._wake_purgatories(key, now)
                elif self.delete_records_purgatory.watched(key):
                    # The follower's log start (DeleteRecords' low watermark) may have moved.
                    self._resolve(self.delete_records_purgatory.check_and_complete(key, now))
                self._maybe_send_alter_partition(key)
        return results

    # ==== purgatories and timers ======================================================

    async def _wait_for(self, op: DelayedProduce | DelayedFetch | DelayedDeleteRecords) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[id(op)] = future
        if op.deadline_ms < self._sleep_until_ms:
            self._wake.set()
        try:
            await future
        finally:
            self._waiters.pop(id(op), None)
            if not op.completed:
                # Our caller went away (connection closed, shutdown).
                if isinstance(op, DelayedProduce):
                    self.produce_purgatory.cancel(op)
                elif isinstance(op, DelayedDeleteRecords):
                    self.delete_records_purgatory.cancel(op)
                else:
                    self.fetch_purgatory.cancel(op)

    def _resolve(self, ops: Sequence[DelayedProduce | DelayedFetch | DelayedDeleteRecords]) -> None:
        for op in ops:
            future = self._waiters.get(id(op))
            if future is not None and not future.done():
                future.set_result(None)

    @property
    def rack_aware_reads(self) -> bool:
        """``replica.selector.class`` is Kafka's RackAwareReplicaSelector (KIP-392)."""
        return bool(self.broker_config.get("replica.selector.class")
                    == RACK_AWARE_REPLICA_SELECTOR)

    def _rack_of(self, broker_id: int) -> str | None:
        """A registered, unfenced broker's rack (None: no rack, or not one a
        consumer should be sent to)."""
        broker = self.metadata.image.brokers.get(broker_id)
        return None if broker is None or broker.fenced else broker.rack

    def on_follower_high_watermark(self, key: TopicPartition) -> None:
        """A follower's HW moved: consumers long-polling it (KIP-392) may read."""
        if self.fetch_purgatory.watched(key):
            self._resolve(self.fetch_purgatory.check_and_complete(key, self.now_ms()))

    # ==== log-dir moves (AlterReplicaLogDirs) ======================================

    def move_replica(self, key: TopicPartition, log_dir: str) -> ErrorCode:
        """Move ``key``'s replica to ``log_dir`` (`LogDirMoves.start`): Kafka's
        AlterReplicaLogDirs answers, LOG_DIR_NOT_FOUND for a directory that is
        not one of ``log.dirs``, KAFKA_STORAGE_ERROR for an offline one or one
        holding an offline replica, REPLICA_NOT_AVAILABLE for a partition
        this broker does not host."""
        wanted = os.path.abspath(log_dir)
        by_path = {os.path.abspath(d): d for d in self.log_dirs}
        destination = by_path.get(wanted)
        if destination is None:
            return ErrorCode.log_dir_not_found
        if destination in self.offline_log_dirs:
            return ErrorCode.kafka_storage_error
        hosted = self.partitions.get(key)
        if hosted is None:
            return ErrorCode.replica_not_available
        if self._log_dir_of(hosted.directory) in self.offline_log_dirs:
            return ErrorCode.kafka_storage_error
        self.moves.start(key, hosted, destination)
        return ErrorCode.none

    def _resume_move(self, key: TopicPartition, hosted: HostedPartition) -> None:
        """Resume the move of ``key`` a stop interrupted, if any, when it
        can go on (`LogDirMoves.resume`); else delete its future log."""
        future_dir = self._unresumed_moves.pop(os.path.basename(hosted.directory), None)
        if future_dir is None:
            return
        destination = os.path.dirname(future_dir)
        found = read_topic_id(self.fs, future_dir)
        if found != hosted.topic_id:
            discard_future(future_dir, "it holds another topic's replica")
        elif destination not in self.log_dirs:
            discard_future(future_dir, "its directory is no longer one of log.dirs")
        elif destination == os.path.dirname(hosted.directory):
            discard_future(future_dir, "the replica is in that log dir already")
        elif (destination in self.offline_log_dirs
              or self._log_dir_of(hosted.directory) in self.offline_log_dirs):
            discard_future(future_dir, "a log dir of the move is offline")
        else:
            self.moves.resume(key, hosted, future_dir)

    def on_log_replaced(self, key: TopicPartition) -> None:
        """A move swapped ``key``'s log: whatever waits on it looks again
        (stored idle fetch answers name the old log and are dropped)."""
        self._wake_purgatories(key, self.now_ms())

    def _wake_purgatories(self, key: TopicPartition, now_ms: int) -> None:
        self._resolve(self.produce_purgatory.check_and_complete(key, now_ms))
        self._resolve(self.fetch_purgatory.check_and_complete(key, now_ms))
        if self.delete_records_purgatory.watched(key):
            self._resolve(self.delete_records_purgatory.check_and_complete(key, now_ms))
        parkers = self._parked.get(key)
        if parkers is not None:
            for parking_id, ref in list(parkers.items()):
                parking = ref()
                if parking is not None and parking.unpark(key):
                    self._resolve(self.fetch_purgatory.check_and_complete(parking, now_ms))
                else:
                    del parkers[parking_id]  # gone, or no longer parked here
            if not parkers:
                del self._parked[key]

    async def _timer_loop(self) -> None:
        while True:
            now = self.now_ms()
            self._resolve(self.produce_purgatory.expire(now))
            self._resolve(self.fetch_purgatory.expire(now))
            self._resolve(self.delete_records_purgatory.expire(now))
            try:
                self._run_due_maintenance(now)
            except Exception:
                log.exception("replica maintenance failed")
            deadline = min(
                self.produce_purgatory.next_deadline_ms() or _LONG_MAX,
                self.fetch_purgatory.next_deadline_ms() or _LONG_MAX,
                self.delete_records_purgatory.next_deadline_ms() or _LONG_MAX,
                self._next_shrink_ms, self._next_flush_ms, self._next_retention_ms,
                now + 50 if self._alter_pending else _LONG_MAX,
            )
            self._sleep_until_ms = deadline
            self._wake.clear()
            delay_s = max(0.0, (deadline - self.now_ms()) / 1000.0)
            await wait_event(self._wake, min(delay_s, 3600.0))  # cancel-safe (waits.py)

    def _run_due_maintenance(self, now: int) -> None:
        if now >= self._next_shrink_ms:
            lag_ms = int(self.broker_config["replica.lag.time.max.ms"])
            self._next_shrink_ms = now + max(lag_ms // 2, 10)
            for key, hosted in self.partitions.items():
                if hosted.partition.maybe_shrink_isr(now):
                    self._maybe_send_alter_partition(key)
        for key in list(self._alter_pending):
            self._maybe_send_alter_partition(key)
        if now >= self._next_flush_ms:
            interval = int(self.broker_config["log.flush.scheduler.interval.ms"])
            self._next_flush_ms = min(_LONG_MAX, now + max(interval, 1))
            if interval < _LONG_MAX:
                for hosted in self.partitions.values():
                    hosted.partition.log.maybe_flush()
        if now >= self._next_retention_ms:
            interval = int(self.broker_config["log.retention.check.interval.ms"])
            self._next_retention_ms = now + max(interval, 1)
            wall_now = self.clock.wall_ms()
            for key, hosted in list(self.partitions.items()):
                p = hosted.partition
                if p.log.apply_retention(high_watermark=p.high_watermark):
                    p.txn.after_log_start_moved(p.log)
                    self._wake_purgatories(key, now)  # the log start is news
                p.txn.remove_expired_producers(wall_now)

    # ==== AlterPartition ============================================================

    def _maybe_send_alter_partition(self, key: TopicPartition) -> None:
        hosted = self.partitions.get(key)
        if hosted is None:
            self._alter_pending.discard(key)
            return
        p = hosted.partition
        if not p.isr_change_in_flight:
            self._alter_pending.discard(key)
            return
        self._alter_pending.add(key)
        if key in self._alter_in_flight:
            return
        request = p.poll_alter_partition(self.now_ms())
        if request is None:
            return
        self._alter_in_flight.add(key)
        task = asyncio.create_task(self._send_alter_partition(key, p, request))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_alter_partition(
        self, key: TopicPartition, p: Partition, request: AlterPartitionRequest
    ) -> None:
        try:
            response = await self.metadata.alter_partition(request)
        finally:
            self._alter_in_flight.discard(key)
        hosted = self.partitions.get(key)
        if hosted is None or hosted.partition is not p:
            return
        now = self.now_ms()
        if p.handle_alter_partition_response(response, now):
            self._wake_purgatories(key, now)
        if not p.isr_change_in_flight:
            self._alter_pending.discard(key)

    # ==== views for the API layer =====================================================

    def leader_hint(self, key: TopicPartition) -> tuple[int, int]:
        """(leader id, leader epoch) per the latest metadata, for NOT_LEADER hints."""
        image = self.metadata.image
        topic = image.topic_by_name(key[0])
        reg = None if topic is None else topic.partitions.get(key[1])
        if reg is None:
            return NO_LEADER, -1
        return reg.leader, reg.leader_epoch

    def is_leader(self, key: TopicPartition) -> bool:
        hosted = self.partitions.get(key)
        return hosted is not None and hosted.partition.role is Role.LEADER
