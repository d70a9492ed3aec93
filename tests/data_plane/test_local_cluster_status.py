"""`LocalCluster`'s readiness and status table over a given `ClusterStatus`
(no processes): a broker counts as ready only once it says itself that it is
running, whatever the controller lists."""

from __future__ import annotations

from pathlib import Path

from data_plane.local_cluster import ClusterLayout, ClusterStatus, LocalCluster


def _cluster(tmp_path: Path) -> LocalCluster:
    cluster = LocalCluster(str(tmp_path), ClusterLayout.build(base_port=19092), cluster_id="c1")
    cluster.pids = {1: 101, 2: 102, 3: 103}  # as `open` reads them back; none is signalled
    return cluster


def _status(running: frozenset[int] | None) -> ClusterStatus:
    # What the controller says after all three processes were SIGKILLed and
    # restarted: the old registrations, unfenced.
    return ClusterStatus(leader_id=2, leader_epoch=3, high_watermark=40, voters=(1, 2, 3),
                         unfenced=frozenset({1, 2, 3}), metadata_ok=frozenset({1, 2, 3}),
                         running=running, alive=frozenset({1, 2, 3}))


def test_a_broker_not_running_by_its_own_account_is_registering(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    status = _status(frozenset({2}))
    assert not cluster._running(status, {1, 2, 3})
    assert cluster._running(status, {2})
    lines = cluster.status_lines(status)
    states = {line.split()[0]: line for line in lines[1:4]}
    assert states["1"].endswith("voter, registering")
    assert states["2"].endswith("quorum leader, unfenced")
    assert lines[-1] == "Brokers unfenced: 3/3 (registering, not running yet: [1, 3])"


def test_all_running_reads_as_before(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    status = _status(frozenset({1, 2, 3}))
    assert cluster._running(status, {1, 2, 3})
    assert cluster.status_lines(status)[-1] == "Brokers unfenced: 3/3"


def test_without_http_only_the_controllers_view_counts(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    status = _status(None)
    assert cluster._running(status, {1, 2, 3})
    assert "registering" not in "\n".join(cluster.status_lines(status))
