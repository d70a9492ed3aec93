"""UpdateFeatures in the controller (``kafka-features.sh``): Kafka's checks
and messages, all or nothing, and what turning KIP-966 ELR on and off
writes with the feature level."""

from __future__ import annotations

import struct

import pytest
from mq_builders import Ctx, incarnation, listeners
from test_controller_elr import cluster, fence, part, restart, set_isr

from metadata_quorum.bootstrap import BOOTSTRAP_FEATURE
from metadata_quorum.controller import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    ConfigOpType,
    ControllerConfig,
    ControllerResult,
    FeatureUpdate,
    QuorumController,
    UpdateFeaturesRequest,
    UpgradeType,
    alter_configs,
    register_broker,
    update_features,
)
from metadata_quorum.controller.cluster_control import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from metadata_quorum.features import ELR_FEATURE, api_features, broker_features, elr_enabled
from metadata_quorum.image import CLUSTER_DEFAULT_RESOURCE, ConfigResource
from metadata_quorum.records import (
    NO_LEADER,
    BrokerFeature,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    decode_record,
    encode_record,
)
from raftlog.net.errors import ErrorCode

MIN_ISR = "min.insync.replicas"
CONFIG = ControllerConfig(cluster_id="test-cluster", min_insync_replicas=2)


def update(ctx: Ctx, level: int, upgrade_type: int = UpgradeType.UPGRADE, *,
           name: str = ELR_FEATURE, validate_only: bool = False) -> tuple[ErrorCode, str | None]:
    result = update_features(ctx.image, UpdateFeaturesRequest(
        (FeatureUpdate(name, level, upgrade_type),), validate_only), ctx.config)
    if result.response.error is not ErrorCode.none:
        assert result.records == ()  # a refusal writes nothing
    ctx.run(result)
    return result.response.error, result.response.message


def broker_config(ctx: Ctx, resource_name: str, key: str, value: str | None
                  ) -> tuple[ErrorCode, str | None]:
    result = alter_configs(ctx.image, AlterConfigsRequest((AlterConfigsResource(
        ConfigResourceType.BROKER, resource_name,
        (AlterConfigOp(key, ConfigOpType.SET if value is not None else ConfigOpType.DELETE,
                       value),)),)))
    ctx.run(result)
    return result.response[0].error, result.response[0].message


@pytest.mark.parametrize(("level", "upgrade_type", "message"), [
    (0, UpgradeType.UPGRADE, "Can't downgrade the version of this feature without setting the "
     "upgrade type to either safe or unsafe downgrade."),
    (2, UpgradeType.UPGRADE, "The controller only supports versions 0-1 of this feature"),
    (-1, UpgradeType.SAFE_DOWNGRADE, "A feature version cannot be less than 0."),
    (0, 7, "The controller does not support the given upgrade type."),
])
def test_kafka_refusals_with_elr_on(level: int, upgrade_type: int, message: str) -> None:
    ctx = Ctx(CONFIG, elr=True)
    error, text = update(ctx, level, upgrade_type)
    assert error is ErrorCode.invalid_update_version
    assert text is not None and text.startswith(
        f"Invalid update version {level} for feature {ELR_FEATURE}. {message}")
    assert elr_enabled(ctx.image)


def test_upgrade_with_a_downgrade_type_and_unknown_features_are_refused() -> None:
    ctx = Ctx(CONFIG)  # ELR off (level 0)
    assert update(ctx, 1, UpgradeType.SAFE_DOWNGRADE)[1] == (
        f"Invalid update version 1 for feature {ELR_FEATURE}. Can't downgrade to a newer version.")
    error, text = update(ctx, 1, name="metadata.version")
    assert error is ErrorCode.invalid_update_version
    assert text is not None and text.endswith("The controller does not support the given feature.")


def test_a_request_is_all_or_nothing_and_names_a_feature_once() -> None:
    ctx = Ctx(CONFIG)
    good, bad = FeatureUpdate(ELR_FEATURE, 1), FeatureUpdate("group.version", 1)
    result = update_features(ctx.image, UpdateFeaturesRequest((good, bad)), ctx.config)
    assert (result.records, result.response.error) == ((), ErrorCode.invalid_update_version)
    twice = update_features(ctx.image, UpdateFeaturesRequest((good, good)), ctx.config)
    assert (twice.records, twice.response.error) == ((), ErrorCode.invalid_request)


def test_validate_only_and_an_unchanged_level_write_nothing() -> None:
    ctx = Ctx(CONFIG)
    result = update_features(ctx.image, UpdateFeaturesRequest(
        (FeatureUpdate(ELR_FEATURE, 1),), validate_only=True), ctx.config)
    assert (result.records, result.response.error) == ((), ErrorCode.none)
    on = Ctx(CONFIG, elr=True)
    same = update_features(on.image, UpdateFeaturesRequest((FeatureUpdate(ELR_FEATURE, 1),)),
                           on.config)
    assert (same.records, same.response.error) == ((), ErrorCode.none)


def test_turning_elr_on_writes_the_cluster_min_isr_and_drops_broker_ones() -> None:
    """Kafka's ELR safety records: the ELR rules read one minimum."""
    ctx = Ctx(CONFIG)
    ctx.add_brokers(1, 2)
    assert broker_config(ctx, "1", MIN_ISR, "3") == (ErrorCode.none, None)  # allowed: ELR off
    result = update_features(ctx.image, UpdateFeaturesRequest((FeatureUpdate(ELR_FEATURE, 1),)),
                             ctx.config)
    assert result.records == (
        FeatureLevelRecord(ELR_FEATURE, 1),
        ConfigRecord(ConfigResourceType.BROKER, "", MIN_ISR, "2"),  # the static value
        ConfigRecord(ConfigResourceType.BROKER, "1", MIN_ISR, None))
    ctx.run(result)
    assert elr_enabled(ctx.image)
    assert ctx.image.config(CLUSTER_DEFAULT_RESOURCE)[MIN_ISR] == "2"
    assert MIN_ISR not in ctx.image.config(ConfigResource(ConfigResourceType.BROKER, "1"))
    # A cluster-level value already there is kept.
    again = Ctx(CONFIG)
    assert broker_config(again, "", MIN_ISR, "3") == (ErrorCode.none, None)
    assert update_features(again.image, UpdateFeaturesRequest(
        (FeatureUpdate(ELR_FEATURE, 1),)), again.config).records == (
        FeatureLevelRecord(ELR_FEATURE, 1),)


def test_with_elr_on_min_isr_is_cluster_wide_only() -> None:
    ctx = Ctx(CONFIG, elr=True)
    ctx.add_brokers(1)
    error, message = broker_config(ctx, "1", MIN_ISR, "2")
    assert error is ErrorCode.invalid_config and "cannot be set for one broker" in str(message)
    assert broker_config(ctx, "", MIN_ISR, "2") == (ErrorCode.none, None)
    error, message = broker_config(ctx, "", MIN_ISR, None)
    assert error is ErrorCode.invalid_config and "cannot be removed" in str(message)
    assert ctx.image.config(CLUSTER_DEFAULT_RESOURCE)[MIN_ISR] == "2"
    # Other broker-level configs are unaffected.
    assert broker_config(ctx, "1", "log.retention.ms", "1000") == (ErrorCode.none, None)


def test_turning_elr_off_clears_it_and_an_empty_isr_takes_the_elr() -> None:
    """Three partitions: one whose ISR is below the minimum (it keeps its
    leader), one with an empty ISR and an ELR, and one where nothing is
    eligible any more but the last known leader."""
    ctx, empty = cluster()
    ctx.add_brokers(4)
    below = ctx.create("below", -1, -1, assignments=((4, 1, 2),))
    set_isr(ctx, below, (4,))
    set_isr(ctx, empty, (1,))
    for broker_id in (2, 3, 1):
        fence(ctx, broker_id)
    p = part(ctx, below)
    assert (p.leader, p.isr, p.elr) == (4, (4,), (1, 2))
    p = part(ctx, empty)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (), (1, 2, 3), (1,))

    ctx2, lost = cluster()  # every replica restarts uncleanly
    set_isr(ctx2, lost, (1,))
    for broker_id in (2, 3, 1):
        fence(ctx2, broker_id)
    restart(ctx2, 2, 1, clean=False)
    restart(ctx2, 3, 1, clean=False)
    ctx2.register(1, generation=1)  # registered (unclean), not yet unfenced
    p = part(ctx2, lost)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (), (), (1,))

    assert update(ctx, 0, UpgradeType.SAFE_DOWNGRADE) == (ErrorCode.none, None)
    assert not elr_enabled(ctx.image)
    p = part(ctx, below)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (4, (4,), (), ())
    p = part(ctx, empty)
    # Every ELR member had every committed record, but all are fenced: the
    # last known leader stays as the ISR's last member, as without ELR.
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (1,), (), ())
    restart(ctx, 2, 1, clean=True)  # not in the ISR any more: no leader
    assert part(ctx, empty).leader == NO_LEADER
    restart(ctx, 1, 1, clean=True)  # the ISR member returns: a clean election
    assert (part(ctx, empty).leader, part(ctx, empty).isr) == (1, (1,))


def test_turning_elr_off_elects_from_the_usable_elr_members() -> None:
    """A leaderless partition whose ELR has usable members (the controller
    elects one at once with ELR on, so this state is brief; here it is
    written directly) gets them as its ISR and the first as leader."""
    ctx, topic = cluster()
    fence(ctx, 2)
    ctx.run(ControllerResult((PartitionChangeRecord(
        partition_id=0, topic_id=topic, isr=(), leader=NO_LEADER,
        eligible_leader_replicas=(1, 2, 3), last_known_elr=(1,)),), None))
    assert update(ctx, 0, UpgradeType.SAFE_DOWNGRADE) == (ErrorCode.none, None)
    p = part(ctx, topic)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1, 3), (), ())


def test_the_active_controller_writes_the_cluster_min_isr_when_elr_is_on() -> None:
    """A cluster formatted with ELR on (or whose log predates the rule) gets
    its cluster-level min.insync.replicas from the first active controller."""
    proposed: list[bytes] = []

    class Log:
        def propose(self, values: list[bytes], now_ms: int) -> int:
            proposed.extend(values)
            return len(proposed) - 1

    ctx = Ctx(CONFIG, elr=True)
    controller = QuorumController(1, CONFIG, Log(), image=ctx.image)  # type: ignore[arg-type]
    controller._transition_to_claiming(1)
    controller._transition_to_active(0)
    controller.tick(1_000)
    assert controller.latest_image.config(CLUSTER_DEFAULT_RESOURCE)[MIN_ISR] == "2"
    written = len(proposed)
    controller.tick(2_000)
    assert len(proposed) == written  # once


def test_api_features_report_supported_and_finalized_levels() -> None:
    ctx = Ctx(CONFIG, elr=True)
    features = api_features(ctx.image)
    assert features.supported == {ELR_FEATURE: (0, 1)}
    assert features.finalized == {ELR_FEATURE: 1}
    assert features.epoch == ctx.image.provenance.last_offset
    assert api_features(Ctx(CONFIG).image).finalized == {}


def test_elr_records_are_partition_changes_only_where_needed() -> None:
    ctx, topic = cluster()
    ctx.create("full", -1, -1, assignments=((1, 2, 3),))  # ISR full: no ELR, no record
    set_isr(ctx, topic, (1,))
    result = update_features(ctx.image, UpdateFeaturesRequest(
        (FeatureUpdate(ELR_FEATURE, 0, UpgradeType.SAFE_DOWNGRADE),)), ctx.config)
    changes = [r for r in result.records if isinstance(r, PartitionChangeRecord)]
    assert [(c.topic_id, c.eligible_leader_replicas) for c in changes] == [(topic, ())]


# ---- KIP-584: the feature ranges brokers declare when they register ----------------


def registration(ctx: Ctx, broker_id: int, features: tuple[BrokerFeature, ...],
                 generation: int = 0) -> ControllerResult[BrokerRegistrationResponse]:
    return register_broker(
        ctx.image, ctx.sessions,
        BrokerRegistrationRequest(broker_id, incarnation(broker_id, generation),
                                  listeners(broker_id), features=features),
        ctx.config, next_offset=ctx.next_offset, now_ms=ctx.now_ms)


def test_registrations_carry_this_softwares_feature_ranges() -> None:
    ctx = Ctx(CONFIG)
    ctx.add_brokers(1)
    assert broker_features() == (BrokerFeature(ELR_FEATURE, 0, 1),)
    assert ctx.image.brokers[1].features == broker_features()
    assert ctx.image.brokers[1].supported_range(ELR_FEATURE) == (0, 1)
    assert ctx.image.brokers[1].supported_range("other.version") == (0, 0)  # undeclared


def test_a_broker_that_cannot_run_a_finalized_level_is_refused() -> None:
    """Software from before ELR (no range for it) may not join a cluster
    that runs ELR; nothing is written and the refusal names the level."""
    ctx = Ctx(CONFIG, elr=True)
    result = registration(ctx, 1, ())
    assert result.records == ()
    assert result.response.error is ErrorCode.unsupported_version
    assert result.response.message == (
        f"Unable to register because the broker does not support finalized level 1 of "
        f"{ELR_FEATURE}; it supports 0.")
    narrow = registration(ctx, 1, (BrokerFeature(ELR_FEATURE, 0, 0),))
    assert narrow.response.error is ErrorCode.unsupported_version
    assert registration(ctx, 1, broker_features()).response.error is ErrorCode.none


def test_a_broker_that_needs_a_level_the_cluster_has_not_finalized_is_refused() -> None:
    ctx = Ctx(CONFIG)  # ELR off: level 0
    result = registration(ctx, 1, (BrokerFeature(ELR_FEATURE, 1, 1),))
    assert result.response.error is ErrorCode.unsupported_version
    assert result.response.message is not None and "level 0 of" in result.response.message
    assert registration(ctx, 1, (BrokerFeature("future.version", 1, 2),)).response.error \
        is ErrorCode.unsupported_version


def test_the_controllers_own_markers_are_not_asked_of_brokers() -> None:
    ctx = Ctx(CONFIG)
    ctx.run(ControllerResult((FeatureLevelRecord(BOOTSTRAP_FEATURE, 1),), None))
    assert registration(ctx, 1, broker_features()).response.error is ErrorCode.none


def test_a_feature_declared_twice_is_an_invalid_request() -> None:
    ctx = Ctx(CONFIG)
    twice = (BrokerFeature(ELR_FEATURE, 0, 1), BrokerFeature(ELR_FEATURE, 0, 0))
    result = registration(ctx, 1, twice)
    assert (result.records, result.response.error) == ((), ErrorCode.invalid_request)


def test_the_same_incarnation_with_new_ranges_registers_again() -> None:
    ctx = Ctx(CONFIG)
    first = ctx.register(1)
    assert registration(ctx, 1, broker_features()).records == ()  # an idempotent retry
    changed = registration(ctx, 1, ())
    assert changed.response.error is ErrorCode.none and changed.response.broker_epoch > first
    ctx.run(changed)
    assert ctx.image.brokers[1].features == ()


def test_update_features_asks_every_registered_broker_fenced_ones_too() -> None:
    ctx = Ctx(CONFIG)
    ctx.add_brokers(1, 2)
    ctx.register(3, features=())  # older software: ELR unknown to it
    assert ctx.image.brokers[3].fenced
    error, text = update(ctx, 1)
    assert error is ErrorCode.invalid_update_version
    assert text == (f"Invalid update version 1 for feature {ELR_FEATURE}. "
                    f"Broker 3 does not support the given level; it supports 0.")
    assert update(ctx, 1, validate_only=True)[0] is ErrorCode.invalid_update_version
    assert not elr_enabled(ctx.image)
    # Broker 3 upgraded: a new incarnation declares the range, and ELR goes on.
    ctx.register(3, generation=1)
    assert update(ctx, 1) == (ErrorCode.none, None)
    assert elr_enabled(ctx.image)


def test_an_unchanged_level_is_not_refused_for_a_broker_that_lacks_it() -> None:
    ctx = Ctx(CONFIG)
    ctx.add_brokers(1)
    ctx.register(2, features=())
    assert update(ctx, 0, UpgradeType.SAFE_DOWNGRADE) == (ErrorCode.none, None)


def test_older_registrations_read_from_a_log_declare_nothing() -> None:
    """A RegisterBrokerRecord version 0 (written before this change) reads
    as a broker with no ranges: ELR cannot go on until it registers again."""
    v0 = encode_record(RegisterBrokerRecord(1, incarnation(1), 0, listeners(1)))
    raw = bytearray(v0)
    raw[2:4] = struct.pack(">h", 0)
    ctx = Ctx(CONFIG)
    ctx.run(ControllerResult((decode_record(bytes(raw[:-4])),), None))
    assert ctx.image.brokers[1].features == ()
    assert update(ctx, 1)[0] is ErrorCode.invalid_update_version
