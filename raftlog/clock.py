"""The clock port.

Cores never read the time themselves: they take ``now_ms`` as an argument
(STYLE.md section 1). Shells that need "now" receive a `Clock`, so tests and
the simulator can hand them a `raftlog.testing.clock.FakeClock` instead.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of time in milliseconds."""

    def wall_ms(self) -> int:
        """Wall-clock time (epoch milliseconds): record timestamps, retention."""
        ...

    def monotonic_ms(self) -> int:
        """A clock that never goes backwards: timeouts and deadlines."""
        ...


class SystemClock:
    """The real clock."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000
