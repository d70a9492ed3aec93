"""A standalone quorum node: ``python -m raftlog.runtime.node``.

    python -m raftlog.runtime.node --node-id 1 \\
        --voters 1@127.0.0.1:19001,2@127.0.0.1:19002,3@127.0.0.1:19003 --dir /tmp/n1

One process, one KRaft replica of ``__cluster_metadata-0``: a voter if its id
is in ``--voters``, else an observer (give it ``--listen host:port``). It
serves on one port:

- the Raft APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
  FetchSnapshot) and DescribeQuorum (KIP-836), via `raftlog.runtime.transport`;
- the client API: Produce to ``__cluster_metadata-0`` (see
  `raftlog.runtime.client_api`), answered once committed.

State machine: a counter and a running SHA-256 over committed values (what
the tests and the benchmark need; the real metadata state machine comes with
``metadata_quorum``). With ``--snapshot-every-records N`` the node snapshots it
after every N committed records, so the log start moves (KIP-630).

Logs go to stderr. SIGTERM/SIGINT: graceful shutdown (a leader resigns with
EndQuorumEpoch, then the log is flushed and closed). Exit status 1 if the
driver failed (broken invariant, failed fsync). Timeouts default to Kafka's
(``controller.quorum.*``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence

from raftlog.clock import SystemClock
from raftlog.consensus.config import QuorumConfig, parse_voters
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, SnapshotLoad
from raftlog.net import KafkaProtocolServer
from raftlog.runtime import event_loop, wire
from raftlog.runtime.client_api import PRODUCE_KEY, PRODUCE_VERSIONS, produce_handler
from raftlog.runtime.driver import RaftDriver
from raftlog.runtime.log_adapter import SegmentReplicatedLog
from raftlog.runtime.quorum_state_store import QuorumStateStore
from raftlog.runtime.transport import KafkaTransport, raft_handlers

__all__ = ("CounterStateMachine", "main", "run_node")

log = logging.getLogger("raftlog.node")


class CounterStateMachine:
    """Counts committed values and hashes their batches in order; snapshots that pair.

    ``on_snapshot_due(end_offset, epoch, data)`` is called after every
    ``snapshot_every`` committed records (0: never).
    """

    def __init__(self, snapshot_every: int = 0) -> None:
        self.count = 0
        self.digest = hashlib.sha256()
        self.applied_offset = 0  # next offset to apply
        self.snapshot_every = snapshot_every
        self._since_snapshot = 0
        self.snapshot_due: tuple[int, int, bytes] | None = None

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.applied_offset = batch.last_offset + 1
        if batch.is_control:
            return
        records = batch.last_offset - batch.base_offset + 1
        self.count += records
        # Replicas hold the leader's batches byte for byte, so hashing whole
        # batches gives every replica the same digest, without decoding each
        # record (as the simulator's state machine does).
        self.digest.update(batch.data)
        self._since_snapshot += records
        if self.snapshot_every and self._since_snapshot >= self.snapshot_every:
            self._since_snapshot = 0
            self.snapshot_due = (self.applied_offset, batch.epoch, self.encode())

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        state = json.loads(snapshot.data)
        self.count = int(state["count"])
        # A hash object cannot be restored from a hex digest: chain from it.
        self.digest = hashlib.sha256(bytes.fromhex(state["digest"]))
        self.applied_offset = snapshot.snapshot_id.end_offset
        log.info("loaded snapshot %s (count %d)", snapshot.snapshot_id, self.count)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        log.info("leader is now %s in epoch %d", leader.leader_id, leader.epoch)

    def encode(self) -> bytes:
        return json.dumps({"count": self.count, "digest": self.digest.hexdigest()}).encode()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m raftlog.runtime.node", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument(
        "--voters", required=True, help="controller.quorum.voters: id@host:port,..."
    )
    parser.add_argument("--dir", required=True, help="log directory (created if missing)")
    parser.add_argument("--listen", help="host:port to serve on (default: this voter's entry)")
    parser.add_argument("--cluster-id", default=None)
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--election-backoff-max-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000)
    parser.add_argument("--request-timeout-ms", type=int, default=2000)
    parser.add_argument("--append-linger-ms", type=int, default=25)
    parser.add_argument("--fetch-max-wait-ms", type=int, default=500)
    parser.add_argument("--snapshot-every-records", type=int, default=0)
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


Workload = Callable[[RaftDriver], Awaitable[None]]
"""Extra code run inside the node next to its driver (benchmarks: an
in-process proposer, as pysyncobj's benchmark proposes in its leader)."""


async def run_node(args: argparse.Namespace, *, workload: Workload | None = None) -> int:
    """Run until SIGTERM/SIGINT (0) or a driver failure (1).

    ``workload(driver)``, if given, runs as a task once the driver started;
    it is cancelled at shutdown and its failure is logged, not fatal.
    """
    voters = parse_voters(args.voters)
    addresses = {v.node_id: (v.host, v.port) for v in voters}
    if args.listen:
        host, _, port_text = args.listen.rpartition(":")
        listen = (host, int(port_text))
    elif args.node_id in addresses:
        listen = addresses[args.node_id]
    else:
        raise SystemExit("an observer needs --listen host:port")
    config = QuorumConfig(
        voters=frozenset(addresses),
        election_timeout_ms=args.election_timeout_ms,
        election_backoff_max_ms=args.election_backoff_max_ms,
        fetch_timeout_ms=args.fetch_timeout_ms,
        request_timeout_ms=args.request_timeout_ms,
        append_linger_ms=args.append_linger_ms,
        fetch_max_wait_ms=args.fetch_max_wait_ms,
        voter_addresses=voters,
    )
    clock = SystemClock()
    os.makedirs(args.dir, exist_ok=True)
    replicated_log = SegmentReplicatedLog.open(args.dir, clock=clock)
    store = QuorumStateStore(args.dir, voters=addresses, cluster_id=args.cluster_id)
    stored = store.read()
    machine = CounterStateMachine(args.snapshot_every_records)
    core = KRaftCore(
        node_id=args.node_id,
        config=config,
        log=replicated_log,
        rng=random.Random(),
        stored=stored,
        now_ms=clock.wall_ms(),
    )
    endpoints = {v.node_id: wire.Endpoint(v.node_id, v.host, v.port) for v in voters}
    transport = KafkaTransport(
        local_id=args.node_id,
        addresses=addresses,
        request_timeout_ms=config.request_timeout_ms,
        fetch_max_wait_ms=config.fetch_max_wait_ms,
        cluster_id=args.cluster_id,
        local_endpoint=endpoints.get(args.node_id),
    )
    driver = RaftDriver(
        core=core,
        log=replicated_log,
        state_store=store,
        transport=transport,
        clock=clock,
        listener=machine,
        inline_follower_fsync=True,  # this loop serves the quorum only
    )
    handlers = raft_handlers(driver, cluster_id=args.cluster_id, endpoints=endpoints)
    handlers[PRODUCE_KEY] = produce_handler(driver, endpoints)
    supported = dict(wire.SUPPORTED_VERSIONS)
    supported[PRODUCE_KEY] = PRODUCE_VERSIONS
    server = KafkaProtocolServer(
        listen[0], listen[1], handlers, supported=supported, max_in_flight_per_connection=1000
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    driver.start()
    await server.start()
    log.info(
        "node %d serving on %s:%d (%s), log %s, stored state %s",
        args.node_id,
        listen[0],
        server.port,
        "voter" if args.node_id in addresses else "observer",
        args.dir,
        stored,
    )
    snapshots = asyncio.create_task(_snapshot_loop(driver, machine, stop))
    extra = asyncio.create_task(_run_workload(workload, driver))
    stopped = asyncio.create_task(stop.wait())
    finished = asyncio.ensure_future(driver.wait_stopped())
    await asyncio.wait({stopped, finished}, return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if driver.failure is not None:
        log.critical("driver failed: %r; exiting", driver.failure)
        status = 1
    log.info("node %d shutting down", args.node_id)
    snapshots.cancel()
    extra.cancel()
    await driver.stop(resign=status == 0)
    server.close()
    await server.wait_closed()
    replicated_log.close()
    for task in (stopped, finished):
        task.cancel()
    await asyncio.gather(stopped, finished, snapshots, extra, return_exceptions=True)
    log.info("node %d stopped", args.node_id)
    return status


async def _run_workload(workload: Workload | None, driver: RaftDriver) -> None:
    if workload is None:
        return
    try:
        await workload(driver)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("workload failed")


async def _snapshot_loop(
    driver: RaftDriver, machine: CounterStateMachine, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        await asyncio.sleep(0.05)
        due, machine.snapshot_due = machine.snapshot_due, None
        if due is None:
            continue
        end_offset, epoch, data = due
        try:
            snapshot_id = await driver.create_snapshot(end_offset, data, epoch)
            log.info("created snapshot %s", snapshot_id)
        except Exception as exc:  # e.g. not above the log start yet: try next time
            log.warning("snapshot at %d failed: %s", end_offset, exc)


def main(argv: Sequence[str] | None = None, *, workload: Workload | None = None) -> int:
    """Parse ``argv`` (default: sys.argv) and run the node (see `run_node`)."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s node{args.node_id} %(levelname)s %(name)s: %(message)s",
    )
    return event_loop.run(run_node(args, workload=workload))


if __name__ == "__main__":
    sys.exit(main())
