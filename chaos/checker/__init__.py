"""Checkers: judge a history (and replica logs) and say valid, invalid or unknown.

- `base`: `Result`, `Anomaly`, `compose`, `merge_valid` (Jepsen ``checker``).
- `kafka`: the queue-workload checkers (Jepsen ``tests/kafka.clj``).
- `replicas`: byte-level replica divergence below the HW.
"""

from chaos.checker.base import (
    UNKNOWN,
    Anomaly,
    Checker,
    Compose,
    Result,
    Validity,
    compose,
    make_result,
    merge_valid,
)
from chaos.checker.kafka import (
    AbortedReads,
    CommittedUnread,
    Duplicates,
    InconsistentOffsets,
    LostWrites,
    PollOrder,
    Unseen,
    VanishedReads,
    analyze,
    kafka_checkers,
)
from chaos.checker.replicas import ReplicaDivergence, read_log_below_hw

__all__ = [
    "UNKNOWN",
    "AbortedReads",
    "Anomaly",
    "Checker",
    "CommittedUnread",
    "Compose",
    "Duplicates",
    "InconsistentOffsets",
    "LostWrites",
    "PollOrder",
    "ReplicaDivergence",
    "Result",
    "Unseen",
    "Validity",
    "VanishedReads",
    "analyze",
    "compose",
    "kafka_checkers",
    "make_result",
    "merge_valid",
    "read_log_below_hw",
]
