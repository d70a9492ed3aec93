"""Hand-written encoders for the hot responses: Produce (v3-10) and Fetch (v4-16).

Every acks=all produce costs one Produce response and, per follower, one
Fetch response carrying the new batch; building those as kio entities (with
`data_plane.api.build`) and serialising them field by field through kio's
generic writers was a large share of the broker's per-request CPU. These
functions write the same bytes directly from plain values.

They follow the schemas in Kafka's ``ProduceResponse.json`` and
``FetchResponse.json`` (clients/src/main/resources/common/message/) for the
versions the broker serves (`data_plane.kafka_api.BROKER_API_VERSIONS`), and
must stay byte-identical to kio's encoding of the entity the handlers used
to build: ``tests/data_plane/test_api_encoders.py`` checks every version
against kio's writer and reader. Flexible versions (Produce v9+, Fetch v12+)
use compact lengths and tagged-field sections; a tagged field equal to its
default is omitted, as kio and Kafka do. KIP-951's leader hints (Produce v10,
Fetch v16: a partition's CurrentLeader and the answer's NodeEndpoints) are
such tagged fields.

The follower's own Fetch request (`encode_replica_fetch_request`, v16 only)
is written here too: it is sent once per appended batch per follower.

Record batches are copied as opaque bytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Final

from raftlog.values import value

__all__ = (
    "REPLICA_FETCH_VERSION",
    "FetchPartitionData",
    "NodeEndpoint",
    "ProducePartitionData",
    "ReplicaFetchPartition",
    "encode_fetch_response",
    "encode_produce_response",
    "encode_replica_fetch_request",
)

REPLICA_FETCH_VERSION: Final = 16
PRODUCE_VERSIONS: Final = (3, 10)
FETCH_VERSIONS: Final = (4, 16)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_FETCH_PARTITION_V5 = struct.Struct(">ihqqq")
_FETCH_PARTITION_V4 = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
# throttle_time_ms, error_code, session_id
_FETCH_TOP_V7 = struct.Struct(">ihi")
# index, error_code, base_offset, log_append_time_ms
_PRODUCE_PARTITION_V2 = struct.Struct(">ihqq")
# Tagged fields of a Fetch v12+ partition: tag, size, then the struct with an
# empty tagged-field section of its own.
_DIVERGING_EPOCH = struct.Struct(">BBiqB")  # tag 0: epoch int32, end_offset int64
_CURRENT_LEADER = struct.Struct(">BBiiB")  # tag 1: leader_id int32, leader_epoch int32
# A Produce v10 partition's one tagged field: tag 0, CurrentLeader.
_PRODUCE_CURRENT_LEADER = struct.Struct(">BBBiiB")  # count 1, tag 0, size 9, id, epoch, tags
# max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
_FETCH_REQUEST_TOP = struct.Struct(">iiibii")
# partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
# log_start_offset, partition_max_bytes, empty tagged fields
_FETCH_REQUEST_PARTITION = struct.Struct(">iiqiqiB")
# tagged fields of the request: 1 field, tag 1 (ReplicaState), size 13,
# replica_id int32, replica_epoch int64, empty tagged fields
_REPLICA_STATE_TAGS = struct.Struct(">BBBiqB")
_NULL_LENGTH_I16: Final = b"\xff\xff"
_NULL_LENGTH_I32: Final = b"\xff\xff\xff\xff"
_NO_TAGS: Final = b"\x00"
_ZERO_UUID: Final = bytes(16)


@value
class ProducePartitionData:
    """One partition of a Produce response (``record_errors`` is always empty).
    ``current_leader`` is (leader id, leader epoch), a tagged field of v10+
    (dropped below), omitted when None or Kafka's default (-1, -1)."""

    index: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None = None
    log_append_time_ms: int = -1
    current_leader: tuple[int, int] | None = None


@value
class NodeEndpoint:
    """A broker's address on the listener a request came in on: the
    NodeEndpoints of Produce v10+ and Fetch v16+ answers (KIP-951), which
    name the leaders their CurrentLeader hints point to."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@value
class FetchPartitionData:
    """One partition of a Fetch response. ``diverging_epoch`` is (epoch,
    end_offset) and ``current_leader`` (leader id, leader epoch); both are
    tagged fields of v12+ (dropped below), omitted when None or equal to
    Kafka's default (-1, -1). ``aborted_transactions`` None is a null array."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | None
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


# ---- Produce ---------------------------------------------------------------------


def encode_produce_response(
    version: int,
    topics: Sequence[tuple[str, Sequence[ProducePartitionData]]],
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The ProduceResponse body at ``version`` (3-10). Raises ValueError for
    another version. Leader hints and ``node_endpoints`` are written from v10."""
    if not PRODUCE_VERSIONS[0] <= version <= PRODUCE_VERSIONS[1]:
        raise ValueError(f"Produce v{version} is not encoded here")
    flexible = version >= 9
    hints = version >= 10
    out: list[bytes] = [_array_length(len(topics), flexible)]
    for name, partitions in topics:
        out.append(_string(name, flexible))
        out.append(_array_length(len(partitions), flexible))
        for p in partitions:
            out.append(
                _PRODUCE_PARTITION_V2.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms
                )
            )
            if version >= 5:
                out.append(_I64.pack(p.log_start_offset))
            if version >= 8:
                out.append(_array_length(0, flexible))  # record_errors
                out.append(_nullable_string(p.error_message, flexible))
            leader = p.current_leader
            if hints and leader is not None and leader != (-1, -1):
                out.append(_PRODUCE_CURRENT_LEADER.pack(1, 0, 9, leader[0], leader[1], 0))
            elif flexible:
                out.append(_NO_TAGS)
        if flexible:
            out.append(_NO_TAGS)
    out.append(_I32.pack(throttle_time_ms))
    if flexible:
        out.append(_node_endpoints(node_endpoints) if hints else _NO_TAGS)
    return b"".join(out)


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    """A top-level tagged-field section holding NodeEndpoints (tag 0), or an
    empty one when there are none (the field's default)."""
    if not endpoints:
        return _NO_TAGS
    body: list[bytes] = [_array_length(len(endpoints), True)]
    for e in endpoints:
        body.append(_I32.pack(e.node_id))
        body.append(_string(e.host, True))
        body.append(_I32.pack(e.port))
        body.append(_nullable_string(e.rack, True))
        body.append(_NO_TAGS)
    data = b"".join(body)
    return b"\x01\x00" + _uvarint(len(data)) + data


# ---- Fetch -----------------------------------------------------------------------


def encode_fetch_response(
    version: int,
    topics: Sequence[tuple[str | uuid.UUID | None, Sequence[FetchPartitionData]]],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The FetchResponse body at ``version`` (4-16). A topic is named by its
    name (v4-12) or its id (v13+; None is the zero UUID); ``node_endpoints``
    are written from v16. Raises ValueError for another version or a topic
    label of the wrong kind."""
    if not FETCH_VERSIONS[0] <= version <= FETCH_VERSIONS[1]:
        raise ValueError(f"Fetch v{version} is not encoded here")
    flexible = version >= 12
    by_id = version >= 13
    out: list[bytes] = []
    if version >= 7:
        out.append(_FETCH_TOP_V7.pack(throttle_time_ms, error_code, session_id))
    else:
        out.append(_I32.pack(throttle_time_ms))
    out.append(_array_length(len(topics), flexible))
    for label, partitions in topics:
        if by_id:
            if label is None:
                out.append(_ZERO_UUID)
            elif isinstance(label, uuid.UUID):
                out.append(label.bytes)
            else:
                raise ValueError(f"Fetch v{version} names topics by id, got {label!r}")
        elif isinstance(label, str):
            out.append(_string(label, flexible))
        else:
            raise ValueError(f"Fetch v{version} names topics by name, got {label!r}")
        out.append(_array_length(len(partitions), flexible))
        for p in partitions:
            _fetch_partition(out, p, version, flexible)
        if flexible:
            out.append(_NO_TAGS)
    if flexible:
        out.append(_node_endpoints(node_endpoints) if version >= 16 else _NO_TAGS)
    return b"".join(out)


def _fetch_partition(out: list[bytes], p: FetchPartitionData, version: int, flexible: bool) -> None:
    if version >= 5:
        out.append(
            _FETCH_PARTITION_V5.pack(
                p.partition_index,
                p.error_code,
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
            )
        )
    else:
        out.append(
            _FETCH_PARTITION_V4.pack(
                p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
        )
    aborted = p.aborted_transactions
    if aborted is None:
        out.append(b"\x00" if flexible else _NULL_LENGTH_I32)
    else:
        out.append(_array_length(len(aborted), flexible))
        for producer_id, first_offset in aborted:
            out.append(_ABORTED.pack(producer_id, first_offset))
            if flexible:
                out.append(_NO_TAGS)
    if version >= 11:
        out.append(_I32.pack(p.preferred_read_replica))
    records = p.records
    if records is None:
        out.append(b"\x00" if flexible else _NULL_LENGTH_I32)
    else:
        out.append(_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
        out.append(records)
    if not flexible:
        return
    diverging = p.diverging_epoch if p.diverging_epoch != (-1, -1) else None
    leader = p.current_leader if p.current_leader != (-1, -1) else None
    if diverging is None and leader is None:
        out.append(_NO_TAGS)
        return
    out.append(bytes([(diverging is not None) + (leader is not None)]))
    if diverging is not None:
        out.append(_DIVERGING_EPOCH.pack(0, 13, diverging[0], diverging[1], 0))
    if leader is not None:
        out.append(_CURRENT_LEADER.pack(1, 9, leader[0], leader[1], 0))


# ---- the follower's Fetch request ----------------------------------------------------


@value
class ReplicaFetchPartition:
    """One partition of a follower's Fetch request."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


def encode_replica_fetch_request(
    *,
    replica_id: int,
    replica_epoch: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    topics: Sequence[tuple[uuid.UUID, Sequence[ReplicaFetchPartition]]],
    isolation_level: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten_topics: Sequence[tuple[uuid.UUID, Sequence[int]]] = (),
) -> bytes:
    """A FetchRequest v16 body from a follower (``ReplicaState``, KIP-903) with
    an empty rack id. The defaults ask for no fetch session (id 0, epoch -1,
    KIP-227); ``forgotten_topics`` is ``ForgottenTopicsData`` (topic id,
    partition indexes). ``cluster_id`` (tag 0) is left out."""
    out: list[bytes] = [
        _FETCH_REQUEST_TOP.pack(
            max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
        )
    ]
    out.append(_uvarint(len(topics) + 1))
    for topic_id, partitions in topics:
        out.append(topic_id.bytes)
        out.append(_uvarint(len(partitions) + 1))
        for p in partitions:
            out.append(
                _FETCH_REQUEST_PARTITION.pack(
                    p.partition,
                    p.current_leader_epoch,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    p.log_start_offset,
                    p.partition_max_bytes,
                    0,
                )
            )
        out.append(_NO_TAGS)
    out.append(_uvarint(len(forgotten_topics) + 1))
    for topic_id, indexes in forgotten_topics:
        out.append(topic_id.bytes)
        out.append(_uvarint(len(indexes) + 1))
        out.extend(_I32.pack(index) for index in indexes)
        out.append(_NO_TAGS)
    out.append(b"\x01")  # rack_id: ""
    if (replica_id, replica_epoch) == (-1, -1):
        out.append(_NO_TAGS)
    else:
        out.append(_REPLICA_STATE_TAGS.pack(1, 1, 13, replica_id, replica_epoch, 0))
    return b"".join(out)


# ---- primitives ------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _array_length(length: int, flexible: bool) -> bytes:
    return _uvarint(length + 1) if flexible else _I32.pack(length)


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else _NULL_LENGTH_I16
    return _string(value, flexible)
