"""Interop with clients no one here wrote: kafka-python and confluent-kafka (librdkafka)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from net_live_server import live_server
from net_messages import metadata_response

from raftlog.net import RequestContext

NODE_ID = 1


def metadata_handler(port_box: list[int], seen: list[RequestContext]) -> Any:
    async def handle(context: RequestContext, body: Any) -> Any:
        seen.append(context)
        return metadata_response(context.api_version, node_id=NODE_ID, port=port_box[0])

    return handle


@pytest.mark.parametrize("api_versions_max", [4, 2], ids=["direct", "unsupported-version-fallback"])
def test_kafka_python_admin_bootstraps_and_lists_topics(api_versions_max: int) -> None:
    kafka = pytest.importorskip("kafka")
    seen: list[RequestContext] = []
    port_box = [0]
    with live_server(
        {3: metadata_handler(port_box, seen)},
        supported={18: (0, api_versions_max), 3: (0, 12)},
    ) as server:
        port_box[0] = server.port
        admin = kafka.KafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{server.port}",
            client_id="kp-interop",
            request_timeout_ms=5000,
        )
        try:
            assert admin.list_topics() == []
        finally:
            admin.close()
    assert seen, "kafka-python never sent a Metadata request"
    assert all(c.client_id == "kp-interop" and c.api_key == 3 for c in seen)
    assert max(c.api_version for c in seen) <= 12


def test_confluent_kafka_admin_client_handshake_and_metadata(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    seen: list[RequestContext] = []
    port_box = [0]
    with (
        caplog.at_level(logging.WARNING),
        live_server({3: metadata_handler(port_box, seen)}, supported={3: (0, 12)}) as server,
    ):
        port_box[0] = server.port
        admin = admin_mod.AdminClient(
            {"bootstrap.servers": f"127.0.0.1:{server.port}", "client.id": "rdkafka-interop"}
        )
        metadata = admin.list_topics(timeout=10)
        assert set(metadata.brokers) == {NODE_ID}
        assert metadata.brokers[NODE_ID].port == server.port
        assert metadata.topics == {}
        assert metadata.cluster_id == "raftlog-test"
        assert metadata.controller_id == NODE_ID
    assert seen and all(c.client_id == "rdkafka-interop" for c in seen)
    # librdkafka negotiated the newest Metadata version we advertise.
    assert max(c.api_version for c in seen) == 12
    assert not [r for r in caplog.records if r.name.startswith("raftlog.net")]
