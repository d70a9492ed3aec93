"""The controller listener's Envelope (KIP-590, `data_plane.api.envelope`)
around topic creations: the inner version reaches the handler (it decides
whether the mutation quota is strict), the answer goes back at that version,
and an answer that is NOT_CONTROLLER throughout becomes the Envelope's own
error, so that the broker's channel tries the next controller."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

from kio.schema.create_topics.v5 import request as ct5_req
from kio.schema.create_topics.v5 import response as ct5_resp
from kio.schema.create_topics.v7 import response as ct7_resp
from kio.schema.envelope.v0 import request as envelope_req
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from data_plane.api.envelope import encode_principal, envelope_handler
from data_plane.broker.controller_channel import is_not_controller
from raftlog.net import RequestContext
from raftlog.net.codec import decode_response, encode_request
from raftlog.net.errors import ErrorCode

BROKER = RequestContext(api_key=58, api_version=0, correlation_id=7, client_id="broker-1",
                        peer=("127.0.0.1", 5555), listener_name="CONTROLLER", user="broker")


def create_v5(*names: str) -> ct5_req.CreateTopicsRequest:
    return ct5_req.CreateTopicsRequest(
        topics=tuple(ct5_req.CreatableTopic(
            name=TopicName(n), num_partitions=i32(1), replication_factor=i16(1),
            assignments=(), configs=()) for n in names),
        timeout=datetime.timedelta(seconds=5), validate_only=False)


def wrapped(inner: Any) -> envelope_req.EnvelopeRequest:
    return envelope_req.EnvelopeRequest(
        request_data=encode_request(inner, 41, "old-client")[4:],
        request_principal=encode_principal("User:carol", False),
        client_host_address=bytes([127, 0, 0, 1]))


def answer_v7(error: ErrorCode) -> Any:
    async def handler(ctx: RequestContext, body: Any) -> Any:
        seen.append(ctx)
        return ct7_resp.CreateTopicsResponse(
            throttle_time=datetime.timedelta(milliseconds=250),
            topics=tuple(ct7_resp.CreatableTopicResult(
                name=t.name, topic_id=uuid.UUID(int=0), error_code=error, error_message=None,
                topic_config_error_code=ErrorCode.none, num_partitions=i32(1),
                replication_factor=i16(1), configs=()) for t in body.topics))
    return handler


seen: list[RequestContext] = []


def test_the_inner_version_reaches_the_handler_and_the_answer_goes_back_at_it() -> None:
    seen.clear()
    answer = asyncio.run(envelope_handler({19: answer_v7(ErrorCode.none)})(
        BROKER, wrapped(create_v5("a", "b"))))
    assert answer.error_code == ErrorCode.none
    [ctx] = seen
    assert (ctx.api_version, ctx.client_id, ctx.user) == (5, "old-client", "carol")
    correlation, inner = decode_response(answer.response_data, ct5_resp.CreateTopicsResponse)
    assert correlation == 41
    assert [str(t.name) for t in inner.topics] == ["a", "b"]
    assert inner.throttle_time == datetime.timedelta(milliseconds=250)


def test_not_controller_throughout_is_the_envelopes_error() -> None:
    handler = envelope_handler({19: answer_v7(ErrorCode.not_controller)})
    answer = asyncio.run(handler(BROKER, wrapped(create_v5("a", "b"))))
    assert answer.error_code == ErrorCode.not_controller and answer.response_data is None
    assert is_not_controller(answer)  # the broker's channel tries the next controller
    # Answered for some topics: the answer itself.
    mixed = envelope_handler({19: answer_v7(ErrorCode.topic_already_exists)})
    assert asyncio.run(mixed(BROKER, wrapped(create_v5("a")))).error_code == ErrorCode.none
