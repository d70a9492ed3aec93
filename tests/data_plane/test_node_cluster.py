"""Real processes: three controller-only nodes (`raftlog server start`) on loopback.

Format, start (`data_plane.local_cluster`), register fake brokers (BrokerRegistration + heartbeats over
the Kafka protocol, as a broker would), create and describe topics through
the CLI, `quorum describe`, SIGKILL the active controller: a new one serves
and every topic is intact.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.broker_heartbeat.v0 import request as hb_req
from kio.schema.broker_heartbeat.v0 import response as hb_resp
from kio.schema.broker_registration.v3 import request as reg_req
from kio.schema.broker_registration.v3 import response as reg_resp
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i64, u16

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from metadata_quorum.features import ELR_FEATURE, broker_features
from raftlog.net import KafkaProtocolClient
from raftlog.net.errors import ErrorCode, TransportError

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "data_plane"]


def make_cluster(root: Path) -> LocalCluster:
    """Three controller-only nodes on free ports; configs written, not formatted."""
    layout = ClusterLayout.build(
        ("controller",) * 3,
        base_port=None,
        timeouts=Timeouts(session_ms=60_000),
        properties={"metadata.log.max.record.bytes.between.snapshots": "300"},
    )
    cluster = LocalCluster(root, layout)
    cluster.write_configs()
    return cluster


def controller_ports(cluster: LocalCluster) -> list[int]:
    return [n.controller_port for n in cluster.layout.nodes if n.controller_port is not None]


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}): {result.stderr}")
    return result


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = make_cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


async def register_brokers(
    ports: list[int], broker_ids: list[int], cluster_id: str
) -> dict[int, int]:
    """Register and unfence fake brokers on the active controller; broker id -> epoch."""
    epochs: dict[int, int] = {}
    deadline = time.monotonic() + 15
    clients = [KafkaProtocolClient("127.0.0.1", p, request_timeout_ms=5000) for p in ports]
    try:
        for broker_id in broker_ids:
            incarnation = uuid.uuid4()
            while broker_id not in epochs or not await heartbeat(clients, broker_id, epochs):
                assert time.monotonic() < deadline, f"broker {broker_id} was never unfenced"
                if broker_id not in epochs:
                    epoch = await register(clients, broker_id, incarnation, cluster_id)
                    if epoch is not None:
                        epochs[broker_id] = epoch
                await asyncio.sleep(0.1)
    finally:
        for client in clients:
            await client.close()
    return epochs


THIS_SOFTWARE = tuple((f.name, f.min_supported, f.max_supported) for f in broker_features())


async def register(
    clients: list[KafkaProtocolClient], broker_id: int, incarnation: uuid.UUID, cluster_id: str,
    features: tuple[tuple[str, int, int], ...] = THIS_SOFTWARE,
) -> int | None:
    error, epoch = await registration(clients, broker_id, incarnation, cluster_id, features)
    assert error in (ErrorCode.none, None), error
    return epoch


async def registration(
    clients: list[KafkaProtocolClient], broker_id: int, incarnation: uuid.UUID, cluster_id: str,
    features: tuple[tuple[str, int, int], ...], security_protocol: int = 0,
) -> tuple[ErrorCode | None, int | None]:
    """The active controller's answer to a registration declaring ``features``
    (name, min, max): its error and broker epoch; (None, None) if no
    controller answered as the active one."""
    request = reg_req.BrokerRegistrationRequest(
        broker_id=BrokerId(broker_id),
        cluster_id=cluster_id,
        incarnation_id=incarnation,
        listeners=(reg_req.Listener(name="PLAINTEXT", host="127.0.0.1",
                                    port=u16(9000 + broker_id),
                                    security_protocol=i16(security_protocol)),),
        features=tuple(reg_req.Feature(name=name, min_supported_version=i16(low),
                                       max_supported_version=i16(high))
                       for name, low, high in features),
        rack=None,
    )
    for client in clients:
        try:
            response = await client.send(request, 3)
        except TransportError:
            continue
        assert isinstance(response, reg_resp.BrokerRegistrationResponse)
        if response.error_code != ErrorCode.not_controller:
            return ErrorCode(response.error_code), int(response.broker_epoch)
    return None, None


async def refused_registrations(ports: list[int], cluster_id: str) -> list[ErrorCode | None]:
    """KIP-584 on the wire: software without ELR's range, a range no
    software declares (min above max), a listener of an unknown security
    protocol, and this software's."""
    clients = [KafkaProtocolClient("127.0.0.1", p, request_timeout_ms=5000) for p in ports]
    try:
        out = []
        for features, protocol in (((), 0), (((ELR_FEATURE, 1, 0),), 0),
                                   (THIS_SOFTWARE, 99), (THIS_SOFTWARE, 0)):
            error, _ = await registration(clients, 104, uuid.uuid4(), cluster_id, features,
                                          protocol)
            out.append(error)
        return out
    finally:
        for client in clients:
            await client.close()


async def heartbeat(clients: list[KafkaProtocolClient], broker_id: int,
                    epochs: dict[int, int]) -> bool:
    """One heartbeat round; True once the controller reports the broker unfenced."""
    request = hb_req.BrokerHeartbeatRequest(
        broker_id=BrokerId(broker_id),
        broker_epoch=i64(epochs[broker_id]),
        current_metadata_offset=i64(epochs[broker_id]),
        want_fence=False,
        want_shut_down=False,
    )
    for client in clients:
        try:
            response = await client.send(request, 0)
        except TransportError:
            continue
        assert isinstance(response, hb_resp.BrokerHeartbeatResponse)
        if response.error_code == ErrorCode.none:
            return not response.is_fenced
    return False


def leader_id(bootstrap: str) -> int:
    out = cli("quorum", "describe", "--status", "--bootstrap-controller", bootstrap).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines())
    return int(fields["LeaderId"])


def test_three_controllers_create_topics_and_survive_losing_the_active_one(
    cluster: LocalCluster,
) -> None:
    for node_id in (1, 2, 3):
        out = cli("storage", "format", "--cluster-id", cluster.cluster_id,
                  "--config", str(cluster.config_path(node_id))).stdout
        assert "Formatting" in out
        cluster.start(node_id)
    b = cluster.bootstrap_controllers

    status = cli("quorum", "describe", "--status", "--bootstrap-controller", b).stdout
    assert f"ClusterId:              {cluster.cluster_id}" in status
    assert "CurrentVoters:          [1,2,3]" in status
    for name in ("LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                 "MaxFollowerLagTimeMs", "CurrentObservers"):
        assert f"\n{name}:" in f"\n{status}"
    replication = cli("quorum", "describe", "--replication", "--bootstrap-controller", b).stdout
    lines = replication.splitlines()
    assert lines[0].split() == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                "LastCaughtUpTimestamp", "Status"]
    assert sorted(line.split()[-1] for line in lines[1:]) == ["Follower", "Follower", "Leader"]

    # No broker yet: RF 1 cannot be placed (Kafka's error, reported on one line).
    failed = cli("topics", "create", "--topic", "early", "--partitions", "1",
                 "--replication-factor", "1", "--bootstrap-controller", b, check=False)
    assert failed.returncode == 2
    assert "INVALID_REPLICATION_FACTOR" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1

    epochs = asyncio.run(register_brokers(controller_ports(cluster), [101, 102, 103], cluster.cluster_id))
    assert len(set(epochs.values())) == 3
    # A new cluster runs ELR (level 1): a broker that cannot is kept out.
    assert asyncio.run(refused_registrations(controller_ports(cluster), cluster.cluster_id)) == [
        ErrorCode.unsupported_version, ErrorCode.invalid_request, ErrorCode.invalid_request,
        ErrorCode.none]
    cli("topics", "create", "--topic", "orders", "--partitions", "3",
        "--replication-factor", "3", "--bootstrap-controller", b)
    cli("topics", "create", "--topic", "audit", "--partitions", "2",
        "--replication-factor", "2", "--bootstrap-controller", b)
    dup = cli("topics", "create", "--topic", "orders", "--partitions", "1",
              "--bootstrap-controller", b, check=False)
    assert dup.returncode == 2 and "TOPIC_ALREADY_EXISTS" in dup.stderr
    cli("topics", "create", "--topic", "doomed", "--bootstrap-controller", b)
    cli("topics", "delete", "--topic", "doomed", "--bootstrap-controller", b)

    assert cli("topics", "list", "--bootstrap-controller", b).stdout.split() == ["audit", "orders"]
    before = cli("topics", "describe", "--bootstrap-controller", b).stdout
    header = before.splitlines()[0]
    assert header.startswith("Topic: audit\tTopicId: ")
    assert "PartitionCount: 2\tReplicationFactor: 2" in header
    orders = [line for line in before.splitlines() if "Topic: orders\tPartition:" in line]
    assert len(orders) == 3
    for line in orders:
        fields = dict(part.split(": ") for part in line.strip().split("\t"))
        replicas = fields["Replicas"].split(",")
        assert sorted(replicas) == ["101", "102", "103"]
        assert fields["Leader"] == replicas[0]  # the preferred leader
        assert sorted(fields["Isr"].split(",")) == sorted(replicas)

    old_leader = leader_id(b)
    cluster.kill(old_leader)  # SIGKILL the active controller
    survivors = ",".join(
        f"127.0.0.1:{p}" for i, p in enumerate(controller_ports(cluster)) if i + 1 != old_leader
    )
    # A new active controller serves writes ...
    cli("topics", "create", "--topic", "after-failover", "--partitions", "1",
        "--replication-factor", "1", "--bootstrap-controller", survivors)
    new_leader = leader_id(survivors)
    assert new_leader != old_leader
    # ... and every topic is intact (same ids, replicas, leaders, ISRs).
    after = cli("topics", "describe", "--bootstrap-controller", survivors).stdout
    kept = [line for line in after.splitlines() if "after-failover" not in line]
    assert kept == before.splitlines()
    assert "Topic: after-failover" in after

    # The killed controller restarts and catches up, replaying its log.
    cluster.start(old_leader)
    deadline = time.monotonic() + 15
    while True:
        rows = cli("quorum", "describe", "--replication", "--bootstrap-controller", b).stdout
        lags = {line.split()[0]: line.split()[2] for line in rows.splitlines()[1:]}
        if lags.get(str(old_leader)) == "0":
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)
    # Snapshots were written every few hundred bytes (KIP-630) and bound the log.
    checkpoints = list(cluster.directory.glob("node-*/data/__cluster_metadata-0/*.checkpoint"))
    assert checkpoints, "no metadata snapshot was written"


def test_server_start_on_an_unformatted_dir_fails_with_the_reason(cluster: LocalCluster) -> None:
    result = subprocess.run(
        [*CLI, "server", "start", str(cluster.config_path(1))],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert f"log directory {cluster.data_dir(1)} is not formatted" in result.stderr
    assert "raftlog storage format" in result.stderr


def test_server_start_with_another_nodes_dir_is_refused(cluster: LocalCluster) -> None:
    cli("storage", "format", "--cluster-id", cluster.cluster_id,
        "--config", str(cluster.config_path(2)))
    os.rename(cluster.data_dir(2), cluster.data_dir(1))
    result = subprocess.run(
        [*CLI, "server", "start", str(cluster.config_path(1))],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert "belongs to node.id 2, but node.id is 1" in result.stderr
