"""ACL enforcement in the group-coordinator and transaction handlers
(`data_plane.api.groups`, `.coordinator`, `.txn`, `.txn_admin`,
`.producer_ids`), with Kafka's rules (``KafkaApis``, KRaft mode).

One broker with ``authorizer.class.name`` set runs over the fake metadata
cluster; its ACLs are put straight into the metadata image. Requests are
handed to the broker's handlers with a `RequestContext` naming the principal
(``User:alice`` unless said), and the answers are read back from the wire.
``User:admin`` and ``User:ANONYMOUS`` (what the broker's own marker channel
sends as on PLAINTEXT) are super users.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from kio.serial import entity_reader, entity_writer

from data_plane.api.build import build, response_class
from data_plane.api.common import BrokerApiContext
from data_plane.api.groups import GROUP_OPERATIONS
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.kafka_api import BROKER_API_VERSIONS, broker_handlers
from data_plane.security_config import STANDARD_AUTHORIZER
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from metadata_quorum.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from metadata_quorum.image import frozen_mapping
from raftlog.net import KafkaProtocolServer, RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import schemas

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
Op, Res = AclOperation, ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
E = ErrorCode

(OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
 DESCRIBE_GROUPS, LIST_GROUPS) = 8, 9, 10, 11, 12, 13, 14, 15, 16
INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, DELETE_GROUPS, OFFSET_DELETE = 27, 28, 42, 47
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69

AUTHORIZER_CONFIG = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:admin;User:ANONYMOUS",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def acl(resource_type: ResourceType, name: str, operation: AclOperation, *,
        permission: AclPermissionType = ALLOW, pattern: PatternType = LITERAL,
        principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


class Broker:
    """One broker on its own event loop thread: the handlers' `BrokerApiContext`
    also serves a real listener, so the transaction marker channel reaches it."""

    def __init__(self, static_config: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.controller = FakeMetadataCluster()
        self.metadata = self.controller.view(1)
        self.replicas = ReplicaManager(self.metadata, log_dirs=[tempfile.mkdtemp()],
                                       static_config=static_config)
        self.api = BrokerApiContext(self.metadata, self.replicas, "c")
        self.server = KafkaProtocolServer("127.0.0.1", 0, broker_handlers(self.api),
                                          supported=BROKER_API_VERSIONS)
        self.run(self._start())
        for name in ("t1", "t2"):
            self.run(self._call(self.controller.create_topic, name, 2, 1))
        self.topic_ids = {n: self.controller.image.topic_ids[n] for n in ("t1", "t2")}

    async def _start(self) -> None:
        await self.server.start()
        self.controller.register_broker(1, "127.0.0.1", self.server.port)
        await asyncio.sleep(0)
        self.replicas.start()

    @staticmethod
    async def _call(fn: Any, *args: Any) -> Any:
        result = fn(*args)
        await asyncio.sleep(0.01)  # deliver the image
        return result

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            await self.server.wait_closed()
            await self.replicas.close()
        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def set_acls(self, *bindings: AclBinding) -> None:
        """Replace the image's ACLs (as if the controller replayed them)."""
        acls = frozen_mapping({a.acl_id: a for a in (StandardAcl(uuid.uuid4(), b)
                                                     for b in bindings)})
        image = dataclasses.replace(self.controller.image, acls=acls)
        self.run(self._call(self.controller._publish, image))

    def call(self, api_key: int, version: int, values: dict[str, Any], *,
             user: str = "alice") -> Any:
        """The handler's answer to ``values`` at ``version`` as ``User:<user>``,
        encoded and decoded as a client would read it."""
        request = build(schemas(api_key, version).request, values)
        context = RequestContext(api_key, version, 1, "client", ("10.0.0.7", 5000),
                                 "PLAINTEXT", user=user)
        handler = broker_handlers(self.api)[api_key]

        async def invoke() -> Any:
            return await handler(context, request)
        response = self.run(invoke())
        buffer = io.BytesIO()
        entity_writer(type(response))(buffer, response)
        decoded, _ = entity_reader(response_class(request))(buffer.getvalue(), 0)
        return decoded

    @staticmethod
    def wait(predicate: Any, timeout_s: float = 15) -> None:
        """Poll ``predicate`` (which may call the broker) from this thread."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    b = Broker(AUTHORIZER_CONFIG)
    # Bring both coordinators up (as a super user).
    b.wait(lambda: _found(b, 0) and _found(b, 1))
    b.wait(lambda: _pid(b, "warm-up") >= 0)
    try:
        yield b
    finally:
        b.close()


def _found(b: Broker, key_type: int) -> bool:
    answer = b.call(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": ["x"]},
                    user="admin")
    return bool(answer.coordinators[0].error_code == E.none)


def _pid(b: Broker, tid: str | None, *, user: str = "admin") -> int:
    answer = b.call(INIT_PRODUCER_ID, 4, {
        "transactional_id": tid, "transaction_timeout": datetime.timedelta(seconds=60),
        "producer_id": -1, "producer_epoch": -1}, user=user)
    return int(answer.producer_id) if answer.error_code == E.none else -1


# ==== FindCoordinator ===================================================================


def test_find_coordinator_checks_describe_on_each_key(broker: Broker) -> None:
    broker.set_acls(acl(Res.GROUP, "g-ok", Op.READ),  # READ implies DESCRIBE
                    acl(Res.TRANSACTIONAL_ID, "tx-ok", Op.DESCRIBE))
    groups = broker.call(FIND_COORDINATOR, 4, {"key_type": 0,
                                               "coordinator_keys": ["g-ok", "g-no"]})
    assert {c.key: c.error_code for c in groups.coordinators} == {
        "g-ok": E.none, "g-no": E.group_authorization_failed}
    refused = next(c for c in groups.coordinators if c.key == "g-no")
    assert (refused.node_id, refused.host, refused.port) == (-1, "", -1)
    txns = broker.call(FIND_COORDINATOR, 4, {"key_type": 1,
                                             "coordinator_keys": ["tx-ok", "g-ok"]})
    assert {c.key: c.error_code for c in txns.coordinators} == {
        "tx-ok": E.none, "g-ok": E.transactional_id_authorization_failed}
    # Versions before 4 carry one key.
    assert broker.call(FIND_COORDINATOR, 3, {"key": "g-no", "key_type": 0}).error_code \
        == E.group_authorization_failed
    assert broker.call(FIND_COORDINATOR, 3, {"key": "g-ok", "key_type": 0}).error_code == E.none


# ==== classic membership ================================================================


def _join(broker: Broker, group: str, member_id: str = "", *, user: str = "alice") -> Any:
    return broker.call(JOIN_GROUP, 9, {
        "group_id": group, "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": member_id,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
        user=user)


def _membership_errors(broker: Broker, group: str) -> dict[str, ErrorCode]:
    return {
        "join": _join(broker, group).error_code,
        "sync": broker.call(SYNC_GROUP, 5, {
            "group_id": group, "generation_id": 1, "member_id": "m",
            "protocol_type": "consumer", "protocol_name": "range"}).error_code,
        "heartbeat": broker.call(HEARTBEAT, 4, {
            "group_id": group, "generation_id": 1, "member_id": "m"}).error_code,
        "leave": broker.call(LEAVE_GROUP, 5, {
            "group_id": group, "members": [{"member_id": "m"}]}).error_code,
    }


def test_membership_apis_need_read_on_the_group(broker: Broker) -> None:
    broker.set_acls(acl(Res.GROUP, "member-g", Op.DESCRIBE))  # DESCRIBE is not READ
    assert set(_membership_errors(broker, "member-g").values()) == {E.group_authorization_failed}
    leave = broker.call(LEAVE_GROUP, 5, {"group_id": "member-g", "members": [{"member_id": "m"}]})
    assert leave.members == ()  # Kafka's error response: no member results

    broker.set_acls(acl(Res.GROUP, "member-g", Op.READ))
    errors = _membership_errors(broker, "member-g")
    assert E.group_authorization_failed not in errors.values()
    assert errors["join"] == E.member_id_required  # served: KIP-394's first round trip


def test_a_full_classic_rebalance_with_read_on_the_group(broker: Broker) -> None:
    broker.set_acls(acl(Res.GROUP, "full-g", Op.READ))
    member = _join(broker, "full-g").member_id
    joined = _join(broker, "full-g", member)
    assert joined.error_code == E.none and joined.leader == member
    synced = broker.call(SYNC_GROUP, 5, {
        "group_id": "full-g", "generation_id": joined.generation_id, "member_id": member,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b"a"}]})
    assert synced.error_code == E.none and synced.assignment == b"a"
    assert broker.call(HEARTBEAT, 4, {"group_id": "full-g", "generation_id": joined.generation_id,
                                      "member_id": member}).error_code == E.none
    left = broker.call(LEAVE_GROUP, 5, {"group_id": "full-g", "members": [{"member_id": member}]})
    assert left.error_code == E.none and left.members[0].error_code == E.none


def test_deny_beats_allow_and_prefixed_acls_match_by_prefix(broker: Broker) -> None:
    broker.set_acls(
        acl(Res.GROUP, "team-", Op.READ, pattern=PREFIXED),
        acl(Res.GROUP, "*", Op.READ),
        acl(Res.GROUP, "team-secret", Op.READ, permission=DENY),
        acl(Res.GROUP, "blocked-", Op.ALL, permission=DENY, pattern=PREFIXED),
    )
    assert _join(broker, "team-a").error_code == E.member_id_required
    assert _join(broker, "anything").error_code == E.member_id_required
    assert _join(broker, "team-secret").error_code == E.group_authorization_failed
    assert _join(broker, "blocked-1").error_code == E.group_authorization_failed
    # A super user is not subject to ACLs at all.
    assert _join(broker, "team-secret", user="admin").error_code == E.member_id_required
    # The ACL's host must match the request's.
    broker.set_acls(acl(Res.GROUP, "hosted", Op.READ, host="10.0.0.8"))
    assert _join(broker, "hosted").error_code == E.group_authorization_failed
    broker.set_acls(acl(Res.GROUP, "hosted", Op.READ, host="10.0.0.7"))
    assert _join(broker, "hosted").error_code == E.member_id_required


# ==== offsets ===========================================================================


def _commit(broker: Broker, group: str, offsets: dict[tuple[str, int], int], *,
            user: str = "alice") -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "committed_metadata": ""})
    answer = broker.call(OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, user=user)
    return {(t.name, p.partition_index): p.error_code
            for t in answer.topics for p in t.partitions}


def _fetched(group: Any) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in group.topics for p in t.partitions}


def test_offset_commit_needs_read_on_the_group_then_on_each_topic(broker: Broker) -> None:
    wanted = {("t1", 0): 5, ("t1", 1): 6, ("t2", 0): 7}
    broker.set_acls(acl(Res.TOPIC, "*", Op.READ))
    assert set(_commit(broker, "commit-g", wanted).values()) == {E.group_authorization_failed}

    broker.set_acls(acl(Res.GROUP, "commit-g", Op.READ), acl(Res.TOPIC, "t1", Op.READ),
                    acl(Res.TOPIC, "t2", Op.DESCRIBE))  # DESCRIBE is not READ
    assert _commit(broker, "commit-g", wanted) == {
        ("t1", 0): E.none, ("t1", 1): E.none, ("t2", 0): E.topic_authorization_failed}
    # Only the authorized partitions were committed.
    admin = broker.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "commit-g", "topics": None}]},
                        user="admin")
    assert _fetched(admin.groups[0]) == {("t1", 0): (5, E.none), ("t1", 1): (6, E.none)}
    # Nothing authorized: nothing is written.
    assert _commit(broker, "commit-g", {("t2", 1): 9}) == {("t2", 1): E.topic_authorization_failed}


def test_offset_fetch_hides_topics_the_principal_may_not_describe(broker: Broker) -> None:
    assert set(_commit(broker, "fetch-g", {("t1", 0): 10, ("t2", 0): 20}, user="admin").values()) \
        == {E.none}
    broker.set_acls(acl(Res.GROUP, "fetch-g", Op.DESCRIBE), acl(Res.TOPIC, "t1", Op.DESCRIBE))
    # Named partitions: the hidden topic's come back TOPIC_AUTHORIZATION_FAILED.
    named = broker.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "fetch-g", "topics": [
        {"name": "t1", "partition_indexes": [0]}, {"name": "t2", "partition_indexes": [0]}]}]})
    assert named.groups[0].error_code == E.none
    assert _fetched(named.groups[0]) == {("t1", 0): (10, E.none),
                                         ("t2", 0): (-1, E.topic_authorization_failed)}
    # All partitions: the hidden topic is left out.
    every = broker.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "fetch-g", "topics": None}]})
    assert _fetched(every.groups[0]) == {("t1", 0): (10, E.none)}
    # v8+ batches groups: each is checked on its own.
    both = broker.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "fetch-g", "topics": None},
                                                    {"group_id": "other-g", "topics": None}]})
    assert {g.group_id: g.error_code for g in both.groups} == {
        "fetch-g": E.none, "other-g": E.group_authorization_failed}
    # Versions before 8: one group, the error at the top.
    old = broker.call(OFFSET_FETCH, 7, {"group_id": "other-g", "topics": None})
    assert old.error_code == E.group_authorization_failed and old.topics == ()
    old = broker.call(OFFSET_FETCH, 7, {"group_id": "fetch-g", "topics": None})
    assert old.error_code == E.none
    assert {(t.name, p.partition_index) for t in old.topics for p in t.partitions} == {("t1", 0)}


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(broker: Broker) -> None:
    _commit(broker, "delete-offsets-g", {("t1", 0): 1, ("t2", 0): 2}, user="admin")
    request = {"group_id": "delete-offsets-g", "topics": [
        {"name": "t1", "partitions": [{"partition_index": 0}]},
        {"name": "t2", "partitions": [{"partition_index": 0}]}]}
    broker.set_acls(acl(Res.GROUP, "delete-offsets-g", Op.READ), acl(Res.TOPIC, "*", Op.READ))
    refused = broker.call(OFFSET_DELETE, 0, request)
    assert refused.error_code == E.group_authorization_failed and refused.topics == ()

    broker.set_acls(acl(Res.GROUP, "delete-offsets-g", Op.DELETE), acl(Res.TOPIC, "t1", Op.READ))
    answer = broker.call(OFFSET_DELETE, 0, request)
    assert answer.error_code == E.none
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics
            for p in t.partitions} == {("t1", 0): E.none, ("t2", 0): E.topic_authorization_failed}
    left = broker.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "delete-offsets-g",
                                                     "topics": None}]}, user="admin")
    assert _fetched(left.groups[0]) == {("t2", 0): (2, E.none)}



def test_offsets_of_partitions_that_do_not_exist_are_refused_and_not_stored(
        broker: Broker) -> None:
    """Kafka's broker checks its metadata before OffsetCommit, TxnOffsetCommit
    and OffsetDelete reach the coordinator: an unknown topic or partition
    gets UNKNOWN_TOPIC_OR_PARTITION, and no offset is stored for it."""
    broker.set_acls()
    assert _commit(broker, "exists-g", {("t1", 0): 4, ("t1", 9): 5, ("nowhere", 0): 6},
                   user="admin") == {("t1", 0): E.none,
                                     ("t1", 9): E.unknown_topic_or_partition,
                                     ("nowhere", 0): E.unknown_topic_or_partition}
    # Only unknown partitions: nothing reaches the coordinator.
    assert _commit(broker, "exists-only-g", {("nowhere", 1): 1}, user="admin") == {
        ("nowhere", 1): E.unknown_topic_or_partition}
    listed = broker.call(LIST_GROUPS, 5, {}, user="admin")
    assert "exists-only-g" not in {g.group_id for g in listed.groups}
    stored = broker.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "exists-g", "topics": None}]},
                         user="admin")
    assert _fetched(stored.groups[0]) == {("t1", 0): (4, E.none)}

    deleted = broker.call(OFFSET_DELETE, 0, {"group_id": "exists-g", "topics": [
        {"name": "t1", "partitions": [{"partition_index": 0}, {"partition_index": 9}]},
        {"name": "nowhere", "partitions": [{"partition_index": 0}]}]}, user="admin")
    assert deleted.error_code == E.none
    assert {(t.name, p.partition_index): p.error_code for t in deleted.topics
            for p in t.partitions} == {("t1", 0): E.none,
                                       ("t1", 9): E.unknown_topic_or_partition,
                                       ("nowhere", 0): E.unknown_topic_or_partition}

    pid = _pid(broker, "exists-txn")
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "exists-txn", Op.WRITE),
                    acl(Res.GROUP, "exists-txn-g", Op.READ), acl(Res.TOPIC, "*", Op.READ))
    assert _add_offsets(broker, "exists-txn", pid, "exists-txn-g") == E.none
    answer = broker.call(TXN_OFFSET_COMMIT, 3, {
        "transactional_id": "exists-txn", "group_id": "exists-txn-g", "producer_id": pid,
        "producer_epoch": 0, "generation_id": -1, "member_id": "", "topics": [
            {"name": t, "partitions": [{"partition_index": i, "committed_offset": 3,
                                        "committed_leader_epoch": -1}]}
            for t, i in (("t2", 1), ("t2", 5), ("nowhere", 0))]})
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics
            for p in t.partitions} == {("t2", 1): E.none,
                                       ("t2", 5): E.unknown_topic_or_partition,
                                       ("nowhere", 0): E.unknown_topic_or_partition}


# ==== administration ====================================================================


def test_describe_groups_per_group_with_authorized_operations(broker: Broker) -> None:
    _commit(broker, "described-g", {("t1", 0): 1}, user="admin")
    broker.set_acls(acl(Res.GROUP, "described-g", Op.READ))
    answer = broker.call(DESCRIBE_GROUPS, 5, {"groups": ["described-g", "hidden-g"],
                                              "include_authorized_operations": True})
    by_id = {g.group_id: g for g in answer.groups}
    assert by_id["hidden-g"].error_code == E.group_authorization_failed
    assert by_id["described-g"].error_code == E.none
    assert by_id["described-g"].group_state == "Empty"
    # READ (and the DESCRIBE it implies), not DELETE.
    assert by_id["described-g"].authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    # Not asked: Kafka's INT32_MIN.
    plain = broker.call(DESCRIBE_GROUPS, 5, {"groups": ["described-g"]})
    assert plain.groups[0].authorized_operations == -(2**31)
    # A super user may do every group operation.
    admin = broker.call(DESCRIBE_GROUPS, 5, {"groups": ["described-g"],
                                             "include_authorized_operations": True}, user="admin")
    assert admin.groups[0].authorized_operations == sum(1 << op for op in GROUP_OPERATIONS)


def test_list_groups_shows_every_group_only_with_describe_on_the_cluster(broker: Broker) -> None:
    for group in ("listed-a", "listed-b", "listed-c"):
        _commit(broker, group, {("t1", 0): 1}, user="admin")

    def listed() -> set[str]:
        answer = broker.call(LIST_GROUPS, 5, {})
        assert answer.error_code == E.none
        return {g.group_id for g in answer.groups if g.group_id.startswith("listed-")}

    broker.set_acls()
    assert listed() == set()
    broker.set_acls(acl(Res.GROUP, "listed-a", Op.DESCRIBE), acl(Res.GROUP, "listed-c", Op.DELETE))
    assert listed() == {"listed-a", "listed-c"}  # DELETE implies DESCRIBE
    broker.set_acls(acl(Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE))
    assert listed() == {"listed-a", "listed-b", "listed-c"}


def test_delete_groups_needs_delete_on_each_group(broker: Broker) -> None:
    for group in ("doomed-a", "doomed-b"):
        _commit(broker, group, {("t1", 0): 1}, user="admin")
    broker.set_acls(acl(Res.GROUP, "doomed-a", Op.DELETE), acl(Res.GROUP, "doomed-b", Op.READ))
    answer = broker.call(DELETE_GROUPS, 2, {"groups_names": ["doomed-a", "doomed-b"]})
    assert {r.group_id: r.error_code for r in answer.results} == {
        "doomed-a": E.none, "doomed-b": E.group_authorization_failed}
    left = broker.call(DESCRIBE_GROUPS, 5, {"groups": ["doomed-a", "doomed-b"]}, user="admin")
    assert {g.group_id: g.group_state for g in left.groups} == {"doomed-a": "Dead",
                                                                 "doomed-b": "Empty"}


# ==== KIP-848 ===========================================================================


def _consumer_heartbeat(broker: Broker, group: str, *, names: list[str] | None = None,
                        regex: str | None = None, member_id: str = "",
                        epoch: int = 0) -> Any:
    return broker.call(CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member_id or str(uuid.uuid4()), "member_epoch": epoch,
        "rebalance_timeout": datetime.timedelta(seconds=30),
        "subscribed_topic_names": names if names is not None else ([] if regex else None),
        "subscribed_topic_regex": regex, "topic_partitions": [] if epoch == 0 else None})


def _assigned(answer: Any) -> set[uuid.UUID]:
    return {tp.topic_id for tp in answer.assignment.topic_partitions}


def test_consumer_group_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(
        broker: Broker) -> None:
    broker.set_acls(acl(Res.TOPIC, "*", Op.DESCRIBE))
    assert _consumer_heartbeat(broker, "kip848-g", names=["t1"]).error_code \
        == E.group_authorization_failed

    broker.set_acls(acl(Res.GROUP, "kip848-g", Op.READ), acl(Res.TOPIC, "t1", Op.DESCRIBE))
    assert _consumer_heartbeat(broker, "kip848-g", names=["t1", "t2"]).error_code \
        == E.topic_authorization_failed
    joined = _consumer_heartbeat(broker, "kip848-g", names=["t1"])
    assert joined.error_code == E.none and joined.member_epoch >= 1
    assert _assigned(joined) == {broker.topic_ids["t1"]}


def test_a_regex_subscription_resolves_only_to_topics_the_member_may_describe(
        broker: Broker) -> None:
    broker.set_acls(acl(Res.GROUP, "regex-g", Op.READ), acl(Res.TOPIC, "t1", Op.DESCRIBE))
    joined = _consumer_heartbeat(broker, "regex-g", regex="t.*")
    assert joined.error_code == E.none
    assert _assigned(joined) == {broker.topic_ids["t1"]}


def test_consumer_group_describe_per_group_and_hides_groups_with_hidden_topics(
        broker: Broker) -> None:
    broker.set_acls(acl(Res.GROUP, "described-848", Op.READ), acl(Res.TOPIC, "t1", Op.DESCRIBE))
    assert _consumer_heartbeat(broker, "described-848", names=["t1"]).error_code == E.none
    request = {"group_ids": ["described-848", "other-848"], "include_authorized_operations": True}
    answer = broker.call(CONSUMER_GROUP_DESCRIBE, 1, request)
    by_id = {g.group_id: g for g in answer.groups}
    assert by_id["other-848"].error_code == E.group_authorization_failed
    described = by_id["described-848"]
    assert described.error_code == E.none and len(described.members) == 1
    assert described.authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    # Without DESCRIBE on the assigned topic the group is not shown.
    broker.set_acls(acl(Res.GROUP, "described-848", Op.READ))
    hidden = broker.call(CONSUMER_GROUP_DESCRIBE, 1, request)
    [group] = [g for g in hidden.groups if g.group_id == "described-848"]
    assert group.error_code == E.topic_authorization_failed and group.members == ()


# ==== producer ids ======================================================================


def test_init_producer_id_with_a_transactional_id_needs_write_on_it(broker: Broker) -> None:
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "app-", Op.DESCRIBE, pattern=PREFIXED))
    refused = broker.call(INIT_PRODUCER_ID, 4, {
        "transactional_id": "app-1", "transaction_timeout": datetime.timedelta(seconds=60),
        "producer_id": -1, "producer_epoch": -1})
    assert refused.error_code == E.transactional_id_authorization_failed
    assert (refused.producer_id, refused.producer_epoch) == (-1, -1)
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "app-", Op.WRITE, pattern=PREFIXED))
    assert _pid(broker, "app-1", user="alice") >= 0
    assert _pid(broker, "other-1", user="alice") == -1


def test_init_producer_id_for_an_idempotent_producer(broker: Broker) -> None:
    def error() -> ErrorCode:
        return ErrorCode(broker.call(INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1, "producer_epoch": -1}).error_code)

    broker.set_acls()
    assert error() == E.cluster_authorization_failed
    broker.set_acls(acl(Res.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE))
    assert error() == E.none
    # KIP-679: WRITE on any topic will do (here through a prefixed ACL) ...
    broker.set_acls(acl(Res.TOPIC, "orders-", Op.WRITE, pattern=PREFIXED))
    assert error() == E.none
    # ... unless a DENY covers it.
    broker.set_acls(acl(Res.TOPIC, "orders-", Op.WRITE, pattern=PREFIXED),
                    acl(Res.TOPIC, "orders", Op.WRITE, pattern=PREFIXED, permission=DENY))
    assert error() == E.cluster_authorization_failed


# ==== transactions ======================================================================


def _add_partitions(broker: Broker, tid: str, pid: int, partitions: dict[str, list[int]], *,
                    user: str = "alice") -> dict[tuple[str, int], ErrorCode]:
    answer = broker.call(ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in partitions.items()]},
        user=user)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def test_add_partitions_to_txn_from_a_client(broker: Broker) -> None:
    pid = _pid(broker, "adder")
    wanted = {"t1": [0, 1], "t2": [0]}
    broker.set_acls(acl(Res.TOPIC, "*", Op.WRITE))
    assert set(_add_partitions(broker, "adder", pid, wanted).values()) \
        == {E.transactional_id_authorization_failed}

    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "adder", Op.WRITE), acl(Res.TOPIC, "t1", Op.WRITE))
    assert _add_partitions(broker, "adder", pid, wanted) == {
        ("t1", 0): E.operation_not_attempted, ("t1", 1): E.operation_not_attempted,
        ("t2", 0): E.topic_authorization_failed}
    # An unknown topic among the authorized ones is UNKNOWN_TOPIC_OR_PARTITION.
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "adder", Op.WRITE), acl(Res.TOPIC, "t1", Op.WRITE),
                    acl(Res.TOPIC, "gone", Op.WRITE))
    assert _add_partitions(broker, "adder", pid, {"t1": [0], "gone": [0], "t2": [0]}) == {
        ("t1", 0): E.operation_not_attempted, ("gone", 0): E.unknown_topic_or_partition,
        ("t2", 0): E.topic_authorization_failed}
    # An internal topic is never authorized, not even by WRITE on every topic.
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "adder", Op.WRITE), acl(Res.TOPIC, "*", Op.WRITE))
    assert _add_partitions(broker, "adder", pid, {"t1": [0], "__consumer_offsets": [0]}) == {
        ("t1", 0): E.operation_not_attempted,
        ("__consumer_offsets", 0): E.topic_authorization_failed}
    assert _add_partitions(broker, "adder", pid, wanted) == dict.fromkeys(
        [("t1", 0), ("t1", 1), ("t2", 0)], E.none)


def test_add_partitions_to_txn_between_brokers_needs_cluster_action(broker: Broker) -> None:
    request = {"transactions": [{
        "transactional_id": "verified", "producer_id": 1, "producer_epoch": 0,
        "verify_only": True, "topics": [{"name": "t1", "partitions": [0]}]}]}
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "*", Op.ALL), acl(Res.TOPIC, "*", Op.ALL))
    refused = broker.call(ADD_PARTITIONS_TO_TXN, 4, request)
    assert refused.error_code == E.cluster_authorization_failed
    assert refused.results_by_transaction == ()
    for answer in (broker.call(ADD_PARTITIONS_TO_TXN, 4, request, user="admin"),
                   _with_cluster_action(broker, lambda: broker.call(
                       ADD_PARTITIONS_TO_TXN, 4, request))):
        assert answer.error_code == E.none and len(answer.results_by_transaction) == 1


def _with_cluster_action(broker: Broker, call: Any) -> Any:
    broker.set_acls(acl(Res.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION))
    return call()


def test_add_offsets_to_txn_needs_write_on_the_id_and_read_on_the_group(broker: Broker) -> None:
    pid = _pid(broker, "offsets-tx")

    def error() -> ErrorCode:
        return ErrorCode(broker.call(ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": "offsets-tx", "producer_id": pid, "producer_epoch": 0,
            "group_id": "offsets-tx-g"}).error_code)

    broker.set_acls(acl(Res.GROUP, "offsets-tx-g", Op.READ))
    assert error() == E.transactional_id_authorization_failed
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "offsets-tx", Op.WRITE))
    assert error() == E.group_authorization_failed
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "offsets-tx", Op.WRITE),
                    acl(Res.GROUP, "offsets-tx-g", Op.READ))
    assert error() == E.none


def test_end_txn_needs_write_on_the_id(broker: Broker) -> None:
    pid = _pid(broker, "ender")

    def error() -> ErrorCode:
        return ErrorCode(broker.call(END_TXN, 3, {
            "transactional_id": "ender", "producer_id": pid, "producer_epoch": 0,
            "committed": False}).error_code)

    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "ender", Op.DESCRIBE))
    assert error() == E.transactional_id_authorization_failed
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "ender", Op.WRITE))
    assert error() == E.invalid_txn_state  # served: nothing to end


def test_txn_offset_commit_needs_the_id_the_group_and_each_topic(broker: Broker) -> None:
    pid = _pid(broker, "committer")
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "committer", Op.WRITE),
                    acl(Res.GROUP, "committer-g", Op.READ))
    assert _add_offsets(broker, "committer", pid, "committer-g") == E.none

    def commit() -> dict[tuple[str, int], ErrorCode]:
        answer = broker.call(TXN_OFFSET_COMMIT, 3, {
            "transactional_id": "committer", "group_id": "committer-g", "producer_id": pid,
            "producer_epoch": 0, "generation_id": -1, "member_id": "", "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                            "committed_leader_epoch": -1}]}
                for t in ("t1", "t2")]})
        return {(t.name, p.partition_index): p.error_code
                for t in answer.topics for p in t.partitions}

    broker.set_acls(acl(Res.GROUP, "committer-g", Op.READ), acl(Res.TOPIC, "*", Op.READ))
    assert set(commit().values()) == {E.transactional_id_authorization_failed}
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "committer", Op.WRITE),
                    acl(Res.TOPIC, "*", Op.READ))
    assert set(commit().values()) == {E.group_authorization_failed}
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "committer", Op.WRITE),
                    acl(Res.GROUP, "committer-g", Op.READ), acl(Res.TOPIC, "t2", Op.READ))
    assert commit() == {("t1", 0): E.topic_authorization_failed, ("t2", 0): E.none}


def _add_offsets(broker: Broker, tid: str, pid: int, group: str) -> ErrorCode:
    return ErrorCode(broker.call(ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": 0,
        "group_id": group}).error_code)


def test_write_txn_markers_needs_cluster_action(broker: Broker) -> None:
    request = {"markers": [{"producer_id": 424242, "producer_epoch": 0,
                            "transaction_result": False, "coordinator_epoch": 0,
                            "topics": [{"name": "t1", "partition_indexes": [0, 1]},
                                       {"name": "t2", "partition_indexes": [0]}]}]}
    broker.set_acls(acl(Res.TOPIC, "*", Op.ALL), acl(Res.CLUSTER, CLUSTER_NAME, Op.ALTER))
    answer = broker.call(WRITE_TXN_MARKERS, 1, request)
    [marker] = answer.markers
    assert marker.producer_id == 424242
    assert {(t.name, p.partition_index): p.error_code for t in marker.topics
            for p in t.partitions} == dict.fromkeys(
        [("t1", 0), ("t1", 1), ("t2", 0)], E.cluster_authorization_failed)
    served = _with_cluster_action(broker, lambda: broker.call(WRITE_TXN_MARKERS, 1, request))
    assert E.cluster_authorization_failed not in {
        p.error_code for t in served.markers[0].topics for p in t.partitions}


def test_describe_and_list_transactions(broker: Broker) -> None:
    pid = _pid(broker, "shown-tx")
    _pid(broker, "secret-tx")
    assert _add_partitions(broker, "shown-tx", pid, {"t1": [0], "t2": [1]}, user="admin") \
        == {("t1", 0): E.none, ("t2", 1): E.none}
    broker.set_acls(acl(Res.TRANSACTIONAL_ID, "shown-", Op.DESCRIBE, pattern=PREFIXED),
                    acl(Res.TOPIC, "t1", Op.DESCRIBE))
    described = broker.call(DESCRIBE_TRANSACTIONS, 0,
                            {"transactional_ids": ["shown-tx", "secret-tx"]})
    by_id = {s.transactional_id: s for s in described.transaction_states}
    assert by_id["secret-tx"].error_code == E.transactional_id_authorization_failed
    shown = by_id["shown-tx"]
    assert shown.error_code == E.none and shown.transaction_state == "Ongoing"
    # Only the partitions of topics the principal may DESCRIBE.
    assert [(t.topic, t.partitions) for t in shown.topics] == [("t1", (0,))]

    listed = broker.call(LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                "duration_filter": -1})
    ids = {s.transactional_id for s in listed.transaction_states}
    assert "shown-tx" in ids and "secret-tx" not in ids and "adder" not in ids
    everything = broker.call(LIST_TRANSACTIONS, 1, {"state_filters": [],
                                                    "producer_id_filters": [],
                                                    "duration_filter": -1}, user="admin")
    assert {"shown-tx", "secret-tx"} <= {s.transactional_id
                                         for s in everything.transaction_states}
    # Leave nothing open for the other tests.
    assert broker.call(END_TXN, 3, {"transactional_id": "shown-tx", "producer_id": pid,
                                    "producer_epoch": 0, "committed": False},
                       user="admin").error_code == E.none


def test_describe_producers_needs_read_on_each_topic(broker: Broker) -> None:
    broker.set_acls(acl(Res.TOPIC, "t1", Op.READ), acl(Res.TOPIC, "t2", Op.DESCRIBE))
    answer = broker.call(DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": "t1", "partition_indexes": [0, 1]}, {"name": "t2", "partition_indexes": [0]}]})
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics
            for p in t.partitions} == {("t1", 0): E.none, ("t1", 1): E.none,
                                       ("t2", 0): E.topic_authorization_failed}


# ==== without an authorizer =============================================================


def test_without_an_authorizer_acls_are_ignored() -> None:
    """Nothing is checked (and the ACLs are not even read) when
    ``authorizer.class.name`` is unset: DENY ACLs on everything change nothing."""
    config = {k: v for k, v in AUTHORIZER_CONFIG.items()
              if k not in ("authorizer.class.name", "super.users")}
    b = Broker(config)
    try:
        assert b.api.authorization is None
        b.set_acls(*(acl(rt, "*", Op.ALL, permission=DENY, principal="User:*")
                     for rt in (Res.GROUP, Res.TOPIC, Res.TRANSACTIONAL_ID, Res.CLUSTER)))
        b.wait(lambda: _found(b, 0) and _found(b, 1))
        b.wait(lambda: _pid(b, "free", user="alice") >= 0)
        assert _pid(b, None, user="alice") >= 0
        assert set(_commit(b, "free-g", {("t1", 0): 1, ("t2", 0): 2}).values()) == {E.none}
        fetched = b.call(OFFSET_FETCH, 8, {"groups": [{"group_id": "free-g", "topics": None}]})
        assert set(_fetched(fetched.groups[0])) == {("t1", 0), ("t2", 0)}
        assert _join(b, "free-g").error_code == E.member_id_required
        assert "free-g" in {g.group_id for g in b.call(LIST_GROUPS, 5, {}).groups}
        described = b.call(DESCRIBE_GROUPS, 5, {"groups": ["free-g"],
                                                "include_authorized_operations": True})
        # Kafka without an authorizer: every operation of the resource.
        assert described.groups[0].authorized_operations == sum(
            1 << op for op in GROUP_OPERATIONS)
        marker = b.call(WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 77, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0, "topics": [{"name": "t1", "partition_indexes": [0]}]}]})
        assert marker.markers[0].topics[0].partitions[0].error_code \
            != E.cluster_authorization_failed
    finally:
        b.close()
