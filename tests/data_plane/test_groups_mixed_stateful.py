"""A stateful fuzz of a group whose members speak both protocols (KIP-848
online migration), on the wire: two consumers send ConsumerGroupHeartbeat
v1, two classic consumers send JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, to one broker's handlers, in orders Hypothesis picks, while real
time passes. One classic consumer offers "range" only (eager); the other
offers "cooperative-sticky" first, then "range" (KIP-429), and follows
whichever its group chose. The eager one is a static member (KIP-345,
``group.instance.id``) whose process restarts: it rejoins under a new
member id, replacing its old one. The group is upgraded when a consumer joins a
classic group and written back as a classic group when only classic members
remain (``group.consumer.migration.policy=bidirectional``).

Each client keeps only what the broker told it, and holds the partitions
its last answer gave it, as a real consumer would: a consumer holds its
last heartbeat's assignment; a classic consumer holds its last SyncGroup's
assignment. Under an eager protocol it gives everything up before it
rejoins; under a cooperative one it keeps its partitions through a rejoin,
reports them as owned, gives up at its SyncGroup what it was not given and
then rejoins. A classic group's leader assigns round-robin, and under the
cooperative protocol gives no one a partition another member still owns.

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

Found with it (tests in test_groups_migration.py): a downgrade wrote each
member's target as its assignment, so an upgrade right after it gave away
partitions a classic member still held; and an upgrade during a rebalance
refused a member that did not offer the group's last protocol.

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

from data_plane.groups.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from data_plane.groups.testing import assignment
from raftlog.net.errors import ErrorCode

GROUP = "mixed"
TOPIC = "u"
PARTITIONS = 6
SESSION_MS = 5_000
REBALANCE_MS = 150
CONSUMERS = (0, 1)  # ConsumerGroupHeartbeat
CLASSICS = (2, 3)  # JoinGroup / SyncGroup
STATIC = 2  # group.instance.id "static-2"
COOPERATIVE = 3  # offers "cooperative-sticky" before "range" (KIP-429); 2 offers "range" only

_E = ErrorCode
HEARTBEAT_848_ERRORS = {_E.none, _E.fenced_member_epoch, _E.unknown_member_id}
#: A classic consumer's requests: the classic protocol's answers, plus what a
#: consumer group answers a classic member (KIP-848).
JOIN_ERRORS = {_E.none, _E.member_id_required, _E.unknown_member_id, _E.rebalance_in_progress}
SYNC_ERRORS = {_E.none, _E.unknown_member_id, _E.illegal_generation, _E.rebalance_in_progress}
HEARTBEAT_ERRORS = SYNC_ERRORS


def allowed_for(c: Client, errors: set[ErrorCode]) -> set[ErrorCode]:
    """A static member's old member id, once replaced, is FENCED_INSTANCE_ID."""
    return errors | {_E.fenced_instance_id} if c.index == STATIC else errors


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
    owned: dict[str, frozenset[int]] = field(default_factory=dict)  # ... and what each owns
    protocol: str = "range"  # of its last generation
    join: asyncio.Task[Any] | None = None
    sync: asyncio.Task[Any] | None = None
    #: The protocol of its last generation is cooperative: it keeps its
    #: partitions through a rejoin (reporting them as owned) and gives up,
    #: at its SyncGroup, only what it is no longer assigned.
    cooperative: bool = False
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
        if not c.cooperative:
            c.held = frozenset()  # eager: everything is given up before a rejoin
        c.note(f"join{c.epoch}{'c' if c.cooperative else ''}")
        metadata = encode_subscription(Subscription(
            1, (TOPIC,), None, ((TOPIC, tuple(sorted(c.held))),) if c.held else ()))
        names = ("cooperative-sticky", "range") if c.index == COOPERATIVE else ("range",)
        c.join = self.broker.start(11, jg9.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
            rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS),
            member_id=c.member_id, group_instance_id=self._instance(c), protocol_type="consumer",
            protocols=tuple(jg9.JoinGroupRequestProtocol(name=n, metadata=metadata)
                            for n in names),
            reason=None))
        self.broker.run_for(0)

    @rule(i=st.sampled_from(CLASSICS))
    def classic_sync(self, i: int) -> None:
        c = self.clients[i]
        if c.epoch <= 0 or c.sync is not None or c.join is not None:
            return
        assignments: tuple[sg5.SyncGroupRequestAssignment, ...] = ()
        if c.leader:  # a classic group's leader assigns
            assignments = tuple(
                sg5.SyncGroupRequestAssignment(member_id=member, assignment=assignment(
                    {TOPIC: sorted(parts)}))
                for member, parts in self._leader_plan(c).items())
        c.sync_generation = c.epoch
        c.note(f"sync{c.epoch}")
        c.sync = self.broker.start(14, sg5.SyncGroupRequest(
            group_id=GROUP, generation_id=c.epoch, member_id=c.member_id,
            group_instance_id=self._instance(c), protocol_type="consumer", protocol_name=c.protocol,
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
            group_instance_id=self._instance(c)))
        error = answer.error_code
        event(f"classic Heartbeat {error.name}")
        c.note(f"chb{c.epoch}->{error.name}")
        assert error in allowed_for(c, HEARTBEAT_ERRORS), answer
        if error in (_E.unknown_member_id, _E.illegal_generation, _E.fenced_instance_id):
            self._reset_classic(c, forget_id=error != _E.illegal_generation)
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
            lg5.MemberIdentity(member_id=c.member_id, group_instance_id=self._instance(c), reason=None),)))
        assert answer.error_code == _E.none, answer
        (member,) = answer.members
        c.note(f"leave->{member.error_code.name}")
        assert member.error_code in allowed_for(c, {_E.none, _E.unknown_member_id}), answer
        self._reset_classic(c, forget_id=True)

    @staticmethod
    def _instance(c: Client) -> str | None:
        return "static-2" if c.index == STATIC else None

    @rule()
    def restart_static(self) -> None:
        """The static member's process restarts: it forgets its member id
        and its partitions, and joins again with its group.instance.id."""
        c = self.clients[STATIC]
        if c.join is not None or c.sync is not None:
            return
        self._reset_classic(c, forget_id=True)
        c.note("restart")
        self.classic_join(STATIC)

    @staticmethod
    def _leader_plan(c: Client) -> dict[str, frozenset[int]]:
        """A classic group leader's assignment: round-robin over its member
        list. Under a cooperative protocol a partition another member still
        owns is given to no one this generation (its owner, not assigned
        it, gives it up and rejoins), as the cooperative assignors do."""
        plan = {m: frozenset(p for p in range(PARTITIONS) if p % len(c.members) == n)
                for n, m in enumerate(c.members)}
        if c.protocol != "cooperative-sticky":
            return plan
        return {m: frozenset(p for p in parts
                             if all(p not in c.owned.get(o, ()) for o in c.members if o != m))
                for m, parts in plan.items()}

    @staticmethod
    def _reset_classic(c: Client, *, forget_id: bool) -> None:
        c.held, c.epoch, c.leader, c.synced = frozenset(), -1, False, -1
        c.cooperative = False
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
        assert error in allowed_for(c, JOIN_ERRORS), answer
        if error == _E.member_id_required:
            c.member_id = answer.member_id
        elif error in (_E.unknown_member_id, _E.fenced_instance_id):
            self._reset_classic(c, forget_id=True)
        elif error == _E.none:
            assert answer.member_id == c.member_id or not c.member_id, (c, answer)
            c.member_id, c.epoch = answer.member_id, int(answer.generation_id)
            c.rejoin, c.synced = False, -1  # a SyncGroup follows every join
            c.leader = answer.leader == answer.member_id
            c.members = tuple(m.member_id for m in answer.members) if c.leader else ()
            c.owned = {m.member_id: frozenset(
                p for name, ps in decode_subscription(m.metadata).owned_partitions
                if name == TOPIC for p in ps) for m in answer.members} if c.leader else {}
            c.protocol = str(answer.protocol_name)
            c.cooperative = c.protocol == "cooperative-sticky"
            if not c.cooperative:
                c.held = frozenset()  # the group chose an eager protocol: all is given up

    def _synced(self, c: Client, answer: Any) -> None:
        error = answer.error_code
        event(f"SyncGroup {error.name}")
        c.note(f"synced->{error.name}")
        allowed = set(allowed_for(c, SYNC_ERRORS))  # a copy: added to below
        if c.index == COOPERATIVE:
            # It offers two protocols, and the group changed kind between its
            # JoinGroup and its SyncGroup: a consumer group holds a classic
            # member to the first protocol it offered, a classic group to the
            # one it chose; the other is INCONSISTENT_GROUP_PROTOCOL, as in
            # Kafka. (A member offering one protocol never meets this.)
            allowed.add(_E.inconsistent_group_protocol)
        assert error in allowed, answer
        if error == _E.none and c.sync_generation == c.epoch:
            given = partitions_of(answer.assignment)
            revoked = c.held - given
            c.held, c.synced = given, c.epoch
            if c.cooperative and revoked:
                c.rejoin = True  # KIP-429: a member that gave partitions up rejoins
        elif error in (_E.rebalance_in_progress, _E.inconsistent_group_protocol):
            c.rejoin = True
        elif error in (_E.unknown_member_id, _E.illegal_generation, _E.fenced_instance_id):
            self._reset_classic(c, forget_id=error != _E.illegal_generation)

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
