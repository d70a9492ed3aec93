"""KIP-890 part 1: partition leaders verify a transaction's first batch on a
partition with the transaction coordinator.

The scenario it exists for is a hanging transaction: a transactional batch
that reaches a partition after its transaction was aborted (a delayed
retry) must not open a new transaction there, or the partition's last
stable offset stays behind it forever. The cluster test drives it with raw
Kafka requests (a client library always adds partitions first), against a
3-broker in-process cluster where one partition's leader is the
coordinator (answered in process) and the others ask it over the wire.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.add_partitions_to_txn.v3 import request as aptt_req
from kio.schema.end_txn.v3 import request as end_req
from kio.schema.find_coordinator.v4 import request as fc_req
from kio.schema.init_producer_id.v4 import request as init_req
from kio.schema.produce.v9 import request as produce_req

from data_plane.api.build import build
from data_plane.broker.fetcher import ReplicaFetcherManager
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessBroker, InProcessCluster
from data_plane.txn.coordinator import TransactionCoordinator
from data_plane.txn.replica_state import ReplicaTxnState
from data_plane.txn.txn_log import TRANSACTION_STATE_TOPIC, partition_for
from raftlog.net.client import KafkaProtocolClient
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder, build_control_batch
from raftlog.records.batch import ControlRecordType
from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem

pytestmark = pytest.mark.timeout(120)

TID = "verified-writer"
TOPIC = "t"


# ---- the coordinator's check --------------------------------------------------


class _Ids:
    def __init__(self) -> None:
        self._ids = itertools.count(1000)

    def next_producer_id(self) -> int:
        return next(self._ids)


def test_the_coordinator_answers_per_partition_and_changes_nothing() -> None:
    c = TransactionCoordinator(partition_for(TID), coordinator_epoch=1, allocator=_Ids())
    init = c.handle_init_producer_id(TID, 60_000, 0, None)
    c.apply(init)
    verify = functools.partial(c.verify_partitions, high_watermark=0)  # all applied as committed
    pid, epoch = init.response.producer_id, init.response.producer_epoch
    added, other = ("orders", 0), ("orders", 1)
    # No transaction yet: nothing is in it.
    assert verify(TID, pid, epoch, [added]) == {added: ErrorCode.invalid_txn_state}
    c.apply(c.handle_add_partitions(TID, pid, epoch, [added], 0))
    before = c.metadata(TID)
    assert verify(TID, pid, epoch, [added, other]) == {
        added: ErrorCode.none, other: ErrorCode.invalid_txn_state}
    assert c.metadata(TID) == before
    assert verify(TID, pid + 1, epoch, [added]) == {
        added: ErrorCode.invalid_producer_id_mapping}
    assert verify(TID, pid, epoch + 1, [added]) == {
        added: ErrorCode.producer_fenced}
    assert verify("someone-else", pid, epoch, [added]) in (
        {added: ErrorCode.not_coordinator}, {added: ErrorCode.invalid_producer_id_mapping})
    # Completing: busy (the leader's produce retries); completed: not in it.
    end = c.handle_end_txn(TID, pid, epoch, False, 0)
    c.apply(end)
    assert verify(TID, pid, epoch, [added]) == {
        added: ErrorCode.concurrent_transactions}
    for marker in end.markers:
        done = c.handle_marker_written(TID, (marker.topic, marker.partition), 0)
        if done is not None:
            c.apply(done)
    assert verify(TID, pid, epoch, [added]) == {added: ErrorCode.invalid_txn_state}


def test_the_coordinator_answers_only_from_committed_state() -> None:
    """An add whose record the high watermark has not reached answers
    CONCURRENT_TRANSACTIONS (retry), never NONE: a failover can still lose
    it, and a batch let in on it would belong to no transaction. The chaos
    txn workload found that hang: a coordinator killed while an add was
    waiting for its commit had already let the partition's batch in."""
    c = TransactionCoordinator(partition_for(TID), coordinator_epoch=1, allocator=_Ids())
    init = c.handle_init_producer_id(TID, 60_000, 0, None)
    c.apply(init, 0)
    pid, epoch = init.response.producer_id, init.response.producer_epoch
    added = ("orders", 0)
    c.apply(c.handle_add_partitions(TID, pid, epoch, [added], 0), 1)
    for hw in (0, 1):
        assert c.verify_partitions(TID, pid, epoch, [added], high_watermark=hw) == {
            added: ErrorCode.concurrent_transactions}
    assert c.verify_partitions(TID, pid, epoch, [added], high_watermark=2) == {
        added: ErrorCode.none}
    # Another id's uncommitted record does not hold this one back.
    other_tid = next(t for t in (f"other-{i}" for i in range(10_000))
                     if partition_for(t) == partition_for(TID))
    c.apply(c.handle_init_producer_id(other_tid, 60_000, 0, None), 2)
    assert c.verify_partitions(TID, pid, epoch, [added], high_watermark=2) == {
        added: ErrorCode.none}


def test_a_loaded_tail_above_the_high_watermark_is_not_yet_an_answer() -> None:
    """A coordinator loaded from a log (a new leader, or a reload after a
    failed wait) holds the tail above the high watermark too; verification
    waits for that tail to commit."""
    c = TransactionCoordinator(partition_for(TID), coordinator_epoch=1, allocator=_Ids())
    init = c.handle_init_producer_id(TID, 60_000, 0, None)
    pid, epoch = init.response.producer_id, init.response.producer_epoch
    c.apply(init)
    added = ("orders", 0)
    add = c.handle_add_partitions(TID, pid, epoch, [added], 0)
    loaded = TransactionCoordinator(partition_for(TID), coordinator_epoch=2, allocator=_Ids())
    loaded.load(enumerate(init.records + add.records))
    assert loaded.verify_partitions(TID, pid, epoch, [added], high_watermark=1) == {
        added: ErrorCode.concurrent_transactions}
    assert loaded.verify_partitions(TID, pid, epoch, [added], high_watermark=2) == {
        added: ErrorCode.none}


# ---- a cluster ------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {
        "min.insync.replicas": "2",
        "transaction.state.log.num.partitions": "1",
        "offsets.topic.num.partitions": "1",
    })
    with ClusterThread(c) as ct:
        yield ct


class _Wire:
    """One raw Kafka client per broker of the in-process cluster, and the
    transactional producer ``TID`` spoken by hand."""

    def __init__(self, cluster: InProcessCluster) -> None:
        self.cluster = cluster
        self.clients = {
            broker_id: KafkaProtocolClient("127.0.0.1", broker.server.port,
                                           client_id="raw", request_timeout_ms=10_000)
            for broker_id, broker in cluster.brokers.items()}
        self.coordinator = self.pid = self.epoch = -1

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()

    async def send(self, broker_id: int, request: Any) -> Any:
        return await self.clients[broker_id].send(request)

    async def until(self, broker_id: int, request: Any, ok: Any) -> Any:
        """Resend while the answer is a retriable coordinator error."""
        for _ in range(200):
            response = await self.send(broker_id, request)
            if ok(response):
                return response
            await asyncio.sleep(0.05)
        raise AssertionError(f"no good answer to {type(request).__name__}: {response}")

    def leader(self, partition: int) -> int:
        return self.cluster.leader_of(TOPIC, partition)

    def log_end(self, partition: int) -> int:
        leader = self.cluster.brokers[self.leader(partition)]
        return leader.replicas.partitions[(TOPIC, partition)].partition.log_end_offset

    async def init(self) -> None:
        """FindCoordinator, then InitProducerId."""
        found = await self.until(1, build(fc_req.FindCoordinatorRequest, {
            "key_type": 1, "coordinator_keys": [TID]}),
            lambda r: r.coordinators[0].error_code == 0)
        self.coordinator = int(found.coordinators[0].node_id)
        init = await self.until(self.coordinator, build(init_req.InitProducerIdRequest, {
            "transactional_id": TID, "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1, "producer_epoch": -1}), lambda r: r.error_code == 0)
        self.pid, self.epoch = int(init.producer_id), int(init.producer_epoch)

    def add_request(self, partitions: list[int]) -> Any:
        return build(aptt_req.AddPartitionsToTxnRequest, {
            "v3_and_below_transactional_id": TID, "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": partitions}]})

    async def add(self, partitions: list[int]) -> None:
        await self.until(self.coordinator, self.add_request(partitions),
                         lambda r: all(p.partition_error_code == 0
                                       for t in r.results_by_topic_v3_and_below
                                       for p in t.results_by_partition))

    def end_request(self, commit: bool) -> Any:
        return build(end_req.EndTxnRequest, {
            "transactional_id": TID, "producer_id": self.pid, "producer_epoch": self.epoch,
            "committed": commit})

    async def end(self, commit: bool) -> ErrorCode:
        response = await self.until(self.coordinator, self.end_request(commit),
                                    lambda r: r.error_code == 0)
        return ErrorCode(int(response.error_code))

    async def produce(self, partition: int, seq: int, acks: int = -1) -> ErrorCode:
        builder = BatchBuilder(producer_id=self.pid, producer_epoch=self.epoch,
                               base_sequence=seq, is_transactional=True)
        builder.append(b"v%d" % seq, key=b"k", timestamp_ms=0)
        request = build(produce_req.ProduceRequest, {
            "transactional_id": TID, "acks": acks, "timeout": datetime.timedelta(seconds=10),
            "topic_data": [{"name": TOPIC, "partition_data": [
                {"index": partition, "records": builder.build()}]}]})
        response = await self.send(self.leader(partition), request)
        return ErrorCode(int(response.responses[0].partition_responses[0].error_code))

    async def stop_followers(self) -> list[InProcessBroker]:
        """The brokers other than the coordinator stop fetching: nothing
        the coordinator's broker leads commits any more."""
        stopped = [b for i, b in self.cluster.brokers.items() if i != self.coordinator]
        for broker in stopped:
            await broker.fetchers.close()
        return stopped


def _start_fetching(stopped: list[InProcessBroker]) -> None:
    for broker in stopped:
        broker.fetchers = ReplicaFetcherManager(broker.replicas)
        broker.fetchers.start()


def _with_topic(cluster: ClusterThread) -> InProcessCluster:
    """The cluster with TOPIC created (3 partitions, RF 3, min ISR 2), every leader up."""
    c = cluster.cluster
    cluster.call(c.controller.create_topic, TOPIC, 3, 3, {"min.insync.replicas": "2"})
    cluster.run(c.wait_until(lambda: sum(
        1 for b in c.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == TOPIC and h.partition.is_leader) == 3))
    return c


def _lso_and_hw(cluster: InProcessCluster, partition: int) -> tuple[int, int]:
    leader = cluster.brokers[cluster.leader_of(TOPIC, partition)]
    p = leader.replicas.partitions[(TOPIC, partition)].partition
    return p.last_stable_offset, p.high_watermark


def test_a_late_batch_after_an_abort_is_refused_and_the_lso_moves_on(
    cluster: ClusterThread,
) -> None:
    c = _with_topic(cluster)

    async def scenario() -> dict[str, Any]:
        wire = _Wire(c)
        try:
            await wire.init()
            out: dict[str, Any] = {"coordinator": wire.coordinator,
                                   "leaders": [wire.leader(p) for p in range(3)]}
            # A transaction over every partition: each leader verifies (the
            # coordinator's in process, the other two over the wire).
            await wire.add([0, 1, 2])
            out["added"] = [await wire.produce(p, 0) for p in range(3)]
            await wire.end(True)
            # The next one adds partition 0 only.
            await wire.add([0])
            out["not_added"] = [await wire.produce(p, 1) for p in (1, 2)]
            out["in_txn"] = await wire.produce(0, 1)
            await wire.end(False)
            await c.wait_until(lambda: all(
                _lso_and_hw(c, p)[0] == _lso_and_hw(c, p)[1] for p in range(3)))
            # The delayed retry of a batch of the aborted transaction.
            out["late"] = await wire.produce(0, 2)
            await asyncio.sleep(0.2)
            out["lso_hw"] = [_lso_and_hw(c, p) for p in range(3)]
            return out
        finally:
            await wire.close()

    out = cluster.run(scenario())
    leaders, coordinator = out["leaders"], out["coordinator"]
    assert coordinator in leaders and any(leader != coordinator for leader in leaders)
    assert out["added"] == [ErrorCode.none] * 3
    assert out["not_added"] == [ErrorCode.invalid_txn_state] * 2
    assert out["in_txn"] == ErrorCode.none
    assert out["late"] == ErrorCode.invalid_txn_state
    # No transaction hangs: every partition's LSO is its HW.
    assert all(lso == hw for lso, hw in out["lso_hw"]), out["lso_hw"]
    assert TRANSACTION_STATE_TOPIC in {k[0] for b in c.brokers.values()
                                       for k in b.replicas.partitions}


def test_an_add_not_yet_committed_lets_no_batch_in(cluster: ClusterThread) -> None:
    """The coordinator's AddPartitionsToTxn record waits for its commit
    (followers stopped fetching); meanwhile a batch for that partition is
    refused with NOT_ENOUGH_REPLICAS (the producer retries), not let in on
    an add a failover could still lose. Before the fix the coordinator
    answered from its uncommitted state and the batch was appended: the
    hanging transaction the txn chaos workload found."""
    c = _with_topic(cluster)

    async def scenario() -> dict[str, Any]:
        wire = _Wire(c)
        try:
            await wire.init()
            local = next(p for p in range(3) if wire.leader(p) == wire.coordinator)
            remote = next(p for p in range(3) if wire.leader(p) != wire.coordinator)
            await wire.stop_followers()
            before = {p: wire.log_end(p) for p in (local, remote)}
            add = asyncio.ensure_future(wire.send(wire.coordinator,
                                                  wire.add_request([local, remote])))
            await asyncio.sleep(0.3)  # the add is appended and waiting
            out: dict[str, Any] = {
                "add_pending": not add.done(),
                # acks=1: nothing but verification stands in the way.
                "produced": {p: await wire.produce(p, 0, acks=1) for p in (local, remote)}}
            added = await add
            out["add"] = {int(p.partition_index): ErrorCode(int(p.partition_error_code))
                          for t in added.results_by_topic_v3_and_below
                          for p in t.results_by_partition}
            out["moved"] = {p: wire.log_end(p) - before[p] for p in (local, remote)}
            return out
        finally:
            await wire.close()

    out = cluster.run(scenario())
    assert out["add_pending"]
    assert set(out["produced"].values()) == {ErrorCode.not_enough_replicas}, out["produced"]
    assert set(out["moved"].values()) == {0}  # no batch reached a log
    # The add itself was never acknowledged: the write timed out uncommitted.
    assert set(out["add"].values()) == {ErrorCode.coordinator_not_available}, out["add"]


def test_verification_can_be_switched_off_and_on_while_running(cluster: ClusterThread) -> None:
    """``transaction.partition.verification.enable`` (default true), set as a
    cluster-wide dynamic config: off, a batch for a partition the producer
    never added is appended (Kafka's behaviour without KIP-890, and the
    hanging transaction it allows); on again, it is refused."""
    c = _with_topic(cluster)

    async def scenario() -> list[ErrorCode]:
        wire = _Wire(c)
        try:
            await wire.init()
            await wire.add([0])
            answers = [await wire.produce(1, 0)]
            c.controller.set_broker_config(None, "transaction.partition.verification.enable",
                                           "false")
            await asyncio.sleep(0.1)  # every broker applies the image
            answers.append(await wire.produce(2, 0))
            c.controller.set_broker_config(None, "transaction.partition.verification.enable",
                                           None)
            await asyncio.sleep(0.1)
            answers.append(await wire.produce(1, 0))
            return answers
        finally:
            await wire.close()

    assert cluster.run(scenario()) == [
        ErrorCode.invalid_txn_state, ErrorCode.none, ErrorCode.invalid_txn_state]


async def _txn_over_every_partition(c: InProcessCluster, wire: _Wire) -> list[int]:
    """Open a transaction with a batch on each partition, all committed;
    the log end offsets after it."""
    await wire.init()
    await wire.add([0, 1, 2])
    assert [await wire.produce(p, 0) for p in range(3)] == [ErrorCode.none] * 3
    await c.wait_until(lambda: all(_lso_and_hw(c, p)[1] == wire.log_end(p) for p in range(3)))
    return [wire.log_end(p) for p in range(3)]


def test_markers_wait_for_the_prepare_record_to_commit(cluster: ClusterThread) -> None:
    """An EndTxn whose PREPARE_COMMIT cannot commit (followers stopped
    fetching) times out; the record stays in the log, uncommitted. Its
    markers wait: were one written and the record then lost in a failover,
    the next coordinator could abort a transaction already committed on that
    partition. Once the followers fetch again the record commits and the
    markers complete the transaction. (Before, the timeout reloaded the
    coordinator from its log and sent the markers of the uncommitted
    record at once.)"""
    c = _with_topic(cluster)

    async def scenario() -> dict[str, Any]:
        wire = _Wire(c)
        try:
            before = await _txn_over_every_partition(c, wire)
            stopped = await wire.stop_followers()
            end = await wire.send(wire.coordinator, wire.end_request(True))
            out: dict[str, Any] = {"end": ErrorCode(int(end.error_code))}
            await asyncio.sleep(0.5)
            out["held"] = [wire.log_end(p) for p in range(3)] == before
            _start_fetching(stopped)
            await c.wait_until(lambda: all(
                wire.log_end(p) == before[p] + 1 and _lso_and_hw(c, p) == (wire.log_end(p),) * 2
                for p in range(3)), timeout_s=20)
            out["retry"] = await wire.end(True)  # finds the transaction committed
            return out
        finally:
            await wire.close()

    out = cluster.run(scenario())
    assert out["end"] == ErrorCode.coordinator_not_available
    assert out["held"], "a marker went out on an uncommitted PREPARE_COMMIT"
    assert out["retry"] == ErrorCode.none


def test_a_client_that_leaves_mid_command_does_not_stop_the_command(
    cluster: ClusterThread,
) -> None:
    """The client's connection closes while its EndTxn waits for the
    PREPARE_COMMIT to commit (followers stopped fetching). The command runs
    to its end anyway: once the record commits, the markers go out and the
    transaction completes. When the request's cancellation stopped the
    command halfway, the markers were never sent: every partition of the
    transaction kept its LSO behind it, and InitProducerId answered
    CONCURRENT_TRANSACTIONS until a failover (found by the txn chaos workload)."""
    c = _with_topic(cluster)

    async def scenario() -> ErrorCode:
        wire = _Wire(c)
        try:
            before = await _txn_over_every_partition(c, wire)
            stopped = await wire.stop_followers()
            leaving = KafkaProtocolClient("127.0.0.1", c.brokers[wire.coordinator].server.port,
                                          client_id="leaving", request_timeout_ms=10_000)
            end = asyncio.ensure_future(leaving.send(wire.end_request(True)))
            await asyncio.sleep(0.5)  # appended, waiting for the commit
            end.cancel()
            await leaving.close()  # the broker sees the connection go
            await asyncio.sleep(0.2)
            _start_fetching(stopped)
            await c.wait_until(lambda: all(
                wire.log_end(p) == before[p] + 1 and _lso_and_hw(c, p) == (wire.log_end(p),) * 2
                for p in range(3)), timeout_s=20)
            return await wire.end(True)
        finally:
            await wire.close()

    assert cluster.run(scenario()) == ErrorCode.none  # committed, as the abandoned EndTxn asked


def test_a_batch_or_marker_of_the_producer_voids_a_verification_in_flight() -> None:
    fs, clock = FakeFileSystem(), FakeClock()
    fs.make_dirs("/p")
    log = Log.open("/p", LogConfig(), fs=fs, clock=clock)
    state = ReplicaTxnState("/p", None)
    assert state.needs_verification(7)
    guard = state.start_verification(7)
    assert state.start_verification(7) is guard  # a retry shares the question in flight
    # Another producer's batch changes nothing.
    other = BatchBuilder(producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
    other.append(b"x", timestamp_ms=0)
    data = other.build()
    log.append_as_leader(data, 0)
    state.apply_appended_bytes(log, log.read(0, 1 << 20).records)
    assert state.verification_holds(7, guard)
    # The producer's abort marker lands while the question is out.
    marker = build_control_batch(ControlRecordType.ABORT, b"\x00\x00\x00\x00\x00\x00",
                                 timestamp_ms=0, producer_id=7, producer_epoch=0,
                                 base_offset=1)
    log.append_as_leader(marker, 0)
    state.apply_appended_bytes(log, log.read(1, 1 << 20).records)
    assert not state.verification_holds(7, guard)
    assert state.needs_verification(7)
    state.end_verification(7, guard)  # a stale guard's end is harmless
