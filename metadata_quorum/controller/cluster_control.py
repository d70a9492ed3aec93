"""Brokers: registration, heartbeats, session fencing, controlled shutdown, unregistration.

After Kafka's ``ClusterControlManager`` and ``BrokerHeartbeatManager``
(design only). Broker lifecycle, as driven by these commands::

    (none) --register--> FENCED --heartbeat, caught up--> UNFENCED
    UNFENCED --heartbeat want_shutdown--> IN_CONTROLLED_SHUTDOWN
    UNFENCED / IN_CONTROLLED_SHUTDOWN --session expired or want_fence--> FENCED
    any --register (new incarnation)--> FENCED, with a new broker epoch

A broker's epoch is the metadata log offset of its RegisterBroker record
(KIP-631), so every registration gets a new, larger epoch. The broker has
caught up once its heartbeat reports a metadata offset at or past that
record. Fencing and controlled shutdown first move leadership off the broker
and drop it from ISRs (KIP-841), so at every offset of the log no partition
is led by, and no ISR holds (except as a leaderless last member), a broker
that is fenced or shutting down.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from metadata_quorum.features import registration_refusal
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import (
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    Endpoint,
    FenceBrokerRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from raftlog.net.errors import ErrorCode

from ._replay import image_after
from .replication_control import (
    records_for_broker_leaving,
    records_for_broker_unfenced,
    records_for_brokers_leaving,
)
from .result import ControllerConfig, ControllerResult
from .sessions import BrokerSessions

__all__ = [
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest",
    "BrokerRegistrationResponse",
    "UnregisterBrokerRequest",
    "UnregisterBrokerResponse",
    "broker_heartbeat",
    "fence_stale_brokers",
    "register_broker",
    "unregister_broker",
]


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """A broker (re)starting: ``incarnation_id`` is new for every process start."""

    broker_id: int
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...] = ()
    rack: str | None = None
    cluster_id: str | None = None
    #: The broker epoch its last clean shutdown recorded (KIP-966), -1 if
    #: it did not shut down cleanly (or never ran).
    previous_broker_epoch: int = -1
    #: The feature level ranges its software supports (KIP-584).
    features: tuple[BrokerFeature, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    error: ErrorCode
    broker_epoch: int = -1
    message: str | None = None


def register_broker(
    image: MetadataImage,
    sessions: BrokerSessions,
    request: BrokerRegistrationRequest,
    config: ControllerConfig,
    *,
    next_offset: int,
    now_ms: int,
) -> ControllerResult[BrokerRegistrationResponse]:
    """BrokerRegistration: a new fenced registration at a new broker epoch.

    ``next_offset`` is the offset the first returned record will get; the
    RegisterBroker record's offset becomes the broker epoch. Answers:

    - INCONSISTENT_CLUSTER_ID: the broker belongs to another cluster;
    - INVALID_REQUEST: a negative broker id, a feature declared twice, or
      two listeners of one name;
    - UNSUPPORTED_VERSION: the broker's software cannot run with a
      finalized feature level (`features.registration_refusal`), so it
      stays out of the cluster rather than misread what the others write;
    - DUPLICATE_BROKER_REGISTRATION: another incarnation of this broker id
      is unfenced and still has a live session (it heartbeated within
      ``broker.session.timeout.ms``), so two processes claim one id. A
      fenced registration has no session (Kafka's ``hasValidSession``): a
      broker that shut down cleanly, or was fenced, comes back at once;
    - the current epoch and no records, when the same incarnation registers
      again with the same listeners and rack (an idempotent retry);
    - otherwise, a new epoch. If the old registration still leads
      partitions or sits in ISRs, those records come first (a restarted
      broker may have lost its disk). If a new incarnation's
      ``previous_broker_epoch`` is not the old registration's epoch, it did
      not shut down cleanly and
      may have lost what it had in its page cache: with KIP-966 ELR on, it
      also leaves every ELR (`replication_control.records_for_broker_leaving`).
    """
    if request.cluster_id is not None and request.cluster_id != config.cluster_id:
        return ControllerResult((), BrokerRegistrationResponse(
            ErrorCode.inconsistent_cluster_id,
            message=f"expected cluster id {config.cluster_id}, got {request.cluster_id}",
        ))
    if request.broker_id < 0:
        return ControllerResult((), BrokerRegistrationResponse(
            ErrorCode.invalid_request, message="broker id must be >= 0"))
    if len({f.name for f in request.features}) != len(request.features):
        return ControllerResult((), BrokerRegistrationResponse(
            ErrorCode.invalid_request, message="a feature is declared more than once"))
    if len({e.name for e in request.listeners}) != len(request.listeners):
        return ControllerResult((), BrokerRegistrationResponse(
            ErrorCode.invalid_request, message="a listener name appears more than once"))
    refusal = registration_refusal(image, request.features)
    if refusal is not None:
        return ControllerResult((), BrokerRegistrationResponse(
            ErrorCode.unsupported_version, message=refusal))
    existing = image.brokers.get(request.broker_id)
    if existing is not None:
        if existing.incarnation_id == request.incarnation_id:
            if (existing.listeners == request.listeners and existing.rack == request.rack
                    and existing.features == request.features):
                return ControllerResult((), BrokerRegistrationResponse(
                    ErrorCode.none, existing.epoch))
        elif not existing.fenced and sessions.has_valid_session(
            request.broker_id, now_ms, config.broker_session_timeout_ms
        ):
            return ControllerResult((), BrokerRegistrationResponse(
                ErrorCode.duplicate_broker_registration,
                message=(
                    f"another incarnation of broker {request.broker_id} "
                    f"({existing.incarnation_id}) is still in session"
                ),
            ))
    records: list[MetadataRecord] = []
    if existing is not None:
        unclean = (existing.incarnation_id != request.incarnation_id
                   and request.previous_broker_epoch != existing.epoch)
        records.extend(records_for_broker_leaving(
            image, request.broker_id, config, unclean_shutdown=unclean))
    epoch = next_offset + len(records)
    records.append(RegisterBrokerRecord(
        broker_id=request.broker_id, incarnation_id=request.incarnation_id,
        broker_epoch=epoch, listeners=request.listeners, rack=request.rack,
        fenced=True, in_controlled_shutdown=False, features=request.features,
    ))
    return ControllerResult(tuple(records), BrokerRegistrationResponse(ErrorCode.none, epoch))


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    #: The offset of the last metadata record the broker has replayed.
    current_metadata_offset: int
    want_fence: bool = False
    want_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


def broker_heartbeat(
    image: MetadataImage, request: BrokerHeartbeatRequest, config: ControllerConfig
) -> ControllerResult[BrokerHeartbeatResponse]:
    """BrokerHeartbeat: unfence, fence or shut down as the broker's state asks.

    BROKER_ID_NOT_REGISTERED for an unknown broker, STALE_BROKER_EPOCH for
    an old epoch (the broker must re-register). Otherwise, by state:

    - fenced + want_shutdown: may stop now (it leads nothing);
    - fenced, caught up, not want_fence: UnfenceBroker, then leader
      elections for leaderless partitions it can lead;
    - unfenced + want_shutdown: controlled shutdown: leadership moves off,
      it leaves ISRs (when not the last member), then
      BrokerRegistrationChange(in_controlled_shutdown); once it leads no
      partition, FenceBroker and ``should_shut_down`` (Kafka's
      SHUTDOWN_NOW). The response goes out only after these records commit
      (facade contract), so "shut down" is never early;
    - unfenced + want_fence: the same moves, then FenceBroker.

    The caller records the heartbeat in the broker's session on success.
    """
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return ControllerResult((), BrokerHeartbeatResponse(ErrorCode.broker_id_not_registered))
    if broker.epoch != request.broker_epoch:
        return ControllerResult((), BrokerHeartbeatResponse(ErrorCode.stale_broker_epoch))
    # KIP-631: caught up once it has replayed its own registration record.
    caught_up = request.current_metadata_offset >= broker.epoch
    broker_id = broker.broker_id
    if broker.fenced:
        if request.want_shutdown:
            return ControllerResult((), BrokerHeartbeatResponse(
                ErrorCode.none, caught_up, is_fenced=True, should_shut_down=True))
        if request.want_fence or not caught_up:
            return ControllerResult((), BrokerHeartbeatResponse(ErrorCode.none, caught_up))
        unfence = UnfenceBrokerRecord(broker_id, broker.epoch)
        after = image_after(image, [unfence])
        records: list[MetadataRecord] = [unfence]
        records.extend(records_for_broker_unfenced(after, broker_id, config))
        return ControllerResult(tuple(records), BrokerHeartbeatResponse(
            ErrorCode.none, caught_up, is_fenced=False))
    if request.want_shutdown:
        moves: list[MetadataRecord] = [*records_for_broker_leaving(image, broker_id, config)]
        if not broker.in_controlled_shutdown:
            moves.append(BrokerRegistrationChangeRecord(
                broker_id, broker.epoch, in_controlled_shutdown=True))
        after = image_after(image, moves)
        if any(part.leader == broker_id for _t, _p, part in after.iter_partitions()):
            return ControllerResult(tuple(moves), BrokerHeartbeatResponse(
                ErrorCode.none, caught_up, is_fenced=False, should_shut_down=False))
        # Kafka's SHUTDOWN_NOW: the broker is fenced as it is let go, so its
        # session ends with it and the next incarnation registers at once.
        moves.append(FenceBrokerRecord(broker_id, broker.epoch))
        return ControllerResult(tuple(moves), BrokerHeartbeatResponse(
            ErrorCode.none, caught_up, is_fenced=True, should_shut_down=True))
    if request.want_fence:
        fence: list[MetadataRecord] = [*records_for_broker_leaving(image, broker_id, config)]
        fence.append(FenceBrokerRecord(broker_id, broker.epoch))
        return ControllerResult(tuple(fence), BrokerHeartbeatResponse(ErrorCode.none, caught_up))
    return ControllerResult((), BrokerHeartbeatResponse(ErrorCode.none, caught_up, is_fenced=False))


def fence_stale_brokers(
    image: MetadataImage, sessions: BrokerSessions, config: ControllerConfig, now_ms: int
) -> ControllerResult[tuple[int, ...]]:
    """Fence every unfenced broker not heard from for ``broker.session.timeout.ms``.

    Per broker, in id order: its partitions' leader/ISR changes, then
    FenceBroker. Response: the fenced broker ids. Brokers in controlled
    shutdown that stop heartbeating are fenced too.
    """
    stale = [
        broker.broker_id
        for broker in sorted(image.brokers.values(), key=lambda b: b.broker_id)
        if not broker.fenced
        and not sessions.has_valid_session(
            broker.broker_id, now_ms, config.broker_session_timeout_ms
        )
    ]
    if not stale:
        return ControllerResult((), ())
    records = records_for_brokers_leaving(
        image, stale, config, lambda b: FenceBrokerRecord(b, image.brokers[b].epoch)
    )
    return ControllerResult(tuple(records), tuple(stale))


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRequest:
    broker_id: int


@dataclass(frozen=True, slots=True)
class UnregisterBrokerResponse:
    error: ErrorCode


def unregister_broker(
    image: MetadataImage, request: UnregisterBrokerRequest, config: ControllerConfig
) -> ControllerResult[UnregisterBrokerResponse]:
    """UnregisterBroker (an operator removing a broker for good).

    BROKER_ID_NOT_REGISTERED if unknown; otherwise its partition changes,
    then UnregisterBroker.
    """
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return ControllerResult((), UnregisterBrokerResponse(ErrorCode.broker_id_not_registered))
    records = records_for_brokers_leaving(
        image, [broker.broker_id], config,
        lambda b: UnregisterBrokerRecord(b, broker.epoch),
    )
    return ControllerResult(tuple(records), UnregisterBrokerResponse(ErrorCode.none))
