"""What the runner and nemeses need from a cluster: the `DB` protocol, and
`ChaosDB`, its implementation on real ``raftlog`` node processes.

Jepsen's ``jepsen.db`` (setup/teardown, plus ``Kill``, ``Pause`` and
``Primary`` capabilities). `ChaosDB` drives a `data_plane.local_cluster`
cluster (a process launcher: configs, format, start by PID, readiness) and
reaches nodes only through processes, files and the network
(ARCHITECTURE.md): it never imports node internals.

Two network modes; `pick_mode` takes netns when the machine allows it
(`chaos.nemesis.netns.availability`) and says which:

**proxy** (loopback, no privileges). Every node-to-node link goes through
its own `chaos.nemesis.proxy.LinkProxy`, so one directed link can be cut
without touching the others. Two `ProxyNet`s: one in front of the
controller listeners (Raft quorum traffic *and* the broker-to-controller
channel: heartbeats, AlterPartition, forwarding), one in front of the Kafka
listeners (replica fetches, transaction markers). Each node gets its own
peer-address map:

- ``controller.quorum.voters`` of node ``a`` lists every other voter ``b`` at
  the address of proxy ``a -> b`` (its own entry at its real listener).
- Replica fetchers find a leader through the leader's *registered*
  endpoints, which every broker sees alike; the per-link trick is listener
  names. Node ``a`` declares one listener ``R<x>`` per node ``x`` (own port
  each), ``R<a>`` first: a broker's first non-controller listener is its
  inter-broker one, so node ``a`` fetches from leader ``b`` at ``b``'s
  ``R<a>`` endpoint, which ``b`` advertises as the address of proxy
  ``a -> b``. The client listener ``PLAINTEXT`` is listed after and is not
  proxied: clients (the runner) are never partitioned, as in Jepsen, where
  they run on the control node.

**netns** (root). One network namespace per node behind a bridge
(`chaos.nemesis.netns.NetnsNet`), one address per node, cuts by nftables in
the receiving namespace; every node listens on the same ports at its own
address, advertises that address, and is ``exec``'d under ``ip netns exec``
(which execs: the PID the launcher records is the node's own, so kill,
pause and restart signal the node, not a wrapper). The runner and its Kafka
clients stay in the root namespace and reach the nodes through a host-side
veth into the bridge; readiness is polled per node address
(`chaos.launcher.NetnsCluster`).

**TLS** (``tls=True``). Every listener, the controllers' and the proxied
replication ones included, is SSL with ``ssl.client.auth=required``:
`make_tls` writes a throwaway CA (`raftlog.security.dev_pki`), one broker
certificate valid for every node address (each node also presents it as
a client, to its peers and controllers, which check the host name), and a
client certificate for the workload (`endpoint`). The faults are the same;
they now also cut connections mid-handshake.

**Disks.** With ``disk_bytes`` every node's data dir is its own tmpfs of that
size (root), so the disk-full fault fills one node's disk only; `release`
copies them to ``<node dir>/data-final`` and unmounts them once the
divergence check has read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from chaos.client import ClientTls, Endpoint
from chaos.launcher import ChaosCluster, NetnsCluster
from chaos.nemesis import netns, process
from chaos.nemesis.grudges import Link, Node
from chaos.nemesis.proxy import ProxyNet
from data_plane.local_cluster import (
    ClusterLayout,
    NodeLayout,
    Timeouts,
)
from raftlog.runtime.local_quorum import free_ports
from raftlog.security import dev_pki


class DB(Protocol):
    """A cluster of node processes under test.

    Contracts: every method is idempotent where a nemesis heal may repeat it
    (`start_node` on a running node, `resume_node` on a running node and
    `kill_node` on a dead one are no-ops). ``extra_env`` on start carries
    fault settings for the new process (libfaketime, the lossy-storage flag).
    """

    @property
    def nodes(self) -> Sequence[Node]: ...

    async def setup(self) -> None:
        """Format data dirs, start all nodes, wait until the cluster is ready."""

    async def teardown(self) -> None:
        """Stop every process and release namespaces/proxies; keep data dirs."""

    async def start_node(
        self, node: Node, extra_env: Mapping[str, str] | None = None, *, lose_unsynced: bool = False
    ) -> None:
        """Start a stopped node; with ``lose_unsynced`` first drop the bytes it
        never fsynced, as a power cut would (only for nodes running lossy)."""
        ...

    async def fully_replicated(self, topic: str) -> bool:
        """Whether every partition of ``topic`` has its whole replica set in its ISR."""
        ...

    async def stop_node(self, node: Node) -> None:
        """Graceful stop (SIGTERM, wait)."""

    async def kill_node(self, node: Node) -> None:
        """SIGKILL."""

    async def pause_node(self, node: Node) -> None:
        """SIGSTOP."""

    async def resume_node(self, node: Node) -> None:
        """SIGCONT."""

    def pid(self, node: Node) -> int | None: ...

    def data_dir(self, node: Node) -> Path: ...

    def partition_log_dir(self, node: Node, topic: str, partition: int) -> Path:
        """Directory of one partition's segments on one node (for divergence checks)."""

    def bootstrap_servers(self) -> str:
        """``host:port,...`` for Kafka clients, as seen from the runner."""

    def endpoint(self) -> Endpoint:
        """The bootstrap servers and how clients connect (TLS files)."""
        ...

    def fill_disk(self, node: Node) -> int:
        """Fill ``node``'s data-dir file system (writes get ENOSPC); bytes used."""
        ...

    def free_disk(self, node: Node) -> None:
        """Undo `fill_disk` (idempotent)."""

    async def leader(self, topic: str, partition: int) -> Node | None:
        """The partition leader per the cluster metadata (Kafka Metadata API)."""

    async def controller(self) -> Node | None:
        """The active controller (KRaft quorum leader)."""


MODES = ("proxy", "netns")
NETNS_KAFKA_PORT = 9092
NETNS_CONTROLLER_PORT = 9093


def pick_mode(requested: str = "auto") -> tuple[str, str]:
    """(mode, why). ``auto`` takes netns when the machine allows it (root,
    and a scratch namespace with a bridge and an nft table really works:
    `netns.availability`), else the loopback proxy mode, and says why.
    ``netns`` raises RuntimeError naming what is missing."""
    if requested == "proxy":
        return "proxy", "requested: loopback per-link TCP proxies"
    reason = netns.availability()
    if requested == "netns":
        if reason is not None:
            raise RuntimeError(f"netns mode unavailable: {reason}")
        return "netns", "requested: a network namespace per node, nftables partitions"
    if requested != "auto":
        raise ValueError(f"mode must be auto or one of {MODES}")
    if reason is None:
        return "netns", (
            "auto: root and network namespaces work here; a namespace per node, nftables partitions"
        )
    return "proxy", f"auto: netns unavailable ({reason}); loopback per-link TCP proxies"


def node_name(node_id: int) -> Node:
    return f"n{node_id}"


def node_id(node: Node) -> int:
    return int(node.lstrip("n"))


class _BothNets:
    """Cuts the same links on the controller and the Kafka proxy nets."""

    def __init__(self, *nets: ProxyNet) -> None:
        self.nets = nets

    async def setup(self) -> None:
        return None  # the db sets the proxies up before writing configs

    async def cut(self, cut_links: frozenset[Link]) -> None:
        for net in self.nets:
            await net.cut(cut_links)

    async def heal(self) -> None:
        for net in self.nets:
            await net.heal()

    async def teardown(self) -> None:
        return None  # the db owns the proxies (they must outlive the nemesis)


class _NetnsBackend:
    def __init__(self, net: netns.NetnsNet) -> None:
        self.net = net

    async def setup(self) -> None:
        return None

    async def cut(self, cut_links: frozenset[Link]) -> None:
        await self.net.cut(cut_links)

    async def heal(self) -> None:
        await self.net.heal()

    async def teardown(self) -> None:
        return None


class ChaosDB:
    """`DB` on ``n`` combined (broker + controller) nodes; see the module doc."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        n_nodes: int = 3,
        *,
        mode: str = "proxy",
        properties: Mapping[str, str] | None = None,
        timeouts: Timeouts | None = None,
        ready_timeout_s: float = 60.0,
        node_env: Mapping[Node, Mapping[str, str]] | None = None,
        disk_bytes: int | None = None,
        tls: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.directory = Path(directory).resolve()
        self.n = n_nodes
        self.mode = mode
        self.properties = {
            "min.insync.replicas": "2",
            "auto.create.topics.enable": "false",
            "unclean.leader.election.enable": "false",
            "default.replication.factor": str(min(3, n_nodes)),
            **(properties or {}),
        }
        self.timeouts = timeouts or Timeouts.fast()
        self.ready_timeout_s = ready_timeout_s
        self.node_env = {k: dict(v) for k, v in (node_env or {}).items()}
        self._nodes = tuple(node_name(i) for i in range(1, n_nodes + 1))
        self.ctrl_net: ProxyNet | None = None
        self.kafka_net: ProxyNet | None = None
        self.ns_net: netns.NetnsNet | None = None
        self.cluster: ChaosCluster | None = None
        # Per-node tmpfs data dirs of this size (root), for the disk-full fault.
        self.disk_bytes = disk_bytes
        self._mounts: list[Path] = []
        self.net: _BothNets | _NetnsBackend | None = None  # a core.NetBackend
        self.tls = tls
        self.client_tls: ClientTls | None = None  # made with the layout

    @property
    def nodes(self) -> Sequence[Node]:
        return self._nodes

    def _c(self) -> ChaosCluster:
        if self.cluster is None:
            raise RuntimeError("db not set up")
        return self.cluster

    # --- setup ---------------------------------------------------------------------

    async def _proxy_layout(self) -> ClusterLayout:
        host = "127.0.0.1"
        base = ClusterLayout.build(
            ("broker,controller",) * self.n,
            base_port=None,
            host=host,
            timeouts=self.timeouts,
            properties=self.properties,
        )
        by_name = {node_name(n.node_id): n for n in base.nodes}

        def addr(port: int | None) -> tuple[str, int]:
            assert port is not None
            return (host, port)

        self.ctrl_net = ProxyNet({k: addr(n.controller_port) for k, n in by_name.items()})
        self.kafka_net = ProxyNet({k: addr(n.kafka_port) for k, n in by_name.items()})
        await self.ctrl_net.setup()
        await self.kafka_net.setup()
        repl = iter(free_ports(self.n * self.n, host))
        node_props: dict[int, dict[str, str]] = {}
        for a in base.nodes:
            na = node_name(a.node_id)
            voters = []
            for b in base.nodes:
                nb = node_name(b.node_id)
                h, p = addr(b.controller_port) if na == nb else self.ctrl_net.address(na, nb)
                voters.append(f"{b.node_id}@{h}:{p}")
            order = [a, *(x for x in base.nodes if x is not a)]
            listeners, advertised = [], []
            for x in order:
                nx = node_name(x.node_id)
                port = next(repl)
                listeners.append(f"R{x.node_id}://{host}:{port}")
                # x reaches a's R<x> listener through proxy x -> a.
                h, p = (host, port) if nx == na else self.kafka_net.address(nx, na)
                advertised.append(f"R{x.node_id}://{h}:{p}")
            listeners += [
                f"PLAINTEXT://{host}:{a.kafka_port}",
                f"CONTROLLER://{host}:{a.controller_port}",
            ]
            advertised.append(f"PLAINTEXT://{host}:{a.kafka_port}")
            node_props[a.node_id] = {
                "controller.quorum.voters": ",".join(voters),
                "listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
            }
        self.net = _BothNets(self.ctrl_net, self.kafka_net)
        listeners = [f"R{n.node_id}" for n in base.nodes] + ["PLAINTEXT", "CONTROLLER"]
        return ClusterLayout(base.nodes, host, self.timeouts,
                             {**self.properties, **self._tls_properties([host], listeners)},
                             node_props)

    async def _netns_layout(self) -> tuple[ClusterLayout, dict[int, list[str]], dict[int, str]]:
        net = netns.NetnsNet(list(self._nodes))
        self.ns_net = net  # before setup: teardown must find a half-made net
        await net.setup()
        self.net = _NetnsBackend(net)
        kafka, ctrl = NETNS_KAFKA_PORT, NETNS_CONTROLLER_PORT
        ids = range(1, self.n + 1)
        hosts = {i: net.address(node_name(i)) for i in ids}
        nodes = tuple(NodeLayout(i, "broker,controller", kafka, ctrl) for i in ids)
        voters = ",".join(f"{i}@{hosts[i]}:{ctrl}" for i in ids)
        # Listeners bind the namespace address, and that is what each node
        # advertises (Kafka: advertised.listeners defaults to listeners).
        props = {
            i: {
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{hosts[i]}:{kafka},CONTROLLER://{hosts[i]}:{ctrl}",
                "advertised.listeners": f"PLAINTEXT://{hosts[i]}:{kafka}",
            }
            for i in ids
        }
        properties = {**self.properties,
                      **self._tls_properties(list(hosts.values()), ["PLAINTEXT", "CONTROLLER"])}
        layout = ClusterLayout(nodes, hosts[1], self.timeouts, properties, props)
        return layout, {i: net.exec_prefix(node_name(i)) for i in ids}, hosts

    def _tls_properties(self, hosts: Sequence[str], listeners: Sequence[str]) -> dict[str, str]:
        """For a TLS run: the PKI (written under the cluster directory), and
        every listener SSL with client certificates required; else nothing."""
        if not self.tls:
            return {}
        pki = dev_pki.make_pki(self.directory / "pki", servers=("broker",), clients=("chaos",),
                               hosts=hosts)
        client = pki.identities["chaos"]
        self.client_tls = ClientTls(ca=pki.ca_pem, certificate=client.cert_pem,
                                    key=client.key_pem, pem=client.pem)
        return {
            "listener.security.protocol.map": ",".join(f"{name}:SSL" for name in listeners),
            **pki.keystore_settings("broker"),
            **pki.truststore_settings(),
            "ssl.client.auth": "required",
        }

    async def setup(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            cluster: ChaosCluster
            if self.mode == "proxy":
                cluster = ChaosCluster(self.directory, await self._proxy_layout())
            else:
                layout, prefixes, hosts = await self._netns_layout()
                cluster = NetnsCluster(self.directory, layout, prefixes, hosts)
            cluster.envs = {node_id(k): v for k, v in self.node_env.items()}
            self.cluster = cluster
            if self.disk_bytes is not None:
                for n in cluster.layout.nodes:
                    d = cluster.data_dir(n.node_id)
                    d.mkdir(parents=True, exist_ok=True)
                    process.mount_tmpfs(d, self.disk_bytes)
                    self._mounts.append(d)
            cluster.write_configs()
            cluster.format()
            for n in cluster.layout.nodes:
                cluster.start(n.node_id)
            await self.wait_ready()
        except BaseException:
            await self.teardown()
            await self.release()
            raise

    async def wait_ready(self, timeout_s: float | None = None) -> None:
        """Poll until the quorum has a leader and every broker is unfenced and
        answers Metadata (at its own address in netns mode)."""
        await self._c().wait_ready_async(timeout_s or self.ready_timeout_s)

    async def wait_topic(self, topic: str, partitions: int, timeout_s: float = 20.0) -> None:
        """Until every running broker's Metadata lists ``topic`` with leaders."""
        await self._c().wait_topic_async(topic, partitions, timeout_s)

    async def teardown(self) -> None:
        """Stop every node (by PID), then remove proxies or namespaces. Keeps
        data dirs (and their tmpfs mounts, see `release`). Idempotent."""
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop, 10.0)
        for net in (self.ctrl_net, self.kafka_net):
            if net is not None:
                await net.teardown()
        if self.ns_net is not None:
            await self.ns_net.teardown()

    async def release(self) -> None:
        """Copy each per-node tmpfs data dir to ``<node dir>/data-final`` (the
        evidence stays after the run) and unmount it. Idempotent."""
        while self._mounts:
            d = self._mounts.pop()
            keep = d.parent / "data-final"
            with contextlib.suppress(OSError):
                shutil.rmtree(keep, ignore_errors=True)
                await asyncio.to_thread(
                    shutil.copytree,
                    d,
                    keep,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(process.BALLAST),
                )
            process.umount(d)

    # --- disk ------------------------------------------------------------------------

    def fill_disk(self, node: Node) -> int:
        """Fill ``node``'s data-dir tmpfs (ENOSPC from now on); the ballast size.
        Raises RuntimeError unless the db was made with ``disk_bytes``."""
        if self.disk_bytes is None:
            raise RuntimeError("disk-full needs per-node tmpfs data dirs (ChaosDB disk_bytes)")
        return process.fill_disk(self.data_dir(node), leave_bytes=0)

    def free_disk(self, node: Node) -> None:
        process.free_disk(self.data_dir(node))

    # --- processes -----------------------------------------------------------------

    async def start_node(
        self, node: Node, extra_env: Mapping[str, str] | None = None, *, lose_unsynced: bool = False
    ) -> None:
        c = self._c()
        i = node_id(node)
        if c.is_alive(i):
            return
        if extra_env is not None:
            c.envs[i] = dict(extra_env)
        # Every node of a lost-writes run keeps its .synced marks, but only a
        # lost-writes fault loses page cache: a plain SIGKILL keeps it, as on
        # a real machine. (Dropping on every restart turned each kill into a
        # power cut, and three in a row beat any single-fault promise.)
        lossy = c.envs.get(i, {}).get("RAFTLOG_CHAOS_LOSE_UNSYNCED") == "1"
        if lose_unsynced and lossy:
            drop_unsynced(c.data_dir(i))
        c.start(i)

    async def stop_node(self, node: Node) -> None:
        c = self._c()
        if c.is_alive(node_id(node)):
            await asyncio.to_thread(c.kill, node_id(node), signal.SIGTERM, 20.0)

    async def kill_node(self, node: Node) -> None:
        c = self._c()
        if c.is_alive(node_id(node)):
            await asyncio.to_thread(c.kill, node_id(node), signal.SIGKILL, 10.0)

    async def pause_node(self, node: Node) -> None:
        c = self._c()
        if c.is_alive(node_id(node)) and not c.is_paused(node_id(node)):
            c.pause(node_id(node))

    async def resume_node(self, node: Node) -> None:
        c = self._c()
        if c.is_alive(node_id(node)) and c.is_paused(node_id(node)):
            c.resume(node_id(node))

    def pid(self, node: Node) -> int | None:
        c = self._c()
        return c.pids[node_id(node)] if c.is_alive(node_id(node)) else None

    def data_dir(self, node: Node) -> Path:
        return self._c().data_dir(node_id(node))

    def partition_log_dir(self, node: Node, topic: str, partition: int) -> Path:
        return self.data_dir(node) / f"{topic}-{partition}"

    def bootstrap_servers(self) -> str:
        return self._c().bootstrap_servers

    def endpoint(self) -> Endpoint:
        return Endpoint(self.bootstrap_servers(), self.client_tls)

    async def _topic_metadata(self, topic: str) -> Any | None:
        """``topic``'s partitions from a client's Metadata, None if no answer."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(
            {
                **self.endpoint().librdkafka(),
                "log_level": 0,
                "socket.timeout.ms": 2000,
            }
        )
        try:
            md = await asyncio.to_thread(admin.list_topics, topic, timeout=2)
        except Exception:
            return None
        return md.topics.get(topic)

    async def fully_replicated(self, topic: str) -> bool:
        t = await self._topic_metadata(topic)
        if t is None or not t.partitions:
            return False
        return all(
            p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in t.partitions.values()
        )

    async def leader(self, topic: str, partition: int) -> Node | None:
        t = await self._topic_metadata(topic)
        if t is None or partition not in t.partitions or t.partitions[partition].leader < 0:
            return None
        return node_name(t.partitions[partition].leader)

    async def controller(self) -> Node | None:
        status = await self._c().probe_async()
        return node_name(status.leader_id) if status.leader_id >= 0 else None


# --- lost un-fsynced writes ------------------------------------------------------

SYNCED_SUFFIX = ".synced"


def drop_unsynced(data_dir: Path) -> list[str]:
    """Emulate a power cut on a node that was SIGKILLed: cut every segment
    back to the size its node recorded at its last fsync (``<segment>.synced``,
    written by the node when ``RAFTLOG_CHAOS_LOSE_UNSYNCED=1``), and empty
    segments never synced. Returns what was cut (for the history)."""
    cut: list[str] = []
    if not data_dir.is_dir():
        return cut
    for part in data_dir.iterdir():
        if not part.is_dir() or part.name.startswith("__cluster_metadata"):
            continue
        for seg in part.glob("*.log"):
            marker = seg.with_name(seg.name + SYNCED_SUFFIX)
            try:
                synced = int(marker.read_text().strip() or 0) if marker.exists() else 0
            except ValueError:
                synced = 0
            size = seg.stat().st_size
            if size > synced:
                with open(seg, "r+b") as f:
                    f.truncate(synced)
                cut.append(f"{part.name}/{seg.name}: {size} -> {synced}")
    return cut
