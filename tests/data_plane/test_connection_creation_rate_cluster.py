"""KIP-612's ``max.connection.creation.rate`` on a real 3-node cluster: node 3
takes new connections at 2 per second (``quota.window.*``: 11 windows of
1 s, so about 20 at once before the bound bites), the others are unbounded.
A burst of connections to node 3 is answered in turn, the later ones after
a wait; the same burst to node 1 is answered at once."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest
from cluster_helpers import metric_total, module_cluster_with
from kio.schema.api_versions.v0 import request as av0_req

from data_plane.local_cluster import LocalCluster
from raftlog.net.codec import encode_request

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

BURST = 28

cluster = module_cluster_with({}, node_properties={3: {"max.connection.creation.rate": "2"}})


async def _burst(port: int) -> list[float]:
    """Open `BURST` connections one after the other, each sending an
    ApiVersions request at once; the seconds until each is answered."""
    started = time.monotonic()
    peers = []
    for cid in range(BURST):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_request(av0_req.ApiVersionsRequest(), cid, "burst"))
        peers.append((reader, writer))

    async def answered(reader: asyncio.StreamReader) -> float:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
        return time.monotonic() - started

    try:
        return list(await asyncio.wait_for(
            asyncio.gather(*(answered(r) for r, _ in peers)), 60))
    finally:
        for _, writer in peers:
            writer.close()


def test_a_burst_of_connections_waits_its_turns_on_the_rate_bound_node_only(
    cluster: LocalCluster,
) -> None:
    unbounded = asyncio.run(_burst(cluster.layout.node(1).kafka_port or 0))
    assert max(unbounded) < 2.0, unbounded
    bounded = asyncio.run(_burst(cluster.layout.node(3).kafka_port or 0))
    # The first ones within the burst allowance go at once (node 3's own
    # start-up connections used some of it); the last waits its turn behind
    # the others, in order.
    assert min(bounded) < 1.0, bounded
    assert bounded[-1] >= 2.0, bounded
    late = [t for t in bounded if t >= 1.0]
    assert late == sorted(late), bounded
    # Kafka's connection-accept-throttle-time, per listener, on node 3 only.
    metric = 'kafka_server_socket_server_metrics_connection_accept_throttle_time{listener="PLAINTEXT"}'
    assert metric_total(cluster, metric) > 0
