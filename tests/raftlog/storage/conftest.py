"""Fixtures for the storage tests: a fake disk, a fake clock, a log factory."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from storage_helpers import LOG_DIR

from raftlog.storage import Log, LogConfig
from raftlog.testing.clock import FakeClock
from raftlog.testing.disk import FakeFileSystem


@pytest.fixture
def fs() -> FakeFileSystem:
    fake = FakeFileSystem()
    fake.make_dirs(LOG_DIR)
    return fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(fs: FakeFileSystem, clock: FakeClock) -> Callable[..., Log]:
    def _open(**config: int) -> Log:
        return Log.open(LOG_DIR, LogConfig(**config), fs=fs, clock=clock)

    return _open
