"""``raftlog transactions``: inspect and abort transactions, like
kafka-transactions.sh (KIP-664).

- ``list``: every transactional id, from every broker's coordinators
  (ListTransactions), with its coordinator, producer id and state;
- ``describe --transactional-id ID``: the coordinator's view of one
  transaction (DescribeTransactions, on the coordinator FindCoordinator
  names);
- ``describe-producers --topic T --partition P``: the producers a partition's
  leader remembers, and where an open transaction of theirs began
  (DescribeProducers);
- ``find-hanging (--broker-id ID | --topic T [--partition P])
  [--max-transaction-timeout MINUTES]``: transactions open on a partition
  for longer than the largest transaction timeout (15 minutes, Kafka's
  ``transaction.max.timeout.ms``) that their coordinator does not know to be
  open there: the ones only an abort can close;
- ``abort --topic T --partition P (--start-offset O | --producer-id ID
  --producer-epoch E --coordinator-epoch C)``: write an ABORT marker for
  that producer on that partition (WriteTxnMarkers, on the leader), which
  releases the partition's last stable offset.

Output is tab-separated, with kafka-transactions.sh's column names.
Every failure is one line on stderr, exit 2 (`CliError`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from kio.schema.describe_producers.v0 import request as dp_req
from kio.schema.describe_producers.v0 import response as dp_resp
from kio.schema.describe_transactions.v0 import request as dt_req
from kio.schema.find_coordinator.v4 import request as fc_req
from kio.schema.find_coordinator.v4 import response as fc_resp
from kio.schema.list_transactions.v1 import request as lt_req
from kio.schema.list_transactions.v1 import response as lt_resp
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1 import request as wm_req
from kio.schema.write_txn_markers.v1 import response as wm_resp
from kio.static.primitive import i8, i16, i32, i64

from raftlog.net import KafkaProtocolClient
from raftlog.net import kio_fixes as dt_resp
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode, TransportError

from .admin_cli import CliError, _Admin, _error_name, _metadata, _run_admin, add_command_config

__all__ = ("register",)

_TRANSACTION_KEY_TYPE = 1
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15


class _Brokers:
    """Clients for specific brokers (by id), from a Metadata answer (which
    names each broker's endpoint on the listener asked: ``security`` fits them
    all)."""

    def __init__(self, metadata: md_resp.MetadataResponse, timeout_ms: int,
                 security: ConnectionSecurity = PLAINTEXT_SECURITY) -> None:
        self.addresses = {int(b.node_id): (str(b.host), int(b.port)) for b in metadata.brokers}
        self.timeout_ms = timeout_ms
        self.security = security
        self._clients: dict[int, KafkaProtocolClient] = {}

    async def send(self, broker_id: int, request: Any, version: int) -> Any:
        address = self.addresses.get(broker_id)
        if address is None:
            raise CliError(f"broker {broker_id} is not in the cluster metadata")
        client = self._clients.get(broker_id)
        if client is None:
            client = KafkaProtocolClient(*address, client_id="raftlog-transactions",
                                         request_timeout_ms=self.timeout_ms,
                                         connect_timeout_ms=min(self.timeout_ms, 5000),
                                         security=self.security)
            self._clients[broker_id] = client
        try:
            return await client.send(request, version)
        except TransportError as exc:
            raise CliError(f"broker {broker_id} ({address[0]}:{address[1]}): {exc}") from None

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


def _leader_of(metadata: md_resp.MetadataResponse, topic: str, partition: int) -> int:
    for t in metadata.topics:
        if str(t.name) != topic:
            continue
        if t.error_code != ErrorCode.none:
            raise CliError(f"topic {topic}: {_error_name(t.error_code)}")
        for p in t.partitions:
            if int(p.partition_index) == partition:
                if int(p.leader_id) < 0:
                    raise CliError(f"{topic}-{partition} has no leader")
                return int(p.leader_id)
    raise CliError(f"no partition {topic}-{partition}")


async def _describe_producers(
    brokers: _Brokers, leader: int, topic: str, partition: int
) -> tuple[dp_resp.ProducerState, ...]:
    response: dp_resp.DescribeProducersResponse = await brokers.send(
        leader, dp_req.DescribeProducersRequest(topics=(dp_req.TopicRequest(
            name=TopicName(topic), partition_indexes=(i32(partition),)),)), 0)
    for t in response.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                raise CliError(f"cannot describe the producers of {topic}-{partition}: "
                               f"{_error_name(p.error_code)}")
            return p.active_producers
    raise CliError(f"no answer for {topic}-{partition}")


async def _list(brokers: _Brokers, producer_ids: Sequence[int] = ()) -> list[
        tuple[int, lt_resp.TransactionState]]:
    out: list[tuple[int, lt_resp.TransactionState]] = []
    for broker_id in sorted(brokers.addresses):
        response: lt_resp.ListTransactionsResponse = await brokers.send(
            broker_id, lt_req.ListTransactionsRequest(
                state_filters=(), producer_id_filters=tuple(ProducerId(p) for p in producer_ids)),
            1)
        if response.error_code != ErrorCode.none:
            raise CliError(f"broker {broker_id}: cannot list transactions: "
                           f"{_error_name(response.error_code)}")
        out.extend((broker_id, s) for s in response.transaction_states)
    return out


async def _describe(brokers: _Brokers, transactional_id: str) -> tuple[
        int, dt_resp.TransactionState]:
    any_broker = sorted(brokers.addresses)[0]
    found: fc_resp.FindCoordinatorResponse = await brokers.send(
        any_broker, fc_req.FindCoordinatorRequest(key_type=i8(_TRANSACTION_KEY_TYPE),
                                                  coordinator_keys=(transactional_id,)), 4)
    [coordinator] = found.coordinators
    if coordinator.error_code != ErrorCode.none:
        raise CliError(f"cannot find the coordinator of {transactional_id}: "
                       f"{_error_name(coordinator.error_code)}")
    coordinator_id = int(coordinator.node_id)
    response: dt_resp.DescribeTransactionsResponse = await brokers.send(
        coordinator_id, dt_req.DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(transactional_id),)), 0)
    [state] = response.transaction_states
    if state.error_code != ErrorCode.none:
        raise CliError(f"cannot describe transaction {transactional_id}: "
                       f"{_error_name(state.error_code)}")
    return coordinator_id, state


def cmd_transactions(args: argparse.Namespace) -> int:
    async def body(admin: _Admin) -> int:
        metadata = await _metadata(admin, None)
        brokers = _Brokers(metadata, args.timeout_ms, admin.security)
        try:
            code: int = await _run(args, metadata, brokers)
            return code
        finally:
            await brokers.close()

    return _run_admin(args, body)


async def _run(args: argparse.Namespace, metadata: md_resp.MetadataResponse,
               brokers: _Brokers) -> int:
    now_ms = int(time.time() * 1000)
    if args.action == "list":
        print("TransactionalId\tCoordinator\tProducerId\tTransactionState")
        listed = sorted(await _list(brokers), key=lambda t: str(t[1].transactional_id))
        for broker_id, entry in listed:
            print(f"{entry.transactional_id}\t{broker_id}\t{int(entry.producer_id)}\t"
                  f"{entry.transaction_state}")
        return 0
    if args.action == "describe":
        if not args.transactional_id:
            raise CliError("describe needs --transactional-id")
        coordinator, txn = await _describe(brokers, args.transactional_id)
        start = int(txn.transaction_start_time)
        partitions = ",".join(f"{t.topic}-{int(p)}" for t in txn.topics for p in t.partitions)
        print("CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\t"
              "TransactionTimeoutMs\tCurrentTransactionStartTimeMs\tTransactionDurationMs\t"
              "TopicPartitions")
        print(f"{coordinator}\t{txn.transactional_id}\t{int(txn.producer_id)}\t"
              f"{int(txn.producer_epoch)}\t{txn.transaction_state}\t"
              f"{int(txn.transaction_timeout.total_seconds() * 1000)}\t"
              f"{start if start >= 0 else 'None'}\t{now_ms - start if start >= 0 else 'None'}\t"
              f"{partitions}")
        return 0
    if args.action == "describe-producers":
        topic, partition = _topic_partition(args)
        states = await _describe_producers(
            brokers, _leader_of(metadata, topic, partition), topic, partition)
        print("ProducerId\tProducerEpoch\tLatestCoordinatorEpoch\tLastSequence\t"
              "LastTimestamp\tCurrentTransactionStartOffset")
        for producer in states:
            offset = int(producer.current_txn_start_offset)
            print(f"{int(producer.producer_id)}\t{int(producer.producer_epoch)}\t"
                  f"{int(producer.coordinator_epoch)}\t{int(producer.last_sequence)}\t"
                  f"{int(producer.last_timestamp)}\t{offset if offset >= 0 else 'None'}")
        return 0
    if args.action == "find-hanging":
        return await _find_hanging(args, metadata, brokers, now_ms)
    return await _abort(args, metadata, brokers)


def _topic_partition(args: argparse.Namespace) -> tuple[str, int]:
    if not args.topic or args.partition is None:
        raise CliError(f"{args.action} needs --topic and --partition")
    return str(args.topic), int(args.partition)


async def _find_hanging(args: argparse.Namespace, metadata: md_resp.MetadataResponse,
                        brokers: _Brokers, now_ms: int) -> int:
    if (args.broker_id is None) == (args.topic is None):
        raise CliError("find-hanging needs --broker-id or --topic")
    partitions: list[tuple[str, int, int]] = []
    for t in metadata.topics:
        if args.topic is not None and str(t.name) != args.topic:
            continue
        for p in t.partitions:
            leader = int(p.leader_id)
            if args.partition is not None and int(p.partition_index) != args.partition:
                continue
            if args.broker_id is not None and args.broker_id not in (
                    int(b) for b in p.replica_nodes):
                continue
            if leader >= 0:
                partitions.append((str(t.name), int(p.partition_index), leader))
    if args.topic is not None and not partitions:
        raise CliError(f"no partition of {args.topic} with a leader")
    max_ms = int(args.max_transaction_timeout * 60_000)
    candidates: list[tuple[str, int, dp_resp.ProducerState]] = []
    for topic, partition, leader in partitions:
        for s in await _describe_producers(brokers, leader, topic, partition):
            if int(s.current_txn_start_offset) >= 0 and now_ms - int(s.last_timestamp) > max_ms:
                candidates.append((topic, partition, s))
    hanging = []
    if candidates:
        wanted = sorted({int(state.producer_id) for _, _, state in candidates})
        by_producer = {int(ts.producer_id): (b, ts) for b, ts in await _list(brokers, wanted)}
        for topic, partition, s in candidates:
            listed = by_producer.get(int(s.producer_id))
            if listed is not None:
                _coordinator, d = await _describe(brokers, str(listed[1].transactional_id))
                open_here = (d.transaction_state == "Ongoing"
                             and int(d.producer_epoch) == int(s.producer_epoch)
                             and any(str(t.topic) == topic and partition in map(int, t.partitions)
                                     for t in d.topics))
                if open_here:
                    continue  # the coordinator will end it (its timeout aborts it)
            hanging.append((topic, partition, s))
    print("Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\t"
          "LastTimestamp\tDuration(min)")
    for topic, partition, s in hanging:
        print(f"{topic}\t{partition}\t{int(s.producer_id)}\t{int(s.producer_epoch)}\t"
              f"{int(s.coordinator_epoch)}\t{int(s.current_txn_start_offset)}\t"
              f"{int(s.last_timestamp)}\t{(now_ms - int(s.last_timestamp)) // 60_000}")
    return 0


async def _abort(args: argparse.Namespace, metadata: md_resp.MetadataResponse,
                 brokers: _Brokers) -> int:
    topic, partition = _topic_partition(args)
    leader = _leader_of(metadata, topic, partition)
    if args.start_offset is not None:
        states = await _describe_producers(brokers, leader, topic, partition)
        match = [s for s in states if int(s.current_txn_start_offset) == args.start_offset]
        if not match:
            raise CliError(f"no transaction open at offset {args.start_offset} of "
                           f"{topic}-{partition}")
        s = match[0]
        producer_id, producer_epoch = int(s.producer_id), int(s.producer_epoch)
        coordinator_epoch = max(int(s.coordinator_epoch), 0)
    elif None in (args.producer_id, args.producer_epoch, args.coordinator_epoch):
        raise CliError("abort needs --start-offset, or --producer-id, --producer-epoch and "
                       "--coordinator-epoch")
    else:
        producer_id, producer_epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = args.coordinator_epoch
    response: wm_resp.WriteTxnMarkersResponse = await brokers.send(
        leader, wm_req.WriteTxnMarkersRequest(markers=(wm_req.WritableTxnMarker(
            producer_id=ProducerId(i64(producer_id)), producer_epoch=i16(producer_epoch),
            transaction_result=False, coordinator_epoch=i32(coordinator_epoch),
            topics=(wm_req.WritableTxnMarkerTopic(name=TopicName(topic),
                                                  partition_indexes=(i32(partition),)),)),)), 1)
    for marker in response.markers:
        for t in marker.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise CliError(f"cannot abort the transaction of producer {producer_id} on "
                                   f"{topic}-{partition}: {_error_name(p.error_code)}")
    print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
          f"{topic}-{partition}")
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "transactions", help="list, describe and abort transactions (kafka-transactions.sh)")
    parser.add_argument("action", choices=("list", "describe", "describe-producers",
                                           "find-hanging", "abort"))
    parser.add_argument("--transactional-id")
    parser.add_argument("--topic")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--broker-id", type=int)
    parser.add_argument("--max-transaction-timeout", type=float,
                        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
                        help="find-hanging: open longer than this (default 15, Kafka's "
                        "transaction.max.timeout.ms)")
    parser.add_argument("--start-offset", type=int)
    parser.add_argument("--producer-id", type=int)
    parser.add_argument("--producer-epoch", type=int)
    parser.add_argument("--coordinator-epoch", type=int)
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--timeout-ms", type=int, default=15_000)
    add_command_config(parser)
    parser.set_defaults(func=cmd_transactions)
