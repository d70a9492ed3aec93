"""UpdateFeatures (``kafka-features.sh upgrade|downgrade|disable``): change
finalized feature levels, as FeatureLevelRecords.

After Kafka's ``FeatureControlManager`` (design only). A request names
features and their new levels, each with an upgrade type. The checks, in
order, for each feature; the first that fails refuses the whole request
(INVALID_UPDATE_VERSION, Kafka's ``Invalid update version L for feature
F. ...`` message, no records), as Kafka's controllers since 3.9 do:

1. an unknown upgrade type;
2. a level below 0;
3. a feature or level this controller's software does not support
   (`features.SUPPORTED_FEATURES`);
4. a lower level with the UPGRADE type (a downgrade must say so), or a
   higher one with a downgrade type.

Level 0 removes the feature (Kafka's "disable"). An unchanged level is
accepted and writes nothing. ``validate_only`` answers without records.

5. a level some registered broker (fenced ones too) did not declare it
   supports (`features.unsupported_by_broker`; a broker registered by
   software older than the feature supports only level 0 of it).

Deviation: Kafka also checks the ranges every controller declared in its
ControllerRegistration (KIP-919). Controllers here do not register; the
active controller checks its own software's (step 3), and in combined
mode every controller is also a registered broker (step 5).

**Eligible leader replicas (KIP-966).** Turning
``eligible.leader.replicas.version`` on writes, in the same batch, the
records Kafka's controller writes then (`elr_safety_records`): a
cluster-level ``min.insync.replicas`` (the controller's static value) if
there is none, and the removal of every broker-level one, since the ELR
rules read one minimum for the whole cluster. Turning it off clears every
partition's ELR and last known ELR (`elr_clear_records`); a partition whose
ISR is empty takes its ISR from its ELR, and a leader from it if one is
usable: those replicas hold every committed record (the ELR invariant),
which is what the ISR means without ELR.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from metadata_quorum.features import (
    ELR_FEATURE,
    SUPPORTED_FEATURES,
    elr_enabled,
    unsupported_by_broker,
)
from metadata_quorum.image import CLUSTER_DEFAULT_RESOURCE, MetadataImage
from metadata_quorum.records import (
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
)
from raftlog.net.errors import ErrorCode

from .configuration_control import MIN_INSYNC_REPLICAS
from .partition_change import build_partition_change
from .result import ControllerConfig, ControllerResult

__all__ = [
    "FeatureUpdate",
    "UpdateFeaturesRequest",
    "UpdateFeaturesResult",
    "UpgradeType",
    "elr_clear_records",
    "elr_safety_records",
    "update_features",
]

class UpgradeType(IntEnum):
    """UpdateFeatures v1+ ``upgrade_type`` (Kafka's ``FeatureUpdate.UpgradeType``)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    name: str
    level: int
    #: An `UpgradeType` value; anything else is refused (kept an int so that
    #: a wire value outside the enum reaches the check).
    upgrade_type: int = UpgradeType.UPGRADE


@dataclass(frozen=True, slots=True)
class UpdateFeaturesRequest:
    updates: tuple[FeatureUpdate, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class UpdateFeaturesResult:
    """The request's outcome: NONE, or the first refusal and its message."""

    error: ErrorCode
    message: str | None = None


def update_features(
    image: MetadataImage, request: UpdateFeaturesRequest, config: ControllerConfig
) -> ControllerResult[UpdateFeaturesResult]:
    """The records for ``request`` (module docstring), all or nothing."""
    names = [u.name for u in request.updates]
    if len(set(names)) != len(names):
        return ControllerResult((), UpdateFeaturesResult(
            ErrorCode.invalid_request, "a feature appears more than once in the request"))
    records: list[MetadataRecord] = []
    after = dict(image.features)
    for update in request.updates:
        problem = _refusal(image, update)
        if problem is not None:
            return ControllerResult((), UpdateFeaturesResult(
                ErrorCode.invalid_update_version,
                f"Invalid update version {update.level} for feature {update.name}. {problem}"))
        if image.features.get(update.name, 0) != update.level:
            records.append(FeatureLevelRecord(update.name, update.level))
            after[update.name] = update.level
    if request.validate_only:
        return ControllerResult((), UpdateFeaturesResult(ErrorCode.none))
    was_on, now_on = elr_enabled(image), after.get(ELR_FEATURE, 0) >= 1
    if now_on and not was_on:
        records.extend(elr_safety_records(image, config))
    elif was_on and not now_on:
        records.extend(elr_clear_records(image))
    return ControllerResult(tuple(records), UpdateFeaturesResult(ErrorCode.none))


def _refusal(image: MetadataImage, update: FeatureUpdate) -> str | None:
    if update.upgrade_type not in tuple(UpgradeType):
        return "The controller does not support the given upgrade type."
    if update.level < 0:
        return "A feature version cannot be less than 0."
    supported = SUPPORTED_FEATURES.get(update.name)
    if supported is None:
        return "The controller does not support the given feature."
    low, high = supported
    if update.level != 0 and not low <= update.level <= high:
        return (f"The controller only supports versions {low}-{high} of this feature; "
                f"level 0 disables it.")
    current = image.features.get(update.name, 0)
    if update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade "
                "type to either safe or unsafe downgrade.")
    if update.level > current and update.upgrade_type != UpgradeType.UPGRADE:
        return "Can't downgrade to a newer version."
    if update.level != current:
        return unsupported_by_broker(image, update.name, update.level)
    return None


def elr_safety_records(image: MetadataImage, config: ControllerConfig) -> list[MetadataRecord]:
    """What turning KIP-966 ELR on writes with it: the cluster-level
    ``min.insync.replicas`` (the static value) if none is set, and the
    removal of every broker-level one."""
    out: list[MetadataRecord] = []
    if MIN_INSYNC_REPLICAS not in image.config(CLUSTER_DEFAULT_RESOURCE):
        out.append(ConfigRecord(ConfigResourceType.BROKER, "", MIN_INSYNC_REPLICAS,
                                str(config.min_insync_replicas)))
    for resource, entries in sorted(image.configs.items(),
                                    key=lambda item: (int(item[0].type), item[0].name)):
        if resource.type is ConfigResourceType.BROKER and resource.name != "" \
                and MIN_INSYNC_REPLICAS in entries:
            out.append(ConfigRecord(ConfigResourceType.BROKER, resource.name,
                                    MIN_INSYNC_REPLICAS, None))
    return out


def elr_clear_records(image: MetadataImage) -> list[MetadataRecord]:
    """What turning KIP-966 ELR off writes with it: every ELR and last known
    ELR cleared. A partition with an empty ISR and an ELR takes ISR members
    from the ELR (each member holds every committed record): its usable
    members, the first of which leads; if none is usable, one of them, the
    last known leader if it is one, kept as the ISR's last member as Kafka
    keeps it without ELR (`partition_change.isr_without`). With an empty ELR
    too it stays leaderless until an unclean election is asked for."""
    out: list[MetadataRecord] = []
    for topic, partition_id, part in image.iter_partitions():
        if not (part.elr or part.last_known_elr):
            continue
        target_isr = None
        if not part.isr and part.elr:
            usable = tuple(b for b in part.elr if image.is_usable(b))
            if usable:
                target_isr = usable
            elif part.last_known_elr and part.last_known_elr[0] in part.elr:
                target_isr = part.last_known_elr[:1]
            else:
                target_isr = part.elr[:1]
        record = build_partition_change(
            topic.topic_id, partition_id, part, is_acceptable=image.is_usable,
            target_isr=target_isr, min_isr=None)
        if record is not None:
            out.append(record)
    return out
