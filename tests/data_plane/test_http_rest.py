"""The REST API (`data_plane.http.rest`) over an in-memory `FakeBackend`:
routes, resource shapes, validation (a 400 naming the field), error mapping."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from data_plane.http.app import build_app
from data_plane.http.backend import GroupDescription, GroupMember, error_for_kafka_code
from data_plane.http.metrics import NodeMetrics, NodeSources
from data_plane.http.openapi import openapi_document
from data_plane.http.testing import FakeBackend
from raftlog.net.errors import ErrorCode
from raftlog.records.partitioner import partition_for_key

CID = "fake-cluster"
V3 = f"/v3/clusters/{CID}"

Body = Callable[[TestClient[Any, Any], FakeBackend], Awaitable[None]]


def run(body: Body, backend: FakeBackend | None = None, max_body_bytes: int = 1024 * 1024,
        ) -> None:
    backend = backend or FakeBackend()

    async def main() -> None:
        metrics = NodeMetrics(NodeSources(node_id=1, cluster_id=CID, image=backend.image))
        app = build_app(backend, metrics, max_body_bytes=max_body_bytes)
        async with TestClient(TestServer(app)) as client:
            await body(client, backend)

    asyncio.run(main())


async def expect_error(response: Any, status: int, error_code: int, *words: str) -> None:
    assert response.status == status, await response.text()
    body = await response.json()
    assert set(body) == {"error_code", "message"}
    assert body["error_code"] == error_code
    for word in words:
        assert word in body["message"]


def test_cluster_and_brokers_come_from_the_image() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        backend.add_broker(4, fenced=True)
        cluster = await (await client.get(V3)).json()
        assert cluster["kind"] == "KafkaCluster" and cluster["cluster_id"] == CID
        assert cluster["brokers"]["related"].endswith(f"{V3}/brokers")
        brokers = await (await client.get(f"{V3}/brokers")).json()
        assert [(b["broker_id"], b["fenced"]) for b in brokers["data"]] == [
            (1, False), (2, False), (3, False), (4, True)]
        assert brokers["data"][0]["port"] == 9092
        await expect_error(await client.get("/v3/clusters/other"), 404, 40401, "other")
        await expect_error(await client.get(f"{V3}/brokers/9"), 404, 40405)
        await expect_error(await client.get(f"{V3}/brokers/x"), 400, 40002, "broker_id")

    run(body)


def test_topic_create_list_describe_delete() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        created = await client.post(f"{V3}/topics", json={
            "topic_name": "orders", "partitions_count": 3, "replication_factor": 2,
            "configs": [{"name": "retention.ms", "value": "1000"}]})
        assert created.status == 201
        topic = await created.json()
        assert (topic["topic_name"], topic["partitions_count"], topic["replication_factor"]) == (
            "orders", 3, 2)
        names = [t["topic_name"] for t in (await (await client.get(f"{V3}/topics")).json())["data"]]
        assert names == ["orders"]
        partitions = (await (await client.get(f"{V3}/topics/orders/partitions")).json())["data"]
        assert [(p["partition_id"], p["leader_id"], p["replicas"], p["isr"]) for p in partitions] \
            == [(0, 1, [1, 2], [1, 2]), (1, 2, [2, 3], [2, 3]), (2, 3, [3, 1], [3, 1])]
        await expect_error(await client.post(f"{V3}/topics", json={"topic_name": "orders"}),
                           409, 40902, "TOPIC_ALREADY_EXISTS")
        assert (await client.delete(f"{V3}/topics/orders")).status == 204
        await expect_error(await client.get(f"{V3}/topics/orders"), 404, 40403, "orders")
        await expect_error(await client.delete(f"{V3}/topics/orders"), 404, 40403)

    run(body)


def test_partition_health_flags_follow_the_isr() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 2, 3, {})
        backend.set_isr("t", 0, [1, 2], leader=1)
        backend.set_isr("t", 1, [], leader=-1)
        p0 = await (await client.get(f"{V3}/topics/t/partitions/0")).json()
        p1 = await (await client.get(f"{V3}/topics/t/partitions/1")).json()
        assert (p0["under_replicated"], p0["offline"], p0["isr"]) == (True, False, [1, 2])
        assert (p1["leader_id"], p1["offline"]) == (None, True)
        await expect_error(await client.get(f"{V3}/topics/t/partitions/5"), 404, 40402)

    run(body)


@pytest.mark.parametrize(("payload", "field"), [
    ("not json", "body"),
    ([], "body"),
    ({}, "topic_name"),
    ({"topic_name": "bad name!"}, "topic_name"),
    ({"topic_name": "t", "partitions_count": 0}, "partitions_count"),
    ({"topic_name": "t", "partitions_count": "3"}, "partitions_count"),
    ({"topic_name": "t", "replication_factor": True}, "replication_factor"),
    ({"topic_name": "t", "configs": {"a": "b"}}, "configs"),
    ({"topic_name": "t", "configs": [{"name": "a", "value": 1}]}, "configs[0]"),
])
def test_create_topic_rejects_a_malformed_body_naming_the_field(payload: Any, field: str) -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        response = await client.post(f"{V3}/topics", data=data)
        await expect_error(response, 400, 40001 if payload == "not json" else 40002, field)
        assert backend.image().topics == {}

    run(body)


def test_produce_json_binary_string_keys_and_headers_then_consume() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 4, 1, {})
        binary = base64.b64encode(b"\x00\xffraw").decode()
        answers = []
        for record in (
            {"value": {"type": "JSON", "data": {"a": [1, 2]}}, "partition_id": 2},
            {"key": {"type": "STRING", "data": "user-7"}, "value": {"type": "BINARY",
                                                                    "data": binary},
             "headers": [{"name": "trace", "value": base64.b64encode(b"abc").decode()},
                         {"name": "empty", "value": None}], "partition_id": 2},
        ):
            response = await client.post(f"{V3}/topics/t/records", json=record)
            assert response.status == 200, await response.text()
            answers.append(await response.json())
        assert [(a["partition_id"], a["offset"]) for a in answers] == [(2, 0), (2, 1)]
        assert answers[1]["key"] == {"type": "STRING", "size": 6}
        page = await (await client.get(f"{V3}/topics/t/partitions/2/records",
                                       params={"offset": "0"})).json()
        assert page["high_watermark"] == 2 and page["next_offset"] == 2
        first, second = page["records"]
        assert base64.b64decode(first["value"]) == b'{"a":[1,2]}' and first["key"] is None
        assert base64.b64decode(second["key"]) == b"user-7"
        assert base64.b64decode(second["value"]) == b"\x00\xffraw"
        assert second["headers"] == [{"name": "trace", "value": "YWJj"},
                                     {"name": "empty", "value": None}]
        text = await (await client.get(f"{V3}/topics/t/partitions/2/records",
                                       params={"offset": "1", "format": "string"})).json()
        assert [r["key"] for r in text["records"]] == ["user-7"]

    run(body)


def test_produce_without_partition_uses_kafkas_default_partitioner() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 7, 1, {})
        response = await client.post(f"{V3}/topics/t/records", json={
            "key": {"type": "STRING", "data": "customer-42"}, "value": {"data": 1}})
        expected = partition_for_key(b"customer-42", 7)
        assert (await response.json())["partition_id"] == expected

    run(body)


def test_consume_reads_only_up_to_the_high_watermark() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 1, 1, {})
        backend.hold_back = 2  # the last two records are not committed yet
        for i in range(5):
            await client.post(f"{V3}/topics/t/records", json={"value": {"data": i}})
        page = await (await client.get(f"{V3}/topics/t/partitions/0/records",
                                       params={"offset": "0", "max_records": "10"})).json()
        assert page["high_watermark"] == 3
        assert [r["offset"] for r in page["records"]] == [0, 1, 2]
        page = await (await client.get(f"{V3}/topics/t/partitions/0/records",
                                       params={"offset": "1", "max_records": "1"})).json()
        assert [r["offset"] for r in page["records"]] == [1] and page["next_offset"] == 2

    run(body)


@pytest.mark.parametrize(("query", "status", "code", "field"), [
    ({}, 400, 40002, "offset"),
    ({"offset": "-1"}, 400, 40002, "offset"),
    ({"offset": "x"}, 400, 40002, "offset"),
    ({"offset": "0", "max_records": "0"}, 400, 40002, "max_records"),
    ({"offset": "0", "max_records": "1001"}, 400, 40002, "max_records"),
    ({"offset": "0", "format": "hex"}, 400, 40002, "format"),
    ({"offset": "99"}, 416, 41601, "OFFSET_OUT_OF_RANGE"),
])
def test_consume_validates_its_query(query: dict[str, str], status: int, code: int,
                                     field: str) -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 1, 1, {})
        response = await client.get(f"{V3}/topics/t/partitions/0/records", params=query)
        await expect_error(response, status, code, field)

    run(body)


@pytest.mark.parametrize(("payload", "field"), [
    ({"value": {"type": "XML", "data": "x"}}, "value.type"),
    ({"value": {"type": "BINARY", "data": "***"}}, "value.data"),
    ({"value": {"type": "STRING", "data": 5}}, "value.data"),
    ({"key": "plain"}, "key"),
    ({"partition_id": -1}, "partition_id"),
    ({"headers": [{"value": "YQ=="}]}, "headers[0].name"),
    ({"headers": [{"name": "h", "value": "%%"}]}, "headers[0].value"),
    ({"timestamp": "now"}, "timestamp"),
])
def test_produce_rejects_a_malformed_body_naming_the_field(payload: Any, field: str) -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 1, 1, {})
        await expect_error(await client.post(f"{V3}/topics/t/records", json=payload),
                           400, 40002, field)
        assert backend.logs[("t", 0)].records == []

    run(body)


def test_produce_errors() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 1, 1, {})
        await expect_error(await client.post(f"{V3}/topics/nope/records", json={}), 404, 40403)
        await expect_error(await client.post(f"{V3}/topics/t/records",
                                             json={"partition_id": 3}), 404, 40402)
        big = {"value": {"type": "STRING", "data": "x" * 5000}}
        await expect_error(await client.post(f"{V3}/topics/t/records", json=big), 413, 413,
                           "body")

    run(body, max_body_bytes=4096)


@pytest.mark.parametrize(("code", "status"), [
    (ErrorCode.invalid_timestamp, 400), (ErrorCode.invalid_record, 400),
    (ErrorCode.corrupt_message, 400), (ErrorCode.message_too_large, 413),
    (ErrorCode.not_enough_replicas, 503), (ErrorCode.unknown_server_error, 500),
])
def test_a_produce_refused_for_the_records_is_a_client_error(code: ErrorCode, status: int) -> None:
    """What the leader refuses because of the records sent (a timestamp out
    of bounds, a keyless record on a compacted topic, a bad batch) is the
    client's to fix: 400, not 500. The REST fuzz test found INVALID_TIMESTAMP
    answered 500."""
    assert error_for_kafka_code(code.value, "produce to t-0").status == status


def test_consumer_groups_and_lags() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 2, 1, {})
        for i in range(6):
            await client.post(f"{V3}/topics/t/records", json={"partition_id": i % 2})
        backend.groups["billing"] = GroupDescription(
            "billing", "Stable", "consumer", "range", 2,
            (GroupMember("m-1", "client-a", "/10.0.0.1", (("t", 0), ("t", 1))),))
        backend.committed["billing"] = {("t", 0): 1}
        groups = (await (await client.get(f"{V3}/consumer-groups")).json())["data"]
        assert [(g["consumer_group_id"], g["state"], g["coordinator_id"]) for g in groups] == [
            ("billing", "Stable", 2)]
        group = await (await client.get(f"{V3}/consumer-groups/billing")).json()
        assert group["partition_assignor"] == "range"
        assert group["consumers"][0]["assignments"] == [
            {"topic_name": "t", "partition_id": 0}, {"topic_name": "t", "partition_id": 1}]
        lags = (await (await client.get(f"{V3}/consumer-groups/billing/lags")).json())["data"]
        assert [(x["partition_id"], x["current_offset"], x["log_end_offset"], x["lag"],
                 x["consumer_id"]) for x in lags] == [(0, 1, 3, 2, "m-1"), (1, -1, 3, -1, "m-1")]
        await expect_error(await client.get(f"{V3}/consumer-groups/none/lags"), 404, 40404)

    run(body)


def test_unknown_routes_and_methods_answer_json_errors() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await expect_error(await client.get("/v4/nothing"), 404, 404)
        response = await client.put(f"{V3}/topics")
        await expect_error(response, 405, 405)
        assert "GET" in response.headers["Allow"]

    run(body)


def test_healthz_and_metrics_report_the_brokers_own_state() -> None:
    """A broker's /healthz names its lifecycle state and /metrics carries
    Kafka's BrokerState gauge: what `raftlog cluster up` waits on, since the
    controller's view can still show a dead process's registration."""
    state = {"now": ("starting", 1)}

    async def main() -> None:
        backend = FakeBackend()
        sources = NodeSources(node_id=1, cluster_id=CID, image=backend.image,
                              broker_state=lambda: state["now"])
        app = build_app(backend, NodeMetrics(sources), broker_state=sources.broker_state)
        async with TestClient(TestServer(app)) as client:
            assert (await (await client.get("/healthz")).json())["broker_state"] == "starting"
            assert "kafka_server_kafkaserver_brokerstate 1.0" in await (
                await client.get("/metrics")).text()
            state["now"] = ("running", 3)
            health = await (await client.get("/healthz")).json()
            assert health == {"status": "ok", "node_id": 1, "cluster_id": CID,
                              "broker_state": "running"}
            assert "kafka_server_kafkaserver_brokerstate 3.0" in await (
                await client.get("/metrics")).text()
        # A controller-only node has no broker state to report.
        async with TestClient(TestServer(build_app(backend))) as client:
            assert "broker_state" not in await (await client.get("/healthz")).json()

    asyncio.run(main())


def test_healthz_openapi_ui_and_status() -> None:
    async def body(client: TestClient[Any, Any], backend: FakeBackend) -> None:
        await backend.create_topic("t", 2, 2, {})
        backend.set_isr("t", 1, [3], leader=3)
        assert (await (await client.get("/healthz")).json())["status"] == "ok"
        document = await (await client.get("/openapi.json")).json()
        assert document == openapi_document()
        assert f"{'/v3/clusters/{cluster_id}'}/topics/{{topic_name}}/records" in document["paths"]
        page = await client.get("/ui")
        assert page.status == 200 and "app.js" in await page.text()
        assert (await client.get("/ui/static/app.js")).status == 200
        status = await (await client.get("/ui/api/status")).json()
        assert status["cluster_id"] == CID and status["quorum"]["leader_id"] == 1
        flags = [(p["partition_id"], p["under_replicated"]) for p in
                 status["topics"][0]["partitions"]]
        assert flags == [(0, False), (1, True)]
        metrics = await client.get("/metrics")
        assert metrics.status == 200
        assert "kafka_server_brokertopicmetrics_bytesin" in await metrics.text()

    run(body)
