"""Finalized feature levels that change the controller's or brokers' rules.

A feature is a ``FeatureLevelRecord`` in the metadata log (Kafka's
``kafka-features``); its level is in `MetadataImage.features`. A new
cluster's first active controller writes the defaults of `NEW_CLUSTER_FEATURES`
in its bootstrap batch (`metadata_quorum.bootstrap`); a log bootstrapped
before a feature existed keeps it at level 0 (off), as Kafka's upgrades do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from metadata_quorum.bootstrap import BOOTSTRAP_FEATURE
from metadata_quorum.image import BrokerRegistration, MetadataImage
from metadata_quorum.records import BrokerFeature
from raftlog.net.api_versions import ApiFeatures

__all__ = ["ELR_FEATURE", "NEW_CLUSTER_FEATURES", "SUPPORTED_FEATURES", "api_features",
           "broker_features", "elr_enabled", "parse_feature", "registration_refusal",
           "unsupported_by_broker"]

#: KIP-966 eligible leader replicas; level 1 turns them on. Kafka 4.1 turns
#: it on for newly formatted clusters.
ELR_FEATURE: Final = "eligible.leader.replicas.version"

#: Each feature's supported levels, (min, max).
SUPPORTED_FEATURES: Final[Mapping[str, tuple[int, int]]] = {ELR_FEATURE: (0, 1)}

#: Feature levels a newly formatted cluster starts with.
NEW_CLUSTER_FEATURES: Final[Mapping[str, int]] = {ELR_FEATURE: 1}


def broker_features() -> tuple[BrokerFeature, ...]:
    """What a broker's registration declares it supports: this software's
    `SUPPORTED_FEATURES`, in name order."""
    return tuple(BrokerFeature(name, low, high)
                 for name, (low, high) in sorted(SUPPORTED_FEATURES.items()))


def _range_text(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low}-{high}"


def registration_refusal(image: MetadataImage, declared: tuple[BrokerFeature, ...]) -> str | None:
    """Why a broker declaring ``declared`` may not register in a cluster at
    ``image``'s finalized levels, or None if it may (Kafka's check in
    ``ClusterControlManager.registerBroker``): every finalized level, and
    level 0 for each declared feature that is not finalized, must lie in
    the broker's range; a feature it does not declare it supports at level
    0 only. The controller's own markers (`BOOTSTRAP_FEATURE`) are not
    features a broker runs with and are not asked about."""
    ranges = {f.name: (f.min_supported, f.max_supported) for f in declared}
    names = sorted({*ranges, *image.features} - {BOOTSTRAP_FEATURE})
    for name in names:
        level = image.features.get(name, 0)
        low, high = ranges.get(name, (0, 0))
        if not low <= level <= high:
            return (f"Unable to register because the broker does not support finalized "
                    f"level {level} of {name}; it supports {_range_text(low, high)}.")
    return None


def unsupported_by_broker(image: MetadataImage, name: str, level: int) -> str | None:
    """The first registered broker (by id; fenced ones too, as they may
    come back at any time) whose declared range of ``name`` leaves out
    ``level``, as UpdateFeatures' refusal text; None if every broker can
    run with it."""
    for broker in sorted(image.brokers.values(), key=_broker_id):
        low, high = broker.supported_range(name)
        if not low <= level <= high:
            return (f"Broker {broker.broker_id} does not support the given level; "
                    f"it supports {_range_text(low, high)}.")
    return None


def _broker_id(broker: BrokerRegistration) -> int:
    return broker.broker_id


def elr_enabled(image: MetadataImage) -> bool:
    """Whether KIP-966 ELR is on: the controller keeps ELRs and the leaders
    hold the high watermark while the ISR is below ``min.insync.replicas``."""
    return image.features.get(ELR_FEATURE, 0) >= 1


def api_features(image: MetadataImage) -> ApiFeatures:
    """What a node's ApiVersions answer says of features (KIP-584;
    ``kafka-features.sh describe``): this software's supported levels and
    the cluster's finalized ones as of ``image`` (its last offset is the
    epoch). Internal markers such as the bootstrap level are left out."""
    return ApiFeatures(
        supported=SUPPORTED_FEATURES,
        finalized={name: level for name, level in image.features.items()
                   if name in SUPPORTED_FEATURES},
        epoch=image.provenance.last_offset)


def parse_feature(spec: str) -> tuple[str, int]:
    """``NAME=LEVEL`` (``storage format --feature``, as Kafka's) as a pair.
    Raises ValueError, with a readable message, for an unknown feature or an
    unsupported level."""
    name, sep, text = spec.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"--feature {spec!r} is not NAME=LEVEL")
    if name not in SUPPORTED_FEATURES:
        raise ValueError(f"--feature: unknown feature {name!r} "
                         f"(known: {', '.join(sorted(SUPPORTED_FEATURES))})")
    try:
        level = int(text.strip())
    except ValueError:
        raise ValueError(f"--feature {name}: level {text.strip()!r} is not a number") from None
    low, high = SUPPORTED_FEATURES[name]
    if not low <= level <= high:
        raise ValueError(f"--feature {name}: level {level} is not supported ({low}-{high})")
    return name, level
