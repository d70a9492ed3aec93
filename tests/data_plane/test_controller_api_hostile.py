"""Hostile but wire-valid requests to the controller listener's handlers, run
through the real controller (`data_plane.testing.inprocess_controller`: a
one-voter Raft driver, the controller in its task, replay of what commits).

Every request is generated from its kio class (each field from a vocabulary
of its own: known and unknown topic names and ids, the brokers' current and
stale epochs, boundary integers, unknown enum values, NaN), written with
kio's writer and read back with its reader, so the handler sees only what a
peer could send. After each one:
- the handler answered (an error code is an answer; an exception out of it
  would be answered UNKNOWN_SERVER_ERROR by the server, and is a bug here,
  as is `CommandFailedError`: a command that raised);
- the answer is its request's response class, and encodes;
- the controller's Raft driver still runs (an exception in a command or in
  replay stops a node);
- the committed image keeps its invariants: partitions 0..n-1 with distinct
  replicas, ISR within them, a leader only from the ISR and never a fenced
  or shutting-down broker, epochs that never go back, legal topic names,
  listeners with distinct names.

Between examples the harness puts back three unfenced brokers and topic
``t`` (three partitions, RF 3), so requests keep reaching deep paths.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hostile_requests import over_the_wire, requests_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.allocate_producer_ids.v0 import request as apid
from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.alter_configs.v2 import request as ac
from kio.schema.alter_partition.v3 import request as ap
from kio.schema.alter_partition_reassignments.v1 import request as apr
from kio.schema.alter_user_scram_credentials.v0 import request as ausc
from kio.schema.broker_heartbeat.v0 import request as hb
from kio.schema.broker_registration.v3 import request as reg
from kio.schema.create_acls.v3 import request as ca
from kio.schema.create_delegation_token.v3 import request as cdt
from kio.schema.create_partitions.v2 import request as cp2
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_topics.v7 import request as ct
from kio.schema.delete_acls.v3 import request as da
from kio.schema.delete_topics.v4 import request as dt4
from kio.schema.delete_topics.v6 import request as dt
from kio.schema.describe_acls.v3 import request as dacl
from kio.schema.describe_client_quotas.v1 import request as dcq
from kio.schema.describe_cluster.v2 import request as dc
from kio.schema.describe_configs.v4 import request as dcfg
from kio.schema.describe_user_scram_credentials.v0 import request as dusc
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.envelope.v0 import request as env
from kio.schema.expire_delegation_token.v2 import request as edt
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.list_partition_reassignments.v0 import request as lpr
from kio.schema.metadata.v12 import request as md
from kio.schema.renew_delegation_token.v2 import request as rdt
from kio.schema.unregister_broker.v0 import request as ub
from kio.schema.update_features.v2 import request as uf

from data_plane.api.build import response_class
from data_plane.api.envelope import encode_principal
from data_plane.testing.inprocess_controller import InProcessController
from metadata_quorum.controller.delegation_token_control import DelegationTokenSettings
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.image import MetadataImage
from metadata_quorum.records.types import NO_LEADER
from raftlog.net import KafkaApiError
from raftlog.net.codec import encode_request, encode_response
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request

CLUSTER_ID = "raftlog-cluster"
BROKERS = (1, 2, 3)
TOPIC = "t"
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_RANDOM_ID = uuid.UUID("6b1e5a3c-0000-4000-8000-00000000dead")  # no topic has it


# ---------------------------------------------------------------- the harness


class _Harness:
    """One controller for the whole module, on its own loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # Delegation tokens on, so that enveloped token commands run.
        self.controller = InProcessController(ControllerConfig(
            delegation_tokens=DelegationTokenSettings(secret_key="hostile-secret")))
        self.loop.run_until_complete(self.controller.start())
        self.epochs: dict[int, int] = {}
        self._vocabulary: dict[str, st.SearchStrategy[Any]] | None = None

    @property
    def image(self) -> MetadataImage:
        return self.controller.service.controller.committed_image

    def run(self, key: int, body: Any) -> Any:
        return self.loop.run_until_complete(self.controller.call(key, body))

    def baseline(self) -> None:
        """Three registered, unfenced brokers and topic ``t`` (3 partitions, RF 3)."""
        image = self.image
        for broker_id in BROKERS:
            broker = image.brokers.get(broker_id)
            if broker is None or broker.epoch != self.epochs.get(broker_id):
                answer = self.run(62, _registration(broker_id))
                assert answer.error_code == ErrorCode.none, answer
                self.epochs[broker_id] = int(answer.broker_epoch)
            answer = self.run(63, hb.BrokerHeartbeatRequest(
                broker_id=broker_id, broker_epoch=self.epochs[broker_id],  # type: ignore[arg-type]
                current_metadata_offset=2**40, want_fence=False,  # type: ignore[arg-type]
                want_shut_down=False))
            if answer.error_code != ErrorCode.none:  # a hostile registration replaced it
                del self.epochs[broker_id]
                return self.baseline()
        if self.image.topic_by_name(TOPIC) is None:
            answer = self.run(19, ct.CreateTopicsRequest(
                topics=(ct.CreatableTopic(name=TOPIC, num_partitions=3,  # type: ignore[arg-type]
                                          replication_factor=3, assignments=(),  # type: ignore[arg-type]
                                          configs=()),),
                timeout=0, validate_only=False))  # type: ignore[arg-type]
            assert answer.topics[0].error_code == ErrorCode.none, answer

    def vocabulary(self) -> dict[str, st.SearchStrategy[Any]]:
        """Field name (``Class.field`` first) -> values. Those that depend on
        the image (topic ids, epochs) draw an index into what it holds when
        drawn, so every example draws the same shape (Hypothesis replays)."""
        if self._vocabulary is None:
            self._vocabulary = self._build_vocabulary()
        return self._vocabulary

    def _current(self, pool: Callable[[], list[Any]]) -> st.SearchStrategy[Any]:
        def pick(index: int) -> Any:
            values = pool()
            return values[index % len(values)]
        return st.integers(0, 31).map(pick)

    def _parts(self) -> list[Any]:
        return [p for t in self.image.topics.values() for p in t.partitions.values()]

    def _build_vocabulary(self) -> dict[str, st.SearchStrategy[Any]]:
        topic_ids = self._current(lambda: [*self.image.topics, _RANDOM_ID, uuid.UUID(int=0)])
        leader_epochs = self._current(
            lambda: sorted({p.leader_epoch for p in self._parts()} | {-1, 0, 1}))
        partition_epochs = self._current(
            lambda: sorted({p.partition_epoch for p in self._parts()} | {-1, 0, 1}))
        broker_epochs = self._current(lambda: sorted(set(self.epochs.values()) | {-1, 0, 1, 2**40}))
        broker_ids = st.sampled_from([*BROKERS, -1, 0, 4, 7, 2**31 - 1])
        topic_names = st.sampled_from([
            TOPIC, "u", "", ".", "..", "bad/name", "x" * 250, "__consumer_offsets", "a.b",
            "a_b", "é"])
        counts = st.sampled_from([-2, -1, 0, 1, 2, 3, 4, 10, 2**31 - 1])
        config_names = st.sampled_from([
            "cleanup.policy", "min.insync.replicas", "retention.ms", "segment.bytes",
            "unclean.leader.election.enable", "max.message.bytes", "compression.type",
            "message.timestamp.type", "num.partitions", "log.retention.ms",
            "auto.leader.rebalance.enable", "bogus.config", "", "log4j.rootLogger"])
        config_values = st.one_of(st.none(), st.sampled_from([
            "1", "2", "3", "-1", "0", "compact", "delete", "compact,delete", "true", "false",
            "abc", "", "9" * 30, "zstd", "LogAppendTime", "1e3", " 2 "]))
        resource_names = st.sampled_from([TOPIC, "", "1", "2", "4", "-1", "missing", "root"])
        return {
            "broker_id": broker_ids,
            "broker_ids": st.lists(broker_ids, max_size=4),
            "replicas": st.one_of(st.none(), st.lists(broker_ids, max_size=4)),
            "broker_epoch": broker_epochs,
            "previous_broker_epoch": broker_epochs,
            "leader_epoch": leader_epochs,
            "partition_epoch": partition_epochs,
            "topic_id": topic_ids,
            "partition_index": counts,
            "partition": counts,
            "partitions": st.lists(counts, max_size=3),
            "partition_indexes": st.lists(counts, max_size=3),
            "num_partitions": counts,
            "count": counts,
            "replication_factor": st.sampled_from([-2, -1, 0, 1, 2, 3, 4, 2**15 - 1]),
            "leader_recovery_state": st.sampled_from([0, 1, 2, -1, 127]),
            "current_metadata_offset": st.sampled_from([-1, 0, 5, 2**40, 2**63 - 1]),
            "CreatableTopic.name": topic_names,
            "CreatePartitionsTopic.name": topic_names,
            "DeleteTopicState.name": st.one_of(st.none(), topic_names),
            "MetadataRequestTopic.name": st.one_of(st.none(), topic_names),
            "ReassignableTopic.name": topic_names,
            "ListPartitionReassignmentsTopics.name": topic_names,
            "TopicPartitions.topic": topic_names,
            "CreatableTopicConfig.name": config_names,
            "AlterableConfig.name": config_names,
            "value": config_values,
            "configuration_keys": st.one_of(st.none(), st.lists(config_names, max_size=2)),
            "resource_type": st.sampled_from([0, 1, 2, 4, 8, 16, 99, -1]),
            "resource_name": resource_names,
            "config_operation": st.sampled_from([0, 1, 2, 3, -1, 9]),
            "cluster_id": st.sampled_from([CLUSTER_ID, "other", ""]),
            "incarnation_id": st.one_of(st.none(), st.uuids(), st.just(uuid.UUID(int=0))),
            "Listener.name": st.sampled_from(["PLAINTEXT", "SSL", "CONTROLLER", "", "a b"]),
            "host": st.sampled_from(["127.0.0.1", "", "h", "::1", "*", "1.2.3.4"]),
            "security_protocol": st.sampled_from([0, 1, 2, 3, 4, -1, 99]),
            "Feature.name": _feature_names(),
            "feature": _feature_names(),
            "min_supported_version": st.sampled_from([-1, 0, 1, 2, 2**15 - 1]),
            "max_supported_version": st.sampled_from([-1, 0, 1, 2, 2**15 - 1]),
            "max_version_level": st.sampled_from([-1, 0, 1, 2, 3, 2**15 - 1]),
            "upgrade_type": st.sampled_from([0, 1, 2, 3, -1, 9]),
            "rack": st.one_of(st.none(), st.sampled_from(["", "r1", "r2"])),
            "log_dirs": st.lists(st.one_of(st.none(), st.uuids()), max_size=2),
            "election_type": st.sampled_from([0, 1, 2, -1, 9]),
            "endpoint_type": st.sampled_from([0, 1, 2, -1]),
            "entity_type": st.sampled_from(["user", "client-id", "ip", "bogus", ""]),
            "entity_name": st.one_of(st.none(), st.sampled_from(
                ["", "alice", "1.2.3.4", "::1", "not-an-ip", "<default>"])),
            "match_type": st.sampled_from([0, 1, 2, -1, 9]),
            "match": st.one_of(st.none(), st.sampled_from(["", "alice", "1.2.3.4"])),
            "key": st.sampled_from([
                "producer_byte_rate", "consumer_byte_rate", "request_percentage",
                "controller_mutation_rate", "connection_creation_rate", "bogus", ""]),
            "OpData.value": st.sampled_from([
                -1.0, 0.0, 0.5, 1.0, 1024.0, 1e300, math.nan, math.inf, -math.inf]),
            "UserName.name": st.sampled_from(["alice", "", "bob"]),
            "ScramCredentialDeletion.name": st.sampled_from(["alice", "", "bob"]),
            "ScramCredentialUpsertion.name": st.sampled_from(["alice", "", "bob"]),
            "mechanism": st.sampled_from([0, 1, 2, -1, 9]),
            "iterations": st.sampled_from([-1, 0, 1, 4096, 8192, 16384, 2**31 - 1]),
            "salt": st.binary(max_size=8),
            "salted_password": st.binary(max_size=40),
            "resource_type_filter": st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, -1, 99]),
            "resource_name_filter": st.one_of(st.none(), st.sampled_from(["*", TOPIC, "", "t*"])),
            "AclCreation.resource_name": st.sampled_from(["*", TOPIC, "", "kafka-cluster", "t*"]),
            "pattern_type_filter": st.sampled_from([0, 1, 2, 3, 4, -1, 9]),
            "resource_pattern_type": st.sampled_from([0, 1, 2, 3, 4, -1, 9]),
            "principal_filter": st.one_of(st.none(), st.sampled_from(
                ["User:alice", "User:*", "", "bogus", "Group:x"])),
            "principal": st.sampled_from(["User:alice", "User:*", "", "bogus", "User:"]),
            "host_filter": st.one_of(st.none(), st.sampled_from(["*", "1.2.3.4", ""])),
            "operation": st.sampled_from([0, 1, 2, 3, 4, 5, 8, 12, 14, 15, -1, 99]),
            "permission_type": st.sampled_from([0, 1, 2, 3, -1, 9]),
        }


def _feature_names() -> st.SearchStrategy[str]:
    return st.sampled_from([
        "eligible.leader.replicas.version", "metadata.version", "kraft.version",
        "group.version", "transaction.version", "bogus", ""])


def _registration(broker_id: int) -> reg.BrokerRegistrationRequest:
    return reg.BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=CLUSTER_ID,  # type: ignore[arg-type]
        incarnation_id=uuid.uuid4(),
        listeners=(reg.Listener(name="PLAINTEXT", host="127.0.0.1",
                                port=9090 + broker_id, security_protocol=0),),  # type: ignore[arg-type]
        features=(), rack=None, is_migrating_zk_broker=False, log_dirs=(),
        previous_broker_epoch=-1)  # type: ignore[arg-type]


# ------------------------------------------------- near-valid requests

# The generic requests are mostly refused at the first check. These start
# from what the image holds (a partition's leader, its epochs, the brokers'
# epochs) and then spoil a field now and then, so the deeper checks and the
# writes run too. Each draws the same shape whatever the image holds.


def _pick(values: list[Any], index: int) -> Any:
    return values[index % len(values)]


@st.composite
def _alter_partition(draw: st.DrawFn, h: _Harness) -> ap.AlterPartitionRequest:
    index = draw(st.integers(0, 63))
    sender_choice = draw(st.sampled_from(["leader", "leader", "leader", "other"]))
    epoch_skew = draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
    partition_skew = draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
    members = draw(st.lists(st.integers(0, 4), max_size=4))
    member_epochs = draw(st.lists(st.sampled_from(["current", "current", "current", "stale", "none"]),
                                  min_size=4, max_size=4))
    recovery = draw(st.sampled_from([0, 0, 0, 1]))
    stale_sender = draw(st.sampled_from([False, False, False, True]))
    image = h.image
    parts = [(t.topic_id, pid, part) for t in image.topics.values()
             for pid, part in t.partitions.items()]
    if not parts:
        return ap.AlterPartitionRequest(broker_id=1, broker_epoch=-1, topics=())  # type: ignore[arg-type]
    topic_id, pid, part = _pick(parts, index)
    sender = part.leader if sender_choice == "leader" and part.leader >= 0 \
        else _pick(list(part.replicas), index)

    def epoch_of(broker_id: int, how: str) -> int:
        broker = image.brokers.get(broker_id)
        current = broker.epoch if broker is not None else -1
        return {"current": current, "stale": current - 1, "none": -1}[how]
    candidates = [*part.replicas, 4, 7]
    isr = [_pick(candidates, m) for m in members]
    return ap.AlterPartitionRequest(
        broker_id=sender,
        broker_epoch=epoch_of(sender, "stale" if stale_sender else "current"),  # type: ignore[arg-type]
        topics=(ap.TopicData(topic_id=topic_id, partitions=(ap.PartitionData(
            partition_index=pid,
            leader_epoch=part.leader_epoch + epoch_skew,
            new_isr_with_epochs=tuple(
                ap.BrokerState(broker_id=b, broker_epoch=epoch_of(b, how))  # type: ignore[arg-type]
                for b, how in zip(isr, member_epochs, strict=False)),
            leader_recovery_state=recovery,  # type: ignore[arg-type]
            partition_epoch=part.partition_epoch + partition_skew),)),))


@st.composite
def _heartbeat(draw: st.DrawFn, h: _Harness) -> hb.BrokerHeartbeatRequest:
    broker_id = draw(st.sampled_from([*BROKERS, *BROKERS, 4]))
    stale = draw(st.sampled_from([False, False, False, True]))
    want_fence = draw(st.sampled_from([False, False, True]))
    want_shut_down = draw(st.sampled_from([False, False, True]))
    offset = draw(st.sampled_from([2**40, 2**40, 0, -1]))
    broker = h.image.brokers.get(broker_id)
    epoch = -1 if broker is None else broker.epoch - (1 if stale else 0)
    return hb.BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=epoch,  # type: ignore[arg-type]
        current_metadata_offset=offset, want_fence=want_fence,  # type: ignore[arg-type]
        want_shut_down=want_shut_down)


def _create_topics() -> st.SearchStrategy[ct.CreateTopicsRequest]:
    assignment = st.lists(st.sampled_from([*BROKERS, *BROKERS, 4, -1]), min_size=1, max_size=3)
    topic = st.builds(
        ct.CreatableTopic,
        name=st.sampled_from(["u", "v", "w.x", TOPIC, "bad/name"]),
        num_partitions=st.sampled_from([-1, 1, 2, 3, 0]),
        replication_factor=st.sampled_from([-1, 1, 2, 3, 4]),
        assignments=st.one_of(st.just(()), st.lists(assignment, max_size=3).map(
            lambda lists: tuple(ct.CreatableReplicaAssignment(
                partition_index=i, broker_ids=tuple(ids))  # type: ignore[arg-type]
                for i, ids in enumerate(lists)))),
        configs=st.lists(st.builds(
            ct.CreatableTopicConfig,
            name=st.sampled_from(["cleanup.policy", "min.insync.replicas", "retention.ms",
                                  "unclean.leader.election.enable", "bogus"]),
            value=st.sampled_from(["compact", "2", "3", "-1", "true", "x", None])),
            max_size=2).map(tuple),
    )
    return st.builds(ct.CreateTopicsRequest, topics=st.lists(topic, max_size=3).map(tuple),
                     timeout=st.just(0), validate_only=st.sampled_from([False, False, True]))


def _acl_creations() -> st.SearchStrategy[ca.CreateAclsRequest]:
    creation = st.builds(
        ca.AclCreation,
        resource_type=st.sampled_from([2, 3, 4, 5, 6, 7]),
        resource_name=st.sampled_from([TOPIC, "*", "kafka-cluster", "g", "t-"]),
        resource_pattern_type=st.sampled_from([3, 3, 4, 1]),
        principal=st.sampled_from(["User:alice", "User:*", "User:bob", "bogus"]),
        host=st.sampled_from(["*", "*", "1.2.3.4"]),
        operation=st.sampled_from([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0]),
        permission_type=st.sampled_from([2, 3, 3, 1]))
    return st.builds(ca.CreateAclsRequest, creations=st.lists(creation, max_size=3).map(tuple))


def _incremental_alter_configs() -> st.SearchStrategy[iac.IncrementalAlterConfigsRequest]:
    config = st.builds(
        iac.AlterableConfig,
        name=st.sampled_from(["cleanup.policy", "min.insync.replicas", "retention.ms",
                              "unclean.leader.election.enable", "log.retention.ms",
                              "auto.leader.rebalance.enable", "bogus"]),
        config_operation=st.sampled_from([0, 0, 1, 2, 3]),
        value=st.sampled_from(["compact", "delete", "1", "2", "3", "true", "-1", None]))
    resource = st.builds(
        iac.AlterConfigsResource,
        resource_type=st.sampled_from([2, 2, 4, 4]),
        resource_name=st.sampled_from([TOPIC, TOPIC, "", "1", "2"]),
        configs=st.lists(config, max_size=3).map(tuple))
    return st.builds(iac.IncrementalAlterConfigsRequest,
                     resources=st.lists(resource, max_size=2).map(tuple),
                     validate_only=st.sampled_from([False, False, True]))


def _near_valid(api_key: int, h: _Harness) -> st.SearchStrategy[Any] | None:
    return {
        56: lambda: _alter_partition(h),
        63: lambda: _heartbeat(h),
        19: _create_topics,
        30: _acl_creations,
        44: _incremental_alter_configs,
        58: lambda: _envelopes(h),
    }.get(api_key, lambda: None)()


def _envelopes(h: _Harness) -> st.SearchStrategy[Any]:
    """A broker's Envelope around a hostile request it forwards as its
    client: a token request (Create v3, Renew v2, Expire v2), or a topic
    creation, growth or deletion at the strict or the older (permissive
    quota) version; as a user, as a token-authenticated user, or with
    principal bytes that are not Kafka's principal data."""
    inner = st.one_of(
        *(requests_of(cls, h.vocabulary()) for cls in (
            cdt.CreateDelegationTokenRequest, rdt.RenewDelegationTokenRequest,
            edt.ExpireDelegationTokenRequest, cp.CreatePartitionsRequest,
            cp2.CreatePartitionsRequest, dt.DeleteTopicsRequest, dt4.DeleteTopicsRequest)),
        _create_topics(),
        _create_topics().map(lambda r: convert_request(r, 5)))
    principal = st.one_of(
        st.builds(encode_principal, st.sampled_from(["User:alice", "User:", "Group:g", "x"]),
                  st.booleans()),
        st.binary(max_size=12))
    return st.builds(lambda request, who: env.EnvelopeRequest(
        request_data=encode_request(over_the_wire(request), 1, "hostile")[4:],
        request_principal=who, client_host_address=b"\x7f\x00\x00\x01"), inner, principal)


# --------------------------------------------------------------- invariants


def _check_image(before: MetadataImage, after: MetadataImage) -> None:
    assert set(after.topic_ids.values()) == set(after.topics)
    for topic_id, topic in after.topics.items():
        name = topic.name
        assert _LEGAL_TOPIC.fullmatch(name) and name not in (".", ".."), name
        assert after.topic_ids[name] == topic_id
        assert sorted(topic.partitions) == list(range(len(topic.partitions))), name
        old_topic = before.topics.get(topic_id)
        for pid, part in topic.partitions.items():
            where = f"{name}-{pid}"
            replicas = part.replicas
            assert replicas and len(set(replicas)) == len(replicas), (where, part)
            assert all(r >= 0 for r in replicas), (where, part)
            assert len(set(part.isr)) == len(part.isr) and set(part.isr) <= set(replicas), \
                (where, part)
            assert set(part.adding_replicas) <= set(replicas), (where, part)
            assert set(part.removing_replicas) <= set(replicas), (where, part)
            if part.leader != NO_LEADER:
                assert part.leader in part.isr, (where, part)
                broker = after.brokers.get(part.leader)
                assert broker is not None and not broker.fenced \
                    and not broker.in_controlled_shutdown, (where, part, broker)
            was = None if old_topic is None else old_topic.partitions.get(pid)
            if was is not None:
                assert part.leader_epoch >= was.leader_epoch, (where, was, part)
                assert part.partition_epoch >= was.partition_epoch, (where, was, part)
    for token_id, token in after.delegation_tokens.items():
        assert token.token_id == token_id
        assert token.issue_timestamp <= token.expiration_timestamp <= token.max_timestamp, token
    for broker_id, broker in after.brokers.items():
        assert broker.broker_id == broker_id
        names = [e.name for e in broker.listeners]
        assert len(set(names)) == len(names), broker
        assert all(0 <= e.port <= 65535 for e in broker.listeners), broker


# --------------------------------------------------------------------- tests


HARNESS: _Harness | None = None


@pytest.fixture(scope="module")
def harness() -> Any:
    global HARNESS
    HARNESS = _Harness()
    yield HARNESS
    HARNESS.loop.run_until_complete(HARNESS.controller.stop())
    HARNESS.loop.close()
    HARNESS = None


REQUESTS: dict[int, type] = {
    19: ct.CreateTopicsRequest,
    37: cp.CreatePartitionsRequest,
    20: dt.DeleteTopicsRequest,
    44: iac.IncrementalAlterConfigsRequest,
    33: ac.AlterConfigsRequest,
    43: el.ElectLeadersRequest,
    45: apr.AlterPartitionReassignmentsRequest,
    46: lpr.ListPartitionReassignmentsRequest,
    62: reg.BrokerRegistrationRequest,
    63: hb.BrokerHeartbeatRequest,
    56: ap.AlterPartitionRequest,
    67: apid.AllocateProducerIdsRequest,
    49: acq.AlterClientQuotasRequest,
    48: dcq.DescribeClientQuotasRequest,
    51: ausc.AlterUserScramCredentialsRequest,
    50: dusc.DescribeUserScramCredentialsRequest,
    30: ca.CreateAclsRequest,
    31: da.DeleteAclsRequest,
    29: dacl.DescribeAclsRequest,
    64: ub.UnregisterBrokerRequest,
    57: uf.UpdateFeaturesRequest,
    32: dcfg.DescribeConfigsRequest,
    3: md.MetadataRequest,
    60: dc.DescribeClusterRequest,
    58: env.EnvelopeRequest,
}

# RAFTLOG_HOSTILE_EXAMPLES raises the count for a longer hunt (1,500 each ran
# clean when this was written).
SETTINGS = settings(max_examples=int(os.environ.get("RAFTLOG_HOSTILE_EXAMPLES", "40")),
                    deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("api_key", sorted(REQUESTS))
@SETTINGS
@given(data=st.data())
def test_every_controller_api_answers_hostile_requests(
    harness: _Harness, api_key: int, data: st.DataObject
) -> None:
    harness.baseline()
    request_class = REQUESTS[api_key]
    strategy = requests_of(request_class, harness.vocabulary())
    near_valid = _near_valid(api_key, harness)
    if near_valid is not None:
        strategy = st.one_of(strategy, near_valid, near_valid)
    drawn = data.draw(strategy, label="request")
    request = over_the_wire(drawn)
    before = harness.image
    try:
        answer = harness.run(api_key, request)
    except KafkaApiError:
        answer = None  # answered with its error code by the server
    assert harness.controller.driver.running, "the controller's Raft driver stopped"
    if answer is not None:
        assert type(answer) is response_class(request), answer
        encode_response(answer, 1)
    _check_image(before, harness.image)


def test_an_unknown_leader_recovery_state_is_invalid_request_for_its_partition(
    harness: _Harness,
) -> None:
    """Found by the test above: it raised ValueError out of the handler. As
    Kafka's ReplicationControlManager, that partition is INVALID_REQUEST;
    the request's other partitions are answered as usual."""
    harness.baseline()
    image = harness.image
    topic = image.topic_by_name(TOPIC)
    assert topic is not None
    leader = topic.partitions[0].leader  # sends both: partition 1's state is refused first
    assert leader != NO_LEADER

    def item(pid: int, state: int) -> ap.PartitionData:
        part = topic.partitions[pid]
        return ap.PartitionData(
            partition_index=pid, leader_epoch=part.leader_epoch,  # type: ignore[arg-type]
            new_isr_with_epochs=tuple(ap.BrokerState(
                broker_id=b, broker_epoch=image.brokers[b].epoch)  # type: ignore[arg-type]
                for b in part.isr),
            leader_recovery_state=state,  # type: ignore[arg-type]
            partition_epoch=part.partition_epoch)  # type: ignore[arg-type]
    answer = harness.run(56, ap.AlterPartitionRequest(
        broker_id=leader, broker_epoch=image.brokers[leader].epoch,  # type: ignore[arg-type]
        topics=(ap.TopicData(topic_id=topic.topic_id, partitions=(item(0, 0), item(1, 2))),)))
    assert answer.error_code == ErrorCode.none
    codes = {int(p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
    assert codes == {0: ErrorCode.none, 1: ErrorCode.invalid_request}
    assert harness.controller.driver.running
