"""Network namespaces + nftables: one address per node, real packet drops.

Topology from chaos-infra.md, per `NetnsNet`:

- a switch namespace ``<prefix>-sw`` holding a bridge ``br0``. The bridge
  lives in its own namespace so the host's FORWARD chain
  (``bridge-nf-call-iptables``) never sees the traffic;
- per node a namespace ``<prefix>-<node>`` with ``eth0`` on
  ``10.77.<x>.<i>/24``, wired to the bridge by a veth pair;
- a host-side veth ``<prefix>h`` in the *root* namespace on
  ``10.77.<x>.254/24``, its peer plugged into the bridge: the runner and its
  Kafka clients (which run in the root namespace) reach every node at its own
  address. Clients are never partitioned (as in Jepsen, where they run on
  the control node): grudges only name node addresses.

``<x>`` is a /24 that no route of the root namespace covers yet, so two runs
on one machine (each with its own ``prefix``, by default made from the PID)
do not collide. Runs set up one at a time (an ``flock`` on `LOCK_PATH`, held
from choosing ``<x>`` until its route exists), so two starting together
cannot both choose the same one. Only private test addresses, only inside namespaces (and on
the one host veth) this module creates.

A grudge becomes, in each receiving node's namespace, rules of an nftables
table ``inet chaos`` whose ``input`` chain drops ``ip saddr <src>``. The
drops are stateless: they never match on ``ct state new``, so established
keep-alive connections are cut too (no leaky partition). Conntrack is still
switched on at set-up (a ``ct state`` counter in a chain of its own), because
it starts lazily with the first ``ct`` rule and would otherwise misjudge the
connections opened before it (chaos-infra.md). Heal flushes ``input``.

Needs root (`availability` says what is missing). Every namespace, the host
veth and every process left inside a namespace are removed by `teardown`,
also after a partial set-up; `sweep_stale` removes what a killed run left.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence

from chaos.nemesis.grudges import Link, Node

NET = "10.77"
"""Every run takes one ``10.77.<x>.0/24`` (private test addresses)."""
HOST_OCTET = 254
NS_PREFIX = "rlc"
LOCK_PATH = "/run/lock/raftlog-chaos-netns.lock"
"""Held while a run chooses its subnet and routes it (see the docstring)."""
_seq = itertools.count()

_NFT_SETUP = """table inet chaos {
  chain conntrack { type filter hook input priority -10; policy accept; ct state established,related counter; }
  chain input { type filter hook input priority 0; policy accept; }
}
"""


class NetnsError(RuntimeError):
    """A namespace command failed; the message names the command and its stderr."""


def _run(
    *args: str, check: bool = True, input_: str | None = None
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        list(args), check=False, capture_output=True, text=True, input=input_, timeout=10
    )
    if check and r.returncode != 0:
        raise NetnsError(f"{' '.join(args)}: {r.stderr.strip() or f'exit {r.returncode}'}")
    return r


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def default_prefix() -> str:
    """``rlc<pid>-<n>`` (base 36): unique per process and per `NetnsNet` in it,
    short enough for interface names (15 bytes) and sweepable by PID."""
    return f"{NS_PREFIX}{_b36(os.getpid())}-{_b36(next(_seq))}"


def availability() -> str | None:
    """None if namespaces, veth, bridges and nft work here, else the reason
    they do not.

    Actually creates and deletes a scratch namespace with a bridge and an nft
    table, since the binaries being present proves nothing about privileges.
    """
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install -y iproute2 nftables)"
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    probe = f"{default_prefix()}-probe"
    try:
        r = _run("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"ip netns add: {r.stderr.strip()}"
        r = _run("ip", "-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if r.returncode != 0:
            return f"bridge in a namespace: {r.stderr.strip()}"
        r = _run("ip", "netns", "exec", probe, "nft", "-f", "-", input_=_NFT_SETUP, check=False)
        if r.returncode != 0:
            return f"nft in a namespace: {r.stderr.strip()}"
        return None
    finally:
        _run("ip", "netns", "del", probe, check=False)


def _used_subnets() -> set[int]:
    """Third octets of ``10.77.<x>.0/24`` already routed in this namespace."""
    out = _run("ip", "-4", "route", "show", check=False).stdout
    return {int(m.group(1)) for m in re.finditer(r"\b10\.77\.(\d+)\.\d+", out)}


@contextlib.contextmanager
def _setup_lock() -> Iterator[None]:
    """Exclusive against other runs' set-up on this machine (other processes:
    pytest workers, two soaks); released when the file closes."""
    directory = os.path.dirname(LOCK_PATH)
    path = LOCK_PATH if os.path.isdir(directory) else "/tmp/raftlog-chaos-netns.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pids_in(ns: str) -> list[int]:
    out = _run("ip", "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def sweep_stale() -> list[str]:
    """Delete namespaces (and host veths) of ``rlc<pid>-`` runs whose process
    is gone and that hold no process; the names removed."""
    gone: list[str] = []
    for ns in _namespaces():
        m = re.match(rf"^({NS_PREFIX}([0-9a-z]+)-[0-9a-z]+)-", ns)
        if m is None or _pid_alive(int(m.group(2), 36)) or _pids_in(ns):
            continue
        _run("ip", "netns", "del", ns, check=False)
        _run("ip", "link", "del", f"{m.group(1)}h", check=False)
        gone.append(ns)
    return gone


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class NetnsNet:
    """Namespaces for ``nodes``, a host veth, and nft-based cuts.
    Implements ``chaos.nemesis.core.NetBackend``.

    Contract: `setup` leaves every node reachable from every other and from
    the root namespace at `address(node)`; `cut(links)` makes exactly those
    directed links drop (replacing earlier cuts); `heal` restores full
    connectivity; `teardown` kills any process still inside a namespace (by
    PID), deletes every namespace and the host veth it made, even after a
    partial set-up, and waits until they are gone (deletion is asynchronous).
    """

    def __init__(self, nodes: Sequence[Node], *, prefix: str | None = None) -> None:
        if len(nodes) > 250:
            raise ValueError("at most 250 nodes in one /24")
        self.nodes = list(nodes)
        self.prefix = prefix or default_prefix()
        if len(self.host_link) > 15:
            raise ValueError(f"prefix {self.prefix!r} too long for an interface name")
        self.subnet: str | None = None
        self._made: list[str] = []
        self._host_made = False

    def ns(self, node: Node) -> str:
        return f"{self.prefix}-{node}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def host_link(self) -> str:
        return f"{self.prefix}h"

    def _subnet_or_raise(self) -> str:
        if self.subnet is None:
            raise NetnsError("NetnsNet not set up")
        return self.subnet

    def address(self, node: Node) -> str:
        return f"{self._subnet_or_raise()}.{self.nodes.index(node) + 1}"

    @property
    def host_address(self) -> str:
        """The root namespace's address on the switch (where clients come from)."""
        return f"{self._subnet_or_raise()}.{HOST_OCTET}"

    def exec_prefix(self, node: Node) -> list[str]:
        """Prepend to a command to run it inside ``node``'s namespace.
        ``ip netns exec`` execs the command (no fork): the PID of the process
        started with this prefix is the command's own PID, so signals reach it."""
        return ["ip", "netns", "exec", self.ns(node)]

    def _add_ns(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self._made.append(name)

    def _pick_subnet(self) -> str:
        used = _used_subnets()
        start = os.getpid() % 250
        for k in range(250):
            x = 1 + (start + k) % 250
            if x not in used:
                return f"{NET}.{x}"
        raise NetnsError("no free 10.77.x.0/24 in the root namespace")

    async def setup(self) -> None:
        await asyncio.to_thread(self._setup)

    def _setup(self) -> None:
        with _setup_lock():
            self._setup_locked()

    def _setup_locked(self) -> None:
        try:
            sweep_stale()
            self.subnet = self._pick_subnet()
            sw = self.switch
            self._add_ns(sw)
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
                _run("ip", "netns", "exec", ns, "nft", "-f", "-", input_=_NFT_SETUP)
            # The runner's way in: a veth from the root namespace into the bridge.
            _run(
                "ip",
                "link",
                "add",
                self.host_link,
                "type",
                "veth",
                "peer",
                "name",
                "host",
                "netns",
                sw,
            )
            self._host_made = True
            _run("ip", "-n", sw, "link", "set", "host", "master", "br0", "up")
            _run("ip", "addr", "add", f"{self.host_address}/24", "dev", self.host_link)
            _run("ip", "link", "set", self.host_link, "up")
        except BaseException:
            self._teardown()
            raise

    async def cut(self, cut_links: frozenset[Link]) -> None:
        await asyncio.to_thread(self._cut, cut_links)

    def _cut(self, cut_links: frozenset[Link]) -> None:
        self._heal()
        by_dst: dict[Node, list[Node]] = {}
        for src, dst in cut_links:
            by_dst.setdefault(dst, []).append(src)
        for dst, srcs in by_dst.items():
            rules = "".join(
                f"add rule inet chaos input ip saddr {self.address(s)} drop\n" for s in sorted(srcs)
            )
            _run("ip", "netns", "exec", self.ns(dst), "nft", "-f", "-", input_=rules)

    async def heal(self) -> None:
        await asyncio.to_thread(self._heal)

    def _heal(self) -> None:
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

    def rules(self, node: Node) -> str:
        """``nft list table inet chaos`` in ``node``'s namespace (for tests and reports)."""
        return _run(
            "ip", "netns", "exec", self.ns(node), "nft", "list", "table", "inet", "chaos"
        ).stdout

    async def teardown(self) -> None:
        await asyncio.to_thread(self._teardown)

    def _teardown(self) -> None:
        for name in self._made:
            for pid in _pids_in(name):  # only ours: these namespaces are ours
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for name in reversed(self._made):
            _run("ip", "netns", "del", name, check=False)
        if self._host_made:
            # Deleting the switch namespace takes the peer, hence the pair, with
            # it; delete explicitly too in case it lingers.
            _run("ip", "link", "del", self.host_link, check=False)
        made = set(self._made)
        self._made.clear()
        # Deletion is asynchronous (the peer veth lingers ~1 s, chaos-infra.md):
        # wait until the names and the host link are gone.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            left = made & set(_namespaces())
            link = (
                self._host_made
                and _run("ip", "link", "show", self.host_link, check=False).returncode == 0
            )
            if not left and not link:
                break
            time.sleep(0.05)
        self._host_made = False

    def __repr__(self) -> str:
        return f"NetnsNet({self.prefix!r}, {self.subnet}, nodes={self.nodes})"
