"""A scripted-test harness around one `KRaftCore` (Kafka's RaftClientTestContext).

The context plays the runtime: after every input it drains `Ready`s in the
prescribed order (persist, send, apply, advance), keeping what was "sent"
for `assert_sent` and what was applied in `events`. Time moves only
through `advance_time`.
"""

from __future__ import annotations

import random
from typing import Any, TypeVar

from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    HIGH_WATERMARK_UNSUPPORTED,
    BeginQuorumEpochRequest,
    Body,
    Envelope,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.ready import ListenerEvent, Ready
from raftlog.consensus.roles import ElectionState
from raftlog.records import BatchBuilder
from raftlog.testing.memory_log import MemoryLog

T = TypeVar("T")


class RaftTestContext:
    """One core under test plus its fake log, quorum-state store and outbox."""

    def __init__(self, *, local_id: int = 1, voters: tuple[int, ...] = (1, 2, 3),
                 seed: int = 0, log: MemoryLog | None = None,
                 stored: ElectionState | None = None, recovering: bool = False,
                 **config: Any) -> None:
        self.local_id = local_id
        self.voters = voters
        self.config = QuorumConfig(voters=frozenset(voters), **config)
        self.log = log if log is not None else MemoryLog()
        self.now_ms = 0
        self.stored = stored
        self.sent: list[Envelope] = []
        self.events: list[ListenerEvent] = []
        self.readies: list[Ready] = []
        self.core = KRaftCore(node_id=local_id, config=self.config, log=self.log,
                              rng=random.Random(seed), stored=stored, now_ms=0,
                              recovering=recovering)
        self.drain()

    # -- driving ---------------------------------------------------------------

    def drain(self) -> None:
        """Handle every pending Ready like the runtime: persist, send, apply, advance."""
        while self.core.has_ready():
            ready = self.core.ready()
            self.readies.append(ready)
            if ready.election_state is not None:
                self.stored = ready.election_state
            if ready.flush_log_to is not None:
                self.log.flush()
            self.sent.extend(ready.messages)
            self.events.extend(ready.events)
            self.core.advance(ready)

    def deliver(self, source: int, body: Body, correlation_id: int = 0) -> None:
        """Step one message from ``source`` into the core, then drain."""
        self.core.step(Envelope(source, self.local_id, body, correlation_id), self.now_ms)
        self.drain()

    def advance_time(self, ms: int) -> None:
        """Move the clock, run the timers, drain."""
        self.now_ms += ms
        self.core.tick(self.now_ms)
        self.drain()

    def tick(self) -> None:
        self.core.tick(self.now_ms)
        self.drain()

    def propose(self, *values: bytes) -> int:
        offset = self.core.propose(list(values), self.now_ms)
        self.drain()
        return offset

    # -- assertions --------------------------------------------------------------

    def assert_sent(self, kind: type[T], destination: int | None = None,
                    **expected: object) -> tuple[Envelope, T]:
        """Pop the first sent message of ``kind`` (to ``destination``) and check
        the given fields. Raises AssertionError if there is none."""
        for i, env in enumerate(self.sent):
            if isinstance(env.body, kind) and destination in (None, env.destination):
                del self.sent[i]
                for name, value in expected.items():
                    actual = getattr(env.body, name)
                    assert actual == value, f"{kind.__name__}.{name} = {actual!r}, want {value!r}"
                return env, env.body
        raise AssertionError(f"no {kind.__name__} to {destination} in {self.sent}")

    def assert_nothing_sent(self, kind: type[object]) -> None:
        found = [e for e in self.sent if isinstance(e.body, kind)]
        assert not found, f"unexpected {kind.__name__}: {found}"

    def clear_sent(self) -> None:
        self.sent.clear()

    # -- builders ------------------------------------------------------------------

    def with_elected_leader(self) -> RaftTestContext:
        """Make the local node leader of the next epoch (pre-vote, vote, win)."""
        self.advance_time(self.config.election_timeout_ms * 2)
        for voter in self.voters:
            if voter == self.local_id:
                continue
            env, _ = self.assert_sent(VoteRequest, voter, pre_vote=True)
            if self.core.role_name != "Prospective":
                break
            self.deliver(voter, VoteResponse(Errors.NONE, self.core.epoch, -1, True),
                         env.correlation_id)
        for voter in self.voters:
            if voter == self.local_id or self.core.is_leader:
                continue
            env, _ = self.assert_sent(VoteRequest, voter, pre_vote=False)
            self.deliver(voter, VoteResponse(Errors.NONE, self.core.epoch, -1, True),
                         env.correlation_id)
        assert self.core.is_leader, self.core.role_name
        self.sent = [e for e in self.sent if not isinstance(e.body, VoteRequest)]
        return self

    def with_leader(self, leader_id: int, epoch: int) -> RaftTestContext:
        """Make the local node follow ``leader_id`` in ``epoch``."""
        self.deliver(leader_id, BeginQuorumEpochRequest(epoch, leader_id))
        return self

    def follower_fetch(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
                       max_wait_ms: int = 0,
                       high_watermark: int = HIGH_WATERMARK_UNSUPPORTED) -> None:
        """A follower's Fetch arrives at the (local) leader; ``high_watermark``
        is the HW it knows (KIP-1166; by default it sends none, Fetch v17)."""
        self.deliver(replica_id, FetchRequest(replica_id, self.core.epoch, fetch_offset,
                                              last_fetched_epoch, max_wait_ms, 1 << 20,
                                              high_watermark=high_watermark),
                     correlation_id=1000 + replica_id)

    def answer_fetch(self, **response: Any) -> FetchRequest:
        """Answer the local follower's outstanding Fetch with ``response`` fields."""
        env, req = self.assert_sent(FetchRequest)
        defaults: dict[str, Any] = {
            "error": Errors.NONE, "leader_epoch": self.core.epoch,
            "leader_id": env.destination, "high_watermark": -1, "log_start_offset": 0}
        defaults.update(response)
        self.deliver(env.destination, FetchResponse(**defaults), env.correlation_id)
        return req


def leader_batch(epoch: int, *values: bytes, base_offset: int = 0) -> bytes:
    """A data batch as a leader of ``epoch`` would have written it."""
    builder = BatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for value in values:
        builder.append(value, timestamp_ms=0)
    return builder.build()


def seed_log(log: MemoryLog, epochs: list[int]) -> None:
    """Append one single-record batch per entry of ``epochs`` (as a follower)."""
    for epoch in epochs:
        log.append_as_follower(leader_batch(epoch, b"x", base_offset=log.end_offset()))
    log.flush()


__all__ = ["RaftTestContext", "leader_batch", "seed_log"]
