"""Deliberately broken replication cores for the simulation's self-test
(never used outside it): if the simulation cannot catch these, it cannot
catch much."""

from __future__ import annotations

from data_plane.replication.leader import LeaderState
from data_plane.replication.partition import Partition


class _MaxLeoLeader(LeaderState):
    def high_watermark_candidate(self, leader_log_end_offset: int) -> int:
        # Broken on purpose: the HW is the *largest* LEO over the ISR, so the
        # leader acknowledges writes no follower has.
        leos = [leader_log_end_offset]
        leos += [s.log_end_offset for r, s in self.followers.items() if r in self.isr]
        return max(leos)


class HighWatermarkMaxLeoPartition(Partition):
    """HW = max LEO over the ISR instead of the min."""

    leader_state_class = _MaxLeoLeader


class _NoEpochStartLeader(LeaderState):
    expand_requires_epoch_start = False


class ExpandWithoutEpochStartPartition(Partition):
    """Adds followers to the ISR before they pass the leader's epoch start
    (breaks KIP-320 rule 4)."""

    leader_state_class = _NoEpochStartLeader


class _CommittedIsrHighWatermarkLeader(LeaderState):
    hw_over_maximal_isr = False


class HighWatermarkOverCommittedIsrPartition(Partition):
    """Counts the HW over the committed ISR only while an expansion is in
    flight (the maximal-ISR race, kraft.md §4 #4)."""

    leader_state_class = _CommittedIsrHighWatermarkLeader


class TruncateToHighWatermarkPartition(Partition):
    """Pre-KIP-101: a new follower truncates to its HW at once (kraft.md §4 #2)."""

    truncate_to_high_watermark_on_become_follower = True


BROKEN_VARIANTS: dict[str, type[Partition]] = {
    "hw_max_leo": HighWatermarkMaxLeoPartition,
    "expand_without_epoch_start": ExpandWithoutEpochStartPartition,
    "hw_over_committed_isr": HighWatermarkOverCommittedIsrPartition,
    "truncate_to_hw": TruncateToHighWatermarkPartition,
}

__all__ = ["BROKEN_VARIANTS"]
