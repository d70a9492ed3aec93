"""The controller: pure commands over the metadata image, and the `QuorumController` facade.

One module per concern, after Kafka's control managers:

- `cluster_control`: broker registration, heartbeats, fencing, controlled
  shutdown (``ClusterControlManager``/``BrokerHeartbeatManager``);
- `replication_control`: CreateTopics, DeleteTopics, AlterPartition and the
  elections broker changes cause (``ReplicationControlManager``), with
  `placement` and `partition_change` as its pure helpers;
- `reassignment`: AlterPartitionReassignments and ListPartitionReassignments
  (KIP-455), finished by the AlterPartition that completes the target;
- `configuration_control`: topic config validation, IncrementalAlterConfigs;
- `client_quota_control`: AlterClientQuotas (KIP-546);
- `scram_control`: AlterUserScramCredentials (KIP-554, ``ScramControlManager``);
- `feature_control`: UpdateFeatures, finalized feature levels
  (``FeatureControlManager``);
- `acl_control`: CreateAcls and DeleteAcls (KIP-801, ``AclControlManager``);
- `delegation_token_control`: Create/Renew/ExpireDelegationToken and the
  expiry sweep (KIP-48, ``DelegationTokenControlManager``);
- `producer_id_control`: producer-id blocks;
- `quorum_controller`: the facade on top of the Raft listener.

Every command is ``f(image, request, ...) -> ControllerResult(records,
response)`` and changes nothing; state changes only when records are
replayed (`metadata_quorum.delta`).
"""

from .acl_control import (
    AclCreationResult,
    CreateAclsRequest,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    create_acls,
    delete_acls,
)
from .client_quota_control import (
    AlterClientQuotasRequest,
    ClientQuotaAlteration,
    ClientQuotaAlterationResult,
    ClientQuotaOp,
    alter_client_quotas,
)
from .cluster_control import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    broker_heartbeat,
    fence_stale_brokers,
    register_broker,
    unregister_broker,
)
from .configuration_control import (
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResult,
    ConfigOpType,
    alter_configs,
)
from .delegation_token_control import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResult,
    DelegationTokenExpiryResult,
    ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest,
    create_delegation_token,
    expire_delegation_token,
    renew_delegation_token,
    sweep_expired_delegation_tokens,
)
from .feature_control import (
    FeatureUpdate,
    UpdateFeaturesRequest,
    UpdateFeaturesResult,
    UpgradeType,
    update_features,
)
from .producer_id_control import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    allocate_producer_ids,
)
from .quorum_controller import (
    CommandFailedError,
    ControllerInvariantError,
    ControllerRequest,
    ControllerRole,
    MetadataLog,
    NotControllerError,
    QuorumController,
    Submission,
)
from .reassignment import (
    AlterReassignmentsRequest,
    ListReassignmentsRequest,
    OngoingReassignment,
    ReassignmentResult,
    alter_partition_reassignments,
    list_partition_reassignments,
)
from .replication_control import (
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
    alter_partition,
    balance_partition_leaders,
    create_partitions,
    create_topics,
    delete_topics,
    elect_leaders,
    elect_unclean_leaders,
)
from .result import ControllerConfig, ControllerResult, DelegationTokenSettings
from .scram_control import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResult,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    alter_user_scram_credentials,
)
from .sessions import BrokerSessions

__all__ = [
    "AclCreationResult",
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterClientQuotasRequest",
    "AlterConfigOp",
    "AlterConfigsRequest",
    "AlterConfigsResource",
    "AlterConfigsResourceResult",
    "AlterPartitionItem",
    "AlterPartitionItemResult",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AlterReassignmentsRequest",
    "AlterUserScramCredentialsRequest",
    "AlterUserScramCredentialsResult",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest",
    "BrokerRegistrationResponse",
    "BrokerSessions",
    "BrokerState",
    "ClientQuotaAlteration",
    "ClientQuotaAlterationResult",
    "ClientQuotaOp",
    "CommandFailedError",
    "ConfigOpType",
    "ControllerConfig",
    "ControllerInvariantError",
    "ControllerRequest",
    "ControllerResult",
    "ControllerRole",
    "CreatableTopic",
    "CreatableTopicResult",
    "CreateAclsRequest",
    "CreateDelegationTokenRequest",
    "CreateDelegationTokenResult",
    "CreatePartitionsRequest",
    "CreatePartitionsTopic",
    "CreatePartitionsTopicResult",
    "CreateTopicsRequest",
    "DelegationTokenExpiryResult",
    "DelegationTokenSettings",
    "DeletableTopicResult",
    "DeleteAclsFilterResult",
    "DeleteAclsRequest",
    "DeleteTopicsRequest",
    "ElectLeadersPartitionResult",
    "ElectLeadersRequest",
    "ElectionType",
    "ExpireDelegationTokenRequest",
    "FeatureUpdate",
    "ListReassignmentsRequest",
    "MetadataLog",
    "NotControllerError",
    "OngoingReassignment",
    "QuorumController",
    "ReassignmentResult",
    "RenewDelegationTokenRequest",
    "ScramCredentialDeletion",
    "ScramCredentialUpsertion",
    "Submission",
    "UnregisterBrokerRequest",
    "UnregisterBrokerResponse",
    "UpdateFeaturesRequest",
    "UpdateFeaturesResult",
    "UpgradeType",
    "allocate_producer_ids",
    "alter_client_quotas",
    "alter_configs",
    "alter_partition",
    "alter_partition_reassignments",
    "alter_user_scram_credentials",
    "balance_partition_leaders",
    "broker_heartbeat",
    "create_acls",
    "create_delegation_token",
    "create_partitions",
    "create_topics",
    "delete_acls",
    "delete_topics",
    "elect_leaders",
    "elect_unclean_leaders",
    "expire_delegation_token",
    "fence_stale_brokers",
    "list_partition_reassignments",
    "register_broker",
    "renew_delegation_token",
    "sweep_expired_delegation_tokens",
    "unregister_broker",
    "update_features",
]
