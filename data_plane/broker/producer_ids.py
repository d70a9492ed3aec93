"""Producer ids for InitProducerId, in blocks from the controller (KIP-730).

Kafka's ``RPCProducerIdManager``: the controller hands each broker a block
of ids (`metadata_quorum` writes a ProducerIds record per block, so ids are
never reused across brokers or restarts); the broker serves ids from its
current block and fetches the next one, with AllocateProducerIds through
`BrokerMetadata.forward`, once 90% of the current block is used, so a
request rarely waits for the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from kio.schema.allocate_producer_ids.v0 import request as apid_req
from kio.schema.types import BrokerId
from kio.static.primitive import i64

from data_plane.broker.metadata_api import BrokerMetadata
from raftlog.net.errors import ErrorCode

__all__ = ("ALLOCATE_PRODUCER_IDS", "ProducerIdManager", "ProducerIdsUnavailableError")

log = logging.getLogger(__name__)

ALLOCATE_PRODUCER_IDS = 67
#: Fetch the next block once this fraction of the current one is used (Kafka: 0.9).
PREFETCH_FRACTION = 0.9


class ProducerIdsUnavailableError(Exception):
    """The controller could not be reached or refused; the client retries
    (InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS / NOT_CONTROLLER-like
    retriable errors)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


class ProducerIdManager:
    """Serves unique producer ids to this broker's InitProducerId handler.

    At most one AllocateProducerIds is in flight. Its task, not the callers
    waiting on it, queues the block it got, exactly once: a waiter that is
    cancelled (its client disconnected) or wakes late can neither orphan the
    fetch nor install a block a second time. As a last line of defence no id
    at or below one already handed out is ever handed out again.
    """

    def __init__(self, metadata: BrokerMetadata) -> None:
        self.metadata = metadata
        self._next = 0
        self._end = 0  # exclusive; _next == _end: no usable block
        self._block_len = 0
        self._blocks: deque[tuple[int, int]] = deque()  # fetched, not yet in use
        self._fetch: asyncio.Task[tuple[int, int]] | None = None
        self._last_handed_out = -1

    async def generate(self) -> int:
        """A fresh producer id. Raises `ProducerIdsUnavailableError`."""
        while self._next >= self._end:
            if self._blocks:
                self._install(*self._blocks.popleft())
                continue
            fetch = self._fetch if self._fetch is not None else self._start_fetch()
            try:
                # Shielded: a client going away must not cancel the shared fetch.
                await asyncio.shield(fetch)
            except ProducerIdsUnavailableError:
                raise
            except asyncio.CancelledError:
                raise
            except Exception as e:  # transport failure: retriable for the client
                raise ProducerIdsUnavailableError(ErrorCode.coordinator_not_available,
                                                  f"AllocateProducerIds failed: {e}") from e
        pid = self._next
        if pid <= self._last_handed_out:  # `_install` prevents it; never hand out an id twice
            log.error("broker %d: producer id %d is not above %d, already handed out",
                      self.metadata.broker_id, pid, self._last_handed_out)
            self._next = self._end = 0
            raise ProducerIdsUnavailableError(ErrorCode.unknown_server_error,
                                              f"producer id {pid} already handed out")
        self._next += 1
        self._last_handed_out = pid
        used = self._block_len - (self._end - self._next)
        if not self._blocks and self._fetch is None and (
            used >= self._block_len * PREFETCH_FRACTION
        ):
            self._start_fetch()
        return pid

    async def close(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetch

    def _start_fetch(self) -> asyncio.Task[tuple[int, int]]:
        fetch = asyncio.create_task(self._fetch_block(), name="allocate-producer-ids")
        self._fetch = fetch
        # A failure nobody waited for is retrieved here, not reported as lost.
        fetch.add_done_callback(lambda t: t.cancelled() or t.exception())
        return fetch

    async def _fetch_block(self) -> tuple[int, int]:
        try:
            start, length = await self._allocate()
        finally:
            self._fetch = None
        if start + length - 1 <= self._last_handed_out:
            raise ProducerIdsUnavailableError(
                ErrorCode.unknown_server_error,
                f"producer id block [{start}, {start + length}) is not above "
                f"{self._last_handed_out}, already handed out")
        self._blocks.append((start, length))
        return start, length

    def _install(self, start: int, length: int) -> None:
        # Skip ids at or below one already handed out (a block from a
        # misbehaving controller): never reuse an id.
        first = max(start, self._last_handed_out + 1)
        if first != start:
            log.error("broker %d: producer id block [%d, %d) overlaps ids already handed "
                      "out (up to %d)", self.metadata.broker_id, start, start + length,
                      self._last_handed_out)
        self._next, self._end, self._block_len = first, start + length, length

    async def _allocate(self) -> tuple[int, int]:
        request = apid_req.AllocateProducerIdsRequest(
            broker_id=BrokerId(self.metadata.broker_id),
            broker_epoch=i64(self.metadata.broker_epoch),
        )
        response = await self.metadata.forward(ALLOCATE_PRODUCER_IDS, request)
        error = ErrorCode(int(getattr(response, "error_code", ErrorCode.unknown_server_error)))
        if error != ErrorCode.none:
            raise ProducerIdsUnavailableError(error, f"AllocateProducerIds: {error.name}")
        start = int(getattr(response, "producer_id_start"))  # noqa: B009
        length = int(getattr(response, "producer_id_len"))  # noqa: B009
        if start < 0 or length <= 0:
            raise ProducerIdsUnavailableError(ErrorCode.unknown_server_error,
                                              f"bad producer id block {start}+{length}")
        log.info("broker %d: producer id block [%d, %d)", self.metadata.broker_id,
                 start, start + length)
        return start, length
