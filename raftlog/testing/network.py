"""A fake network for the simulator: drop, delay (hence reorder), duplicate,
and partitions expressed as a set of cut directed links."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from raftlog.consensus.messages import Envelope


@dataclass(slots=True)
class LinkFaults:
    """Per-message fault probabilities and the delay range (ms)."""

    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 5

    def __post_init__(self) -> None:
        if not (0.0 <= self.drop_probability <= 1.0 and 0.0 <= self.duplicate_probability <= 1.0):
            raise ValueError("probabilities must be in [0, 1]")
        if not 0 <= self.min_delay_ms <= self.max_delay_ms:
            raise ValueError("need 0 <= min_delay_ms <= max_delay_ms")


@dataclass(slots=True)
class FakeNetwork:
    """Decides, with the simulation's seeded rng, what becomes of each message.

    ``cut`` holds directed links (src, dst) that deliver nothing; a message
    is checked when sent and again when it would arrive (a partition that
    starts while it is in flight loses it).
    """

    rng: random.Random
    faults: LinkFaults = field(default_factory=LinkFaults)
    cut: set[tuple[int, int]] = field(default_factory=set)
    sent: int = 0
    dropped: int = 0
    duplicated: int = 0

    def route(self, envelope: Envelope, now_ms: int) -> list[int]:
        """Arrival times for ``envelope`` (empty: lost; two: duplicated)."""
        self.sent += 1
        if not self.connected(envelope.source, envelope.destination):
            self.dropped += 1
            return []
        if self.rng.random() < self.faults.drop_probability:
            self.dropped += 1
            return []
        copies = 1
        if self.rng.random() < self.faults.duplicate_probability:
            copies = 2
            self.duplicated += 1
        return [now_ms + self.rng.randint(self.faults.min_delay_ms, self.faults.max_delay_ms)
                for _ in range(copies)]

    def connected(self, src: int, dst: int) -> bool:
        return (src, dst) not in self.cut

    def partition(self, *groups: Iterable[int]) -> None:
        """Cut every link between different groups (both directions)."""
        sets = [sorted(g) for g in groups]
        for i, a in enumerate(sets):
            for b in sets[i + 1:]:
                for x in a:
                    for y in b:
                        self.cut.add((x, y))
                        self.cut.add((y, x))

    def cut_one_way(self, src: int, dst: int) -> None:
        self.cut.add((src, dst))

    def heal(self) -> None:
        self.cut.clear()
