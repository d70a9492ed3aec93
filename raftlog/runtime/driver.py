"""`RaftDriver`: the asyncio shell that runs one `KRaftCore` (etcd's ``node.go``
around ``RawNode``; Kafka's ``KafkaRaftClientDriver``).

One task, the driver loop, owns the core: nothing else calls it. Everything
else talks to the loop through its inbox:

- **Inbound requests** (from the server handlers, `handle_request`) are
  stepped as envelopes whose correlation id the driver assigns; the future
  of the waiting handler is filed under ``(source, correlation id)``. The
  core answers a request with a response envelope to that source echoing
  that id (``messages.Envelope``), so when a Ready carries a *response*
  envelope the driver completes the matching future and the handler writes
  it back on the connection the request came in on. A request the core
  never answers (e.g. a parked fetch dropped when leadership ends) gets
  REQUEST_TIMED_OUT after its wait budget, so no connection stalls.
- **Outbound requests** (request envelopes in a Ready) go to the
  `Transport`, one task each; the peer's response (or the error response a
  failure maps to) comes back through the inbox and is stepped with the
  envelope's correlation id, which the core uses to match it.
- **Proposals** (`propose`) queued together are proposed to the core in one
  call (their offsets are contiguous), and each future is resolved when a
  committed batch covers its last offset: with the offset if the batch has
  the epoch it was proposed in, else `ProposalLostError` (another leader's
  entry committed there). A committed entry of a later epoch also answers
  `ProposalLostError` to every older-epoch proposal beyond it (log matching:
  none of them can commit after it), so a deposed leader's callers learn
  their fate when the successor's first entry commits.
- **Timers**: the loop sleeps until the inbox has something or ``tick``'s
  deadline passes.

Each `Ready` is handled strictly in order (STYLE.md section 1):

1. persist: write+fsync the quorum state and fsync the log, in a worker
   thread (``asyncio.to_thread``) so the event loop keeps accepting
   requests, which queue up for the next round (that is the group commit:
   every proposal that arrived during one fsync goes into the next one).
   With ``inline_follower_fsync`` a non-leader fsyncs on the loop instead,
   saving the thread handoff: for a process whose loop does nothing else
   (the standalone quorum node), not one that shares it with brokers;
2. send: only after step 1 returned;
3. apply: the user's listener, then proposal bookkeeping;
4. ``core.advance(ready)``.

Exception: a Ready the core marks ``send_before_persist`` (a leader's fetch
answers and committed batches, nothing that promises durability) is sent
and applied first and flushed after, so the leader's fsync overlaps the
followers' (Raft thesis 10.2.1).

The driver makes no protocol decisions: what to answer, when to vote, what
is committed all come from the core. A broken invariant or a failed fsync
stops the driver (`failure`); the node must exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from raftlog.clock import Clock
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import Errors, NotLeaderError, RaftError
from raftlog.consensus.log import ReplicatedLog
from raftlog.consensus.messages import (
    DescribeQuorumResponse,
    Envelope,
    FetchRequest,
    Request,
    Response,
)
from raftlog.consensus.ready import (
    CommittedBatch,
    LeaderAndEpoch,
    Listener,
    Ready,
    SnapshotLoad,
)
from raftlog.consensus.roles import ElectionState
from raftlog.runtime import wire

__all__ = (
    "DriverStoppedError",
    "ElectionStateStore",
    "ProposalLostError",
    "ProposalOutcomeUnknownError",
    "RaftDriver",
    "Transport",
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# Anonymous fetchers (replica id -1) get envelope sources from here up: above
# any int32 node id, so they never collide with a real node.
_ANONYMOUS_SOURCE_BASE: Final = 1 << 31


class Transport(Protocol):
    """How the driver reaches peers (the real one is `raftlog.runtime.transport`).

    ``send`` returns the peer's response to ``request``; it never raises for
    a network failure but returns ``wire.error_response(request, code)``
    (BROKER_NOT_AVAILABLE, REQUEST_TIMED_OUT), as Kafka's
    ``KafkaNetworkChannel`` does, so the core hears about every request.
    """

    async def send(self, destination: int, request: Request) -> Response: ...

    async def close(self) -> None: ...


class ElectionStateStore(Protocol):
    """Durable `ElectionState` (the real one is `QuorumStateStore`)."""

    def write(self, state: ElectionState) -> None: ...


class DriverStoppedError(RaftError):
    """The driver is not running (stopped, or failed: see ``__cause__``)."""


class ProposalLostError(RaftError):
    """The proposal's offset was committed with another leader's entry: it is
    definitely not in the log (safe to retry)."""

    def __init__(self, offset: int, epoch: int, committed_epoch: int) -> None:
        super().__init__(
            f"offset {offset} proposed in epoch {epoch} committed with epoch {committed_epoch}"
        )
        self.offset = offset
        self.epoch = epoch


class ProposalOutcomeUnknownError(RaftError):
    """It is unknown whether the proposal committed (a snapshot was loaded over
    it, or the driver stopped first). Treat as indefinite (KAFKA-13574)."""


# A proposal waiting for its commit: (last offset, seq, epoch, future), a heap
# by last offset (tuples, not a dataclass: the comparisons run in C).
_Pending = tuple[int, int, int, "asyncio.Future[int]"]


@dataclass(slots=True)
class _Proposal:
    values: Sequence[bytes]
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Inbound:
    source: int
    body: Request
    future: asyncio.Future[Response]


@dataclass(slots=True)
class _ResponseIn:
    envelope: Envelope


@dataclass(slots=True)
class _Call:
    function: Callable[[KRaftCore, int], Any]
    future: asyncio.Future[Any]


_Item = _Proposal | _Inbound | _ResponseIn | _Call


class _NoListener:
    def handle_commit(self, batch: CommittedBatch) -> None:
        pass

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        pass

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        pass


class RaftDriver:
    """Runs ``core`` over ``transport``, persisting to ``log`` and ``state_store``.

    ``start`` launches the loop; `handle_request`, `propose`,
    `describe_quorum`, `resign` and `create_snapshot` may be called from any
    task on the same event loop. ``stop`` ends it (optionally resigning
    first). ``now_ms`` fed to the core is monotonic, offset to read as epoch
    milliseconds at start (DescribeQuorum timestamps look like Kafka's).
    ``inline_follower_fsync``: see the module doc (step 1).
    """

    def __init__(
        self,
        *,
        core: KRaftCore,
        log: ReplicatedLog,
        state_store: ElectionStateStore,
        transport: Transport,
        clock: Clock,
        listener: Listener | None = None,
        request_timeout_ms: int | None = None,
        inline_follower_fsync: bool = False,
    ) -> None:
        self.core = core
        self.node_id = core.node_id
        self._log = log
        self._store = state_store
        self._transport = transport
        self._clock = clock
        self._listener: Listener = listener if listener is not None else _NoListener()
        self._request_timeout_ms = request_timeout_ms or core.config.request_timeout_ms
        self._inline_follower_fsync = inline_follower_fsync
        self._wall_base_ms = clock.wall_ms() - clock.monotonic_ms()
        self._inbox: deque[_Item] = deque()
        self._wakeup = asyncio.Event()
        # Inbound requests stepped into the core, by (source, correlation id).
        self._waiting: dict[tuple[int, int], _Inbound] = {}
        self._cids = itertools.count(1)
        self._anonymous = itertools.count(_ANONYMOUS_SOURCE_BASE)
        self._pending: list[_Pending] = []  # heap by last offset
        # No pending proposal is of an older epoch (a bound: it may be lower).
        self._oldest_pending_epoch = 0
        self._seq = itertools.count()
        self._sends: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.failure: BaseException | None = None
        self.leader = LeaderAndEpoch(None, core.epoch)
        self.high_watermark = core.high_watermark
        self.readies_handled = 0
        self.fsyncs = 0

    # ---------------------------------------------------------------- lifecycle

    def now_ms(self) -> int:
        """The time fed to the core (monotonic, in epoch milliseconds)."""
        return self._wall_base_ms + self._clock.monotonic_ms()

    def start(self) -> None:
        """Start the driver loop on the running event loop."""
        if self._task is not None:
            raise RuntimeError("driver already started")
        self._task = asyncio.create_task(self._run(), name=f"raft-driver-{self.node_id}")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait_stopped(self) -> None:
        """Wait for the loop to end; raise its failure, if it failed."""
        if self._task is not None:
            await asyncio.shield(self._task)
        if self.failure is not None:
            raise DriverStoppedError("driver failed") from self.failure

    async def stop(self, *, resign: bool = True, resign_wait_ms: int = 500) -> None:
        """Stop the loop. With ``resign`` a leader first resigns (EndQuorumEpoch
        goes out, waited for up to ``resign_wait_ms``) so a successor is
        elected at once. Waiting proposals fail with
        `ProposalOutcomeUnknownError`, inbound requests are dropped. The
        transport is closed; the log is left for the caller to close."""
        if resign and self.running and self.core.is_leader:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + resign_wait_ms / 1000
            handled = self.readies_handled
            with contextlib.suppress(NotLeaderError, DriverStoppedError):
                await self.call(lambda core, now: core.resign(now))
                # Wait for the Ready carrying EndQuorumEpoch, then for its sends.
                while self.readies_handled == handled and self.running and loop.time() < deadline:
                    await asyncio.sleep(0.001)
                sends = set(self._sends)
                if sends:
                    await asyncio.wait(sends, timeout=max(0.0, deadline - loop.time()))
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        for task in list(self._sends):
            task.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        self._fail_everything(ProposalOutcomeUnknownError("the driver stopped"))
        await self._transport.close()

    # ---------------------------------------------------------------- public API

    async def handle_request(self, source: int | None, request: Request) -> Response:
        """Step ``request`` from node ``source`` (None: anonymous) and return the
        core's response. Raises `DriverStoppedError`. A request the core leaves
        unanswered past its budget gets REQUEST_TIMED_OUT."""
        self._check_running()
        if source is None:
            source = next(self._anonymous)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._put(_Inbound(source, request, future))
        budget_ms = self._request_timeout_ms
        if isinstance(request, FetchRequest):
            budget_ms += request.max_wait_ms
        try:
            async with asyncio.timeout(budget_ms / 1000):
                return await future
        except TimeoutError:
            return wire.error_response(request, Errors.REQUEST_TIMED_OUT)

    async def propose(self, values: Sequence[bytes]) -> int:
        """Append ``values`` (one record each) and wait until they commit.

        Returns the offset of the last value. Raises `NotLeaderError` (this
        node does not lead; it names the leader it knows), `ProposalLostError`,
        `ProposalOutcomeUnknownError`, `DriverStoppedError`.
        """
        return await self.submit(values)

    def submit(self, values: Sequence[bytes]) -> asyncio.Future[int]:
        """`propose` without a coroutine: queue ``values`` and return the future
        `propose` would wait for (same result and errors). For callers that
        keep many proposals in flight with ``add_done_callback``, like
        pysyncobj's ``@replicated(callback=...)``. Raises `DriverStoppedError`
        and ValueError at once."""
        if not values:
            raise ValueError("a proposal holds at least one value")
        self._check_running()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(_Proposal(values, future))
        return future

    async def describe_quorum(self) -> DescribeQuorumResponse:
        """KIP-836 DescribeQuorum from the core (an error unless leading)."""
        result: DescribeQuorumResponse = await self.call(lambda core, now: core.describe_quorum())
        return result

    async def resign(self) -> None:
        """Resign leadership gracefully (EndQuorumEpoch). Raises `NotLeaderError`."""
        await self.call(lambda core, now: core.resign(now))

    async def create_snapshot(self, end_offset: int, data: bytes, epoch: int) -> Any:
        """`KRaftCore.create_snapshot` in the driver task (it touches the log)."""
        return await self.call(lambda core, now: core.create_snapshot(end_offset, data, epoch))

    async def call(self, function: Callable[[KRaftCore, int], T]) -> T:
        """Run ``function(core, now_ms)`` in the driver task and return its result."""
        self._check_running()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._put(_Call(function, future))
        result: T = await future
        return result

    # ---------------------------------------------------------------- the loop

    def _put(self, item: _Item) -> None:
        self._inbox.append(item)
        self._wakeup.set()

    def _check_running(self) -> None:
        if self.failure is not None:
            raise DriverStoppedError("driver failed") from self.failure
        if self._task is None or self._task.done() or self._stopping:
            raise DriverStoppedError("driver is not running")

    async def _run(self) -> None:
        try:
            while not self._stopping:
                self._step_inbox()
                deadline_ms = self.core.tick(self.now_ms())
                while self.core.has_ready():
                    await self._handle_ready(self.core.ready())
                    if self._stopping:  # set by `stop` during the await
                        return  # type: ignore[unreachable]
                if self._inbox:
                    continue
                self._wakeup.clear()
                delay_s = max(0.0, (deadline_ms - self.now_ms()) / 1000)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay_s):
                        await self._wakeup.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # A broken invariant, a failed fsync: the node must stop (tier 3).
            log.critical("raft driver %d failed: %r", self.node_id, exc, exc_info=True)
            self.failure = exc
            self._fail_everything(DriverStoppedError("driver failed"))

    def _step_inbox(self) -> None:
        proposals: list[_Proposal] = []
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, _Proposal):
                if not item.future.done():
                    proposals.append(item)
                continue
            if proposals:
                self._propose(proposals)
                proposals = []
            now_ms = self.now_ms()
            if isinstance(item, _Inbound):
                if item.future.done():
                    continue  # the handler gave up already
                key = (item.source, next(self._cids))
                self._waiting[key] = item
                item.future.add_done_callback(self._forget(key))
                self.core.step(Envelope(item.source, self.node_id, item.body, key[1]), now_ms)
            elif isinstance(item, _ResponseIn):
                self.core.step(item.envelope, now_ms)
            elif not item.future.done():
                try:
                    item.future.set_result(item.function(self.core, now_ms))
                except RaftError as exc:
                    item.future.set_exception(exc)
        if proposals:
            self._propose(proposals)

    def _forget(self, key: tuple[int, int]) -> Callable[[asyncio.Future[Response]], None]:
        def forget(_: asyncio.Future[Response]) -> None:
            self._waiting.pop(key, None)

        return forget

    def _propose(self, proposals: list[_Proposal]) -> None:
        """One core proposal for all queued ones: their offsets are contiguous."""
        values = [v for p in proposals for v in p.values]
        try:
            last = self.core.propose(values, self.now_ms())
        except NotLeaderError as exc:
            for p in proposals:
                p.future.set_exception(NotLeaderError(exc.leader_id, exc.epoch))
            return
        epoch = self.core.epoch
        if not self._pending or epoch < self._oldest_pending_epoch:
            self._oldest_pending_epoch = epoch
        offset = last - len(values)
        for p in proposals:
            offset += len(p.values)
            heapq.heappush(self._pending, (offset, next(self._seq), epoch, p.future))

    async def _handle_ready(self, ready: Ready) -> None:
        if ready.send_before_persist:
            # The core vouches that nothing here depends on the flush (a
            # leader's fetch answers, committed batches): send and apply
            # first, so followers write to their disks while we write to ours.
            self._send_and_apply(ready)
            await self._persist_off_loop(ready)
        else:
            # 1. persist; nothing is sent until it returns
            if ready.must_sync:
                await self._persist_off_loop(ready)
            # 2. send, 3. apply
            self._send_and_apply(ready)
        # 4. advance
        self.core.advance(ready)
        self.readies_handled += 1

    async def _persist_off_loop(self, ready: Ready) -> None:
        if self._inline_follower_fsync and not self.core.is_leader:
            # A follower of a dedicated loop has nothing to overlap with its
            # fsync (its next fetch waits for it); a thread handoff costs two
            # wake-ups on the critical path of every commit.
            self._persist(ready)
        else:
            # A worker thread: the loop keeps reading and decoding proposals
            # meanwhile (the fsync releases the GIL), which feeds group commit.
            await asyncio.to_thread(self._persist, ready)

    def _send_and_apply(self, ready: Ready) -> None:
        for envelope in ready.messages:
            self._send(envelope)
        ready.deliver(self._listener)
        self._apply(ready)

    def _persist(self, ready: Ready) -> None:
        if ready.election_state is not None:
            self._store.write(ready.election_state)
            self.fsyncs += 1
        if ready.flush_log_to is not None and self._log.flushed_offset() < ready.flush_log_to:
            self._log.flush()
            self.fsyncs += 1

    def _send(self, envelope: Envelope) -> None:
        body = envelope.body
        if isinstance(body, wire.RESPONSE_TYPES):
            inbound = self._waiting.pop((envelope.destination, envelope.correlation_id), None)
            if inbound is not None and not inbound.future.done():
                inbound.future.set_result(body)
            return
        task = asyncio.create_task(self._exchange(envelope))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _exchange(self, envelope: Envelope) -> None:
        request = envelope.body
        assert isinstance(request, wire.REQUEST_TYPES)
        try:
            response = await self._transport.send(envelope.destination, request)
        except Exception:
            # The transport answers every failure it expects with an error
            # response; anything else is a bug, but the core must still see
            # the request end (and retry it) rather than wait out a timeout.
            log.exception("node %d: sending %s to %d failed", self.node_id,
                          type(request).__name__, envelope.destination)
            response = wire.error_response(request, Errors.UNKNOWN_SERVER_ERROR)
        if not self._stopping:
            self._put(
                _ResponseIn(
                    Envelope(envelope.destination, self.node_id, response, envelope.correlation_id)
                )
            )

    def _apply(self, ready: Ready) -> None:
        self.high_watermark = ready.high_watermark
        for event in ready.events:
            if isinstance(event, CommittedBatch):
                self._resolve_up_to(event.last_offset, event.base_offset, event.epoch)
            elif isinstance(event, SnapshotLoad):
                self._resolve_unknown_below(event.snapshot_id.end_offset)
            else:
                self.leader = event

    def _resolve_up_to(self, last_offset: int, base_offset: int, epoch: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= last_offset:
            offset, _, proposed_epoch, future = heapq.heappop(pending)
            if future.done():
                continue
            if offset < base_offset:
                future.set_exception(ProposalOutcomeUnknownError(f"offset {offset} was skipped"))
            elif proposed_epoch == epoch:
                future.set_result(offset)
            else:
                future.set_exception(ProposalLostError(offset, proposed_epoch, epoch))
        if pending and epoch > self._oldest_pending_epoch:
            self._lose_older_than(epoch)

    def _lose_older_than(self, epoch: int) -> None:
        """An entry of ``epoch`` committed below every pending offset: by log
        matching, every committed entry after it has an epoch at least
        ``epoch``, so a proposal of an older epoch can never commit. A deposed
        leader's proposals beyond its successor's log end are answered here,
        when the successor's first entry commits, not whenever later writes
        happen to commit past their offsets."""
        kept: list[_Pending] = []
        for item in self._pending:
            offset, _, proposed_epoch, future = item
            if proposed_epoch >= epoch:
                kept.append(item)
            elif not future.done():
                future.set_exception(ProposalLostError(offset, proposed_epoch, epoch))
        heapq.heapify(kept)
        self._pending = kept
        self._oldest_pending_epoch = min((item[2] for item in kept), default=epoch)

    def _resolve_unknown_below(self, end_offset: int) -> None:
        while self._pending and self._pending[0][0] < end_offset:
            offset, _, _, future = heapq.heappop(self._pending)
            if not future.done():
                future.set_exception(
                    ProposalOutcomeUnknownError(
                        f"a snapshot ending at {end_offset} replaced offset {offset}"
                    )
                )

    def _fail_everything(self, error: Exception) -> None:
        for _, _, _, future in self._pending:
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, _Proposal | _Call) and not item.future.done():
                item.future.set_exception(error)
            elif isinstance(item, _Inbound) and not item.future.done():
                item.future.set_result(wire.error_response(item.body, Errors.BROKER_NOT_AVAILABLE))
        for inbound in list(self._waiting.values()):
            if not inbound.future.done():
                inbound.future.set_result(
                    wire.error_response(inbound.body, Errors.BROKER_NOT_AVAILABLE)
                )
        self._waiting.clear()
