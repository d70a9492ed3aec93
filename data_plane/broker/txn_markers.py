"""The transaction marker channel: WriteTxnMarkers to partition leaders (KIP-98).

Kafka's ``TransactionMarkerChannelManager``. The transaction coordinator
runtime hands it `TxnMarkerRequest` entries once the PREPARE_* record is
committed; the channel

- **groups** queued markers by the current leader of their partition (from
  the metadata image) and sends one WriteTxnMarkers request per leader at a
  time, over the inter-broker listener (one `KafkaProtocolClient` per
  broker, reused);
- **reports** every final per-partition outcome to ``on_written`` (NONE, or
  UNKNOWN_TOPIC_OR_PARTITION for a deleted partition, which Kafka also
  counts as written; or a fencing error INVALID_PRODUCER_EPOCH /
  TRANSACTION_COORDINATOR_FENCED, after which the transaction is no longer
  this coordinator's to finish);
- **retries** everything else (no leader, NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS, timeouts, a broken connection) after
  ``RETRY_BACKOFF_MS``, re-resolving the leader each time, until the marker
  is written or `drop_coordinator_epoch` removes it (the coordinator lost
  its partition: the new coordinator resends from its own log).

It makes no transaction decision: the coordinator decided, the channel only
delivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.write_txn_markers.v1 import request as wtm_req

from data_plane.api.build import build
from data_plane.broker.broker_clients import BrokerClients, endpoint
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.waits import wait_event
from data_plane.txn.markers import TxnMarkerRequest
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode

__all__ = ("FINAL_MARKER_ERRORS", "TxnMarkerChannel")

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 100
MARKER_REQUEST_TIMEOUT_MS = 30_000
#: Outcomes reported to the coordinator; every other error is retried.
FINAL_MARKER_ERRORS = frozenset({
    ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_producer_epoch,
    ErrorCode.producer_fenced, ErrorCode.transaction_coordinator_fenced,
})

OnWritten = Callable[[TxnMarkerRequest, ErrorCode], None]


class TxnMarkerChannel:
    """Delivers transaction markers to partition leaders (see the module docstring)."""

    def __init__(self, metadata: BrokerMetadata, listener_name: str, on_written: OnWritten,
                 *, security: ConnectionSecurity = PLAINTEXT_SECURITY) -> None:
        self.metadata = metadata
        self.listener_name = listener_name
        self.on_written = on_written
        self._queued: list[TxnMarkerRequest] = []
        self._in_flight: set[int] = set()
        self._clients = BrokerClients(metadata, listener_name, client_id="txn-marker-channel",
                                      request_timeout_ms=MARKER_REQUEST_TIMEOUT_MS, security=security)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="txn-marker-channel")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._sends):
            task.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        await self._clients.close()

    def enqueue(self, markers: tuple[TxnMarkerRequest, ...] | list[TxnMarkerRequest]) -> None:
        """Queue markers for delivery (the coordinator's records are committed)."""
        if markers:
            self._queued.extend(markers)
            self._wake.set()

    def drop_coordinator_epoch(self, partition_of: Callable[[str], int], partition: int,
                               coordinator_epoch: int) -> None:
        """Forget queued markers of a ``__transaction_state`` partition this
        broker no longer coordinates at ``coordinator_epoch``."""
        self._queued = [m for m in self._queued
                        if not (partition_of(m.transactional_id) == partition
                                and m.coordinator_epoch <= coordinator_epoch)]

    @property
    def queued(self) -> int:
        return len(self._queued)

    # ==== sending ===================================================================

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            self._dispatch()
            timeout = RETRY_BACKOFF_MS / 1000 if self._queued else None
            await wait_event(self._wake, timeout)  # cancel-safe (waits.py)

    def _dispatch(self) -> None:
        by_leader: dict[int, list[TxnMarkerRequest]] = {}
        keep: list[TxnMarkerRequest] = []
        for marker in self._queued:
            leader = self._leader_of(marker.topic, marker.partition)
            if leader is None:
                if self.metadata.image.topic_by_name(marker.topic) is None:
                    # The topic is gone: nothing to mark (Kafka counts it as written).
                    self.on_written(marker, ErrorCode.unknown_topic_or_partition)
                else:
                    keep.append(marker)
                continue
            if leader in self._in_flight:
                keep.append(marker)
            else:
                by_leader.setdefault(leader, []).append(marker)
        self._queued = keep
        for leader, markers in by_leader.items():
            self._in_flight.add(leader)
            task = asyncio.create_task(self._send(leader, markers),
                                       name=f"txn-markers-to-{leader}")
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    def _leader_of(self, topic: str, partition: int) -> int | None:
        image = self.metadata.image
        t = image.topic_by_name(topic)
        reg = None if t is None else t.partitions.get(partition)
        if reg is None or reg.leader < 0:
            return None
        broker = image.brokers.get(reg.leader)
        if broker is None or broker.fenced or endpoint(broker, self.listener_name) is None:
            return None
        return reg.leader

    async def _send(self, leader: int, markers: list[TxnMarkerRequest]) -> None:
        retry: list[TxnMarkerRequest] = []
        try:
            outcomes = await self._write(leader, markers)
            for marker in markers:
                error = outcomes.get((marker.producer_id, marker.topic, marker.partition),
                                     ErrorCode.unknown_server_error)
                if error in FINAL_MARKER_ERRORS:
                    self.on_written(marker, error)
                else:
                    log.info("marker for %s %s-%d to broker %d: %s; retrying",
                             marker.transactional_id, marker.topic, marker.partition,
                             leader, error.name)
                    retry.append(marker)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("WriteTxnMarkers to broker %d failed (%s); retrying", leader, e)
            retry = markers
            await self._clients.drop(leader)
        finally:
            self._in_flight.discard(leader)
        if retry:
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
            self._queued.extend(retry)
        self._wake.set()

    async def _write(self, leader: int, markers: list[TxnMarkerRequest]
                     ) -> dict[tuple[int, str, int], ErrorCode]:
        grouped: dict[tuple[int, int, bool, int], dict[str, list[int]]] = {}
        for m in markers:
            key = (m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch)
            grouped.setdefault(key, {}).setdefault(m.topic, []).append(m.partition)
        request = build(wtm_req.WriteTxnMarkersRequest, {"markers": [
            {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
             "coordinator_epoch": coordinator_epoch,
             "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
            for (pid, epoch, commit, coordinator_epoch), topics in grouped.items()]})
        client = self._clients.get(leader)
        assert client is not None  # _leader_of checked the broker and its endpoint
        response: Any = await client.send(request)
        out: dict[tuple[int, str, int], ErrorCode] = {}
        for result in response.markers:
            for topic in result.topics:
                for part in topic.partitions:
                    out[(int(result.producer_id), str(topic.name), int(part.partition_index))] = (
                        ErrorCode(int(part.error_code)))
        return out
