"""`ControllerService`: the `QuorumController` run inside a `RaftDriver`.

- **Listener.** `MetadataListener` is the driver's listener: it forwards
  committed batches, snapshot loads and leader changes to the controller
  (replay happens on every controller, active or not), wakes the requests
  waiting for a commit, and decides when a snapshot is due: after
  ``metadata.log.max.record.bytes.between.snapshots`` bytes of committed
  batches it encodes the committed image (`build_snapshot_batches`) at the
  offset just past that batch, to be written by `snapshot_loop`.
- **One owner.** The controller is touched only in the driver task: commands
  and ``tick`` run through ``RaftDriver.call``, listener callbacks are made by
  the driver. So `QuorumController.submit` proposes straight into the core
  (`_CoreLog`) and gets the offsets synchronously, as its contract needs.
- **Responses.** `submit` returns the response only once
  `QuorumController.is_committed` holds; if this node stops being the active
  controller of the epoch it wrote in first, it raises `NotControllerError`
  (the records may never commit; Kafka answers NOT_CONTROLLER too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from metadata_quorum.controller.quorum_controller import (
    CommandFailedError,
    ControllerRequest,
    ControllerRole,
    NotControllerError,
    QuorumController,
)
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.loader import build_snapshot_batches
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import NotLeaderError
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, SnapshotLoad
from raftlog.runtime.driver import DriverStoppedError, RaftDriver

__all__ = ("ControllerService", "MetadataListener")

log = logging.getLogger(__name__)

# How long a write waits for its commit before answering REQUEST_TIMED_OUT.
WRITE_TIMEOUT_S = 30.0


class _CoreLog:
    """`MetadataLog` over the driver's core. Valid only inside the driver task."""

    def __init__(self) -> None:
        self.core: KRaftCore | None = None

    def propose(self, values: Sequence[bytes], now_ms: int) -> int:
        if self.core is None:
            raise RuntimeError("the controller proposed outside the driver task")
        return self.core.propose(list(values), now_ms)


class MetadataListener:
    """The driver's listener: replay into the controller, wake waiters, plan snapshots."""

    def __init__(self, controller: QuorumController, snapshot_max_bytes: int) -> None:
        self.controller = controller
        self.snapshot_max_bytes = snapshot_max_bytes
        self._bytes_since_snapshot = 0
        self.snapshot_due: tuple[int, int, bytes] | None = None  # end offset, epoch, data
        self._changed = asyncio.Event()
        self.leader = LeaderAndEpoch(None, -1)

    async def wait_changed(self, timeout_s: float) -> None:
        """Wait for the next commit, snapshot load or leader change (or the timeout)."""
        event = self._changed
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.controller.handle_commit(batch)
        self._bytes_since_snapshot += len(batch.data)
        if self._bytes_since_snapshot >= self.snapshot_max_bytes and not batch.is_control:
            self._bytes_since_snapshot = 0
            data = build_snapshot_batches(self.controller.committed_image)
            self.snapshot_due = (batch.last_offset + 1, batch.epoch, data)
        self._wake()

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        self.controller.handle_load_snapshot(snapshot)
        self._bytes_since_snapshot = 0
        log.info("loaded metadata snapshot %s", snapshot.snapshot_id)
        self._wake()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        self.controller.handle_leader_change(leader)
        log.info("metadata quorum leader is now %s in epoch %d", leader.leader_id, leader.epoch)
        self._wake()


class ControllerService:
    """Runs controller commands and timers in ``driver``'s task (see module doc)."""

    def __init__(
        self, node_id: int, config: ControllerConfig, snapshot_max_bytes: int
    ) -> None:
        self._core_log = _CoreLog()
        self.controller = QuorumController(node_id, config, self._core_log)
        self.listener = MetadataListener(self.controller, snapshot_max_bytes)
        self._driver: RaftDriver | None = None

    def attach(self, driver: RaftDriver) -> None:
        self._driver = driver
        self._core_log.core = driver.core

    @property
    def driver(self) -> RaftDriver:
        if self._driver is None:
            raise RuntimeError("ControllerService is not attached to a driver")
        return self._driver

    @property
    def cluster_id(self) -> str:
        return self.controller.config.cluster_id

    @property
    def active_controller_id(self) -> int | None:
        """The Raft leader: the active controller, or the one about to be."""
        return self.listener.leader.leader_id

    def not_controller(self) -> NotControllerError:
        return NotControllerError(self.listener.leader.leader_id, self.listener.leader.epoch)

    async def submit(self, request: ControllerRequest) -> Any:
        """Run ``request`` on the active controller; return its response once committed.

        Raises `NotControllerError` (not active, or leadership lost before the
        commit), `CommandFailedError` (the command raised; nothing was
        written, and the handler answers UNKNOWN_SERVER_ERROR) and
        `TimeoutError` (no commit within `WRITE_TIMEOUT_S`).
        """
        controller = self.controller

        def run(core: KRaftCore, now_ms: int) -> Any:
            try:
                return controller.submit(request, now_ms)
            except (NotControllerError, CommandFailedError) as exc:
                # Raised here, either would stop the driver: they are answers.
                return exc

        try:
            submission = await self.driver.call(run)
        except NotLeaderError:
            raise self.not_controller() from None
        if isinstance(submission, NotControllerError | CommandFailedError):
            raise submission
        epoch = controller.epoch
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            while True:
                # Leadership first: after a lost epoch, offsets up to commit_offset
                # may commit with another leader's records in them.
                if controller.role is not ControllerRole.ACTIVE or controller.epoch != epoch:
                    raise self.not_controller()
                if controller.is_committed(submission):
                    return submission.response
                await self.listener.wait_changed(1.0)

    async def tick_loop(self, stop: asyncio.Event, max_interval_s: float = 0.25) -> None:
        """Drive `QuorumController.tick` (session fencing, rebalancing) until ``stop``."""
        controller = self.controller
        driver = self.driver
        while not stop.is_set():
            try:
                deadline_ms = await driver.call(lambda core, now: controller.tick(now))
                delay_s = (deadline_ms - driver.now_ms()) / 1000
            except NotLeaderError:
                delay_s = max_interval_s
            except DriverStoppedError:
                return
            await asyncio.sleep(min(max(delay_s, 0.01), max_interval_s))

    async def snapshot_loop(self, stop: asyncio.Event) -> None:
        """Write the snapshots the listener planned (KIP-630), until ``stop``."""
        while not stop.is_set():
            await asyncio.sleep(0.1)
            due, self.listener.snapshot_due = self.listener.snapshot_due, None
            if due is None:
                continue
            end_offset, epoch, data = due
            try:
                snapshot_id = await self.driver.create_snapshot(end_offset, data, epoch)
                log.info("created metadata snapshot %s (%d bytes)", snapshot_id, len(data))
            except Exception as exc:  # e.g. beyond the high watermark yet: next time
                log.warning("metadata snapshot at %d failed: %s", end_offset, exc)
