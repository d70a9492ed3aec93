"""Kafka error codes used by the KRaft RPCs, and the core's typed errors.

The numeric values are Kafka's (`org.apache.kafka.common.protocol.Errors`),
so the kio wire mapping is one to one.
"""

from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    """A subset of Kafka's error codes, with Kafka's numbers."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INVALID_RECORD = 87
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104


class RaftError(Exception):
    """Base class of the core's typed errors (caller misuse, STYLE.md section 8)."""


class NotLeaderError(RaftError):
    """A proposal reached a node that is not the leader.

    ``leader_id`` is the leader this node knows of (None if none) in ``epoch``.
    """

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader; leader is {leader_id} in epoch {epoch}")
        self.leader_id = leader_id
        self.epoch = epoch


class IllegalTransitionError(RaftError):
    """A `QuorumState.transition_to_*` call whose precondition does not hold.

    Raised for a broken invariant: the node must stop (STYLE.md section 8, tier 3).
    """


class InvariantError(RaftError):
    """A broken invariant (log, high watermark, ...); the node must stop."""
