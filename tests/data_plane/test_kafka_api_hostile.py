"""Hostile but well-formed kio requests to the broker handlers: unknown
topics, negative partitions, huge or negative sizes, bogus epochs, garbage
record bytes. Every one is answered with error codes (an encodable response
of the right class), never an exception."""

from __future__ import annotations

import contextlib
import datetime
import os
import uuid

import pytest
from hostile_requests import TIMEDELTA, Vocabulary, over_the_wire, requests_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.alter_client_quotas.v1 import request as acq1
from kio.schema.alter_partition_reassignments.v1 import request as apr1
from kio.schema.describe_client_quotas.v1 import request as dcq1
from kio.schema.describe_producers.v0 import request as dp0
from kio.schema.describe_topic_partitions.v0 import request as dtp0
from kio.schema.describe_transactions.v0 import request as dtx0
from kio.schema.fetch.v12 import request as f12
from kio.schema.fetch.v16 import request as f16
from kio.schema.list_offsets.v6 import request as lo6
from kio.schema.list_partition_reassignments.v0 import request as lpr0
from kio.schema.list_transactions.v1 import request as ltx1
from kio.schema.metadata.v12 import request as md12
from kio.schema.offset_for_leader_epoch.v4 import request as ofle4
from kio.schema.produce.v9 import request as p9
from single_broker import SingleBroker

from data_plane.kafka_api import BROKER_API_VERSIONS
from data_plane.kafka_api import FETCH as FETCH_KEY
from data_plane.kafka_api import PRODUCE as PRODUCE_KEY
from metadata_quorum.controller.replication_control import MAX_PARTITIONS_PER_BATCH
from raftlog.net import KafkaApiError
from raftlog.net.registry import schemas
from raftlog.records import BatchBuilder

topics = st.sampled_from(["t", "missing", "", "__x"])
partitions = st.integers(-3, 4)
epochs = st.integers(-5, 10)
offsets = st.integers(-(2**63), 2**63 - 1)
sizes = st.integers(-(2**31), 2**31 - 1)


def _batch(n: int, flip: int | None) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(b"v%d" % i, key=b"k", timestamp_ms=1000 + i)
    data = bytearray(builder.build())
    if flip is not None and data:
        data[flip % len(data)] ^= 0xFF  # corrupt one byte: CRC or header
    return bytes(data)


records = st.one_of(
    st.binary(max_size=200), st.none(), st.just(b""),
    st.builds(_batch, st.integers(1, 5), st.one_of(st.none(), st.integers(0, 500))),
)


HARNESS: SingleBroker | None = None


def harness() -> SingleBroker:
    global HARNESS
    if HARNESS is None:
        HARNESS = SingleBroker({
            "group.initial.rebalance.delay.ms": "0",
            # Short group session timeouts, so that generated joins reach the
            # rebalance and a parked join ends within its call.
            "group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "1000"})
    return HARNESS


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(topic=topics, partition=partitions, data=records, acks=st.sampled_from([-1, 0, 1, 2, -7]),
       timeout_ms=st.integers(-1000, 50))
def test_produce(topic: str, partition: int, data: bytes | None, acks: int, timeout_ms: int) -> None:
    request = p9.ProduceRequest(
        transactional_id=None, acks=acks,  # type: ignore[arg-type]
        timeout=datetime.timedelta(milliseconds=timeout_ms),  # type: ignore[arg-type]
        topic_data=(p9.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
            p9.PartitionProduceData(index=partition, records=data),),),),  # type: ignore[arg-type]
    )
    response = harness().call(0, request)
    if acks != 0:
        code = response.responses[0].partition_responses[0].error_code
        assert code.value != 0 or (topic == "t" and 0 <= partition < 2)


@SETTINGS
@given(topic=topics, partition=partitions, offset=offsets, epoch=epochs, last=epochs,
       max_bytes=sizes, replica=st.integers(-3, 5), wait=st.integers(-10, 5))
def test_fetch_by_name(topic: str, partition: int, offset: int, epoch: int, last: int,
                       max_bytes: int, replica: int, wait: int) -> None:
    request = f12.FetchRequest(
        replica_id=replica, max_wait=datetime.timedelta(milliseconds=wait),  # type: ignore[arg-type]
        min_bytes=1, max_bytes=max_bytes, isolation_level=0,  # type: ignore[arg-type]
        topics=(f12.FetchTopic(topic=topic, partitions=(f12.FetchPartition(  # type: ignore[arg-type]
            partition=partition, current_leader_epoch=epoch, fetch_offset=offset,  # type: ignore[arg-type]
            last_fetched_epoch=last, partition_max_bytes=max_bytes),)),),  # type: ignore[arg-type]
        forgotten_topics_data=(),
    )
    harness().call(1, request)


@SETTINGS
@given(known=st.booleans(), partition=partitions, offset=offsets, epoch=epochs,
       broker_epoch=st.integers(-2, 2**40))
def test_fetch_by_id(known: bool, partition: int, offset: int, epoch: int,
                     broker_epoch: int) -> None:
    h = harness()
    topic_id = h.cluster.image.topic_ids["t"] if known else uuid.uuid4()
    request = f16.FetchRequest(
        replica_state=f16.ReplicaState(replica_id=2, replica_epoch=broker_epoch),  # type: ignore[arg-type]
        max_wait=datetime.timedelta(0), min_bytes=1,  # type: ignore[arg-type]
        topics=(f16.FetchTopic(topic_id=topic_id, partitions=(f16.FetchPartition(
            partition=partition, current_leader_epoch=epoch, fetch_offset=offset,  # type: ignore[arg-type]
            partition_max_bytes=100),)),),  # type: ignore[arg-type]
        forgotten_topics_data=(),
    )
    h.call(1, request)


@SETTINGS
@given(topic=topics, partition=partitions, epoch=epochs, ts=offsets)
def test_list_offsets_and_epochs(topic: str, partition: int, epoch: int, ts: int) -> None:
    h = harness()
    h.call(2, lo6.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(  # type: ignore[arg-type]
        lo6.ListOffsetsTopic(name=topic, partitions=(lo6.ListOffsetsPartition(  # type: ignore[arg-type]
            partition_index=partition, current_leader_epoch=epoch, timestamp=ts),)),)))  # type: ignore[arg-type]
    h.call(23, ofle4.OffsetForLeaderEpochRequest(topics=(ofle4.OffsetForLeaderTopic(
        topic=topic, partitions=(ofle4.OffsetForLeaderPartition(  # type: ignore[arg-type]
            partition=partition, current_leader_epoch=epoch, leader_epoch=epoch),)),)))  # type: ignore[arg-type]


@SETTINGS
@given(names=st.one_of(st.none(), st.lists(topics, max_size=3)))
def test_metadata(names: list[str] | None) -> None:
    request = md12.MetadataRequest(
        topics=None if names is None else tuple(
            md12.MetadataRequestTopic(topic_id=None, name=n) for n in names),  # type: ignore[arg-type]
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
    )
    harness().call(3, request)


@SETTINGS
@given(names=st.lists(topics, max_size=3), limit=sizes,
       cursor=st.one_of(st.none(), st.tuples(topics, sizes)))
def test_describe_topic_partitions(names: list[str], limit: int,
                                   cursor: tuple[str, int] | None) -> None:
    response = harness().call(75, dtp0.DescribeTopicPartitionsRequest(
        topics=tuple(dtp0.TopicRequest(name=n) for n in names),  # type: ignore[arg-type]
        response_partition_limit=limit,  # type: ignore[arg-type]
        cursor=None if cursor is None else dtp0.Cursor(
            topic_name=cursor[0], partition_index=cursor[1]),  # type: ignore[arg-type]
    ))
    # Never more partitions than asked for (nor than the broker's cap).
    assert sum(len(t.partitions) for t in response.topics) <= max(limit, 0)


@SETTINGS
@given(topic=topics, partition=partitions, ids=st.lists(st.text(max_size=5), max_size=3),
       states=st.lists(st.sampled_from(["Ongoing", "Empty", "Bogus", ""]), max_size=3),
       pids=st.lists(offsets, max_size=2), duration=offsets)
def test_transaction_admin(topic: str, partition: int, ids: list[str], states: list[str],
                           pids: list[int], duration: int) -> None:
    """DescribeProducers, DescribeTransactions, ListTransactions (KIP-664)."""
    h = harness()
    response = h.call(61, dp0.DescribeProducersRequest(topics=(dp0.TopicRequest(
        name=topic, partition_indexes=(partition,)),)))  # type: ignore[arg-type]
    [answer] = response.topics[0].partitions
    assert answer.error_code != 0 or (topic, partition) in (("t", 0), ("t", 1))
    h.call(65, dtx0.DescribeTransactionsRequest(transactional_ids=tuple(ids)))  # type: ignore[arg-type]
    listed = h.call(66, ltx1.ListTransactionsRequest(
        state_filters=tuple(states), producer_id_filters=tuple(pids),  # type: ignore[arg-type]
        duration_filter=duration))  # type: ignore[arg-type]
    assert set(listed.unknown_state_filters) == {s for s in states if s in ("Bogus", "")}


@SETTINGS
@given(topic=topics, partition=partitions,
       replicas=st.one_of(st.none(), st.lists(st.integers(-3, 2**31 - 1), max_size=4)))
def test_partition_reassignments(topic: str, partition: int, replicas: list[int] | None) -> None:
    """Forwarded to the controller (here the fake one cannot take them: the
    forwarding failure is answered with REQUEST_TIMED_OUT, as when the
    controller is unreachable)."""
    h = harness()
    response = h.call(45, apr1.AlterPartitionReassignmentsRequest(topics=(
        apr1.ReassignableTopic(name=topic, partitions=(apr1.ReassignablePartition(  # type: ignore[arg-type]
            partition_index=partition,  # type: ignore[arg-type]
            replicas=None if replicas is None else tuple(replicas)),)),)))  # type: ignore[arg-type]
    assert response.error_code != 0
    h.call(46, lpr0.ListPartitionReassignmentsRequest(topics=None))


quota_types = st.sampled_from(["user", "client-id", "ip", "bogus", ""])
quota_names = st.one_of(st.none(), st.text(max_size=8))


@SETTINGS
@given(components=st.lists(st.tuples(quota_types, st.integers(-128, 127), quota_names),
                           max_size=4),
       strict=st.booleans(),
       entities=st.lists(st.tuples(quota_types, quota_names), max_size=3),
       key=st.sampled_from(["producer_byte_rate", "request_percentage", "x", ""]),
       value=st.floats(allow_nan=True, allow_infinity=True))
def test_client_quotas(components: list[tuple[str, int, str | None]], strict: bool,
                       entities: list[tuple[str, str | None]], key: str, value: float) -> None:
    """DescribeClientQuotas with any filter is answered (a bad filter with
    INVALID_REQUEST); AlterClientQuotas is forwarded (the fake controller
    cannot take it: REQUEST_TIMED_OUT per entry)."""
    h = harness()
    h.cluster.set_client_quota((("client-id", "app"),), "producer_byte_rate", 1024)
    described = h.call(48, dcq1.DescribeClientQuotasRequest(
        components=tuple(dcq1.ComponentData(entity_type=t, match_type=m, match=n)  # type: ignore[arg-type]
                         for t, m, n in components), strict=strict))
    assert (described.entries is None) == (described.error_code != 0)
    altered = h.call(49, acq1.AlterClientQuotasRequest(entries=(acq1.EntryData(
        entity=tuple(acq1.EntityData(entity_type=t, entity_name=n) for t, n in entities),
        ops=(acq1.OpData(key=key, value=value, remove=False),)),),  # type: ignore[arg-type]
        validate_only=False))
    assert [e.error_code for e in altered.entries] == [7]  # REQUEST_TIMED_OUT


# ------------------------------------------------------ every API, generated

# The tests above hand-pick hostile values for the data path. This one
# draws every field of every other broker API from kio's classes
# (`hostile_requests`), at the lowest and highest version served.
_HAND_PICKED = {PRODUCE_KEY, FETCH_KEY}
_GENERATED = [(key, version)
              for key, (low, high) in sorted(BROKER_API_VERSIONS.items()) if key not in _HAND_PICKED
              for version in sorted({low, high})]

_small = st.sampled_from([-1, 0, 1, 2, 3])
BROKER_VOCABULARY: Vocabulary = {
    TIMEDELTA: st.sampled_from([0, 1, 10]),
    "name": topics, "topic": topics, "topic_name": topics,
    "partition_index": partitions, "partition": partitions, "partition_indexes":
        st.lists(partitions, max_size=3), "partitions": st.lists(partitions, max_size=3),
    "group_id": st.sampled_from(["g", "", "h"]),
    "groups": st.lists(st.sampled_from(["g", "", "h"]), max_size=2),
    "key": st.sampled_from(["g", "", "tx", "t"]),
    "coordinator_keys": st.lists(st.sampled_from(["g", "", "tx"]), max_size=2),
    "member_id": st.sampled_from(["", "m", "unknown"]),
    "group_instance_id": st.one_of(st.none(), st.sampled_from(["i", ""])),
    "generation_id": _small, "member_epoch": st.sampled_from([-2, -1, 0, 1, 2]),
    "transactional_id": st.one_of(st.none(), st.sampled_from(["tx", "", "ty"])),
    "transactional_ids": st.lists(st.sampled_from(["tx", "", "ty"]), max_size=2),
    "producer_id": st.sampled_from([-1, 0, 1, 1000, 2**63 - 1]),
    "producer_epoch": st.sampled_from([-1, 0, 1, 2**15 - 1]),
    "committed_offset": offsets, "offset": offsets,
    "leader_epoch": epochs, "committed_leader_epoch": epochs,
    # Partition counts: each partition is files on disk here, so the draws
    # stay small, plus one above the controller's cap per request.
    "num_partitions": st.sampled_from([-2, -1, 0, 1, 3, MAX_PARTITIONS_PER_BATCH + 1]),
    "count": st.sampled_from([-1, 0, 1, 3, 5, MAX_PARTITIONS_PER_BATCH + 1]),
    "replication_factor": st.sampled_from([-2, -1, 0, 1, 2]),
    # Group timeouts: in and out of the harness's session timeout range
    # (10-1000 ms), and short rebalance timeouts, so that joins reach the
    # rebalance and a join parked on it ends within its call.
    "session_timeout": st.sampled_from([0, 9, 10, 100, 1_000, 1_001, 2**31 - 1]),
    "rebalance_timeout": st.sampled_from([-1, 0, 1, 10]),
    "protocol_type": st.one_of(st.none(), st.sampled_from(["consumer", "", "connect"])),
    "protocol_name": st.one_of(st.none(), st.sampled_from(["range", "", "t"])),
}


@pytest.mark.parametrize(("api_key", "version"), _GENERATED)
@settings(max_examples=int(os.environ.get("RAFTLOG_HOSTILE_EXAMPLES", "15")),
          deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_broker_api_answers_generated_requests(
    api_key: int, version: int, data: st.DataObject
) -> None:
    """Answered with a response of the request's class that encodes: never
    an exception out of the handler (the server would answer that
    UNKNOWN_SERVER_ERROR; here it is a bug)."""
    request_class = schemas(api_key, version).request
    drawn = data.draw(requests_of(request_class, BROKER_VOCABULARY), label="request")
    # KafkaApiError: an error code for the whole request, sent by the server.
    try:
        with contextlib.suppress(KafkaApiError):
            harness().call(api_key, over_the_wire(drawn))
    finally:
        harness().restore_baseline()
