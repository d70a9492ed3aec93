"""Transaction verification on the partition leader (KIP-890 part 1; Kafka's
``AddPartitionsToTxnManager``).

A transactional produce whose producer has no transaction ongoing on a
partition would start one there. Before appending it, the leader asks the
transaction coordinator whether the partition is in the producer's
ongoing transaction (AddPartitionsToTxn v4, ``verify_only``; answered in
process when this broker is the coordinator). Without the check, a produce
delayed past its transaction's abort (the client timed it out and moved on)
would open a transaction nobody ends: a hanging transaction, which holds the
last stable offset, and so every read_committed consumer and the log
cleaner, back for good.

A partition that is not in the transaction gets INVALID_TXN_STATE and is not
appended. When the coordinator cannot answer (not loaded, moving, busy
completing the transaction, unreachable) the partition gets
NOT_ENOUGH_REPLICAS, which producers retry, as Kafka (3.8+) answers.

A guard (`ReplicaTxnState.start_verification`) closes the race with the
marker: if a batch or marker of the producer reaches the log while the
question is out, the answer no longer counts and the batch is refused.

``transaction.partition.verification.enable=false`` turns the check off, as
in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.add_partitions_to_txn.v4 import request as aptt_req

from data_plane.api.build import build
from data_plane.broker.broker_clients import BrokerClients
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.replication.types import AppendResult, TopicPartition
from data_plane.txn.txn_log import TRANSACTION_STATE_TOPIC
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode
from raftlog.records import RecordError, parse_header

if TYPE_CHECKING:
    from data_plane.broker.replica_manager import ProduceOutcome, ReplicaManager
    from data_plane.broker.txn_runtime import TxnCoordinatorRuntime

__all__ = ("TxnVerifier",)

log = logging.getLogger(__name__)

VERIFY_REQUEST_TIMEOUT_MS = 30_000
#: Kafka's switch (default true; static or dynamic, cluster-wide or per
#: broker). Off, a late batch can open a transaction nobody ends again.
VERIFICATION_ENABLE = "transaction.partition.verification.enable"
#: Coordinator answers that mean "ask again later" (moving, loading, busy
#: completing the transaction, unreachable): the produce gets
#: NOT_ENOUGH_REPLICAS, which producers retry without a metadata refresh
#: (Kafka 3.8+'s mapping). PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH,
#: the produce path's fencing error; anything else is passed on.
_RETRY_LATER = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.network_exception,
})


class TxnVerifier:
    """Asks transaction coordinators about the first batch of a transaction
    on a partition (see the module docstring)."""

    def __init__(self, metadata: BrokerMetadata, replicas: ReplicaManager,
                 runtime: Callable[[], TxnCoordinatorRuntime], *, listener_name: str,
                 security: ConnectionSecurity = PLAINTEXT_SECURITY) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self._runtime = runtime
        self.listener_name = listener_name
        self._clients = BrokerClients(metadata, listener_name, client_id="txn-verification",
                                      request_timeout_ms=VERIFY_REQUEST_TIMEOUT_MS, security=security)

    async def close(self) -> None:
        await self._clients.close()

    async def verify(
        self, transactional_id: str, entries: Mapping[TopicPartition, bytes]
    ) -> dict[TopicPartition, ProduceOutcome]:
        """The partitions of a produce that must not be appended, with their
        outcome; the caller appends the others at once (no await between)."""
        from data_plane.broker.replica_manager import ProduceOutcome

        if self.replicas.broker_config.get(VERIFICATION_ENABLE, "true") != "true":
            return {}
        waiting: dict[TopicPartition, tuple[Any, int, object]] = {}
        producer: tuple[int, int] | None = None
        for key, data in entries.items():
            hosted = self.replicas.get(key)
            if hosted is None or not hosted.partition.is_leader:
                continue  # the append answers NOT_LEADER_OR_FOLLOWER
            try:
                header = parse_header(data)
            except RecordError:
                continue  # the append answers CORRUPT_MESSAGE
            if not header.is_transactional or header.is_control or header.producer_id < 0:
                continue
            txn = hosted.partition.txn
            if not txn.needs_verification(header.producer_id):
                continue
            producer = (header.producer_id, header.producer_epoch)
            waiting[key] = (txn, header.producer_id, txn.start_verification(header.producer_id))
        if not waiting or producer is None:
            return {}
        answers = await self._ask(transactional_id, producer[0], producer[1], list(waiting))
        refused: dict[TopicPartition, ProduceOutcome] = {}
        for key, (txn, producer_id, guard) in waiting.items():
            error = answers.get(key, ErrorCode.unknown_server_error)
            if error == ErrorCode.none and not txn.verification_holds(producer_id, guard):
                error = ErrorCode.invalid_txn_state  # a marker overtook the question
            if error == ErrorCode.none:
                continue
            txn.end_verification(producer_id, guard)
            if error in _RETRY_LATER:
                produce_error = ErrorCode.not_enough_replicas
                message = ("Unable to verify the partition has been added to the "
                           f"transaction. Underlying error: {error.name}")
            elif error == ErrorCode.invalid_txn_state:
                produce_error = error
                message = "Partition was not added to the transaction"
            else:
                produce_error = (ErrorCode.invalid_producer_epoch
                                 if error == ErrorCode.producer_fenced else error)
                message = f"transaction verification failed: {error.name}"
            refused[key] = ProduceOutcome(
                produce_error, AppendResult(produce_error, error_message=message))
        return refused

    async def _ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        runtime = self._runtime()
        image = self.metadata.image
        topic = image.topic_by_name(TRANSACTION_STATE_TOPIC)
        reg = None if topic is None else topic.partitions.get(
            runtime.partition_for(transactional_id))
        if reg is None or reg.leader < 0:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if reg.leader == self.metadata.broker_id:
            return runtime.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions)
        client = self._clients.get(reg.leader)
        if client is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        by_topic: dict[str, list[int]] = {}
        for name, index in partitions:
            by_topic.setdefault(name, []).append(index)
        request = build(aptt_req.AddPartitionsToTxnRequest, {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]})
        try:
            response: Any = await client.send(request)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("transaction verification with broker %d failed: %r", reg.leader, e)
            await self._clients.drop(reg.leader)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if int(response.error_code) != 0:
            return dict.fromkeys(partitions, ErrorCode(int(response.error_code)))
        out: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic_result in result.topic_results:
                for part in topic_result.results_by_partition:
                    out[(str(topic_result.name), int(part.partition_index))] = ErrorCode(
                        int(part.partition_error_code))
        return out
