"""Real processes: three quorum nodes (and an observer) on loopback.

Each test starts ``python -m raftlog.runtime.node`` processes with free
ports, talks to them over the Kafka protocol only (Produce, DescribeQuorum),
kills them by PID, and finally compares their logs on disk.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import DescribeQuorumResponse
from raftlog.records import iter_batches
from raftlog.runtime.local_quorum import LocalQuorum
from raftlog.runtime.log_adapter import SegmentReplicatedLog
from raftlog.runtime.quorum_client import QuorumClient

pytestmark = pytest.mark.slow

TUNED = (
    "--election-timeout-ms",
    "300",
    "--election-backoff-max-ms",
    "200",
    "--fetch-timeout-ms",
    "600",
    "--request-timeout-ms",
    "1000",
    "--append-linger-ms",
    "0",
    "--fetch-max-wait-ms",
    "200",
)


@pytest.fixture
def make_quorum(tmp_path: Path) -> Iterator[Callable[..., LocalQuorum]]:
    made: list[LocalQuorum] = []

    def make(*, observers: int = 0, extra: tuple[str, ...] = ()) -> LocalQuorum:
        q = LocalQuorum(str(tmp_path), observers=observers, node_args=TUNED + extra)
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()  # kills by PID even if the test failed


@pytest.fixture
def quorum(make_quorum: Callable[..., LocalQuorum]) -> LocalQuorum:
    return make_quorum()


async def _leader(
    client: QuorumClient, q: LocalQuorum, timeout_s: float = 10
) -> DescribeQuorumResponse:
    async with asyncio.timeout(timeout_s):
        while True:
            for node_id in q.voter_ids:
                if not q.is_running(node_id):
                    continue
                try:
                    described = await client.describe_quorum(node_id)
                except Exception:
                    continue
                if described.error is Errors.NONE:
                    return described
            await asyncio.sleep(0.05)


def _batches(directory: str) -> dict[int, bytes]:
    log = SegmentReplicatedLog.open(directory)
    try:
        out: dict[int, bytes] = {}
        offset = log.start_offset()
        while offset < log.end_offset():
            data = log.read(offset, 1 << 20)
            view = memoryview(data)
            for header, pos in iter_batches(data):
                out[header.base_offset] = bytes(view[pos : pos + header.size_in_bytes])
                offset = header.next_offset
        return out
    finally:
        log.close()


def _assert_same_committed_prefix(
    q: LocalQuorum, committed_end: int, nodes: tuple[int, ...]
) -> None:
    logs = {n: _batches(q.node_dir(n)) for n in nodes}
    reference = {o: b for o, b in logs[nodes[0]].items() if o < committed_end}
    assert reference, "nothing committed?"
    for node_id, batches in logs.items():
        prefix = {o: b for o, b in batches.items() if o < committed_end}
        assert prefix == reference, f"node {node_id} diverges from node {nodes[0]}"


def test_three_processes_elect_a_leader_and_commit(quorum: LocalQuorum) -> None:
    quorum.start_all()

    async def body() -> None:
        client = QuorumClient(quorum.addresses)
        try:
            offsets = [await client.propose([b"value-%d" % i]) for i in range(20)]
            assert offsets == list(range(offsets[0], offsets[0] + 20))
            async with asyncio.timeout(10):
                while True:  # a node that started last joins within an election timeout
                    described = await _leader(client, quorum)
                    followers = [
                        r for r in described.current_voters if r.replica_id != described.leader_id
                    ]
                    if all(r.log_end_offset > offsets[-1] for r in followers):
                        break
                    await asyncio.sleep(0.05)
            assert described.high_watermark > offsets[-1]
            assert sorted(r.replica_id for r in described.current_voters) == [1, 2, 3]
            # KIP-836 timestamps are epoch milliseconds.
            assert all(r.last_fetch_timestamp > 1_600_000_000_000 for r in followers)
            # KIP-836 over the wire at every version, and v2's node endpoints.
            old = await client.describe_quorum(described.leader_id, version=0)
            assert (old.leader_id, old.high_watermark) == (
                described.leader_id,
                described.high_watermark,
            )
            raw = await client.describe_quorum_raw(described.leader_id)
            assert sorted(n.node_id for n in raw.nodes) == [1, 2, 3]
        finally:
            await client.close()

    asyncio.run(body())
    for node_id in quorum.voter_ids:
        assert quorum.stop(node_id) == 0


def test_sigkill_the_leader_then_it_restarts_and_catches_up(quorum: LocalQuorum) -> None:
    quorum.start_all()

    async def body() -> int:
        client = QuorumClient(quorum.addresses, request_timeout_ms=2000)
        try:
            for i in range(30):
                await client.propose([b"before-%d" % i])
            old = (await _leader(client, quorum)).leader_id
            quorum.kill(old, signal.SIGKILL)
            started = time.monotonic()
            first_after = await client.propose([b"after-kill"], deadline_ms=15_000)
            failover_s = time.monotonic() - started
            new = await _leader(client, quorum)
            assert new.leader_id != old
            assert failover_s < 5, failover_s
            for i in range(30):
                last = await client.propose([b"while-down-%d" % i])
            assert last > first_after
            quorum.start(old)
            for i in range(10):
                last = await client.propose([b"after-restart-%d" % i])
            async with asyncio.timeout(15):
                while True:  # the restarted node catches up to the leader's log end
                    described = await _leader(client, quorum)
                    leos = {r.replica_id: r.log_end_offset for r in described.current_voters}
                    if leos[old] > last and leos[old] == leos[described.leader_id]:
                        break
                    await asyncio.sleep(0.05)
            print(f"\nSIGKILLed leader {old}; node {new.leader_id} led and committed "
                  f"offset {first_after} {failover_s:.2f} s later; the restarted node "
                  f"{old} caught up to the leader's log end {leos[old]}")
            return last + 1
        finally:
            await client.close()

    committed_end = asyncio.run(body())
    for node_id in quorum.voter_ids:
        quorum.stop(node_id)
    _assert_same_committed_prefix(quorum, committed_end, quorum.voter_ids)


def test_observer_catches_up_from_a_snapshot(make_quorum: Callable[..., LocalQuorum]) -> None:
    quorum = make_quorum(observers=1, extra=("--snapshot-every-records", "40"))
    quorum.start_all()
    observer = quorum.observer_ids[0]

    async def body() -> int:
        client = QuorumClient(quorum.addresses)
        try:
            for i in range(25):
                await client.propose([b"v-%d" % j for j in range(4 * i, 4 * i + 4)])
            # Let every voter snapshot and move its log start past 0.
            await asyncio.sleep(0.5)
            last = await client.propose([b"tail"])
            quorum.start(observer)
            async with asyncio.timeout(15):
                while True:
                    described = await _leader(client, quorum)
                    seen = {r.replica_id: r.log_end_offset for r in described.observers}
                    if seen.get(observer, -1) > last:
                        return last + 1
                    await asyncio.sleep(0.05)
        finally:
            await client.close()

    committed_end = asyncio.run(body())
    for node_id in (*quorum.voter_ids, observer):
        quorum.stop(node_id)
    loaded = SegmentReplicatedLog.open(quorum.node_dir(observer))
    try:
        snapshot = loaded.latest_snapshot_id()
        assert snapshot is not None and snapshot.end_offset > 0
        assert loaded.start_offset() == snapshot.end_offset  # it never held offset 0
        assert loaded.end_offset() >= committed_end
    finally:
        loaded.close()
    assert "loaded snapshot" in Path(quorum.log_path(observer)).read_text()
    leader_logs = _batches(quorum.node_dir(1))
    observer_logs = _batches(quorum.node_dir(observer))
    for offset, batch in observer_logs.items():
        if offset < committed_end and offset in leader_logs:
            assert leader_logs[offset] == batch
