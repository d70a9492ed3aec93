"""The event loop a node process runs on: uvloop when it is installed.

A node's hot paths (Kafka requests in, fetch answers out, the Raft driver's
wake-ups) are event-loop bound; uvloop's libuv loop does the same work with
less CPU per wake-up than asyncio's selector loop, which shows as commit and
produce latency. ``RAFTLOG_EVENT_LOOP=asyncio`` picks the standard loop (to
compare, or to rule uvloop out when debugging); ``uvloop`` requires it.
Only process entry points call `run`: in-process test clusters keep their
own loops.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ("ENV_VAR", "describe", "loop_factory", "run")

log = logging.getLogger(__name__)

T = TypeVar("T")

ENV_VAR = "RAFTLOG_EVENT_LOOP"


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``choice`` (default: ``$RAFTLOG_EVENT_LOOP``, else
    ``auto``): None means asyncio's default loop. Raises ValueError for an
    unknown choice, or for ``uvloop`` when it is not installed."""
    choice = (choice or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"{ENV_VAR} must be auto, uvloop or asyncio, not {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ValueError(f"{ENV_VAR}=uvloop but uvloop is not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def describe(choice: str | None = None) -> str:
    """What `run` would use, for logs and benchmark headers: ``uvloop 0.x`` or
    ``asyncio``."""
    if loop_factory(choice) is None:
        return "asyncio"
    from importlib.metadata import version

    return f"uvloop {version('uvloop')}"


def run(main: Coroutine[Any, Any, T], *, choice: str | None = None) -> T:
    """`asyncio.run` on the loop `loop_factory` picks."""
    factory = loop_factory(choice)
    log.info("event loop: %s", describe(choice))
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
