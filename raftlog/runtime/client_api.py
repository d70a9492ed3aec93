"""The quorum node's client API: Produce (api key 0) to ``__cluster_metadata-0``.

Choice: a Kafka Produce request rather than a private API, so the request a
client sends is a standard one (any Kafka client library can build it) and
the answer carries Kafka's own leader hint. Rules:

- exactly the topic ``__cluster_metadata``, partition 0 (anything else:
  UNKNOWN_TOPIC_OR_PARTITION for that partition);
- ``acks`` must be -1 or 1; both mean "answer once committed" (a Raft log
  has no weaker acknowledgement); ``acks=0`` is INVALID_REQUIRED_ACKS,
  because Kafka sends no response for it and this API always does;
- the records are whole v2 batches (CRC checked); each record's value is
  one proposed value (keys and headers are ignored; a null value is b"");
- success: ``base_offset`` is the offset of the first value; all values of
  one request are contiguous;
- not the leader, or the proposal was overwritten by another leader's entry
  (definitely not committed): NOT_LEADER_OR_FOLLOWER with KIP-951's
  ``current_leader`` and the leader's endpoint in ``node_endpoints`` (v10+);
- outcome unknown (no commit within the request's ``timeout``, or a snapshot
  replaced the offset): REQUEST_TIMED_OUT, which a client must treat as
  indefinite (KAFKA-13574);
- corrupt batches: CORRUPT_MESSAGE.

Served versions: 3 to 12 (v13 names topics by id only).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.produce.v12 import response as produce_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64
from kio.static.protocol import ResponsePayload

from raftlog.consensus.errors import NotLeaderError
from raftlog.net import Handler, RequestContext
from raftlog.records import RecordError, decode_records, iter_batches
from raftlog.runtime import wire
from raftlog.runtime.driver import (
    DriverStoppedError,
    ProposalLostError,
    ProposalOutcomeUnknownError,
    RaftDriver,
)

__all__ = ("PRODUCE_KEY", "PRODUCE_VERSIONS", "produce_handler")

log = logging.getLogger(__name__)

PRODUCE_KEY: Final = 0
PRODUCE_VERSIONS: Final = (3, 12)
_NO_HINT: Final = produce_resp.LeaderIdAndEpoch()  # immutable: shared by every answer


def produce_handler(driver: RaftDriver, endpoints: Mapping[int, wire.Endpoint]) -> Handler:
    """The Produce handler proposing to ``driver`` (see module doc)."""

    async def handle(context: RequestContext, body: Any) -> ResponsePayload:
        topics: list[produce_resp.TopicProduceResponse] = []
        leader_hint: set[int] = set()
        for topic in body.topic_data:
            partitions = []
            for data in topic.partition_data:
                result = await _produce_one(driver, body, topic.name, data)
                partitions.append(result)
                if result.current_leader.leader_id >= 0:
                    leader_hint.add(int(result.current_leader.leader_id))
            topics.append(
                produce_resp.TopicProduceResponse(
                    name=TopicName(topic.name), partition_responses=tuple(partitions)
                )
            )
        response = produce_resp.ProduceResponse(
            responses=tuple(topics),
            node_endpoints=tuple(
                produce_resp.NodeEndpoint(
                    node_id=BrokerId(e.node_id), host=e.host, port=i32(e.port), rack=None
                )
                for node_id, e in sorted(endpoints.items())
                if node_id in leader_hint
            ),
        )
        return wire.convert_response(response, context.api_version)

    return handle


async def _produce_one(
    driver: RaftDriver, body: Any, topic: str, data: Any
) -> produce_resp.PartitionProduceResponse:
    def answer(
        error: ErrorCode, base_offset: int = -1, message: str | None = None
    ) -> produce_resp.PartitionProduceResponse:
        hint = _NO_HINT
        if error is ErrorCode.not_leader_or_follower:
            leader = driver.leader
            hint = produce_resp.LeaderIdAndEpoch(
                leader_id=BrokerId(-1 if leader.leader_id is None else leader.leader_id),
                leader_epoch=i32(leader.epoch),
            )
        return produce_resp.PartitionProduceResponse(
            index=data.index,
            error_code=error,
            base_offset=i64(base_offset),
            log_start_offset=i64(-1),
            record_errors=(),
            error_message=message,
            current_leader=hint,
        )

    if topic != wire.METADATA_TOPIC or data.index != wire.METADATA_PARTITION:
        return answer(ErrorCode.unknown_topic_or_partition)
    if body.acks not in (-1, 1):
        return answer(ErrorCode.invalid_required_acks)
    try:
        records = bytes(data.records or b"")
        # iter_batches checks each batch's CRC; decoding need not again.
        values = [
            r.value or b""
            for _, pos in iter_batches(records)
            for r in decode_records(records, pos=pos, validate_crc=False)
        ]
    except RecordError as exc:
        return answer(ErrorCode.corrupt_message, message=str(exc))
    if not values:
        return answer(ErrorCode.invalid_record, message="no records")
    timeout_s = _seconds(body.timeout)
    try:
        async with asyncio.timeout(timeout_s):
            last = await driver.propose(values)
    except (NotLeaderError, ProposalLostError) as exc:
        return answer(ErrorCode.not_leader_or_follower, message=str(exc))
    except (TimeoutError, ProposalOutcomeUnknownError) as exc:
        return answer(ErrorCode.request_timed_out, message=str(exc) or "commit timed out")
    except DriverStoppedError as exc:
        return answer(ErrorCode.broker_not_available, message=str(exc))
    return answer(ErrorCode.none, base_offset=last - len(values) + 1)


def _seconds(timeout: datetime.timedelta) -> float:
    seconds = timeout.total_seconds()
    return seconds if seconds > 0 else 30.0
