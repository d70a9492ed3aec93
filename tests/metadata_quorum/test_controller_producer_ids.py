"""controller.producer_id_control: blocks of 1000, never handed out twice."""

from __future__ import annotations

from mq_builders import Ctx

from metadata_quorum.controller import (
    AllocateProducerIdsRequest,
    ControllerResult,
    allocate_producer_ids,
)
from metadata_quorum.records import ProducerIdsRecord
from raftlog.net.errors import ErrorCode


def test_consecutive_blocks_of_1000() -> None:
    ctx = Ctx()
    epoch = ctx.register(1)
    starts = []
    for _ in range(3):
        result = allocate_producer_ids(ctx.image, AllocateProducerIdsRequest(1, epoch), ctx.config)
        assert result.response.error is ErrorCode.none and result.response.producer_id_len == 1000
        starts.append(result.response.producer_id_start)
        assert result.records == (ProducerIdsRecord(1, epoch, starts[-1] + 1000),)
        ctx.run(result)
    assert starts == [0, 1000, 2000]


def test_stale_or_unknown_broker_epoch() -> None:
    ctx = Ctx()
    epoch = ctx.register(1)
    for request in (AllocateProducerIdsRequest(1, epoch + 1), AllocateProducerIdsRequest(2, 0)):
        result = allocate_producer_ids(ctx.image, request, ctx.config)
        assert result.response.error is ErrorCode.stale_broker_epoch and result.records == ()


def test_exhausted_id_space() -> None:
    ctx = Ctx()
    epoch = ctx.register(1)
    ctx.run(ControllerResult((ProducerIdsRecord(-1, -1, (1 << 63) - 500),), None))
    result = allocate_producer_ids(ctx.image, AllocateProducerIdsRequest(1, epoch), ctx.config)
    assert result.response.error is ErrorCode.unknown_server_error
