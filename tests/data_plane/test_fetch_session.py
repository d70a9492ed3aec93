"""KIP-227 fetch sessions, broker side: `data_plane.api.fetch_session`."""

from __future__ import annotations

import random
import uuid

import pytest

from data_plane.api.fetch_session import (
    FetchContext,
    FetchSessionCache,
    PartitionFetchState,
    SessionKey,
    SessionMode,
    next_epoch,
)
from raftlog.net.errors import ErrorCode

T = uuid.UUID(int=7)
A: SessionKey = (T, 0)
B: SessionKey = (T, 1)
C: SessionKey = (T, 2)
FOLLOWER = 2


def state(offset: int, epoch: int = 1) -> PartitionFetchState:
    return PartitionFetchState(offset, epoch, epoch, 0, 1_048_576)


def cache(slots: int = 10, eviction_ms: int = 1_000) -> FetchSessionCache:
    return FetchSessionCache(slots, eviction_ms, random.Random(1))


def ctx(
    c: FetchSessionCache, session_id: int, epoch: int,
    requested: dict[SessionKey, PartitionFetchState] | None = None,
    forgotten: tuple[SessionKey, ...] = (), replica_id: int = FOLLOWER, now_ms: int = 0,
    uses_topic_ids: bool = True,
) -> FetchContext:
    out = c.new_context(session_id=session_id, session_epoch=epoch, replica_id=replica_id,
                        uses_topic_ids=uses_topic_ids, requested=requested or {},
                        forgotten=forgotten, now_ms=now_ms)
    assert isinstance(out, FetchContext), out
    return out


def error(c: FetchSessionCache, session_id: int, epoch: int, replica_id: int = FOLLOWER,
          uses_topic_ids: bool = True) -> ErrorCode | FetchContext:
    return c.new_context(session_id=session_id, session_epoch=epoch, replica_id=replica_id,
                         uses_topic_ids=uses_topic_ids, requested={}, forgotten=(), now_ms=0)


def include(context: FetchContext, key: SessionKey, hw: int, must: bool = False) -> bool:
    return context.maybe_include(key, high_watermark=hw, last_stable_offset=hw,
                                 log_start_offset=0, must_respond=must)


def created(c: FetchSessionCache, parts: dict[SessionKey, PartitionFetchState],
            hw: int = 10) -> int:
    context = ctx(c, 0, 0, parts)
    assert context.mode is SessionMode.NEW_SESSION and context.session_id != 0
    for key in parts:
        assert include(context, key, hw)
    return context.session_id


def test_sessionless_full_fetch_serves_and_answers_everything_with_id_0() -> None:
    c = cache()
    context = ctx(c, 0, -1, {A: state(5), B: state(6)}, forgotten=(C,))
    assert context.mode is SessionMode.SESSIONLESS
    assert context.session_id == 0
    assert context.partitions == [(A, state(5)), (B, state(6))]
    assert include(context, A, 10) and include(context, A, 10)
    assert len(c) == 0


def test_epoch_0_creates_a_session_that_answers_every_partition_first() -> None:
    c = cache()
    context = ctx(c, 0, 0, {A: state(5), B: state(6)})
    assert context.mode is SessionMode.NEW_SESSION
    assert context.session_id > 0 and len(c) == 1
    assert include(context, A, 10) and include(context, B, 10)
    session = c.get(context.session_id)
    assert session is not None and session.epoch == 1


def test_incremental_serves_all_cached_partitions_but_answers_only_news() -> None:
    c = cache()
    sid = created(c, {A: state(5), B: state(6), C: state(7)})
    context = ctx(c, sid, 1, {B: state(8)})
    assert context.mode is SessionMode.INCREMENTAL and context.session_id == sid
    # Every partition is served, B with its new state.
    assert context.partitions == [(A, state(5)), (B, state(8)), (C, state(7))]
    assert not include(context, A, 10)  # nothing new
    assert include(context, B, 10)  # named in the request
    assert include(context, C, 11)  # high watermark moved
    assert c.get(sid).epoch == 2  # type: ignore[union-attr]
    # Next round: C's new HW was sent, so C is quiet; records or errors always count.
    context = ctx(c, sid, 2)
    assert not include(context, C, 11)
    assert not include(context, B, 10)
    assert include(context, A, 10, must=True)
    assert include(context, A, 10, must=False) is False


def test_last_stable_offset_and_log_start_changes_are_news() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    context = ctx(c, sid, 1)
    assert context.maybe_include(A, high_watermark=10, last_stable_offset=9,
                                 log_start_offset=0, must_respond=False)
    context = ctx(c, sid, 2)
    assert context.maybe_include(A, high_watermark=10, last_stable_offset=9,
                                 log_start_offset=3, must_respond=False)


def test_forgotten_partitions_leave_the_session_and_added_ones_join() -> None:
    c = cache()
    sid = created(c, {A: state(5), B: state(6)})
    context = ctx(c, sid, 1, {C: state(1)}, forgotten=(A,))
    assert [key for key, _ in context.partitions] == [B, C]
    assert include(context, C, 10)  # first answer for a new partition


def test_a_partition_both_forgotten_and_requested_stays_with_the_new_state() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    context = ctx(c, sid, 1, {A: state(9)}, forgotten=(A,))
    assert context.partitions == [(A, state(9))]


def test_unknown_session_id_is_fetch_session_id_not_found() -> None:
    c = cache()
    assert error(c, 12345, 1) is ErrorCode.fetch_session_id_not_found


def test_wrong_epoch_is_invalid_fetch_session_epoch_and_keeps_the_session() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    assert error(c, sid, 2) is ErrorCode.invalid_fetch_session_epoch
    assert error(c, sid, -2) is ErrorCode.invalid_fetch_session_epoch
    ctx(c, sid, 1)  # the right epoch still works
    assert error(c, sid, 1) is ErrorCode.invalid_fetch_session_epoch  # a replay


def test_another_replica_cannot_use_a_session() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    assert error(c, sid, 1, replica_id=3) is ErrorCode.fetch_session_id_not_found
    assert error(c, sid, 1, replica_id=-1) is ErrorCode.fetch_session_id_not_found


def test_topic_ids_and_names_do_not_mix_in_one_session() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    assert error(c, sid, 1, uses_topic_ids=False) is ErrorCode.fetch_session_topic_id_error


def test_epoch_minus_1_closes_the_session_and_serves_a_sessionless_fetch() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    context = ctx(c, sid, -1, {B: state(1)})
    assert context.mode is SessionMode.SESSIONLESS and context.session_id == 0
    assert context.partitions == [(B, state(1))]
    assert c.get(sid) is None and len(c) == 0


def test_epoch_0_with_an_id_closes_it_and_creates_a_new_one() -> None:
    c = cache()
    sid = created(c, {A: state(5)})
    context = ctx(c, sid, 0, {B: state(1)})
    assert context.mode is SessionMode.NEW_SESSION
    assert context.session_id not in (0, sid)
    assert c.get(sid) is None and len(c) == 1
    assert context.partitions == [(B, state(1))]


def test_the_epoch_wraps_from_int32_max_to_1() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1


def test_a_full_cache_evicts_the_least_recently_used_idle_session() -> None:
    c = cache(slots=2, eviction_ms=1_000)
    first = ctx(c, 0, 0, {A: state(1)}, now_ms=0).session_id
    second = ctx(c, 0, 0, {A: state(1)}, now_ms=10).session_id
    ctx(c, first, 1, now_ms=500)  # first is now the more recently used
    # Nothing idle for 1 s yet: no room, answered without a session.
    assert ctx(c, 0, 0, {A: state(1)}, now_ms=900, replica_id=-1).session_id == 0
    third = ctx(c, 0, 0, {A: state(1)}, now_ms=1_010).session_id
    assert third != 0 and len(c) == 2
    assert c.get(second) is None and c.get(first) is not None
    assert c.evictions == 1


def test_a_follower_may_take_a_busy_consumer_sessions_slot() -> None:
    c = cache(slots=2, eviction_ms=60_000)
    follower = ctx(c, 0, 0, {A: state(1)}, replica_id=2).session_id
    consumer = ctx(c, 0, 0, {A: state(1)}, replica_id=-1).session_id
    # A consumer gets no room; a follower evicts the consumer.
    assert ctx(c, 0, 0, {A: state(1)}, replica_id=-1, now_ms=5).session_id == 0
    other = ctx(c, 0, 0, {A: state(1)}, replica_id=3, now_ms=5).session_id
    assert other != 0
    assert c.get(consumer) is None and c.get(follower) is not None
    # Followers do not evict followers that are in use.
    assert ctx(c, 0, 0, {A: state(1)}, replica_id=4, now_ms=6).session_id == 0


def test_zero_slots_turns_sessions_off() -> None:
    c = cache(slots=0)
    context = ctx(c, 0, 0, {A: state(1)})
    assert context.mode is SessionMode.NEW_SESSION and context.session_id == 0
    assert include(context, A, 5) and len(c) == 0


def test_the_cache_refuses_negative_settings() -> None:
    with pytest.raises(ValueError):
        FetchSessionCache(-1, 0, random.Random(0))
