"""Helpers for the tests that run a real 3-node cluster (module-scoped)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts


def module_cluster(**properties: str) -> Any:
    """A module-scoped fixture: a 3-node combined cluster with fast timeouts
    and min.insync.replicas=2 (and ``properties``, server.properties names
    with ``_`` for ``.``), stopped (by PID) after the module's tests.
    Use as ``cluster = module_cluster()`` at module level."""
    return module_cluster_with({key.replace("_", "."): value
                                for key, value in properties.items()})


def module_cluster_with(properties: Mapping[str, str], up_timeout_s: float = 40) -> Any:
    """`module_cluster` with ``properties`` given as server.properties names
    (for names with ``_`` or ``-`` in them, e.g. per-listener JAAS configs)."""
    settings = {"min.insync.replicas": "2", **properties}

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(),
                                     properties=settings)
        c = LocalCluster(tmp_path_factory.mktemp("cluster"), layout)
        c.up(timeout_s=up_timeout_s)
        try:
            yield c
        finally:
            c.stop(timeout_s=10)

    return cluster


def cli(*args: str, timeout_s: float = 60,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``raftlog ARGS`` (``python -m data_plane``), its output captured
    (and ``stdin`` its input, if given)."""
    return subprocess.run([sys.executable, "-m", "data_plane", *args], capture_output=True,
                          text=True, timeout=timeout_s, input=stdin)


def eventually(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """``check()`` once it stops raising AssertionError (brokers replay the
    metadata log on their own: a committed change reaches each a moment later)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
