"""Fixtures shared by the data-plane tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster


@pytest.fixture
def groups_cluster(tmp_path: object) -> Iterator[ClusterThread]:
    """Three in-process brokers (min.insync.replicas=2) whose new groups wait
    only 200 ms for members before their first rebalance."""
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2",
                                            "group.initial.rebalance.delay.ms": "200"})
    with ClusterThread(c) as ct:
        yield ct
