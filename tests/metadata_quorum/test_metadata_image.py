"""metadata_quorum.image and .delta: replay rules, copy-on-write, snapshot equality."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mq_builders import Ctx, apply_records, incarnation, random_step

from metadata_quorum.controller import ControllerConfig
from metadata_quorum.delta import MetadataDelta, MetadataReplayError
from metadata_quorum.image import (
    EMPTY_IMAGE,
    ConfigResource,
    MetadataProvenance,
    PartitionRegistration,
)
from metadata_quorum.loader import MetadataLoader, build_snapshot_batches
from metadata_quorum.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def image_of(*records: MetadataRecord):  # type: ignore[no-untyped-def]
    return apply_records(EMPTY_IMAGE, records)


def test_register_fence_unfence_and_shutdown_flags() -> None:
    image = image_of(RegisterBrokerRecord(1, incarnation(1), 0, rack="r"))
    assert image.brokers[1].fenced and not image.is_usable(1)
    image = apply_records(image, [UnfenceBrokerRecord(1, 0)])
    assert image.is_usable(1)
    image = apply_records(image, [BrokerRegistrationChangeRecord(1, 0, in_controlled_shutdown=True)])
    assert image.brokers[1].in_controlled_shutdown and not image.is_usable(1)
    image = apply_records(image, [FenceBrokerRecord(1, 0)])
    assert image.brokers[1].fenced
    # Unfencing a new life ends the old controlled shutdown.
    image = apply_records(image, [BrokerRegistrationChangeRecord(1, 0, fenced=False)])
    assert image.is_usable(1)
    image = apply_records(image, [UnregisterBrokerRecord(1, 0)])
    assert 1 not in image.brokers


@pytest.mark.parametrize(
    "records",
    [
        [FenceBrokerRecord(1, 0)],  # unknown broker
        [RegisterBrokerRecord(1, incarnation(1), 5), FenceBrokerRecord(1, 4)],  # stale epoch
        [RegisterBrokerRecord(1, incarnation(1), 5), RegisterBrokerRecord(1, incarnation(1), 5)],
        [RegisterBrokerRecord(1, incarnation(1), 5), UnregisterBrokerRecord(1, 6)],
        [TopicRecord("a", T1), TopicRecord("a", T2)],  # name taken
        [TopicRecord("a", T1), TopicRecord("b", T1)],  # id taken
        [PartitionRecord(0, T1, (1,), (1,))],  # unknown topic
        [TopicRecord("a", T1), PartitionRecord(0, T1, (1,), (1,)),
         PartitionRecord(0, T1, (1,), (1,))],  # partition exists
        [TopicRecord("a", T1), PartitionChangeRecord(0, T1, isr=(1,))],  # unknown partition
        [TopicRecord("a", T1), PartitionRecord(0, T1, (1, 2), (1,), leader=1),
         PartitionChangeRecord(0, T1, isr=(2,))],  # leader would leave the ISR
        [TopicRecord("a", T1), PartitionRecord(0, T1, (1,), (1,)),
         PartitionChangeRecord(0, T1, isr=(3,))],  # ISR outside replicas
        [RemoveTopicRecord(T1)],
        [PartitionChangeRecord(0, T2, leader=1)],
        [ProducerIdsRecord(1, 1, 5000), ProducerIdsRecord(1, 1, 4000)],  # moving back
    ],
)
def test_records_that_do_not_apply_raise_replay_error(records: list[MetadataRecord]) -> None:
    delta = MetadataDelta(EMPTY_IMAGE)
    with pytest.raises(MetadataReplayError):
        for record in records:
            delta.replay(record)


def test_partition_change_bumps_epochs_per_kip_631() -> None:
    image = image_of(TopicRecord("a", T1), PartitionRecord(0, T1, (1, 2, 3), (1, 2, 3), leader=1))
    part = image.partition(T1, 0)
    assert part is not None and (part.leader_epoch, part.partition_epoch) == (0, 0)
    image = apply_records(image, [PartitionChangeRecord(0, T1, isr=(1, 2))])
    part = image.partition(T1, 0)
    assert part is not None and (part.leader_epoch, part.partition_epoch) == (0, 1)
    image = apply_records(image, [PartitionChangeRecord(0, T1, leader=2)])
    part = image.partition(T1, 0)
    assert part is not None and (part.leader, part.leader_epoch, part.partition_epoch) == (2, 1, 2)
    image = apply_records(image, [PartitionChangeRecord(0, T1, isr=(2,), leader=NO_LEADER)])
    part = image.partition(T1, 0)
    assert part is not None and (part.leader, part.leader_epoch, part.isr) == (NO_LEADER, 2, (2,))
    image = apply_records(image, [PartitionChangeRecord(0, T1, leader_recovery_state=1)])
    part = image.partition(T1, 0)
    assert part is not None and part.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_remove_topic_drops_partitions_name_and_configs() -> None:
    image = image_of(
        TopicRecord("a", T1), PartitionRecord(0, T1, (1,), (1,)),
        ConfigRecord(ConfigResourceType.TOPIC, "a", "retention.ms", "5"),
        TopicRecord("b", T2),
    )
    assert image.topic_config("a") == {"retention.ms": "5"}
    image = apply_records(image, [RemoveTopicRecord(T1)])
    assert T1 not in image.topics and "a" not in image.topic_ids
    assert image.topic_config("a") == {}
    assert image.topic_by_name("b") is not None
    # The name can be reused by a new topic id in the same delta.
    delta = MetadataDelta(image)
    delta.replay(RemoveTopicRecord(T2))
    delta.replay(TopicRecord("b", T1))
    assert delta.apply(MetadataProvenance(99, 1)).topic_ids == {"b": T1}


def test_configs_set_and_delete() -> None:
    image = image_of(ConfigRecord(ConfigResourceType.BROKER, "", "min.insync.replicas", "2"))
    assert image.config(ConfigResource(ConfigResourceType.BROKER, "")) == {
        "min.insync.replicas": "2"}
    image = apply_records(image, [ConfigRecord(ConfigResourceType.BROKER, "",
                                               "min.insync.replicas", None)])
    assert image.configs == {}


def test_features_and_producer_ids() -> None:
    image = image_of(FeatureLevelRecord("metadata.version", 7), ProducerIdsRecord(1, 0, 1000))
    assert image.features == {"metadata.version": 7} and image.next_producer_id == 1000
    image = apply_records(image, [FeatureLevelRecord("metadata.version", 0)])
    assert image.features == {}


def test_images_are_immutable_and_deltas_do_not_touch_their_base() -> None:
    base = image_of(TopicRecord("a", T1), PartitionRecord(0, T1, (1,), (1,)))
    delta = MetadataDelta(base)
    delta.replay(PartitionChangeRecord(0, T1, leader=NO_LEADER))
    delta.apply(MetadataProvenance(10, 1))
    part = base.partition(T1, 0)
    assert part is not None and part.partition_epoch == 0
    with pytest.raises(TypeError):
        base.topics[T2] = base.topics[T1]  # type: ignore[index]


def test_unchanged_topics_are_shared_between_images() -> None:
    records: list[MetadataRecord] = []
    for i in range(50):
        topic_id = uuid.UUID(int=i + 1)
        records += [TopicRecord(f"t{i}", topic_id), PartitionRecord(0, topic_id, (1,), (1,))]
    base = image_of(*records)
    after = apply_records(base, [PartitionChangeRecord(0, uuid.UUID(int=1), isr=(1,),
                                                       leader=NO_LEADER)])
    changed = uuid.UUID(int=1)
    assert after.topics[changed] is not base.topics[changed]
    shared = [tid for tid in base.topics if tid != changed and after.topics[tid] is base.topics[tid]]
    assert len(shared) == 49
    assert after.brokers is base.brokers and after.configs is base.configs


def test_apply_rejects_provenance_going_backwards() -> None:
    base = apply_records(EMPTY_IMAGE, [TopicRecord("a", T1)])
    with pytest.raises(ValueError):
        MetadataDelta(base).apply(MetadataProvenance(-1, -1))


def test_partition_registration_checks_its_shape() -> None:
    with pytest.raises(ValueError):
        PartitionRegistration((1, 2), (1,), leader=2)
    with pytest.raises(ValueError):
        PartitionRegistration((1,), (1,), leader_epoch=-1)


def load(records: list[MetadataRecord], provenance: MetadataProvenance):  # type: ignore[no-untyped-def]
    delta = MetadataDelta(EMPTY_IMAGE)
    for record in records:
        delta.replay(record)
    return delta.apply(provenance)


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_snapshot_of_replayed_image_loads_to_an_equal_image(data: st.DataObject) -> None:
    """Random command sequences -> records replayed into an image; image -> snapshot
    records -> load into an empty image == the replayed image (and via bytes too)."""
    ctx = Ctx(ControllerConfig(cluster_id="test-cluster", min_insync_replicas=2),
              elr=data.draw(st.booleans()))
    for _ in range(data.draw(st.integers(1, 40))):
        random_step(ctx, data)
    image = ctx.image
    assert load(image.to_records(), image.provenance) == image
    snapshot = build_snapshot_batches(image, records_per_batch=7)

    class Snap:
        snapshot_id = type("Id", (), {"end_offset": image.provenance.last_offset + 1,
                                      "epoch": image.provenance.last_epoch})()
        data = snapshot

    if image.provenance.last_offset >= 0:
        assert MetadataLoader().handle_load_snapshot(Snap()) == image


def test_snapshot_records_are_ordered_for_replay() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    ctx.create("a", 3, 2, configs=(("retention.ms", "100"),))
    records = ctx.image.to_records()
    kinds = [type(r).__name__ for r in records]
    assert kinds.index("TopicRecord") < kinds.index("PartitionRecord")
    assert kinds.count("RegisterBrokerRecord") == 3 and kinds.count("PartitionRecord") == 3
