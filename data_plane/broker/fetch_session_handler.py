"""A follower's side of an incremental fetch session (KIP-227; Kafka's
``FetchSessionHandler``).

One handler per leader fetcher. It remembers the partition fetch states the
leader's session holds (``carried``: what the last *answered* request left
there) and turns the partitions the fetcher wants now into a request:

- no session yet: a full request creating one, ``(0, 0)``, with everything;
- a session: ``(id, epoch)`` with only the partitions whose wire state
  (fetch offset, epochs, log start, max bytes, topic id) differs from the
  carried copy, and ``forgotten`` for carried partitions no longer wanted
  (also the old topic id of a partition whose topic id changed).

The carried copy and the epoch move only after a successful answer
(`handle_response`); any failure (`reset`: a session error, another
top-level error, a network error or a timeout) drops the session so the
next request is full again. Because every changed partition is always in the
next request, the leader never serves a cached fetch offset the follower has
moved away from (truncation, divergence, a new leader epoch): the leader
replaces cached states with the request's before it serves anything.

Pure: no I/O.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping

from data_plane.api.encoders import ReplicaFetchPartition
from data_plane.api.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from data_plane.replication.types import TopicPartition
from raftlog.net.errors import ErrorCode
from raftlog.values import value

__all__ = ("FollowerFetchSession", "SessionRequest", "WantedPartition")

#: (topic id, the partition's fields of the request).
WantedPartition = tuple[uuid.UUID, ReplicaFetchPartition]

_SESSION_ERRORS = frozenset({
    ErrorCode.fetch_session_id_not_found,
    ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
})


@value
class SessionRequest:
    """What to send: ``send`` partitions, ``forgotten`` (topic id, index)
    pairs, under ``(session_id, session_epoch)``. ``wanted`` is everything the
    fetcher wants (the session's content once this request is answered)."""

    session_id: int
    session_epoch: int
    send: dict[TopicPartition, WantedPartition]
    forgotten: tuple[tuple[uuid.UUID, int], ...]
    wanted: Mapping[TopicPartition, WantedPartition]

    @property
    def is_full(self) -> bool:
        return self.session_epoch <= INITIAL_EPOCH


class FollowerFetchSession:
    """The follower's copy of its session with one leader (see the module docstring)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.carried: dict[TopicPartition, WantedPartition] = {}

    def build(
        self, wanted: Mapping[TopicPartition, WantedPartition],
        changed: Iterable[TopicPartition] | None = None,
    ) -> SessionRequest:
        """The request for ``wanted``: full without a session, else the diff.

        ``changed``: every partition whose ``wanted`` entry may differ from
        the one the last request carried (set, replaced or dropped since
        that request was built); the diff then looks at those only. None:
        compare everything."""
        wanted = dict(wanted)
        if self.session_id == INVALID_SESSION_ID:
            return SessionRequest(INVALID_SESSION_ID, INITIAL_EPOCH, wanted, (), wanted)
        # Most entries are the very objects carried last time, so identity
        # is checked first (a topic id's == is a Python-level call).
        carried = self.carried
        send: dict[TopicPartition, WantedPartition] = {}
        forgotten: list[tuple[uuid.UUID, int]] = []
        keys: Iterable[TopicPartition] = changed if changed is not None else itertools.chain(
            wanted, [key for key in carried if key not in wanted])
        for key in keys:
            w = wanted.get(key)
            c = carried.get(key)
            if w is not None and c is not w and c != w:
                send[key] = w
            if c is not None and (w is None or (w[0] is not c[0] and w[0] != c[0])):
                forgotten.append((c[0], key[1]))
        return SessionRequest(self.session_id, self.epoch, send, tuple(forgotten), wanted)

    def handle_response(self, request: SessionRequest, error: ErrorCode, session_id: int) -> bool:
        """Take the answer to ``request`` (its top-level error and session id).
        Returns whether the answer's partitions may be applied: False after a
        top-level error, or an incremental answer for another session, which
        both drop the session."""
        if error != ErrorCode.none:
            self.reset()
            return False
        if request.is_full:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH)
            self.carried = dict(request.wanted) if session_id != INVALID_SESSION_ID else {}
            if session_id == INVALID_SESSION_ID:
                self.epoch = INITIAL_EPOCH  # no room on the leader: full again next time
            return True
        if session_id != request.session_id:
            self.reset()
            return False
        self.epoch = next_epoch(request.session_epoch)
        self.carried = dict(request.wanted)
        return True

    def reset(self) -> None:
        """Drop the session: the next request is full and creates a new one."""
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.carried = {}

    @staticmethod
    def is_session_error(error: ErrorCode) -> bool:
        return error in _SESSION_ERRORS
