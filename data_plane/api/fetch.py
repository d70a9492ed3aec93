"""Fetch (v4-16) for consumers and followers.

Versions differ in how they name things, not in what they mean: topics by
name (< v13) or id (v13+); the replica id top-level (< v15) or in
``ReplicaState`` with the broker epoch (v15+, KIP-903). Everything is mapped
to `FetchPartition` and served by the replica manager (long poll in the fetch
purgatory, KIP-320 epoch checks and DivergingEpoch in the partition core).
Isolation (KIP-98): READ_COMMITTED consumers read only below the last stable
offset and get the aborted transactions overlapping their read, so they can
drop aborted records; every answer reports the LSO.
Fetch sessions (KIP-227, `data_plane.api.fetch_session`): a request with
session epoch -1 (librdkafka, kafka-python) is a full fetch answered with
session id 0, as before sessions existed. Epoch 0 creates a session;
later requests carry only what changed and the answer only partitions with
news. Every fetch still serves the session's partitions, so follower fetch
state and the ISR move as with full requests, with one shortcut for a
follower's idle partitions (most of its session: ``__consumer_offsets``):
- an idle partition is served by refreshing the leader's stored idle answer
  (it records the fetch as serving would, `_Served.idle`);
- once refreshed, it is parked (`_Parking`): later fetches skip it, so a
  fetch costs O(partitions that moved), not O(session). The replica manager
  unparks it when it changes (and wakes a long poll of the session); the
  ISR check first records the fetches that skipped it
  (`IdleFollowerFetch.settle`); and once a second a fetch unparks them all,
  so anything that moved unannounced is seen.

ACLs (with an authorizer, `data_plane.api.authorization`), as Kafka's
KafkaApis.handleFetchRequest: a follower (replica id >= 0) needs
CLUSTER_ACTION on the cluster, else every partition of the fetch (and of
its session) is answered TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on
each topic (checked once per topic), else that topic's partitions are
TOPIC_AUTHORIZATION_FAILED. Refused partitions are never read: their answer
is the error with no records. An unknown topic id stays UNKNOWN_TOPIC_ID
(checked first, as Kafka); an unknown partition of an unreadable topic is
TOPIC_AUTHORIZATION_FAILED (checked before existence, so it tells nothing).

Client quotas (``consumer_byte_rate``, `data_plane.broker.client_quotas`),
for consumers only (a follower's fetch is never client-throttled):
- a consumer already over its bound is answered at once with no partitions
  and the throttle time (Kafka's throttled fetch answer). Only what
  `FetchSessionCache.new_context` did stays done: an incremental session
  moved to its next epoch with its partitions' new fetch state, and as
  nothing was sent, the next fetch answers them as if this one had not
  happened. A session this fetch had just created is dropped and the answer
  carries session id 0, as Kafka creates none for a throttled full fetch
  (the client then asks for a new one);
- otherwise the fetch's max bytes are capped at what the bound allows in a
  quota window (Kafka's getMaxValueInQuotaWindow), and once read, the
  answer's record bytes count against the client's rate before the answer
  is built. If that takes it over, they are taken back and the answer goes
  out empty, as above (Kafka's unrecord). One exception keeps a consumer
  moving: the first answer of an empty window goes out whole, throttled, even
  if it is bigger than the window allows (one batch always goes whole, KIP-74).
Either way a throttled consumer's connection is muted for the throttle time
(KIP-219). Fetch v8+ is answered at once (the client backs off itself); an
older version's answer is held for the throttle time, as Kafka does.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from data_plane.api.common import NO_THROTTLE_MS, BrokerApiContext
from data_plane.api.encoders import FetchPartitionData, NodeEndpoint, encode_fetch_response
from data_plane.api.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchContext,
    FetchSession,
    PartitionFetchState,
    SessionKey,
    SessionMode,
)
from data_plane.broker.client_quotas import ClientQuotaManager
from data_plane.broker.replica_manager import FetchParams
from data_plane.broker.request_quotas import RequestQuota
from data_plane.replication.partition import IdleFollowerFetch
from data_plane.replication.types import (
    CONSUMER_REPLICA_ID,
    FetchPartition,
    FetchPartitionResult,
    TopicPartition,
)
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from raftlog.net import EncodedBody, RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("MAX_FETCH_WAIT_MS", "handle_fetch")

MAX_FETCH_WAIT_MS: Final = 60_000
# KIP-219: from this version the client honours throttle_time_ms itself.
_CLIENT_THROTTLES_FROM_VERSION: Final = 8
# How often a follower session's parked partitions are all looked at again.
_VERIFY_PARKED_MS: Final = 1_000
READ_COMMITTED: Final = 1
_INT32_MAX: Final = 2**31 - 1
_NONE: Final = ErrorCode.none.value
_ZERO_UUID: Final = uuid.UUID(int=0)  # kio reads the zero topic id as None
# Leader hints ride along with these errors (Fetch v12+ CurrentLeader; from v16
# the leaders' addresses too, NodeEndpoints: KIP-951), as in Kafka. Not with
# UNKNOWN_LEADER_EPOCH: the client knows a newer epoch than this broker does.
_HINTED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


async def handle_fetch(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if version >= 15:
        replica_id = int(request.replica_state.replica_id)
        replica_epoch = int(request.replica_state.replica_epoch)
    else:
        replica_id = int(getattr(request, "replica_id", CONSUMER_REPLICA_ID))
        replica_epoch = -1
    if replica_id < 0:
        replica_id = CONSUMER_REPLICA_ID
    elif ctx.clock is not None:
        RequestQuota.exempt(ctx)  # a follower's fetch is not a client's (KIP-124)
    read_committed = (replica_id < 0
                      and int(getattr(request, "isolation_level", 0)) == READ_COMMITTED)
    # KIP-392: from v11 a consumer may read from a follower, and names its rack.
    any_replica = replica_id < 0 and version >= 11
    by_id = version >= 13
    requested: dict[SessionKey, PartitionFetchState] = {}
    for topic in request.topics:
        label: uuid.UUID | str = (
            (topic.topic_id if topic.topic_id is not None else _ZERO_UUID) if by_id
            else str(topic.topic))
        for part in topic.partitions:
            requested[(label, int(part.partition))] = PartitionFetchState(
                fetch_offset=int(part.fetch_offset),
                current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
                last_fetched_epoch=int(getattr(part, "last_fetched_epoch", -1)),
                log_start_offset=int(getattr(part, "log_start_offset", -1)),
                max_bytes=max(0, int(part.partition_max_bytes)),
            )
    context = api.fetch_sessions.new_context(
        session_id=int(getattr(request, "session_id", INVALID_SESSION_ID)),
        session_epoch=int(getattr(request, "session_epoch", FINAL_EPOCH)),
        replica_id=replica_id,
        uses_topic_ids=by_id,
        requested=requested,
        forgotten=_forgotten(request, by_id),
        now_ms=api.replicas.now_ms(),
    )
    if isinstance(context, ErrorCode):
        return EncodedBody(encode_fetch_response(
            version, [], error_code=context.value, session_id=INVALID_SESSION_ID,
            throttle_time_ms=NO_THROTTLE_MS,
        ), ())
    max_bytes = max(int(getattr(request, "max_bytes", _INT32_MAX)), 0)
    quotas: ClientQuotaManager | None = None
    if replica_id < 0 and api.replicas.client_quotas.fetch.enabled:
        quotas = api.replicas.client_quotas.fetch
        client_id = ctx.client_id or ""
        throttle_ms = quotas.throttle_ms(client_id, api.replicas.now_ms(), user=ctx.user)
        if throttle_ms:
            return _throttled_at_once(api, context, version, throttle_ms)
        window_bytes = quotas.max_value_in_window(client_id, user=ctx.user)
        if window_bytes is not None:
            # At least 1: the first batch still goes whole (KIP-74) when one
            # window allows less (quota.window.num=1 allows nothing).
            max_bytes = min(max_bytes, max(int(window_bytes), 1))
    # ACLs: a follower's right is one answer for the whole fetch; a
    # consumer's is looked up once per topic (`readable`: None, no authorizer).
    follower_denied = False
    readable: dict[str, bool] | None = None
    if api.authorization is not None:
        if replica_id >= 0:
            follower_denied = not api.authorize(ctx, AclOperation.CLUSTER_ACTION,
                                                ResourceType.CLUSTER, CLUSTER_NAME)
        else:
            readable = {}
    image = api.image
    requests: dict[TopicPartition, FetchPartition] = {}
    # key -> (topic name or None, validation error or None, session memo), in
    # serve order.
    served: list[tuple[SessionKey, str | None, ErrorCode | None, _Served | None]] = []
    incremental = context.mode is SessionMode.INCREMENTAL
    now_ms = api.replicas.now_ms()
    # A follower session's idle partitions are parked (see the module docstring).
    parking: _Parking | None = None
    session = context.session
    if follower_denied:
        if session is not None and isinstance(session.parking, _Parking):
            # Every session partition answers the refusal: none stays parked.
            session.parking.unpark_all()
    elif incremental and replica_id >= 0 and session is not None:
        if not isinstance(session.parking, _Parking):
            session.parking = _Parking(session)
        parking = session.parking
        parking.begin(now_ms, image, replica_epoch)  # before `entries`: it may unpark
    for key, state, cached in context.entries:
        if parking is not None and cached is not None:
            # The partitions this request named had their memos cleared
            # (`FetchSessionCache.new_context`): an idle memo is for one it
            # left out.
            was_idle = cached.memo
            if isinstance(was_idle, _Served) and was_idle.idle is not None:
                if ((was_idle.image is image or was_idle.still_named_in(image, key[0]))
                        and was_idle.request.replica_epoch == replica_epoch
                        and was_idle.idle.refresh(now_ms)):
                    api.replicas.park(parking.park(key, cached, was_idle), parking)
                    continue
                was_idle.idle = None
        label, index = key
        if isinstance(label, uuid.UUID):
            found = image.topics.get(label)
            name = found.name if found is not None else None
        else:
            name = label
        error: ErrorCode | None = None
        memo: _Served | None = None
        if follower_denied or (readable is not None and name is not None
                               and not _may_read(api, ctx, readable, name)):
            error = ErrorCode.topic_authorization_failed
            if cached is not None:
                # The session last sent this partition's error; its memo (the
                # last result, maybe unchanged) must not leave it out next time.
                cached.memo = None
        elif name is None:
            error = ErrorCode.unknown_topic_id
        elif index < 0:
            error = ErrorCode.unknown_topic_or_partition
        elif state.fetch_offset < 0:
            error = ErrorCode.offset_out_of_range
        elif cached is not None:
            memo = cached.memo if isinstance(cached.memo, _Served) else None
            if memo is None or not memo.serves(name, replica_id, replica_epoch, read_committed,
                                               any_replica):
                memo = cached.memo = _Served(name, image, _fetch_partition(
                    state, replica_id, replica_epoch, read_committed, any_replica))
            requests[(name, index)] = memo.request
        else:
            requests[(name, index)] = _fetch_partition(
                state, replica_id, replica_epoch, read_committed, any_replica)
        served.append((key, name, error, memo))
    params = FetchParams(
        max_wait_ms=min(max(int(request.max_wait.total_seconds() * 1000), 0), MAX_FETCH_WAIT_MS),
        min_bytes=max(int(request.min_bytes), 0),
        max_bytes=max_bytes,
        from_follower=replica_id >= 0,
        client_rack=(str(request.rack_id) or None) if any_replica else None,
    )
    if parking is not None and not parking.by_partition:
        parking = None
    results = await api.replicas.fetch(requests, params, parking) if requests or parking else {}
    if parking is not None:
        # A parked partition that changed while the fetch waited was read:
        # answer it like the others.
        served.extend((key, memo.name, None, memo)
                      for partition, (key, memo) in parking.woken_memos.items()
                      if partition in results and partition not in requests)
    if replica_id >= 0 and api.replicas.replication_quotas.leader.active:
        # KIP-73: a throttled partition's records sent to a follower count
        # against the leader replication throttle.
        api.replicas.record_leader_replication(results)
    throttle_ms = 0
    if quotas is not None:
        # Counted before the answer is built: an answer that would take the
        # client over its bound goes out empty (Kafka's throttled fetch), and
        # the session is left as if it had not been served (nothing was sent).
        throttle_ms, serve = quotas.record_unless_over(
            ctx.client_id or "", sum(len(r.records) for r in results.values() if r.records),
            api.replicas.now_ms(), user=ctx.user)
        if not serve:
            return _throttled_at_once(api, context, version, throttle_ms)
    if ctx.clock is not None and replica_id < 0:
        # KIP-124: the answer carries the larger of the two throttle times.
        throttle_ms = max(throttle_ms, api.replicas.request_quota.charge(ctx))
    # Response topics in serve order; an incremental answer leaves out the
    # partitions with nothing new (KIP-227).
    topics_out: dict[uuid.UUID | str, list[FetchPartitionData]] = {}
    endpoints: dict[int, NodeEndpoint] = {}  # the hinted leaders' (KIP-951)
    for key, name, error, memo in served:
        label, index = key
        if error is not None:
            result = FetchPartitionResult(error)
        else:
            assert name is not None
            result = results.get((name, index)) or FetchPartitionResult(
                ErrorCode.unknown_topic_or_partition)
        # An error (leader hints ride only on errors), records or a divergence.
        must_respond = (result.error is not ErrorCode.none or bool(result.records)
                        or result.diverging_epoch is not None)
        if memo is not None:
            if replica_id >= 0 and not must_respond:
                # Idle next time too unless something moves (refreshed then).
                memo.idle = api.replicas.idle_fetch((memo.name, index), memo.request, result)
            if (incremental and result is memo.last_result and not must_respond
                    and key not in context.requested):
                # The answer `maybe_include` last left out or recorded as
                # sent (a leader hands back the same result for an idle
                # follower fetch): left out again.
                continue
            memo.last_result = result
        # Decide before building the answer's entry: most of an incremental
        # follower fetch is idle partitions that are left out.
        if context.maybe_include(
            key,
            high_watermark=result.high_watermark,
            last_stable_offset=(result.last_stable_offset if result.last_stable_offset >= 0
                                else result.high_watermark),
            log_start_offset=result.log_start_offset,
            must_respond=must_respond,
        ):
            topics_out.setdefault(label, []).append(
                _partition(api, ctx, name, index, result, read_committed, endpoints))
    # Hand-encoded (data_plane.api.encoders): a follower's fetch answer is on
    # every acks=all produce's critical path.
    record_bytes = tuple(
        (label, size) for label, parts in topics_out.items()
        if (size := sum(len(p.records) for p in parts if p.records))
    )
    node_endpoints = tuple(endpoints.values())
    if throttle_ms:  # the first answer of an empty window, served whole
        return EncodedBody(encode_fetch_response(
            version, list(topics_out.items()), error_code=_NONE,
            session_id=context.session_id, throttle_time_ms=throttle_ms,
            node_endpoints=node_endpoints,
        ), record_bytes, throttle_ms=throttle_ms,
            delay_response=version < _CLIENT_THROTTLES_FROM_VERSION)
    return EncodedBody(encode_fetch_response(
        version, list(topics_out.items()), error_code=_NONE, session_id=context.session_id,
        throttle_time_ms=NO_THROTTLE_MS, node_endpoints=node_endpoints,
    ), record_bytes)


def _may_read(api: BrokerApiContext, ctx: RequestContext, readable: dict[str, bool],
              name: str) -> bool:
    """READ on topic ``name``, remembered in ``readable`` for this fetch."""
    allowed = readable.get(name)
    if allowed is None:
        allowed = readable[name] = api.authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)
    return allowed


def _throttled_at_once(
    api: BrokerApiContext, context: FetchContext, version: int, throttle_ms: int,
) -> EncodedBody:
    """A consumer over its quota before serving: no partitions, the throttle
    time, the connection muted (see the module docstring)."""
    session_id = context.session_id
    if context.mode is SessionMode.NEW_SESSION and context.session is not None:
        api.fetch_sessions.remove(session_id)
        session_id = INVALID_SESSION_ID
    return EncodedBody(encode_fetch_response(
        version, [], error_code=_NONE, session_id=session_id, throttle_time_ms=throttle_ms,
    ), (), throttle_ms=throttle_ms, delay_response=version < _CLIENT_THROTTLES_FROM_VERSION)


class _Served:
    """A session partition's memo (`CachedPartition.memo`): the partition
    request built from its cached state, served on every fetch until that
    state changes, and the last result `maybe_include` was asked about.

    ``idle`` (follower sessions): the leader's stored idle answer
    (`IdleFollowerFetch`) while the partition has nothing to say. The next
    incremental fetch only refreshes it (the follower's fetch state moves as
    if served) and parks the partition (`_Parking`); the answer would leave
    it out anyway. Anything that changes the answer (an append, a HW, log
    start or epoch move, a new request state) ends it.
    """

    __slots__ = ("idle", "image", "last_result", "name", "request")

    def __init__(self, name: str, image: Any, request: FetchPartition) -> None:
        self.name = name
        # A metadata image in which the session key names topic ``name``.
        self.image = image
        self.request = request
        self.last_result: FetchPartitionResult | None = None
        self.idle: IdleFollowerFetch | None = None

    def still_named_in(self, image: Any, label: uuid.UUID | str) -> bool:
        """Whether ``label`` still names topic ``name`` in ``image`` (a newer
        image than the one last checked); remembers ``image`` if so."""
        if _topic_name(image, label) != self.name:
            return False
        self.image = image
        return True

    def serves(self, name: str, replica_id: int, replica_epoch: int, read_committed: bool,
               any_replica: bool) -> bool:
        request = self.request
        return (self.name == name and request.replica_id == replica_id
                and request.replica_epoch == replica_epoch
                and request.read_committed == read_committed
                and request.from_any_replica == any_replica)


class _Parking:
    """A follower session's parked partitions (`FetchParking` for the
    replica manager, `IdleParking` for the partitions' idle answers).

    A session partition whose stored idle answer was just refreshed is
    parked (`CachedPartition.parked`): the session's entries leave it out,
    so fetches neither serve nor refresh it. A request that names or
    forgets it unparks it (`FetchSessionCache.new_context`); so does a
    change the replica manager reports (`unpark`), and `begin` unparks all
    once a second and whenever the metadata image or the follower's broker
    epoch differs from the last fetch's. The fetch handler then serves (or
    refreshes and parks again) each one as before."""

    __slots__ = ("__weakref__", "by_partition", "image", "replica_epoch", "session",
                 "verify_at_ms", "woken", "woken_memos")

    def __init__(self, session: FetchSession) -> None:
        self.session = session
        # Partition -> (session key, memo, session entry) while parked.
        self.by_partition: dict[TopicPartition, tuple[SessionKey, _Served, CachedPartition]] = {}
        # Unparked by a change during the current fetch (`FetchParking.woken`).
        self.woken: dict[TopicPartition, FetchPartition] = {}
        self.woken_memos: dict[TopicPartition, tuple[SessionKey, _Served]] = {}
        self.image: object = None
        self.replica_epoch: int | None = None
        self.verify_at_ms = 0

    def begin(self, now_ms: int, image: object, replica_epoch: int) -> None:
        """A fetch of the session starts: forget the last one's woken
        partitions; unpark everything if it is time to look again."""
        if self.woken:
            self.woken = {}
            self.woken_memos = {}
        if (now_ms >= self.verify_at_ms or image is not self.image
                or replica_epoch != self.replica_epoch):
            self.unpark_all()
            self.image = image
            self.replica_epoch = replica_epoch
            self.verify_at_ms = now_ms + _VERIFY_PARKED_MS

    def unpark_all(self) -> None:
        """Every parked partition is served (or refused) again by the next fetch."""
        for _, _, cached in self.by_partition.values():
            cached.parked = False
        self.by_partition.clear()

    def park(self, key: SessionKey, cached: CachedPartition, memo: _Served) -> TopicPartition:
        """Skip ``key`` (its memo's idle answer was just refreshed); returns
        the partition to register with the replica manager."""
        assert memo.idle is not None
        partition = (memo.name, key[1])
        cached.parked = True
        self.by_partition[partition] = (key, memo, cached)
        memo.idle.parked_by = self
        return partition

    def _entry(self, partition: TopicPartition) -> tuple[SessionKey, _Served, CachedPartition] | None:
        entry = self.by_partition.get(partition)
        if entry is None or not entry[2].parked or entry[2].memo is not entry[1]:
            return None
        return entry

    def unpark(self, key: TopicPartition) -> bool:
        entry = self._entry(key)
        self.by_partition.pop(key, None)
        if entry is None:
            return key in self.woken  # unparked already; woken during this fetch?
        skey, memo, cached = entry
        cached.parked = False
        if memo.idle is not None and memo.idle.parked_by is self:
            memo.idle.unparked(self.session.last_used_ms)
        self.woken[key] = memo.request
        self.woken_memos[key] = (skey, memo)
        return True

    def parked_fetch_ms(self, idle: IdleFollowerFetch) -> int | None:
        entry = self._entry(idle.partition.key)
        if entry is None or entry[1].idle is not idle:
            return None
        return self.session.last_used_ms


def _topic_name(image: Any, label: uuid.UUID | str) -> str | None:
    if isinstance(label, uuid.UUID):
        found = image.topics.get(label)
        return found.name if found is not None else None
    return label


def _fetch_partition(
    state: PartitionFetchState, replica_id: int, replica_epoch: int, read_committed: bool,
    any_replica: bool,
) -> FetchPartition:
    return FetchPartition(
        fetch_offset=state.fetch_offset,
        current_leader_epoch=state.current_leader_epoch,
        last_fetched_epoch=state.last_fetched_epoch,
        max_bytes=state.max_bytes,
        replica_id=replica_id,
        replica_epoch=replica_epoch,
        log_start_offset=state.log_start_offset,
        read_committed=read_committed,
        from_any_replica=any_replica,
    )


def _forgotten(request: Any, by_id: bool) -> list[SessionKey]:
    """``ForgottenTopicsData`` (v7+) as session keys."""
    out: list[SessionKey] = []
    for topic in getattr(request, "forgotten_topics_data", ()) or ():
        label: uuid.UUID | str = (
            (topic.topic_id if topic.topic_id is not None else _ZERO_UUID) if by_id
            else str(topic.topic))
        out.extend((label, int(index)) for index in topic.partitions)
    return out


def _partition(
    api: BrokerApiContext, ctx: RequestContext, name: str | None, index: int,
    result: FetchPartitionResult, read_committed: bool, endpoints: dict[int, NodeEndpoint],
) -> FetchPartitionData:
    lso = result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark
    diverging = result.diverging_epoch
    current_leader = None
    if result.error in _HINTED and name is not None:
        # The leader's address rides along in the answer's NodeEndpoints.
        current_leader = api.leader_hint((name, index), ctx.listener_name, endpoints)
    return FetchPartitionData(
        partition_index=index,
        error_code=result.error,  # an IntEnum: no `.value` lookup per partition
        high_watermark=result.high_watermark,
        last_stable_offset=lso,
        log_start_offset=result.log_start_offset,
        records=result.records,
        # Kafka sends null to READ_UNCOMMITTED consumers, a list otherwise.
        aborted_transactions=result.aborted_transactions if read_committed else None,
        preferred_read_replica=result.preferred_read_replica,
        diverging_epoch=(None if diverging is None
                         else (diverging.epoch, diverging.end_offset)),
        current_leader=current_leader,
    )
