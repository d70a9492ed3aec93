"""Metadata benchmark (issue 4 §6): topic creation, sizes, RSS, controller failover.

    .venv/bin/python bench/metadata_bench.py [--topics 1000] [--partitions 10] [--batch 100]

Starts 3 combined nodes (``process.roles=broker,controller``, Kafka's default
timeouts) with `raftlog server start` on loopback
(`data_plane.local_cluster`), waits for the three
brokers to be registered and unfenced, then:

- creates ``--topics`` topics x ``--partitions`` partitions, RF 3, with
  CreateTopics requests of ``--batch`` topics each, sent to the active
  controller through the broker's own `QuorumControllerChannel` (which
  follows NOT_CONTROLLER); reports the time;
- reports the metadata log size (segments) and the newest snapshot size on
  the active controller (snapshots every 256 KiB of records here);
- reports each node's RSS (``/proc/PID/status`` VmRSS) idle, before the
  topics, and with them;
- SIGKILLs the active controller and times until a CreateTopics to the
  survivors succeeds (failover as a client sees it).

Prints the figures and one summary line per goal (10,000 partitions in
< 60 s; RSS < 1 GiB; failover < 2.5 s). It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.describe_cluster.v2 import request as dc_req
from kio.schema.describe_cluster.v2 import response as dc_resp
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from data_plane.broker.controller_channel import QuorumControllerChannel
from data_plane.local_cluster import COMBINED, ClusterLayout, LocalCluster
from raftlog.net.errors import ErrorCode

NODES = (1, 2, 3)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dir_bytes(path: Path, suffix: str) -> int:
    return sum(f.stat().st_size for f in path.glob(f"*{suffix}"))


def make_cluster(root: Path) -> LocalCluster:
    """Three combined nodes on free ports, Kafka's default timeouts, formatted."""
    layout = ClusterLayout.build(
        (COMBINED,) * len(NODES),
        base_port=None,
        properties={"metadata.log.max.record.bytes.between.snapshots": str(256 * 1024)},
    )
    cluster = LocalCluster(root, layout)
    cluster.write_configs()
    cluster.format()
    return cluster


def metadata_dir(cluster: LocalCluster, node_id: int) -> Path:
    return cluster.data_dir(node_id) / "__cluster_metadata-0"


def create_request(names: list[str], partitions: int) -> ct_req.CreateTopicsRequest:
    return ct_req.CreateTopicsRequest(
        topics=tuple(
            ct_req.CreatableTopic(name=TopicName(n), num_partitions=i32(partitions),
                                  replication_factor=i16(3), assignments=(), configs=())
            for n in names
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        validate_only=False,
    )


async def create(channel: QuorumControllerChannel, names: list[str], partitions: int) -> None:
    response = await channel.send(create_request(names, partitions), timeout_ms=60_000)
    assert isinstance(response, ct_resp.CreateTopicsResponse)
    bad = [(t.name, ErrorCode(int(t.error_code)).name) for t in response.topics
           if t.error_code != ErrorCode.none]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad[:3]}")


async def wait_brokers(channel: QuorumControllerChannel, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    request = dc_req.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                            include_fenced_brokers=True)
    while time.monotonic() < deadline:
        try:
            response = await channel.send(request, timeout_ms=2000)
            assert isinstance(response, dc_resp.DescribeClusterResponse)
            if sum(1 for b in response.brokers if not b.is_fenced) >= count:
                return
        except TimeoutError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("brokers never registered")


async def run(args: argparse.Namespace, root: Path) -> None:
    cluster = make_cluster(root)
    cluster.start_all()
    addresses = {n.node_id: ("127.0.0.1", n.controller_port)
                 for n in cluster.layout.controllers if n.controller_port is not None}
    channel = QuorumControllerChannel(addresses, lambda: None, request_timeout_ms=30_000)
    try:
        started = time.monotonic()
        await wait_brokers(channel, 3, 60)
        print(f"cluster up, 3 brokers unfenced in {time.monotonic() - started:.1f} s")
        await asyncio.sleep(2)
        idle = {n: rss_mib(cluster.pid(n)) for n in NODES}

        total = args.topics * args.partitions
        started = time.monotonic()
        for first in range(0, args.topics, args.batch):
            names = [f"bench-{i:05d}" for i in range(first, min(first + args.batch, args.topics))]
            await create(channel, names, args.partitions)
        create_s = time.monotonic() - started
        print(f"created {args.topics} topics x {args.partitions} partitions (RF 3) = "
              f"{total} partitions in {create_s:.1f} s ({total / create_s:.0f} partitions/s)")
        await asyncio.sleep(3)  # let snapshots be written and memory settle
        loaded = {n: rss_mib(cluster.pid(n)) for n in NODES}
        active = channel.active_controller_id or 1
        mdir = metadata_dir(cluster, active)
        log_bytes = dir_bytes(mdir, ".log")
        snapshots = sorted(mdir.glob("*.checkpoint"))
        snapshot_bytes = snapshots[-1].stat().st_size if snapshots else 0
        print(f"metadata log on node {active}: {log_bytes / 1024:.0f} KiB in segments; "
              f"newest snapshot {snapshot_bytes / 1024:.0f} KiB "
              f"({len(snapshots)} snapshot(s))")
        for n in NODES:
            print(f"node {n} RSS: idle {idle[n]:.0f} MiB, with {total} partitions "
                  f"{loaded[n]:.0f} MiB")

        # Failover: SIGKILL the active controller; time until CreateTopics succeeds.
        survivors = {n: a for n, a in addresses.items() if n != active}
        after = QuorumControllerChannel(survivors, lambda: None, request_timeout_ms=5000,
                                        retry_backoff_ms=20)
        killed_at = time.monotonic()
        os.kill(cluster.pid(active), signal.SIGKILL)
        await create(after, ["after-failover"], 1)
        failover_s = time.monotonic() - killed_at
        await after.close()
        print(f"failover: SIGKILL of controller {active} -> CreateTopics answered by "
              f"{after.active_controller_id} in {failover_s * 1000:.0f} ms")

        peak = max(loaded.values())
        print(f"GOAL 10k partitions < 60 s: {'PASS' if total >= 10_000 and create_s < 60 else 'FAIL'}"
              f" ({total} in {create_s:.1f} s)")
        print(f"GOAL node RSS < 1 GiB: {'PASS' if peak < 1024 else 'FAIL'} (max {peak:.0f} MiB)")
        print(f"GOAL failover < 2.5 s: {'PASS' if failover_s < 2.5 else 'FAIL'} "
              f"({failover_s:.2f} s)")
    finally:
        await channel.close()
        cluster.stop(timeout_s=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--dir", default=None, help="keep the cluster's files here")
    args = parser.parse_args()
    if args.dir:
        root = Path(args.dir)
        root.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args, root))
    else:
        with tempfile.TemporaryDirectory(prefix="metadata-bench-") as tmp:
            asyncio.run(run(args, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
