"""Scripted tests of elections, named after the KIP-595 / KIP-996 / Raft rule they check."""

from __future__ import annotations

from raftlog.consensus.control import decode_leader_change
from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.roles import ElectionState
from raftlog.records import ControlRecordType, decode_records, parse_control_record_key
from raftlog.testing.context import RaftTestContext, seed_log
from raftlog.testing.memory_log import MemoryLog


def _log(epochs: list[int]) -> MemoryLog:
    log = MemoryLog()
    seed_log(log, epochs)
    return log


def test_kip595_vote_rejected_for_candidate_with_shorter_log() -> None:
    ctx = RaftTestContext(log=_log([1, 1, 2]))
    ctx.deliver(2, VoteRequest(3, 2, last_offset_epoch=2, last_offset=2), 7)
    env, _ = ctx.assert_sent(VoteResponse, 2, vote_granted=False)
    assert env.correlation_id == 7
    assert ctx.core.epoch == 3  # a real vote request still bumps the epoch


def test_kip595_vote_rejected_for_candidate_with_older_last_epoch() -> None:
    ctx = RaftTestContext(log=_log([1, 1, 2]))
    ctx.deliver(2, VoteRequest(3, 2, last_offset_epoch=1, last_offset=10))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False)


def test_kip595_vote_granted_to_candidate_with_longer_log() -> None:
    ctx = RaftTestContext(log=_log([1, 1, 2]))
    ctx.deliver(2, VoteRequest(3, 2, last_offset_epoch=2, last_offset=5))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True, leader_epoch=3)
    assert ctx.stored == ElectionState(3, None, 2)


def test_raft_one_vote_per_epoch() -> None:
    ctx = RaftTestContext()
    ctx.deliver(2, VoteRequest(1, 2, 0, 0))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)
    ctx.deliver(3, VoteRequest(1, 3, 0, 0))
    ctx.assert_sent(VoteResponse, 3, vote_granted=False)
    # The same candidate asking again (a retry) gets the same answer.
    ctx.deliver(2, VoteRequest(1, 2, 0, 0))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)


def test_kip595_vote_is_durable_before_the_grant_is_sent() -> None:
    ctx = RaftTestContext()
    ctx.deliver(2, VoteRequest(4, 2, 0, 0))
    ready = next(r for r in ctx.readies if any(isinstance(m.body, VoteResponse)
                                                for m in r.messages))
    # The grant travels in the same Ready as the vote it promises, which the
    # runtime fsyncs before sending anything.
    assert ready.must_sync
    assert ready.election_state == ElectionState(4, None, 2)


def test_kip595_vote_for_stale_epoch_rejected() -> None:
    ctx = RaftTestContext(stored=ElectionState(5))
    ctx.deliver(2, VoteRequest(4, 2, 0, 0))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False, leader_epoch=5)


def test_kip996_pre_vote_does_not_bump_epoch_or_record_a_vote() -> None:
    ctx = RaftTestContext(stored=ElectionState(2))
    ctx.deliver(2, VoteRequest(3, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True, leader_epoch=2)
    assert ctx.core.epoch == 2
    assert ctx.stored == ElectionState(2)
    # The real vote in epoch 3 is still free for anyone.
    ctx.deliver(3, VoteRequest(3, 3, 0, 0))
    ctx.assert_sent(VoteResponse, 3, vote_granted=True)


def test_kip996_prospective_pre_votes_before_bumping_the_epoch() -> None:
    ctx = RaftTestContext()
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    assert ctx.core.role_name == "Prospective"
    assert ctx.core.epoch == 0
    ctx.assert_sent(VoteRequest, 2, pre_vote=True, candidate_epoch=1)
    ctx.assert_nothing_sent(BeginQuorumEpochRequest)


def test_kip996_pre_vote_rejected_while_the_leader_is_live() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.answer_fetch()  # it has heard from the leader in this epoch
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False, leader_id=3)
    # Once the fetch timeout passes without hearing from the leader, it is granted.
    ctx.core.quorum.role.fetch_deadline_ms = 0  # type: ignore[union-attr]
    ctx.now_ms += 1
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)


def test_kip996_lost_pre_vote_leaves_the_epoch_unchanged() -> None:
    ctx = RaftTestContext()
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    for voter in (2, 3):
        env, _ = ctx.assert_sent(VoteRequest, voter, pre_vote=True)
        ctx.deliver(voter, VoteResponse(Errors.NONE, 0, -1, False), env.correlation_id)
    assert ctx.core.role_name == "Prospective"
    assert ctx.core.epoch == 0


def test_kip595_new_leader_appends_leader_change_control_batch_first() -> None:
    ctx = RaftTestContext(log=_log([1, 1]), stored=ElectionState(1)).with_elected_leader()
    assert ctx.core.epoch == 2
    batch = ctx.log.batch_containing(2)
    assert batch is not None and batch.base_offset == 2 and batch.epoch == 2
    (record,) = decode_records(batch.data)
    assert parse_control_record_key(record.key)[1] is ControlRecordType.LEADER_CHANGE
    assert record.value is not None
    message = decode_leader_change(record.value)
    assert message.leader_id == 1 and message.voters == (1, 2, 3)


def test_kip595_new_leader_sends_begin_quorum_epoch_to_every_voter() -> None:
    ctx = RaftTestContext(voters=(1, 2, 3, 4, 5)).with_elected_leader()
    for voter in (2, 3, 4, 5):
        ctx.assert_sent(BeginQuorumEpochRequest, voter, leader_epoch=1, leader_id=1)


def test_kip595_begin_quorum_epoch_makes_voter_follow_and_is_acknowledged_durably() -> None:
    ctx = RaftTestContext()
    ctx.deliver(2, BeginQuorumEpochRequest(3, 2), 9)
    env, _ = ctx.assert_sent(BeginQuorumEpochResponse, 2, error=Errors.NONE, leader_epoch=3)
    assert env.correlation_id == 9
    assert ctx.core.role_name == "Follower"
    assert ctx.stored == ElectionState(3, 2, None)


def test_kip595_begin_quorum_epoch_from_stale_epoch_is_fenced() -> None:
    ctx = RaftTestContext(stored=ElectionState(5))
    ctx.deliver(2, BeginQuorumEpochRequest(4, 2))
    ctx.assert_sent(BeginQuorumEpochResponse, 2, error=Errors.FENCED_LEADER_EPOCH)


def test_kip595_graceful_resignation_sends_end_quorum_epoch_with_preferred_successors() -> None:
    ctx = RaftTestContext().with_elected_leader()
    ctx.follower_fetch(3, ctx.log.end_offset(), 1)  # 3 is caught up, 2 is not
    ctx.clear_sent()
    ctx.core.resign(ctx.now_ms)
    ctx.drain()
    assert ctx.core.role_name == "Resigned"
    _, req = ctx.assert_sent(EndQuorumEpochRequest, 3, leader_epoch=1)
    assert req.preferred_successors == (3, 2)


def test_kip595_end_quorum_epoch_hastens_the_preferred_successor() -> None:
    ctx = RaftTestContext().with_leader(2, epoch=1)
    ctx.deliver(2, EndQuorumEpochRequest(1, 2, preferred_successors=(1, 3)))
    ctx.clear_sent()
    ctx.advance_time(ctx.config.retry_backoff_ms)
    assert ctx.core.role_name == "Prospective"
    ctx.assert_sent(VoteRequest, 3, pre_vote=True)


def test_raft_leader_steps_down_on_higher_epoch_vote() -> None:
    ctx = RaftTestContext(log=_log([]))
    ctx.with_elected_leader()
    ctx.deliver(2, VoteRequest(5, 2, 1, 10))
    assert not ctx.core.is_leader
    assert ctx.core.epoch == 5
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)


def test_kafka14077_wiped_voter_neither_votes_nor_stands() -> None:
    ctx = RaftTestContext(recovering=True)
    assert ctx.stored is not None and ctx.stored.recovering
    ctx.deliver(2, VoteRequest(1, 2, 0, 0))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False)
    ctx.advance_time(ctx.config.election_timeout_ms * 3)
    ctx.assert_nothing_sent(VoteRequest)


def test_single_voter_quorum_elects_itself() -> None:
    ctx = RaftTestContext(voters=(1,))
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    assert ctx.core.is_leader and ctx.core.epoch == 1
    offset = ctx.propose(b"a")
    ctx.advance_time(ctx.config.append_linger_ms)
    assert ctx.core.high_watermark == offset + 1


# -- KIP-996 liveness after a leader dies (Kafka 4.x behaviour) -----------------


def test_kip996_follower_grants_pre_vote_before_its_first_fetch_from_the_leader() -> None:
    # Kafka FollowerState.canGrantVote: !hasFetchedFromLeader && log up to date.
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)


def test_kip996_follower_whose_fetch_to_the_leader_fails_stops_vetoing_pre_votes() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.answer_fetch()
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False)
    # The runtime reports the dead leader's refused connection.
    ctx.answer_fetch(error=Errors.BROKER_NOT_AVAILABLE, leader_id=-1)
    assert ctx.core.role_name == "Follower"  # still within its fetch timeout
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)
    # A real vote is unaffected by this: epochs and logs decide it as before.
    ctx.advance_time(ctx.config.retry_backoff_ms)
    ctx.answer_fetch()  # the leader answers again: the veto is back
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False)


def test_kip996_follower_whose_fetch_times_out_stops_vetoing_pre_votes() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.answer_fetch()
    ctx.answer_fetch(error=Errors.REQUEST_TIMED_OUT, leader_id=-1)
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=True)


def test_kip996_pre_vote_rejected_by_a_majority_goes_back_to_the_known_leader() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.answer_fetch()
    ctx.advance_time(ctx.config.fetch_timeout_ms)
    assert ctx.core.role_name == "Prospective"
    for voter in (2, 3):
        env, _ = ctx.assert_sent(VoteRequest, voter, pre_vote=True)
        ctx.deliver(voter, VoteResponse(Errors.NONE, 1, 3, False), env.correlation_id)
    assert ctx.core.role_name == "Follower" and ctx.core.epoch == 1
    ctx.assert_sent(FetchRequest, 3)


def test_kip996_rejected_pre_vote_without_leader_backs_off_not_a_full_election_timeout() -> None:
    ctx = RaftTestContext()
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    for voter in (2, 3):
        env, _ = ctx.assert_sent(VoteRequest, voter, pre_vote=True)
        ctx.deliver(voter, VoteResponse(Errors.NONE, 0, -1, False), env.correlation_id)
    # Backoff is at most min(election.backoff.max.ms, retry.backoff.ms * 2) = 40 ms.
    ctx.advance_time(2 * ctx.config.retry_backoff_ms)
    ctx.assert_sent(VoteRequest, 2, pre_vote=True)
    ctx.assert_sent(VoteRequest, 3, pre_vote=True)
    assert ctx.core.epoch == 0


def test_kip595_unreachable_voters_end_a_round_that_cannot_win_early() -> None:
    ctx = RaftTestContext()
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    env2, _ = ctx.assert_sent(VoteRequest, 2, pre_vote=True)
    env3, _ = ctx.assert_sent(VoteRequest, 3, pre_vote=True)
    ctx.deliver(2, VoteResponse(Errors.NONE, 0, -1, True), env2.correlation_id)
    assert ctx.core.role_name == "Candidate"
    env2, _ = ctx.assert_sent(VoteRequest, 2, pre_vote=False)
    env3, _ = ctx.assert_sent(VoteRequest, 3, pre_vote=False)
    ctx.deliver(2, VoteResponse(Errors.NONE, 1, -1, False), env2.correlation_id)
    ctx.deliver(3, VoteResponse(Errors.BROKER_NOT_AVAILABLE, 1, -1, False), env3.correlation_id)
    # Lost now (backoff of at most 40 ms), not at the election timeout.
    ctx.advance_time(2 * ctx.config.retry_backoff_ms)
    ctx.assert_sent(VoteRequest, 2, pre_vote=True)


def test_style8_vote_request_naming_this_node_as_candidate_is_refused() -> None:
    ctx = RaftTestContext()
    ctx.deliver(2, VoteRequest(5, 1, 0, 0))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False, error=Errors.INVALID_REQUEST)
    assert ctx.core.epoch == 0


def test_style8_begin_quorum_epoch_naming_this_node_as_leader_is_refused() -> None:
    ctx = RaftTestContext()
    ctx.deliver(2, BeginQuorumEpochRequest(5, 1))
    ctx.assert_sent(BeginQuorumEpochResponse, 2, error=Errors.INVALID_REQUEST)
    assert ctx.core.epoch == 0 and ctx.core.role_name == "Unattached"


def test_style8_leader_hint_naming_a_non_voter_is_not_followed() -> None:
    ctx = RaftTestContext()
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    env, _ = ctx.assert_sent(VoteRequest, 2, pre_vote=True)
    ctx.deliver(2, VoteResponse(Errors.NONE, 4, 99, False), env.correlation_id)
    assert ctx.core.epoch == 4 and ctx.core.role_name == "Unattached"


# -- KIP-996: a voter left in a higher epoch than the leader (Kafka 4.x handleVoteRequest) --


def test_kip996_leader_steps_down_on_a_pre_vote_from_a_voter_in_a_higher_epoch() -> None:
    ctx = RaftTestContext(log=_log([]))
    ctx.with_elected_leader()
    assert ctx.core.epoch == 1
    # A pre-vote from a voter in our own epoch is vetoed and changes nothing.
    ctx.deliver(2, VoteRequest(2, 2, 0, 0, pre_vote=True))
    ctx.assert_sent(VoteResponse, 2, vote_granted=False, leader_epoch=1, leader_id=1)
    assert ctx.core.is_leader and ctx.core.epoch == 1
    # Voter 2 lost an election of epoch 2 nobody heard of and pre-votes for 3:
    # the leader of 1 cannot keep leading below it.
    ctx.deliver(2, VoteRequest(3, 2, 0, 0, pre_vote=True))
    assert not ctx.core.is_leader
    assert ctx.core.role_name == "Unattached" and ctx.core.epoch == 2
    assert ctx.stored == ElectionState(2, None, None)
    # The pre-vote itself is still judged on logs: ours holds epoch 1's
    # LEADER_CHANGE batch, the prospective's does not.
    ctx.assert_sent(VoteResponse, 2, vote_granted=False, leader_epoch=2, leader_id=-1)


def test_kip996_follower_joins_the_higher_epoch_of_a_pre_voting_voter_durably() -> None:
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.answer_fetch()  # it hears from its leader: pre-votes of epoch 1 are vetoed
    ctx.readies.clear()
    ctx.deliver(2, VoteRequest(5, 2, 0, 0, pre_vote=True))  # voter 2 is in epoch 4
    assert ctx.core.role_name == "Unattached" and ctx.core.epoch == 4
    ctx.assert_sent(VoteResponse, 2, vote_granted=True, leader_epoch=4)
    ready = next(r for r in ctx.readies if any(isinstance(m.body, VoteResponse)
                                                for m in r.messages))
    # The epoch change is fsynced before the answer goes out; no vote is recorded.
    assert ready.must_sync and ready.election_state == ElectionState(4, None, None)

