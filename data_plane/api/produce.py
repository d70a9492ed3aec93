"""Produce (v3-10): acks 0, 1 and all; the replica manager appends and, for
acks=all, waits in the produce purgatory. Per-partition errors are the
core's (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
MESSAGE_TOO_LARGE, CORRUPT_MESSAGE, INVALID_RECORD, REQUEST_TIMED_OUT...).
acks=0 gets no response at all, as in Kafka. The internal topics refuse
clients' records (INVALID_TOPIC_EXCEPTION).

From v10 (KIP-951) a NOT_LEADER_OR_FOLLOWER partition carries the leader
and leader epoch the broker's metadata names (CurrentLeader), and the answer
carries that leader's address on the request's listener (NodeEndpoints), so
a client can send its retry there without a metadata round trip. Kafka
hints on that error only, and so does this handler.

Transactional produce (a transactional id) appends like any idempotent
produce; the partition's producer state fences older epochs
(INVALID_PRODUCER_EPOCH) and tracks the open transaction for the LSO. The
first batch of a transaction on a partition is verified with the
transaction coordinator first (KIP-890, `data_plane.broker.txn_verification`):
a partition not in the producer's ongoing transaction gets INVALID_TXN_STATE.

ACLs (with an authorizer, `data_plane.api.authorization`), as Kafka's
KafkaApis.handleProduceRequest: a request carrying transactional batches (the
first batch of some partition has the transactional bit) needs WRITE on its
TRANSACTIONAL_ID, else every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended. Then each
topic needs WRITE: an unauthorized topic's partitions get
TOPIC_AUTHORIZATION_FAILED (before any check of whether it exists, so the
answer does not tell), the others proceed. Internal topics get no bypass.

Client quotas (``producer_byte_rate``, `data_plane.broker.client_quotas`):
the request's bytes count against the client's rate as it arrives; a client
over its bound has its connection muted at once, gets the throttle time in
the answer, and stays muted for that long after it (KIP-219). Kafka answers Produce v6+ at once (the
client backs off itself) and holds older versions' answer for the throttle
time; an acks=0 producer only gets the mute.
"""

from __future__ import annotations

from typing import Any, Final

from data_plane.api.common import NO_THROTTLE_MS, BrokerApiContext
from data_plane.api.encoders import NodeEndpoint, ProducePartitionData, encode_produce_response
from data_plane.broker.client_quotas import ClientQuotaManager
from data_plane.broker.replica_manager import ProduceOutcome
from data_plane.broker.request_quotas import RequestQuota
from data_plane.replication.types import AppendResult, TopicPartition
from metadata_quorum.acls import AclOperation, ResourceType
from metadata_quorum.topic_names import INTERNAL_TOPICS
from raftlog.net import NO_RESPONSE, EncodedBody, NoResponse, RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("ADMIN_CLIENT_ID", "MAX_PRODUCE_TIMEOUT_MS", "handle_produce")

#: Kafka's ``AdminUtils.ADMIN_CLIENT_ID``: the one client id that may
#: produce to an internal topic (repair tools); anyone else gets
#: INVALID_TOPIC_EXCEPTION, as from Kafka's ReplicaManager.
ADMIN_CLIENT_ID = "__admin_client"

# Clamp for a hostile request.timeout.ms (Kafka bounds it by the int32 only;
# a week-long wait would pin memory for nothing).
MAX_PRODUCE_TIMEOUT_MS = 300_000
# KIP-219: from this version the client honours throttle_time_ms itself.
_CLIENT_THROTTLES_FROM_VERSION = 6
# KIP-951: leader hints from this version.
_LEADER_HINTS_FROM_VERSION = 10


async def handle_produce(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    acks = int(request.acks)
    # Topics the principal may not WRITE to (None: no authorizer, all may).
    denied: frozenset[str] | None = None
    if api.authorization is not None:
        if not _may_write_transaction(api, ctx, request):
            # Checked before the quota is counted, as Kafka answers it first.
            return _refuse_all(ctx, request, acks)
        denied = _denied_topics(api, ctx, request)
    throttle_ms = 0
    quotas = api.replicas.client_quotas.produce
    if quotas.enabled:  # the only quota work while no producer_byte_rate is set
        # Counted before the first await, and the connection muted at once:
        # the requests a client pipelined behind this one wait (Kafka reads
        # a connection's next request only once this one is answered, so a
        # throttled client cannot have more in the broker's hands).
        throttle_ms = _record_produce(quotas, api, ctx, request)
        if throttle_ms and ctx.mute is not None:
            ctx.mute(throttle_ms)
    timeout_ms = min(max(int(request.timeout.total_seconds() * 1000), 0), MAX_PRODUCE_TIMEOUT_MS)
    entries: dict[TopicPartition, bytes] = {}
    early: dict[TopicPartition, ProduceOutcome] = {}
    order: list[tuple[str, list[int]]] = []
    for topic in request.topic_data:
        indexes: list[int] = []
        for part in topic.partition_data:
            key = (str(topic.name), int(part.index))
            indexes.append(key[1])
            if denied is not None and key[0] in denied:
                early[key] = _TOPIC_DENIED
            elif key in entries or key in early:
                early[key] = ProduceOutcome(ErrorCode.invalid_request,
                                            AppendResult(ErrorCode.invalid_request))
                entries.pop(key, None)
            elif key[1] < 0:
                early[key] = ProduceOutcome(ErrorCode.unknown_topic_or_partition,
                                            AppendResult(ErrorCode.unknown_topic_or_partition))
            elif key[0] in INTERNAL_TOPICS and ctx.client_id != ADMIN_CLIENT_ID:
                # The coordinators' own records only: one a client wrote
                # would be replayed by the group or transaction coordinator.
                early[key] = ProduceOutcome(ErrorCode.invalid_topic_exception, AppendResult(
                    ErrorCode.invalid_topic_exception,
                    error_message=f"Cannot append to internal topic {key[0]}"))
            else:
                entries[key] = bytes(part.records or b"")
        order.append((str(topic.name), indexes))
    if request.transactional_id is not None and entries:
        # KIP-890: a transaction's first batch on a partition is checked with
        # its coordinator; the rest are appended right after, with no await
        # in between (the verification guards hold until the append).
        refused = await api.coordinators.verifier.verify(str(request.transactional_id), entries)
        for key, outcome in refused.items():
            del entries[key]
            early[key] = outcome
    outcomes = await api.replicas.append_records(entries, acks=acks, timeout_ms=timeout_ms)
    outcomes.update(early)
    if ctx.clock is not None:
        # KIP-124: the answer carries the larger of the two throttle times;
        # acks=0 is not charged (Kafka's rule: there is no answer to carry it).
        if acks == 0:
            RequestQuota.exempt(ctx)
        else:
            throttle_ms = max(throttle_ms, api.replicas.request_quota.charge(ctx))
    if throttle_ms:
        return _throttled(api, ctx, acks, order, outcomes, throttle_ms)
    if acks == 0:
        return NO_RESPONSE
    return EncodedBody(_encode(api, ctx, order, outcomes, NO_THROTTLE_MS))


_TOPIC_DENIED: Final = ProduceOutcome(ErrorCode.topic_authorization_failed,
                                      AppendResult(ErrorCode.topic_authorization_failed))
# Attribute bit 4 of a v2 batch (Kafka's RecordBatch.isTransactional); the
# attributes are the int16 at bytes 21-22, the magic the byte at 16.
_MAGIC_AT: Final = 16
_ATTRIBUTES_LOW_BYTE_AT: Final = 22
_TRANSACTIONAL_BIT: Final = 0x10


def _may_write_transaction(api: BrokerApiContext, ctx: RequestContext, request: Any) -> bool:
    """Kafka's check of a produce with transactional batches: WRITE on its
    transactional id (none named: refused)."""
    if not _has_transactional_batches(request):
        return True
    txn_id = request.transactional_id
    return txn_id is not None and api.authorize(ctx, AclOperation.WRITE,
                                                ResourceType.TRANSACTIONAL_ID, str(txn_id))


def _has_transactional_batches(request: Any) -> bool:
    """Whether some partition's first batch is transactional (Kafka's
    RequestUtils.hasTransactionalRecords looks at first batches only)."""
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = part.records
            if (records and len(records) > _ATTRIBUTES_LOW_BYTE_AT
                    and records[_MAGIC_AT] == 2
                    and records[_ATTRIBUTES_LOW_BYTE_AT] & _TRANSACTIONAL_BIT):
                return True
    return False


def _denied_topics(api: BrokerApiContext, ctx: RequestContext, request: Any) -> frozenset[str]:
    """The request's topics the principal may not WRITE to (one check per topic)."""
    names = {str(topic.name) for topic in request.topic_data}
    return frozenset(name for name in names
                     if not api.authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, name))


def _refuse_all(ctx: RequestContext, request: Any, acks: int) -> Any:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition (Kafka's
    error response to a Produce); acks=0 gets no answer."""
    if acks == 0:
        # Kafka closes the connection here; this server has no way to, and
        # answers acks=0 errors with silence as everywhere else.
        return NO_RESPONSE
    error = ErrorCode.transactional_id_authorization_failed
    txn_id = request.transactional_id
    message = ("transactional batches need a transactional id" if txn_id is None
               else f"not authorized to WRITE transactional id {txn_id}")
    return EncodedBody(encode_produce_response(ctx.api_version, [
        (str(topic.name), [ProducePartitionData(index=int(part.index), error_code=error,
                                                base_offset=-1, log_start_offset=-1,
                                                error_message=message)
                           for part in topic.partition_data])
        for topic in request.topic_data
    ], NO_THROTTLE_MS))


def _record_produce(
    quotas: ClientQuotaManager, api: BrokerApiContext, ctx: RequestContext, request: Any,
) -> int:
    """Count the request against the client's producer_byte_rate; the
    throttle time (0: within its bound)."""
    # Kafka counts the whole request's size; the handler does not see the
    # frame, so this counts the sum of its record sets (every partition's,
    # refused or not), which is all of it but the headers and field framing.
    size = sum(len(part.records) for topic in request.topic_data
               for part in topic.partition_data if part.records)
    return quotas.record_and_get_throttle_ms(ctx.client_id or "", size, api.replicas.now_ms(),
                                             user=ctx.user)


def _throttled(
    api: BrokerApiContext, ctx: RequestContext, acks: int, order: list[tuple[str, list[int]]],
    outcomes: dict[TopicPartition, ProduceOutcome], throttle_ms: int,
) -> Any:
    if acks == 0:
        return NoResponse(throttle_ms)
    return EncodedBody(_encode(api, ctx, order, outcomes, throttle_ms), throttle_ms=throttle_ms,
                       delay_response=ctx.api_version < _CLIENT_THROTTLES_FROM_VERSION)


def _encode(
    api: BrokerApiContext, ctx: RequestContext, order: list[tuple[str, list[int]]],
    outcomes: dict[TopicPartition, ProduceOutcome], throttle_ms: int,
) -> bytes:
    """The answer, hand-encoded (`data_plane.api.encoders`): it is on every
    produce's critical path. Leader hints only from v10 and only for
    NOT_LEADER_OR_FOLLOWER, so a healthy produce looks nothing up."""
    hints = ctx.api_version >= _LEADER_HINTS_FROM_VERSION
    endpoints: dict[int, NodeEndpoint] = {}
    topics = []
    for name, indexes in order:
        partitions = []
        for index in indexes:
            outcome = outcomes[(name, index)]
            leader = None
            if hints and outcome.error == ErrorCode.not_leader_or_follower:
                leader = api.leader_hint((name, index), ctx.listener_name, endpoints)
            partitions.append(_partition(index, outcome, leader))
        topics.append((name, partitions))
    return encode_produce_response(ctx.api_version, topics, throttle_ms,
                                   tuple(endpoints.values()))


def _partition(index: int, outcome: ProduceOutcome,
               current_leader: tuple[int, int] | None) -> ProducePartitionData:
    append = outcome.append
    ok = outcome.error == ErrorCode.none
    return ProducePartitionData(
        index=index,
        error_code=outcome.error,  # an IntEnum: no `.value` lookup per partition
        base_offset=append.base_offset if ok else -1,
        log_append_time_ms=append.log_append_time_ms if ok else -1,
        log_start_offset=append.log_start_offset if ok else -1,
        error_message=None if ok else append.error_message,
        current_leader=current_leader,
    )
