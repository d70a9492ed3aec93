"""A broker with two broker listeners (PLAINTEXT and EXTERNAL, as
docker-compose.yml has) serves on both, and answers Metadata and
DescribeCluster with the advertised addresses of the listener the request
came in on (Kafka's rule: clients only learn addresses they can reach)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest
from cluster_helpers import running
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from kio.schema.describe_cluster.v0 import request as dc_req
from kio.schema.describe_cluster.v0 import response as dc_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts
from raftlog.net import KafkaProtocolClient
from raftlog.runtime.local_quorum import free_ports

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, int]]:
    layout = ClusterLayout.build(("broker,controller",), base_port=None, timeouts=Timeouts.fast())
    node = layout.node(1)
    (external,) = free_ports(1)
    # EXTERNAL advertises another name for the same host, so answers tell the listeners apart.
    layout = ClusterLayout(layout.nodes, layout.host, layout.timeouts, {}, {1: {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.kafka_port},EXTERNAL://127.0.0.1:{external},"
                     f"CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.kafka_port},"
                                f"EXTERNAL://localhost:{external}",
    }})
    with running(tmp_path_factory.mktemp("multi-listener"), layout, up_timeout_s=30) as c:
        yield c, external


async def ask(port: int) -> tuple[md_resp.MetadataResponse, dc_resp.DescribeClusterResponse]:
    client = KafkaProtocolClient("127.0.0.1", port, request_timeout_ms=5000)
    try:
        metadata = await client.send(md_req.MetadataRequest(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 12)
        described = await client.send(
            dc_req.DescribeClusterRequest(include_cluster_authorized_operations=False), 0)
    finally:
        await client.close()
    assert isinstance(metadata, md_resp.MetadataResponse)
    assert isinstance(described, dc_resp.DescribeClusterResponse)
    return metadata, described


def test_metadata_answers_with_the_addresses_of_the_listener_asked(
    cluster: tuple[LocalCluster, int],
) -> None:
    local, external = cluster
    plaintext = local.layout.node(1).kafka_port
    assert plaintext is not None
    for port, host in ((plaintext, "127.0.0.1"), (external, "localhost")):
        metadata, described = asyncio.run(ask(port))
        assert [(int(b.node_id), b.host, int(b.port)) for b in metadata.brokers] == [
            (1, host, port)]
        assert [(int(b.broker_id), b.host, int(b.port)) for b in described.brokers] == [
            (1, host, port)]

    # A real client bootstrapped on EXTERNAL follows the EXTERNAL address and works.
    bootstrap = f"127.0.0.1:{external}"
    subprocess.run([sys.executable, "-m", "data_plane", "topics", "create", "--topic", "ext",
                    "--partitions", "1", "--replication-factor", "1",
                    "--bootstrap-server", bootstrap], check=True, capture_output=True, timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": False})
    acked: list[int] = []
    producer.produce("ext", value=b"via EXTERNAL",
                     on_delivery=lambda err, msg: acked.append(msg.offset()) if err is None else None)
    assert producer.flush(20) == 0 and acked == [0]
    # kafka-python without a group: no coordinator involved, only Metadata and Fetch.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([KTP("ext", 0)])
    consumer.seek(KTP("ext", 0), 0)
    got = [(m.offset, m.value) for _, m in zip(range(1), consumer, strict=False)]
    consumer.close()
    assert got == [(0, b"via EXTERNAL")]
