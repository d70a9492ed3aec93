"""The broker listener's Kafka API: which APIs and versions it serves, and
the handler table for `raftlog.net.KafkaProtocolServer` (issue 5 §2).

The handlers live in `data_plane.api` by area. Versions were chosen to
cover what current clients negotiate (kafka-python 3.x, aiokafka 0.14,
librdkafka 2.x) while only advertising what is really served: Fetch from v4
(librdkafka uses v2 batches only when Fetch >= 4 is advertised) to v16
(topic ids, ReplicaState with broker epoch: our own followers use it);
Produce v3 (the first with v2 batches) to v10 (KIP-951's leader hints);
ListOffsets to v10 (max-timestamp -3, earliest-local -4, latest-tiered -5);
Metadata to v13 (v13, KIP-1102, adds a top-level error code: always NONE
here, as no client is told to rebootstrap); DescribeTopicPartitions v0, Metadata's
paged form for one or all topics (KIP-966, without eligible leader replicas).

InitProducerId (v0-4) serves idempotent producers (`data_plane.api.producer_ids`);
FindCoordinator and the classic group APIs serve consumer groups
(`data_plane.api.coordinator`, `data_plane.api.groups`); the transaction
APIs serve transactional producers and read_committed consumers
(`data_plane.api.txn`; WriteTxnMarkers is broker-to-broker), and
DescribeProducers, DescribeTransactions and ListTransactions inspect them
(`data_plane.api.txn_admin`, KIP-664). CreateTopics,
CreatePartitions, DeleteTopics, IncrementalAlterConfigs and AlterConfigs are
forwarded to the active controller (`data_plane.api.admin`), as are
AlterPartitionReassignments and ListPartitionReassignments (KIP-455) and
AlterClientQuotas (KIP-546) and AlterUserScramCredentials (KIP-554);
DescribeClientQuotas and DescribeUserScramCredentials are answered from the
broker's metadata image; DeleteRecords is served by the partition leaders.
ACLs (KIP-801, `data_plane.api.acls`): CreateAcls and DeleteAcls are
forwarded to the active controller, DescribeAcls is answered from the
broker's metadata image. Delegation tokens (KIP-48,
`data_plane.api.delegation_tokens`): Create, Renew and Expire are forwarded
in an Envelope with the client's principal, Describe is answered from the
image.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from data_plane.api.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from data_plane.api.admin import (
    handle_alter_client_quotas,
    handle_alter_configs,
    handle_alter_partition_reassignments,
    handle_alter_replica_log_dirs,
    handle_alter_user_scram_credentials,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
    handle_describe_configs,
    handle_describe_log_dirs,
    handle_describe_quorum,
    handle_elect_leaders,
    handle_incremental_alter_configs,
    handle_list_config_resources,
    handle_list_partition_reassignments,
    handle_unregister_broker,
)
from data_plane.api.client_quotas import handle_describe_client_quotas
from data_plane.api.common import BrokerApiContext
from data_plane.api.coordinator import handle_find_coordinator
from data_plane.api.delegation_tokens import (
    handle_create_delegation_token,
    handle_describe_delegation_token,
    handle_expire_delegation_token,
    handle_renew_delegation_token,
)
from data_plane.api.features import handle_update_features
from data_plane.api.fetch import handle_fetch
from data_plane.api.groups import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
    handle_delete_groups,
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
    handle_sync_group,
)
from data_plane.api.metadata import (
    handle_describe_cluster,
    handle_describe_topic_partitions,
    handle_metadata,
)
from data_plane.api.offsets import handle_list_offsets, handle_offset_for_leader_epoch
from data_plane.api.produce import handle_produce
from data_plane.api.producer_ids import handle_init_producer_id
from data_plane.api.scram_credentials import handle_describe_user_scram_credentials
from data_plane.api.txn import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_txn_offset_commit,
    handle_write_txn_markers,
)
from data_plane.api.txn_admin import (
    handle_describe_producers,
    handle_describe_transactions,
    handle_list_transactions,
)
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.replica_manager import ReplicaManager
from raftlog.net import Handler, KafkaProtocolServer, RequestContext

__all__ = ("BROKER_API_VERSIONS", "BrokerApiContext", "broker_handlers", "broker_server")

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_FOR_LEADER_EPOCH, CREATE_TOPICS, DELETE_TOPICS = 23, 19, 20
DESCRIBE_CONFIGS, DESCRIBE_CLUSTER = 32, 60
ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 33, 37, 44
DELETE_RECORDS, ELECT_LEADERS, DESCRIBE_LOG_DIRS = 21, 43, 35
ALTER_REPLICA_LOG_DIRS = 34
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
DESCRIBE_QUORUM, UNREGISTER_BROKER = 55, 64
UPDATE_FEATURES = 57
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
INIT_PRODUCER_ID = 22
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 13, 14, 15, 16
DELETE_GROUPS, OFFSET_DELETE = 42, 47
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS = 24, 25, 26, 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
DESCRIBE_TOPIC_PARTITIONS, LIST_CONFIG_RESOURCES = 75, 74
CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN = 38, 39
EXPIRE_DELEGATION_TOKEN, DESCRIBE_DELEGATION_TOKEN = 40, 41

#: api key -> (min, max) version served and advertised.
BROKER_API_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    PRODUCE: (3, 10),
    FETCH: (4, 16),
    LIST_OFFSETS: (1, 10),
    METADATA: (0, 13),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DESCRIBE_CONFIGS: (1, 4),
    LIST_CONFIG_RESOURCES: (0, 1),
    ALTER_CONFIGS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DELETE_RECORDS: (0, 2),
    ELECT_LEADERS: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_QUORUM: (0, 2),
    UNREGISTER_BROKER: (0, 0),
    UPDATE_FEATURES: (0, 2),
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    DESCRIBE_LOG_DIRS: (1, 4),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_CLUSTER: (0, 2),
    INIT_PRODUCER_ID: (0, 4),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    ADD_PARTITIONS_TO_TXN: (0, 4),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
    WRITE_TXN_MARKERS: (1, 1),
    TXN_OFFSET_COMMIT: (0, 3),
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
    # KIP-48 delegation tokens (v0 went in Kafka 4.0).
    CREATE_DELEGATION_TOKEN: (1, 3),
    RENEW_DELEGATION_TOKEN: (1, 2),
    EXPIRE_DELEGATION_TOKEN: (1, 2),
    DESCRIBE_DELEGATION_TOKEN: (1, 3),
}

_HandlerImpl = Callable[[BrokerApiContext, RequestContext, Any], Awaitable[Any]]
_IMPLS: Final[Mapping[int, _HandlerImpl]] = {
    PRODUCE: handle_produce,
    FETCH: handle_fetch,
    LIST_OFFSETS: handle_list_offsets,
    METADATA: handle_metadata,
    DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
    OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    CREATE_TOPICS: handle_create_topics,
    DELETE_TOPICS: handle_delete_topics,
    DESCRIBE_CONFIGS: handle_describe_configs,
    LIST_CONFIG_RESOURCES: handle_list_config_resources,
    ALTER_CONFIGS: handle_alter_configs,
    CREATE_PARTITIONS: handle_create_partitions,
    ELECT_LEADERS: handle_elect_leaders,
    ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
    DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
    DESCRIBE_QUORUM: handle_describe_quorum,
    UNREGISTER_BROKER: handle_unregister_broker,
    UPDATE_FEATURES: handle_update_features,
    CREATE_DELEGATION_TOKEN: handle_create_delegation_token,
    RENEW_DELEGATION_TOKEN: handle_renew_delegation_token,
    EXPIRE_DELEGATION_TOKEN: handle_expire_delegation_token,
    DESCRIBE_DELEGATION_TOKEN: handle_describe_delegation_token,
    DESCRIBE_ACLS: handle_describe_acls,
    CREATE_ACLS: handle_create_acls,
    DELETE_ACLS: handle_delete_acls,
    DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs,
    INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    DELETE_RECORDS: handle_delete_records,
    DESCRIBE_CLUSTER: handle_describe_cluster,
    INIT_PRODUCER_ID: handle_init_producer_id,
    OFFSET_COMMIT: handle_offset_commit,
    OFFSET_FETCH: handle_offset_fetch,
    FIND_COORDINATOR: handle_find_coordinator,
    JOIN_GROUP: handle_join_group,
    HEARTBEAT: handle_heartbeat,
    LEAVE_GROUP: handle_leave_group,
    SYNC_GROUP: handle_sync_group,
    DESCRIBE_GROUPS: handle_describe_groups,
    LIST_GROUPS: handle_list_groups,
    DELETE_GROUPS: handle_delete_groups,
    OFFSET_DELETE: handle_offset_delete,
    ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    END_TXN: handle_end_txn,
    WRITE_TXN_MARKERS: handle_write_txn_markers,
    TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    DESCRIBE_PRODUCERS: handle_describe_producers,
    DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    LIST_TRANSACTIONS: handle_list_transactions,
    CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
}


def broker_handlers(api: BrokerApiContext) -> dict[int, Handler]:
    """The handler table for the broker listener."""
    return {key: functools.partial(impl, api) for key, impl in _IMPLS.items()}


def broker_server(
    metadata: BrokerMetadata,
    replicas: ReplicaManager,
    *,
    cluster_id: str,
    host: str,
    port: int,
    listener_name: str = "PLAINTEXT",
) -> KafkaProtocolServer:
    """A (not yet started) broker listener; ``socket.request.max.bytes`` comes
    from the broker config."""
    api = BrokerApiContext(metadata, replicas, cluster_id, listener_name)
    return KafkaProtocolServer(
        host, port, broker_handlers(api),
        supported=BROKER_API_VERSIONS,
        max_request_bytes=int(replicas.broker_config["socket.request.max.bytes"]),
        listener_name=listener_name,
        request_quota=replicas.request_quota,
    )
