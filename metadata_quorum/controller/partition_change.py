"""Leader election and ISR changes for one partition, as a PartitionChangeRecord.

After Kafka's ``PartitionChangeBuilder`` (design only). The rules:

1. The ISR becomes ``target_isr`` (or stays).
2. The leader is chosen, in order:
   - with ``Election.PREFERRED``: the preferred (first) replica, if it is in
     the ISR and acceptable;
   - the current leader, if it is still in the ISR and acceptable;
   - the first replica (in replica order) in the ISR that is acceptable;
   - with ``unclean``: the first acceptable replica outside the ISR; the ISR
     shrinks to it and the leader recovery state becomes RECOVERING
     (KIP-704), since it may lack committed records;
   - otherwise no leader (-1).
   "Acceptable" means unfenced and not in controlled shutdown (KIP-841).
3. Only changed fields go in the record; nothing changed -> no record.

Replay bumps the leader epoch when the leader changes and the partition
epoch on every record (`PartitionRegistration.merge`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from enum import Enum

from metadata_quorum.image import PartitionRegistration
from metadata_quorum.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionChangeRecord,
)

__all__ = ["Election", "ElectionOutcome", "build_partition_change", "isr_without"]


class Election(Enum):
    """Which leader a change prefers."""

    #: Keep the current leader when it is still acceptable.
    ONLINE = 0
    #: Move to the preferred replica when it is eligible (rebalancing).
    PREFERRED = 1


class ElectionOutcome(Enum):
    KEPT = 0
    CLEAN = 1
    UNCLEAN = 2
    NONE = 3


def isr_without(isr: tuple[int, ...], broker_id: int) -> tuple[int, ...]:
    """``isr`` minus ``broker_id``, unless that would leave it empty.

    Without KIP-966's ELR, Kafka keeps the last ISR member even when it is
    fenced, so that the partition can elect it cleanly when it returns.
    """
    if broker_id not in isr or len(isr) == 1:
        return isr
    return tuple(b for b in isr if b != broker_id)


def build_partition_change(
    topic_id: uuid.UUID,
    partition_id: int,
    part: PartitionRegistration,
    *,
    is_acceptable: Callable[[int], bool],
    target_isr: tuple[int, ...] | None = None,
    unclean: bool = False,
    election: Election = Election.ONLINE,
    target_recovery_state: LeaderRecoveryState | None = None,
) -> PartitionChangeRecord | None:
    """The record applying the rules above, or None if nothing would change.

    Raises ValueError if ``target_isr`` is not a subset of the replicas.
    """
    record, _outcome = elect(
        topic_id, partition_id, part, is_acceptable=is_acceptable, target_isr=target_isr,
        unclean=unclean, election=election, target_recovery_state=target_recovery_state,
    )
    return record


def elect(
    topic_id: uuid.UUID,
    partition_id: int,
    part: PartitionRegistration,
    *,
    is_acceptable: Callable[[int], bool],
    target_isr: tuple[int, ...] | None = None,
    unclean: bool = False,
    election: Election = Election.ONLINE,
    target_recovery_state: LeaderRecoveryState | None = None,
) -> tuple[PartitionChangeRecord | None, ElectionOutcome]:
    """`build_partition_change`, also saying how the leader was chosen."""
    isr = part.isr if target_isr is None else target_isr
    if not set(isr) <= set(part.replicas):
        raise ValueError(f"target ISR {isr} is not a subset of replicas {part.replicas}")
    recovery = part.leader_recovery_state if target_recovery_state is None else (
        target_recovery_state
    )
    leader, outcome = _choose_leader(part, isr, is_acceptable, election)
    if outcome is ElectionOutcome.NONE and unclean:
        for replica in part.replicas:
            if is_acceptable(replica):
                leader, outcome = replica, ElectionOutcome.UNCLEAN
                isr = (replica,)
                recovery = LeaderRecoveryState.RECOVERING
                break
    changed_isr = isr != part.isr
    changed_leader = leader != part.leader
    changed_recovery = recovery != part.leader_recovery_state
    if not (changed_isr or changed_leader or changed_recovery):
        return None, outcome
    return (
        PartitionChangeRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            isr=isr if changed_isr else None,
            leader=leader if changed_leader else NO_LEADER_CHANGE,
            leader_recovery_state=int(recovery) if changed_recovery else -1,
        ),
        outcome,
    )


def _choose_leader(
    part: PartitionRegistration,
    isr: tuple[int, ...],
    is_acceptable: Callable[[int], bool],
    election: Election,
) -> tuple[int, ElectionOutcome]:
    in_isr = set(isr)
    preferred = part.preferred_leader
    if election is Election.PREFERRED and preferred in in_isr and is_acceptable(preferred):
        if preferred == part.leader:
            return preferred, ElectionOutcome.KEPT
        return preferred, ElectionOutcome.CLEAN
    if part.leader != NO_LEADER and part.leader in in_isr and is_acceptable(part.leader):
        return part.leader, ElectionOutcome.KEPT
    for replica in part.replicas:
        if replica in in_isr and is_acceptable(replica):
            return replica, ElectionOutcome.CLEAN
    return NO_LEADER, ElectionOutcome.NONE
