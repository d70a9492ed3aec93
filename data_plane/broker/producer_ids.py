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
    """Serves unique producer ids to this broker's InitProducerId handler."""

    def __init__(self, metadata: BrokerMetadata) -> None:
        self.metadata = metadata
        self._next = 0
        self._end = 0  # exclusive; _next == _end: no usable block
        self._block_len = 0
        self._prefetched: tuple[int, int] | None = None
        self._fetch: asyncio.Task[tuple[int, int]] | None = None
        self._installed: asyncio.Task[tuple[int, int]] | None = None  # fetch of the block in use

    async def generate(self) -> int:
        """A fresh producer id. Raises `ProducerIdsUnavailableError`."""
        while self._next >= self._end:
            await self._install_next_block()
        pid = self._next
        self._next += 1
        used = self._block_len - (self._end - self._next)
        if self._prefetched is None and self._fetch is None and (
            used >= self._block_len * PREFETCH_FRACTION
        ):
            self._fetch = asyncio.create_task(self._allocate(), name="allocate-producer-ids")
        return pid

    async def close(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetch

    async def _install_next_block(self) -> None:
        if self._prefetched is None:
            if self._fetch is None:
                self._fetch = asyncio.create_task(self._allocate(), name="allocate-producer-ids")
            fetch = self._fetch
            try:
                # Shielded: a client going away must not cancel a shared fetch.
                block = await asyncio.shield(fetch)
            except ProducerIdsUnavailableError:
                raise
            except Exception as e:  # transport failure: retriable for the client
                raise ProducerIdsUnavailableError(ErrorCode.coordinator_not_available,
                                                  f"AllocateProducerIds failed: {e}") from e
            finally:
                if self._fetch is fetch:
                    self._fetch = None
            if fetch is self._installed:
                # Concurrent callers wait on one fetch: the first to wake installs
                # its block; installing it again would hand out its ids twice.
                return
            self._installed = fetch
            self._prefetched = block
        start, length = self._prefetched
        self._prefetched = None
        self._next, self._end, self._block_len = start, start + length, length

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
