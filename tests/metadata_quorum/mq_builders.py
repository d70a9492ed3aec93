"""Test context builders for the metadata quorum: images built by running commands.

`Ctx` keeps an image and a log offset; `run` applies a command's records
through `MetadataDelta` exactly as replay would, and checks the KIP-841
invariants after every command.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from metadata_quorum.controller import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerSessions,
    ControllerConfig,
    ControllerResult,
    CreatableTopic,
    CreateTopicsRequest,
    broker_heartbeat,
    create_topics,
    register_broker,
)
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.features import ELR_FEATURE, broker_features, elr_enabled
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from metadata_quorum.records import (
    NO_LEADER,
    BrokerFeature,
    Endpoint,
    FeatureLevelRecord,
    MetadataRecord,
)
from raftlog.net.errors import ErrorCode


def incarnation(broker_id: int, generation: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(broker_id << 32) | (generation + 1))


def listeners(broker_id: int) -> tuple[Endpoint, ...]:
    return (Endpoint("PLAINTEXT", f"b{broker_id}.local", 9092),)


def apply_records(image: MetadataImage, records: Iterable[MetadataRecord]) -> MetadataImage:
    """``image`` after ``records``, at the next offsets."""
    delta = MetadataDelta(image)
    offset = image.provenance.last_offset
    for record in records:
        delta.replay(record)
        offset += 1
    return delta.apply(MetadataProvenance(offset, max(image.provenance.last_epoch, 1)))


def check_invariants(image: MetadataImage, before: MetadataImage | None = None) -> None:
    """KIP-841 and epoch monotonicity (the issue's simulation invariants);
    with KIP-966 ELR on, every ISR member is usable, a partition leads
    exactly when its ISR is not empty, and the last known ELR is kept only
    while it does not."""
    elr = elr_enabled(image)
    for topic, pid, part in image.iter_partitions():
        if part.leader != NO_LEADER:
            assert image.is_usable(part.leader), (topic.name, pid, part)
        if elr or not (part.leader == NO_LEADER and len(part.isr) == 1):
            for member in part.isr:
                assert image.is_usable(member), (topic.name, pid, part)
        if elr:
            assert (part.leader == NO_LEADER) == (not part.isr), (topic.name, pid, part)
            assert not (part.last_known_elr and part.leader != NO_LEADER), (topic.name, pid, part)
        else:
            assert not part.elr and not part.last_known_elr, (topic.name, pid, part)
        if before is not None:
            old = before.partition(topic.topic_id, pid)
            if old is not None:
                assert part.leader_epoch >= old.leader_epoch
                assert part.partition_epoch >= old.partition_epoch
                if part != old:
                    assert part.partition_epoch > old.partition_epoch
                if part.leader != old.leader:
                    assert part.leader_epoch > old.leader_epoch
                if not set(old.replicas) <= set(part.replicas):
                    # A removed replica is fenced by a new leader epoch (KIP-455).
                    assert part.leader_epoch > old.leader_epoch, (topic.name, pid, old, part)


class Ctx:
    """An image plus the controller inputs that evolve with it."""

    def __init__(self, config: ControllerConfig | None = None, *, elr: bool = False) -> None:
        """``elr``: the image starts with KIP-966 ELR on (its feature level)."""
        self.config = config or ControllerConfig(cluster_id="test-cluster")
        self.image = EMPTY_IMAGE
        self.sessions = BrokerSessions()
        self.now_ms = 1_000
        if elr:
            self.run(ControllerResult((FeatureLevelRecord(ELR_FEATURE, 1),), None))

    @property
    def next_offset(self) -> int:
        return self.image.provenance.last_offset + 1

    def run(self, result: ControllerResult[Any]) -> Any:
        before = self.image
        self.image = apply_records(self.image, result.records)
        check_invariants(self.image, before)
        return result.response

    def register(
        self, broker_id: int, *, rack: str | None = None, generation: int = 0,
        previous_broker_epoch: int = -1, features: tuple[BrokerFeature, ...] | None = None,
    ) -> int:
        """Register (this software's features unless ``features`` is given)."""
        response = self.run(register_broker(
            self.image, self.sessions,
            BrokerRegistrationRequest(broker_id, incarnation(broker_id, generation),
                                      listeners(broker_id), rack,
                                      previous_broker_epoch=previous_broker_epoch,
                                      features=broker_features() if features is None
                                      else features),
            self.config, next_offset=self.next_offset, now_ms=self.now_ms,
        ))
        assert response.error is ErrorCode.none, response
        self.sessions = self.sessions.touched(broker_id, self.now_ms)
        return int(response.broker_epoch)

    def heartbeat(self, broker_id: int, **flags: bool) -> Any:
        broker = self.image.brokers[broker_id]
        response = self.run(broker_heartbeat(
            self.image,
            BrokerHeartbeatRequest(broker_id, broker.epoch, self.image.provenance.last_offset,
                                   **flags),
            self.config,
        ))
        self.sessions = self.sessions.touched(broker_id, self.now_ms)
        return response

    def add_brokers(self, *broker_ids: int, racks: dict[int, str] | None = None) -> None:
        for broker_id in broker_ids:
            self.register(broker_id, rack=(racks or {}).get(broker_id))
            assert self.heartbeat(broker_id).is_fenced is False

    def create(self, name: str, partitions: int = 1, rf: int = 1, **kwargs: Any) -> uuid.UUID:
        results = self.run(create_topics(
            self.image,
            CreateTopicsRequest((CreatableTopic(name, partitions, rf, **kwargs),)),
            self.config, next_offset=self.next_offset,
        ))
        assert results[0].error is ErrorCode.none, results
        topic_id = results[0].topic_id
        assert topic_id is not None
        return topic_id


# --- random command sequences (for property tests) ----------------------------------

TOPIC_NAMES = ("a", "b", "c.d", "c_d", "e-f", "orders")


def random_step(ctx: Ctx, data: Any) -> None:
    """Run one random, possibly invalid, command against ``ctx`` (Hypothesis ``data``)."""
    from hypothesis import strategies as st

    from metadata_quorum.controller import (
        AllocateProducerIdsRequest,
        AlterConfigOp,
        AlterConfigsRequest,
        AlterConfigsResource,
        AlterPartitionItem,
        AlterPartitionRequest,
        BrokerState,
        ConfigOpType,
        DeleteTopicsRequest,
        UnregisterBrokerRequest,
        allocate_producer_ids,
        alter_configs,
        alter_partition,
        balance_partition_leaders,
        delete_topics,
        elect_unclean_leaders,
        fence_stale_brokers,
        unregister_broker,
    )
    from metadata_quorum.records import ConfigResourceType

    image = ctx.image
    if not any(b.usable for b in image.brokers.values()):
        # Bootstrap: a few live brokers, so that topics can be created.
        for b in range(data.draw(st.integers(1, 5))):
            if b not in image.brokers or ctx.image.brokers[b].fenced:
                ctx.now_ms += 10_000
                ctx.register(b, rack=data.draw(st.sampled_from((None, "r1", "r2"))),
                             generation=ctx.next_offset)
                ctx.heartbeat(b)
        return
    op = data.draw(st.sampled_from((
        "create", "heartbeat", "alter", "register", "expire", "delete", "pids", "config",
        "unregister", "balance", "unclean", "create", "heartbeat", "alter", "reassign", "reassign",
        "alter", "scram",
    )))
    broker_id = data.draw(st.integers(0, 4))
    if op == "register":
        generation = data.draw(st.integers(0, 2))
        rack = data.draw(st.sampled_from((None, "r1", "r2")))
        ctx.now_ms += data.draw(st.sampled_from((0, 10_000)))
        old = image.brokers.get(broker_id)
        clean = old is not None and data.draw(st.booleans())  # KIP-966 clean shutdown
        response = ctx.run(register_broker(
            image, ctx.sessions,
            BrokerRegistrationRequest(broker_id, incarnation(broker_id, generation),
                                      listeners(broker_id), rack,
                                      previous_broker_epoch=old.epoch if clean and old else -1,
                                      features=broker_features()),
            ctx.config, next_offset=ctx.next_offset, now_ms=ctx.now_ms,
        ))
        if response.error is ErrorCode.none:
            ctx.sessions = ctx.sessions.touched(broker_id, ctx.now_ms)
    elif op == "heartbeat" and broker_id in image.brokers:
        broker = image.brokers[broker_id]
        response = ctx.run(broker_heartbeat(image, BrokerHeartbeatRequest(
            broker_id, broker.epoch, data.draw(st.sampled_from((image.provenance.last_offset, 0))),
            want_fence=data.draw(st.integers(0, 3)) == 3,
            want_shutdown=data.draw(st.integers(0, 3)) == 3,
        ), ctx.config))
        if response.error is ErrorCode.none:
            ctx.sessions = ctx.sessions.touched(broker_id, ctx.now_ms)
    elif op == "expire":
        ctx.now_ms += data.draw(st.sampled_from((1_000, 9_000, 20_000)))
        # Some brokers keep heartbeating; the others' sessions expire.
        for b in sorted(image.brokers):
            if data.draw(st.booleans()):
                ctx.sessions = ctx.sessions.touched(b, ctx.now_ms)
        ctx.run(fence_stale_brokers(image, ctx.sessions, ctx.config, ctx.now_ms))
    elif op == "create":
        name = data.draw(st.sampled_from(TOPIC_NAMES))
        configs: tuple[tuple[str, str | None], ...] = ()
        if data.draw(st.booleans()):
            configs = (("unclean.leader.election.enable", "true"),)
        usable = sum(1 for b in image.brokers.values() if b.usable)
        ctx.run(create_topics(image, CreateTopicsRequest((CreatableTopic(
            name, data.draw(st.integers(1, 4)), data.draw(st.integers(1, max(1, min(3, usable)))),
            configs=configs,
        ),)), ctx.config, next_offset=ctx.next_offset))
    elif op == "delete" and image.topics:
        name = data.draw(st.sampled_from(sorted(image.topic_ids)))
        ctx.run(delete_topics(image, DeleteTopicsRequest(names=(name,))))
    elif op == "alter":
        led = [(t, p, part) for t, p, part in image.iter_partitions() if part.leader >= 0]
        if not led:
            return
        topic, pid, part = data.draw(st.sampled_from(led))
        others = [r for r in part.replicas if r != part.leader]
        chosen = [r for r in others if data.draw(st.booleans())]
        isr = (part.leader, *chosen)
        leader = image.brokers[part.leader]
        ctx.run(alter_partition(image, AlterPartitionRequest(leader.broker_id, leader.epoch, (
            AlterPartitionItem(topic.topic_id, pid, part.leader_epoch, part.partition_epoch,
                               tuple(BrokerState(b, image.brokers[b].epoch if b in image.brokers
                                                 else -1) for b in isr)),
        ))))
    elif op == "pids" and broker_id in image.brokers:
        ctx.run(allocate_producer_ids(
            image, AllocateProducerIdsRequest(broker_id, image.brokers[broker_id].epoch),
            ctx.config))
    elif op == "config":
        key, value = data.draw(st.sampled_from((
            ("unclean.leader.election.enable", "true"), ("unclean.leader.election.enable", "false"),
            ("min.insync.replicas", "1"), ("min.insync.replicas", "2"),
            ("min.insync.replicas", "3"))))
        ctx.run(alter_configs(image, AlterConfigsRequest((AlterConfigsResource(
            ConfigResourceType.BROKER, "", (AlterConfigOp(key, ConfigOpType.SET, value),),
        ),))))
    elif op == "unregister" and broker_id in image.brokers:
        ctx.run(unregister_broker(image, UnregisterBrokerRequest(broker_id), ctx.config))
    elif op == "reassign" and image.topics:
        from metadata_quorum.controller import (
            AlterReassignmentsRequest,
            alter_partition_reassignments,
        )

        topic, pid, part = data.draw(st.sampled_from(list(image.iter_partitions())))
        target: tuple[int, ...] | None = None
        if data.draw(st.integers(0, 3)) > 0:
            target = tuple(data.draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
        ctx.run(alter_partition_reassignments(image, AlterReassignmentsRequest(
            ((topic.name, pid, target),),
            allow_replication_factor_change=data.draw(st.booleans()))))
    elif op == "scram":
        from metadata_quorum.controller import (
            AlterUserScramCredentialsRequest,
            ScramCredentialDeletion,
            ScramCredentialUpsertion,
            alter_user_scram_credentials,
        )

        user = data.draw(st.sampled_from(("alice", "bob")))
        mechanism = data.draw(st.integers(1, 2))
        if data.draw(st.booleans()):
            request = AlterUserScramCredentialsRequest(deletions=(
                ScramCredentialDeletion(user, mechanism),))
        else:
            # Any bytes make a valid salted password for the key derivation.
            request = AlterUserScramCredentialsRequest(upsertions=(ScramCredentialUpsertion(
                user, mechanism, data.draw(st.sampled_from((4096, 8192))),
                data.draw(st.binary(max_size=8)), data.draw(st.binary(max_size=64))),))
        ctx.run(alter_user_scram_credentials(image, request))
    elif op == "balance":
        ctx.run(balance_partition_leaders(image, ctx.config))
    elif op == "unclean":
        ctx.run(elect_unclean_leaders(image, ctx.config))
