"""raftlog.runtime.driver against the real core, over an in-process transport.

Three drivers share one event loop; `LoopbackTransport` hands each request
straight to the destination driver's `handle_request` (or fails it as a lost
connection would), so these tests check the driver's plumbing: request ->
response routing, persist-before-send, proposals resolved on commit, group
commit, graceful resignation and failure handling.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from dataclasses import dataclass, field

import pytest

from raftlog.clock import SystemClock
from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import Errors, NotLeaderError
from raftlog.consensus.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    FetchRequest,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, SnapshotLoad
from raftlog.consensus.roles import ElectionState
from raftlog.net import KafkaApiError, RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.records import decode_records
from raftlog.runtime import wire
from raftlog.runtime.driver import (
    DriverStoppedError,
    ProposalLostError,
    ProposalOutcomeUnknownError,
    RaftDriver,
)
from raftlog.runtime.transport import raft_handlers
from raftlog.testing.memory_log import MemoryLog

VOTERS = (1, 2, 3)


@dataclass
class Journal:
    """Everything that happened, in order: ("persist", node, state) and ("send", node, body)."""

    events: list[tuple[str, int, object]] = field(default_factory=list)


class MemoryStore:
    def __init__(self, node_id: int, journal: Journal) -> None:
        self.node_id = node_id
        self.journal = journal
        self.state: ElectionState | None = None

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.journal.events.append(("persist", self.node_id, state))


class FailingLog(MemoryLog):
    fail = False
    flush_delay_s = 0.0  # a slow disk: the fsync takes this long (in a worker thread)

    def flush(self) -> None:
        if self.fail:
            raise OSError(5, "fsync failed")
        time.sleep(self.flush_delay_s)
        super().flush()


class Collector:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.leaders: list[LeaderAndEpoch] = []

    def handle_commit(self, batch: CommittedBatch) -> None:
        if not batch.is_control:
            self.values += [r.value or b"" for r in decode_records(batch.data)]

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        pass

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)


class LoopbackTransport:
    def __init__(self, cluster: Cluster, local_id: int) -> None:
        self.cluster = cluster
        self.local_id = local_id

    async def send(self, destination: int, request: Request) -> Response:
        if isinstance(request, FetchRequest):
            # What the fetch acknowledges, beside what the sender has made durable.
            flushed = self.cluster.logs[self.local_id].flushed_offset()
            self.cluster.acks.append((self.local_id, request.fetch_offset, flushed))
        target = self.cluster.drivers.get(destination)
        if target is None or destination in self.cluster.down or not target.running:
            await asyncio.sleep(0.001)
            return wire.error_response(request, Errors.BROKER_NOT_AVAILABLE)
        response = await target.handle_request(self.local_id, request)
        self.cluster.journal.events.append(("send", destination, response))
        return response

    async def close(self) -> None:
        pass


class Cluster:
    def __init__(self, **config: int) -> None:
        self.journal = Journal()
        self.drivers: dict[int, RaftDriver] = {}
        self.logs: dict[int, FailingLog] = {}
        self.collectors: dict[int, Collector] = {}
        self.down: set[int] = set()
        # (node, fetch offset, node's flushed offset when the fetch left)
        self.acks: list[tuple[int, int, int]] = []
        self.config = QuorumConfig(
            voters=frozenset(VOTERS),
            election_timeout_ms=150,
            election_backoff_max_ms=100,
            fetch_timeout_ms=300,
            request_timeout_ms=300,
            append_linger_ms=0,
            fetch_max_wait_ms=100,
        )
        self.config = dataclasses.replace(self.config, **config)

    def start(self, node_id: int) -> RaftDriver:
        clock = SystemClock()
        log = self.logs.setdefault(node_id, FailingLog())
        store = MemoryStore(node_id, self.journal)
        core = KRaftCore(
            node_id=node_id,
            config=self.config,
            log=log,
            rng=random.Random(node_id),
            stored=None,
            now_ms=clock.wall_ms(),
        )
        collector = self.collectors.setdefault(node_id, Collector())
        driver = RaftDriver(
            core=core,
            log=log,
            state_store=store,
            transport=LoopbackTransport(self, node_id),
            clock=clock,
            listener=collector,
        )
        self.drivers[node_id] = driver
        driver.start()
        return driver

    async def wait_leader(self, timeout_s: float = 5.0) -> RaftDriver:
        async with asyncio.timeout(timeout_s):
            while True:
                leaders = [
                    d
                    for i, d in self.drivers.items()
                    if d.running and d.core.is_leader and i not in self.down
                ]
                if leaders:
                    return leaders[0]
                await asyncio.sleep(0.005)

    async def propose(self, values: list[bytes], timeout_s: float = 5.0) -> int:
        """Propose through whichever node leads, retrying on NotLeader."""
        async with asyncio.timeout(timeout_s):
            while True:
                leader = await self.wait_leader()
                try:
                    return await leader.propose(values)
                except NotLeaderError:
                    await asyncio.sleep(0.01)


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def _with_cluster(body: object, **config: int) -> None:
    c = Cluster(**config)
    for node_id in VOTERS:
        c.start(node_id)
    try:
        await body(c)  # type: ignore[operator]
    finally:
        for driver in c.drivers.values():
            await driver.stop(resign=False)


def test_three_drivers_elect_a_leader_and_commit() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        offsets = [await c.propose([f"v{i}".encode()]) for i in range(5)]
        assert offsets == sorted(offsets) and len(set(offsets)) == 5
        assert leader.high_watermark > offsets[-1]
        # Followers learn the HW on their next fetch and deliver the same values.
        async with asyncio.timeout(3):
            while any(len(col.values) < 5 for col in c.collectors.values()):
                await asyncio.sleep(0.01)
        assert all(
            col.values == [f"v{i}".encode() for i in range(5)] for col in c.collectors.values()
        )

    run(_with_cluster(body))


def test_proposal_on_a_follower_names_the_leader() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        await c.propose([b"x"])  # the followers have heard from the leader by now
        follower = next(d for d in c.drivers.values() if d is not leader)
        with pytest.raises(NotLeaderError) as info:
            await follower.propose([b"nope"])
        assert info.value.leader_id == leader.node_id
        assert info.value.epoch == leader.core.epoch

    run(_with_cluster(body))


def test_concurrent_proposals_share_fsyncs_group_commit() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        await c.propose([b"warm-up"])
        fsyncs_before = leader.fsyncs
        offsets = await asyncio.gather(*(leader.propose([b"%d" % i]) for i in range(300)))
        assert sorted(offsets) == list(range(offsets[0], offsets[0] + 300))
        # Queued proposals go to the core together: far fewer fsyncs than proposals.
        assert leader.fsyncs - fsyncs_before < 60

    run(_with_cluster(body))


def test_multi_value_proposal_returns_the_last_offset() -> None:
    async def body(c: Cluster) -> None:
        first = await c.propose([b"a"])
        last = await c.propose([b"b", b"c", b"d"])
        assert last == first + 3

    run(_with_cluster(body))


def test_no_vote_or_ack_leaves_before_its_state_is_durable() -> None:
    """STYLE.md section 1: persist and fsync, then send (etcd msgsAfterAppend)."""

    async def body(c: Cluster) -> None:
        await c.wait_leader()
        await c.propose([b"x"])
        persisted: dict[int, list[ElectionState]] = {n: [] for n in VOTERS}
        checked = 0
        for kind, node, item in c.journal.events:
            if kind == "persist":
                assert isinstance(item, ElectionState)
                persisted[node].append(item)
            elif isinstance(item, VoteResponse) and item.vote_granted:
                # ``node`` granted a vote: some earlier persisted state of ``node``
                # records that vote, or it was a pre-vote (no state change).
                checked += 1
                assert any(s.epoch >= item.leader_epoch for s in persisted[node])
        assert checked >= 1

    run(_with_cluster(body))


def test_kip595_a_fetch_leaves_only_once_the_records_it_acknowledges_are_flushed() -> None:
    """The leader may send records before its own fsync (Ready.send_before_persist),
    but a follower's fetch offset counts toward the HW, so it must be durable."""

    async def body(c: Cluster) -> None:
        await c.wait_leader()
        for log in c.logs.values():
            log.flush_delay_s = 0.002
        # A leader change under a loaded machine may lose some proposals: this
        # test is about what the fetches acknowledge, not about those.
        outcomes = await asyncio.gather(
            *(c.propose([b"%d" % i]) for i in range(200)), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, ProposalLostError | ProposalOutcomeUnknownError
            ):
                raise outcome
        moving = [(n, offset, flushed) for n, offset, flushed in c.acks if offset > 0]
        assert moving
        for node, offset, flushed in moving:
            assert offset <= flushed, f"node {node} acknowledged {offset}, flushed {flushed}"

    run(_with_cluster(body))


def test_graceful_stop_of_the_leader_hands_over_quickly() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        await c.propose([b"x"])
        loop = asyncio.get_running_loop()
        started = loop.time()
        c.down.add(leader.node_id)
        await leader.stop(resign=True)
        new = await c.wait_leader()
        assert new is not leader
        elapsed_ms = (loop.time() - started) * 1000
        # EndQuorumEpoch lets a successor stand without waiting out the fetch
        # timeout (300 ms) plus an election timeout (150-300 ms).
        assert elapsed_ms < 450, elapsed_ms
        await c.propose([b"after"])

    run(_with_cluster(body))


def test_describe_quorum_from_the_leader_and_a_follower() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        await c.propose([b"x"])
        described = await leader.describe_quorum()
        assert isinstance(described, DescribeQuorumResponse)
        assert described.error is Errors.NONE and described.leader_id == leader.node_id
        assert sorted(r.replica_id for r in described.current_voters) == list(VOTERS)
        follower = next(d for d in c.drivers.values() if d is not leader)
        assert (await follower.describe_quorum()).error is Errors.NOT_LEADER_OR_FOLLOWER

    run(_with_cluster(body))


def test_anonymous_fetches_get_distinct_sources() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        epoch = leader.core.epoch
        responses = await asyncio.gather(
            *(
                leader.handle_request(None, FetchRequest(-1, epoch, 0, 0, 0, 1 << 20))
                for _ in range(3)
            )
        )
        assert all(r.error is Errors.NONE for r in responses)

    run(_with_cluster(body))


def test_failed_fsync_stops_the_driver_and_fails_callers() -> None:
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        await c.propose([b"x"])
        c.logs[leader.node_id].fail = True
        with pytest.raises(DriverStoppedError):
            await leader.propose([b"y"])
        assert isinstance(leader.failure, OSError)
        with pytest.raises(DriverStoppedError):
            await leader.propose([b"z"])

    run(_with_cluster(body))


def test_kip595_leader_change_answers_a_parked_fetch_at_once_not_at_the_fallback_timeout() -> None:
    """A long-polling fetch parked at a leader that resigns is answered with
    NOT_LEADER_OR_FOLLOWER right away; the driver's REQUEST_TIMED_OUT after
    max wait + request timeout is only a safety net."""

    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        await c.propose([b"x"])
        observer = 99  # its own source, so no voter's fetch replaces the parked one
        epoch = leader.core.epoch
        end = leader.core.log.end_offset()
        last_epoch = leader.core.log.last_fetched_epoch()
        max_wait_ms = 5000  # fallback would fire after 5.3 s
        loop = asyncio.get_running_loop()
        pending = asyncio.ensure_future(
            leader.handle_request(
                observer, FetchRequest(observer, epoch, end, last_epoch, max_wait_ms, 1 << 20)
            )
        )
        await asyncio.sleep(0.05)
        assert not pending.done()  # parked (long poll)
        started = loop.time()
        await leader.resign()
        response = await asyncio.wait_for(pending, 1.0)
        elapsed_ms = (loop.time() - started) * 1000
        assert response.error is Errors.NOT_LEADER_OR_FOLLOWER, response
        assert elapsed_ms < 200, elapsed_ms

    run(_with_cluster(body))


def test_kip1166_followers_learn_a_commit_without_waiting_out_the_long_poll() -> None:
    """With a 3 s long poll, a committed value reaches every follower's
    listener at once: the fetch that moves the HW is answered with it, and
    a follower behind the HW is not parked (Kafka 4.1, KIP-1166)."""

    async def body(c: Cluster) -> None:
        await c.wait_leader()
        await c.propose([b"warm-up"])
        async with asyncio.timeout(8):
            while any(len(col.values) < 1 for col in c.collectors.values()):
                await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        for i in range(3):
            started = loop.time()
            await c.propose([f"v{i}".encode()])
            async with asyncio.timeout(8):
                while any(len(col.values) < i + 2 for col in c.collectors.values()):
                    await asyncio.sleep(0.002)
            elapsed_ms = (loop.time() - started) * 1000
            assert elapsed_ms < 1000, f"followers saw commit {i} after {elapsed_ms:.0f} ms"

    run(_with_cluster(body, fetch_max_wait_ms=3000, fetch_timeout_ms=6000,
                      request_timeout_ms=1000))


def test_a_transport_that_raises_fails_the_request_not_the_driver() -> None:
    """A bug in a transport (an exception it does not turn into an error
    response) ends that one request with UNKNOWN_SERVER_ERROR at once; the
    node fetches again after a backoff, not after the request's 6 s expiry,
    and the quorum keeps committing."""

    async def body(c: Cluster) -> None:
        await c.wait_leader()
        follower = next(i for i, d in c.drivers.items() if not d.core.is_leader)
        transport = c.drivers[follower]._transport
        real = transport.send
        raised: list[Request] = []

        async def flaky(destination: int, request: Request) -> Response:
            if isinstance(request, FetchRequest) and len(raised) < 3:
                raised.append(request)
                raise RuntimeError("transport bug")
            return await real(destination, request)

        transport.send = flaky  # type: ignore[method-assign]
        await c.propose([b"after"])
        async with asyncio.timeout(2):
            while b"after" not in c.collectors[follower].values:
                await asyncio.sleep(0.01)
        assert len(raised) == 3

    run(_with_cluster(body, fetch_max_wait_ms=3000, request_timeout_ms=3000,
                      fetch_timeout_ms=10000))


def test_a_stopped_driver_answers_peers_broker_not_available() -> None:
    """A node shutting down still receives its peers' Raft requests (the
    leader's EndQuorumEpoch, votes): they get a retriable error code, and
    the server logs no handler failure."""
    async def body(c: Cluster) -> None:
        leader = await c.wait_leader()
        follower = next(d for d in c.drivers.values() if d is not leader)
        await follower.stop(resign=False)
        handle = raft_handlers(follower)[52]
        context = RequestContext(api_key=52, api_version=0, correlation_id=1, client_id=None,
                                 peer=None, listener_name="CONTROLLER")
        vote = wire.encode_request(
            VoteRequest(leader.core.epoch + 1, leader.node_id, 0, 0), destination=follower.node_id)
        with pytest.raises(KafkaApiError) as raised:
            await handle(context, vote)
        assert raised.value.error_code == ErrorCode.broker_not_available
        with pytest.raises(KafkaApiError):
            await raft_handlers(follower)[55](
                context, wire.encode_request(DescribeQuorumRequest(), destination=-1))

    run(_with_cluster(body))


def test_a_deposed_leaders_proposals_beyond_the_new_leaders_log_are_answered_lost() -> None:
    """A leader cut off with proposals it alone holds loses them: once the new
    leader's first entry (its LEADER_CHANGE record, a later epoch) commits,
    nothing of an older epoch can commit after it (log matching), so each
    proposal is answered ProposalLostError then, not when later writes happen
    to commit past its offset."""

    async def body(c: Cluster) -> None:
        old = await c.wait_leader()
        await c.propose([b"x"])
        c.down.add(old.node_id)
        doomed = [asyncio.ensure_future(old.propose([b"lost-%d" % i])) for i in range(5)]
        await asyncio.sleep(0)
        new = await c.wait_leader()
        assert new is not old
        c.down.discard(old.node_id)
        # Nothing more is written: only the new leader's control record commits.
        done, _ = await asyncio.wait(doomed, timeout=3.0)
        outcomes = [type(f.exception()).__name__ if f in done else "pending" for f in doomed]
        assert outcomes == ["ProposalLostError"] * 5, outcomes
        # The old leader follows the new one, without the values it lost.
        await c.propose([b"after"])
        async with asyncio.timeout(3):
            while b"after" not in c.collectors[old.node_id].values:
                await asyncio.sleep(0.01)
        assert c.collectors[old.node_id].values == [b"x", b"after"]

    run(_with_cluster(body))
