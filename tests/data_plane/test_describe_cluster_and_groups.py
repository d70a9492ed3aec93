"""DescribeCluster on a broker: v0-2, with KIP-1073's fenced brokers and
KIP-919's endpoint type, and on a controller asked for the controllers;
and DescribeGroups v6 (KIP-1043)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.describe_cluster.v1 import request as dc1
from kio.schema.describe_cluster.v2 import request as dc2
from single_broker import SingleBroker

from raftlog.net.errors import ErrorCode

DESCRIBE_CLUSTER = 60


@pytest.fixture
def broker() -> Iterator[SingleBroker]:
    b = SingleBroker()
    b.register_peers()
    yield b
    b.close()


def brokers(response: Any) -> list[tuple[int, bool]]:
    return [(int(x.broker_id), bool(getattr(x, "is_fenced", False))) for x in response.brokers]


def test_v2_lists_fenced_brokers_only_when_asked(broker: SingleBroker) -> None:
    def ask(include_fenced: bool) -> Any:
        return broker.call(DESCRIBE_CLUSTER, dc2.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=1,  # type: ignore[arg-type]
            include_fenced_brokers=include_fenced))

    live = ask(False)
    assert live.error_code == ErrorCode.none and live.cluster_id == "c"
    assert brokers(live) == [(1, False), (2, False)]
    everyone = ask(True)
    assert brokers(everyone) == [(1, False), (2, False), (3, True)]
    assert [(x.host, int(x.port)) for x in everyone.brokers][2] == ("127.0.0.3", 9092)


def test_v1_lists_the_live_brokers(broker: SingleBroker) -> None:
    response = broker.call(DESCRIBE_CLUSTER, dc1.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1))  # type: ignore[arg-type]
    assert response.error_code == ErrorCode.none
    assert brokers(response) == [(1, False), (2, False)]


@pytest.mark.parametrize("version", [1, 2])
def test_asking_a_broker_for_the_controllers_is_a_mismatched_endpoint_type(
    broker: SingleBroker, version: int,
) -> None:
    module: Any = dc2 if version == 2 else dc1
    extra = {"include_fenced_brokers": False} if version == 2 else {}
    response = broker.call(DESCRIBE_CLUSTER, module.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=2, **extra))
    assert response.error_code == ErrorCode.mismatched_endpoint_type
    assert response.error_message == ("The request was sent to an endpoint of type BROKER, "
                                      "but we wanted an endpoint of type CONTROLLER")
    assert response.brokers == ()


@pytest.mark.parametrize("version", [5, 6])
def test_describe_groups_v6_names_an_unknown_group_not_found(
    broker: SingleBroker, version: int,
) -> None:
    """KIP-1043 (DescribeGroups v6): GROUP_ID_NOT_FOUND with Kafka's message
    where older versions describe a Dead, empty group."""
    module = importlib.import_module(f"kio.schema.describe_groups.v{version}.request")
    response = broker.call(15, module.DescribeGroupsRequest(
        groups=("nobody-home",), include_authorized_operations=False))
    (group,) = response.groups
    assert group.group_state == "Dead" and group.members == ()
    if version >= 6:
        assert group.error_code == ErrorCode.group_id_not_found
        assert group.error_message == "Group nobody-home not found."
    else:
        assert group.error_code == ErrorCode.none


@pytest.mark.parametrize("version", [1, 2])
def test_a_controller_asked_for_the_controllers_lists_the_quorum_voters(version: int) -> None:
    """KIP-919: what an admin client bootstrapped with controllers sends
    first (kafka-metadata-quorum.sh --bootstrap-controller and the like)."""
    import asyncio

    from data_plane.testing.inprocess_controller import InProcessController

    module: Any = dc2 if version == 2 else dc1
    extra = {"include_fenced_brokers": False} if version == 2 else {}

    async def ask() -> Any:
        controller = InProcessController()
        await controller.start()
        try:
            return await controller.call(DESCRIBE_CLUSTER, module.DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=2,  # type: ignore[arg-type]
                **extra))
        finally:
            await controller.stop()

    answer = asyncio.run(ask())
    assert answer.error_code == ErrorCode.none and int(answer.endpoint_type) == 2
    assert [(int(b.broker_id), b.host, int(b.port)) for b in answer.brokers] == [
        (1, "127.0.0.1", 9093)]
    assert int(answer.controller_id) == 1  # the active controller
