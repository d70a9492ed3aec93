"""KIP-227 fetch sessions, follower side: `data_plane.broker.fetch_session_handler`."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.api.encoders import ReplicaFetchPartition
from data_plane.broker.fetch_session_handler import (
    FollowerFetchSession,
    SessionRequest,
    WantedPartition,
)
from data_plane.replication.types import TopicPartition
from raftlog.net.errors import ErrorCode

TID = uuid.UUID(int=1)
NEW_TID = uuid.UUID(int=2)
OK = ErrorCode.none


def part(index: int, offset: int, epoch: int = 3, tid: uuid.UUID = TID) -> WantedPartition:
    return tid, ReplicaFetchPartition(index, epoch, offset, epoch, 0, 1_048_576)


def wanted(**offsets: int) -> dict[TopicPartition, WantedPartition]:
    return {("t", int(k[1:])): part(int(k[1:]), v) for k, v in offsets.items()}


def established(sid: int = 77) -> tuple[FollowerFetchSession, dict[TopicPartition, WantedPartition]]:
    s = FollowerFetchSession()
    w = wanted(p0=10, p1=20, p2=30)
    first = s.build(w)
    assert s.handle_response(first, OK, sid)
    return s, w


def test_the_first_request_is_full_and_creates_a_session() -> None:
    s = FollowerFetchSession()
    w = wanted(p0=10, p1=20)
    req = s.build(w)
    assert (req.session_id, req.session_epoch) == (0, 0) and req.is_full
    assert req.send == w and req.forgotten == ()
    assert s.handle_response(req, OK, 77)
    assert (s.session_id, s.epoch) == (77, 1)
    assert s.carried == w


def test_an_unchanged_follower_sends_an_empty_incremental_request() -> None:
    s, w = established()
    req = s.build(w)
    assert (req.session_id, req.session_epoch) == (77, 1) and not req.is_full
    assert req.send == {} and req.forgotten == ()
    assert s.handle_response(req, OK, 77)
    assert s.epoch == 2


def test_only_changed_partitions_are_sent() -> None:
    s, w = established()
    w2 = {**w, ("t", 1): part(1, 25)}
    req = s.build(w2)
    assert req.send == {("t", 1): part(1, 25)}
    assert req.wanted == w2


def test_a_new_leader_epoch_or_truncation_is_always_sent() -> None:
    # SAFETY: the leader must never act on a cached fetch offset the follower
    # moved away from: a lower offset (truncation) or a new epoch is a change.
    s, w = established()
    w2 = {**w, ("t", 0): part(0, 5), ("t", 2): part(2, 30, epoch=4)}
    req = s.build(w2)
    assert set(req.send) == {("t", 0), ("t", 2)}


def test_partitions_no_longer_fetched_are_forgotten_and_new_ones_added() -> None:
    s, w = established()
    w2 = {k: v for k, v in w.items() if k != ("t", 0)}
    w2[("t", 5)] = part(5, 0)
    req = s.build(w2)
    assert req.forgotten == ((TID, 0),)
    assert req.send == {("t", 5): part(5, 0)}
    assert s.handle_response(req, OK, 77)
    assert s.carried == w2


def test_a_recreated_topic_forgets_the_old_id_and_adds_the_new_one() -> None:
    s, w = established()
    w2 = {**w, ("t", 1): part(1, 0, tid=NEW_TID)}
    req = s.build(w2)
    assert req.forgotten == ((TID, 1),)
    assert req.send == {("t", 1): part(1, 0, tid=NEW_TID)}


def test_the_carried_copy_moves_only_after_a_successful_answer() -> None:
    s, w = established()
    w2 = {**w, ("t", 1): part(1, 25)}
    s.build(w2)  # sent, never answered
    assert s.carried == w and s.epoch == 1


def _fails(s: FollowerFetchSession, req: SessionRequest, error: ErrorCode) -> None:
    assert not s.handle_response(req, error, 0)
    assert (s.session_id, s.epoch, s.carried) == (0, 0, {})


def test_session_errors_and_other_top_level_errors_drop_the_session() -> None:
    for error in (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch,
                  ErrorCode.fetch_session_topic_id_error, ErrorCode.unknown_server_error):
        s, w = established()
        req = s.build(w)
        _fails(s, req, error)
        again = s.build(w)
        assert (again.session_id, again.session_epoch) == (0, 0) and again.send == w
    assert FollowerFetchSession.is_session_error(ErrorCode.invalid_fetch_session_epoch)
    assert not FollowerFetchSession.is_session_error(ErrorCode.unknown_server_error)


def test_a_network_error_resets_to_a_full_fetch() -> None:
    s, w = established()
    s.build(w)
    s.reset()
    req = s.build(w)
    assert req.is_full and req.send == w


def test_an_incremental_answer_for_another_session_drops_it() -> None:
    s, w = established()
    req = s.build(w)
    assert not s.handle_response(req, OK, 99)
    assert s.session_id == 0


def test_no_room_on_the_leader_keeps_sending_full_requests() -> None:
    s = FollowerFetchSession()
    w = wanted(p0=1)
    req = s.build(w)
    assert s.handle_response(req, OK, 0)  # applied: a full answer
    again = s.build(w)
    assert (again.session_id, again.session_epoch) == (0, 0) and again.send == w


def test_the_epoch_wraps_past_int32_max() -> None:
    s, w = established()
    s.epoch = 2**31 - 1
    req = s.build(w)
    assert s.handle_response(req, OK, 77)
    assert s.epoch == 1


@settings(max_examples=300, deadline=None)
@given(
    carried=st.dictionaries(st.integers(0, 7), st.integers(0, 3), max_size=8),
    wanted_now=st.dictionaries(st.integers(0, 7), st.integers(0, 3), max_size=8),
    retopic=st.sets(st.integers(0, 7)),
    extra=st.sets(st.integers(0, 7)),
)
def test_a_diff_over_the_changed_partitions_equals_the_full_diff(
    carried: dict[int, int], wanted_now: dict[int, int], retopic: set[int], extra: set[int],
) -> None:
    # The fetcher names the partitions whose entry it set or dropped since
    # the last request (`changed`, possibly more than differ); the diff over
    # those must be the diff over everything.
    s = FollowerFetchSession()
    before = {("t", i): part(i, offset) for i, offset in carried.items()}
    assert s.handle_response(s.build(before), OK, 77)
    after = {("t", i): (before[("t", i)] if ("t", i) in before and before[("t", i)][1].fetch_offset
                        == offset and i not in retopic
                        else part(i, offset, tid=NEW_TID if i in retopic else TID))
             for i, offset in wanted_now.items()}
    changed = [key for key in before.keys() | after.keys()
               if before.get(key) is not after.get(key)] + [("t", i) for i in extra]
    full, partial = s.build(after), s.build(after, dict.fromkeys(changed))
    send = {key: w for key, w in after.items() if before.get(key) != w}
    forgotten = sorted((c[0], key[1]) for key, c in before.items()
                       if key not in after or after[key][0] != c[0])
    for req in (full, partial):
        assert req.send == send
        assert sorted(req.forgotten) == forgotten
        assert req.wanted == after
