"""What the runner and nemeses need from a cluster: the `DB` protocol.

Jepsen's ``jepsen.db`` (setup/teardown, plus ``Kill``, ``Pause`` and
``Primary`` capabilities). The real implementation starts ``raftlog`` node
processes on loopback (behind `chaos.nemesis.proxy.ProxyNet`) or in network
namespaces (`chaos.nemesis.netns.NetnsNet`) once the data plane exists; it
reaches nodes only through processes and the network (ARCHITECTURE.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from chaos.nemesis.grudges import Node


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

    async def start_node(self, node: Node, extra_env: Mapping[str, str] | None = None) -> None: ...

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

    async def leader(self, topic: str, partition: int) -> Node | None:
        """The partition leader per the cluster metadata (Kafka Metadata API)."""

    async def controller(self) -> Node | None:
        """The active controller (KRaft quorum leader)."""
