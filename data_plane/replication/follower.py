"""The follower role of one partition replica (Kafka's follower half of
``Partition`` plus the per-partition part of ``AbstractFetcherThread``).

A `FollowerState` lives for one leader epoch and holds only its fetch
timers; the log and HW stay with the owning `Partition`. The truncation rule
is the pure function `divergence_truncation_offset`.

KIP-320 rule 1 ("after an epoch bump, reconcile before fetching") needs no
separate OffsetForLeaderEpoch round: every Fetch carries the follower's
``LastFetchedEpoch`` (Fetch v12+), and the leader validates it against its
own epoch cache before it returns a record or counts the fetch toward the
follower's LEO. The first fetch in a new epoch therefore either proves the
follower's log is a prefix of the leader's, or returns ``DivergingEpoch``
and the follower truncates before anything else is appended.
"""

from __future__ import annotations

from data_plane.replication.types import NO_LEADER, EpochEndOffset


class FollowerState:
    """Follower of ``leader_id`` in ``leader_epoch`` (both immutable).

    ``leader_id`` may be ``NO_LEADER`` (offline partition): nothing to fetch.
    """

    def __init__(self, *, leader_id: int, leader_epoch: int) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        # The leader answered FENCED_LEADER_EPOCH: our metadata is stale; fetch
        # nothing until a newer epoch arrives (a new FollowerState).
        self.fenced = False
        # replica.fetch.backoff.ms after a retriable error.
        self.backoff_until_ms = 0

    def can_fetch(self, now_ms: int) -> bool:
        return self.leader_id != NO_LEADER and not self.fenced and now_ms >= self.backoff_until_ms


def divergence_truncation_offset(
    diverging: EpochEndOffset,
    follower_end_for_epoch: tuple[int, int],
    log_end_offset: int,
    log_start_offset: int,
) -> int:
    """Where a follower truncates on ``DivergingEpoch`` (KIP-101/279/320).

    ``follower_end_for_epoch`` is the follower's own
    ``end_offset_for_epoch(diverging.epoch)`` = (largest epoch <= it, end).

    - The follower has the leader's epoch: truncate to the smaller of the two
      end offsets for it; everything below is common (truncation fenced by
      epoch, KIP-320 rule 2).
    - The follower lacks it: truncate to the end of its own largest smaller
      epoch; the next fetch (with that epoch) asks again. This is the
      KIP-279 step that converges after back-to-back leader changes.
    - No epoch information (-1): the leader's log is empty of epochs; keep
      at most its end offset.

    The result is clamped to [log start, log end]; it is always below the log
    end when the follower really diverges, so each round makes progress.
    """
    follower_epoch, follower_end = follower_end_for_epoch
    if diverging.epoch < 0 or follower_epoch < 0:
        target = min(diverging.end_offset, log_end_offset)
    elif follower_epoch == diverging.epoch:
        target = min(diverging.end_offset, follower_end)
    else:
        target = min(follower_end, log_end_offset)
    return max(log_start_offset, min(target, log_end_offset))
