"""Nemeses: fault plans as data, each with setup, invoke, teardown and a heal.

The generator emits ``start-<fault>`` / ``stop-<fault>`` ops whose values name
*kinds* of targets; a nemesis resolves them at invoke time from a
`ClusterState` snapshot (Jepsen's targeters: the leader is whoever leads
*now*), applies the fault, and returns the resolved plan as the completion
value, so the history records exactly what was done. ``stop-<fault>`` is the
heal and is idempotent.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from chaos.db import DB
from chaos.history import JSON
from chaos.nemesis import grudges as g
from chaos.nemesis.grudges import Link, Node


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What the runner knows when a fault starts."""

    nodes: tuple[Node, ...]
    leader: Node | None = None
    controller: Node | None = None


class NetBackend(Protocol):
    """Makes a set of directed links drop (ProxyNet, NetnsNet)."""

    async def setup(self) -> None: ...
    async def cut(self, cut_links: frozenset[Link]) -> None: ...
    async def heal(self) -> None: ...
    async def teardown(self) -> None: ...


class Nemesis(Protocol):
    fs: frozenset[str]

    async def setup(self) -> None: ...
    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON: ...
    async def teardown(self) -> None: ...


def resolve_grudge(
    kind: str, state: ClusterState, rng: random.Random
) -> dict[Node, frozenset[Node]]:
    """A grudge of the given kind (generator.GRUDGES) for the cluster now."""
    nodes = list(state.nodes)
    if kind == "halves":
        return g.halves(nodes, rng)
    if kind == "majority-ring":
        return g.majority_ring(nodes, rng)
    if kind == "bridge":
        return g.bridge(nodes, rng)
    if kind in ("isolate-leader", "isolate-controller"):
        who = state.leader if kind == "isolate-leader" else state.controller
        return g.isolate(who if who is not None else rng.choice(nodes), nodes)
    if kind == "one-way":
        src, dst = rng.sample(nodes, 2)
        return g.one_way(src, dst)
    raise ValueError(f"unknown grudge {kind!r}")


def resolve_targets(kind: str, state: ClusterState, rng: random.Random) -> list[Node]:
    """Nodes for ``one`` / ``leader`` / ``controller`` / ``minority``."""
    nodes = list(state.nodes)
    if kind == "leader" and state.leader is not None:
        return [state.leader]
    if kind == "controller" and state.controller is not None:
        return [state.controller]
    if kind == "minority":
        return sorted(rng.sample(nodes, (len(nodes) - 1) // 2 or 1))
    return [rng.choice(nodes)]


class PartitionNemesis:
    """``start-partition {"grudge": kind}`` / ``stop-partition``."""

    fs = frozenset({"start-partition", "stop-partition"})

    def __init__(self, net: NetBackend, rng: random.Random) -> None:
        self.net = net
        self.rng = rng

    async def setup(self) -> None:
        await self.net.setup()

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        if f == "stop-partition":
            await self.net.heal()
            return "healed"
        grudge = resolve_grudge(value["grudge"], state, self.rng)
        await self.net.cut(g.links(grudge))
        return {"grudge": value["grudge"], "drops": {k: sorted(v) for k, v in grudge.items() if v}}

    async def teardown(self) -> None:
        await self.net.heal()
        await self.net.teardown()


class ProcessNemesis:
    """kill, restart, pause and lost-writes (kill with loss of unsynced data) via a `DB`.

    ``start-kill`` SIGKILLs the targets; ``stop-kill`` restarts every node
    this nemesis killed (their page cache survives, as it does a real
    SIGKILL). ``start-restart`` stops the targets gracefully (SIGTERM: a
    controlled shutdown, as an operator's rolling restart does) and
    ``stop-restart`` starts them again; a node that does not exit within the
    DB's timeout is SIGKILLed and listed under ``"hung"``.
    ``start-pause``/``stop-pause`` send SIGSTOP/SIGCONT.
    ``start-lost-writes`` is a power cut: it SIGKILLs the targets and its heal
    restarts them without the bytes they never fsynced. It strikes only once
    the workload topic is fully replicated again (waiting up to
    ``lossy_wait_s``, else it records that it skipped): the durability
    promise is one fault at a time, and a power cut of a replica while
    another is still catching up is the double fault of KIP-966's "last
    replica standing", which the ``last-replica-standing`` scenario covers.
    """

    fs = frozenset(f"{p}-{k}" for p in ("start", "stop")
                   for k in ("kill", "restart", "pause", "lost-writes"))

    def __init__(
        self, db: DB, rng: random.Random, *, topic: str = "chaos", lossy_wait_s: float = 20.0
    ) -> None:
        self.db = db
        self.rng = rng
        self.topic = topic
        self.lossy_wait_s = lossy_wait_s
        self.down: set[Node] = set()
        self.lossy_down: set[Node] = set()
        self.paused: set[Node] = set()

    async def setup(self) -> None:
        return None

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        action, _, kind = f.partition("-")
        if action == "start":
            if kind == "lost-writes" and not await self._wait_fully_replicated():
                return {
                    "nodes": [],
                    "skipped": f"{self.topic} not fully replicated "
                    f"within {self.lossy_wait_s:.0f} s",
                }
            targets = resolve_targets(value["target"], state, self.rng)
            hung: list[Node] = []
            for n in targets:
                if kind == "pause":
                    await self.db.pause_node(n)
                    self.paused.add(n)
                elif kind == "restart":
                    try:
                        await self.db.stop_node(n)
                    except Exception:  # did not exit: a finding, then a plain kill
                        hung.append(n)
                        await self.db.kill_node(n)
                    self.down.add(n)
                else:
                    await self.db.kill_node(n)
                    (self.lossy_down if kind == "lost-writes" else self.down).add(n)
            return {"nodes": targets, "hung": hung} if hung else {"nodes": targets}
        if kind == "pause":
            healed = sorted(self.paused)
            for n in healed:
                await self.db.resume_node(n)
            self.paused.clear()
            return {"nodes": healed}
        lossy = kind == "lost-writes"
        pool = self.lossy_down if lossy else self.down
        healed = sorted(pool)
        for n in healed:
            await self.db.start_node(n, lose_unsynced=lossy)
        pool.clear()
        return {"nodes": healed}

    async def _wait_fully_replicated(self) -> bool:
        deadline = asyncio.get_running_loop().time() + self.lossy_wait_s
        while not await self.db.fully_replicated(self.topic):
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.5)
        return True

    async def teardown(self) -> None:
        for n in sorted(self.paused):
            await self.db.resume_node(n)
        for n in sorted(self.down):
            await self.db.start_node(n)
        for n in sorted(self.lossy_down):
            await self.db.start_node(n, lose_unsynced=True)


class DiskFullNemesis:
    """``start-disk-full {"target"}`` fills the targets' data-dir file systems
    (each node's data dir is its own size-limited tmpfs, so one node's disk
    fills and nobody else's), and every write of theirs gets ENOSPC;
    ``stop-disk-full`` frees the space and restarts any target that died of
    it (Kafka stops a broker whose only log dir fails; a restart after the
    disk is fixed is the operator's heal). Idempotent."""

    fs = frozenset({"start-disk-full", "stop-disk-full"})

    def __init__(self, db: DB, rng: random.Random) -> None:
        self.db = db
        self.rng = rng
        self.full: set[Node] = set()

    async def setup(self) -> None:
        return None

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        if f == "start-disk-full":
            targets = resolve_targets(value["target"], state, self.rng)
            ballast = {}
            for n in targets:
                ballast[n] = await asyncio.to_thread(self.db.fill_disk, n)
                self.full.add(n)
            return {"nodes": targets, "ballast_bytes": ballast}
        return await self._heal()

    async def _heal(self) -> JSON:
        healed = sorted(self.full)
        restarted = []
        for n in healed:
            await asyncio.to_thread(self.db.free_disk, n)
            if self.db.pid(n) is None:
                await self.db.start_node(n)
                restarted.append(n)
        self.full.clear()
        return {"nodes": healed, "restarted": restarted}

    async def teardown(self) -> None:
        await self._heal()


class IsolateThenKillLeader:
    """The ``isolate-then-kill-leader`` schedule (generator.SCHEDULES).

    ``start-isolate-then-kill-leader`` cuts the current leader of partition 0
    off from every other node (controller and replica links; clients are never
    partitioned), so whatever it appends stays on it alone;
    ``kill-isolated-leader`` SIGKILLs *that* node (not whoever leads now);
    ``stop-isolate-then-kill-leader`` heals the network and restarts it. The
    node is remembered across ops, so the kill hits the node that took the
    unreplicated writes even after the controller has moved leadership.
    """

    fs = frozenset(
        {"start-isolate-then-kill-leader", "kill-isolated-leader", "stop-isolate-then-kill-leader"}
    )

    def __init__(self, db: DB, net: NetBackend, rng: random.Random) -> None:
        self.db = db
        self.net = net
        self.rng = rng
        self.isolated: Node | None = None
        self.down: set[Node] = set()

    async def setup(self) -> None:
        return None

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        if f == "start-isolate-then-kill-leader":
            who = resolve_targets("leader", state, self.rng)[0]
            await self.net.cut(g.links(g.isolate(who, list(state.nodes))))
            self.isolated = who
            return {"isolated": who, "was_leader": state.leader == who}
        if f == "kill-isolated-leader":
            if self.isolated is None:
                return {"nodes": []}
            await self.db.kill_node(self.isolated)
            self.down.add(self.isolated)
            return {"nodes": [self.isolated]}
        await self.net.heal()
        healed = sorted(self.down)
        for n in healed:
            await self.db.start_node(n)
        self.down.clear()
        self.isolated = None
        return {"healed": True, "restarted": healed}

    async def teardown(self) -> None:
        await self.net.heal()
        for n in sorted(self.down):
            await self.db.start_node(n)
        self.down.clear()


class Compose:
    """Dispatch ops to the nemesis that handles their ``f`` (Jepsen ``compose``)."""

    def __init__(self, nemeses: Sequence[Nemesis]) -> None:
        self.nemeses = list(nemeses)
        self.fs = frozenset().union(*(n.fs for n in nemeses)) if nemeses else frozenset()

    async def setup(self) -> None:
        for n in self.nemeses:
            await n.setup()

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        for n in self.nemeses:
            if f in n.fs:
                return await n.invoke(f, value, state)
        raise ValueError(f"no nemesis handles {f!r}")

    async def teardown(self) -> None:
        for n in reversed(self.nemeses):
            await n.teardown()
