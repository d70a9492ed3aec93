"""A fake clock that moves only when told to."""

from __future__ import annotations


class FakeClock:
    """Implements `raftlog.clock.Clock`; time advances only through `advance`."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: int = 0) -> None:
        self._wall_ms = wall_ms
        self._monotonic_ms = monotonic_ms

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def advance(self, ms: int) -> None:
        """Move both clocks forward by ``ms`` (which must not be negative)."""
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards ({ms} ms)")
        self._wall_ms += ms
        self._monotonic_ms += ms

    def set_wall_ms(self, wall_ms: int) -> None:
        """Set the wall clock alone (it may jump either way, like NTP)."""
        self._wall_ms = wall_ms
