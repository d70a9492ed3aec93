"""Which partitions of an internal topic this broker leads, and when that changes.

The group coordinator (``__consumer_offsets``) and the transaction
coordinator (``__transaction_state``) both keep one loaded state per
partition they lead, rebuilt from the partition on every new leader epoch
(Kafka's ``CoordinatorRuntime`` load/unload on ``onElection``/``onResignation``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from data_plane.broker.replica_manager import ReplicaManager


class LoadedSlot(Protocol):
    @property
    def leader_epoch(self) -> int: ...


def reconcile_led_partitions(
    replicas: ReplicaManager,
    topic: str,
    num_partitions: int,
    slots: Mapping[int, LoadedSlot],
    load: Callable[[int], None],
    unload: Callable[[int], None],
) -> None:
    """Unload partitions no longer led; load newly led ones; reload a partition
    whose leader epoch changed (its state may have diverged meanwhile)."""
    for partition in range(num_partitions):
        hosted = replicas.get((topic, partition))
        slot = slots.get(partition)
        if hosted is None or not hosted.partition.is_leader:
            if slot is not None:
                unload(partition)
            continue
        if slot is not None and slot.leader_epoch == hosted.partition.leader_epoch:
            continue
        if slot is not None:
            unload(partition)
        load(partition)
