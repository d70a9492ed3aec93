"""Transaction admin APIs (KIP-664), what kafka-transactions.sh and admin
clients use to find and inspect transactions: DescribeProducers (v0),
DescribeTransactions (v0) and ListTransactions (v0-1).

- **DescribeProducers** is answered by each partition's leader from its
  producer state: every producer id it still remembers, with its epoch, last
  sequence and timestamp, coordinator epoch and, when a transaction is open
  on the partition, the offset it began at (what ``--find-hanging`` looks
  for).
- **DescribeTransactions** is answered by the transactional id's
  coordinator (NOT_COORDINATOR elsewhere, so the client looks it up again);
  an id the coordinator does not know, or one already expired (Dead), is
  TRANSACTIONAL_ID_NOT_FOUND.
- **ListTransactions** is answered by every broker for the coordinators it
  runs; admin clients ask every broker and merge. Filters: states (Kafka's
  names; unknown names come back in ``unknown_state_filters``), producer
  ids, and (v1, KIP-994) a minimum duration of the open transaction.

With an authorizer, as Kafka's ``KafkaApis``: DescribeProducers needs READ
on each topic (else TOPIC_AUTHORIZATION_FAILED on its partitions);
DescribeTransactions DESCRIBE on each transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and shows only the partitions of
topics the principal may DESCRIBE; ListTransactions lists only the
transactional ids the principal may DESCRIBE.
"""

from __future__ import annotations

import datetime
from typing import Any, Final

from data_plane.api.authorization import RequestAcls
from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from data_plane.txn.txn_metadata import TxnMetadata, TxnState
from metadata_quorum.acls import AclOperation, ResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("TXN_STATE_NAMES", "handle_describe_producers", "handle_describe_transactions",
           "handle_list_transactions")

#: Kafka's ``TransactionState.stateName`` of each state.
TXN_STATE_NAMES: Final[dict[TxnState, str]] = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME: Final = {name: state for state, name in TXN_STATE_NAMES.items()}
_DESCRIBE, _TOPIC = AclOperation.DESCRIBE, ResourceType.TOPIC
_TXN_ID = ResourceType.TRANSACTIONAL_ID


async def handle_describe_producers(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    acls = RequestAcls.of(api, ctx)
    readable = (None if acls is None else
                acls.allowed(AclOperation.READ, _TOPIC, (str(t.name) for t in request.topics)))
    topics = []
    for topic in request.topics:
        if readable is not None and str(topic.name) not in readable:
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": ErrorCode.topic_authorization_failed,
                 "active_producers": []} for index in topic.partition_indexes]})
            continue
        partitions = []
        for index in topic.partition_indexes:
            key = (str(topic.name), int(index))
            hosted = api.replicas.get(key)
            if hosted is None or not hosted.partition.is_leader:
                error = (api.replicas.missing_partition_error(key) if hosted is None
                         else ErrorCode.not_leader_or_follower)
                partitions.append({"partition_index": index, "error_code": error,
                                   "active_producers": []})
                continue
            producers = hosted.partition.txn.producers
            active = []
            for producer_id in sorted(producers.producer_ids):
                entry = producers.entry(producer_id)
                if entry is None:
                    continue
                first = entry.current_txn_first_offset
                active.append({
                    "producer_id": entry.producer_id,
                    "producer_epoch": entry.producer_epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp_ms,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": -1 if first is None else first,
                })
            partitions.append({"partition_index": index, "error_code": ErrorCode.none,
                               "active_producers": active})
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_class(request), {"throttle_time": NO_THROTTLE, "topics": topics})


async def handle_describe_transactions(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    runtime = api.coordinators.transactions_or_start()
    acls = RequestAcls.of(api, ctx)
    states = []
    for transactional_id in request.transactional_ids:
        tid = str(transactional_id)
        if acls is not None and not acls.allows(_DESCRIBE, _TXN_ID, tid):
            states.append(_undescribed(tid, ErrorCode.transactional_id_authorization_failed))
            continue
        found = runtime.describe(tid)
        if isinstance(found, ErrorCode) or found.state is TxnState.DEAD:
            error = found if isinstance(found, ErrorCode) else ErrorCode.transactional_id_not_found
            states.append(_undescribed(tid, error))
            continue
        states.append({
            "error_code": ErrorCode.none, "transactional_id": tid,
            "transaction_state": TXN_STATE_NAMES[found.state],
            "transaction_timeout": _ms(found.timeout_ms),
            "transaction_start_time": found.txn_start_ms,
            "producer_id": found.producer_id, "producer_epoch": found.producer_epoch,
            "topics": _topics(found, acls),
        })
    return build(response_class(request), {"throttle_time": NO_THROTTLE,
                                           "transaction_states": states})


async def handle_list_transactions(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    wanted_states = [str(s) for s in request.state_filters]
    unknown = [s for s in wanted_states if s not in _BY_NAME]
    states = {_BY_NAME[s] for s in wanted_states if s in _BY_NAME}
    producer_ids = {int(p) for p in request.producer_id_filters}
    min_duration_ms = int(getattr(request, "duration_filter", -1))
    runtime = api.coordinators.transactions_or_start()
    now_ms = runtime.now_ms()
    listed = []
    for m in runtime.all_transactions():
        if m.state is TxnState.DEAD:
            continue
        if wanted_states and m.state not in states:
            continue
        if producer_ids and m.producer_id not in producer_ids:
            continue
        if min_duration_ms >= 0 and (m.txn_start_ms < 0
                                     or now_ms - m.txn_start_ms <= min_duration_ms):
            continue
        listed.append({"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                       "transaction_state": TXN_STATE_NAMES[m.state]})
    acls = RequestAcls.of(api, ctx)
    if acls is not None:  # only the ids the principal may DESCRIBE
        visible = acls.allowed(_DESCRIBE, _TXN_ID, (str(t["transactional_id"]) for t in listed))
        listed = [t for t in listed if t["transactional_id"] in visible]
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": sorted(listed, key=lambda t: str(t["transactional_id"]))})


def _undescribed(tid: str, error: ErrorCode) -> dict[str, object]:
    return {"error_code": error, "transactional_id": tid, "transaction_state": "",
            "transaction_timeout": _ms(0), "transaction_start_time": -1, "producer_id": -1,
            "producer_epoch": -1, "topics": []}


def _topics(m: TxnMetadata, acls: RequestAcls | None) -> list[dict[str, object]]:
    """The transaction's partitions by topic; with ACLs only the topics the
    principal may DESCRIBE (Kafka hides the others)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(partition)
    if acls is not None:
        visible = acls.allowed(_DESCRIBE, _TOPIC, by_topic)
        by_topic = {t: ps for t, ps in by_topic.items() if t in visible}
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
