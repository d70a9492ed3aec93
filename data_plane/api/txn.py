"""Transaction APIs (KIP-98): AddPartitionsToTxn (v0-4), AddOffsetsToTxn
(v0-3), EndTxn (v0-3), TxnOffsetCommit (v0-3) and WriteTxnMarkers (v1).

The first three run on the broker's `TxnCoordinatorRuntime` (the
transactional id's ``__transaction_state`` partition must be led here, else
NOT_COORDINATOR and the client looks the coordinator up again).
TxnOffsetCommit runs on the group coordinator: the offsets stay pending in
the group's shard until the transaction's marker reaches its
``__consumer_offsets`` partition.

WriteTxnMarkers is broker-to-broker (the marker channel of a transaction
coordinator): each marker is appended as a control batch by the partition
leader and answered once committed (acks=all). A marker on an offsets
partition then completes the producer's pending offsets in the group shard.

Clients before version 2 of these APIs do not know PRODUCER_FENCED; they get
INVALID_PRODUCER_EPOCH, as Kafka answers.

With an authorizer, as Kafka's ``KafkaApis``:

- AddPartitionsToTxn from a client (v0-3): WRITE on the transactional id
  (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition), then
  WRITE on each topic; an internal topic is never authorized. One refused or
  unknown partition fails the whole transaction: TOPIC_AUTHORIZATION_FAILED
  or UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the
  rest. The broker-to-broker form (v4+) needs CLUSTER_ACTION on the cluster,
  else the top-level CLUSTER_AUTHORIZATION_FAILED.
- AddOffsetsToTxn: WRITE on the transactional id, then READ on the group.
  EndTxn: WRITE on the transactional id.
- TxnOffsetCommit: WRITE on the transactional id, READ on the group (each
  refused with its error on every partition), then READ on each topic
  (TOPIC_AUTHORIZATION_FAILED for its partitions; the others are committed).
- WriteTxnMarkers: CLUSTER_ACTION on the cluster, else every partition is
  CLUSTER_AUTHORIZATION_FAILED.

Brokers send WriteTxnMarkers and AddPartitionsToTxn v4 to each other as the
inter-broker principal, which therefore needs CLUSTER_ACTION (Kafka makes it
a super user).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from typing import Any

from data_plane.api.authorization import RequestAcls
from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from data_plane.api.groups import split_by_existence, split_by_topic
from data_plane.broker.group_runtime import NotCoordinatorError
from data_plane.groups import wire
from data_plane.groups.model import OffsetCommitResponse, PartitionResult
from data_plane.groups.partitioning import OFFSETS_TOPIC, partition_for_group
from data_plane.txn.coordinator import TxnResponse
from data_plane.txn.markers import EndTxnMarker
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_quorum.topic_names import INTERNAL_TOPICS
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = (
    "handle_add_offsets_to_txn",
    "handle_add_partitions_to_txn",
    "handle_end_txn",
    "handle_txn_offset_commit",
    "handle_write_txn_markers",
    "legacy_fenced_error",
)

#: How long a marker append waits for the ISR (Kafka uses the request timeout).
MARKER_COMMIT_TIMEOUT_MS = 30_000

_WRITE, _READ = AclOperation.WRITE, AclOperation.READ
_TXN_ID, _GROUP = ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP
_TXN_ID_DENIED = ErrorCode.transactional_id_authorization_failed
_GROUP_DENIED = ErrorCode.group_authorization_failed
_CLUSTER_DENIED = ErrorCode.cluster_authorization_failed


def legacy_fenced_error(error: ErrorCode, api_version: int, first_version: int = 2) -> ErrorCode:
    """PRODUCER_FENCED as the client's version knows it (older: INVALID_PRODUCER_EPOCH)."""
    if error == ErrorCode.producer_fenced and api_version < first_version:
        return ErrorCode.invalid_producer_epoch
    return error


async def handle_add_partitions_to_txn(api: BrokerApiContext, ctx: RequestContext,
                                       request: Any) -> Any:
    if ctx.api_version >= 4:
        if api.authorization is not None and not api.authorize(
                ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return build(response_class(request), {
                "throttle_time": NO_THROTTLE, "error_code": _CLUSTER_DENIED,
                "results_by_transaction": []})
        return await _add_partitions_to_txn_batched(api, request)
    tid = str(request.v3_and_below_transactional_id)
    pid = int(request.v3_and_below_producer_id)
    epoch = int(request.v3_and_below_producer_epoch)
    wanted = [(str(t.name), int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = [tp for tp in wanted if not _exists(api, tp)]
    acls = RequestAcls.of(api, ctx)
    refused = _refused_partitions(acls, tid, wanted, unknown) if acls is not None else None
    if refused is not None:
        errors = refused
    elif unknown:
        # Kafka: the unknown ones fail, the others are not attempted.
        errors = {tp: (ErrorCode.unknown_topic_or_partition if tp in unknown
                       else ErrorCode.operation_not_attempted) for tp in wanted}
    else:
        runtime = api.coordinators.transactions_or_start()
        response = await runtime.add_partitions(tid, pid, epoch, wanted)
        error = legacy_fenced_error(response.error, ctx.api_version)
        errors = dict.fromkeys(wanted, error)
    by_topic: dict[str, list[dict[str, object]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": error})
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE,
        "results_by_topic_v3_and_below": [{"name": t, "results_by_partition": ps}
                                          for t, ps in by_topic.items()],
    })


async def _add_partitions_to_txn_batched(api: BrokerApiContext, request: Any) -> Any:
    """Version 4+, the broker-to-coordinator form (KIP-890): many
    transactions per request, each either added (as v3) or, with
    ``verify_only``, only checked (`TxnCoordinatorRuntime.verify_partitions`:
    a partition leader asking before it appends a transaction's first batch)."""
    runtime = api.coordinators.transactions_or_start()
    results = []
    for txn in request.transactions:
        tid, pid, epoch = str(txn.transactional_id), int(txn.producer_id), int(txn.producer_epoch)
        wanted = [(str(t.name), int(p)) for t in txn.topics for p in t.partitions]
        errors: dict[tuple[str, int], ErrorCode]
        if txn.verify_only:
            errors = runtime.verify_partitions(tid, pid, epoch, wanted)
        elif any(not _exists(api, tp) for tp in wanted):
            errors = {tp: ErrorCode.operation_not_attempted if _exists(api, tp)
                      else ErrorCode.unknown_topic_or_partition for tp in wanted}
        else:
            response = await runtime.add_partitions(tid, pid, epoch, wanted)
            errors = dict.fromkeys(wanted, response.error)
        by_topic: dict[str, list[dict[str, object]]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "partition_error_code": error})
        results.append({"transactional_id": tid, "topic_results": [
            {"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]})
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none,
        "results_by_transaction": results,
    })


def _refused_partitions(acls: RequestAcls, transactional_id: str, wanted: list[tuple[str, int]],
                        unknown: list[tuple[str, int]]
                        ) -> dict[tuple[str, int], ErrorCode] | None:
    """AddPartitionsToTxn v0-3's answer when the ACLs refuse any of it, else None."""
    if not acls.allows(_WRITE, _TXN_ID, transactional_id):
        return dict.fromkeys(wanted, _TXN_ID_DENIED)
    # Kafka never authorizes an internal topic here (transactional offsets go
    # through AddOffsetsToTxn).
    allowed = acls.allowed(_WRITE, ResourceType.TOPIC,
                           (t for t, _ in wanted if t not in INTERNAL_TOPICS))
    if all(t in allowed for t, _ in wanted):
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp[0] not in allowed
            else ErrorCode.unknown_topic_or_partition if tp in unknown
            else ErrorCode.operation_not_attempted for tp in wanted}


def _exists(api: BrokerApiContext, tp: tuple[str, int]) -> bool:
    topic = api.image.topic_by_name(tp[0])
    return topic is not None and tp[1] in topic.partitions


async def handle_add_offsets_to_txn(api: BrokerApiContext, ctx: RequestContext,
                                    request: Any) -> Any:
    if api.authorization is not None:
        if not api.authorize(ctx, _WRITE, _TXN_ID, str(request.transactional_id)):
            return _error_only(request, _TXN_ID_DENIED)
        if not api.authorize(ctx, _READ, _GROUP, str(request.group_id)):
            return _error_only(request, _GROUP_DENIED)
    coordinators = api.coordinators
    # The group's offsets partition, hashed over the offsets topic's own
    # partition count (which may differ from __transaction_state's).
    offsets = (OFFSETS_TOPIC, partition_for_group(str(request.group_id),
                                                  coordinators.offsets_topic_partitions))
    response = await coordinators.transactions_or_start().add_partitions(
        str(request.transactional_id), int(request.producer_id), int(request.producer_epoch),
        [offsets])
    return _error_only(request, legacy_fenced_error(response.error, ctx.api_version))


async def handle_end_txn(api: BrokerApiContext, ctx: RequestContext, request: Any) -> Any:
    if api.authorization is not None and not api.authorize(
            ctx, _WRITE, _TXN_ID, str(request.transactional_id)):
        return _error_only(request, _TXN_ID_DENIED)
    runtime = api.coordinators.transactions_or_start()
    response: TxnResponse = await runtime.end_txn(
        str(request.transactional_id), int(request.producer_id), int(request.producer_epoch),
        bool(request.committed))
    return _error_only(request, legacy_fenced_error(response.error, ctx.api_version))


def _error_only(request: Any, error: ErrorCode) -> Any:
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "error_code": error})


async def handle_txn_offset_commit(api: BrokerApiContext, ctx: RequestContext,
                                   request: Any) -> Any:
    core = wire.txn_offset_commit_from_kio(request)
    refused: tuple[PartitionResult, ...] = ()
    acls = RequestAcls.of(api, ctx)
    if acls is not None:
        denied = (_TXN_ID_DENIED if not acls.allows(_WRITE, _TXN_ID, core.transactional_id)
                  else _GROUP_DENIED if not acls.allows(_READ, _GROUP, core.group_id)
                  else None)
        if denied is not None:
            return wire.txn_offset_commit_to_kio(OffsetCommitResponse(tuple(
                PartitionResult(p.topic, p.partition, denied) for p in core.partitions)),
                ctx.api_version)
        allowed, refused = split_by_topic(acls, _READ, core.partitions)
        core = dataclasses.replace(core, partitions=allowed)
    known, unknown = split_by_existence(api, core.partitions)
    refused += unknown
    if not known:
        return wire.txn_offset_commit_to_kio(OffsetCommitResponse(refused), ctx.api_version)
    core = dataclasses.replace(core, partitions=known)
    runtime = api.coordinators.groups_or_start()
    try:
        response = await runtime.write(
            core.group_id, lambda shard, h, now: shard.handle_txn_offset_commit(h, core, now))
    except NotCoordinatorError as e:
        response = OffsetCommitResponse(tuple(
            PartitionResult(p.topic, p.partition, e.error) for p in core.partitions))
    assert isinstance(response, OffsetCommitResponse)
    response = OffsetCommitResponse(refused + tuple(
        PartitionResult(p.topic, p.partition, legacy_fenced_error(p.error, ctx.api_version))
        for p in response.partitions))
    return wire.txn_offset_commit_to_kio(response, ctx.api_version)


async def handle_write_txn_markers(api: BrokerApiContext, ctx: RequestContext,
                                   request: Any) -> Any:
    if api.authorization is not None and not api.authorize(
            ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        # Kafka's error response: the error on every partition of every marker.
        return build(response_class(request), {"markers": [
            {"producer_id": int(marker.producer_id), "topics": [
                {"name": str(topic.name), "partitions": [
                    {"partition_index": int(i), "error_code": _CLUSTER_DENIED}
                    for i in topic.partition_indexes]}
                for topic in marker.topics]}
            for marker in request.markers]})
    # Every marker is appended first (in request order), then all wait for
    # the high watermark together.
    waits: list[Awaitable[ErrorCode]] = []
    layout: list[tuple[int, list[tuple[str, list[int]]]]] = []
    for marker in request.markers:
        pid, epoch = int(marker.producer_id), int(marker.producer_epoch)
        end = EndTxnMarker(bool(marker.transaction_result), int(marker.coordinator_epoch))
        topics: list[tuple[str, list[int]]] = []
        for topic in marker.topics:
            indexes = [int(i) for i in topic.partition_indexes]
            topics.append((str(topic.name), indexes))
            waits.extend(_write_marker(api, (str(topic.name), i), pid, epoch, end)
                         for i in indexes)
        layout.append((pid, topics))
    errors = iter(await asyncio.gather(*waits))
    return build(response_class(request), {"markers": [
        {"producer_id": pid, "topics": [
            {"name": name, "partitions": [{"partition_index": i, "error_code": next(errors)}
                                          for i in indexes]}
            for name, indexes in topics]}
        for pid, topics in layout]})


async def _write_marker(api: BrokerApiContext, key: tuple[str, int], producer_id: int,
                        producer_epoch: int, marker: EndTxnMarker) -> ErrorCode:
    replicas = api.replicas
    hosted = replicas.get(key)
    if hosted is None:
        return replicas.missing_partition_error(key)
    result = hosted.partition.append_txn_marker(
        producer_id, producer_epoch, marker, timestamp_ms=replicas.clock.wall_ms())
    if result.error != ErrorCode.none:
        return result.error
    replicas.on_local_append(key)
    error = await replicas.wait_for_high_watermark(key, result.last_offset + 1,
                                                   result.leader_epoch, MARKER_COMMIT_TIMEOUT_MS)
    if error == ErrorCode.none and key[0] == OFFSETS_TOPIC:
        api.coordinators.groups_or_start().replay_txn_marker(key[1], producer_id, marker.commit)
    return error
