"""Feature levels on a real 3-node cluster (KIP-584, ``kafka-features.sh``):
formatted with KIP-966 ELR off, described, turned on with ``raftlog
features upgrade`` (which writes the cluster-level min.insync.replicas and
drops the broker-level one), and off again; UpdateFeatures at v0 and v2 on
the wire; ApiVersions v3 and v4 carry the levels."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import cli, eventually
from kio.schema.api_versions.v3 import request as av3_req
from kio.schema.api_versions.v4 import request as av4_req
from kio.schema.update_features.v0 import request as uf0_req
from kio.schema.update_features.v2 import request as uf2_req
from kio.static.primitive import i8, i16, i32Timedelta

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from metadata_quorum.features import ELR_FEATURE
from raftlog.net import KafkaProtocolClient
from raftlog.net.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(),
                                 properties={"min.insync.replicas": "2"})
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), layout, features={ELR_FEATURE: 0})
    c.up(timeout_s=60)
    try:
        yield c
    finally:
        c.stop(timeout_s=10)


def features(cluster: LocalCluster, *args: str, broker: int | None = None,
             controllers: bool = False) -> Any:
    if controllers:
        where = ["--bootstrap-controller", cluster.bootstrap_controllers]
    elif broker is not None:
        node = cluster.layout.node(broker)
        where = ["--bootstrap-server", f"{cluster.layout.host}:{node.kafka_port}"]
    else:
        where = ["--bootstrap-server", cluster.bootstrap_servers]
    return cli("features", *args, *where)


def level_line(level: int) -> str:
    return (f"Feature: {ELR_FEATURE}\tSupportedMinVersion: 0\tSupportedMaxVersion: 1"
            f"\tFinalizedVersionLevel: {level}\tEpoch: ")


def every_node_says(cluster: LocalCluster, level: int) -> None:
    def check() -> None:
        for node in cluster.layout.nodes:
            out = features(cluster, "describe", broker=node.node_id)
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith(level_line(level)), out.stdout
        out = features(cluster, "describe", controllers=True)
        assert out.stdout.startswith(level_line(level)), out.stdout

    eventually(check, timeout_s=20)


def configs(cluster: LocalCluster, *args: str) -> Any:
    return cli("configs", *args, "--bootstrap-server", cluster.bootstrap_servers)


def test_turning_elr_on_and_off_with_the_cli(cluster: LocalCluster) -> None:
    every_node_says(cluster, 0)
    # ELR off: min.insync.replicas may be set for one broker.
    out = configs(cluster, "alter", "--broker", "1", "--add-config", "min.insync.replicas=2")
    assert out.returncode == 0, out.stderr
    assert "min.insync.replicas" not in configs(cluster, "describe", "--broker-defaults").stdout

    out = features(cluster, "upgrade", "--feature", f"{ELR_FEATURE}=1", "--dry-run")
    assert (out.returncode, out.stdout) == (0, f"{ELR_FEATURE} can be upgraded to 1.\n")
    every_node_says(cluster, 0)
    out = features(cluster, "upgrade", "--feature", f"{ELR_FEATURE}=1")
    assert (out.returncode, out.stdout) == (0, f"{ELR_FEATURE} was upgraded to 1.\n"), out.stderr
    every_node_says(cluster, 1)

    # The ELR safety records: the controller's static value cluster-wide,
    # and no broker-level value.
    assert "min.insync.replicas=2" in configs(cluster, "describe", "--broker-defaults").stdout
    assert "min.insync.replicas" not in configs(cluster, "describe", "--broker", "1").stdout
    out = configs(cluster, "alter", "--broker", "2", "--add-config", "min.insync.replicas=3")
    assert out.returncode == 2 and "cannot be set for one broker" in out.stderr, out.stderr
    out = configs(cluster, "alter", "--broker-defaults", "--delete-config", "min.insync.replicas")
    assert out.returncode == 2 and "cannot be removed" in out.stderr, out.stderr

    # Refusals print Kafka's lines and exit non-zero.
    out = features(cluster, "upgrade", "--feature", f"{ELR_FEATURE}=0")
    assert out.returncode == 2, out.stderr
    assert out.stdout.startswith(f"Could not upgrade {ELR_FEATURE} to 0. Invalid update "
                                 f"version 0 for feature {ELR_FEATURE}. Can't downgrade"), out.stdout
    assert "1 out of 1 operation(s) failed." in out.stderr
    out = features(cluster, "upgrade", "--feature", "metadata.version=21", controllers=True)
    assert "The controller does not support the given feature." in out.stdout, out.stdout
    out = features(cluster, "upgrade", "--feature", "nonsense")
    assert out.returncode == 2 and "equals sign not found" in out.stderr, out.stderr

    out = features(cluster, "disable", "--feature", ELR_FEATURE, controllers=True)
    assert (out.returncode, out.stdout) == (0, f"{ELR_FEATURE} was disabled.\n"), out.stderr
    every_node_says(cluster, 0)


async def _exchange(cluster: LocalCluster, request: Any, version: int) -> Any:
    node = cluster.layout.node(1)
    client = KafkaProtocolClient(cluster.layout.host, node.kafka_port, request_timeout_ms=10_000)
    try:
        return await client.send(request, version)
    finally:
        await client.close()


def test_update_features_v0_and_v2_and_api_versions_v3_v4(cluster: LocalCluster) -> None:
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    # v0: allow_downgrade instead of an upgrade type; a result per feature.
    v0 = asyncio.run(_exchange(cluster, uf0_req.UpdateFeaturesRequest(
        timeout=timeout, feature_updates=(uf0_req.FeatureUpdateKey(
            feature=ELR_FEATURE, max_version_level=i16(1), allow_downgrade=False),)), 0))
    assert v0.error_code == ErrorCode.none
    assert [(r.feature, r.error_code) for r in v0.results] == [(ELR_FEATURE, ErrorCode.none)]
    # v2: the top-level error only.
    v2 = asyncio.run(_exchange(cluster, uf2_req.UpdateFeaturesRequest(
        timeout=timeout, feature_updates=(uf2_req.FeatureUpdateKey(
            feature=ELR_FEATURE, max_version_level=i16(5), upgrade_type=i8(1)),)), 2))
    assert v2.error_code == ErrorCode.invalid_update_version
    assert "only supports versions 0-1" in str(v2.error_message)

    def levels() -> None:
        v4 = asyncio.run(_exchange(cluster, av4_req.ApiVersionsRequest(
            client_software_name="test", client_software_version="1"), 4))
        assert [(f.name, int(f.min_version), int(f.max_version))
                for f in v4.supported_features] == [(ELR_FEATURE, 0, 1)]
        assert [(f.name, int(f.max_version_level)) for f in v4.finalized_features] == [
            (ELR_FEATURE, 1)]
        assert int(v4.finalized_features_epoch) > 0
        # v3 leaves out a supported feature whose minimum is 0 (old clients).
        v3 = asyncio.run(_exchange(cluster, av3_req.ApiVersionsRequest(
            client_software_name="test", client_software_version="1"), 3))
        assert v3.supported_features == ()
        assert [f.name for f in v3.finalized_features] == [ELR_FEATURE]

    eventually(levels, timeout_s=20)
