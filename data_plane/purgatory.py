"""Delayed operations (Kafka's ``DelayedOperationPurgatory``), sans-I/O.

An operation waits, keyed by the partitions it concerns (and, for a
follower's fetch, by its session's parked partitions: `FetchParking`), until
its condition holds or its deadline passes:

- `DelayedProduce`: acks=all waits for the HW to reach each partition's
  required offset (done with NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, or
  NOT_LEADER_OR_FOLLOWER), bounded by the request timeout (REQUEST_TIMED_OUT).
- `DelayedFetch`: long poll until ``fetch.min.bytes`` are readable or
  ``fetch.max.wait.ms`` passes; the caller then reads again and answers.
- `DelayedDeleteRecords`: DeleteRecords waits for every replica's log start
  offset to reach the deleted offset, bounded by the request timeout.

The shell calls `Purgatory.check_and_complete` after anything that can
satisfy a waiter (an append, a HW move, an ISR or role change) and
`Purgatory.expire` when `Purgatory.next_deadline_ms` comes, so it sleeps
exactly until the next deadline. Deadlines sit in one
``sortedcontainers.SortedList``: no per-request timer, no polling.
Completion and expiry return the finished operations; their ``outcome``
says what to answer.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterable, Mapping
from enum import Enum
from typing import Generic, Protocol, TypeVar

from sortedcontainers import SortedList

from data_plane.replication.types import FetchPartition, TopicPartition
from raftlog.net.errors import ErrorCode
from raftlog.values import value


class ReplicaView(Protocol):
    """What delayed operations ask of a partition (implemented by `Partition`)."""

    def check_enough_replicas_reach_offset(
        self, required_offset: int, leader_epoch: int
    ) -> tuple[bool, ErrorCode]: ...

    def delayed_fetch_bytes(self, request: FetchPartition) -> int | None: ...

    def delete_records_low_watermark(self) -> int | None: ...


PartitionLookup = Callable[[TopicPartition], "ReplicaView | None"]


class FetchParking(Hashable, Protocol):
    """A follower fetch session's parked partitions (`data_plane.api.fetch`):
    idle partitions its fetches neither serve nor ask while nothing moves
    them. A `DelayedFetch` of the session watches the parking itself as one
    key. When a parked partition changes, the shell calls `unpark`; if that
    returns True, it checks the fetch purgatory under the parking, and the
    waiting fetch then asks the partitions in ``woken``."""

    @property
    def woken(self) -> Mapping[TopicPartition, FetchPartition]:
        """Partitions unparked by a change since the current fetch began,
        with the request their session holds."""
        ...

    def unpark(self, key: TopicPartition) -> bool:
        """``key`` changed: stop skipping it. Returns whether the current
        fetch should look at it (it was parked, or was woken during this
        fetch already); False also tells the shell to stop telling it."""
        ...


class DelayedOperation(abc.ABC):
    """One waiting request. Subclasses implement `try_complete` and
    `on_expiration`; the purgatory calls each at most until one finishes it.

    ``keys`` are the partitions (or a `FetchParking`) whose changes may
    complete it; ``deadline_ms`` is when it expires.
    """

    def __init__(self, keys: Iterable[Hashable], deadline_ms: int) -> None:
        self.keys: tuple[Hashable, ...] = tuple(dict.fromkeys(keys))
        if not self.keys:
            raise ValueError("a delayed operation needs at least one key")
        self.deadline_ms = deadline_ms
        self.completed = False

    @abc.abstractmethod
    def try_complete(self, now_ms: int, changed: Hashable | None = None) -> bool:
        """Return True (having set the outcome) if the operation can finish now.

        ``changed``: the key whose change prompted the check
        (`Purgatory.check_and_complete`), None for a first check; an
        operation may re-examine only that partition."""

    @abc.abstractmethod
    def on_expiration(self, now_ms: int) -> None:
        """Set the outcome for a deadline that passed first."""


Op = TypeVar("Op", bound=DelayedOperation)


class Purgatory(Generic[Op]):
    """Watches delayed operations by key and by deadline.

    Invariant: an operation is in ``_by_key`` under each of its keys and in
    ``_deadlines`` exactly while it is neither completed nor expired.
    """

    def __init__(self, name: str = "purgatory") -> None:
        self.name = name
        self._by_key: dict[Hashable, dict[int, Op]] = {}
        self._ops: dict[int, Op] = {}
        # (deadline_ms, sequence, id(op)): sequence breaks ties in insertion order.
        self._deadlines: SortedList = SortedList()
        self._entry_of: dict[int, tuple[int, int, int]] = {}
        self._next_sequence = 0

    def __len__(self) -> int:
        return len(self._ops)

    def watched(self, key: Hashable) -> int:
        """How many operations wait on ``key``."""
        return len(self._by_key.get(key, ()))

    def try_complete_else_watch(self, op: Op, now_ms: int) -> bool:
        """Complete ``op`` now if it can, else watch it. Returns whether it completed.

        Raises `ValueError` if ``op`` already finished or is already watched.
        """
        if op.completed or id(op) in self._ops:
            raise ValueError("operation already finished or watched")
        if op.try_complete(now_ms):
            op.completed = True
            return True
        seq = self._next_sequence
        self._next_sequence += 1
        self._ops[id(op)] = op
        entry = (op.deadline_ms, seq, id(op))
        self._entry_of[id(op)] = entry
        self._deadlines.add(entry)
        for key in op.keys:
            self._by_key.setdefault(key, {})[id(op)] = op
        return False

    def check_and_complete(self, key: Hashable, now_ms: int) -> list[Op]:
        """Try every operation watching ``key``; return those that completed
        (in the order they were watched)."""
        watchers = self._by_key.get(key)
        if not watchers:
            return []
        done = [op for op in list(watchers.values()) if op.try_complete(now_ms, key)]
        for op in done:
            op.completed = True
            self._forget(op)
        return done

    def expire(self, now_ms: int) -> list[Op]:
        """Expire every operation whose deadline is <= ``now_ms``, earliest first."""
        expired: list[Op] = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            op = self._ops[self._deadlines[0][2]]
            op.on_expiration(now_ms)
            op.completed = True
            self._forget(op)
            expired.append(op)
        return expired

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a watched operation, or None if none waits."""
        return self._deadlines[0][0] if self._deadlines else None

    def cancel(self, op: Op) -> bool:
        """Stop watching ``op`` without an outcome (its connection closed)."""
        if id(op) not in self._ops:
            return False
        self._forget(op)
        return True

    def _forget(self, op: Op) -> None:
        key_id = id(op)
        del self._ops[key_id]
        self._deadlines.remove(self._entry_of.pop(key_id))
        for key in op.keys:
            watchers = self._by_key[key]
            del watchers[key_id]
            if not watchers:
                del self._by_key[key]


# ---- DelayedProduce -------------------------------------------------------------


@value
class ProduceWait:
    """One partition of an acks=all produce: the HW it needs, in which epoch."""

    required_offset: int
    leader_epoch: int


class DelayedProduce(DelayedOperation):
    """acks=all: wait until every partition's HW reaches its required offset.

    ``outcome`` maps each partition to its error: NONE,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR fell below
    ``min.insync.replicas``), NOT_LEADER_OR_FOLLOWER (leadership moved: an
    indefinite answer, KAFKA-13574) or REQUEST_TIMED_OUT at the deadline.
    """

    def __init__(
        self,
        waits: Mapping[TopicPartition, ProduceWait],
        *,
        deadline_ms: int,
        lookup: PartitionLookup,
    ) -> None:
        super().__init__(waits.keys(), deadline_ms)
        self.waits = dict(waits)
        self._lookup = lookup
        self.outcome: dict[TopicPartition, ErrorCode] = {}

    def try_complete(self, now_ms: int, changed: Hashable | None = None) -> bool:
        for key, wait in self.waits.items():
            if key in self.outcome:
                continue
            replica = self._lookup(key)
            if replica is None:
                self.outcome[key] = ErrorCode.not_leader_or_follower
                continue
            done, error = replica.check_enough_replicas_reach_offset(
                wait.required_offset, wait.leader_epoch
            )
            if done:
                self.outcome[key] = error
        return len(self.outcome) == len(self.waits)

    def on_expiration(self, now_ms: int) -> None:
        for key in self.waits:
            self.outcome.setdefault(key, ErrorCode.request_timed_out)


# ---- DelayedDeleteRecords -------------------------------------------------------


class DelayedDeleteRecords(DelayedOperation):
    """DeleteRecords: wait until each partition's low watermark (the lowest
    log start offset over its eligible replicas) reaches the offset the
    leader moved its own log start to (Kafka's ``DelayedDeleteRecords``).

    ``outcome`` maps each partition to (error, low watermark): NONE once
    reached, NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT
    at the deadline (the records are deleted on the leader either way).
    """

    def __init__(
        self, targets: Mapping[TopicPartition, int], *, deadline_ms: int, lookup: PartitionLookup,
    ) -> None:
        super().__init__(targets.keys(), deadline_ms)
        self.targets = dict(targets)
        self._lookup = lookup
        self.outcome: dict[TopicPartition, tuple[ErrorCode, int]] = {}

    def try_complete(self, now_ms: int, changed: Hashable | None = None) -> bool:
        for key, target in self.targets.items():
            if key in self.outcome:
                continue
            low = self._low_watermark(key)
            if low is None:
                self.outcome[key] = (ErrorCode.not_leader_or_follower, -1)
            elif low >= target:
                self.outcome[key] = (ErrorCode.none, low)
        return len(self.outcome) == len(self.targets)

    def on_expiration(self, now_ms: int) -> None:
        for key in self.targets:
            if key not in self.outcome:
                low = self._low_watermark(key)
                self.outcome[key] = (ErrorCode.request_timed_out, -1 if low is None else low)

    def _low_watermark(self, key: TopicPartition) -> int | None:
        replica = self._lookup(key)
        return None if replica is None else replica.delete_records_low_watermark()


# ---- DelayedFetch ---------------------------------------------------------------


class FetchOutcome(Enum):
    """Why a DelayedFetch finished: answer by reading again either way."""

    SATISFIED = "satisfied"  # min bytes available, or a partition needs an answer now
    EXPIRED = "expired"  # fetch.max.wait.ms passed


class DelayedFetch(DelayedOperation):
    """Long poll: wait until ``fetch.min.bytes`` are readable over all
    partitions, or one of them must answer now (leader or epoch change,
    divergence, truncation), or ``fetch.max.wait.ms`` passes (Kafka's
    ``DelayedFetch.tryComplete``). The caller reads again on completion.

    The first check asks every partition; a later one, prompted by a change
    to one partition, asks only that one and keeps the others' last answers
    (``_readable``). A follower fetches every partition it follows from a
    leader in one request (tens, with ``__consumer_offsets``), and every
    append re-checks each parked fetch, so asking them all made each append
    cost O(partitions) on the acks=all path. The shell calls
    `Purgatory.check_and_complete` for every change that can move a
    partition's answer (append, HW move, ISR or role change, log start
    moved by retention).

    ``held_back``: for a follower's fetch under a leader replication
    throttle (KIP-73), whether a partition's readable bytes are held back
    now; they then count for nothing, so a throttled catching-up follower
    waits out its long poll instead of being answered empty at once.

    ``parking``: the follower session's parked partitions (`FetchParking`),
    watched as one key. They are not asked at the first check; each one a
    change unparks (``parking.woken``) joins ``requests`` and is asked at
    the next check, so `changed_partitions` can name it.
    """

    def __init__(
        self,
        requests: Mapping[TopicPartition, FetchPartition],
        *,
        min_bytes: int,
        deadline_ms: int,
        lookup: PartitionLookup,
        parking: FetchParking | None = None,
        held_back: Callable[[TopicPartition, FetchPartition], bool] | None = None,
    ) -> None:
        keys: list[Hashable] = list(requests)
        if parking is not None:
            keys.append(parking)
        super().__init__(keys, deadline_ms)
        self.requests = dict(requests)
        self.min_bytes = min_bytes
        self._lookup = lookup
        self._parking = parking
        self._held_back = held_back
        self.outcome: FetchOutcome | None = None
        # Partition -> bytes readable at its last check.
        self._readable: dict[TopicPartition, int] = {}
        # Whether the first check asked every partition of ``requests``.
        self._first_done = False
        # The partition that had to answer at once, if that completed the fetch.
        self._answer_now: TopicPartition | None = None

    def try_complete(self, now_ms: int, changed: Hashable | None = None) -> bool:
        keys: list[TopicPartition]
        if not self._first_done:
            keys = list(self.requests)
        elif changed is not None and changed in self._readable:
            keys = [changed]  # a partition key
        else:
            keys = []
        parking = self._parking
        if parking is not None and parking.woken:
            # Woken parked partitions join; a check under the parking itself
            # (one of them changed again) asks them all again.
            for key, request in parking.woken.items():
                if key not in self.requests:
                    self.requests[key] = request
                    keys.append(key)
                elif changed is parking and key not in keys:
                    keys.append(key)
        for key in keys:
            replica = self._lookup(key)
            readable = None if replica is None else replica.delayed_fetch_bytes(self.requests[key])
            if readable is None:
                self.outcome = FetchOutcome.SATISFIED
                self._answer_now = key
                return True
            if readable and self._held_back is not None and self._held_back(key, self.requests[key]):
                readable = 0  # the replication throttle holds these bytes back
            self._readable[key] = readable
        self._first_done = True
        if sum(self._readable.values()) >= self.min_bytes:
            self.outcome = FetchOutcome.SATISFIED
            return True
        return False

    def on_expiration(self, now_ms: int) -> None:
        self.outcome = FetchOutcome.EXPIRED

    def changed_partitions(self) -> set[TopicPartition] | None:
        """After a SATISFIED outcome: the partitions that had readable bytes or
        had to answer at its last checks (the others had nothing new to
        read; a woken parked partition not asked yet is left for the next
        fetch, which serves it). None if that is not known (expired, or
        completed during the first check)."""
        if self.outcome is not FetchOutcome.SATISFIED or not self._first_done:
            return None
        changed = {key for key, readable in self._readable.items() if readable > 0}
        if self._answer_now is not None:
            changed.add(self._answer_now)
        return changed
