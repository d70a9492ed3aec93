"""Network partitions as data: grudges (Jepsen ``jepsen.nemesis`` / ``net``).

A *grudge* maps each node to the set of nodes whose packets it drops. A
partition is then just a grudge, a backend makes it true, and healing is
"no grudge". `links` flattens a grudge into directed ``(src, dst)`` pairs: the
traffic from ``src`` that ``dst`` drops.

The shapes are Jepsen's: ``complete-grudge`` (components that cannot talk),
``partition-random-halves``, ``partition-majorities-ring`` (every node sees a
majority, no two see the same one), ``bridge`` (two halves joined by one node
that sees both), isolation of one node (the leader or the controller,
KAFKA-15489), and one-way loss.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

Node: TypeAlias = str
Grudge: TypeAlias = Mapping[Node, frozenset[Node]]
Link: TypeAlias = tuple[Node, Node]


def complete_grudge(components: Iterable[Iterable[Node]]) -> dict[Node, frozenset[Node]]:
    """Nodes in different components drop each other's packets (both ways)."""
    comps = [frozenset(c) for c in components]
    everyone = frozenset().union(*comps) if comps else frozenset()
    return {n: everyone - c for c in comps for n in c}


def halves(nodes: Sequence[Node], rng: random.Random) -> dict[Node, frozenset[Node]]:
    """Split randomly into a majority and a minority (Jepsen random halves)."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    cut = len(shuffled) // 2
    return complete_grudge([shuffled[:cut], shuffled[cut:]])


def majority_ring(nodes: Sequence[Node], rng: random.Random) -> dict[Node, frozenset[Node]]:
    """Each node sees a majority (itself and its ring neighbours), all different.

    Each node sees the window of ``n // 2 + 1`` ring positions centred on it:
    with 5 nodes, itself and one neighbour on each side. Every node is in a
    majority, yet no majority agrees with another's (Jepsen's
    ``majorities-ring``).
    """
    ring = list(nodes)
    rng.shuffle(ring)
    n = len(ring)
    if n < 3:
        raise ValueError("majority ring needs >= 3 nodes")
    m = n // 2 + 1  # majority size, including the node itself
    out: dict[Node, frozenset[Node]] = {}
    for i, node in enumerate(ring):
        # node sees the window of m nodes centred on itself
        lo = i - (m - 1) // 2
        visible = {ring[(lo + k) % n] for k in range(m)}
        out[node] = frozenset(ring) - visible
    return out


def bridge(nodes: Sequence[Node], rng: random.Random) -> dict[Node, frozenset[Node]]:
    """Two halves that cannot talk, joined by one bridge node that sees all."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    if len(shuffled) < 3:
        raise ValueError("bridge needs >= 3 nodes")
    mid = len(shuffled) // 2
    bridge_node = shuffled[mid]
    left, right = shuffled[:mid], shuffled[mid + 1 :]
    g = complete_grudge([left, right])
    g[bridge_node] = frozenset()
    return g


def isolate(node: Node, nodes: Sequence[Node]) -> dict[Node, frozenset[Node]]:
    """``node`` alone on one side; the others together on the other."""
    if node not in nodes:
        raise ValueError(f"{node} is not a cluster node")
    return complete_grudge([[node], [n for n in nodes if n != node]])


def one_way(src: Node, dst: Node) -> dict[Node, frozenset[Node]]:
    """``dst`` drops packets from ``src``; ``src`` still hears ``dst``."""
    return {dst: frozenset({src})}


def links(grudge: Grudge) -> frozenset[Link]:
    """Directed ``(src, dst)`` pairs whose traffic is dropped."""
    return frozenset((src, dst) for dst, srcs in grudge.items() for src in srcs if src != dst)


def can_reach(grudge: Grudge, src: Node, dst: Node) -> bool:
    return src not in grudge.get(dst, frozenset())
