"""The REST API, in the shape of Confluent REST Proxy v3 (routes under ``/v3``).

A thin translation from HTTP to `data_plane.http.backend.ClusterBackend`
and back: parse and validate the path, query and body (every problem is a
400 naming the field), call the backend, render the resource as JSON.
Resource shapes follow Confluent's (``kind``, ``metadata.self``,
``cluster_id``, ``topic_name``, ``partition_id``, ``data`` lists), with a
few additions that v3 reaches through links (a partition's ``leader_id``,
``replicas`` and ``isr`` inline). ``openapi.json`` documents every route
(`data_plane.http.openapi`).

Errors are ``{"error_code": int, "message": str}`` with the HTTP status:
400 (40001 malformed JSON, 40002 invalid field or Kafka's INVALID_*),
404 (40401 cluster, 40402 partition, 40403 topic, 40404 consumer group),
403 (40301 deleting an internal topic), 409 (40902 topic exists), 413 (41301 record or body too large),
416 (41601 offset out of range), 503 (5030x: no leader, no broker,
timeout; retry later), 500 otherwise.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from metadata_quorum.image import MetadataImage, TopicImage

from .backend import ClusterBackend, ProduceRecord, RestError

__all__ = ("BACKEND", "MAX_RECORDS", "add_routes", "validate_topic_name")

BACKEND: Final = web.AppKey("backend", ClusterBackend)
MAX_RECORDS: Final = 1000  # per consume GET
_TOPIC_RE: Final = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_DATA_TYPES: Final = frozenset({"JSON", "BINARY", "STRING"})


def add_routes(app: web.Application) -> None:
    """Register the ``/v3`` routes on ``app`` (whose ``BACKEND`` is set)."""
    app.router.add_get("/v3/clusters", list_clusters)
    app.router.add_get("/v3/clusters/{cluster_id}", get_cluster)
    app.router.add_get("/v3/clusters/{cluster_id}/brokers", list_brokers)
    app.router.add_get("/v3/clusters/{cluster_id}/brokers/{broker_id}", get_broker)
    app.router.add_get("/v3/clusters/{cluster_id}/topics", list_topics)
    app.router.add_post("/v3/clusters/{cluster_id}/topics", create_topic)
    app.router.add_get("/v3/clusters/{cluster_id}/topics/{topic}", get_topic)
    app.router.add_delete("/v3/clusters/{cluster_id}/topics/{topic}", delete_topic)
    app.router.add_get("/v3/clusters/{cluster_id}/topics/{topic}/partitions", list_partitions)
    app.router.add_get("/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}",
                       get_partition)
    app.router.add_post("/v3/clusters/{cluster_id}/topics/{topic}/records", produce)
    app.router.add_get("/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/records",
                       consume)
    app.router.add_get("/v3/clusters/{cluster_id}/consumer-groups", list_groups)
    app.router.add_get("/v3/clusters/{cluster_id}/consumer-groups/{group}", get_group)
    app.router.add_get("/v3/clusters/{cluster_id}/consumer-groups/{group}/lags", group_lags)


# ---- helpers --------------------------------------------------------------------------


def _backend(request: web.Request) -> ClusterBackend:
    return request.app[BACKEND]


def _cluster(request: web.Request) -> ClusterBackend:
    backend = _backend(request)
    cluster_id = request.match_info["cluster_id"]
    if cluster_id != backend.cluster_id:
        raise RestError(404, 40401, f"cluster {cluster_id!r} not found")
    return backend


def _url(request: web.Request, path: str) -> str:
    return f"{request.scheme}://{request.host}{path}"


def _resource(request: web.Request, kind: str, path: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": _url(request, path)}, **fields}


def _list(request: web.Request, kind: str, data: list[dict[str, Any]]) -> web.Response:
    return web.json_response({"kind": kind, "metadata": {"self": _url(request, request.path),
                                                         "next": None}, "data": data})


def _int_param(value: str, name: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        raise RestError(400, 40002, f"{name}: {value!r} is not an integer") from None
    if number < minimum or (maximum is not None and number > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise RestError(400, 40002, f"{name}: must be >= {minimum}{upper}, got {number}")
    return number


def _topic_or_404(image: MetadataImage, name: str) -> TopicImage:
    topic = image.topic_by_name(name)
    if topic is None:
        raise RestError(404, 40403, f"topic {name!r} not found")
    return topic


def validate_topic_name(name: object, field: str = "topic_name") -> str:
    """Kafka's topic name rule (legal characters, 1..249, not ``.``/``..``)."""
    if not isinstance(name, str):
        raise RestError(400, 40002, f"{field}: must be a string")
    if not _TOPIC_RE.match(name) or name in (".", ".."):
        raise RestError(400, 40002, f"{field}: {name!r} is not a legal topic name "
                                    "(1-249 of [a-zA-Z0-9._-], not '.' or '..')")
    return name


async def _json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()  # client_max_size bounds it (413)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise RestError(400, 40001, "body: not valid JSON") from None
    if not isinstance(body, dict):
        raise RestError(400, 40002, "body: must be a JSON object")
    return body


def _optional_int(body: Mapping[str, Any], field: str, minimum: int,
                  maximum: int) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RestError(400, 40002, f"{field}: must be an integer")
    if not minimum <= value <= maximum:
        raise RestError(400, 40002, f"{field}: must be between {minimum} and {maximum}")
    return value


# ---- cluster and brokers ------------------------------------------------------------------


def _cluster_json(request: web.Request, backend: ClusterBackend) -> dict[str, Any]:
    base = f"/v3/clusters/{backend.cluster_id}"
    return _resource(
        request, "KafkaCluster", base,
        cluster_id=backend.cluster_id,
        node_id=backend.node_id,
        brokers={"related": _url(request, base + "/brokers")},
        topics={"related": _url(request, base + "/topics")},
        consumer_groups={"related": _url(request, base + "/consumer-groups")},
    )


async def list_clusters(request: web.Request) -> web.Response:
    return _list(request, "KafkaClusterList", [_cluster_json(request, _backend(request))])


async def get_cluster(request: web.Request) -> web.Response:
    return web.json_response(_cluster_json(request, _cluster(request)))


def _broker_json(request: web.Request, cluster_id: str, broker: Any) -> dict[str, Any]:
    endpoint = broker.listeners[0] if broker.listeners else None
    return _resource(
        request, "KafkaBroker", f"/v3/clusters/{cluster_id}/brokers/{broker.broker_id}",
        cluster_id=cluster_id,
        broker_id=broker.broker_id,
        host=endpoint.host if endpoint else None,
        port=endpoint.port if endpoint else None,
        rack=broker.rack,
        fenced=broker.fenced,
        in_controlled_shutdown=broker.in_controlled_shutdown,
        epoch=broker.epoch,
        listeners=[{"name": e.name, "host": e.host, "port": e.port} for e in broker.listeners],
    )


async def list_brokers(request: web.Request) -> web.Response:
    backend = _cluster(request)
    brokers = sorted(backend.image().brokers.values(), key=lambda b: b.broker_id)
    return _list(request, "KafkaBrokerList",
                 [_broker_json(request, backend.cluster_id, b) for b in brokers])


async def get_broker(request: web.Request) -> web.Response:
    backend = _cluster(request)
    broker_id = _int_param(request.match_info["broker_id"], "broker_id")
    broker = backend.image().brokers.get(broker_id)
    if broker is None:
        raise RestError(404, 40405, f"broker {broker_id} not found")
    return web.json_response(_broker_json(request, backend.cluster_id, broker))


# ---- topics and partitions ------------------------------------------------------------


def _topic_json(request: web.Request, cluster_id: str, topic: TopicImage) -> dict[str, Any]:
    base = f"/v3/clusters/{cluster_id}/topics/{topic.name}"
    partitions = topic.partitions
    first = partitions.get(0)
    return _resource(
        request, "KafkaTopic", base,
        cluster_id=cluster_id,
        topic_name=topic.name,
        topic_id=str(topic.topic_id),
        is_internal=topic.name.startswith("__"),
        replication_factor=len(first.replicas) if first else 0,
        partitions_count=len(partitions),
        partitions={"related": _url(request, base + "/partitions")},
    )


def _partition_json(request: web.Request, cluster_id: str, topic: str, index: int,
                    partition: Any) -> dict[str, Any]:
    return _resource(
        request, "KafkaPartition", f"/v3/clusters/{cluster_id}/topics/{topic}/partitions/{index}",
        cluster_id=cluster_id,
        topic_name=topic,
        partition_id=index,
        leader_id=partition.leader if partition.leader >= 0 else None,
        leader_epoch=partition.leader_epoch,
        replicas=list(partition.replicas),
        isr=list(partition.isr),
        under_replicated=len(partition.isr) < len(partition.replicas),
        offline=partition.leader < 0,
    )


async def list_topics(request: web.Request) -> web.Response:
    backend = _cluster(request)
    topics = sorted(backend.image().topics.values(), key=lambda t: t.name)
    return _list(request, "KafkaTopicList",
                 [_topic_json(request, backend.cluster_id, t) for t in topics])


async def get_topic(request: web.Request) -> web.Response:
    backend = _cluster(request)
    topic = _topic_or_404(backend.image(), request.match_info["topic"])
    return web.json_response(_topic_json(request, backend.cluster_id, topic))


async def create_topic(request: web.Request) -> web.Response:
    backend = _cluster(request)
    body = await _json_body(request)
    name = validate_topic_name(body.get("topic_name"))
    partitions = _optional_int(body, "partitions_count", 1, 10_000)
    replication = _optional_int(body, "replication_factor", 1, 32767)
    configs_field = body.get("configs", [])
    if not isinstance(configs_field, list):
        raise RestError(400, 40002, "configs: must be a list of {name, value}")
    configs: dict[str, str] = {}
    for i, entry in enumerate(configs_field):
        if (not isinstance(entry, dict) or not isinstance(entry.get("name"), str)
                or not entry["name"] or not isinstance(entry.get("value"), str)):
            raise RestError(400, 40002, f"configs[{i}]: must be {{name: string, value: string}}")
        configs[entry["name"]] = entry["value"]
    await backend.create_topic(name, partitions, replication, configs)
    topic = backend.image().topic_by_name(name)
    if topic is None:  # created, but this node's image has not caught up yet
        return web.json_response(
            _resource(request, "KafkaTopic", f"/v3/clusters/{backend.cluster_id}/topics/{name}",
                      cluster_id=backend.cluster_id, topic_name=name), status=201)
    return web.json_response(_topic_json(request, backend.cluster_id, topic), status=201)


async def delete_topic(request: web.Request) -> web.Response:
    backend = _cluster(request)
    name = request.match_info["topic"]
    if name.startswith("__"):  # __consumer_offsets and friends: the brokers own them
        raise RestError(403, 40301, f"topic {name!r} is internal and cannot be deleted here")
    await backend.delete_topic(name)
    return web.Response(status=204)


async def list_partitions(request: web.Request) -> web.Response:
    backend = _cluster(request)
    topic = _topic_or_404(backend.image(), request.match_info["topic"])
    data = [_partition_json(request, backend.cluster_id, topic.name, i, p)
            for i, p in sorted(topic.partitions.items())]
    return _list(request, "KafkaPartitionList", data)


async def get_partition(request: web.Request) -> web.Response:
    backend = _cluster(request)
    topic = _topic_or_404(backend.image(), request.match_info["topic"])
    index = _int_param(request.match_info["partition"], "partition_id")
    partition = topic.partitions.get(index)
    if partition is None:
        raise RestError(404, 40402, f"partition {index} of {topic.name!r} not found")
    return web.json_response(_partition_json(request, backend.cluster_id, topic.name, index,
                                             partition))


# ---- produce and consume ------------------------------------------------------------------


def _data(body: Mapping[str, Any], field: str) -> tuple[bytes | None, str | None]:
    """``{type: JSON|BINARY|STRING, data}`` -> bytes (None: null / absent)."""
    value = body.get(field)
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise RestError(400, 40002, f"{field}: must be an object {{type, data}}")
    kind = value.get("type", "JSON")
    if not isinstance(kind, str) or kind not in _DATA_TYPES:
        raise RestError(400, 40002, f"{field}.type: must be one of JSON, BINARY, STRING")
    data = value.get("data")
    if data is None:
        return None, kind
    if kind == "JSON":
        return json.dumps(data, separators=(",", ":")).encode(), kind
    if not isinstance(data, str):
        raise RestError(400, 40002, f"{field}.data: must be a string for type {kind}")
    if kind == "STRING":
        return data.encode(), kind
    try:
        return base64.b64decode(data, validate=True), kind
    except (binascii.Error, ValueError):
        raise RestError(400, 40002, f"{field}.data: not valid base64") from None


def _headers(body: Mapping[str, Any]) -> tuple[tuple[str, bytes | None], ...]:
    headers = body.get("headers", [])
    if not isinstance(headers, list):
        raise RestError(400, 40002, "headers: must be a list of {name, value}")
    out: list[tuple[str, bytes | None]] = []
    for i, header in enumerate(headers):
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise RestError(400, 40002, f"headers[{i}].name: must be a string")
        value = header.get("value")
        if value is None:
            out.append((header["name"], None))
            continue
        if not isinstance(value, str):
            raise RestError(400, 40002, f"headers[{i}].value: must be a base64 string or null")
        try:
            out.append((header["name"], base64.b64decode(value, validate=True)))
        except (binascii.Error, ValueError):
            raise RestError(400, 40002, f"headers[{i}].value: not valid base64") from None
    return tuple(out)


async def produce(request: web.Request) -> web.Response:
    """One record (Confluent v3's body): ``{partition_id?, key?, value?, headers?, timestamp?}``."""
    backend = _cluster(request)
    topic = request.match_info["topic"]
    body = await _json_body(request)
    partition = _optional_int(body, "partition_id", 0, 2**31 - 1)
    timestamp = _optional_int(body, "timestamp", 0, 2**63 - 1)
    key, key_type = _data(body, "key")
    value, value_type = _data(body, "value")
    record = ProduceRecord(key, value, _headers(body), partition, timestamp)
    _topic_or_404(backend.image(), topic)
    (result,) = await backend.produce(topic, [record])
    return web.json_response({
        "error_code": 200,
        "cluster_id": backend.cluster_id,
        "topic_name": topic,
        "partition_id": result.partition,
        "offset": result.offset,
        "timestamp": result.timestamp_ms,
        "key": None if key_type is None else {"type": key_type,
                                               "size": 0 if key is None else len(key)},
        "value": None if value_type is None else {"type": value_type,
                                                   "size": 0 if value is None else len(value)},
    })


def _render(data: bytes | None, fmt: str) -> str | None:
    if data is None:
        return None
    if fmt == "string":
        return data.decode("utf-8", errors="replace")
    return base64.b64encode(data).decode()


async def consume(request: web.Request) -> web.Response:
    """``?offset=&max_records=&format=binary|string``: records below the high watermark."""
    backend = _cluster(request)
    topic = _topic_or_404(backend.image(), request.match_info["topic"])
    index = _int_param(request.match_info["partition"], "partition_id")
    if index not in topic.partitions:
        raise RestError(404, 40402, f"partition {index} of {topic.name!r} not found")
    query = request.query
    if "offset" not in query:
        raise RestError(400, 40002, "offset: required")
    offset = _int_param(query["offset"], "offset", maximum=2**63 - 1)
    max_records = _int_param(query.get("max_records", "100"), "max_records", minimum=1,
                             maximum=MAX_RECORDS)
    fmt = query.get("format", "binary")
    if fmt not in ("binary", "string"):
        raise RestError(400, 40002, "format: must be binary or string")
    result = await backend.fetch(topic.name, index, offset, max_records)
    return web.json_response({
        "kind": "KafkaRecordList",
        "cluster_id": backend.cluster_id,
        "topic_name": topic.name,
        "partition_id": index,
        "high_watermark": result.high_watermark,
        "log_start_offset": result.log_start_offset,
        "next_offset": result.records[-1].offset + 1 if result.records else offset,
        "records": [
            {
                "offset": r.offset,
                "timestamp": r.timestamp_ms,
                "key": _render(r.key, fmt),
                "value": _render(r.value, fmt),
                "headers": [{"name": k, "value": _render(v, "binary")} for k, v in r.headers],
            }
            for r in result.records
        ],
    })


# ---- consumer groups ------------------------------------------------------------------


async def list_groups(request: web.Request) -> web.Response:
    backend = _cluster(request)
    groups = await backend.list_groups()
    base = f"/v3/clusters/{backend.cluster_id}/consumer-groups"
    return _list(request, "KafkaConsumerGroupList", [
        _resource(request, "KafkaConsumerGroup", f"{base}/{g.group_id}",
                  cluster_id=backend.cluster_id, consumer_group_id=g.group_id,
                  state=g.state, protocol_type=g.protocol_type, coordinator_id=g.coordinator_id,
                  is_simple=g.protocol_type == "")
        for g in groups
    ])


async def get_group(request: web.Request) -> web.Response:
    backend = _cluster(request)
    group = await backend.describe_group(request.match_info["group"])
    base = f"/v3/clusters/{backend.cluster_id}/consumer-groups/{group.group_id}"
    return web.json_response(_resource(
        request, "KafkaConsumerGroup", base,
        cluster_id=backend.cluster_id,
        consumer_group_id=group.group_id,
        state=group.state,
        protocol_type=group.protocol_type,
        partition_assignor=group.protocol,
        is_simple=group.protocol_type == "",
        coordinator_id=group.coordinator_id,
        consumers=[{"consumer_id": m.member_id, "client_id": m.client_id, "host": m.host,
                    "assignments": [{"topic_name": t, "partition_id": p}
                                    for t, p in m.assignments]}
                   for m in group.members],
        lags={"related": _url(request, base + "/lags")},
    ))


async def group_lags(request: web.Request) -> web.Response:
    backend = _cluster(request)
    group_id = request.match_info["group"]
    lags = await backend.group_lags(group_id)
    base = f"/v3/clusters/{backend.cluster_id}/consumer-groups/{group_id}/lags"
    return _list(request, "KafkaConsumerLagList", [
        _resource(request, "KafkaConsumerLag", f"{base}/{lag.topic}/partitions/{lag.partition}",
                  cluster_id=backend.cluster_id, consumer_group_id=group_id,
                  topic_name=lag.topic, partition_id=lag.partition,
                  current_offset=lag.current_offset, log_end_offset=lag.log_end_offset,
                  lag=lag.lag, consumer_id=lag.consumer_id, client_id=lag.client_id)
        for lag in lags
    ])
