"""What every part of the kio mapping shares: the metadata partition, API keys
and versions, `WireError`, `Endpoint` and the error-code mapping."""

from __future__ import annotations

import dataclasses
import types
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0
METADATA_TOPIC_ID: Final = uuid.UUID(int=1)
"""Kafka's ``Topic.CLUSTER_METADATA_TOPIC_ID`` (``AAAAAAAAAAAAAAAAAAAAAQ``)."""

VOTE_KEY: Final = 52
BEGIN_QUORUM_EPOCH_KEY: Final = 53
END_QUORUM_EPOCH_KEY: Final = 54
FETCH_KEY: Final = 1
FETCH_SNAPSHOT_KEY: Final = 59
DESCRIBE_QUORUM_KEY: Final = 55

API_KEYS: Final = (
    VOTE_KEY,
    BEGIN_QUORUM_EPOCH_KEY,
    END_QUORUM_EPOCH_KEY,
    FETCH_KEY,
    FETCH_SNAPSHOT_KEY,
    DESCRIBE_QUORUM_KEY,
)

SUPPORTED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = types.MappingProxyType(
    {
        VOTE_KEY: (2, 2),
        BEGIN_QUORUM_EPOCH_KEY: (1, 1),
        END_QUORUM_EPOCH_KEY: (1, 1),
        FETCH_KEY: (17, 18),  # v18: the fetcher's HighWatermark (KIP-1166)
        FETCH_SNAPSHOT_KEY: (1, 1),
        DESCRIBE_QUORUM_KEY: (0, 2),
    }
)
"""``api_key -> (min, max)`` served by a quorum node for the Raft APIs."""

FETCH_VERSION: Final = 18
"""The Fetch version a quorum node sends when its peer serves it (else 17,
without the fetcher's HighWatermark)."""

REQUEST_TYPES: Final = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    DescribeQuorumRequest,
)
"""The classes of `raftlog.consensus.messages.Request`, for isinstance checks."""

RESPONSE_TYPES: Final = (
    VoteResponse,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    DescribeQuorumResponse,
)
"""The classes of `raftlog.consensus.messages.Response`."""

CONTROLLER_LISTENER: Final = "CONTROLLER"

_TOPIC_NAME: Final = TopicName(METADATA_TOPIC)
_PARTITION: Final = i32(METADATA_PARTITION)


class WireError(Exception):
    """A request that cannot be mapped; answer it with ``error_code``."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(f"{error_code.name}: {message}")
        self.error_code = error_code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """A node's controller listener (KIP-853 ``LeaderEndpoints``/``NodeEndpoints``)."""

    node_id: int
    host: str
    port: int
    listener: str = CONTROLLER_LISTENER


def _single_partition(topics: Any, name_field: str, partitions_field: str, index_field: str) -> Any:
    if len(topics) != 1 or getattr(topics[0], name_field) != METADATA_TOPIC:
        raise WireError(ErrorCode.invalid_request, "request must name __cluster_metadata only")
    partitions = getattr(topics[0], partitions_field)
    if len(partitions) != 1 or getattr(partitions[0], index_field) != METADATA_PARTITION:
        raise WireError(ErrorCode.invalid_request, "request must name partition 0 only")
    return partitions[0]


_ERRORS_BY_CODE: Final = {int(e): e for e in Errors}


def _to_kio(error: Errors) -> ErrorCode:
    return ErrorCode(int(error))


def _from_kio(code: int) -> Errors:
    # A code the core has no name for is still an error to it.
    return _ERRORS_BY_CODE.get(int(code), Errors.UNKNOWN_SERVER_ERROR)
