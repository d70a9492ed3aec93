"""Pure high-watermark and ISR maths (no state, no I/O): Hypothesis tests
check each function against a naive reference.

Sources: Kafka's ``Partition.maybeIncrementLeaderHW``,
``ReplicaState.updateFetchStateOrThrow`` / ``isCaughtUp``,
``Partition.isFollowerInSync``; KIP-497 (maximal ISR), KIP-320 (epochs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from data_plane.replication.types import UNKNOWN_OFFSET


def high_watermark_candidate(
    leader_log_end_offset: int,
    local_id: int,
    maximal_isr: Iterable[int],
    follower_log_end_offsets: Mapping[int, int],
) -> int:
    """The smallest log end offset over the *maximal* ISR, leader included.

    A member with no known LEO (absent, or ``UNKNOWN_OFFSET``: it has not
    fetched in this leader epoch) pins the candidate at -1, so the HW cannot
    move until every member has acknowledged the leader's epoch by fetching in
    it (KIP-320 rule 3; Kafka resets follower LEOs on a new leader epoch).
    Using the maximal ISR (current + proposed while an AlterPartition is in
    flight) keeps the HW safe whichever way the controller decides (KIP-497).
    """
    candidate = leader_log_end_offset
    for replica in maximal_isr:
        if replica == local_id:
            continue
        candidate = min(candidate, follower_log_end_offsets.get(replica, UNKNOWN_OFFSET))
    return candidate


def next_high_watermark(current: int, candidate: int) -> int:
    """The HW never decreases: ``max(current, candidate)``."""
    return max(current, candidate)


def next_last_caught_up_time_ms(
    *,
    fetch_offset: int,
    leader_log_end_offset: int,
    last_caught_up_time_ms: int,
    last_fetch_leader_log_end_offset: int,
    last_fetch_time_ms: int,
    fetch_time_ms: int,
) -> int:
    """Kafka's ``lastCaughtUpTimeMs`` after a follower fetch at ``fetch_offset``.

    - Fetching at the leader's LEO: caught up now.
    - Fetching at or past the LEO the leader had at the *previous* fetch: it
      was caught up as of that previous fetch.
    - Otherwise unchanged. Never moves backwards.
    """
    if fetch_offset >= leader_log_end_offset:
        return max(last_caught_up_time_ms, fetch_time_ms)
    if fetch_offset >= last_fetch_leader_log_end_offset:
        return max(last_caught_up_time_ms, last_fetch_time_ms)
    return last_caught_up_time_ms


def is_caught_up(
    *,
    log_end_offset: int,
    leader_log_end_offset: int,
    last_caught_up_time_ms: int,
    now_ms: int,
    replica_lag_time_max_ms: int,
) -> bool:
    """Kafka's ``isCaughtUp``: at the leader's LEO, or caught up within the lag time."""
    return (
        log_end_offset == leader_log_end_offset
        or now_ms - last_caught_up_time_ms <= replica_lag_time_max_ms
    )


def can_join_isr(
    *,
    log_end_offset: int,
    high_watermark: int,
    leader_epoch_start_offset: int,
    fetched_in_current_epoch: bool,
) -> bool:
    """The three ISR-expansion conditions (kraft.md §2, KIP-320 rule 4).

    The follower (1) has reached the leader's HW, (2) has passed the start
    offset of the leader's epoch, and (3) has fetched in the current epoch
    (its LEO comes from a fetch the leader validated against its own log).
    """
    return (
        fetched_in_current_epoch
        and log_end_offset >= high_watermark
        and log_end_offset >= leader_epoch_start_offset
    )
