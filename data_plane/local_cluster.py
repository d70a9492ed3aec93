"""A local cluster of real node processes on loopback: the one launcher used
by ``raftlog cluster up|status|down``, the real-process tests, the
benchmarks and chaos.

`LocalCluster(directory, layout)` writes one ``server.properties`` per node
(node ids 1..N; combined ``broker,controller`` by default; the Kafka
listener of node i on ``base_port + i - 1``, its controller listener on
``controller_base_port + i - 1``; ``log.dirs`` = ``<dir>/node-<id>/data``),
formats every node's storage with one cluster id, starts ``raftlog server
start`` processes (stdout and stderr to ``<dir>/node-<id>/server.log``) and
records the layout and PIDs in ``<dir>/cluster.json``. A directory that
already holds a ``cluster.json`` is the same cluster again:
`LocalCluster.open` reads its layout and cluster id back and nothing is
reformatted (``format`` skips formatted directories).

Readiness (`wait_ready`) is what a client needs: the metadata quorum has a
leader, every broker is registered and unfenced, and every broker's
listener answers Metadata listing all brokers. Processes are handled by
PID, so another process (``raftlog cluster down``) can stop a cluster this
one started: `kill` / `pause` (SIGSTOP) / `resume` (SIGCONT) / `restart`,
and `stop` (SIGTERM, then SIGKILL after a timeout).

Errors are `LocalClusterError` with a one-line reason (a port in use names
the port; a node that exits during start-up quotes its log's last line).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from kio.schema.describe_cluster.v2 import request as dc_req
from kio.schema.describe_cluster.v2 import response as dc_resp
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import TopicName

from metadata_quorum.features import NEW_CLUSTER_FEATURES
from metadata_quorum.records import MetadataRecord
from raftlog.consensus.messages import DescribeQuorumRequest
from raftlog.net import KafkaProtocolClient
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode, TransportError
from raftlog.runtime import wire
from raftlog.runtime.local_quorum import free_ports

from .config import ConfigError, NodeConfig, load_config
from .storage_format import StorageError, format_storage, random_uuid

__all__ = (
    "COMBINED",
    "ClusterLayout",
    "ClusterStatus",
    "LocalCluster",
    "LocalClusterError",
    "NodeLayout",
    "Timeouts",
    "process_state",
    "wait_process_state",
)

COMBINED: Final = "broker,controller"
STATE_FILE: Final = "cluster.json"
SERVER_CLI: Final = (sys.executable, "-m", "data_plane", "server", "start")


class LocalClusterError(Exception):
    """A local-cluster operation failed; the message is one readable line."""


def process_state(pid: int) -> str | None:
    """The state letter from ``/proc/<pid>/stat`` (``R``, ``S``, ``T``
    stopped, ``Z`` zombie...); None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(")") + 2]


def wait_process_state(pid: int, *, stopped: bool, timeout_s: float = 5.0) -> None:
    """Wait until ``pid`` is (``stopped``) or is no longer (not ``stopped``)
    in state ``T``. A signal is delivered asynchronously: right after
    ``kill(pid, SIGSTOP)`` a process running on another CPU still reads
    ``R``. A process that is gone counts as not stopped. Raises
    `LocalClusterError` at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = process_state(pid)
        if stopped and state is None:
            raise LocalClusterError(f"pid {pid} exited instead of stopping")
        if (state == "T") == stopped:
            return
        if time.monotonic() >= deadline:
            want = "stopped" if stopped else "running"
            raise LocalClusterError(f"pid {pid} not {want} after {timeout_s} s (state {state})")
        time.sleep(0.002)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The timing settings written into every node's config (Kafka names in
    the comments). `Timeouts.fast()` suits tests: fencing in 3 s."""

    session_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_ms: int = 2000  # broker.heartbeat.interval.ms
    election_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_ms: int = 2000  # controller.quorum.fetch.timeout.ms

    @classmethod
    def fast(cls) -> Timeouts:
        return cls(session_ms=3000, heartbeat_ms=500, election_ms=1000, fetch_ms=2000)

    def properties(self) -> dict[str, str]:
        return {
            "broker.session.timeout.ms": str(self.session_ms),
            "broker.heartbeat.interval.ms": str(self.heartbeat_ms),
            "controller.quorum.election.timeout.ms": str(self.election_ms),
            "controller.quorum.fetch.timeout.ms": str(self.fetch_ms),
        }


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """One node: its roles and ports (None where the role has no listener)."""

    node_id: int
    roles: str
    kafka_port: int | None
    controller_port: int | None
    http_port: int | None = None  # http.listener (data_plane.http); None: no HTTP

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles.split(",")

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles.split(",")


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """What to run: nodes, ports, timeouts and extra ``server.properties``."""

    nodes: tuple[NodeLayout, ...]
    host: str = "127.0.0.1"
    timeouts: Timeouts = field(default_factory=Timeouts)
    # Settings written into every node's config, then per node (node id -> settings).
    properties: Mapping[str, str] = field(default_factory=dict)
    node_properties: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [n.node_id for n in self.nodes]
        if not ids or len(set(ids)) != len(ids):
            raise LocalClusterError(f"node ids must be distinct and non-empty: {ids}")
        if not any(n.is_controller for n in self.nodes):
            raise LocalClusterError("a cluster needs at least one controller")

    @classmethod
    def build(
        cls,
        roles: Sequence[str] = (COMBINED,) * 3,
        *,
        base_port: int | None = 9092,
        controller_base_port: int | None = None,
        http_base_port: int | None = None,
        host: str = "127.0.0.1",
        timeouts: Timeouts | None = None,
        properties: Mapping[str, str] | None = None,
        node_properties: Mapping[int, Mapping[str, str]] | None = None,
    ) -> ClusterLayout:
        """Nodes 1..len(roles). ``base_port=None`` picks free ports (tests);
        the controller range defaults to ``base_port + 1000``, the HTTP one
        (``http.listener``: REST, /metrics, /ui) to ``base_port + 2000``."""
        n = len(roles)
        if base_port is None:
            ports = free_ports(3 * n, host)
            kafka, controller, http = ports[:n], ports[n:2 * n], ports[2 * n:]
        else:
            first = controller_base_port if controller_base_port is not None else base_port + 1000
            first_http = http_base_port if http_base_port is not None else base_port + 2000
            kafka = [base_port + i for i in range(n)]
            controller = [first + i for i in range(n)]
            http = [first_http + i for i in range(n)]
        nodes = []
        for i, node_roles in enumerate(roles):
            names = set(node_roles.split(","))
            if not names or not names <= {"broker", "controller"}:
                raise LocalClusterError(f"unknown process.roles {node_roles!r}")
            nodes.append(NodeLayout(
                i + 1,
                ",".join(sorted(names)),
                kafka[i] if "broker" in names else None,
                controller[i] if "controller" in names else None,
                http[i],
            ))
        props = dict(properties or {})
        brokers = sum(1 for node in nodes if node.kafka_port is not None)
        if brokers < 3:
            # Kafka's single-node quickstart does the same: internal topics
            # can only be as replicated as there are brokers.
            for setting in ("offsets.topic.replication.factor",
                            "transaction.state.log.replication.factor",
                            "transaction.state.log.min.isr"):
                props.setdefault(setting, str(max(1, brokers)))
        return cls(tuple(nodes), host, timeouts or Timeouts(), props,
                   {k: dict(v) for k, v in (node_properties or {}).items()})

    def node(self, node_id: int) -> NodeLayout:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    @property
    def brokers(self) -> tuple[NodeLayout, ...]:
        return tuple(n for n in self.nodes if n.is_broker)

    @property
    def controllers(self) -> tuple[NodeLayout, ...]:
        return tuple(n for n in self.nodes if n.is_controller)

    @property
    def bootstrap_servers(self) -> str:
        """The Kafka listeners, comma-separated (what clients take)."""
        return ",".join(f"{self.host}:{n.kafka_port}" for n in self.brokers)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(f"{self.host}:{n.controller_port}" for n in self.controllers)

    def server_properties(self, node: NodeLayout, data_dir: Path) -> str:
        voters = ",".join(f"{c.node_id}@{self.host}:{c.controller_port}" for c in self.controllers)
        listeners = []
        if node.kafka_port is not None:
            listeners.append(f"PLAINTEXT://{self.host}:{node.kafka_port}")
        if node.controller_port is not None:
            listeners.append(f"CONTROLLER://{self.host}:{node.controller_port}")
        settings = {
            "node.id": str(node.node_id),
            "process.roles": node.roles,
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(data_dir),
            **({"http.listener": f"http://{self.host}:{node.http_port}"}
               if node.http_port is not None else {}),
            **self.timeouts.properties(),
            **self.properties,
            **self.node_properties.get(node.node_id, {}),
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "timeouts": asdict(self.timeouts),
            "properties": dict(self.properties),
            "node_properties": {str(k): dict(v) for k, v in self.node_properties.items()},
            "nodes": [asdict(n) for n in self.nodes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterLayout:
        return cls(
            tuple(NodeLayout(**n) for n in data["nodes"]),
            data["host"],
            Timeouts(**data["timeouts"]),
            dict(data["properties"]),
            {int(k): dict(v) for k, v in data["node_properties"].items()},
        )


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """One look at the cluster (`LocalCluster.probe`); -1 / empty when unknown."""

    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    voters: tuple[int, ...] = ()
    observers: tuple[int, ...] = ()
    unfenced: frozenset[int] = frozenset()
    fenced: frozenset[int] = frozenset()
    metadata_ok: frozenset[int] = frozenset()  # brokers whose Metadata listed every broker
    # Brokers whose own /healthz says ``running``: this process registered and
    # was unfenced. None: no broker serves HTTP, so only the controller's view counts.
    running: frozenset[int] | None = None
    alive: frozenset[int] = frozenset()  # node processes running (by PID)
    paused: frozenset[int] = frozenset()


class LocalCluster:
    """Node processes of one local cluster in ``directory`` (module doc)."""

    def __init__(self, directory: str | os.PathLike[str], layout: ClusterLayout,
                 cluster_id: str | None = None,
                 bootstrap_records: Sequence[MetadataRecord] = (),
                 features: Mapping[str, int] = NEW_CLUSTER_FEATURES) -> None:
        self.directory = Path(directory).resolve()
        self.layout = layout
        self.cluster_id = cluster_id or random_uuid()
        self.pids: dict[int, int] = {}
        # KIP-900: written into every node's bootstrap file at the first format.
        self.bootstrap_records = tuple(bootstrap_records)
        # The feature levels of the first format (storage format --feature).
        self.features = dict(features)
        # Processes started by this object (reaped with wait); others by PID only.
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        # Node configurations read for client_security and
        # controller_security: path -> ((path, mtime), config).
        self._configs: dict[str, tuple[tuple[str, int], NodeConfig]] = {}

    # --- files ---------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> LocalCluster:
        """The cluster recorded in ``directory/cluster.json``, with its PIDs."""
        path = Path(directory).resolve() / STATE_FILE
        try:
            data = json.loads(path.read_text())
            cluster = cls(directory, ClusterLayout.from_json(data["layout"]), data["cluster_id"])
            cluster.pids = {int(k): int(v) for k, v in data["pids"].items()}
        except FileNotFoundError:
            raise LocalClusterError(f"no cluster in {path.parent} ({STATE_FILE} not found)") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise LocalClusterError(f"{path} is not a cluster state file: {exc}") from None
        return cluster

    @staticmethod
    def exists(directory: str | os.PathLike[str]) -> bool:
        return (Path(directory) / STATE_FILE).is_file()

    def node_dir(self, node_id: int) -> Path:
        return self.directory / f"node-{node_id}"

    def data_dir(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "data"

    def config_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.properties"

    def log_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.log"

    def server_log(self, node_id: int) -> str:
        try:
            return self.log_path(node_id).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def bootstrap_servers(self) -> str:
        return self.layout.bootstrap_servers

    @property
    def bootstrap_controllers(self) -> str:
        return self.layout.bootstrap_controllers

    @property
    def client_security(self) -> ConnectionSecurity:
        """How a client connects to the brokers' ``kafka_port`` listener:
        as the nodes do on their inter-broker listener (its TLS settings and
        SASL credentials; PLAINTEXT when it has neither)."""
        config = self._node_config(self.layout.brokers)
        if config is None:
            return PLAINTEXT_SECURITY
        return config.security.client_security(config.inter_broker_listener_name)

    @property
    def controller_security(self) -> ConnectionSecurity:
        """How a client connects to the controllers' ``controller_port``
        listener: as the nodes themselves do."""
        config = self._node_config(self.layout.controllers)
        return PLAINTEXT_SECURITY if config is None else config.security.controller_security()

    def _node_config(self, nodes: Sequence[NodeLayout]) -> NodeConfig | None:
        """The first of ``nodes``' configuration (None before it is
        written), read again only when its properties file changes."""
        if not nodes or not self.config_path(nodes[0].node_id).is_file():
            return None
        path = self.config_path(nodes[0].node_id)
        stamp = (str(path), path.stat().st_mtime_ns)
        cached = self._configs.get(str(path))
        if cached is None or cached[0] != stamp:
            cached = (stamp, load_config(str(path), {}))
            self._configs[str(path)] = cached
        return cached[1]

    def write_configs(self) -> None:
        """Write every node's ``server.properties`` and ``cluster.json``."""
        for node in self.layout.nodes:
            self.node_dir(node.node_id).mkdir(parents=True, exist_ok=True)
            self.config_path(node.node_id).write_text(
                self.layout.server_properties(node, self.data_dir(node.node_id))
            )
        self._save()

    def format(self) -> list[str]:
        """Format every node's log directories with the cluster id (formatted
        ones are skipped: a restart never reformats). Returns those written."""
        written: list[str] = []
        for node in self.layout.nodes:
            try:
                config = load_config(str(self.config_path(node.node_id)))
                written += format_storage(config, self.cluster_id, ignore_formatted=True,
                                          bootstrap_records=self.bootstrap_records,
                                          features=self.features)
            except (ConfigError, StorageError) as exc:
                raise LocalClusterError(f"node {node.node_id}: {exc}") from None
        return written

    def _save(self) -> None:
        state = {
            "cluster_id": self.cluster_id,
            "bootstrap_servers": self.bootstrap_servers,
            "bootstrap_controllers": self.bootstrap_controllers,
            "layout": self.layout.to_json(),
            "pids": {str(k): v for k, v in sorted(self.pids.items())},
        }
        tmp = self.directory / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.directory / STATE_FILE)

    # --- processes -----------------------------------------------------------------

    def up(self, timeout_s: float = 60.0) -> ClusterStatus:
        """Write configs, format (unless formatted), start every node, wait ready."""
        self.directory.mkdir(parents=True, exist_ok=True)
        running = [n for n in self.layout.nodes if self.is_alive(n.node_id)]
        if running:
            raise LocalClusterError(
                f"the cluster in {self.directory} is already running (node "
                f"{running[0].node_id}, pid {self.pids[running[0].node_id]}); "
                "`raftlog cluster down` it first"
            )
        self.check_ports()  # before anything is written: a retry with other ports starts afresh
        self.write_configs()
        self.format()
        try:
            for node in self.layout.nodes:
                self.start(node.node_id)
            return self.wait_ready(timeout_s)
        except BaseException:
            self.stop(timeout_s=5)
            raise

    def check_ports(self, node_ids: Sequence[int] | None = None) -> None:
        """Raise naming the first listener port that cannot be bound."""
        for node in self.layout.nodes:
            if node_ids is not None and node.node_id not in node_ids:
                continue
            for what, port in (("Kafka", node.kafka_port), ("controller", node.controller_port),
                               ("HTTP", node.http_port)):
                if port is None:
                    continue
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((self.layout.host, port))
                    except OSError as exc:
                        raise LocalClusterError(
                            f"port {port} ({what} listener of node {node.node_id}) on "
                            f"{self.layout.host} is already in use: {exc.strerror}; "
                            "choose another --base-port"
                        ) from None

    def start(self, node_id: int) -> int:
        """Start node ``node_id`` (its own session: a terminal's Ctrl-C reaches
        only the launcher, which then stops the nodes in order); its PID."""
        if self.is_alive(node_id):
            raise LocalClusterError(f"node {node_id} is already running (pid {self.pids[node_id]})")
        self.node_dir(node_id).mkdir(parents=True, exist_ok=True)
        with open(self.log_path(node_id), "ab") as out:
            proc = subprocess.Popen(
                [*SERVER_CLI, str(self.config_path(node_id))],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            )
        self._procs[node_id] = proc
        self.pids[node_id] = proc.pid
        self._save()
        return proc.pid

    def start_all(self) -> None:
        for node in self.layout.nodes:
            self.start(node.node_id)

    def is_alive(self, node_id: int) -> bool:
        """Whether node ``node_id``'s recorded PID is our node process (not a
        zombie, not a recycled PID)."""
        pid = self.pids.get(node_id)
        if pid is None:
            return False
        proc = self._procs.get(node_id)
        if proc is not None:
            return proc.poll() is None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            return False
        state = process_state(pid)
        return state not in (None, "Z") and str(self.config_path(node_id)).encode() in cmdline

    def exit_code(self, node_id: int) -> int | None:
        """Node ``node_id``'s exit status if this object started it and it
        has exited; None while it runs (or if another process started it)."""
        proc = self._procs.get(node_id)
        return None if proc is None else proc.poll()

    def is_paused(self, node_id: int) -> bool:
        pid = self.pids.get(node_id)
        return pid is not None and process_state(pid) == "T"

    def pid(self, node_id: int) -> int:
        if not self.is_alive(node_id):
            raise LocalClusterError(f"node {node_id} is not running")
        return self.pids[node_id]

    def send_signal(self, node_id: int, sig: int) -> None:
        os.kill(self.pid(node_id), sig)

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout_s: float = 20.0) -> int | None:
        """Send ``sig`` and wait for the exit; the exit code when this object
        started the node (else None). Raises if it is still alive at the timeout."""
        pid = self.pid(node_id)
        if self.is_paused(node_id) and sig != signal.SIGKILL:
            os.kill(pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        os.kill(pid, sig)
        code = self._wait_exit(node_id, timeout_s)
        if code is None and self.is_alive(node_id):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)  # the node logs its threads' stacks
                time.sleep(0.5)
            raise LocalClusterError(f"node {node_id} (pid {pid}) did not exit within {timeout_s} s "
                                    f"(stacks in {self.log_path(node_id)})")
        return code

    def pause(self, node_id: int, timeout_s: float = 5.0) -> None:
        """SIGSTOP: the node keeps its sockets but answers nothing (a GC pause).
        Returns once /proc shows the node stopped: the signal is delivered
        asynchronously, and a caller that reads `is_paused` right after must
        see the pause it asked for."""
        pid = self.pid(node_id)
        os.kill(pid, signal.SIGSTOP)
        wait_process_state(pid, stopped=True, timeout_s=timeout_s)

    def resume(self, node_id: int, timeout_s: float = 5.0) -> None:
        """SIGCONT, returning once /proc no longer shows the node stopped."""
        pid = self.pid(node_id)
        os.kill(pid, signal.SIGCONT)
        wait_process_state(pid, stopped=False, timeout_s=timeout_s)

    def restart(self, node_id: int, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """Stop node ``node_id`` with ``sig`` (if running), start it again; the new PID."""
        if self.is_alive(node_id):
            self.kill(node_id, sig, timeout_s)
        return self.start(node_id)

    def stop(self, timeout_s: float = 20.0) -> dict[int, str]:
        """SIGTERM every running node at once (each runs controlled shutdown),
        SIGKILL whatever is left after ``timeout_s``. Node id -> how it ended."""
        ended: dict[int, str] = {}
        running = [n.node_id for n in self.layout.nodes if self.is_alive(n.node_id)]
        for node_id in running:
            with contextlib.suppress(ProcessLookupError):
                if self.is_paused(node_id):
                    os.kill(self.pids[node_id], signal.SIGCONT)
                os.kill(self.pids[node_id], signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node_id in running:
            code = self._wait_exit(node_id, max(0.0, deadline - time.monotonic()))
            if self.is_alive(node_id):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pids[node_id], signal.SIGKILL)
                self._wait_exit(node_id, 10)
                ended[node_id] = "killed (SIGKILL after SIGTERM timed out)"
            else:
                ended[node_id] = "stopped" if code in (0, None) else f"exited with {code}"
        self.pids = {k: v for k, v in self.pids.items() if self.is_alive(k)}
        if (self.directory / STATE_FILE).exists():
            self._save()
        return ended

    def _wait_exit(self, node_id: int, timeout_s: float) -> int | None:
        proc = self._procs.get(node_id)
        if proc is not None:
            try:
                return proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return None
        deadline = time.monotonic() + timeout_s
        while self.is_alive(node_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        return None

    # --- readiness -----------------------------------------------------------------

    def wait_ready(self, timeout_s: float = 60.0) -> ClusterStatus:
        """`wait_ready_async` from synchronous code."""
        return asyncio.run(self.wait_ready_async(timeout_s))

    async def wait_ready_async(
        self, timeout_s: float = 60.0, nodes: Sequence[int] | None = None
    ) -> ClusterStatus:
        """Until the quorum has a leader, every broker of ``nodes`` (default:
        all) is unfenced and each of their listeners answers Metadata listing
        them all. Raises if a node exits meanwhile or at the timeout."""
        wanted = set(nodes) if nodes is not None else {n.node_id for n in self.layout.nodes}
        brokers = {n.node_id for n in self.layout.brokers} & wanted
        deadline = time.monotonic() + timeout_s
        status = ClusterStatus()
        while True:
            for node_id in sorted(wanted):
                if not self.is_alive(node_id):
                    raise LocalClusterError(self._exit_reason(node_id))
            status = await self.probe_async()
            if (status.leader_id >= 0 and brokers <= status.unfenced
                    and brokers <= status.metadata_ok and self._running(status, brokers)):
                return status
            if time.monotonic() >= deadline:
                raise LocalClusterError(
                    f"not ready after {timeout_s:.0f} s: quorum leader "
                    f"{status.leader_id if status.leader_id >= 0 else 'none'}, unfenced brokers "
                    f"{sorted(status.unfenced)} of {sorted(brokers)}, Metadata answered by "
                    f"{sorted(status.metadata_ok)}"
                    + (f", running by their own account {sorted(status.running)}"
                       if status.running is not None else "")
                    + f" (logs: {self.directory}/node-*/server.log)"
                )
            await asyncio.sleep(0.2)

    def _running(self, status: ClusterStatus, brokers: set[int]) -> bool:
        """Whether each of ``brokers`` that serves HTTP says it is running.

        The controller's DescribeCluster is not enough after an unclean
        restart (SIGKILL): it lists the dead process's registration as
        unfenced until its session times out (``broker.session.timeout.ms``,
        as in Kafka), refusing the new process's registration meanwhile.
        When that session expires its partitions lose their leader for a
        moment, so a cluster is ready only once every broker process has
        registered itself."""
        if status.running is None:
            return True
        with_http = {n.node_id for n in self.layout.brokers if n.http_port is not None}
        return brokers & with_http <= status.running

    def wait_topic(self, topic: str, partitions: int, timeout_s: float = 20.0) -> None:
        """`wait_topic_async` from synchronous code."""
        asyncio.run(self.wait_topic_async(topic, partitions, timeout_s))

    async def wait_topic_async(self, topic: str, partitions: int, timeout_s: float = 20.0) -> None:
        """Until every running broker's Metadata lists ``topic`` with
        ``partitions`` partitions, each with a leader. Brokers replay the
        metadata log on their own, so a topic just created (CreateTopics
        answers once the records are committed) is not visible everywhere at
        once; Kafka's clients meet the same lag."""
        deadline = time.monotonic() + timeout_s
        pending = [n for n in self.layout.brokers if self.is_alive(n.node_id)]
        while pending:
            node = pending[0]
            assert node.kafka_port is not None
            async with probe_client(self.layout.host, node.kafka_port, 2000,
                                    security=self.client_security) as client:
                response = await send_or_none(client, md_req.MetadataRequest(
                    topics=(md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0),
                                                        name=TopicName(topic)),),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False), 12)
            if isinstance(response, md_resp.MetadataResponse) and any(
                t.name == topic and t.error_code == ErrorCode.none
                and len(t.partitions) == partitions
                and all(int(p.leader_id) >= 0 for p in t.partitions)
                for t in response.topics
            ):
                pending.pop(0)
                continue
            if time.monotonic() >= deadline:
                raise LocalClusterError(
                    f"topic {topic} not visible with leaders on broker {node.node_id} "
                    f"after {timeout_s:.0f} s")
            await asyncio.sleep(0.1)

    def _exit_reason(self, node_id: int) -> str:
        lines = [line for line in self.server_log(node_id).splitlines() if line.strip()]
        last = lines[-1] if lines else "(empty log)"
        return f"node {node_id} exited during start-up; {self.log_path(node_id)}: {last}"

    def probe(self) -> ClusterStatus:
        return asyncio.run(self.probe_async())

    async def probe_async(self, timeout_ms: int = 1500) -> ClusterStatus:
        """Ask the controllers (DescribeQuorum, DescribeCluster) and every
        running broker (Metadata) how things stand; what no one answered stays unknown."""
        alive = frozenset(n.node_id for n in self.layout.nodes if self.is_alive(n.node_id))
        paused = frozenset(n for n in alive if self.is_paused(n))
        host = self.layout.host
        quorum: dq_resp.PartitionData | None = None
        cluster: dc_resp.DescribeClusterResponse | None = None
        for node in self.layout.controllers:
            if node.node_id not in alive - paused or node.controller_port is None:
                continue
            async with probe_client(host, node.controller_port, timeout_ms,
                                    security=self.controller_security) as client:
                if quorum is None:
                    request = wire.encode_request(DescribeQuorumRequest(), destination=-1)
                    response = await send_or_none(client, request, 2)
                    if isinstance(response, dq_resp.DescribeQuorumResponse) and (
                        response.error_code == ErrorCode.none
                        and response.topics[0].partitions[0].error_code == ErrorCode.none
                    ):
                        quorum = response.topics[0].partitions[0]
                if cluster is None:
                    request = dc_req.DescribeClusterRequest(
                        include_cluster_authorized_operations=False, include_fenced_brokers=True)
                    response = await send_or_none(client, request, 2)
                    if isinstance(response, dc_resp.DescribeClusterResponse) and (
                        response.error_code == ErrorCode.none
                    ):
                        cluster = response
            if quorum is not None and cluster is not None:
                break
        broker_ids = {n.node_id for n in self.layout.brokers}
        metadata_ok = set()
        security = self.client_security
        for node in self.layout.brokers:
            if node.node_id not in alive - paused or node.kafka_port is None:
                continue
            async with probe_client(host, node.kafka_port, timeout_ms, security=security) as client:
                request = md_req.MetadataRequest(
                    topics=(), allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
                response = await send_or_none(client, request, 12)
                if isinstance(response, md_resp.MetadataResponse) and {
                    int(b.node_id) for b in response.brokers
                } >= broker_ids & alive:
                    metadata_ok.add(node.node_id)
        running: set[int] | None = None
        for node in self.layout.brokers:
            if node.http_port is None:
                continue
            running = set() if running is None else running
            if node.node_id not in alive - paused:
                continue
            health = await http_get_json(host, node.http_port, "/healthz", timeout_ms)
            if isinstance(health, dict) and health.get("broker_state") == "running":
                running.add(node.node_id)
        return ClusterStatus(
            leader_id=int(quorum.leader_id) if quorum is not None else -1,
            leader_epoch=int(quorum.leader_epoch) if quorum is not None else -1,
            high_watermark=int(quorum.high_watermark) if quorum is not None else -1,
            voters=tuple(sorted(int(v.replica_id) for v in quorum.current_voters)) if quorum else (),
            observers=tuple(sorted(int(o.replica_id) for o in quorum.observers)) if quorum else (),
            unfenced=frozenset(int(b.broker_id) for b in cluster.brokers if not b.is_fenced)
            if cluster is not None else frozenset(),
            fenced=frozenset(int(b.broker_id) for b in cluster.brokers if b.is_fenced)
            if cluster is not None else frozenset(),
            metadata_ok=frozenset(metadata_ok),
            running=frozenset(running) if running is not None else None,
            alive=alive,
            paused=paused,
        )

    def status_lines(self, status: ClusterStatus) -> list[str]:
        """The status table ``raftlog cluster up|status`` prints."""
        rows = [("NodeId", "Roles", "Pid", "KafkaListener", "ControllerListener", "State")]
        for node in self.layout.nodes:
            n = node.node_id
            if n not in status.alive:
                state = "down"
            elif n in status.paused:
                state = "paused"
            else:
                parts = []
                if node.is_controller:
                    parts.append("quorum leader" if n == status.leader_id else "voter")
                if node.is_broker:
                    if (status.running is not None and node.http_port is not None
                            and n not in status.running):
                        # Whatever the controller lists is a previous process's
                        # registration (or this one's, still fenced).
                        parts.append("registering")
                    else:
                        parts.append("unfenced" if n in status.unfenced
                                     else "fenced" if n in status.fenced else "unregistered")
                state = ", ".join(parts)
            rows.append((
                str(n), node.roles, str(self.pids[n]) if n in status.alive else "-",
                f"{self.layout.host}:{node.kafka_port}" if node.kafka_port else "-",
                f"{self.layout.host}:{node.controller_port}" if node.controller_port else "-",
                state,
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        table = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                 for r in rows]
        brokers = len(self.layout.brokers)
        registering = sorted(
            n.node_id for n in self.layout.brokers
            if status.running is not None and n.http_port is not None
            and n.node_id in status.alive - status.paused and n.node_id not in status.running)
        leader = str(status.leader_id) if status.leader_id >= 0 else "none"
        return [
            f"Cluster {self.cluster_id} in {self.directory}",
            *table,
            f"Quorum: leader {leader}, epoch {status.leader_epoch}, high watermark "
            f"{status.high_watermark}, voters {list(status.voters)}",
            f"Brokers unfenced: {len(status.unfenced)}/{brokers}" + (
                f" (registering, not running yet: {registering})" if registering else ""),
        ]


@contextlib.asynccontextmanager
async def probe_client(
    host: str, port: int, timeout_ms: int, *, client_id_prefix: str = "raftlog-local",
    security: ConnectionSecurity = PLAINTEXT_SECURITY,
) -> AsyncIterator[KafkaProtocolClient]:
    """A short-lived client for readiness probes (closed on exit)."""
    client = KafkaProtocolClient(host, port,
                                 client_id=f"{client_id_prefix}-{uuid.uuid4().hex[:6]}",
                                 request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms,
                                 reconnect_backoff_max_ms=100, security=security)
    try:
        yield client
    finally:
        await client.close()


async def http_get_json(host: str, port: int, path: str, timeout_ms: int) -> Any:
    """The JSON body of ``GET path`` (HTTP/1.0), or None if the node did not
    answer 200 with JSON in time (a probe's "not yet")."""
    async def get() -> Any:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode())
            raw = await reader.read()  # HTTP/1.0: the server closes after the answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        head, _, body = raw.partition(b"\r\n\r\n")
        if not head.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200")):
            return None
        return json.loads(body)
    try:
        return await asyncio.wait_for(get(), timeout_ms / 1000)
    except (OSError, TimeoutError, ValueError):
        return None


async def send_or_none(client: KafkaProtocolClient, request: Any, version: int) -> Any:
    """The response, or None if the node did not answer (a probe's "not yet")."""
    try:
        return await client.send(request, version)
    except (TransportError, TimeoutError, OSError):
        return None
