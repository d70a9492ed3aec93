"""InitProducerId (v0-4) for idempotent producers (KIP-98, KIP-360).

Without a transactional id every call gets a fresh producer id at epoch 0
(Kafka's ``TransactionCoordinator.handleInitProducerId`` does the same:
a non-transactional producer that bumps its epoch after an error simply
gets a new id). Ids come from the broker's `ProducerIdManager`. With a
transactional id the request goes to the transaction coordinator
(`TxnCoordinatorRuntime`), which fences an older producer by bumping the
epoch.

With an authorizer (Kafka's ``KafkaApis.handleInitProducerIdRequest``): a
transactional id needs WRITE on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
without one the producer needs IDEMPOTENT_WRITE on the cluster or, since
KIP-679, WRITE on some topic, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging
from typing import Any

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from data_plane.broker.producer_ids import ProducerIdsUnavailableError
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("handle_init_producer_id",)

log = logging.getLogger(__name__)


async def handle_init_producer_id(api: BrokerApiContext, ctx: RequestContext,
                                  request: Any) -> Any:
    if api.authorization is not None:
        refused = _refusal(api, ctx, request.transactional_id)
        if refused is not None:
            return _answer(request, refused)
    if request.transactional_id is not None:
        return await _init_transactional(api, ctx, request)
    try:
        pid = await api.coordinators.producer_ids.generate()
    except ProducerIdsUnavailableError:
        # Kafka's answer while no block is ready; clients retry it.
        return _answer(request, ErrorCode.coordinator_load_in_progress)
    log.info("InitProducerId: producer id %d epoch 0 to client %r (%s)", pid, ctx.client_id,
             ctx.peer)
    return _answer(request, ErrorCode.none, pid, 0)


def _refusal(api: BrokerApiContext, ctx: RequestContext,
             transactional_id: str | None) -> ErrorCode | None:
    if transactional_id is not None:
        if api.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         str(transactional_id)):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if api.authorize(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) \
            or api.authorize_any(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


async def _init_transactional(api: BrokerApiContext, ctx: RequestContext,
                              request: Any) -> Any:
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    pid = int(getattr(request, "producer_id", -1))
    epoch = int(getattr(request, "producer_epoch", -1))
    # KIP-360 (v3+): a producer re-initialising after an error names its
    # current id and epoch.
    expected = (pid, epoch) if pid >= 0 else None
    runtime = api.coordinators.transactions_or_start()
    try:
        response = await runtime.init_producer_id(str(request.transactional_id), timeout_ms,
                                                  expected)
    except ProducerIdsUnavailableError:
        return _answer(request, ErrorCode.coordinator_load_in_progress)
    error = response.error
    log.info("InitProducerId: transactional id %r: %s, producer id %d epoch %d to client %r "
             "(%s)", str(request.transactional_id), ErrorCode(error).name, response.producer_id,
             response.producer_epoch, ctx.client_id, ctx.peer)
    if error == ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch
    return _answer(request, error, response.producer_id, response.producer_epoch)


def _answer(request: Any, error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE, "error_code": error,
        "producer_id": producer_id, "producer_epoch": epoch,
    })
