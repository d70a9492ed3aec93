"""ListConfigResources v0-1 (KIP-1142; v0 is KIP-714's
ListClientMetricsResources) on a broker, through its handler table (each
answer is checked to encode at the request's version): the types, Kafka's
order, an unsupported type, and the cluster ACL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from acl_harness import AclBroker, acl
from kio.schema.list_config_resources.v0 import request as lcr0
from kio.schema.list_config_resources.v1 import request as lcr1
from kio.static.primitive import i8
from single_broker import SingleBroker

from data_plane.kafka_api import BROKER_API_VERSIONS
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from raftlog.net.errors import ErrorCode

LIST_CONFIG_RESOURCES = 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
# SingleBroker's own topics, internal ones included, and the two made here.
TOPICS = [(TOPIC, name) for name in
          ("__consumer_offsets", "__transaction_state", "audit", "orders", "t")]


@pytest.fixture
def broker() -> Iterator[SingleBroker]:
    b = SingleBroker()
    b.cluster.create_topic("orders", 2, 1)
    b.cluster.create_topic("audit", 1, 1)
    b.register_peers()
    yield b
    b.close()


def listed(response: Any) -> list[tuple[int, str]]:
    return [(int(r.resource_type), str(r.resource_name)) for r in response.config_resources]


def ask(broker: SingleBroker, *types: int) -> Any:
    return broker.call(LIST_CONFIG_RESOURCES, lcr1.ListConfigResourcesRequest(
        resource_types=tuple(i8(t) for t in types)))


def test_it_is_advertised_at_kafkas_versions() -> None:
    assert BROKER_API_VERSIONS[LIST_CONFIG_RESOURCES] == (0, 1)


def test_no_types_lists_every_type_in_kafkas_order(broker: SingleBroker) -> None:
    response = ask(broker)
    assert response.error_code == ErrorCode.none
    # No group or client-metrics configs exist, so those types list nothing;
    # brokers on this listener are listed fenced or not (broker 3 is fenced).
    assert listed(response) == [
        (BROKER_LOGGER, "1"), (BROKER_LOGGER, "2"), (BROKER_LOGGER, "3"),
        (BROKER, "1"), (BROKER, "2"), (BROKER, "3"),
        *TOPICS,
    ]


def test_the_types_asked_for_are_the_types_listed(broker: SingleBroker) -> None:
    assert listed(ask(broker, TOPIC)) == TOPICS
    assert listed(ask(broker, TOPIC, BROKER)) == [
        (BROKER, "1"), (BROKER, "2"), (BROKER, "3"), *TOPICS]
    for empty in (GROUP, CLIENT_METRICS):
        response = ask(broker, empty)
        assert response.error_code == ErrorCode.none and listed(response) == []


@pytest.mark.parametrize("bad", [0, 1, 64, -1])
def test_a_type_outside_the_five_is_unsupported_version_for_the_whole_request(
    broker: SingleBroker, bad: int,
) -> None:
    response = ask(broker, TOPIC, bad)
    assert response.error_code == ErrorCode.unsupported_version
    assert listed(response) == []


def test_v0_lists_client_metrics_resources_only(broker: SingleBroker) -> None:
    response = broker.call(LIST_CONFIG_RESOURCES, lcr0.ListConfigResourcesRequest())
    assert response.error_code == ErrorCode.none
    assert response.config_resources == ()


def test_it_needs_describe_configs_on_the_cluster() -> None:
    broker = AclBroker()
    try:
        broker.create_topic("t")
        request = lcr1.ListConfigResourcesRequest(resource_types=(i8(TOPIC),))
        refused = broker.call(LIST_CONFIG_RESOURCES, request)
        assert refused.error_code == ErrorCode.cluster_authorization_failed
        assert refused.config_resources == ()
        # DESCRIBE_CONFIGS on a topic is not enough: the check is on the cluster.
        broker.set_acls(acl("User:alice", AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "t"))
        still = broker.call(LIST_CONFIG_RESOURCES, request)
        assert still.error_code == ErrorCode.cluster_authorization_failed
        broker.set_acls(acl("User:alice", AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                            CLUSTER_NAME))
        allowed = broker.call(LIST_CONFIG_RESOURCES, request)
        assert allowed.error_code == ErrorCode.none
        assert [(int(r.resource_type), str(r.resource_name))
                for r in allowed.config_resources] == [(TOPIC, "t")]
    finally:
        broker.close()
