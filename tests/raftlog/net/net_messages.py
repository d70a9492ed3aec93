"""Sample kio messages shared by the transport tests."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from raftlog.net import registry

ZERO_MS = i32Timedelta.parse(timedelta(0))


def vote_request(version: int, candidate_epoch: int = 3, pre_vote: bool = True) -> Any:
    mod = __import__(f"kio.schema.vote.v{version}.request", fromlist=["x"])
    partition_fields: dict[str, Any] = {
        "partition_index": i32(0),
        "replica_epoch": i32(candidate_epoch),
        "replica_id": i32(1),
        "last_offset_epoch": i32(2),
        "last_offset": i64(41),
    }
    if version >= 1:
        partition_fields["replica_directory_id"] = uuid.UUID(int=7)
        partition_fields["voter_directory_id"] = uuid.UUID(int=9)
    if version >= 2:
        partition_fields["pre_vote"] = pre_vote
    partition = mod.PartitionData(**partition_fields)
    topic = mod.TopicData(topic_name="__cluster_metadata", partitions=(partition,))
    fields: dict[str, Any] = {"cluster_id": "cluster-x", "topics": (topic,)}
    if version >= 1:
        fields["voter_id"] = i32(2)
    return mod.VoteRequest(**fields)


def metadata_request(version: int) -> Any:
    cls: Any = registry.schemas(3, version).request
    names = {f for f in cls.__dataclass_fields__}
    fields: dict[str, Any] = {"topics": None}
    if "allow_auto_topic_creation" in names:
        fields["allow_auto_topic_creation"] = False
    if "include_cluster_authorized_operations" in names:
        fields["include_cluster_authorized_operations"] = False
    if "include_topic_authorized_operations" in names:
        fields["include_topic_authorized_operations"] = False
    return cls(**fields)


def metadata_response(
    version: int, node_id: int = 1, host: str = "127.0.0.1", port: int = 0
) -> Any:
    cls: Any = registry.schemas(3, version).response
    mod = __import__(cls.__module__, fromlist=["x"])
    names = set(cls.__dataclass_fields__)
    broker_names = set(mod.MetadataResponseBroker.__dataclass_fields__)
    broker_fields: dict[str, Any] = {"node_id": i32(node_id), "host": host, "port": i32(port)}
    if "rack" in broker_names:
        broker_fields["rack"] = None
    fields: dict[str, Any] = {
        "brokers": (mod.MetadataResponseBroker(**broker_fields),),
        "topics": (),
    }
    if "throttle_time" in names:
        fields["throttle_time"] = ZERO_MS
    if "cluster_id" in names:
        fields["cluster_id"] = "raftlog-test"
    if "controller_id" in names:
        fields["controller_id"] = i32(node_id)
    if "error_code" in names:
        fields["error_code"] = ErrorCode.none
    if "cluster_authorized_operations" in names:
        fields["cluster_authorized_operations"] = i32(-2147483648)
    return cls(**fields)


def vote_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    cls: Any = registry.schemas(52, version).response
    fields: dict[str, Any] = {"error_code": error, "topics": ()}
    if "node_endpoints" in cls.__dataclass_fields__:
        fields["node_endpoints"] = ()
    return cls(**fields)


def describe_quorum_request(version: int = 0) -> Any:
    mod = __import__(f"kio.schema.describe_quorum.v{version}.request", fromlist=["x"])
    partition = mod.PartitionData(partition_index=i32(0))
    return mod.DescribeQuorumRequest(
        topics=(mod.TopicData(topic_name="__cluster_metadata", partitions=(partition,)),)
    )
