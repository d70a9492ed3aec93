"""The transaction coordinator runtime: a `TransactionCoordinator` per led
``__transaction_state`` partition (Kafka's ``TransactionStateManager`` plus
the coordinator's request plumbing).

What it does, and nothing more (every transaction decision is the core's,
`data_plane.txn.coordinator`):

- **Loading.** After each metadata image it looks at the
  ``__transaction_state`` partitions this broker hosts. Becoming leader (or
  a new leader epoch) builds a coordinator at that epoch (the coordinator
  epoch), replays the partition's log through it and hands the markers of
  every PREPARE_* transaction to the marker channel, so a transaction
  decided before a failover completes as decided. Losing leadership drops
  the coordinator and its queued markers.
- **Commands** run one at a time per coordinator, synchronously between a
  producer-id reservation (the only await before the command) and the
  append of their records as one batch (acks=all semantics), which is
  applied with its offset; the reply is released once the high watermark
  covers them (for a result without records: the log end offset as it
  stood). A failed append or wait answers the error (a failed wait's
  markers go out once its record commits). A command runs to its end even
  if its request is cancelled.
- **Verification** (KIP-890) reads the coordinator against the partition's
  high watermark: only a transactional id's committed state lets a first
  batch in.
- **Markers** go out through `TxnMarkerChannel` once the PREPARE_* record
  is committed; each written marker goes back to
  `TransactionCoordinator.handle_marker_written`, whose COMPLETE_* record is
  appended like any command (retried until it is appended).
- **Timers.** Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``
  the coordinators' ``tick`` aborts transactions past
  ``transaction.timeout.ms`` (bumping the epoch) and expires idle ids.

Times given to coordinators are wall-clock ms (they are stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from data_plane.broker.group_runtime import _log_batches
from data_plane.broker.led_partitions import reconcile_led_partitions
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.producer_ids import ProducerIdManager
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.broker.txn_markers import TxnMarkerChannel
from data_plane.txn.coordinator import TransactionCoordinator, TxnResponse, TxnResult
from data_plane.txn.markers import TxnMarkerRequest
from data_plane.txn.txn_log import (
    DEFAULT_NUM_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    TxnLogError,
    TxnLogRecord,
    decode_record,
    encode_record,
    partition_for,
)
from data_plane.txn.txn_metadata import TxnMetadata
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, decode_records, parse_header
from raftlog.storage import Log

__all__ = ("TxnCoordinatorRuntime",)

log = logging.getLogger(__name__)

_Command = Callable[[TransactionCoordinator, int], TxnResult]
_Awaitable = Coroutine[Any, Any, None]

#: How long a reply waits for its records to be committed.
TXN_WRITE_TIMEOUT_MS = 5000
#: Pause before retrying a COMPLETE_* record whose append failed.
COMPLETE_RETRY_BACKOFF_MS = 200
#: ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` default.
DEFAULT_ABORT_CHECK_INTERVAL_MS = 10_000

# Append errors as the transactional client sees them (Kafka's
# TransactionStateManager.appendTransactionToLog mapping).
_APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
}


class _ReservedIds:
    """`ProducerIdAllocator` over ids reserved (awaited) before a command runs."""

    def __init__(self) -> None:
        self.ids: deque[int] = deque()

    def next_producer_id(self) -> int:
        if not self.ids:
            raise AssertionError("no producer id reserved before the command")
        return self.ids.popleft()


@dataclass(slots=True)
class _Slot:
    coordinator: TransactionCoordinator
    leader_epoch: int
    lock: asyncio.Lock


class TxnCoordinatorRuntime:
    """Runs the transaction coordinators this broker leads (see the module docstring)."""

    def __init__(self, metadata: BrokerMetadata, replicas: ReplicaManager,
                 producer_ids: ProducerIdManager, *, listener_name: str,
                 security: ConnectionSecurity = PLAINTEXT_SECURITY,
                 num_partitions: int = DEFAULT_NUM_PARTITIONS,
                 abort_check_interval_ms: int = DEFAULT_ABORT_CHECK_INTERVAL_MS,
                 max_timeout_ms: int | None = None) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.producer_ids = producer_ids
        self.num_partitions = num_partitions
        self.abort_check_interval_ms = abort_check_interval_ms
        self.max_timeout_ms = max_timeout_ms
        self.channel = TxnMarkerChannel(metadata, listener_name, self._on_marker_written,
                                        security=security)
        self._ids = _ReservedIds()
        self._slots: dict[int, _Slot] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._closed = False

    # ==== lifecycle =================================================================

    def start(self) -> None:
        """Follow leadership of ``__transaction_state``; start the channel and timer."""
        self.channel.start()
        self.replicas.add_listener(self.on_metadata)
        self.on_metadata()
        self._timer = asyncio.create_task(self._timer_loop(), name="txn-coordinator-timer")

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.channel.close()
        self._slots.clear()

    def now_ms(self) -> int:
        return self.replicas.clock.wall_ms()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # ==== leadership ================================================================

    def on_metadata(self) -> None:
        """Load coordinators for newly led partitions, drop lost ones."""
        if self._closed:
            return
        reconcile_led_partitions(self.replicas, TRANSACTION_STATE_TOPIC, self.num_partitions, self._slots,
                                 self._load, self._unload)

    def _load(self, partition: int) -> None:
        hosted = self.replicas.get((TRANSACTION_STATE_TOPIC, partition))
        assert hosted is not None
        p = hosted.partition
        kwargs = {} if self.max_timeout_ms is None else {"max_timeout_ms": self.max_timeout_ms}
        coordinator = TransactionCoordinator(partition, p.leader_epoch, self._ids,
                                             num_partitions=self.num_partitions, **kwargs)
        markers = coordinator.load(_log_records(p.log))
        slot = self._slots[partition] = _Slot(coordinator, p.leader_epoch, asyncio.Lock())
        log.info("broker %d: loaded %s-%d (epoch %d, %d markers to resend)",
                 self.metadata.broker_id, TRANSACTION_STATE_TOPIC, partition, p.leader_epoch,
                 len(markers))
        if markers and p.high_watermark < p.log_end_offset:
            # A PREPARE_* record in the uncommitted tail may still be lost
            # (this leader fails before a follower has it); a marker sent on
            # it could commit part of a transaction the next coordinator
            # aborts. The markers wait for the tail to commit.
            self._spawn(self._enqueue_when_committed(slot, markers, p.log_end_offset))
        else:
            self.channel.enqueue(markers)

    async def _enqueue_when_committed(self, slot: _Slot, markers: list[TxnMarkerRequest],
                                      required: int) -> None:
        key = (TRANSACTION_STATE_TOPIC, slot.coordinator.partition)
        while self._slots.get(slot.coordinator.partition) is slot:
            error = await self.replicas.wait_for_high_watermark(
                key, required, slot.leader_epoch, TXN_WRITE_TIMEOUT_MS)
            if self._slots.get(slot.coordinator.partition) is not slot:
                return
            if error in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
                # (The latter: the high watermark covers the tail, but the
                # ISR is below min.insync.replicas; the tail is no less committed.)
                self.channel.enqueue(markers)
                return
            if error != ErrorCode.request_timed_out:
                # Leadership moved: the next load resends them.
                log.info("%s-%d: markers held back (%s)", TRANSACTION_STATE_TOPIC,
                         slot.coordinator.partition, error.name)
                return

    def _unload(self, partition: int) -> None:
        slot = self._slots.pop(partition)
        self.channel.drop_coordinator_epoch(self.partition_for, partition, slot.leader_epoch)
        log.info("broker %d: unloaded %s-%d", self.metadata.broker_id,
                 TRANSACTION_STATE_TOPIC, partition)

    def coordinator_for(self, transactional_id: str) -> TransactionCoordinator | None:
        slot = self._slots.get(self.partition_for(transactional_id))
        return None if slot is None else slot.coordinator

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        """DescribeTransactions: the id's state, NOT_COORDINATOR unless its
        partition is led here, TRANSACTIONAL_ID_NOT_FOUND if unknown."""
        coordinator = self.coordinator_for(transactional_id)
        if coordinator is None:
            return ErrorCode.not_coordinator
        found = coordinator.metadata(transactional_id)
        return ErrorCode.transactional_id_not_found if found is None else found

    def all_transactions(self) -> list[TxnMetadata]:
        """ListTransactions: every id of every coordinator this broker runs."""
        return [m for slot in self._slots.values() for m in slot.coordinator.all_metadata()]

    # ==== commands ==================================================================

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> TxnResponse:
        """InitProducerId with a transactional id. Raises `ProducerIdsUnavailableError`."""
        return await self._to_the_end(self._init_producer_id(transactional_id, timeout_ms, expected))

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int,
                                expected: tuple[int, int] | None) -> TxnResponse:
        slot = self._slots.get(self.partition_for(transactional_id))
        if slot is None:
            return TxnResponse(ErrorCode.not_coordinator)
        async with slot.lock:
            if not self._ids.ids:
                self._ids.ids.append(await self.producer_ids.generate())
            if self._slots.get(self.partition_for(transactional_id)) is not slot:
                return TxnResponse(ErrorCode.not_coordinator)
            result = slot.coordinator.handle_init_producer_id(
                transactional_id, timeout_ms, self.now_ms(), expected)
            return await self._run(slot, result)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> TxnResponse:
        return await self._command(transactional_id, lambda c, now: c.handle_add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, now))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """`TransactionCoordinator.verify_partitions` on the coordinator of
        ``transactional_id`` (NOT_COORDINATOR if it is not led here), against
        the partition's high watermark. Reads only: an id whose latest record
        is not committed yet (a command in flight, a loaded tail) shows as
        CONCURRENT_TRANSACTIONS."""
        slot = self._slots.get(self.partition_for(transactional_id))
        hosted = self.replicas.get((TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id)))
        if slot is None or hosted is None or not hosted.partition.is_leader:
            return dict.fromkeys(partitions, ErrorCode.not_coordinator)
        return slot.coordinator.verify_partitions(
            transactional_id, producer_id, producer_epoch, partitions,
            high_watermark=hosted.partition.high_watermark)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> TxnResponse:
        return await self._command(transactional_id, lambda c, now: c.handle_end_txn(
            transactional_id, producer_id, producer_epoch, commit, now))

    async def _command(self, transactional_id: str, command: _Command) -> TxnResponse:
        return await self._to_the_end(self._locked_command(transactional_id, command))

    async def _to_the_end(self, command: Coroutine[Any, Any, TxnResponse]) -> TxnResponse:
        """Run a command in a task of its own, so it completes even when the
        request that asked for it is cancelled (its client disconnected).
        Cancelled halfway, a command would leave its state applied and its
        follow-up undone: an abort's markers never sent, and the id answering
        CONCURRENT_TRANSACTIONS until a failover (found by the txn chaos
        workload)."""
        task = asyncio.ensure_future(command)
        self._tasks.add(task)
        task.add_done_callback(self._command_done)
        return await asyncio.shield(task)

    def _command_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Raised to the request if it still waits; logged here for the
            # case it does not.
            log.debug("transaction command failed: %r", task.exception())

    async def _locked_command(self, transactional_id: str, command: _Command) -> TxnResponse:
        slot = self._slots.get(self.partition_for(transactional_id))
        if slot is None:
            return TxnResponse(ErrorCode.not_coordinator)
        async with slot.lock:
            if self._slots.get(self.partition_for(transactional_id)) is not slot:
                return TxnResponse(ErrorCode.not_coordinator)
            return await self._run(slot, command(slot.coordinator, self.now_ms()))

    async def _run(self, slot: _Slot, result: TxnResult) -> TxnResponse:
        """Append, apply, wait for the commit, then send the markers. The
        caller holds ``slot.lock``; nothing awaits between the command and
        the apply, which records the offset the records were given (what
        `verify_partitions` compares with the high watermark).

        The state is applied only after a successful append, so it always
        equals the log (committed or not), and a failure needs no reload: a
        failed append left both unchanged; a failed wait left a record that
        may still commit, whose markers then go out once it does."""
        partition = slot.coordinator.partition
        key = (TRANSACTION_STATE_TOPIC, partition)
        hosted = self.replicas.get(key)
        if hosted is None or not hosted.partition.is_leader:
            self._reload(partition)
            return TxnResponse(ErrorCode.not_coordinator)
        p = hosted.partition
        if result.records:
            now = self.now_ms()
            builder = BatchBuilder()
            for record in result.records:
                k, v = encode_record(record)
                builder.append(v, key=k, timestamp_ms=now)
            append = p.append_records(bytearray(builder.build()), -1, self.replicas.now_ms(),
                                      wall_clock_ms=now)
            if append.error != ErrorCode.none:
                log.info("%s-%d: append failed: %s", TRANSACTION_STATE_TOPIC, partition,
                         append.error.name)
                return TxnResponse(_APPEND_ERRORS.get(append.error,
                                                      ErrorCode.unknown_server_error))
            slot.coordinator.apply(result, append.last_offset)
            required, epoch = append.last_offset + 1, append.leader_epoch
            self.replicas.on_local_append(key)
        else:
            required, epoch = p.log_end_offset, p.leader_epoch
        error = await self.replicas.wait_for_high_watermark(key, required, epoch,
                                                            TXN_WRITE_TIMEOUT_MS)
        if error != ErrorCode.none:
            log.info("%s-%d: waiting for the commit of offset %d: %s", TRANSACTION_STATE_TOPIC,
                     partition, required - 1, error.name)
            if result.markers:
                self._spawn(self._enqueue_when_committed(slot, list(result.markers), required))
            return TxnResponse(_APPEND_ERRORS.get(error, ErrorCode.unknown_server_error))
        self.channel.enqueue(result.markers)
        return result.response

    def _reload(self, partition: int) -> None:
        """Leadership moved under a command: follow the metadata (unload now,
        load again if led at a newer epoch)."""
        if partition in self._slots:
            self._unload(partition)
        self.on_metadata()

    # ==== markers ===================================================================

    def _on_marker_written(self, marker: TxnMarkerRequest, error: ErrorCode) -> None:
        slot = self._slots.get(self.partition_for(marker.transactional_id))
        if slot is None or slot.coordinator.coordinator_epoch != marker.coordinator_epoch:
            return
        if error not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
            # A newer producer or coordinator epoch owns the partition now
            # (Kafka: removeMarkersForTxn). The transaction still completes:
            # the newer epoch's marker ends it on that partition.
            log.info("marker for %s on %s-%d: %s", marker.transactional_id, marker.topic,
                     marker.partition, error.name)
        self._spawn(self._complete_marker(slot, marker))

    async def _complete_marker(self, slot: _Slot, marker: TxnMarkerRequest) -> None:
        """Record a written marker; after the last one, write COMPLETE_*,
        retrying (with a backoff) while its append fails: nothing else would
        ever complete the transaction on this coordinator."""
        while True:
            async with slot.lock:
                if self._slots.get(slot.coordinator.partition) is not slot:
                    return
                result = slot.coordinator.handle_marker_written(
                    marker.transactional_id, (marker.topic, marker.partition), self.now_ms())
                if result is None:
                    return  # more markers to come, or COMPLETE_* already appended
                response = await self._run(slot, result)
            if response.error == ErrorCode.none:
                return
            log.warning("completing %s: %s; retrying", marker.transactional_id,
                        response.error.name)
            await asyncio.sleep(COMPLETE_RETRY_BACKOFF_MS / 1000)

    # ==== timers ====================================================================

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(self.abort_check_interval_ms / 1000)
            for slot in list(self._slots.values()):
                self._spawn(self._tick(slot))

    async def _tick(self, slot: _Slot) -> None:
        async with slot.lock:
            if self._slots.get(slot.coordinator.partition) is not slot:
                return
            results = slot.coordinator.tick(self.now_ms())
            for result in results:
                if self._slots.get(slot.coordinator.partition) is not slot:
                    return
                for record in result.records:
                    if record.metadata is not None:
                        log.info("aborting timed-out transaction %s (epoch now %d)",
                                 record.transactional_id, record.metadata.producer_epoch)
                # Each result is its own decision: it is applied, appended
                # and committed before the next one is looked at.
                await self._run(slot, result)

    def _spawn(self, coro: _Awaitable) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _log_records(segment_log: Log) -> list[tuple[int, TxnLogRecord]]:
    """Every ``__transaction_state`` record of the log with its offset, in
    order (unreadable records are logged and skipped: tier 1, never a reason
    to stop loading)."""
    out: list[tuple[int, TxnLogRecord]] = []
    for batch in _log_batches(segment_log):
        if parse_header(batch).is_control:
            continue
        for record in decode_records(batch):
            if record.key is None:
                continue
            try:
                out.append((record.offset, decode_record(record.key, record.value)))
            except TxnLogError as e:
                log.warning("skipping unreadable %s record: %s", TRANSACTION_STATE_TOPIC, e)
    return out

