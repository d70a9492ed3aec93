"""How long a request keeps the event loop busy, for request quotas (KIP-124).

Kafka's ``request_percentage`` bounds the share of the broker's request
handler and network threads a client may use. A raftlog node serves every
request on one event loop, so the time that counts is the time the loop
spends running the request's handler: each step of its coroutine, from
where it resumes to where it next awaits or returns. Time spent waiting
(an acks=all produce for its followers, a long-polling fetch for records)
is not the client's use of the loop, and is not counted, as Kafka does not
count a request's time in purgatory against its thread time.

`timed` runs a handler's coroutine and adds each step's duration to a
`RequestClock`. The server times a request only while some client is under
a request quota (`RequestTimeQuota.enabled`); otherwise the handler is
awaited directly and nothing here runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from raftlog.net.server import RequestContext

__all__ = ("RequestClock", "RequestTimeQuota", "timed")

T = TypeVar("T")


class RequestClock:
    """The loop time one request's handler has used so far."""

    __slots__ = ("charged", "spent_ns", "step_start_ns")

    def __init__(self) -> None:
        #: Finished steps.
        self.spent_ns = 0
        #: When the step running now began (`perf_counter_ns`).
        self.step_start_ns = perf_counter_ns()
        #: The handler recorded the request itself (or found it exempt), so
        #: that its answer carries the throttle time: the server does not.
        self.charged = False

    def elapsed_ns(self) -> int:
        """The finished steps plus the running one up to now: what a handler
        asks for when it charges the request before building its answer."""
        return self.spent_ns + perf_counter_ns() - self.step_start_ns


class _Timed(Awaitable[T]):
    """An awaitable running ``awaitable`` step by step, timing each step."""

    __slots__ = ("_awaitable", "_clock")

    def __init__(self, awaitable: Awaitable[T], clock: RequestClock) -> None:
        self._awaitable = awaitable
        self._clock = clock

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, clock = self._awaitable.__await__(), self._clock
        value: Any = None
        error: BaseException | None = None
        while True:
            clock.step_start_ns = start = perf_counter_ns()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                clock.spent_ns += perf_counter_ns() - start
                return stop.value
            except BaseException:
                clock.spent_ns += perf_counter_ns() - start
                raise
            clock.spent_ns += perf_counter_ns() - start
            # Hand what the coroutine awaits (a future, or None for a bare
            # yield) to the task, and pass back what the task resumes it with.
            try:
                value, error = (yield yielded), None
            except BaseException as e:  # cancellation, or a failed future
                value, error = None, e


def timed(awaitable: Awaitable[T], clock: RequestClock) -> Awaitable[T]:
    """Await ``awaitable``'s result while adding the duration of each of
    its steps to ``clock`` (``await timed(handler(...), clock)``)."""
    return _Timed(awaitable, clock)


class RequestTimeQuota(Protocol):
    """The node's request quotas, as the server asks them."""

    @property
    def enabled(self) -> bool:
        """Whether some client is under a request quota: only then are
        requests timed."""

    def record(self, context: RequestContext, elapsed_ns: int) -> int:
        """Charge ``elapsed_ns`` of loop time to the request's client;
        the throttle time in ms if that takes it over its quota, else 0
        (also for an exempt request or an unlimited client)."""

    def client_throttles(self, api_key: int, api_version: int) -> bool:
        """Whether a client of that request version backs off by itself
        for a throttle time in the answer (KIP-219); if not, the server
        holds the answer back for the throttle time."""
