"""DescribeClientQuotas (v0-1, KIP-546): answered by any broker from its
metadata image, as Kafka's KRaft brokers answer it; with an authorizer it
needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED and
no entries, Kafka's error answer). AlterClientQuotas is forwarded to the
controller (`data_plane.api.admin`)."""

from __future__ import annotations

from typing import Any

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_quorum.client_quotas import FilterComponent, describe_client_quotas
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("handle_describe_client_quotas",)


async def handle_describe_client_quotas(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    if not api.authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": "not authorized to DESCRIBE_CONFIGS the cluster", "entries": None})
    result = describe_client_quotas(
        api.image.client_quotas,
        [FilterComponent(str(c.entity_type), int(c.match_type), c.match)
         for c in request.components],
        bool(request.strict),
    )
    if result.error is not ErrorCode.none:
        return build(response_class(request), {
            "throttle_time": NO_THROTTLE, "error_code": result.error,
            "error_message": result.message, "entries": None})
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None,
        "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
             "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
            for entity, values in result.entries]})
