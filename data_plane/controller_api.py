"""Kafka-protocol handlers of the controller listener (kio <-> controller types).

Served APIs, one version each (the CLI and the brokers of this project speak
exactly these; ApiVersions tells any other client):

- writes, answered once their records are committed (`ControllerService.submit`):
  CreateTopics v7, CreatePartitions v3, DeleteTopics v6,
  IncrementalAlterConfigs v1, AlterConfigs v2, ElectLeaders v2,
  AlterPartitionReassignments v1, BrokerRegistration v1, BrokerHeartbeat v0,
  AlterPartition v3, AllocateProducerIds v0, AlterClientQuotas v1,
  AlterUserScramCredentials v0, CreateAcls v3, DeleteAcls v3,
  UpdateFeatures v0-v2 (`data_plane.api.features`);
- reads of the committed image: DescribeCluster v0-v2 (v2: fenced brokers
  too, with ``is_fenced``, KIP-1073; the controller endpoint type of
  KIP-919, which admin clients bootstrapped with controllers send, lists
  the quorum's voters, while the broker type lists the brokers, which
  `raftlog cluster describe --bootstrap-controller` reads and Kafka's
  controllers refuse), Metadata v12 (enough
  for an admin client to list and describe topics),
  ListPartitionReassignments v0, DescribeClientQuotas v1 and
  DescribeUserScramCredentials v0 (Kafka's controllers do not serve the
  last one; here `raftlog configs describe --user` works with
  ``--bootstrap-controller`` too) and DescribeAcls v1-v3.

ACL requests are not authorized here: brokers check them before they
forward (`data_plane.api.acls`), and controller listeners are internal.

A controller that is not active answers NOT_CONTROLLER (per topic for
CreateTopics/DeleteTopics, top-level elsewhere), as Kafka's
``ControllerApis`` does; a write whose commit does not come in time answers
REQUEST_TIMED_OUT (its outcome is unknown, as in Kafka). Reads are served by
any controller from its committed image (hot standby).

Only translation lives here; every decision is the controller's.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from kio.schema.allocate_producer_ids.v0 import request as apid_req
from kio.schema.allocate_producer_ids.v0 import response as apid_resp
from kio.schema.alter_client_quotas.v1 import request as acq_req
from kio.schema.alter_client_quotas.v1 import response as acq_resp
from kio.schema.alter_configs.v2 import request as ac_req
from kio.schema.alter_configs.v2 import response as ac_resp
from kio.schema.alter_partition.v3 import request as ap_req
from kio.schema.alter_partition.v3 import response as ap_resp
from kio.schema.alter_partition_reassignments.v1 import request as apr_req
from kio.schema.alter_partition_reassignments.v1 import response as apr_resp
from kio.schema.broker_heartbeat.v0 import request as hb_req
from kio.schema.broker_heartbeat.v0 import response as hb_resp
from kio.schema.broker_registration.v3 import request as reg_req
from kio.schema.create_partitions.v3 import response as cp_resp
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.delete_topics.v6 import request as dt_req
from kio.schema.delete_topics.v6 import response as dt_resp
from kio.schema.describe_client_quotas.v1 import request as dcq_req
from kio.schema.describe_client_quotas.v1 import response as dcq_resp
from kio.schema.describe_cluster.v0 import response as dc_resp
from kio.schema.describe_cluster.v1 import response as dc_resp_v1
from kio.schema.describe_cluster.v2 import response as dc_resp_v2
from kio.schema.describe_configs.v4 import request as dcfg_req
from kio.schema.describe_configs.v4 import response as dcfg_resp
from kio.schema.elect_leaders.v2 import request as el_req
from kio.schema.elect_leaders.v2 import response as el_resp
from kio.schema.incremental_alter_configs.v1 import request as iac_req
from kio.schema.incremental_alter_configs.v1 import response as iac_resp
from kio.schema.list_partition_reassignments.v0 import request as lpr_req
from kio.schema.list_partition_reassignments.v0 import response as lpr_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.schema.unregister_broker.v0 import request as ub_req
from kio.schema.unregister_broker.v0 import response as ub_resp
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta, i64

from data_plane.api.acls import (
    create_failed,
    create_request,
    create_response_values,
    delete_failed,
    delete_request,
    delete_response_values,
)
from data_plane.api.acls import describe_response_values as describe_acls_values
from data_plane.api.build import build, response_class
from data_plane.api.features import update_request, update_response_values
from data_plane.api.scram_credentials import (
    alter_failed,
    alter_request,
    alter_response_values,
    describe_response_values,
)
from data_plane.controller_mutation_quota import (
    STRICT_SINCE,
    ControllerMutationQuotas,
    MutationQuota,
)
from metadata_quorum.client_quotas import FilterComponent
from metadata_quorum.client_quotas import describe_client_quotas as describe_quotas
from metadata_quorum.controller.client_quota_control import (
    AlterClientQuotasRequest,
    ClientQuotaAlteration,
    ClientQuotaAlterationResult,
    ClientQuotaOp,
)
from metadata_quorum.controller.cluster_control import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    UnregisterBrokerRequest,
)
from metadata_quorum.controller.configuration_control import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResult,
    ConfigOpType,
)
from metadata_quorum.controller.feature_control import UpdateFeaturesResult
from metadata_quorum.controller.producer_id_control import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)
from metadata_quorum.controller.quorum_controller import NotControllerError
from metadata_quorum.controller.reassignment import (
    AlterReassignmentsRequest,
    ListReassignmentsRequest,
    ReassignmentResult,
)
from metadata_quorum.controller.reassignment import (
    list_partition_reassignments as ongoing_reassignments,
)
from metadata_quorum.controller.replication_control import (
    AlterPartitionItem,
    AlterPartitionItemResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerState,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    DeletableTopicResult,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersPartitionResult,
    ElectLeadersRequest,
)
from metadata_quorum.image import MetadataImage, TopicImage
from metadata_quorum.records.types import (
    BrokerFeature,
    ConfigResourceType,
    Endpoint,
    LeaderRecoveryState,
    SecurityProtocol,
)
from raftlog.consensus.config import VoterAddress
from raftlog.net import Handler, RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request

from .api.delegation_tokens import controller_token_handlers
from .api.envelope import ENVELOPE_KEY, envelope_handler
from .controller_service import ControllerService

__all__ = ("CONTROLLER_API_VERSIONS", "controller_handlers")

CREATE_TOPICS_KEY: Final = 19
DELETE_TOPICS_KEY: Final = 20
METADATA_KEY: Final = 3
ALTER_PARTITION_KEY: Final = 56
DESCRIBE_CLUSTER_KEY: Final = 60
BROKER_REGISTRATION_KEY: Final = 62
BROKER_HEARTBEAT_KEY: Final = 63
ALLOCATE_PRODUCER_IDS_KEY: Final = 67
DESCRIBE_CONFIGS_KEY: Final = 32
ALTER_CONFIGS_KEY: Final = 33
CREATE_PARTITIONS_KEY: Final = 37
INCREMENTAL_ALTER_CONFIGS_KEY: Final = 44
ELECT_LEADERS_KEY: Final = 43
ALTER_PARTITION_REASSIGNMENTS_KEY: Final = 45
LIST_PARTITION_REASSIGNMENTS_KEY: Final = 46
DESCRIBE_CLIENT_QUOTAS_KEY: Final = 48
ALTER_CLIENT_QUOTAS_KEY: Final = 49
DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: Final = 50
ALTER_USER_SCRAM_CREDENTIALS_KEY: Final = 51
UNREGISTER_BROKER_KEY: Final = 64
UPDATE_FEATURES_KEY: Final = 57
DESCRIBE_ACLS_KEY: Final = 29
CREATE_ACLS_KEY: Final = 30
DELETE_ACLS_KEY: Final = 31

CONTROLLER_API_VERSIONS: Final = {
    CREATE_TOPICS_KEY: (7, 7),
    DELETE_TOPICS_KEY: (6, 6),
    METADATA_KEY: (12, 12),
    ALTER_PARTITION_KEY: (3, 3),
    DESCRIBE_CLUSTER_KEY: (0, 2),
    BROKER_REGISTRATION_KEY: (1, 3),  # v3: PreviousBrokerEpoch (KIP-966)
    BROKER_HEARTBEAT_KEY: (0, 0),
    ALLOCATE_PRODUCER_IDS_KEY: (0, 0),
    DESCRIBE_CONFIGS_KEY: (4, 4),
    ALTER_CONFIGS_KEY: (2, 2),
    CREATE_PARTITIONS_KEY: (3, 3),
    INCREMENTAL_ALTER_CONFIGS_KEY: (1, 1),
    ELECT_LEADERS_KEY: (2, 2),
    ALTER_PARTITION_REASSIGNMENTS_KEY: (1, 1),
    LIST_PARTITION_REASSIGNMENTS_KEY: (0, 0),
    DESCRIBE_CLIENT_QUOTAS_KEY: (1, 1),
    ALTER_CLIENT_QUOTAS_KEY: (1, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS_KEY: (0, 0),
    UNREGISTER_BROKER_KEY: (0, 0),
    UPDATE_FEATURES_KEY: (0, 2),
    DESCRIBE_ACLS_KEY: (1, 3),
    CREATE_ACLS_KEY: (3, 3),
    DELETE_ACLS_KEY: (3, 3),
    # KIP-590: brokers' forwarded delegation-token requests (KIP-48) and
    # topic creations and deletions (KIP-599 quotas), with the client's
    # principal (`data_plane.api.envelope`).
    ENVELOPE_KEY: (0, 0),
}
"""``api_key -> (min, max)`` served on the controller listener besides the Raft APIs."""

_NO_THROTTLE: Final = i32Timedelta.parse(datetime.timedelta(0))
# DescribeCluster's EndpointType (KIP-919): 1 brokers, 2 controllers.
_CONTROLLER_ENDPOINT: Final = 2
# DescribeConfigs: ConfigResource.Type TOPIC, ConfigSource DYNAMIC_TOPIC_CONFIG.
_TOPIC_RESOURCE: Final = 2
_DYNAMIC_TOPIC_CONFIG: Final = 1


async def _write(service: ControllerService, request: Any) -> tuple[Any, ErrorCode]:
    """(response, none) or (None, the error every item gets)."""
    try:
        return await service.submit(request), ErrorCode.none
    except NotControllerError:
        return None, ErrorCode.not_controller
    except TimeoutError:
        return None, ErrorCode.request_timed_out


def controller_handlers(
    service: ControllerService, controllers: Sequence[VoterAddress] = (),
    mutation_quotas: ControllerMutationQuotas | None = None,
) -> dict[int, Handler]:
    """Server handlers for `CONTROLLER_API_VERSIONS`, over ``service``;
    ``controllers``: the quorum's voters (``controller.quorum.voters``), what
    DescribeCluster answers for the controller endpoint type;
    ``mutation_quotas``: the KIP-599 buckets (Kafka's window by default)."""
    quotas = mutation_quotas or ControllerMutationQuotas()

    def quota_for(ctx: RequestContext, api_key: int) -> MutationQuota | None:
        """The client's KIP-599 quota: strict from `STRICT_SINCE`'s
        version (a broker forwards an older client's request at an older
        version, in an Envelope, so ``ctx`` is the client's)."""
        quotas.update(service.controller.committed_image.client_quotas)
        return quotas.quota_for(ctx.client_id or "", int(time.time() * 1000),
                                user=ctx.user, strict=ctx.api_version >= STRICT_SINCE[api_key])

    async def create_topics(ctx: RequestContext, body: Any) -> Any:
        body = convert_request(body, 7)  # v5 from a broker for an older client
        quota = quota_for(ctx, CREATE_TOPICS_KEY)
        request = CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(
                    name=str(t.name),
                    num_partitions=int(t.num_partitions),
                    replication_factor=int(t.replication_factor),
                    assignments=tuple(
                        tuple(int(b) for b in a.broker_ids)
                        for a in sorted(t.assignments, key=lambda a: int(a.partition_index))
                    ),
                    configs=tuple((c.name, c.value) for c in t.configs),
                )
                for t in body.topics
            ),
            validate_only=body.validate_only,
            quota=quota,
        )
        results, error = await _write(service, request)
        if error is not ErrorCode.none:
            results = tuple(
                CreatableTopicResult(name=str(t.name), error=error) for t in body.topics
            )
        return ct_resp.CreateTopicsResponse(
            throttle_time=_throttle(quota),
            topics=tuple(_created(r) for r in results),
        )

    async def create_partitions(ctx: RequestContext, body: Any) -> Any:
        body = convert_request(body, 3)  # v2 from a broker for an older client
        quota = quota_for(ctx, CREATE_PARTITIONS_KEY)
        request = CreatePartitionsRequest(
            topics=tuple(
                CreatePartitionsTopic(
                    name=str(t.name), count=int(t.count),
                    assignments=None if t.assignments is None else tuple(
                        tuple(int(b) for b in a.broker_ids) for a in t.assignments),
                )
                for t in body.topics
            ),
            validate_only=body.validate_only,
            quota=quota,
        )
        results, error = await _write(service, request)
        if error is not ErrorCode.none:
            results = tuple(CreatePartitionsTopicResult(str(t.name), error) for t in body.topics)
        return cp_resp.CreatePartitionsResponse(
            throttle_time=_throttle(quota),
            results=tuple(
                cp_resp.CreatePartitionsTopicResult(
                    name=TopicName(r.name), error_code=r.error, error_message=r.message)
                for r in results
            ),
        )

    async def elect_leaders(_: RequestContext, body: el_req.ElectLeadersRequest) -> Any:
        try:
            election = ElectionType(int(body.election_type))
        except ValueError:
            return _elect_answer(ErrorCode.invalid_request, ())
        partitions = None if body.topic_partitions is None else tuple(
            (str(t.topic), int(p)) for t in body.topic_partitions for p in t.partitions)
        results, error = await _write(service, ElectLeadersRequest(election, partitions))
        if error is not ErrorCode.none:
            # NOT_CONTROLLER top-level: the broker's channel tries the next one.
            return _elect_answer(error, ())
        return _elect_answer(ErrorCode.none, results)

    async def incremental_alter_configs(
        _: RequestContext, body: iac_req.IncrementalAlterConfigsRequest
    ) -> Any:
        answers = await _alter_configs(body, lambda configs: tuple(
            AlterConfigOp(c.name, ConfigOpType(int(c.config_operation)), c.value)
            for c in configs), replace=False)
        return _config_answer(iac_resp.IncrementalAlterConfigsResponse,
                              iac_resp.AlterConfigsResourceResponse, answers)

    async def alter_configs(_: RequestContext, body: ac_req.AlterConfigsRequest) -> Any:
        answers = await _alter_configs(body, lambda configs: tuple(
            AlterConfigOp(c.name, ConfigOpType.SET, c.value) if c.value is not None
            else AlterConfigOp(c.name, ConfigOpType.DELETE)
            for c in configs), replace=True)
        return _config_answer(ac_resp.AlterConfigsResponse,
                              ac_resp.AlterConfigsResourceResponse, answers)

    async def _alter_configs(
        body: Any, ops_of: Callable[[Any], tuple[AlterConfigOp, ...]], *, replace: bool
    ) -> list[tuple[int, str, ErrorCode, str | None]]:
        """IncrementalAlterConfigs or (``replace``) the legacy AlterConfigs:
        (resource type, name, error, message) per resource, in request
        order. A resource that cannot be read (an unknown resource type or
        operation, a missing value) is INVALID_REQUEST; the controller
        answers the rest."""
        resources: list[AlterConfigsResource] = []
        refused: dict[int, str] = {}
        for index, r in enumerate(body.resources):
            try:
                resources.append(AlterConfigsResource(
                    ConfigResourceType(int(r.resource_type)), r.resource_name,
                    ops_of(r.configs), replace=replace))
            except ValueError as e:
                refused[index] = str(e)
        results: tuple[AlterConfigsResourceResult, ...] = ()
        error = ErrorCode.none
        if resources:
            results, error = await _write(
                service, AlterConfigsRequest(tuple(resources), body.validate_only))
        answers = iter(results)
        out: list[tuple[int, str, ErrorCode, str | None]] = []
        for index, r in enumerate(body.resources):
            rtype, name = int(r.resource_type), str(r.resource_name)
            if index in refused:
                out.append((rtype, name, ErrorCode.invalid_request, refused[index]))
            elif error is not ErrorCode.none:
                out.append((rtype, name, error, None))
            else:
                answer = next(answers)
                out.append((rtype, name, answer.error, answer.message))
        return out

    async def delete_topics(ctx: RequestContext, body: Any) -> Any:
        nil = uuid.UUID(int=0)
        if hasattr(body, "topic_names"):
            # v0-v5 (an older client's request, forwarded at v4): names only.
            body = dt_req.DeleteTopicsRequest(
                topics=tuple(dt_req.DeleteTopicState(name=n, topic_id=nil)
                             for n in body.topic_names),
                timeout=body.timeout)
        quota = quota_for(ctx, DELETE_TOPICS_KEY)
        request = DeleteTopicsRequest(
            names=tuple(str(t.name) for t in body.topics if t.name),
            topic_ids=tuple(
                t.topic_id for t in body.topics if not t.name and t.topic_id not in (None, nil)
            ),
            quota=quota,
        )
        results, error = await _write(service, request)
        if error is not ErrorCode.none:
            results = tuple(
                DeletableTopicResult(name=t.name, topic_id=t.topic_id, error=error)
                for t in body.topics
            )
        return dt_resp.DeleteTopicsResponse(
            throttle_time=_throttle(quota),
            responses=tuple(
                dt_resp.DeletableTopicResult(
                    name=TopicName(r.name) if r.name is not None else None,
                    topic_id=r.topic_id or nil,
                    error_code=r.error,
                    error_message=r.message,
                )
                for r in results
            ),
        )

    async def broker_registration(
        _: RequestContext, body: reg_req.BrokerRegistrationRequest
    ) -> Any:
        try:
            features = tuple(
                BrokerFeature(f.name, int(f.min_supported_version), int(f.max_supported_version))
                for f in body.features
            )
            listeners = tuple(
                Endpoint(
                    name=listener.name,
                    host=listener.host,
                    port=int(listener.port),
                    security_protocol=SecurityProtocol(int(listener.security_protocol)),
                )
                for listener in body.listeners
            )
        except (TypeError, ValueError):
            # A feature range no software declares (min above max, below 0),
            # an unknown security protocol, an empty listener name.
            return build(response_class(body), {
                "throttle_time": _NO_THROTTLE,
                "error_code": ErrorCode.invalid_request,
                "broker_epoch": i64(-1),
            })
        request = BrokerRegistrationRequest(
            broker_id=int(body.broker_id),
            incarnation_id=body.incarnation_id or uuid.UUID(int=0),
            listeners=listeners,
            rack=body.rack,
            cluster_id=body.cluster_id,
            # v1-v2 (a broker from before KIP-966) carry none: unclean.
            previous_broker_epoch=int(getattr(body, "previous_broker_epoch", -1)),
            features=features,
        )
        response, error = await _write(service, request)
        if error is not ErrorCode.none:
            response = BrokerRegistrationResponse(error=error)
        assert isinstance(response, BrokerRegistrationResponse)
        return build(response_class(body), {
            "throttle_time": _NO_THROTTLE,
            "error_code": response.error,
            "broker_epoch": i64(response.broker_epoch),
        })

    async def broker_heartbeat(_: RequestContext, body: hb_req.BrokerHeartbeatRequest) -> Any:
        request = BrokerHeartbeatRequest(
            broker_id=int(body.broker_id),
            broker_epoch=int(body.broker_epoch),
            current_metadata_offset=int(body.current_metadata_offset),
            want_fence=body.want_fence,
            want_shutdown=body.want_shut_down,
        )
        response, error = await _write(service, request)
        if error is not ErrorCode.none:
            response = BrokerHeartbeatResponse(error=error)
        assert isinstance(response, BrokerHeartbeatResponse)
        return hb_resp.BrokerHeartbeatResponse(
            throttle_time=_NO_THROTTLE,
            error_code=response.error,
            is_caught_up=response.is_caught_up,
            is_fenced=response.is_fenced,
            should_shut_down=response.should_shut_down,
        )

    async def alter_partition(_: RequestContext, body: ap_req.AlterPartitionRequest) -> Any:
        items: list[AlterPartitionItem] = []
        # A leader recovery state no release defines is INVALID_REQUEST for
        # its partition, as Kafka's ReplicationControlManager answers it.
        unreadable: list[AlterPartitionItemResult] = []
        for topic in body.topics:
            topic_id = topic.topic_id or uuid.UUID(int=0)
            for p in topic.partitions:
                try:
                    recovery = LeaderRecoveryState(int(p.leader_recovery_state))
                except ValueError:
                    unreadable.append(AlterPartitionItemResult(
                        topic_id, int(p.partition_index), ErrorCode.invalid_request))
                    continue
                items.append(AlterPartitionItem(
                    topic_id=topic_id,
                    partition_id=int(p.partition_index),
                    leader_epoch=int(p.leader_epoch),
                    partition_epoch=int(p.partition_epoch),
                    new_isr=tuple(
                        BrokerState(int(b.broker_id), int(b.broker_epoch))
                        for b in p.new_isr_with_epochs
                    ),
                    leader_recovery_state=recovery,
                ))
        request = AlterPartitionRequest(
            broker_id=int(body.broker_id),
            broker_epoch=int(body.broker_epoch),
            partitions=tuple(items),
        )
        response, error = await _write(service, request)
        if error is not ErrorCode.none:
            response = AlterPartitionResponse(error=error)
        assert isinstance(response, AlterPartitionResponse)
        if response.error is ErrorCode.none and unreadable:
            response = AlterPartitionResponse(
                ErrorCode.none, (*response.partitions, *unreadable))
        by_topic: dict[uuid.UUID, list[ap_resp.PartitionData]] = {}
        for item in response.partitions:
            by_topic.setdefault(item.topic_id, []).append(
                ap_resp.PartitionData(
                    partition_index=i32(item.partition_id),
                    error_code=item.error,
                    leader_id=BrokerId(item.leader),
                    leader_epoch=i32(item.leader_epoch),
                    isr=tuple(BrokerId(b) for b in item.isr),
                    leader_recovery_state=i8(int(item.leader_recovery_state)),
                    partition_epoch=i32(item.partition_epoch),
                )
            )
        return ap_resp.AlterPartitionResponse(
            throttle_time=_NO_THROTTLE,
            error_code=response.error,
            topics=tuple(
                ap_resp.TopicData(topic_id=topic_id, partitions=tuple(parts))
                for topic_id, parts in by_topic.items()
            ),
        )

    async def allocate_producer_ids(
        _: RequestContext, body: apid_req.AllocateProducerIdsRequest
    ) -> Any:
        request = AllocateProducerIdsRequest(
            broker_id=int(body.broker_id), broker_epoch=int(body.broker_epoch)
        )
        response, error = await _write(service, request)
        if error is not ErrorCode.none:
            response = AllocateProducerIdsResponse(error=error)
        assert isinstance(response, AllocateProducerIdsResponse)
        return apid_resp.AllocateProducerIdsResponse(
            throttle_time=_NO_THROTTLE,
            error_code=response.error,
            producer_id_start=ProducerId(response.producer_id_start),
            producer_id_len=i32(response.producer_id_len),
        )

    async def describe_cluster(context: RequestContext, body: Any) -> Any:
        image = service.controller.committed_image
        controller_id = BrokerId(_or_minus_one(service.active_controller_id))
        if context.api_version >= 1 and int(body.endpoint_type) == _CONTROLLER_ENDPOINT:
            # KIP-919: an admin client bootstrapped with controllers
            # (--bootstrap-controller) asks them for the controllers. The
            # quorum is static, so they are controller.quorum.voters.
            module: Any = dc_resp_v2 if context.api_version >= 2 else dc_resp_v1
            extra: dict[str, Any] = {"is_fenced": False} if context.api_version >= 2 else {}
            return module.DescribeClusterResponse(
                throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                endpoint_type=i8(_CONTROLLER_ENDPOINT), cluster_id=service.cluster_id,
                controller_id=controller_id,
                brokers=tuple(module.DescribeClusterBroker(
                    broker_id=BrokerId(v.node_id), host=v.host, port=i32(v.port), rack=None,
                    **extra) for v in sorted(controllers, key=lambda v: v.node_id)))
        if context.api_version >= 2:
            include_fenced = bool(body.include_fenced_brokers)
            return dc_resp_v2.DescribeClusterResponse(
                throttle_time=_NO_THROTTLE,
                error_code=ErrorCode.none,
                cluster_id=service.cluster_id,
                controller_id=controller_id,
                brokers=tuple(
                    dc_resp_v2.DescribeClusterBroker(
                        broker_id=BrokerId(broker_id), host=host, port=i32(port), rack=rack,
                        is_fenced=fenced,
                    )
                    for broker_id, host, port, rack, fenced in _broker_addresses(
                        image, include_fenced=include_fenced
                    )
                ),
            )
        module = dc_resp_v1 if context.api_version == 1 else dc_resp
        return module.DescribeClusterResponse(
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            cluster_id=service.cluster_id,
            controller_id=controller_id,
            brokers=tuple(
                module.DescribeClusterBroker(
                    broker_id=BrokerId(broker_id), host=host, port=i32(port), rack=rack
                )
                for broker_id, host, port, rack, _fenced in _broker_addresses(image)
            ),
        )

    async def metadata(_: RequestContext, body: md_req.MetadataRequest) -> Any:
        image = service.controller.committed_image
        if body.topics is None:
            wanted: list[tuple[str, TopicImage | None]] = [
                (t.name, t) for t in sorted(image.topics.values(), key=lambda t: t.name)
            ]
        else:
            wanted = []
            for requested in body.topics:
                name = str(requested.name) if requested.name else ""
                topic = (
                    image.topic_by_name(name)
                    if name
                    else image.topics.get(requested.topic_id or uuid.UUID(int=0))
                )
                wanted.append((name, topic))
        return md_resp.MetadataResponse(
            throttle_time=_NO_THROTTLE,
            brokers=tuple(
                md_resp.MetadataResponseBroker(
                    node_id=BrokerId(broker_id), host=host, port=i32(port), rack=rack
                )
                for broker_id, host, port, rack, _fenced in _broker_addresses(image)
            ),
            cluster_id=service.cluster_id,
            controller_id=BrokerId(_or_minus_one(service.active_controller_id)),
            topics=tuple(_metadata_topic(name, topic) for name, topic in wanted),
        )

    async def describe_configs(_: RequestContext, body: dcfg_req.DescribeConfigsRequest) -> Any:
        # Topics only, with the settings the metadata log holds for them
        # (source DYNAMIC_TOPIC_CONFIG); the effective values, broker
        # defaults included, are a broker's answer (data_plane.api.admin).
        image = service.controller.committed_image
        results = []
        for resource in body.resources:
            name = str(resource.resource_name)
            error = ErrorCode.none
            configs: tuple[dcfg_resp.DescribeConfigsResourceResult, ...] = ()
            if int(resource.resource_type) != _TOPIC_RESOURCE:
                error = ErrorCode.invalid_request
            elif image.topic_by_name(name) is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                keys = resource.configuration_keys
                configs = tuple(
                    dcfg_resp.DescribeConfigsResourceResult(
                        name=k, value=v, read_only=False, config_source=i8(_DYNAMIC_TOPIC_CONFIG),
                        is_sensitive=False, synonyms=(), config_type=i8(0), documentation=None)
                    for k, v in sorted(image.topic_config(name).items())
                    if keys is None or k in keys
                )
            results.append(dcfg_resp.DescribeConfigsResult(
                error_code=error, error_message=None if error is ErrorCode.none else error.name,
                resource_type=resource.resource_type, resource_name=name, configs=configs))
        return dcfg_resp.DescribeConfigsResponse(throttle_time=_NO_THROTTLE,
                                                 results=tuple(results))

    async def alter_partition_reassignments(
        _: RequestContext, body: apr_req.AlterPartitionReassignmentsRequest
    ) -> Any:
        request = AlterReassignmentsRequest(
            partitions=tuple(
                (str(t.name), int(p.partition_index),
                 None if p.replicas is None else tuple(int(b) for b in p.replicas))
                for t in body.topics for p in t.partitions),
            allow_replication_factor_change=bool(body.allow_replication_factor_change),
        )
        results, error = await _write(service, request)
        if error is not ErrorCode.none:
            return _reassign_answer(body, error, ())
        return _reassign_answer(body, ErrorCode.none, results)

    async def list_partition_reassignments(
        _: RequestContext, body: lpr_req.ListPartitionReassignmentsRequest
    ) -> Any:
        topics = None if body.topics is None else tuple(
            (str(t.name), tuple(int(p) for p in t.partition_indexes)) for t in body.topics)
        ongoing = ongoing_reassignments(
            service.controller.committed_image, ListReassignmentsRequest(topics))
        by_topic: dict[str, list[lpr_resp.OngoingPartitionReassignment]] = {}
        for r in ongoing:
            by_topic.setdefault(r.topic, []).append(lpr_resp.OngoingPartitionReassignment(
                partition_index=i32(r.partition),
                replicas=tuple(BrokerId(b) for b in r.replicas),
                adding_replicas=tuple(BrokerId(b) for b in r.adding_replicas),
                removing_replicas=tuple(BrokerId(b) for b in r.removing_replicas)))
        return lpr_resp.ListPartitionReassignmentsResponse(
            throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
            topics=tuple(lpr_resp.OngoingTopicReassignment(name=TopicName(name),
                                                           partitions=tuple(parts))
                         for name, parts in by_topic.items()))

    async def alter_client_quotas(
        _: RequestContext, body: acq_req.AlterClientQuotasRequest
    ) -> Any:
        entries = tuple(
            ClientQuotaAlteration(
                entity=tuple((str(e.entity_type), e.entity_name) for e in entry.entity),
                ops=tuple(ClientQuotaOp(str(op.key), None if op.remove else float(op.value))
                          for op in entry.ops))
            for entry in body.entries)
        results, error = await _write(
            service, AlterClientQuotasRequest(entries, bool(body.validate_only)))
        answers = (results if error is ErrorCode.none else tuple(
            ClientQuotaAlterationResult(entry.entity, error) for entry in entries))
        return acq_resp.AlterClientQuotasResponse(
            throttle_time=_NO_THROTTLE,
            entries=tuple(acq_resp.EntryData(
                error_code=a.error, error_message=a.message,
                entity=tuple(acq_resp.EntityData(entity_type=t, entity_name=n)
                             for t, n in a.entity))
                for a in answers))

    async def describe_client_quotas(
        _: RequestContext, body: dcq_req.DescribeClientQuotasRequest
    ) -> Any:
        result = describe_quotas(
            service.controller.committed_image.client_quotas,
            [FilterComponent(str(c.entity_type), int(c.match_type), c.match)
             for c in body.components],
            bool(body.strict))
        return dcq_resp.DescribeClientQuotasResponse(
            throttle_time=_NO_THROTTLE, error_code=result.error,
            error_message=result.message,
            entries=None if result.error is not ErrorCode.none else tuple(
                dcq_resp.EntryData(
                    entity=tuple(dcq_resp.EntityData(entity_type=t, entity_name=n)
                                 for t, n in entity),
                    values=tuple(dcq_resp.ValueData(key=k, value=f64(v))
                                 for k, v in sorted(values.items())))
                for entity, values in result.entries))

    async def alter_user_scram_credentials(_: RequestContext, body: Any) -> Any:
        """KIP-554: one result per user; the records (derived keys, never the
        salted password) are committed before the answer."""
        results, error = await _write(service, alter_request(body))
        if error is not ErrorCode.none:
            results = alter_failed(body, error)
        return build(response_class(body), alter_response_values(results))

    async def describe_user_scram_credentials(_: RequestContext, body: Any) -> Any:
        return build(response_class(body), describe_response_values(
            service.controller.committed_image.scram_credentials, body))

    async def create_acls(_: RequestContext, body: Any) -> Any:
        """KIP-801: one result per binding, sent once the ACLs are committed."""
        results, error = await _write(service, create_request(body))
        if error is not ErrorCode.none:
            results = create_failed(body, error)
        return build(response_class(body), create_response_values(results))

    async def delete_acls(_: RequestContext, body: Any) -> Any:
        """KIP-801: per filter the ACLs it matched, sent once they are removed."""
        results, error = await _write(service, delete_request(body))
        if error is not ErrorCode.none:
            results = delete_failed(body, error)
        return build(response_class(body), delete_response_values(results))

    async def describe_acls(_: RequestContext, body: Any) -> Any:
        return build(response_class(body), describe_acls_values(
            service.controller.committed_image.acls, body))

    async def unregister_broker(_: RequestContext, body: ub_req.UnregisterBrokerRequest) -> Any:
        """kafka-cluster.sh unregister: the broker's registration goes, its
        leaderships move and it leaves every ISR (one metadata change).
        BROKER_ID_NOT_REGISTERED for an unknown id."""
        result, error = await _write(service, UnregisterBrokerRequest(int(body.broker_id)))
        if error is ErrorCode.none:
            error = result.error
        message = (f"Broker ID {int(body.broker_id)} is not currently registered"
                   if error is ErrorCode.broker_id_not_registered else None)
        return ub_resp.UnregisterBrokerResponse(
            throttle_time=_NO_THROTTLE, error_code=error, error_message=message)

    async def update_features(_: RequestContext, body: Any) -> Any:
        """kafka-features.sh upgrade|downgrade|disable: all or nothing,
        answered once the feature levels are committed."""
        result, error = await _write(service, update_request(body))
        if error is not ErrorCode.none:
            result = UpdateFeaturesResult(error)
        return build(response_class(body), update_response_values(body, result))

    table: dict[int, Callable[[RequestContext, Any], Awaitable[Any]]] = {
        CREATE_TOPICS_KEY: create_topics,
        DELETE_TOPICS_KEY: delete_topics,
        METADATA_KEY: metadata,
        ALTER_PARTITION_KEY: alter_partition,
        DESCRIBE_CLUSTER_KEY: describe_cluster,
        BROKER_REGISTRATION_KEY: broker_registration,
        BROKER_HEARTBEAT_KEY: broker_heartbeat,
        ALLOCATE_PRODUCER_IDS_KEY: allocate_producer_ids,
        DESCRIBE_CONFIGS_KEY: describe_configs,
        ALTER_CONFIGS_KEY: alter_configs,
        CREATE_PARTITIONS_KEY: create_partitions,
        INCREMENTAL_ALTER_CONFIGS_KEY: incremental_alter_configs,
        ELECT_LEADERS_KEY: elect_leaders,
        ALTER_PARTITION_REASSIGNMENTS_KEY: alter_partition_reassignments,
        LIST_PARTITION_REASSIGNMENTS_KEY: list_partition_reassignments,
        DESCRIBE_CLIENT_QUOTAS_KEY: describe_client_quotas,
        ALTER_CLIENT_QUOTAS_KEY: alter_client_quotas,
        DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: describe_user_scram_credentials,
        ALTER_USER_SCRAM_CREDENTIALS_KEY: alter_user_scram_credentials,
        UNREGISTER_BROKER_KEY: unregister_broker,
        UPDATE_FEATURES_KEY: update_features,
        DESCRIBE_ACLS_KEY: describe_acls,
        CREATE_ACLS_KEY: create_acls,
        DELETE_ACLS_KEY: delete_acls,
        # KIP-590: what brokers forward as their client (`data_plane.api.envelope`).
        ENVELOPE_KEY: envelope_handler({
            **controller_token_handlers(lambda request: _write(service, request)),
            CREATE_TOPICS_KEY: create_topics,
            CREATE_PARTITIONS_KEY: create_partitions,
            DELETE_TOPICS_KEY: delete_topics,
        }),
    }
    return dict(table)


def _throttle(quota: MutationQuota | None) -> i32Timedelta:
    if quota is None or not quota.throttle_time_ms:
        return _NO_THROTTLE
    return i32Timedelta.parse(datetime.timedelta(milliseconds=quota.throttle_time_ms))


def _elect_answer(
    error: ErrorCode, results: tuple[ElectLeadersPartitionResult, ...]
) -> el_resp.ElectLeadersResponse:
    """An ElectLeaders response: ``results`` grouped by topic, in their order."""
    by_topic: dict[str, list[el_resp.PartitionResult]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(el_resp.PartitionResult(
            partition_id=i32(r.partition), error_code=r.error, error_message=r.message))
    return el_resp.ElectLeadersResponse(
        throttle_time=_NO_THROTTLE, error_code=error,
        replica_election_results=tuple(
            el_resp.ReplicaElectionResult(topic=TopicName(topic), partition_result=tuple(parts))
            for topic, parts in by_topic.items()),
    )


def _reassign_answer(
    body: apr_req.AlterPartitionReassignmentsRequest, error: ErrorCode,
    results: tuple[ReassignmentResult, ...],
) -> apr_resp.AlterPartitionReassignmentsResponse:
    """An AlterPartitionReassignments response: ``results`` grouped by topic
    in request order, or (``error`` not NONE, the write failed) the top-level
    error with every partition answered with it too."""
    by_topic: dict[str, list[apr_resp.ReassignablePartitionResponse]] = {}
    if error is not ErrorCode.none:
        for t in body.topics:
            by_topic.setdefault(str(t.name), []).extend(
                apr_resp.ReassignablePartitionResponse(
                    partition_index=p.partition_index, error_code=error, error_message=None)
                for p in t.partitions)
    for r in results:
        by_topic.setdefault(r.topic, []).append(apr_resp.ReassignablePartitionResponse(
            partition_index=i32(r.partition), error_code=r.error, error_message=r.message))
    return apr_resp.AlterPartitionReassignmentsResponse(
        throttle_time=_NO_THROTTLE,
        allow_replication_factor_change=body.allow_replication_factor_change,
        error_code=error, error_message=None,
        responses=tuple(
            apr_resp.ReassignableTopicResponse(name=TopicName(name), partitions=tuple(parts))
            for name, parts in by_topic.items()),
    )


def _config_answer(
    response_cls: Any, resource_cls: Any, answers: list[tuple[int, str, ErrorCode, str | None]]
) -> Any:
    """An IncrementalAlterConfigs or AlterConfigs response (the same shape)."""
    return response_cls(
        throttle_time=_NO_THROTTLE,
        responses=tuple(
            resource_cls(error_code=error, error_message=message,
                         resource_type=i8(rtype), resource_name=name)
            for rtype, name, error, message in answers
        ),
    )


def _created(result: CreatableTopicResult) -> ct_resp.CreatableTopicResult:
    return ct_resp.CreatableTopicResult(
        name=TopicName(result.name),
        topic_id=result.topic_id or uuid.UUID(int=0),
        error_code=result.error,
        error_message=result.message,
        num_partitions=i32(result.num_partitions),
        replication_factor=i16(result.replication_factor),
        configs=(),
    )


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


def _broker_addresses(
    image: MetadataImage, *, include_fenced: bool = False
) -> list[tuple[int, str, int, str | None, bool]]:
    """Brokers (unfenced only unless ``include_fenced``) with their first
    listener and fenced state, as Metadata/DescribeCluster list them."""
    result = []
    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        if (broker.fenced and not include_fenced) or not broker.listeners:
            continue
        endpoint = broker.listeners[0]
        result.append((broker_id, endpoint.host, endpoint.port, broker.rack, broker.fenced))
    return result


def _metadata_topic(name: str, topic: TopicImage | None) -> md_resp.MetadataResponseTopic:
    if topic is None:
        return md_resp.MetadataResponseTopic(
            error_code=ErrorCode.unknown_topic_or_partition,
            name=TopicName(name) if name else None,
            topic_id=uuid.UUID(int=0),
            partitions=(),
        )
    return md_resp.MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=TopicName(topic.name),
        topic_id=topic.topic_id,
        is_internal=False,
        partitions=tuple(
            md_resp.MetadataResponsePartition(
                error_code=ErrorCode.none,
                partition_index=i32(index),
                leader_id=BrokerId(partition.leader),
                leader_epoch=i32(partition.leader_epoch),
                replica_nodes=tuple(BrokerId(b) for b in partition.replicas),
                isr_nodes=tuple(BrokerId(b) for b in partition.isr),
                offline_replicas=(),
            )
            for index, partition in sorted(topic.partitions.items())
        ),
    )
