"""Producer-id blocks for idempotent and transactional producers (KIP-730).

After Kafka's ``ProducerIdControlManager``: a broker asks for a block; the
controller hands out ``[next, next + block size)`` and records the new
boundary in a ProducerIdsRecord, so no id is ever handed out twice, even
across controller failover.
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import ProducerIdsRecord
from raftlog.net.errors import ErrorCode

from .result import ControllerConfig, ControllerResult

__all__ = ["AllocateProducerIdsRequest", "AllocateProducerIdsResponse", "allocate_producer_ids"]

_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    error: ErrorCode
    producer_id_start: int = -1
    producer_id_len: int = 0


def allocate_producer_ids(
    image: MetadataImage, request: AllocateProducerIdsRequest, config: ControllerConfig
) -> ControllerResult[AllocateProducerIdsResponse]:
    """AllocateProducerIds: the next block of ``config.producer_id_block_size`` ids.

    STALE_BROKER_EPOCH if the broker is not registered at that epoch;
    UNKNOWN_SERVER_ERROR once the id space (int64) is exhausted.
    """
    broker = image.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        return ControllerResult((), AllocateProducerIdsResponse(ErrorCode.stale_broker_epoch))
    start = image.next_producer_id
    size = config.producer_id_block_size
    if start > _INT64_MAX - size:
        return ControllerResult((), AllocateProducerIdsResponse(ErrorCode.unknown_server_error))
    record = ProducerIdsRecord(request.broker_id, request.broker_epoch, start + size)
    return ControllerResult((record,), AllocateProducerIdsResponse(ErrorCode.none, start, size))
