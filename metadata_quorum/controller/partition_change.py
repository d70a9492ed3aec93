"""Leader election and ISR changes for one partition, as a PartitionChangeRecord.

After Kafka's ``PartitionChangeBuilder`` (design only). The rules:

1. The ISR becomes ``target_isr`` (or stays).
2. The leader is chosen, in order:
   - with ``Election.PREFERRED``: the preferred (first) replica, if it is in
     the ISR and acceptable;
   - the current leader, if it is still in the ISR and acceptable;
   - the first replica (in replica order) in the ISR that is acceptable;
   - with ELR on and an empty ISR: the first acceptable ELR member
     (KIP-966, a clean election): the ISR becomes it and it leaves the ELR;
   - with ELR on, an empty ISR and an empty ELR: the last known leader, if
     acceptable (KIP-966's "last known leader" recovery), as an unclean
     election;
   - with ``unclean``: the first acceptable replica outside the ISR; the ISR
     shrinks to it and the leader recovery state becomes RECOVERING
     (KIP-704), since it may lack committed records;
   - otherwise no leader (-1).
   "Acceptable" means unfenced and not in controlled shutdown (KIP-841).
3. Only changed fields go in the record; nothing changed -> no record.

**Eligible leader replicas (KIP-966)**, when the caller passes ``min_isr``
(the feature is on): while the ISR is at least ``min.insync.replicas`` (at
most the replica count) the ELR and the last known ELR are empty. When a
change takes the ISR below it, the members that leave it join the ELR (old
ELR plus old ISR, minus the new ISR, minus any replica that restarted after
an unclean shutdown): the leader stops advancing the high watermark below
``min.insync.replicas``, so each of them holds every committed record. The ISR may then become empty; a
partition whose ISR empties keeps its last leader in ``last_known_elr``
until it has a leader again. An unclean election, or the feature off,
clears both sets.

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


def isr_without(isr: tuple[int, ...], broker_id: int, *, elr: bool = False) -> tuple[int, ...]:
    """``isr`` minus ``broker_id``; without ``elr``, unless that would leave
    it empty.

    Without KIP-966's ELR, Kafka keeps the last ISR member even when it is
    fenced, so that the partition can elect it cleanly when it returns.
    With it, the member leaves, and the ELR keeps it electable.
    """
    if broker_id not in isr or (len(isr) == 1 and not elr):
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
    min_isr: int | None = None,
    unclean_shutdown: frozenset[int] = frozenset(),
) -> PartitionChangeRecord | None:
    """The record applying the rules above, or None if nothing would change.

    Raises ValueError if ``target_isr`` is not a subset of the replicas.
    """
    record, _outcome = elect(
        topic_id, partition_id, part, is_acceptable=is_acceptable, target_isr=target_isr,
        unclean=unclean, election=election, target_recovery_state=target_recovery_state,
        min_isr=min_isr, unclean_shutdown=unclean_shutdown,
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
    min_isr: int | None,
    unclean_shutdown: frozenset[int] = frozenset(),
) -> tuple[PartitionChangeRecord | None, ElectionOutcome]:
    """`build_partition_change`, also saying how the leader was chosen.

    ``min_isr`` is the topic's ``min.insync.replicas`` when KIP-966 is on
    (None: off, which clears any ELR; so every caller must say which).
    ``unclean_shutdown`` names replicas that restarted after an unclean
    shutdown, which may not join the ELR.
    """
    isr = part.isr if target_isr is None else target_isr
    if not set(isr) <= set(part.replicas):
        raise ValueError(f"target ISR {isr} is not a subset of replicas {part.replicas}")
    recovery = part.leader_recovery_state if target_recovery_state is None else (
        target_recovery_state
    )
    elr, last_known = _target_elr(part, isr, min_isr, unclean_shutdown)
    leader, outcome = _choose_leader(part, isr, is_acceptable, election)
    if outcome is ElectionOutcome.NONE and min_isr is not None and not isr:
        leader = next((b for b in elr if is_acceptable(b)), NO_LEADER)
        if leader != NO_LEADER:
            outcome, isr = ElectionOutcome.CLEAN, (leader,)
            elr = tuple(b for b in elr if b != leader)
        elif not elr and len(part.last_known_elr) == 1 and is_acceptable(part.last_known_elr[0]):
            # Every replica that surely had the committed records restarted
            # uncleanly; the last leader most likely still has them.
            leader, outcome = part.last_known_elr[0], ElectionOutcome.UNCLEAN
            isr, recovery = (leader,), LeaderRecoveryState.RECOVERING
    if outcome is ElectionOutcome.NONE and unclean:
        for replica in part.replicas:
            if is_acceptable(replica):
                leader, outcome = replica, ElectionOutcome.UNCLEAN
                isr = (replica,)
                recovery = LeaderRecoveryState.RECOVERING
                break
    if outcome is ElectionOutcome.UNCLEAN:
        elr = last_known = ()
    elif min_isr is not None:
        if not isr and part.isr and part.leader != NO_LEADER:
            last_known = (part.leader,)  # the ISR empties: remember who led
        elif leader != NO_LEADER:
            last_known = ()
    changed_isr = isr != part.isr
    changed_leader = leader != part.leader
    changed_recovery = recovery != part.leader_recovery_state
    changed_elr = elr != part.elr
    changed_last_known = last_known != part.last_known_elr
    if not (changed_isr or changed_leader or changed_recovery or changed_elr
            or changed_last_known):
        return None, outcome
    return (
        PartitionChangeRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            isr=isr if changed_isr else None,
            leader=leader if changed_leader else NO_LEADER_CHANGE,
            leader_recovery_state=int(recovery) if changed_recovery else -1,
            eligible_leader_replicas=elr if changed_elr else None,
            last_known_elr=last_known if changed_last_known else None,
        ),
        outcome,
    )


def _target_elr(
    part: PartitionRegistration,
    isr: tuple[int, ...],
    min_isr: int | None,
    unclean_shutdown: frozenset[int],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ELR and last known ELR before the election (module docstring).
    The effective minimum is at most the replica count, as Kafka's."""
    if min_isr is None or len(isr) >= min(min_isr, len(part.replicas)):
        return (), ()
    candidates = set(part.elr) | set(part.isr)
    in_isr = set(isr)
    elr = tuple(b for b in part.replicas
                if b in candidates and b not in in_isr and b not in unclean_shutdown)
    return elr, part.last_known_elr


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
