"""Helpers for the tests that run a real 3-node cluster (module-scoped)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts


@contextlib.contextmanager
def running(directory: Any, layout: ClusterLayout,
            up_timeout_s: float = 40) -> Iterator[LocalCluster]:
    """The cluster of ``layout`` in ``directory``, up for the block, then
    stopped (by PID)."""
    c = LocalCluster(directory, layout)
    c.up(timeout_s=up_timeout_s)
    try:
        yield c
    finally:
        c.stop(timeout_s=10)


def module_cluster(**properties: str) -> Any:
    """A module-scoped fixture: a 3-node combined cluster with fast timeouts
    and min.insync.replicas=2 (and ``properties``, server.properties names
    with ``_`` for ``.``), stopped (by PID) after the module's tests.
    Use as ``cluster = module_cluster()`` at module level."""
    return module_cluster_with({key.replace("_", "."): value
                                for key, value in properties.items()})


def module_cluster_with(properties: Mapping[str, str], up_timeout_s: float = 40,
                        node_properties: Mapping[int, Mapping[str, str]] | None = None) -> Any:
    """`module_cluster` with ``properties`` given as server.properties names
    (for names with ``_`` or ``-`` in them, e.g. per-listener JAAS configs),
    and ``node_properties`` for one node each (``broker.rack``)."""
    settings = {"min.insync.replicas": "2", **properties}

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(),
                                     properties=settings, node_properties=node_properties)
        with running(tmp_path_factory.mktemp("cluster"), layout, up_timeout_s) as c:
            yield c

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


def http_base(cluster: LocalCluster, node_id: int) -> str:
    return f"http://{cluster.layout.host}:{cluster.layout.node(node_id).http_port}"


def rest_produce(cluster: LocalCluster, topic: str, value: str, *, node_id: int = 1,
                 timeout_s: float = 40) -> dict[str, Any]:
    """POST one record to partition 0 of ``topic`` through node ``node_id``'s
    REST API (v3); its JSON answer."""
    base = http_base(cluster, node_id)
    with urllib.request.urlopen(base + "/healthz", timeout=10) as response:
        cluster_id = json.loads(response.read())["cluster_id"]
    request = urllib.request.Request(
        f"{base}/v3/clusters/{cluster_id}/topics/{topic}/records",
        data=json.dumps({"partition_id": 0, "value": {"type": "STRING", "data": value}}).encode(),
        method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def metric_total(cluster: LocalCluster, prefix: str) -> float:
    """The sum over every node's /metrics of the samples whose line starts
    with ``prefix`` (a name and its labels)."""
    total = 0.0
    for node in cluster.layout.nodes:
        text = urllib.request.urlopen(http_base(cluster, node.node_id) + "/metrics",
                                      timeout=10).read().decode()
        total += sum(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith(prefix))
    return total


class Deliveries:
    """librdkafka delivery reports, collected: pass as ``on_delivery``.
    ``acked`` holds the acknowledged offsets, ``acked_at`` when each report
    came (monotonic), ``failed`` the errors."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.acked_at: list[float] = []
        self.failed: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(msg.offset())
            self.acked_at.append(time.monotonic())
