"""Network namespaces + nftables: one address per node, real packet drops.

Topology from chaos-infra.md: a switch namespace ``<prefix>-sw`` holding a
bridge, and per node a namespace ``<prefix>-<node>`` with ``eth0`` on
``10.77.0.<i>/24`` wired to the bridge by a veth pair. The bridge lives in its
own namespace so the host's FORWARD chain (``bridge-nf-call-iptables``) never
sees the traffic.

A grudge becomes, in each receiving node's namespace, an nftables table
``inet chaos`` whose input chain drops ``ip saddr <src>``. Rules never match
on ``ctstate new``, so established keep-alive connections are cut too (no
leaky partition). Heal flushes the chain. Needs root (or a user namespace with
its own ``/run``; not handled here): `availability` says what is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence

from chaos.nemesis.grudges import Link, Node

SUBNET = "10.77.0"


def _run(
    *args: str, check: bool = True, input_: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), check=check, capture_output=True, text=True, input=input_, timeout=10
    )


def availability() -> str | None:
    """None if namespaces and nft work here, else the reason they do not.

    Actually creates and deletes a scratch namespace with an nft table, since
    the binaries being present proves nothing about privileges.
    """
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install -y iproute2 nftables)"
    probe = "chaosprobe"
    try:
        r = _run("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"ip netns add: {r.stderr.strip()}"
        r = _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe", check=False)
        if r.returncode != 0:
            return f"nft in a namespace: {r.stderr.strip()}"
        return None
    finally:
        _run("ip", "netns", "del", probe, check=False)


class NetnsNet:
    """Namespaces for ``nodes`` and nft-based cuts. Implements ``NetBackend``.

    Contract: `setup` leaves every node reachable from every other at
    `address(node)`; `cut(links)` makes exactly those directed links drop
    (replacing earlier cuts); `heal` restores full connectivity; `teardown`
    deletes every namespace it made, even after a partial setup.
    """

    def __init__(self, nodes: Sequence[Node], *, prefix: str = "cx") -> None:
        if len(nodes) > 250:
            raise ValueError("at most 250 nodes in one /24")
        self.nodes = list(nodes)
        self.prefix = prefix
        self._made: list[str] = []

    def ns(self, node: Node) -> str:
        return f"{self.prefix}-{node}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def address(self, node: Node) -> str:
        return f"{SUBNET}.{self.nodes.index(node) + 1}"

    def exec_prefix(self, node: Node) -> list[str]:
        """Prepend to a command to run it inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.ns(node)]

    def _add_ns(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self._made.append(name)

    async def setup(self) -> None:
        try:
            self._add_ns(self.switch)
            sw = self.switch
            _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", sw, "link", "set", "br0", "up")
            for i, node in enumerate(self.nodes, start=1):
                ns = self.ns(node)
                self._add_ns(ns)
                _run(
                    "ip",
                    "link",
                    "add",
                    f"sw{i}",
                    "netns",
                    sw,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                )
                _run("ip", "-n", sw, "link", "set", f"sw{i}", "master", "br0", "up")
                _run("ip", "-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run(
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "nft",
                    "-f",
                    "-",
                    input_="table inet chaos {\n chain input { type filter hook input priority 0; policy accept; }\n}\n",
                )
        except BaseException:
            await self.teardown()
            raise

    async def cut(self, cut_links: frozenset[Link]) -> None:
        await self.heal()
        by_dst: dict[Node, list[Node]] = {}
        for src, dst in cut_links:
            by_dst.setdefault(dst, []).append(src)
        for dst, srcs in by_dst.items():
            rules = "".join(
                f"add rule inet chaos input ip saddr {self.address(s)} drop\n" for s in sorted(srcs)
            )
            _run("ip", "netns", "exec", self.ns(dst), "nft", "-f", "-", input_=rules)

    async def heal(self) -> None:
        for node in self.nodes:
            if self.ns(node) in self._made:
                _run(
                    "ip",
                    "netns",
                    "exec",
                    self.ns(node),
                    "nft",
                    "flush",
                    "chain",
                    "inet",
                    "chaos",
                    "input",
                )

    async def teardown(self) -> None:
        for name in reversed(self._made):
            _run("ip", "netns", "del", name, check=False)
        self._made.clear()
        # Deletion is asynchronous: wait until the names are gone (chaos-infra.md).
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            listed = _run("ip", "netns", "list", check=False).stdout
            if not any(
                line.split()[0].startswith(f"{self.prefix}-")
                for line in listed.splitlines()
                if line.strip()
            ):
                return
            time.sleep(0.05)
