"""Replica placement for new topics: round-robin with a shifting follower offset.

The scheme of Kafka's ``AdminUtils.assignReplicasToBrokers`` (re-derived
here from its description):

- Brokers are put in a fixed order: by id, or, when any broker has a rack,
  interleaved across racks (r1, r2, r3, r1, r2, r3, ...) so that walking the
  list visits racks in turn. A missing rack counts as a rack of its own.
- Partition ``p`` gets its first replica (the preferred leader) at position
  ``(p + start) % n``. So leaders go round-robin over every broker.
- Each follower ``j`` sits ``1 + (shift + j) % (n - 1)`` positions after the
  first replica. ``shift`` grows by one every ``n`` partitions, so that
  follower sets differ between rounds and load spreads further.
- With racks, a follower position is skipped while its rack already holds a
  replica of the partition and some rack holds none yet (one replica per
  rack first). The shift is multiplied by the number of racks so that a
  round's followers land in other racks.

``start`` and ``shift`` vary per topic (Kafka picks them at random; here the
caller derives them from the topic id, which keeps commands pure and
reproducible).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PlacementBroker", "PlacementError", "place_replicas", "rack_alternated"]


class PlacementError(ValueError):
    """The request cannot be placed on these brokers (e.g. too few of them)."""


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    broker_id: int
    rack: str | None = None


def rack_alternated(brokers: Sequence[PlacementBroker]) -> list[PlacementBroker]:
    """Brokers interleaved by rack: one per rack in rack order, then again."""
    by_rack: dict[str, list[PlacementBroker]] = {}
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(_rack_key(broker), []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[PlacementBroker] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def _rack_key(broker: PlacementBroker) -> str:
    # A broker without a rack is a rack of its own; the NUL prefix keeps these
    # keys apart from real rack names.
    return broker.rack if broker.rack is not None else f"\0{broker.broker_id}"


def place_replicas(
    brokers: Sequence[PlacementBroker],
    num_partitions: int,
    replication_factor: int,
    *,
    start: int,
    shift: int,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``0..num_partitions-1``; first = preferred leader.

    Raises PlacementError if ``replication_factor`` is below 1 or above the
    number of brokers, ``num_partitions`` is below 1, or brokers repeat.
    """
    n = len(brokers)
    if num_partitions < 1:
        raise PlacementError(f"number of partitions must be >= 1, got {num_partitions}")
    if replication_factor < 1:
        raise PlacementError(f"replication factor must be >= 1, got {replication_factor}")
    if replication_factor > n:
        raise PlacementError(
            f"replication factor {replication_factor} is larger than the {n} available brokers"
        )
    if len({b.broker_id for b in brokers}) != n:
        raise PlacementError("brokers repeat")
    rack_aware = any(b.rack is not None for b in brokers)
    ordered = rack_alternated(brokers) if rack_aware else sorted(brokers, key=lambda b: b.broker_id)
    num_racks = len({_rack_key(b) for b in ordered}) if rack_aware else 1
    start %= n
    shift %= n
    out = []
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        chosen = [ordered[first]]
        if rack_aware:
            _add_followers_rack_aware(ordered, chosen, first, shift * num_racks, replication_factor,
                                      num_racks)
        else:
            chosen.extend(
                ordered[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)
            )
        out.append(tuple(b.broker_id for b in chosen))
    return out


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _add_followers_rack_aware(
    ordered: list[PlacementBroker],
    chosen: list[PlacementBroker],
    first: int,
    shift: int,
    replication_factor: int,
    num_racks: int,
) -> None:
    n = len(ordered)
    used_racks = {_rack_key(chosen[0])}
    used = {chosen[0].broker_id}
    k = 0
    while len(chosen) < replication_factor:
        # Each k names a distinct other position; n - 1 of them cover all brokers,
        # and while a rack is unused one of its brokers is unused too, so this
        # always finds a broker within n - 1 steps per follower.
        if k >= n * replication_factor:
            raise AssertionError("rack-aware placement failed to progress")
        candidate = ordered[_follower_index(first, shift, k, n)]
        k += 1
        if candidate.broker_id in used:
            continue
        rack = _rack_key(candidate)
        if rack in used_racks and len(used_racks) < num_racks:
            continue
        chosen.append(candidate)
        used.add(candidate.broker_id)
        used_racks.add(rack)
