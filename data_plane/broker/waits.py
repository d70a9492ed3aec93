"""`wait_event`: wait for an `asyncio.Event` with a timeout, cancel-safely.

Python 3.11's ``asyncio.wait_for`` swallows a cancellation that arrives in the
same loop iteration as the inner awaitable's completion (it returns the
result instead of raising CancelledError; fixed in 3.12, CPython gh-86296).
A background loop that sleeps with ``wait_for(event.wait(), t)`` therefore
survives ``task.cancel()`` whenever the event is set just before it (a
metadata change during controlled shutdown wakes the replica fetcher, then
the shutdown hook cancels it), and whoever awaits the task hangs: the node
never exits after SIGTERM. ``asyncio.timeout`` does not have that race.
"""

from __future__ import annotations

import asyncio

__all__ = ("wait_event",)


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Until ``event`` is set (True) or ``timeout_s`` passes (False; None: no timeout).
    A cancellation of the caller always propagates."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
