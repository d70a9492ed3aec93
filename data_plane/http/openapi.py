"""The OpenAPI 3.0 document of the REST API, served at ``/openapi.json``.

Hand-written to match `data_plane.http.rest` route by route (the
schemathesis test in ``tests/data_plane/test_http_schemathesis.py`` checks
the running server against it). Small builders keep it readable.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

__all__ = ("openapi_document",)

_J = dict[str, Any]


def _ref(name: str) -> _J:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: list[str], **props: _J) -> _J:
    return {"type": "object", "required": required, "properties": props}


def _int(**extra: Any) -> _J:
    return {"type": "integer", "format": "int64", **extra}


def _str(**extra: Any) -> _J:
    return {"type": "string", **extra}


def _nullable(schema: _J) -> _J:
    return {**schema, "nullable": True}


def _array(items: _J) -> _J:
    return {"type": "array", "items": items}


def _list(kind: str, item: str) -> _J:
    return _obj(["kind", "metadata", "data"], kind=_str(enum=[kind]),
                metadata=_ref("ListMetadata"), data=_array(_ref(item)))


def _json(schema: _J, description: str) -> _J:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, _J]:
    text = {400: "Invalid request (the message names the field)", 404: "Not found",
            403: "Forbidden (internal topics cannot be deleted)",
            409: "Conflict", 413: "Body or record too large",
            416: "Offset out of range", 503: "Unavailable now; retry"}
    return {str(s): _json(_ref("Error"), text[s]) for s in statuses}


_CLUSTER = {"name": "cluster_id", "in": "path", "required": True, "schema": _str()}
_TOPIC = {"name": "topic_name", "in": "path", "required": True, "schema": _str()}
_PARTITION = {"name": "partition_id", "in": "path", "required": True,
              "schema": _int(minimum=0, maximum=2**31 - 1)}
_GROUP = {"name": "consumer_group_id", "in": "path", "required": True, "schema": _str()}
_BROKER = {"name": "broker_id", "in": "path", "required": True,
           "schema": _int(minimum=0, maximum=2**31 - 1)}


def _get(summary: str, params: list[_J], ok: _J, *errors: int) -> _J:
    return {"summary": summary, "parameters": params,
            "responses": {"200": _json(ok, "OK"), **_errors(*errors)}}


_SCHEMAS: _J = {
    "Error": _obj(["error_code", "message"], error_code=_int(), message=_str()),
    "ListMetadata": _obj(["self"], self=_str(), next=_nullable(_str())),
    "ResourceMetadata": _obj(["self"], self=_str()),
    "Related": _obj(["related"], related=_str()),
    "Cluster": _obj(
        ["kind", "metadata", "cluster_id", "node_id"],
        kind=_str(enum=["KafkaCluster"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), node_id=_int(description="The node that answered"),
        brokers=_ref("Related"), topics=_ref("Related"), consumer_groups=_ref("Related")),
    "ClusterList": _list("KafkaClusterList", "Cluster"),
    "Broker": _obj(
        ["kind", "metadata", "cluster_id", "broker_id", "fenced"],
        kind=_str(enum=["KafkaBroker"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), broker_id=_int(), host=_nullable(_str()), port=_nullable(_int()),
        rack=_nullable(_str()), fenced=_ref("Bool"), in_controlled_shutdown=_ref("Bool"),
        epoch=_int(),
        listeners=_array(_obj(["name", "host", "port"], name=_str(), host=_str(),
                              port=_int()))),
    "Bool": {"type": "boolean"},
    "BrokerList": _list("KafkaBrokerList", "Broker"),
    "Topic": _obj(
        ["kind", "metadata", "cluster_id", "topic_name"],
        kind=_str(enum=["KafkaTopic"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), topic_name=_str(), topic_id=_str(format="uuid"),
        is_internal=_ref("Bool"), replication_factor=_int(), partitions_count=_int(),
        partitions=_ref("Related")),
    "TopicList": _list("KafkaTopicList", "Topic"),
    "CreateTopicRequest": {
        **_obj(["topic_name"],
               topic_name=_str(pattern="^[a-zA-Z0-9._-]{1,249}$"),
               partitions_count=_nullable(_int(minimum=1, maximum=10000,
                                               description="Default: num.partitions")),
               replication_factor=_nullable(_int(
                   minimum=1, maximum=32767, description="Default: default.replication.factor")),
               configs=_array(_obj(["name", "value"], name=_str(minLength=1),
                                   value=_str()))),
    },
    "Partition": _obj(
        ["kind", "metadata", "cluster_id", "topic_name", "partition_id", "replicas", "isr"],
        kind=_str(enum=["KafkaPartition"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), topic_name=_str(), partition_id=_int(),
        leader_id=_nullable(_int(description="null while offline")), leader_epoch=_int(),
        replicas=_array(_int()), isr=_array(_int()), under_replicated=_ref("Bool"),
        offline=_ref("Bool")),
    "PartitionList": _list("KafkaPartitionList", "Partition"),
    "RecordData": _obj(
        [], type=_str(enum=["JSON", "BINARY", "STRING"], default="JSON"),
        data={"description": "JSON: any JSON value (stored as its compact encoding); "
                             "BINARY: base64; STRING: text (UTF-8)", "nullable": True}),
    "Header": _obj(["name"], name=_str(), value=_nullable(_str(format="byte"))),
    "ProduceRequest": _obj(
        [], partition_id=_nullable(_int(minimum=0, maximum=2**31 - 1,
                                        description="Default: murmur2(key), else round-robin")),
        key=_nullable(_ref("RecordData")), value=_nullable(_ref("RecordData")),
        headers=_array(_ref("Header")),
        timestamp=_nullable(_int(minimum=0, description="ms since the epoch; default now"))),
    "DataSize": _obj(["type", "size"], type=_str(), size=_int()),
    "ProduceResponse": _obj(
        ["error_code", "cluster_id", "topic_name", "partition_id", "offset", "timestamp"],
        error_code=_int(), cluster_id=_str(), topic_name=_str(), partition_id=_int(),
        offset=_int(), timestamp=_int(), key=_nullable(_ref("DataSize")),
        value=_nullable(_ref("DataSize"))),
    "Record": _obj(
        ["offset", "timestamp", "key", "value", "headers"], offset=_int(), timestamp=_int(),
        key=_nullable(_str(description="base64, or text with format=string")),
        value=_nullable(_str(description="base64, or text with format=string")),
        headers=_array(_ref("Header"))),
    "RecordList": _obj(
        ["kind", "cluster_id", "topic_name", "partition_id", "high_watermark",
         "log_start_offset", "next_offset", "records"],
        kind=_str(enum=["KafkaRecordList"]), cluster_id=_str(), topic_name=_str(),
        partition_id=_int(), high_watermark=_int(), log_start_offset=_int(),
        next_offset=_int(), records=_array(_ref("Record"))),
    "ConsumerGroupSummary": _obj(
        ["kind", "metadata", "cluster_id", "consumer_group_id", "state"],
        kind=_str(enum=["KafkaConsumerGroup"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), consumer_group_id=_str(), state=_str(), protocol_type=_str(),
        coordinator_id=_int(), is_simple=_ref("Bool")),
    "ConsumerGroupList": _list("KafkaConsumerGroupList", "ConsumerGroupSummary"),
    "ConsumerGroup": _obj(
        ["kind", "metadata", "cluster_id", "consumer_group_id", "state", "consumers"],
        kind=_str(enum=["KafkaConsumerGroup"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), consumer_group_id=_str(), state=_str(), protocol_type=_str(),
        partition_assignor=_str(), is_simple=_ref("Bool"), coordinator_id=_int(),
        consumers=_array(_obj(
            ["consumer_id", "client_id", "host", "assignments"], consumer_id=_str(),
            client_id=_str(), host=_str(),
            assignments=_array(_obj(["topic_name", "partition_id"], topic_name=_str(),
                                    partition_id=_int())))),
        lags=_ref("Related")),
    "ConsumerLag": _obj(
        ["kind", "metadata", "cluster_id", "consumer_group_id", "topic_name", "partition_id",
         "current_offset", "log_end_offset", "lag"],
        kind=_str(enum=["KafkaConsumerLag"]), metadata=_ref("ResourceMetadata"),
        cluster_id=_str(), consumer_group_id=_str(), topic_name=_str(), partition_id=_int(),
        current_offset=_int(description="-1: nothing committed"),
        log_end_offset=_int(description="The high watermark; -1 if unknown"),
        lag=_int(description="-1 if unknown"), consumer_id=_nullable(_str()),
        client_id=_nullable(_str())),
    "ConsumerLagList": _list("KafkaConsumerLagList", "ConsumerLag"),
    # broker_state: a broker's own lifecycle state (Kafka's BrokerState);
    # absent on a controller-only node.
    "Health": _obj(["status", "node_id", "cluster_id"], status=_str(enum=["ok"]),
                   node_id=_int(), cluster_id=_str(),
                   broker_state=_str(enum=["starting", "recovery", "running",
                                           "pending_controlled_shutdown", "shutting_down"])),
}

_BASE = "/v3/clusters/{cluster_id}"


def _paths() -> _J:
    t = f"{_BASE}/topics/{{topic_name}}"
    g = f"{_BASE}/consumer-groups/{{consumer_group_id}}"
    return {
        "/v3/clusters": {"get": _get("The cluster (one: this node's)", [],
                                     _ref("ClusterList"))},
        _BASE: {"get": _get("The cluster", [_CLUSTER], _ref("Cluster"), 404)},
        f"{_BASE}/brokers": {"get": _get("Registered brokers (live or fenced)", [_CLUSTER],
                                         _ref("BrokerList"), 404)},
        f"{_BASE}/brokers/{{broker_id}}": {"get": _get(
            "One broker", [_CLUSTER, _BROKER], _ref("Broker"), 400, 404)},
        f"{_BASE}/topics": {
            "get": _get("Topics", [_CLUSTER], _ref("TopicList"), 404),
            "post": {
                "summary": "Create a topic (forwarded to the active controller)",
                "parameters": [_CLUSTER],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref("CreateTopicRequest")}}},
                "responses": {"201": _json(_ref("Topic"), "Created"),
                              **_errors(400, 404, 409, 413, 503)},
            },
        },
        t: {
            "get": _get("One topic", [_CLUSTER, _TOPIC], _ref("Topic"), 404),
            "delete": {"summary": "Delete a topic", "parameters": [_CLUSTER, _TOPIC],
                       "responses": {"204": {"description": "Deleted"},
                                     **_errors(400, 403, 404, 503)}},
        },
        f"{t}/partitions": {"get": _get("Partitions with leader, replicas and ISR",
                                        [_CLUSTER, _TOPIC], _ref("PartitionList"), 404)},
        f"{t}/partitions/{{partition_id}}": {"get": _get(
            "One partition", [_CLUSTER, _TOPIC, _PARTITION], _ref("Partition"), 400, 404)},
        f"{t}/records": {"post": {
            "summary": "Produce one record (acks=all)",
            "parameters": [_CLUSTER, _TOPIC],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref("ProduceRequest")}}},
            "responses": {"200": _json(_ref("ProduceResponse"), "Appended and committed"),
                          **_errors(400, 404, 413, 503)},
        }},
        f"{t}/partitions/{{partition_id}}/records": {"get": _get(
            "Read records from an offset, up to the high watermark",
            [_CLUSTER, _TOPIC, _PARTITION,
             {"name": "offset", "in": "query", "required": True,
              "schema": _int(minimum=0)},
             {"name": "max_records", "in": "query", "required": False,
              "schema": _int(minimum=1, maximum=1000, default=100)},
             {"name": "format", "in": "query", "required": False,
              "schema": _str(enum=["binary", "string"], default="binary")}],
            _ref("RecordList"), 400, 404, 416, 503)},
        f"{_BASE}/consumer-groups": {"get": _get("Consumer groups", [_CLUSTER],
                                                 _ref("ConsumerGroupList"), 404, 503)},
        g: {"get": _get("One consumer group with its members and assignments",
                        [_CLUSTER, _GROUP], _ref("ConsumerGroup"), 404, 503)},
        f"{g}/lags": {"get": _get("Committed offset, end offset and lag per partition",
                                  [_CLUSTER, _GROUP], _ref("ConsumerLagList"), 404, 503)},
        "/healthz": {"get": _get("Liveness", [], _ref("Health"))},
    }


@functools.cache
def _document() -> _J:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "raftlog REST API",
            "version": "1.0.0",
            "description": "Confluent REST Proxy v3 shapes over a raftlog node. Errors are "
                           "{error_code, message} with the HTTP status.",
        },
        "paths": _paths(),
        "components": {"schemas": _SCHEMAS},
    }


def openapi_document() -> _J:
    """A fresh copy of the document (callers may change it)."""
    return copy.deepcopy(_document())
