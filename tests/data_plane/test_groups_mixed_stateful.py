"""A stateful fuzz of a group whose members speak both protocols (KIP-848
online migration), on the wire: two consumers send ConsumerGroupHeartbeat
v1, two classic consumers (eager, "range") send JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, to one broker's handlers, in orders Hypothesis
picks, while real time passes. The group is upgraded when a consumer joins
a classic group and written back as a classic group when only classic
members remain (``group.consumer.migration.policy=bidirectional``).

Each client keeps only what the broker told it, and holds the partitions
its last answer gave it, as a real consumer would: a consumer holds its
last heartbeat's assignment; a classic consumer holds its last SyncGroup's
assignment and gives everything up before it rejoins (eager).

Checked after every step:
- every answer's error is one the API may give a live client;
- safety: no partition is held by two clients that the coordinator still
  counts as members (ConsumerGroupDescribe, or DescribeGroups once the group
  is classic). A client it has removed (fenced, expired) may still think it
  holds partitions: it learns otherwise on its next request, and its commits
  are refused meanwhile, as in Kafka.

Liveness, once the random steps end: every client follows the protocol
(heartbeat; rejoin and sync when told to) and within a few seconds every
partition of the topic is held by exactly one client, and every client is a
member.

``RAFTLOG_MIXED_GROUP_FUZZ_EXAMPLES`` raises the number of runs (default 10;
past a few hundred, add ``--timeout=0``).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.consumer_group_describe.v1 import request as cgd1
from kio.schema.consumer_group_heartbeat.v1 import request as cgh1
from kio.schema.describe_groups.v5 import request as dg5
from kio.schema.heartbeat.v4 import request as hb4
from kio.schema.join_group.v9 import request as jg9
from kio.schema.leave_group.v5 import request as lg5
from kio.schema.sync_group.v5 import request as sg5
from single_broker import SingleBroker

from data_plane.groups.consumer_protocol import decode_assignment
from data_plane.groups.testing import assignment, subscription
from raftlog.net.errors import ErrorCode

GROUP = "mixed"
TOPIC = "u"
PARTITIONS = 6
SESSION_MS = 5_000
REBALANCE_MS = 150
CONSUMERS = (0, 1)  # ConsumerGroupHeartbeat
CLASSICS = (2, 3)  # JoinGroup / SyncGroup, eager

_E = ErrorCode
HEARTBEAT_848_ERRORS = {_E.none, _E.fenced_member_epoch, _E.unknown_member_id}
#: A classic consumer's requests: the classic protocol's answers, plus what a
#: consumer group answers a classic member (KIP-848).
JOIN_ERRORS = {_E.none, _E.member_id_required, _E.unknown_member_id, _E.rebalance_in_progress}
SYNC_ERRORS = {_E.none, _E.unknown_member_id, _E.illegal_generation, _E.rebalance_in_progress}
HEARTBEAT_ERRORS = SYNC_ERRORS


def partitions_of(assignment_bytes: bytes) -> frozenset[int]:
    """The partitions of TOPIC in a SyncGroup's ConsumerProtocolAssignment."""
    parts, _ = decode_assignment(assignment_bytes)
    return frozenset(p for name, ps in parts if name == TOPIC for p in ps)


@dataclass
class Client:
    index: int
    classic: bool
    member_id: str = ""
    epoch: int = 0  # member epoch (consumer) or generation (classic; -1: none)
    held: frozenset[int] = frozenset()
    leader: bool = False
    members: tuple[str, ...] = ()  # a classic leader's member list
    join: asyncio.Task[Any] | None = None
    sync: asyncio.Task[Any] | None = None
    sync_generation: int = -1  # what the pending SyncGroup was sent with
    synced: int = -1  # the generation its last successful SyncGroup was for
    rejoin: bool = False  # told to rejoin (REBALANCE_IN_PROGRESS)
    history: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.history.append(what)


class MixedGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker = SingleBroker({"group.initial.rebalance.delay.ms": "0",
                                    "group.min.session.timeout.ms": "100",
                                    "group.consumer.session.timeout.ms": str(SESSION_MS),
                                    "group.consumer.heartbeat.interval.ms": "100",
                                    "group.consumer.migration.policy": "bidirectional"})
        assert self.broker.cluster.create_topic(TOPIC, PARTITIONS, 1) is _E.none
        image_topic = self.broker.cluster.image.topic_by_name(TOPIC)
        assert image_topic is not None
        self.topic_id: uuid.UUID = image_topic.topic_id
        self.clients = [Client(i, classic=i in CLASSICS) for i in range(4)]
        for c in self.clients:
            if c.classic:
                c.epoch = -1
        self.kinds: set[str] = set()
        self.kind = ""  # what the group was at the last look
        self.changes: dict[str, int] = {}

    def teardown(self) -> None:
        try:
            self._check_liveness()
        finally:
            event(f"group kinds seen: {sorted(self.kinds)}")
            for change in ("upgrade", "downgrade"):
                event(f"{change}s: {min(self.changes.get(change, 0), 3)}")
            self.broker.close()

    # --- consumers (KIP-848) ----------------------------------------------------------

    @rule(i=st.sampled_from(CONSUMERS))
    def consumer_heartbeat(self, i: int) -> None:
        self._consumer_heartbeat(self.clients[i])

    def _consumer_heartbeat(self, c: Client) -> None:
        joining = c.epoch == 0
        if not c.member_id:
            c.member_id = f"consumer-{c.index}-{uuid.uuid4()}"
        answer = self.broker.call(68, cgh1.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=c.member_id, member_epoch=c.epoch,
            rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS),
            subscribed_topic_names=(TOPIC,) if joining else None,
            topic_partitions=(cgh1.TopicPartitions(topic_id=self.topic_id,
                                                   partitions=tuple(sorted(c.held))),)))
        error = answer.error_code
        event(f"ConsumerGroupHeartbeat {error.name}")
        c.note(f"hb{c.epoch}->{error.name}")
        # A member of a consumer group that was written back as a classic
        # group (it was fenced, and only classic members were left) is told
        # GROUP_ID_NOT_FOUND, as in Kafka, and joins again at epoch 0 (which
        # upgrades the group again); a join itself is never refused here.
        allowed = HEARTBEAT_848_ERRORS | (set() if joining else {_E.group_id_not_found})
        assert error in allowed, (answer.error_message, c)
        if error == _E.none:
            assert answer.member_id == c.member_id, answer
            assert answer.member_epoch >= c.epoch, (c, answer)
            c.epoch = int(answer.member_epoch)
            if answer.assignment is not None:
                got = {(tp.topic_id, int(p)) for tp in answer.assignment.topic_partitions
                       for p in tp.partitions}
                assert {t for t, _ in got} <= {self.topic_id}, answer
                c.held = frozenset(p for _, p in got)
        else:
            # Fenced or unknown: give everything up and join again at epoch 0.
            c.epoch, c.held = 0, frozenset()

    @rule(i=st.sampled_from(CONSUMERS))
    def consumer_leave(self, i: int) -> None:
        c = self.clients[i]
        if not c.member_id:
            return
        c.held = frozenset()  # revoked before leaving
        answer = self.broker.call(68, cgh1.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=c.member_id, member_epoch=-1,
            rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS),
            topic_partitions=None))
        c.note(f"leave->{answer.error_code.name}")
        # (GROUP_ID_NOT_FOUND: the group is classic by now, as in Kafka.)
        assert answer.error_code in HEARTBEAT_848_ERRORS | {_E.group_id_not_found}, answer
        c.member_id, c.epoch = "", 0

    # --- classic consumers --------------------------------------------------------------

    @rule(i=st.sampled_from(CLASSICS))
    def classic_join(self, i: int) -> None:
        c = self.clients[i]
        if c.join is not None or c.sync is not None:
            return  # a consumer waits for its answer
        self._send_join(c)
        self.check_answers()
        if c.join is None and c.member_id and c.epoch < 0:
            self._send_join(c)  # after MEMBER_ID_REQUIRED, at once (KIP-394)

    def _send_join(self, c: Client) -> None:
        c.held = frozenset()  # eager: everything is given up before a rejoin
        c.note(f"join{c.epoch}")
        c.join = self.broker.start(11, jg9.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
            rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS),
            member_id=c.member_id, group_instance_id=None, protocol_type="consumer",
            protocols=(jg9.JoinGroupRequestProtocol(name="range", metadata=subscription(TOPIC)),),
            reason=None))
        self.broker.run_for(0)

    @rule(i=st.sampled_from(CLASSICS))
    def classic_sync(self, i: int) -> None:
        c = self.clients[i]
        if c.epoch <= 0 or c.sync is not None or c.join is not None:
            return
        assignments: tuple[sg5.SyncGroupRequestAssignment, ...] = ()
        if c.leader:  # a classic group's leader assigns, round-robin
            assignments = tuple(
                sg5.SyncGroupRequestAssignment(member_id=member, assignment=assignment(
                    {TOPIC: [p for p in range(PARTITIONS) if p % len(c.members) == n]}))
                for n, member in enumerate(c.members))
        c.sync_generation = c.epoch
        c.note(f"sync{c.epoch}")
        c.sync = self.broker.start(14, sg5.SyncGroupRequest(
            group_id=GROUP, generation_id=c.epoch, member_id=c.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=assignments))
        self.broker.run_for(0)

    @rule(i=st.sampled_from(CLASSICS))
    def classic_heartbeat(self, i: int) -> None:
        c = self.clients[i]
        if not c.member_id or c.epoch < 0:
            return
        self._classic_heartbeat(c)

    def _classic_heartbeat(self, c: Client) -> ErrorCode:
        answer = self.broker.call(12, hb4.HeartbeatRequest(
            group_id=GROUP, generation_id=c.epoch, member_id=c.member_id,
            group_instance_id=None))
        error = answer.error_code
        event(f"classic Heartbeat {error.name}")
        c.note(f"chb{c.epoch}->{error.name}")
        assert error in HEARTBEAT_ERRORS, answer
        if error in (_E.unknown_member_id, _E.illegal_generation):
            self._reset_classic(c, forget_id=error == _E.unknown_member_id)
        elif error == _E.rebalance_in_progress:
            c.rejoin = True
        return error

    @rule(i=st.sampled_from(CLASSICS))
    def classic_leave(self, i: int) -> None:
        c = self.clients[i]
        if not c.member_id:
            return
        c.held = frozenset()
        answer = self.broker.call(13, lg5.LeaveGroupRequest(group_id=GROUP, members=(
            lg5.MemberIdentity(member_id=c.member_id, group_instance_id=None, reason=None),)))
        assert answer.error_code == _E.none, answer
        (member,) = answer.members
        c.note(f"leave->{member.error_code.name}")
        assert member.error_code in {_E.none, _E.unknown_member_id}, answer
        self._reset_classic(c, forget_id=True)

    @staticmethod
    def _reset_classic(c: Client, *, forget_id: bool) -> None:
        c.held, c.epoch, c.leader, c.synced = frozenset(), -1, False, -1
        if forget_id:
            c.member_id = ""

    @rule(ms=st.sampled_from([0, 5, 40, 100, 200]))
    def wait(self, ms: int) -> None:
        self.broker.run_for(ms / 1000)

    # --- answers and checks --------------------------------------------------------------

    @invariant()
    def check_answers(self) -> None:
        for c in self.clients:
            if c.join is not None and c.join.done():
                task, c.join = c.join, None
                self._joined(c, task.result())
            if c.sync is not None and c.sync.done():
                task, c.sync = c.sync, None
                self._synced(c, task.result())

    def _joined(self, c: Client, answer: Any) -> None:
        error = answer.error_code
        event(f"JoinGroup {error.name}")
        c.note(f"joined->{error.name}")
        assert error in JOIN_ERRORS, answer
        if error == _E.member_id_required:
            c.member_id = answer.member_id
        elif error == _E.unknown_member_id:
            self._reset_classic(c, forget_id=True)
        elif error == _E.none:
            assert answer.member_id == c.member_id or not c.member_id, (c, answer)
            c.member_id, c.epoch = answer.member_id, int(answer.generation_id)
            c.rejoin, c.synced = False, -1  # a SyncGroup follows every join
            c.leader = answer.leader == answer.member_id
            c.members = tuple(m.member_id for m in answer.members) if c.leader else ()

    def _synced(self, c: Client, answer: Any) -> None:
        error = answer.error_code
        event(f"SyncGroup {error.name}")
        c.note(f"synced->{error.name}")
        assert error in SYNC_ERRORS, answer
        if error == _E.none and c.sync_generation == c.epoch:
            c.held, c.synced = partitions_of(answer.assignment), c.epoch
        elif error == _E.rebalance_in_progress:
            c.rejoin = True
        elif error in (_E.unknown_member_id, _E.illegal_generation):
            self._reset_classic(c, forget_id=error == _E.unknown_member_id)

    @invariant()
    def no_partition_held_twice(self) -> None:
        counted = self._members()
        seen: dict[int, int] = {}
        for c in self.clients:
            if c.member_id not in counted:
                continue
            for p in c.held:
                assert p not in seen, (
                    f"partition {p} held by clients {seen[p]} and {c.index}: "
                    f"{[(x.index, x.member_id[:12], x.epoch, sorted(x.held), x.history[-8:]) for x in self.clients]}")
                seen[p] = c.index

    def _members(self) -> set[str]:
        """The member ids the coordinator counts, whichever kind the group is."""
        answer = self.broker.call(69, cgd1.ConsumerGroupDescribeRequest(
            group_ids=(GROUP,), include_authorized_operations=False))
        (group,) = answer.groups
        if group.error_code == _E.none:
            self._saw("consumer")
            types = {m.member_type for m in group.members}
            if types == {0, 1}:
                self.kinds.add("mixed")
            return {m.member_id for m in group.members}
        assert group.error_code == _E.group_id_not_found, answer
        answer = self.broker.call(15, dg5.DescribeGroupsRequest(
            groups=(GROUP,), include_authorized_operations=False))
        (described,) = answer.groups
        if described.members:
            self._saw("classic")
        return {m.member_id for m in described.members}

    def _saw(self, kind: str) -> None:
        if (self.kind, kind) in (("classic", "consumer"), ("consumer", "classic")):
            change = "upgrade" if kind == "consumer" else "downgrade"
            self.changes[change] = self.changes.get(change, 0) + 1
        self.kind = kind
        self.kinds.add(kind)

    # --- liveness --------------------------------------------------------------------------

    def _check_liveness(self) -> None:
        """Every client follows the protocol from here on: the topic's
        partitions end up held once each, and every client is a member."""
        for c in self.clients:
            if not c.member_id and not c.classic:
                c.member_id = f"consumer-{c.index}-{uuid.uuid4()}"
        deadline = time.monotonic() + 10
        while True:
            for c in self.clients:
                if c.classic:
                    self._classic_step(c)
                else:
                    self._consumer_heartbeat(c)
            self.broker.run_for(0.02)
            self.check_answers()
            self.no_partition_held_twice()
            members = self._members()
            held = sorted(p for c in self.clients if c.member_id in members for p in c.held)
            everyone = all(c.member_id in members for c in self.clients)
            if held == list(range(PARTITIONS)) and everyone:
                return
            assert time.monotonic() < deadline, (
                f"not converged: held {held}, members {sorted(members)}, "
                f"{[(x.index, x.member_id, x.epoch, sorted(x.held), x.history[-10:]) for x in self.clients]}")

    def _classic_step(self, c: Client) -> None:
        """What a classic consumer's poll loop does next."""
        if c.join is not None or c.sync is not None:
            return  # waiting for an answer
        if c.epoch < 0 or c.rejoin:
            self.classic_join(c.index)
            if c.join is not None or c.epoch < 0:
                return  # parked (a classic group's rebalance), or to join again
        if c.synced != c.epoch:
            self.classic_sync(c.index)  # at once after the join, as a consumer does
            self.check_answers()
        else:
            self._classic_heartbeat(c)


TestMixedGroupProtocol = MixedGroupMachine.TestCase
TestMixedGroupProtocol.settings = settings(
    max_examples=int(os.environ.get("RAFTLOG_MIXED_GROUP_FUZZ_EXAMPLES", "10")),
    stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
