"""Incremental fetch sessions, broker side (KIP-227).

A Fetch request carries ``(session_id, session_epoch)``:

- ``(0, -1)``: a full fetch without a session (old clients, librdkafka,
  kafka-python). Served as it always was.
- ``(0, 0)``: a full fetch that creates a session. The answer carries the new
  session id, or 0 when the cache has no room (the client then keeps sending
  full fetches).
- ``(id, n > 0)``: an incremental fetch. The request lists only partitions
  added to the session or whose fetch state changed; ``ForgottenTopicsData``
  lists those leaving it. An unknown id is FETCH_SESSION_ID_NOT_FOUND, an
  epoch other than the one expected INVALID_FETCH_SESSION_EPOCH (a top-level
  error, no partitions). The expected epoch then moves on by one (from
  INT32_MAX it wraps to 1).
- ``(id, -1)`` closes the session and is served as a sessionless full fetch;
  ``(id, 0)`` closes it and creates a new one.

Every fetch serves the session's partitions with their cached request
state, so the leader's follower fetch state (LEO, lastCaughtUpTime, ISR
expansion and shrink) moves as it would with full requests. Only the answer
shrinks: an incremental answer names a partition only when it has something
to say (`FetchContext.maybe_include`). The one exception is a follower's
idle partitions, which the fetch handler parks (``CachedPartition.parked``):
fetches skip them until they change, and the fetches they skipped are
recorded when the ISR is next checked (`data_plane.api.fetch`).

Sessions are keyed per partition by the label the request version names
topics with: the topic id (v13+) or the name (older). Names are resolved by
the handler on every fetch, so a deleted topic answers its error each time.

The cache holds at most ``max.incremental.fetch.session.cache.slots``
sessions (0 turns sessions off: every ``(0, 0)`` is answered with id 0). A
new session takes the slot of the least recently used one if that has been
idle for ``min.incremental.fetch.session.eviction.ms``; otherwise a
follower's session may take the least recently used consumer's slot
(followers are "privileged" in Kafka's cache); otherwise it gets none.

Pure: no I/O, time comes in as ``now_ms``, ids from an injected `random.Random`.
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Final

from raftlog.net.errors import ErrorCode
from raftlog.values import value

__all__ = (
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionFetchState",
    "SessionKey",
    "SessionMode",
    "next_epoch",
)

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
_INT32_MAX: Final = 2**31 - 1

#: (topic id (v13+) or topic name, partition index).
SessionKey = tuple[uuid.UUID | str, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch`` (KIP-227: INT32_MAX wraps to 1, never 0)."""
    return 1 if epoch >= _INT32_MAX else epoch + 1


@value
class PartitionFetchState:
    """One partition's fields of a Fetch request, as the session caches them."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


class CachedPartition:
    """A session partition: its cached request and what this session last
    answered for it (None: never answered, so the next answer includes it).

    ``memo`` is the fetch handler's, cleared whenever the request changes:
    what it derived from ``request`` (`data_plane.api.fetch` keeps the
    partition request it serves, so an unchanged partition is served the
    same object on every fetch)."""

    __slots__ = ("memo", "parked", "request", "sent")

    def __init__(self, request: PartitionFetchState) -> None:
        self.request = request
        # (high watermark, last stable offset, log start offset) last sent.
        self.sent: tuple[int, int, int] | None = None
        self.memo: object = None
        #: Parked by the fetch handler: left out of the session's entries.
        #: A request that names or forgets the partition unparks it.
        self.parked = False


class FetchSession:
    """One client's session. ``epoch`` is the epoch its next incremental
    request must carry. ``partitions`` keeps request order (the serve order).
    ``parking`` is the fetch handler's (`data_plane.api.fetch`), like a
    partition's ``memo``: what it keeps about the partitions it parked
    (`CachedPartition.parked`)."""

    __slots__ = ("epoch", "last_used_ms", "parking", "partitions", "replica_id",
                 "session_id", "uses_topic_ids")

    def __init__(self, session_id: int, replica_id: int, uses_topic_ids: bool, now_ms: int) -> None:
        self.session_id = session_id
        self.replica_id = replica_id
        self.uses_topic_ids = uses_topic_ids
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.last_used_ms = now_ms
        self.partitions: dict[SessionKey, CachedPartition] = {}
        self.parking: object = None

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


class SessionMode(Enum):
    """How a fetch is answered."""

    SESSIONLESS = "sessionless"  # full answer, session id 0
    NEW_SESSION = "new_session"  # full answer, the new session's id (or 0: no room)
    INCREMENTAL = "incremental"  # only partitions with news


class FetchContext:
    """What one Fetch serves and how it answers (Kafka's ``FetchContext``).

    ``entries`` is every (key, request, session entry) to serve, in order,
    but the session's parked partitions, read when first asked for (the
    handler may unpark partitions before); the session entry (None without
    a session) is where the handler keeps its ``memo``. After serving, the
    handler asks `maybe_include` per partition; in a session that also
    records what was sent.
    """

    __slots__ = ("_entries", "mode", "requested", "session", "session_id")

    def __init__(
        self,
        mode: SessionMode,
        entries: list[tuple[SessionKey, PartitionFetchState, CachedPartition | None]] | None,
        session: FetchSession | None,
        requested: frozenset[SessionKey] = frozenset(),
    ) -> None:
        """``entries`` None: the session's unparked partitions."""
        self.mode = mode
        self._entries = entries
        self.session = session
        self.session_id = session.session_id if session is not None else INVALID_SESSION_ID
        #: The keys this request named (added or changed). Their session
        #: entries' memos were cleared (`FetchSessionCache.new_context`).
        self.requested = requested

    @property
    def entries(self) -> list[tuple[SessionKey, PartitionFetchState, CachedPartition | None]]:
        entries = self._entries
        if entries is None:
            assert self.session is not None
            entries = self._entries = _entries(self.session)
        return entries

    @property
    def partitions(self) -> list[tuple[SessionKey, PartitionFetchState]]:
        """Every (key, request) to serve, in order."""
        return [(key, state) for key, state, _ in self.entries]

    def maybe_include(
        self,
        key: SessionKey,
        *,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        must_respond: bool,
    ) -> bool:
        """Whether the answer names ``key``. ``must_respond``: it has records,
        an error, a diverging epoch or a leader hint. An incremental answer
        also names a partition the request named (added or changed: its
        client waits to hear about it) and one whose high watermark, last
        stable offset or log start offset differs from what this session last
        sent. A full answer names everything."""
        session = self.session
        if session is None:
            return True
        cached = session.partitions.get(key)
        position = (high_watermark, last_stable_offset, log_start_offset)
        if self.mode is SessionMode.INCREMENTAL and not (
            must_respond or key in self.requested or cached is None or cached.sent != position
        ):
            return False
        if cached is not None:
            cached.sent = position
        return True


def _without_session(
    requested: Mapping[SessionKey, PartitionFetchState],
) -> list[tuple[SessionKey, PartitionFetchState, CachedPartition | None]]:
    return [(key, state, None) for key, state in requested.items()]


def _entries(
    session: FetchSession,
) -> list[tuple[SessionKey, PartitionFetchState, CachedPartition | None]]:
    return [(key, cached.request, cached) for key, cached in session.partitions.items()
            if not cached.parked]


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's ``FetchSessionCache`` + ``FetchManager``)."""

    def __init__(self, max_slots: int, min_eviction_ms: int, rng: random.Random) -> None:
        if max_slots < 0 or min_eviction_ms < 0:
            raise ValueError("max slots and min eviction time must not be negative")
        self.max_slots = max_slots
        self.min_eviction_ms = min_eviction_ms
        self._rng = rng
        # session id -> session, least recently used first.
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        """Drop a session (its client will start a new one); returns it, if any."""
        return self._sessions.pop(session_id, None)

    def new_context(
        self,
        *,
        session_id: int,
        session_epoch: int,
        replica_id: int,
        uses_topic_ids: bool,
        requested: Mapping[SessionKey, PartitionFetchState],
        forgotten: Iterable[SessionKey],
        now_ms: int,
    ) -> FetchContext | ErrorCode:
        """Apply a Fetch's session fields: the context to serve it with, or the
        top-level error to answer (see the module docstring for each case).
        Partitions named in both ``forgotten`` and ``requested`` stay, with
        the request's state (forgotten first, then added)."""
        if session_epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return FetchContext(SessionMode.SESSIONLESS, _without_session(requested), None)
        if session_epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            session = self._maybe_create(replica_id, uses_topic_ids, now_ms)
            if session is None:
                return FetchContext(SessionMode.NEW_SESSION, _without_session(requested), None)
            for key, state in requested.items():
                session.partitions[key] = CachedPartition(state)
            return FetchContext(SessionMode.NEW_SESSION, None, session)
        if session_epoch < FINAL_EPOCH:
            return ErrorCode.invalid_fetch_session_epoch
        session = self._sessions.get(session_id)
        # A session answers only the replica (or consumer) that created it.
        if session is None or session.replica_id != replica_id:
            return ErrorCode.fetch_session_id_not_found
        if session.epoch != session_epoch:
            return ErrorCode.invalid_fetch_session_epoch
        if session.uses_topic_ids != uses_topic_ids:
            return ErrorCode.fetch_session_topic_id_error
        for key in forgotten:
            gone = session.partitions.pop(key, None)
            if gone is not None:
                gone.parked = False
        for key, state in requested.items():
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition(state)
            else:
                cached.request = state
                cached.memo = None
                cached.parked = False
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        return FetchContext(SessionMode.INCREMENTAL, None, session, frozenset(requested))

    def _maybe_create(self, replica_id: int, uses_topic_ids: bool, now_ms: int) -> FetchSession | None:
        if len(self._sessions) >= self.max_slots and not self._maybe_evict(replica_id >= 0, now_ms):
            return None
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._rng.randint(1, _INT32_MAX)
        session = FetchSession(session_id, replica_id, uses_topic_ids, now_ms)
        self._sessions[session_id] = session
        return session

    def _maybe_evict(self, for_follower: bool, now_ms: int) -> bool:
        if not self._sessions:
            return False  # max_slots == 0: sessions are off
        oldest_id, oldest = next(iter(self._sessions.items()))
        if now_ms - oldest.last_used_ms >= self.min_eviction_ms:
            del self._sessions[oldest_id]
            self.evictions += 1
            return True
        if for_follower:
            for session_id, session in self._sessions.items():
                if not session.is_follower:
                    del self._sessions[session_id]
                    self.evictions += 1
                    return True
        return False
