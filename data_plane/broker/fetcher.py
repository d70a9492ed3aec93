"""Follower fetchers (Kafka's ``ReplicaFetcherManager`` / ``ReplicaFetcherThread``).

One `_Fetcher` task per source (leader) broker fetches every partition this
broker follows from that leader in one Fetch request: Fetch v16 (topic ids,
``CurrentLeaderEpoch``, ``LastFetchedEpoch``, and ``ReplicaState`` with the
replica id and broker epoch, KIP-903), ``replica.fetch.wait.max.ms`` /
``replica.fetch.min.bytes`` long polling, and an incremental fetch session
(KIP-227, `data_plane.broker.fetch_session_handler`): after the first full
fetch, a request carries only partitions whose fetch state changed and the
answer only partitions with news; a partition left out of an answer is
unchanged and is not handed to its partition core. What to ask for and what to do with
the answer is the partition core's (`Partition.fetch_request`,
`Partition.handle_fetch_response`: append, truncate on DivergingEpoch, HW from
the leader, back off or wait for metadata on errors). This module only
groups partitions by leader, moves kio messages, sleeps, and applies the
follower replication throttle (KIP-73, `data_plane.broker.replication_quotas`):
a throttled partition this broker is not in the ISR of is left out of the
request while the follower rate is over its bound.

`ReplicaFetcherManager` rebuilds the groups after every applied image: a
partition whose leader moved leaves one fetcher and joins another; a fetcher
left with no partitions stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable

from kio.schema.fetch.v16 import response as fetch_resp

from data_plane.api.encoders import (
    REPLICA_FETCH_VERSION,
    ReplicaFetchPartition,
    encode_replica_fetch_request,
)
from data_plane.broker.fetch_session_handler import FollowerFetchSession, WantedPartition
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.broker.waits import wait_event
from data_plane.replication.types import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResult,
    Role,
    TopicPartition,
)
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity, KafkaProtocolClient
from raftlog.net.errors import ErrorCode, NetError

__all__ = ("ClientFactory", "ReplicaFetcherManager")

log = logging.getLogger(__name__)

ClientFactory = Callable[[str, int], KafkaProtocolClient]

FETCH_KEY = 1
FETCH_VERSION = REPLICA_FETCH_VERSION
# replica.fetch.response.max.bytes (Kafka's default).
_RESPONSE_MAX_BYTES = 10 * 1024 * 1024
# `_Fetcher._build` walks every followed partition at least this often.
_FULL_BUILD_INTERVAL_MS = 1_000


def _default_client(host: str, port: int, security: ConnectionSecurity = PLAINTEXT_SECURITY
                    ) -> KafkaProtocolClient:
    return KafkaProtocolClient(
        host, port, client_id="raftlog-replica-fetcher", request_timeout_ms=10_000,
        connect_timeout_ms=3_000, security=security,
    )


def fetcher_client_factory(security: ConnectionSecurity) -> ClientFactory:
    """The fetchers' clients, connecting as ``security`` says (the
    inter-broker listener's TLS and SASL settings)."""
    return functools.partial(_default_client, security=security)


class ReplicaFetcherManager:
    """Keeps one fetcher per leader broker for the partitions this broker follows."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        listener_name: str = "PLAINTEXT",
        client_factory: ClientFactory = _default_client,
    ) -> None:
        self.replicas = replicas
        self.listener_name = listener_name
        self._client_factory = client_factory
        self._fetchers: dict[int, _Fetcher] = {}
        self._closed = False

    def start(self) -> None:
        """Follow metadata changes from now on and start fetching. On the event loop."""
        self.replicas.add_listener(self.rebuild)
        self.rebuild()

    @property
    def fetchers(self) -> dict[int, frozenset[TopicPartition]]:
        """Leader id -> partitions fetched from it (for tests and status)."""
        return {leader: frozenset(f.partitions) for leader, f in self._fetchers.items()}

    def rebuild(self) -> None:
        """Regroup followed partitions by leader (after every metadata change)."""
        if self._closed:
            return
        groups: dict[int, set[TopicPartition]] = {}
        for key, hosted in self.replicas.partitions.items():
            p = hosted.partition
            if p.role is Role.FOLLOWER and p.leader_id >= 0:
                groups.setdefault(p.leader_id, set()).add(key)
        image = self.replicas.metadata.image
        for leader_id in list(self._fetchers):
            if leader_id not in groups:
                self._fetchers.pop(leader_id).stop()
        for leader_id, keys in groups.items():
            address = self._address(leader_id)
            fetcher = self._fetchers.get(leader_id)
            if fetcher is not None and fetcher.address != address:
                self._fetchers.pop(leader_id).stop()
                fetcher = None
            if fetcher is None:
                if address is None:
                    log.warning("leader %d has no %s endpoint in the metadata",
                                leader_id, self.listener_name)
                    continue
                fetcher = _Fetcher(self.replicas, leader_id, address,
                                   self._client_factory(*address))
                self._fetchers[leader_id] = fetcher
                fetcher.start()
            fetcher.partitions = keys
            fetcher.topic_ids = {
                key: tid for key in keys
                if (tid := image.topic_ids.get(key[0])) is not None
            }
            fetcher.rebuild_all()
            fetcher.wake()

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.replicas.metadata.image.brokers.get(broker_id)
        if broker is None or not broker.listeners:
            return None
        chosen = next((e for e in broker.listeners if e.name == self.listener_name),
                      broker.listeners[0])
        return chosen.host, chosen.port

    async def close(self) -> None:
        self._closed = True
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetcher in fetchers:
            fetcher.stop()
        await asyncio.gather(*(f.wait_stopped() for f in fetchers), return_exceptions=True)


class _Fetcher:
    """The fetch loop for one leader broker."""

    def __init__(
        self, replicas: ReplicaManager, leader_id: int, address: tuple[str, int],
        client: KafkaProtocolClient,
    ) -> None:
        self.replicas = replicas
        self.leader_id = leader_id
        self.address = address
        self.client = client
        self.partitions: set[TopicPartition] = set()
        self.topic_ids: dict[TopicPartition, uuid.UUID] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: KIP-227 session with this leader (one per fetcher, as Kafka's
        #: ReplicaFetcherThread keeps one FetchSessionHandler).
        self.session = FollowerFetchSession()
        # What the next request asks for, kept between fetches and rebuilt
        # only where something may have changed (`_build`): key -> the
        # partition's request, key -> (topic id, wire entry), topic id -> name.
        self._requests: dict[TopicPartition, FetchPartition] = {}
        self._wanted: dict[TopicPartition, WantedPartition] = {}
        self._names: dict[uuid.UUID, str] = {}
        # Keys to rebuild: those an answer touched, and those without a
        # request last time (backing off, fenced). None: all of them.
        self._stale: set[TopicPartition] | None = None
        self._held: set[TopicPartition] = set()
        # Partitions whose ``_wanted`` entry was set or dropped since the
        # session last built a request (None: compare them all).
        self._dirty: dict[TopicPartition, None] | None = None
        self._next_full_build_ms = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.close()

    async def _sleep(self, seconds: float) -> None:
        await wait_event(self._wake, seconds)  # cancel-safe, unlike wait_for on 3.11
        self._wake.clear()

    def _backoff_s(self) -> float:
        return int(self.replicas.broker_config["replica.fetch.backoff.ms"]) / 1000.0

    async def _run(self) -> None:
        while True:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                # An answer applied only in part: start the next session from scratch.
                self.session.reset()
                self.rebuild_all()
                log.exception("fetcher for leader %d failed; backing off", self.leader_id)
                await self._sleep(self._backoff_s())

    def rebuild_all(self) -> None:
        """Build every partition's request afresh next time (metadata changed)."""
        self._stale = None

    def _build(self) -> dict[TopicPartition, FetchPartition]:
        """Each followed partition's next request (`Partition.fetch_request`),
        and its wire entry in ``_wanted``.

        A follower fetches every partition it follows from this leader, most
        of them idle. Only an answer (append, truncation, backoff) or
        metadata (`rebuild_all`) changes what a partition asks for, so only
        the partitions the last answer named, and those that had no request
        (backing off), are rebuilt; a full pass runs after metadata changes
        and at least every `_FULL_BUILD_INTERVAL_MS` (the log start offset a
        follower reports also moves with its own retention).
        """
        now = self.replicas.now_ms()
        if self._stale is None or now >= self._next_full_build_ms:
            self._requests, self._wanted, self._names = {}, {}, {}
            self._held = set()
            keys: set[TopicPartition] = self.partitions
            self._next_full_build_ms = now + _FULL_BUILD_INTERVAL_MS
            self._dirty = None
        else:
            keys = self._stale | self._held
        self._stale = set()
        requests, wanted, dirty = self._requests, self._wanted, self._dirty
        for key in keys:
            request = self._request_for(key, now)
            if request is None:
                self._held.add(key)
                requests.pop(key, None)
                wanted.pop(key, None)
                if dirty is not None:
                    dirty[key] = None
                continue
            self._held.discard(key)
            if requests.get(key) is request:
                continue  # the same object: its entry stands
            if dirty is not None:
                dirty[key] = None
            requests[key] = request
            topic_id = self.topic_ids[key]
            self._names[topic_id] = key[0]
            wanted[key] = (topic_id, ReplicaFetchPartition(
                partition=key[1], current_leader_epoch=request.current_leader_epoch,
                fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch,
                log_start_offset=request.log_start_offset, partition_max_bytes=request.max_bytes,
            ))
        return requests

    def _request_for(self, key: TopicPartition, now: int) -> FetchPartition | None:
        if key not in self.partitions or key not in self.topic_ids:
            return None
        hosted = self.replicas.get(key)
        if hosted is None:
            return None
        p = hosted.partition
        if p.role is not Role.FOLLOWER or p.leader_id != self.leader_id:
            return None
        quota = self.replicas.replication_quotas.follower
        if (quota.active and quota.is_throttled(key)
                and self.replicas.metadata.broker_id not in p.isr
                and quota.is_quota_exceeded(now)):
            # KIP-73 (Kafka's shouldFollowerThrottle): a catching-up replica
            # of a throttled partition sits out fetches while the follower
            # rate is over its bound; held, it is looked at again every build.
            return None
        return p.fetch_request(now)

    async def _fetch_once(self) -> None:
        sent = self._build()
        if not sent:
            # Everything backs off, is fenced, or awaits metadata: the wake-up
            # comes from a metadata change, the timeout ends a backoff.
            await self._sleep(min(self._backoff_s(), 0.1))
            return
        sent = dict(sent)  # this request's, whatever later builds do
        names = self._names
        config = self.replicas.broker_config
        # KIP-227: after the first (full) fetch, only partitions whose fetch
        # state changed; the leader still serves (or refreshes, when idle)
        # every partition of the session.
        session_request = self.session.build(self._wanted, self._dirty)
        self._dirty = {}
        by_topic: dict[uuid.UUID, list[ReplicaFetchPartition]] = {}
        for topic_id, partition in session_request.send.values():
            by_topic.setdefault(topic_id, []).append(partition)
        forgotten: dict[uuid.UUID, list[int]] = {}
        for topic_id, index in session_request.forgotten:
            forgotten.setdefault(topic_id, []).append(index)
        metadata = self.replicas.metadata
        # Hand-encoded (data_plane.api.encoders): one request per appended
        # batch per follower, on every acks=all produce's critical path.
        request = encode_replica_fetch_request(
            replica_id=metadata.broker_id, replica_epoch=metadata.broker_epoch,
            max_wait_ms=int(config["replica.fetch.wait.max.ms"]),
            min_bytes=int(config["replica.fetch.min.bytes"]),
            max_bytes=_RESPONSE_MAX_BYTES,
            topics=list(by_topic.items()),
            session_id=session_request.session_id,
            session_epoch=session_request.session_epoch,
            forgotten_topics=list(forgotten.items()),
        )
        try:
            response = await self.client.send_encoded(FETCH_KEY, FETCH_VERSION, request)
        except (NetError, OSError) as e:
            # The leader may or may not have moved the session on: start over.
            self.session.reset()
            log.info("fetch from leader %d failed: %r", self.leader_id, e)
            await self._sleep(self._backoff_s())
            return
        except BaseException:
            self.session.reset()  # cancelled mid-request: the answer is lost
            raise
        assert isinstance(response, fetch_resp.FetchResponse)
        error = ErrorCode(response.error_code)
        if not self.session.handle_response(session_request, error, int(response.session_id)):
            log.info("fetch from leader %d: %s", self.leader_id, error.name)
            # A lost incremental session is retried at once with a full
            # fetch (which cannot meet a session error); anything else backs off.
            if session_request.is_full or not self.session.is_session_error(error):
                await self._sleep(self._backoff_s())
            return
        self._apply(sent, names, response)

    def _apply(
        self,
        sent: dict[TopicPartition, FetchPartition],
        names: dict[uuid.UUID, str],
        response: fetch_resp.FetchResponse,
    ) -> None:
        now = self.replicas.now_ms()
        quota = self.replicas.replication_quotas.follower
        throttled = quota.active
        for topic in response.responses:
            name = names.get(topic.topic_id) if topic.topic_id is not None else None
            if name is None:
                continue
            for part in topic.partitions:
                key = (name, int(part.partition_index))
                if self._stale is not None:
                    self._stale.add(key)
                request = sent.get(key)
                hosted = self.replicas.get(key)
                if request is None or hosted is None:
                    continue
                diverging = part.diverging_epoch
                error = part.error_code  # kio reads it as an ErrorCode already
                result = FetchPartitionResult(
                    error=error if type(error) is ErrorCode else ErrorCode(error),
                    high_watermark=int(part.high_watermark),
                    log_start_offset=int(part.log_start_offset),
                    records=bytes(part.records or b""),
                    diverging_epoch=(
                        EpochEndOffset(int(diverging.epoch), int(diverging.end_offset))
                        if diverging.epoch >= 0 or diverging.end_offset >= 0 else None
                    ),
                    leader_id=int(part.current_leader.leader_id),
                    leader_epoch=int(part.current_leader.leader_epoch),
                )
                if throttled and result.records and quota.is_throttled(key):
                    quota.record(len(result.records), now)
                partition = hosted.partition
                hw_before = partition.high_watermark
                outcome = partition.handle_fetch_response(request, result, now)
                if partition.high_watermark != hw_before:
                    # Consumers long-polling this follower (KIP-392) may read more.
                    self.replicas.on_follower_high_watermark(key)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("%s from leader %d: %s", key, self.leader_id, outcome.value)
