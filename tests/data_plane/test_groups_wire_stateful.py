"""A stateful fuzz of the classic group protocol on the wire: three consumers
speak JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and
OffsetFetch to one broker's handlers, in orders Hypothesis picks, with the
ids and generations the broker handed back, while real time passes (so
rebalance timeouts and the pending-sync expiry fire).

Each answer is checked against what the protocol promises, not against a
copy of the coordinator:
- every error code is one the API may answer in that situation;
- all members given a generation agree on its leader and protocol, and the
  leader's member list holds each of them;
- a member's generation never goes back;
- a SyncGroup answered NONE carries exactly what that generation's leader
  assigned to the member, or to the static member it replaced (empty if
  it assigned nothing);
- OffsetFetch returns, per partition, the last commit answered NONE;
- liveness: once the clients stop, every parked JoinGroup and SyncGroup is
  answered within twice the rebalance timeout, well inside the session
  timeout, so no member's death is needed to unstick the group.

``RAFTLOG_GROUP_FUZZ_EXAMPLES`` raises the number of runs (default 15; past a few hundred, add
``--timeout=0``, as pytest-timeout stops a test at 300 s);
``--hypothesis-show-statistics`` shows how far the runs got (answers seen,
generations reached, commits kept). Against the coordinator before its
pending-sync expiry, the liveness check fails within 60 runs: a leader that
never syncs held a follower's SyncGroup until the leader's session ended.
One client is a static member (KIP-345) whose process restarts: it
rejoins with its group.instance.id alone and takes its old member id's
place; its old incarnation's parked requests are answered (fenced or
otherwise) like any other.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.heartbeat.v4 import request as hb4
from kio.schema.join_group.v9 import request as jg9
from kio.schema.leave_group.v5 import request as lg5
from kio.schema.offset_commit.v8 import request as oc8
from kio.schema.offset_fetch.v8 import request as of8
from kio.schema.sync_group.v5 import request as sg5
from single_broker import SingleBroker

from data_plane.groups.testing import assignment, subscription
from raftlog.net.errors import ErrorCode

GROUP = "fuzzed"
SESSION_MS = 5_000
REBALANCE_MS = 150
CLIENTS = 3
STATIC = 2  # this client is a static member (KIP-345), group.instance.id "static"
PARTITIONS = 2  # SingleBroker's topic "t"

_E = ErrorCode
#: What each API may answer a well-formed request from a live client.
JOIN_ERRORS = {_E.none, _E.member_id_required, _E.unknown_member_id}
SYNC_ERRORS = {_E.none, _E.unknown_member_id, _E.illegal_generation, _E.rebalance_in_progress}
HEARTBEAT_ERRORS = SYNC_ERRORS
COMMIT_ERRORS = SYNC_ERRORS
#: A static member's old incarnation is fenced by its replacement.
FENCED = {_E.fenced_instance_id}


@dataclass
class Client:
    """What one consumer knows: the broker's answers, nothing else."""

    instance: str | None = None
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: tuple[str, ...] = ()  # the leader's member list of `generation`
    join: asyncio.Task[Any] | None = None
    sync: asyncio.Task[Any] | None = None
    sync_generation: int = -1  # what the pending SyncGroup was sent with
    sync_member: str = ""


@dataclass
class Generation:
    leader: str
    protocol: str | None
    members: set[str] = field(default_factory=set)  # answered NONE at this generation
    listed: tuple[str, ...] | None = None  # the leader's member list
    assigned: dict[str, bytes] | None = None  # what the leader's SyncGroup assigned
    #: A static member that rejoined within the generation under a new member
    #: id (KIP-345): new id -> the id it replaced. It takes over the old
    #: id's place, leadership and assignment.
    replaced: dict[str, str] = field(default_factory=dict)
    static_ids: dict[str, str] = field(default_factory=dict)  # instance -> member id

    def lineage(self, member_id: str) -> list[str]:
        """``member_id`` and the ids it replaced, newest first."""
        chain = [member_id]
        while chain[-1] in self.replaced:
            chain.append(self.replaced[chain[-1]])
        return chain

    def original(self, member_id: str) -> str:
        return self.lineage(member_id)[-1]


class GroupProtocolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker = SingleBroker({"group.initial.rebalance.delay.ms": "0",
                                    "group.min.session.timeout.ms": "100"})
        self.clients = [Client(instance="static" if i == STATIC else None)
                        for i in range(CLIENTS)]
        #: Requests of a static member's earlier incarnation, still parked.
        self.orphans: list[tuple[set[ErrorCode], asyncio.Task[Any]]] = []
        self.generations: dict[int, Generation] = {}
        self.committed: dict[int, int] = {}
        self.next_offset = 0

    def teardown(self) -> None:
        event(f"generations: {min(len(self.generations), 5)}")
        event(f"commits kept: {min(len(self.committed), 2)}")
        try:
            self._check_liveness()
        finally:
            self.broker.close()

    # --- requests -------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1))
    def join(self, i: int) -> None:
        """JoinGroup; answered MEMBER_ID_REQUIRED, join again at once with
        the id given, as every client does (KIP-394)."""
        client = self.clients[i]
        if client.join is not None:
            return
        self._send_join(client)
        self.answers_keep_the_protocol()
        if client.join is None and client.member_id and client.generation < 0:
            self._send_join(client)

    def _send_join(self, client: Client) -> None:
        client.join = self.broker.start(11, jg9.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
            rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS),
            member_id=client.member_id, group_instance_id=client.instance,
            protocol_type="consumer",
            protocols=(jg9.JoinGroupRequestProtocol(name="range", metadata=subscription("t")),),
            reason=None))
        self.broker.run_for(0)  # what can be answered at once is

    @rule(i=st.integers(0, CLIENTS - 1))
    def sync(self, i: int) -> None:
        client = self.clients[i]
        if client.generation <= 0 or client.sync is not None:
            return
        assignments: tuple[sg5.SyncGroupRequestAssignment, ...] = ()
        if client.leader:
            plan = {member: [p for p in range(PARTITIONS) if p % len(client.members) == n]
                    for n, member in enumerate(client.members)}
            assignments = tuple(
                sg5.SyncGroupRequestAssignment(member_id=member, assignment=assignment({"t": ps}))
                for member, ps in plan.items())
            generation = self.generations[client.generation]
            if generation.assigned is None:
                generation.assigned = {a.member_id: a.assignment for a in assignments}
        client.sync_generation, client.sync_member = client.generation, client.member_id
        client.sync = self.broker.start(14, sg5.SyncGroupRequest(
            group_id=GROUP, generation_id=client.generation, member_id=client.member_id,
            group_instance_id=client.instance, protocol_type="consumer", protocol_name="range",
            assignments=assignments))
        self.broker.run_for(0)

    @rule(i=st.integers(0, CLIENTS - 1))
    def heartbeat(self, i: int) -> None:
        client = self.clients[i]
        if not client.member_id:
            return
        answer = self.broker.call(12, hb4.HeartbeatRequest(
            group_id=GROUP, generation_id=client.generation, member_id=client.member_id,
            group_instance_id=client.instance))
        assert answer.error_code in self._allowed(client, HEARTBEAT_ERRORS), answer

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i: int) -> None:
        client = self.clients[i]
        if not client.member_id:
            return
        answer = self.broker.call(13, lg5.LeaveGroupRequest(group_id=GROUP, members=(
            lg5.MemberIdentity(member_id=client.member_id, group_instance_id=client.instance,
                               reason=None),)))
        assert answer.error_code == _E.none, answer
        (member,) = answer.members
        assert member.error_code in self._allowed(client, {_E.none, _E.unknown_member_id}), answer
        # The member is gone either way; a parked join or sync of it is answered.
        client.member_id, client.generation, client.leader = "", -1, False

    @rule(i=st.integers(0, CLIENTS - 1), partition=st.integers(0, PARTITIONS - 1))
    def commit(self, i: int, partition: int) -> None:
        client = self.clients[i]
        offset = self.next_offset
        self.next_offset += 1
        answer = self.broker.call(8, oc8.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=client.generation,
            member_id=client.member_id, group_instance_id=client.instance, topics=(
                oc8.OffsetCommitRequestTopic(name="t", partitions=(
                    oc8.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset,
                        committed_leader_epoch=-1, committed_metadata=""),)),)))
        (topic,) = answer.topics
        (result,) = topic.partitions
        # (With generation -1 and no member id, a commit outside the group
        # protocol: accepted only while the group has no members.)
        assert result.error_code in self._allowed(client, COMMIT_ERRORS), answer
        if result.error_code == _E.none:
            self.committed[partition] = offset
        self._fetch_offsets()

    def _fetch_offsets(self) -> None:
        answer = self.broker.call(9, of8.OffsetFetchRequest(groups=(
            of8.OffsetFetchRequestGroup(group_id=GROUP, topics=(
                of8.OffsetFetchRequestTopics(name="t",
                                             partition_indexes=tuple(range(PARTITIONS))),)),),
            require_stable=False))
        (group,) = answer.groups
        assert group.error_code == _E.none, answer
        got = {p.partition_index: int(p.committed_offset)
               for topic in group.topics for p in topic.partitions}
        assert got == {p: self.committed.get(p, -1) for p in range(PARTITIONS)}, answer

    @rule()
    def restart_static(self) -> None:
        """The static member's process restarts: it forgets its member id
        and joins again with its group.instance.id alone (no LeaveGroup, as
        a static member does). What its old incarnation left parked must
        still be answered."""
        client = self.clients[STATIC]
        for errors, task in ((JOIN_ERRORS, client.join), (SYNC_ERRORS, client.sync)):
            if task is not None:
                self.orphans.append((errors | FENCED, task))
        client.join = client.sync = None
        client.member_id, client.generation, client.leader = "", -1, False
        self.join(STATIC)

    @rule(ms=st.sampled_from([0, 5, 40, 100, 200]))
    def wait(self, ms: int) -> None:
        self.broker.run_for(ms / 1000)

    # --- answers --------------------------------------------------------------

    @invariant()
    def answers_keep_the_protocol(self) -> None:
        # Steps run the loop, so parked requests may have been answered.
        for errors, task in list(self.orphans):
            if task.done():
                self.orphans.remove((errors, task))
                answer = task.result()
                event(f"old incarnation's {type(answer).__name__[:-8]} {answer.error_code.name}")
                assert answer.error_code in errors, answer
        for client in self.clients:
            if client.join is not None and client.join.done():
                task, client.join = client.join, None
                self._joined(client, task.result())
            if client.sync is not None and client.sync.done():
                task, client.sync = client.sync, None
                self._synced(client, task.result())

    def _joined(self, client: Client, answer: Any) -> None:
        error = answer.error_code
        event(f"JoinGroup {error.name}")
        assert error in self._allowed(client, JOIN_ERRORS), answer
        if error == _E.member_id_required:
            client.member_id = answer.member_id
        elif error in (_E.unknown_member_id, _E.fenced_instance_id):
            client.member_id, client.generation, client.leader = "", -1, False
        elif error == _E.none:
            number = int(answer.generation_id)
            assert number >= max(client.generation, 1), (client, answer)
            generation = self.generations.setdefault(
                number, Generation(answer.leader, answer.protocol_name))
            if client.instance is not None:
                before = generation.static_ids.get(client.instance)
                if before is not None and before != answer.member_id:
                    generation.replaced[answer.member_id] = before
                    generation.members.discard(before)
                generation.static_ids[client.instance] = answer.member_id
            assert (generation.original(generation.leader), generation.protocol) == (
                generation.original(answer.leader), answer.protocol_name), (generation, answer)
            generation.members.add(answer.member_id)
            client.member_id, client.generation = answer.member_id, number
            client.leader = answer.leader == answer.member_id
            if client.leader:
                # A leader that rejoins with the same metadata before the
                # generation is synced gets the same generation and list
                # again; a static leader that rejoined under a new id gets
                # it with skip_assignment (KIP-814), its own id replaced.
                listed = tuple(m.member_id for m in answer.members)
                if answer.skip_assignment:
                    assert generation.listed is not None, answer
                    assert sorted(map(generation.original, listed)) == sorted(
                        map(generation.original, generation.listed)), (generation, answer)
                else:
                    assert generation.listed in (None, listed), (generation, answer)
                generation.listed = client.members = listed
            if generation.listed is not None:
                assert {generation.original(m) for m in generation.members} <= {
                    generation.original(m) for m in generation.listed}, generation

    def _synced(self, client: Client, answer: Any) -> None:
        error = answer.error_code
        event(f"SyncGroup {error.name}")
        assert error in self._allowed(client, SYNC_ERRORS), answer
        if error != _E.none:
            return
        generation = self.generations[client.sync_generation]
        assert generation.assigned is not None, "a SyncGroup answered before its leader's"
        expected = next((generation.assigned[m] for m in generation.lineage(client.sync_member)
                         if m in generation.assigned), b"")
        assert answer.assignment == expected, (generation, answer)
        assert answer.protocol_name == generation.protocol

    @staticmethod
    def _allowed(client: Client, errors: set[ErrorCode]) -> set[ErrorCode]:
        return errors | FENCED if client.instance is not None else errors

    def _check_liveness(self) -> None:
        """Clients stop; every parked request is answered within twice the
        rebalance timeout (the join's, then the pending sync's)."""
        waited = 0.0
        while self.orphans or any(c.join is not None or c.sync is not None
                                  for c in self.clients):
            assert waited < 2 * REBALANCE_MS / 1000 + 0.5, (
                f"parked requests unanswered after {waited:.2f} s: "
                f"{[(c.member_id, c.join, c.sync) for c in self.clients]} {self.orphans}")
            self.broker.run_for(0.02)
            waited += 0.02
            self.answers_keep_the_protocol()


TestGroupProtocol = GroupProtocolMachine.TestCase
TestGroupProtocol.settings = settings(
    max_examples=int(os.environ.get("RAFTLOG_GROUP_FUZZ_EXAMPLES", "15")),
    stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
