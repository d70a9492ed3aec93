"""FindCoordinator (v0-4; v4 batches keys, KIP-699).

Key type 0 (group): the coordinator is the leader of the group's
``__consumer_offsets`` partition (`partition_for_group`). The topic is
created on the first lookup (``offsets.topic.num.partitions``, default 50,
replication factor min(3, live brokers), ``cleanup.policy=compact``), as
Kafka does; until its partition has a leader the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry. Key type 1 (transaction)
is the leader of the transactional id's ``__transaction_state`` partition,
created the same way (``transaction.state.log.num.partitions``, default 50,
compacted).

With an authorizer, a group key needs DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED) and a transaction key DESCRIBE on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each key of
a v4 batch on its own, before anything is looked up or created (Kafka's
``KafkaApis.getCoordinator``).
"""

from __future__ import annotations

from typing import Any

from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE, BrokerApiContext, endpoint_of
from data_plane.groups.partitioning import OFFSETS_TOPIC, partition_for_group
from data_plane.txn.txn_log import TRANSACTION_STATE_TOPIC
from metadata_quorum.acls import AclOperation, ResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode

__all__ = ("handle_find_coordinator",)

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1

_Found = tuple[ErrorCode, str | None, int, str, int]
#: Key type -> (the resource it names, the error when DESCRIBE on it is denied).
_KEY_RESOURCES = {
    KEY_TYPE_GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
    KEY_TYPE_TRANSACTION: (ResourceType.TRANSACTIONAL_ID,
                           ErrorCode.transactional_id_authorization_failed),
}


async def handle_find_coordinator(api: BrokerApiContext, ctx: RequestContext,
                                  request: Any) -> Any:
    key_type = int(getattr(request, "key_type", KEY_TYPE_GROUP))
    checked = api.authorization is not None
    if ctx.api_version >= 4:
        keys = [str(k) for k in request.coordinator_keys]
        coordinators = []
        for key in keys:
            error, message, node, host, port = (
                _find_authorized(api, ctx, key_type, key) if checked
                else _find(api, key_type, key))
            coordinators.append({"key": key, "node_id": node, "host": host, "port": port,
                                 "error_code": error, "error_message": message})
        return build(response_class(request), {"throttle_time": NO_THROTTLE,
                                               "coordinators": coordinators})
    key = str(request.key)
    error, message, node, host, port = (
        _find_authorized(api, ctx, key_type, key) if checked else _find(api, key_type, key))
    return build(response_class(request), {
        "throttle_time": NO_THROTTLE, "error_code": error, "error_message": message,
        "node_id": node, "host": host, "port": port,
    })


def _find_authorized(api: BrokerApiContext, ctx: RequestContext, key_type: int,
                     key: str) -> _Found:
    resource = _KEY_RESOURCES.get(key_type)
    if resource is not None and not api.authorize(ctx, AclOperation.DESCRIBE, resource[0], key):
        return _unavailable(resource[1], None)
    return _find(api, key_type, key)


def _find(api: BrokerApiContext, key_type: int, key: str) -> _Found:
    coordinators = api.coordinators
    if key_type == KEY_TYPE_GROUP:
        name = OFFSETS_TOPIC
    elif key_type == KEY_TYPE_TRANSACTION:
        name = TRANSACTION_STATE_TOPIC
    else:
        return _unavailable(ErrorCode.invalid_request, f"unknown key type {key_type}")
    topic = api.image.topic_by_name(name)
    if topic is None:
        coordinators.ensure_internal_topic(name)
        return _unavailable(ErrorCode.coordinator_not_available, f"creating {name}")
    coordinators.groups_or_start()
    # Both topics hash the key the same way (Utils.abs(hashCode) % partitions).
    partition = partition_for_group(key, len(topic.partitions))
    reg = topic.partitions.get(partition)
    broker = None if reg is None else api.image.brokers.get(reg.leader)
    address = None if broker is None or broker.fenced else endpoint_of(broker, api.listener_name)
    if reg is None or address is None:
        return _unavailable(ErrorCode.coordinator_not_available, f"no leader for {key}")
    return ErrorCode.none, None, reg.leader, address[0], address[1]


def _unavailable(error: ErrorCode, message: str | None) -> _Found:
    return error, message, -1, "", -1
