"""What every broker API handler shares: the broker it runs on, and small helpers."""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from data_plane.api.authorization import AclAuthorization
from data_plane.api.encoders import NodeEndpoint
from data_plane.api.fetch_session import FetchSessionCache
from data_plane.broker.coordinators import BrokerCoordinators
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.replication.types import TopicPartition
from data_plane.tls_reload import KeystoreReloader
from metadata_quorum.acls import AclOperation, ResourceType
from metadata_quorum.controller.delegation_token_control import DelegationTokenSettings
from metadata_quorum.image import BrokerRegistration, MetadataImage
from raftlog.net import RequestContext
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode

__all__ = ("NO_THROTTLE", "NO_THROTTLE_MS", "UNREQUESTED_OPERATIONS", "BrokerApiContext", "endpoint_of")

NO_THROTTLE: Final = datetime.timedelta(0)
NO_THROTTLE_MS: Final = 0  # the same, for the hand-written encoders
# Kafka's "authorized operations not requested" (Integer.MIN_VALUE).
UNREQUESTED_OPERATIONS: Final = -(2**31)
# Errors a Kafka client may retry (Kafka's RetriableException subclasses) —
# for logging and tests; the codes themselves carry the meaning on the wire.
RETRIABLE_ERRORS: Final = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.offset_not_available, ErrorCode.corrupt_message, ErrorCode.not_controller,
})


@dataclass(frozen=True, slots=True)
class BrokerApiContext:
    """The broker a handler answers for."""

    metadata: BrokerMetadata
    replicas: ReplicaManager
    cluster_id: str
    listener_name: str = "PLAINTEXT"
    #: What the coordinators authenticate with on ``listener_name`` (SASL).
    security: ConnectionSecurity = PLAINTEXT_SECURITY
    #: Created with the context when not given (one set per broker listener).
    coordinators: BrokerCoordinators = field(default=None)  # type: ignore[assignment]
    #: KIP-227 fetch sessions, created with the context when not given; sized
    #: by ``max.incremental.fetch.session.cache.slots`` (read once).
    fetch_sessions: FetchSessionCache = field(default=None)  # type: ignore[assignment]
    #: ACL checks (`data_plane.api.authorization`); None: authorize nothing
    #: (no ``authorizer.class.name``). Created from the static config.
    authorization: AclAuthorization | None = field(default=None)
    #: This broker's TLS listeners' dynamic keystores (`data_plane.tls_reload`);
    #: None without a TLS listener.
    keystores: KeystoreReloader | None = field(default=None)
    #: KIP-48 delegation tokens (``delegation.token.*``); disabled by default.
    delegation_tokens: DelegationTokenSettings = field(default_factory=DelegationTokenSettings)
    #: Listener name -> security protocol (``listener.security.protocol.map``);
    #: a listener not named is PLAINTEXT.
    listener_protocols: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # None (the field default) means "create one"; the annotations say
        # what the fields hold once constructed.
        if self.coordinators is None:
            object.__setattr__(self, "coordinators",  # type: ignore[unreachable]
                               BrokerCoordinators(self.metadata, self.replicas,
                                                  listener_name=self.listener_name,
                                                  security=self.security))
        if self.authorization is None:
            object.__setattr__(self, "authorization",
                               AclAuthorization.from_config(self.replicas.static_config))
        if self.fetch_sessions is None:
            config = self.replicas.broker_config  # type: ignore[unreachable]
            object.__setattr__(self, "fetch_sessions", FetchSessionCache(
                int(config["max.incremental.fetch.session.cache.slots"]),
                int(config["min.incremental.fetch.session.eviction.ms"]),
                random.Random(),  # seeded from os.urandom: session ids are not guessable
            ))

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def listener_protocol(self, listener_name: str) -> str:
        """The security protocol of the listener a request came in on."""
        return self.listener_protocols.get(listener_name, "PLAINTEXT")

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether the request's principal may do ``operation`` on the
        resource; always True without an authorizer."""
        authorization = self.authorization
        return authorization is None or authorization.authorize(
            self.image, context, operation, resource_type, name)

    def authorize_any(self, context: RequestContext, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """`Authorizer.authorize_any` for the request's principal; True without
        an authorizer."""
        authorization = self.authorization
        return authorization is None or authorization.authorize_any(
            self.image, context, operation, resource_type)

    def live_brokers(
        self, listener_name: str | None = None
    ) -> Iterable[tuple[BrokerRegistration, str, int]]:
        """Unfenced brokers with an endpoint on ``listener_name`` (default:
        ours): (registration, host, port). Kafka answers Metadata with the
        addresses of the listener the request came in on."""
        for broker_id in sorted(self.image.brokers):
            broker = self.image.brokers[broker_id]
            if broker.fenced:
                continue
            address = endpoint_of(broker, listener_name or self.listener_name)
            if address is not None:
                yield broker, address[0], address[1]

    def registered_brokers(
        self, listener_name: str | None = None
    ) -> Iterable[tuple[BrokerRegistration, str, int, bool]]:
        """Every registered broker with an endpoint on ``listener_name``
        (default: ours), fenced or not: (registration, host, port, fenced)."""
        for broker_id in sorted(self.image.brokers):
            broker = self.image.brokers[broker_id]
            address = endpoint_of(broker, listener_name or self.listener_name)
            if address is not None:
                yield broker, address[0], address[1], broker.fenced

    def leader_hint(self, partition: TopicPartition, listener_name: str,
                    endpoints: dict[int, NodeEndpoint]) -> tuple[int, int]:
        """KIP-951: the partition's (leader id, leader epoch) per the latest
        metadata, for a NOT_LEADER_OR_FOLLOWER answer ((-1, -1): unknown).
        The leader's address on ``listener_name`` goes into ``endpoints``
        (the answer's NodeEndpoints) when it is alive there, as Kafka's
        ``getCurrentLeader`` looks it up among the alive brokers."""
        leader, epoch = self.replicas.leader_hint(partition)
        if leader >= 0 and leader not in endpoints:
            broker = self.image.brokers.get(leader)
            address = None if broker is None or broker.fenced else endpoint_of(
                broker, listener_name)
            if broker is not None and address is not None:
                endpoints[leader] = NodeEndpoint(leader, address[0], address[1], broker.rack)
        return leader, epoch


def endpoint_of(broker: BrokerRegistration, listener_name: str) -> tuple[str, int] | None:
    """``broker``'s (host, port) on ``listener_name``, or None."""
    for endpoint in broker.listeners:
        if endpoint.name == listener_name:
            return endpoint.host, endpoint.port
    return None
