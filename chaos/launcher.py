"""Node processes for `chaos.db.ChaosDB`: `data_plane.local_cluster`'s
launcher with a per-node command prefix and env, and, for the netns mode, a
probe that asks every node at its own address.

`LocalCluster` probes every listener at one ``layout.host``; in the netns
mode each node has its own address (``10.77.x.i``, same ports everywhere),
so `NetnsCluster` overrides `probe_async` and `wait_topic_async` with the
same questions (DescribeQuorum and DescribeCluster to the controllers,
Metadata to every broker) sent per node. Everything else (format, start by
PID, `wait_ready_async`, kill/pause/resume) is the launcher's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from kio.schema.describe_cluster.v2 import request as dc_req
from kio.schema.describe_cluster.v2 import response as dc_resp
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import TopicName

from data_plane.local_cluster import (
    SERVER_CLI,
    ClusterLayout,
    ClusterStatus,
    LocalCluster,
    LocalClusterError,
    probe_client,
    send_or_none,
)
from raftlog.consensus.messages import DescribeQuorumRequest
from raftlog.net.errors import ErrorCode
from raftlog.runtime import wire


class ChaosCluster(LocalCluster):
    """`LocalCluster` whose processes get extra env and a command prefix
    (``ip netns exec <ns>``, which execs: the PID is the node's own)."""

    def __init__(
        self,
        directory: Path,
        layout: ClusterLayout,
        prefixes: Mapping[int, list[str]] | None = None,
    ) -> None:
        super().__init__(directory, layout)
        self.prefixes = dict(prefixes or {})
        self.envs: dict[int, dict[str, str]] = {}

    def start(self, node_id: int) -> int:
        if self.is_alive(node_id):
            raise LocalClusterError(f"node {node_id} is already running")
        self.node_dir(node_id).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.envs.get(node_id, {})}
        with open(self.log_path(node_id), "ab") as out:
            proc = subprocess.Popen(
                [*self.prefixes.get(node_id, []), *SERVER_CLI, str(self.config_path(node_id))],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                env=env,
            )
        self._procs[node_id] = proc
        self.pids[node_id] = proc.pid
        self._save()
        return proc.pid


class NetnsCluster(ChaosCluster):
    """Nodes each at their own address (``hosts``: node id -> address)."""

    def __init__(
        self,
        directory: Path,
        layout: ClusterLayout,
        prefixes: Mapping[int, list[str]],
        hosts: Mapping[int, str],
    ) -> None:
        super().__init__(directory, layout, prefixes)
        self.hosts = dict(hosts)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.hosts[n.node_id]}:{n.kafka_port}" for n in self.layout.brokers)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(
            f"{self.hosts[n.node_id]}:{n.controller_port}" for n in self.layout.controllers
        )

    async def probe_async(self, timeout_ms: int = 1500) -> ClusterStatus:
        alive = frozenset(n.node_id for n in self.layout.nodes if self.is_alive(n.node_id))
        paused = frozenset(n for n in alive if self.is_paused(n))
        up = alive - paused
        quorum: dq_resp.PartitionData | None = None
        cluster: dc_resp.DescribeClusterResponse | None = None
        for node in self.layout.controllers:
            if node.node_id not in up or node.controller_port is None:
                continue
            async with probe_client(self.hosts[node.node_id], node.controller_port, timeout_ms,
                                    client_id_prefix="raftlog-chaos",
                                    security=self.controller_security) as c:
                if quorum is None:
                    r = await send_or_none(
                        c, wire.encode_request(DescribeQuorumRequest(), destination=-1), 2
                    )
                    if isinstance(r, dq_resp.DescribeQuorumResponse) and (
                        r.error_code == ErrorCode.none
                        and r.topics[0].partitions[0].error_code == ErrorCode.none
                    ):
                        quorum = r.topics[0].partitions[0]
                if cluster is None:
                    r = await send_or_none(
                        c,
                        dc_req.DescribeClusterRequest(
                            include_cluster_authorized_operations=False, include_fenced_brokers=True
                        ),
                        2,
                    )
                    if isinstance(r, dc_resp.DescribeClusterResponse) and (
                        r.error_code == ErrorCode.none
                    ):
                        cluster = r
            if quorum is not None and cluster is not None:
                break
        broker_ids = {n.node_id for n in self.layout.brokers}
        metadata_ok = set()
        for node in self.layout.brokers:
            if node.node_id not in up or node.kafka_port is None:
                continue
            async with probe_client(self.hosts[node.node_id], node.kafka_port, timeout_ms,
                                    client_id_prefix="raftlog-chaos",
                                    security=self.client_security) as c:
                r = await send_or_none(
                    c,
                    md_req.MetadataRequest(
                        topics=(),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    ),
                    12,
                )
                if (
                    isinstance(r, md_resp.MetadataResponse)
                    and {int(b.node_id) for b in r.brokers} >= broker_ids & alive
                ):
                    metadata_ok.add(node.node_id)
        return ClusterStatus(
            leader_id=int(quorum.leader_id) if quorum is not None else -1,
            leader_epoch=int(quorum.leader_epoch) if quorum is not None else -1,
            high_watermark=int(quorum.high_watermark) if quorum is not None else -1,
            voters=tuple(sorted(int(v.replica_id) for v in quorum.current_voters))
            if quorum is not None
            else (),
            observers=tuple(sorted(int(o.replica_id) for o in quorum.observers))
            if quorum is not None
            else (),
            unfenced=frozenset(int(b.broker_id) for b in cluster.brokers if not b.is_fenced)
            if cluster is not None
            else frozenset(),
            fenced=frozenset(int(b.broker_id) for b in cluster.brokers if b.is_fenced)
            if cluster is not None
            else frozenset(),
            metadata_ok=frozenset(metadata_ok),
            alive=alive,
            paused=paused,
        )

    async def wait_topic_async(self, topic: str, partitions: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = [n for n in self.layout.brokers if self.is_alive(n.node_id)]
        while pending:
            node = pending[0]
            assert node.kafka_port is not None
            async with probe_client(self.hosts[node.node_id], node.kafka_port, 2000,
                                    client_id_prefix="raftlog-chaos",
                                    security=self.client_security) as c:
                r = await send_or_none(
                    c,
                    md_req.MetadataRequest(
                        topics=(
                            md_req.MetadataRequestTopic(
                                topic_id=uuid.UUID(int=0), name=TopicName(topic)
                            ),
                        ),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    ),
                    12,
                )
            if isinstance(r, md_resp.MetadataResponse) and any(
                t.name == topic
                and t.error_code == ErrorCode.none
                and len(t.partitions) == partitions
                and all(int(p.leader_id) >= 0 for p in t.partitions)
                for t in r.topics
            ):
                pending.pop(0)
                continue
            if time.monotonic() >= deadline:
                raise LocalClusterError(
                    f"topic {topic} not visible with leaders on broker {node.node_id} "
                    f"after {timeout_s:.0f} s"
                )
            await asyncio.sleep(0.1)

