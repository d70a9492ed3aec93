"""Authorizing a controller's requests against the ACLs, as Kafka's
ControllerApis does (KIP-801), when ``authorizer.class.name`` is set.

What each request needs, on the cluster resource unless said otherwise:

- the quorum's own requests (Vote, BeginQuorumEpoch, EndQuorumEpoch,
  Fetch, FetchSnapshot) and the brokers' (BrokerRegistration,
  BrokerHeartbeat, AlterPartition, AllocateProducerIds): CLUSTER_ACTION,
  so every node's principal on the controller listener must be a super
  user (``User:ANONYMOUS`` when the listener is PLAINTEXT, as in Kafka);
- DescribeQuorum, DescribeAcls, DescribeUserScramCredentials and
  ListPartitionReassignments: DESCRIBE; DescribeClientQuotas:
  DESCRIBE_CONFIGS;
- the admin requests a broker forwards or an admin client sends with
  ``--bootstrap-controller`` (CreateTopics, DeleteTopics, CreatePartitions,
  AlterConfigs, IncrementalAlterConfigs, ElectLeaders, the reassignments,
  AlterClientQuotas, AlterUserScramCredentials, CreateAcls, DeleteAcls,
  UnregisterBroker, UpdateFeatures): what a broker checks for them. The broker's own
  handlers (`data_plane.api.admin`, `data_plane.api.acls`) run here, with
  "forwarding" that calls the controller's handler in place: one set of
  rules for both roles, and the same per-item answers;
- DescribeConfigs: DESCRIBE_CONFIGS per resource; Metadata: DESCRIBE per
  topic (others are left out, or refused when named).

A broker forwards as itself, so the checks a forwarded request's client
needs were made on the broker; the controller sees the broker's principal,
a super user. The delegation-token requests, CreateTopics, CreatePartitions
and DeleteTopics come in an Envelope (KIP-590) that also carries the
client's principal and client id, which the token commands and the
mutation quotas need (`data_plane.api.envelope`); the Envelope itself
needs CLUSTER_ACTION. The ACLs are the controller's committed image's.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from data_plane.api import acls as acl_api
from data_plane.api import admin
from data_plane.api import features as features_api
from data_plane.api.authorization import AclAuthorization
from data_plane.api.envelope import ENVELOPE_KEY, envelope_handler
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from raftlog.net import Handler, KafkaApiError, RequestContext
from raftlog.net.errors import ErrorCode

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage

__all__ = ("authorize_controller_handlers",)

FETCH, METADATA, DESCRIBE_CONFIGS = 1, 3, 32
DESCRIBE_ACLS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_SCRAM = 29, 48, 50
DESCRIBE_QUORUM, LIST_REASSIGNMENTS = 55, 46

#: Requests only nodes send: CLUSTER_ACTION on the cluster.
CLUSTER_ACTION_KEYS: Final = frozenset({
    FETCH, 52, 53, 54, 59,  # Fetch, Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot
    56, 62, 63, 67,  # AlterPartition, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds
    58,  # Envelope: a broker forwarding a client's request as that client
})
#: Describe requests with a top-level error code: the operation they need.
DESCRIBE_KEYS: Final = {
    DESCRIBE_QUORUM: AclOperation.DESCRIBE,
    DESCRIBE_ACLS: AclOperation.DESCRIBE,
    DESCRIBE_SCRAM: AclOperation.DESCRIBE,
    DESCRIBE_CLIENT_QUOTAS: AclOperation.DESCRIBE_CONFIGS,
}
#: Admin requests checked by the broker's own handler (api key -> handler).
BROKER_CHECKED: Final[Mapping[int, Callable[..., Awaitable[Any]]]] = {
    19: admin.handle_create_topics,
    20: admin.handle_delete_topics,
    33: admin.handle_alter_configs,
    37: admin.handle_create_partitions,
    43: admin.handle_elect_leaders,
    44: admin.handle_incremental_alter_configs,
    45: admin.handle_alter_partition_reassignments,
    LIST_REASSIGNMENTS: admin.handle_list_partition_reassignments,
    49: admin.handle_alter_client_quotas,
    51: admin.handle_alter_user_scram_credentials,
    64: admin.handle_unregister_broker,
    57: features_api.handle_update_features,
    30: acl_api.handle_create_acls,
    31: acl_api.handle_delete_acls,
}


def authorize_controller_handlers(
    handlers: Mapping[int, Handler], authorization: AclAuthorization,
    image: Callable[[], MetadataImage],
) -> dict[int, Handler]:
    """``handlers`` (a controller's: the quorum's and `controller_api`'s),
    each behind the check Kafka's controller makes for it."""
    out = dict(handlers)
    for key, handler in handlers.items():
        if key in CLUSTER_ACTION_KEYS:
            out[key] = _cluster_gate(handler, authorization, image, AclOperation.CLUSTER_ACTION)
        elif key in DESCRIBE_KEYS:
            out[key] = _cluster_gate(handler, authorization, image, DESCRIBE_KEYS[key])
        elif key in BROKER_CHECKED:
            out[key] = functools.partial(_broker_checked, BROKER_CHECKED[key], key, handler,
                                         authorization, image)
    if DESCRIBE_CONFIGS in handlers:
        out[DESCRIBE_CONFIGS] = functools.partial(_describe_configs, handlers[DESCRIBE_CONFIGS],
                                                  authorization, image)
    if METADATA in handlers:
        out[METADATA] = functools.partial(_metadata, handlers[METADATA], authorization, image)
    return out


def _cluster_gate(handler: Handler, authorization: AclAuthorization,
                  image: Callable[[], MetadataImage], operation: AclOperation) -> Handler:
    async def gated(ctx: RequestContext, body: Any) -> Any:
        if not authorization.authorize(image(), ctx, operation, ResourceType.CLUSTER,
                                       CLUSTER_NAME):
            raise KafkaApiError(ErrorCode.cluster_authorization_failed,
                                f"not authorized to {operation.name} the cluster")
        return await handler(ctx, body)

    return gated


class _Forwarder:
    """What the broker's handlers call to forward: the controller's own
    handler for the same request, in place."""

    def __init__(self, key: int, handler: Handler, ctx: RequestContext,
                 image: Callable[[], MetadataImage]) -> None:
        self._key, self._handler, self._ctx, self._image = key, handler, ctx, image

    @property
    def image(self) -> MetadataImage:
        return self._image()

    async def forward(self, api_key: int, request: Any) -> Any:
        if api_key == ENVELOPE_KEY:  # as the client (`data_plane.api.envelope`): it is
            return await envelope_handler({self._key: self._handler})(self._ctx, request)
        assert api_key == self._key, (api_key, self._key)
        return await self._handler(self._ctx, request)


@dataclasses.dataclass(frozen=True)
class _ControllerApi:
    """The part of `BrokerApiContext` the admin handlers use, for a controller."""

    authorization: AclAuthorization
    metadata: _Forwarder
    keystores: None = None  # a broker's keystore checks are for the broker named

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        return self.authorization.authorize(self.image, context, operation, resource_type, name)

    def authorize_any(self, context: RequestContext, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        return self.authorization.authorize_any(self.image, context, operation, resource_type)


async def _broker_checked(check: Callable[..., Awaitable[Any]], key: int, handler: Handler,
                          authorization: AclAuthorization, image: Callable[[], MetadataImage],
                          ctx: RequestContext, body: Any) -> Any:
    api = _ControllerApi(authorization, _Forwarder(key, handler, ctx, image))
    return await check(api, ctx, body)


async def _describe_configs(handler: Handler, authorization: AclAuthorization,
                            image: Callable[[], MetadataImage], ctx: RequestContext,
                            body: Any) -> Any:
    # The broker's check reads only what _ControllerApi has.
    api: Any = _ControllerApi(authorization, _Forwarder(DESCRIBE_CONFIGS, handler, ctx, image))
    answer: Any = await handler(ctx, body)
    results = []
    for result in answer.results:
        error = admin._config_access_error(api, ctx, AclOperation.DESCRIBE_CONFIGS,
                                           int(result.resource_type), str(result.resource_name))
        if error is not None:
            result = dataclasses.replace(result, error_code=error, configs=(),
                                         error_message="not authorized to DESCRIBE_CONFIGS "
                                         + admin._config_resource_text(
                                             int(result.resource_type),
                                             str(result.resource_name)))
        results.append(result)
    return dataclasses.replace(answer, results=tuple(results))


async def _metadata(handler: Handler, authorization: AclAuthorization,
                    image: Callable[[], MetadataImage], ctx: RequestContext, body: Any) -> Any:
    answer: Any = await handler(ctx, body)
    current = image()
    topics = []
    for topic in answer.topics:
        if authorization.authorize(current, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                   str(topic.name)):
            topics.append(topic)
        elif body.topics is not None:  # named: refused, not hidden
            topics.append(dataclasses.replace(
                topic, error_code=ErrorCode.topic_authorization_failed, partitions=(),
                topic_id=uuid.UUID(int=0)))
    return dataclasses.replace(answer, topics=tuple(topics))
