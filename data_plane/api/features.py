"""UpdateFeatures (api key 57; KIP-584, ``kafka-features.sh
upgrade|downgrade|disable``) on the Kafka protocol.

Brokers serve v0-v2 and forward to the active controller at v1, as Kafka's
brokers forward it; the controller listener (`data_plane.controller_api`)
serves v0-v2 too (``--bootstrap-controller``). The decision is the
controller's (`metadata_quorum.controller.feature_control`), all or nothing,
answered once its records are committed.

Versions: v0 says ``allow_downgrade`` where v1+ says ``upgrade_type``
(true is a safe downgrade). v0-v1 answers carry a result per feature (the
request's outcome for each); v2 answers only the top-level error. With an
authorizer, ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
Reading the levels is ApiVersions' job (`metadata_quorum.features.api_features`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from kio.schema.update_features.v1 import request as uf1
from kio.static.primitive import i8, i16

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_quorum.controller.feature_control import (
    FeatureUpdate,
    UpdateFeaturesRequest,
    UpdateFeaturesResult,
    UpgradeType,
)
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

if TYPE_CHECKING:
    from data_plane.api.common import BrokerApiContext

__all__ = ("UPDATE_FEATURES_KEY", "handle_update_features", "update_request",
           "update_response_values")

log = logging.getLogger(__name__)

UPDATE_FEATURES_KEY: Final = 57


def update_request(body: Any) -> UpdateFeaturesRequest:
    """A kio UpdateFeaturesRequest (v0-v2) as the controller's command input."""
    updates = []
    for key in body.feature_updates:
        if hasattr(key, "upgrade_type"):
            upgrade_type = int(key.upgrade_type)
        else:  # v0
            upgrade_type = (UpgradeType.SAFE_DOWNGRADE if key.allow_downgrade
                            else UpgradeType.UPGRADE)
        updates.append(FeatureUpdate(str(key.feature), int(key.max_version_level),
                                     upgrade_type))
    return UpdateFeaturesRequest(tuple(updates),
                                 bool(getattr(body, "validate_only", False)))


def update_response_values(body: Any, result: UpdateFeaturesResult) -> Mapping[str, object]:
    """An UpdateFeaturesResponse body for `build` at any version: the
    outcome at the top, and for each feature asked for (v0-v1)."""
    return {
        "throttle_time": NO_THROTTLE, "error_code": result.error,
        "error_message": result.message,
        "results": [{"feature": str(key.feature), "error_code": result.error,
                     "error_message": result.message} for key in body.feature_updates],
    }


def _controller_request(body: Any) -> uf1.UpdateFeaturesRequest:
    request = update_request(body)
    return uf1.UpdateFeaturesRequest(
        timeout=body.timeout,
        feature_updates=tuple(
            uf1.FeatureUpdateKey(feature=u.name, max_version_level=i16(u.level),
                                 upgrade_type=i8(u.upgrade_type))
            for u in request.updates),
        validate_only=request.validate_only)


async def handle_update_features(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    """UpdateFeatures on a broker: checked against the ACLs, then forwarded."""
    if not api.authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(response_class(request), update_response_values(request, UpdateFeaturesResult(
            ErrorCode.cluster_authorization_failed, "not authorized to ALTER the cluster")))
    response: Any
    try:
        response = await api.metadata.forward(UPDATE_FEATURES_KEY, _controller_request(request))
    except Exception as e:
        log.warning("UpdateFeatures forward failed: %r", e)
        return build(response_class(request), update_response_values(request, UpdateFeaturesResult(
            ErrorCode.request_timed_out,
            "forwarding to the controller failed; the outcome is unknown")))
    outcome = UpdateFeaturesResult(ErrorCode(int(response.error_code)), response.error_message)
    return build(response_class(request), update_response_values(request, outcome))
