"""`Ready`: everything the runtime must do for the core, in order, and the
listener callbacks it delivers (KRaft's ``RaftClient.Listener``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from raftlog.consensus.messages import Envelope
from raftlog.consensus.roles import ElectionState
from raftlog.consensus.snapshot import SnapshotId


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """A committed record batch (whole v2 batch bytes), delivered in offset order."""

    base_offset: int
    last_offset: int
    epoch: int
    is_control: bool
    data: bytes

    def __post_init__(self) -> None:
        if self.last_offset < self.base_offset:
            raise ValueError("a batch holds at least one record")


@dataclass(frozen=True, slots=True)
class SnapshotLoad:
    """The state machine must reset to this snapshot (KIP-630 handleLoadSnapshot)."""

    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """A leadership change (``leader_id`` None: no leader known in ``epoch``)."""

    leader_id: int | None
    epoch: int


ListenerEvent = CommittedBatch | SnapshotLoad | LeaderAndEpoch


class Listener(Protocol):
    """What the state machine on top of the log implements."""

    def handle_commit(self, batch: CommittedBatch) -> None: ...

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


@dataclass(frozen=True, slots=True)
class Ready:
    """One unit of work for the runtime. Handle it in this order:

    1. persist: if ``election_state`` is set, write it and fsync; if
       ``flush_log_to`` is set, flush the log until ``flushed_offset() >=
       flush_log_to`` (fsync);
    2. send ``messages`` (nothing in them may be sent before step 1, as they
       may promise a vote or acknowledge records; etcd's msgsAfterAppend);
    3. apply ``events`` to the listener, in order (`deliver`);
    4. call ``core.advance(ready)``.

    ``send_before_persist`` relaxes that order: when True, no message or
    event depends on step 1, so a runtime may send and apply first and flush
    while the messages travel. The core sets it only for a Ready without an
    ``election_state`` whose messages are all responses that promise nothing
    about this node's disk: a leader's Fetch answers carrying records it has
    not flushed yet (Raft thesis 10.2.1: the leader writes to its disk in
    parallel with replicating, since its high watermark counts only its own
    *flushed* offset; etcd sends MsgApp before its own append is durable).
    Its events are committed batches, which are durable already (they are
    below the flushed offset). Follower Fetch requests, which acknowledge
    records, and votes never qualify. A runtime may ignore the flag.
    """

    election_state: ElectionState | None
    flush_log_to: int | None
    messages: tuple[Envelope, ...]
    events: tuple[ListenerEvent, ...]
    high_watermark: int
    send_before_persist: bool = False

    @property
    def must_sync(self) -> bool:
        """Whether step 1 has an fsync to do."""
        return self.election_state is not None or self.flush_log_to is not None

    @property
    def committed(self) -> tuple[CommittedBatch, ...]:
        return tuple(e for e in self.events if isinstance(e, CommittedBatch))

    @property
    def snapshot_to_load(self) -> SnapshotLoad | None:
        loads = [e for e in self.events if isinstance(e, SnapshotLoad)]
        return loads[-1] if loads else None

    @property
    def leader_changes(self) -> tuple[LeaderAndEpoch, ...]:
        return tuple(e for e in self.events if isinstance(e, LeaderAndEpoch))

    def is_empty(self) -> bool:
        return not (self.must_sync or self.messages or self.events)

    def deliver(self, listener: Listener) -> None:
        """Step 3: call the listener for every event, in order."""
        for event in self.events:
            if isinstance(event, CommittedBatch):
                listener.handle_commit(event)
            elif isinstance(event, SnapshotLoad):
                listener.handle_load_snapshot(event)
            else:
                listener.handle_leader_change(event)
