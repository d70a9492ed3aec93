"""Request quotas on the broker (KIP-124: ``request_percentage``).

A client under a request quota may keep the broker busy for at most that
percentage of one request thread's time, measured over the client-quota
window (``quota.window.num`` samples of ``quota.window.size.seconds``), as
Kafka's ``ClientRequestQuotaManager`` measures request handler and network
thread time. A raftlog broker serves every request on one event loop, so
100 is the whole loop; the time that counts is the loop time the request's
handler runs (`raftlog.net.request_time`), not the time it waits for
followers or for records to arrive.

- **Charged:** each request's loop time, in percent-seconds
  (nanoseconds x 100 / 10^9), to the client's sensor, which the same
  entities resolve as the byte-rate quotas (`ClientQuotaManager`).
- **Throttled:** once the client's rate is over its quota, each answer
  carries the throttle time Kafka's ``QuotaUtils.throttleTime`` gives,
  capped at one quota window (Kafka's request-quota cap), the connection
  reads nothing more for that long (KIP-219), and a client of a request
  version that does not back off by itself (before KIP-219, or an API
  Kafka's clients never throttle themselves for) gets its answer only
  then. Produce and Fetch give the larger of this and their byte-rate
  throttle; an acks=0 produce is not charged, as in Kafka.
- **Exempt:** requests only brokers and controllers send (Kafka's
  cluster-action APIs: WriteTxnMarkers, Envelope, and a follower's Fetch;
  on a controller listener also the Raft requests, AlterPartition and the
  brokers' registrations and heartbeats), and the SASL exchange, which
  precedes the client's identity.

A controller enforces request quotas too, on the requests sent to it
directly (an admin client with ``--bootstrap-controller``), with its own
sensors and the quotas of its committed metadata image.

While no user or client-id entity sets ``request_percentage``, `enabled`
is False and the server does not time requests at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from data_plane.broker.client_quotas import ClientQuotaManager

if TYPE_CHECKING:
    from raftlog.net.server import RequestContext

__all__ = (
    "CLIENT_THROTTLES_FROM",
    "CONTROLLER_EXEMPT_API_KEYS",
    "EXEMPT_API_KEYS",
    "NANOS_TO_PERCENT",
    "RequestQuota",
)

#: Kafka's ``nanosToPercentage``: a second of thread time is 100 percent.
NANOS_TO_PERCENT: Final = 100.0 / 1e9

#: APIs whose time no client pays for: requests only nodes send, and the
#: SASL exchange (SaslHandshake, SaslAuthenticate).
EXEMPT_API_KEYS: Final = frozenset({
    4, 5, 6, 7,  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown
    17, 36,  # SaslHandshake, SaslAuthenticate
    27,  # WriteTxnMarkers
    58,  # Envelope
})

#: On a controller listener: what nodes send it (the KRaft quorum's Fetch,
#: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot; AlterPartition,
#: BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
#: ControllerRegistration, AssignReplicasToDirs; a broker's Envelope), and
#: the SASL exchange.
CONTROLLER_EXEMPT_API_KEYS: Final = frozenset({
    1, 52, 53, 54, 59, 56, 62, 63, 67, 70, 73, 58, 17, 36,
})

#: API key -> the first version whose clients back off by themselves for
#: the throttle time in an answer (KIP-219, Kafka's
#: ``AbstractResponse.shouldClientThrottle``, whose default is no: an API
#: not listed never does, and its answer is held for the throttle time).
CLIENT_THROTTLES_FROM: Final[Mapping[int, int]] = {
    0: 6,  # Produce
    1: 8,  # Fetch
    2: 3,  # ListOffsets
    3: 6,  # Metadata
    8: 4,  # OffsetCommit
    9: 4,  # OffsetFetch
    10: 2,  # FindCoordinator
    11: 3,  # JoinGroup
    12: 2,  # Heartbeat
    13: 2,  # LeaveGroup
    14: 2,  # SyncGroup
    15: 2,  # DescribeGroups
    16: 2,  # ListGroups
    18: 2,  # ApiVersions
    19: 3,  # CreateTopics
    20: 2,  # DeleteTopics
    21: 1,  # DeleteRecords
    22: 1,  # InitProducerId
    24: 1,  # AddPartitionsToTxn
    25: 1,  # AddOffsetsToTxn
    26: 1,  # EndTxn
    28: 1,  # TxnOffsetCommit
    29: 1,  # DescribeAcls
    30: 1,  # CreateAcls
    31: 1,  # DeleteAcls
    32: 2,  # DescribeConfigs
    33: 1,  # AlterConfigs
    34: 1,  # AlterReplicaLogDirs
    35: 1,  # DescribeLogDirs
    37: 1,  # CreatePartitions
    38: 1,  # CreateDelegationToken
    39: 1,  # RenewDelegationToken
    40: 1,  # ExpireDelegationToken
    41: 1,  # DescribeDelegationToken
    42: 1,  # DeleteGroups
    # Every version:
    43: 0,  # ElectLeaders
    44: 0,  # IncrementalAlterConfigs
    45: 0,  # AlterPartitionReassignments
    46: 0,  # ListPartitionReassignments
    47: 0,  # OffsetDelete
    61: 0,  # DescribeProducers
    62: 0,  # BrokerRegistration
    63: 0,  # BrokerHeartbeat
    64: 0,  # UnregisterBroker
    70: 0,  # ControllerRegistration
    71: 0,  # GetTelemetrySubscriptions
    73: 0,  # AssignReplicasToDirs
    74: 0,  # ListConfigResources (ListClientMetricsResources)
    75: 0,  # DescribeTopicPartitions
    77: 0,  # ShareGroupDescribe
    80: 0,  # AddRaftVoter
    81: 0,  # RemoveRaftVoter
    82: 0,  # UpdateRaftVoter
}


class RequestQuota:
    """The broker's request quotas, as its listeners ask them
    (`raftlog.net.request_time.RequestTimeQuota`)."""

    __slots__ = ("_exempt", "_manager", "_now_ms", "_refresh")

    def __init__(self, manager: ClientQuotaManager, now_ms: Callable[[], int], *,
                 exempt: frozenset[int] = EXEMPT_API_KEYS,
                 refresh: Callable[[], None] | None = None) -> None:
        """``refresh``: brings ``manager`` up to date (its quotas), before
        each request: a controller's quotas are those of its committed
        image, read when asked (a broker's manager is updated as its
        images arrive)."""
        self._manager = manager
        self._now_ms = now_ms
        self._exempt = exempt
        self._refresh = refresh

    @property
    def enabled(self) -> bool:
        if self._refresh is not None:
            self._refresh()
        return self._manager.enabled

    def record(self, context: RequestContext, elapsed_ns: int) -> int:
        if context.api_key in self._exempt or not self._manager.enabled:
            return 0
        throttle_ms = self._manager.record_and_get_throttle_ms(
            context.client_id or "", elapsed_ns * NANOS_TO_PERCENT, self._now_ms(),
            user=context.user)
        return min(throttle_ms, self._manager.window.size_ms)

    def client_throttles(self, api_key: int, api_version: int) -> bool:
        first = CLIENT_THROTTLES_FROM.get(api_key)
        return first is not None and api_version >= first

    def charge(self, context: RequestContext) -> int:
        """For a handler that puts the throttle time into its own answer
        (Produce, Fetch): charge the request's loop time so far, and mark it
        charged so the server does not charge it again; the throttle time
        in ms (0 while request quotas are off)."""
        clock = context.clock
        if clock is None:
            return 0
        clock.charged = True
        return self.record(context, clock.elapsed_ns())

    @staticmethod
    def exempt(context: RequestContext) -> None:
        """Charge nothing for this request (a follower's Fetch)."""
        if context.clock is not None:
            context.clock.charged = True
