"""ACLs (KIP-801) on a broker's Kafka API: CreateAcls and DeleteAcls forwarded
to the controller (here the fake one, which runs the real controller
commands and replays their records), DescribeAcls answered from the
broker's metadata image, ALTER / DESCRIBE on the cluster checked first.
Called through the broker's handler table at every served version, the
answers read back from the wire."""

from __future__ import annotations

import asyncio
import io
import tempfile
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar

import pytest
from kio.schema.create_acls.v1 import request as ca1
from kio.schema.create_acls.v3 import request as ca3
from kio.schema.delete_acls.v3 import request as da3
from kio.schema.describe_acls.v1 import request as ds1
from kio.schema.describe_acls.v3 import request as ds3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8

from data_plane.api.build import response_class
from data_plane.api.common import BrokerApiContext
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.controller_api import CONTROLLER_API_VERSIONS
from data_plane.kafka_api import BROKER_API_VERSIONS, broker_handlers
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from metadata_quorum.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request

T = TypeVar("T")
DESCRIBE, CREATE, DELETE = 29, 30, 31
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LIT, PRE, ANY, MATCH = (int(PatternType.LITERAL), int(PatternType.PREFIXED),
                        int(PatternType.ANY), int(PatternType.MATCH))
TOPIC, GROUP, CLUSTER = int(ResourceType.TOPIC), int(ResourceType.GROUP), int(ResourceType.CLUSTER)
READ, WRITE, ALTER = int(AclOperation.READ), int(AclOperation.WRITE), int(AclOperation.ALTER)
ALLOW, DENY = int(AclPermissionType.ALLOW), int(AclPermissionType.DENY)


#: The authorizer on, the test's default user (ANONYMOUS) a super user.
SUPER_ANONYMOUS = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}


class Broker:
    def __init__(self, static_config: Mapping[str, str] | None = SUPER_ANONYMOUS) -> None:
        self.loop = asyncio.new_event_loop()
        self.controller = FakeMetadataCluster()
        self.controller.register_broker(1, "127.0.0.1", 9)
        meta = self.controller.view(1)
        self.replicas = ReplicaManager(meta, log_dirs=[tempfile.mkdtemp()],
                                       static_config=static_config)
        self.handlers = broker_handlers(BrokerApiContext(meta, self.replicas, "c"))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 10))

    def call(self, api_key: int, request: Any, user: str = "ANONYMOUS") -> Any:
        """The handler's answer, encoded and decoded as a client would read it."""
        response = self.run(self.handlers[api_key](
            RequestContext(api_key, int(request.__version__), 1, "test", ("10.0.0.5", 5000),
                           "PLAINTEXT", user=user), request))
        self.run(asyncio.sleep(0))  # deliver any new image to the broker
        buffer = io.BytesIO()
        entity_writer(type(response))(buffer, response)
        decoded, size = entity_reader(response_class(request))(buffer.getvalue(), 0)
        assert size == len(buffer.getvalue())
        return decoded

    def create(self, *creations: tuple[int, str, int, str, int, int], version: int = 3,
               user: str = "ANONYMOUS") -> list[tuple[int, str | None]]:
        request = ca3.CreateAclsRequest(creations=tuple(
            ca3.AclCreation(resource_type=i8(kind), resource_name=name,
                            resource_pattern_type=i8(pattern), principal=principal, host="*",
                            operation=i8(op), permission_type=i8(permission))
            for kind, name, pattern, principal, op, permission in creations))
        response = self.call(CREATE, convert_request(request, version), user)
        return [(int(r.error_code), r.error_message) for r in response.results]

    def describe(self, kind: int = int(ResourceType.ANY), name: str | None = None,
                 pattern: int = ANY, principal: str | None = None, version: int = 3,
                 user: str = "ANONYMOUS", operation: int = int(AclOperation.ANY)) -> Any:
        request = ds3.DescribeAclsRequest(
            resource_type_filter=i8(kind), resource_name_filter=name,
            pattern_type_filter=i8(pattern), principal_filter=principal, host_filter=None,
            operation=i8(operation), permission_type=i8(int(AclPermissionType.ANY)))
        return self.call(DESCRIBE, convert_request(request, version), user)

    def delete(self, *filters: da3.DeleteAclsFilter, user: str = "ANONYMOUS") -> Any:
        return self.call(DELETE, da3.DeleteAclsRequest(filters=filters), user)

    def close(self) -> None:
        self.run(self.replicas.close())
        self.loop.close()


def acl_filter(kind: int = int(ResourceType.ANY), name: str | None = None, pattern: int = ANY,
               principal: str | None = None,
               operation: int = int(AclOperation.ANY)) -> da3.DeleteAclsFilter:
    return da3.DeleteAclsFilter(
        resource_type_filter=i8(kind), resource_name_filter=name, pattern_type_filter=i8(pattern),
        principal_filter=principal, host_filter=None, operation=i8(operation),
        permission_type=i8(int(AclPermissionType.ANY)))


def resources(response: Any) -> list[tuple[int, str, int, list[tuple[str, str, int, int]]]]:
    assert int(response.error_code) == ErrorCode.none, response
    return [(int(r.resource_type), r.resource_name, int(r.pattern_type),
             [(a.principal, a.host, int(a.operation), int(a.permission_type)) for a in r.acls])
            for r in response.resources]


@pytest.fixture
def broker() -> Iterator[Broker]:
    b = Broker()
    yield b
    b.close()


OK = (ErrorCode.none, None)


def test_the_three_apis_are_advertised_at_kios_versions() -> None:
    for key in (DESCRIBE, CREATE, DELETE):
        assert BROKER_API_VERSIONS[key] == (1, 3)
    assert CONTROLLER_API_VERSIONS[DESCRIBE] == (1, 3)
    assert CONTROLLER_API_VERSIONS[CREATE] == CONTROLLER_API_VERSIONS[DELETE] == (3, 3)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_created_acls_reach_the_image_and_describe_groups_them(
    broker: Broker, version: int
) -> None:
    assert broker.create((TOPIC, "orders", LIT, "User:alice", READ, ALLOW),
                         (TOPIC, "orders", LIT, "User:bob", WRITE, DENY),
                         (TOPIC, "ord", PRE, "User:alice", READ, ALLOW),
                         (TOPIC, "orders", LIT, "User:alice", READ, ALLOW),  # a repeat
                         version=version) == [OK] * 4
    assert len(broker.controller.view(1).image.acls) == 3
    assert resources(broker.describe(version=version)) == [
        (TOPIC, "orders", LIT, [("User:alice", "*", READ, ALLOW), ("User:bob", "*", WRITE, DENY)]),
        (TOPIC, "ord", PRE, [("User:alice", "*", READ, ALLOW)])]
    # Kafka's filters: MATCH finds every pattern that applies to the name.
    assert [r[:3] for r in resources(broker.describe(TOPIC, "orders", MATCH))] == [
        (TOPIC, "orders", LIT), (TOPIC, "ord", PRE)]
    assert resources(broker.describe(TOPIC, "orders", LIT, principal="User:bob")) == [
        (TOPIC, "orders", LIT, [("User:bob", "*", WRITE, DENY)])]
    assert resources(broker.describe(GROUP)) == []


def test_v1_describe_reads_a_v3_broker() -> None:
    broker = Broker()
    try:
        broker.create((GROUP, "g", LIT, "User:a", READ, ALLOW))
        request = ds1.DescribeAclsRequest(
            resource_type_filter=i8(GROUP), resource_name_filter="g", pattern_type_filter=i8(LIT),
            principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1))
        assert resources(broker.call(DESCRIBE, request)) == [
            (GROUP, "g", LIT, [("User:a", "*", READ, ALLOW)])]
        v1 = ca1.CreateAclsRequest(creations=(ca1.AclCreation(
            resource_type=i8(GROUP), resource_name="h", resource_pattern_type=i8(LIT),
            principal="User:a", host="*", operation=i8(READ), permission_type=i8(ALLOW)),))
        assert int(broker.call(CREATE, v1).results[0].error_code) == ErrorCode.none
    finally:
        broker.close()


def test_the_controllers_refusals_reach_the_client(broker: Broker) -> None:
    assert broker.create((CLUSTER, "x", LIT, "User:a", ALTER, ALLOW),
                         (TOPIC, "", LIT, "User:a", READ, ALLOW),
                         (42, "t", LIT, "User:a", READ, ALLOW),  # a code Kafka does not have
                         (TOPIC, "t", MATCH, "User:a", READ, ALLOW),
                         (TOPIC, "t", LIT, "alice", READ, ALLOW),
                         (TOPIC, "t", LIT, "User:a", READ, ALLOW)) == [
        (ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is "
                                    "kafka-cluster"),
        (ErrorCode.invalid_request, "Invalid empty resource name"),
        (ErrorCode.invalid_request, "Invalid resourceType UNKNOWN"),
        (ErrorCode.invalid_request, "Invalid patternType MATCH"),
        (ErrorCode.invalid_request, "Could not parse principal from `alice` (no colon is "
                                    "present separating the principal type from the "
                                    "principal name)"),
        OK]
    response = broker.describe(operation=0)
    assert (int(response.error_code), response.error_message, response.resources) == (
        ErrorCode.invalid_request, "DescribeAclsRequest contains UNKNOWN elements", ())


def test_delete_answers_each_filter_with_what_it_matched(broker: Broker) -> None:
    broker.create((TOPIC, "orders", LIT, "User:alice", READ, ALLOW),
                  (TOPIC, "ord", PRE, "User:alice", READ, ALLOW),
                  (GROUP, "g", LIT, "User:bob", READ, ALLOW))
    response = broker.delete(acl_filter(TOPIC, "orders", MATCH), acl_filter(principal="User:alice"),
                             acl_filter(pattern=0))
    assert [(int(r.error_code), r.error_message,
             [(m.resource_name, int(m.pattern_type), m.principal, int(m.operation))
              for m in r.matching_acls]) for r in response.filter_results] == [
        (ErrorCode.none, None, [("orders", LIT, "User:alice", READ), ("ord", PRE, "User:alice", READ)]),
        (ErrorCode.none, None, [("orders", LIT, "User:alice", READ), ("ord", PRE, "User:alice", READ)]),
        (ErrorCode.invalid_request, "Unknown patternFilter.", [])]
    assert resources(broker.describe()) == [(GROUP, "g", LIT, [("User:bob", "*", READ, ALLOW)])]


def test_a_forward_that_fails_answers_every_item_request_timed_out(broker: Broker) -> None:
    def unreachable(api_key: int, request: object) -> object:
        raise ConnectionError("controller unreachable")

    broker.controller.forward = unreachable  # type: ignore[method-assign]
    results = broker.create((TOPIC, "a", LIT, "User:a", READ, ALLOW),
                            (TOPIC, "b", LIT, "User:a", READ, ALLOW))
    assert [e for e, _ in results] == [ErrorCode.request_timed_out] * 2
    assert all("outcome is unknown" in (m or "") for _, m in results)
    deleted = broker.delete(acl_filter(), acl_filter(TOPIC))
    assert [int(r.error_code) for r in deleted.filter_results] == [ErrorCode.request_timed_out] * 2


def test_with_an_authorizer_only_alter_on_the_cluster_may_change_acls() -> None:
    """Kafka's AclApis: CreateAcls/DeleteAcls need ALTER on the cluster and
    DescribeAcls DESCRIBE (which ALTER implies); refused, every item (or the
    description) says CLUSTER_AUTHORIZATION_FAILED and nothing is forwarded."""
    broker = Broker({"authorizer.class.name": STANDARD, "super.users": "User:admin"})
    try:
        refused = ErrorCode.cluster_authorization_failed
        assert [e for e, _ in broker.create((TOPIC, "t", LIT, "User:bob", READ, ALLOW),
                                            (TOPIC, "u", LIT, "User:bob", READ, ALLOW),
                                            user="bob")] == [refused, refused]
        assert not broker.controller.view(1).image.acls
        described = broker.describe(user="bob")
        assert (int(described.error_code), described.resources) == (refused, ())
        assert [int(r.error_code) for r in broker.delete(acl_filter(), user="bob").filter_results] \
            == [refused]
        # A super user may; then bob, granted ALTER on the cluster, may too.
        assert broker.create((TOPIC, "t", LIT, "User:carol", READ, ALLOW),
                             (CLUSTER, "kafka-cluster", LIT, "User:bob", ALTER, ALLOW),
                             user="admin") == [OK, OK]
        assert broker.create((TOPIC, "u", LIT, "User:carol", READ, ALLOW), user="bob") == [OK]
        assert len(resources(broker.describe(user="bob"))) == 3  # DESCRIBE: implied by ALTER
        deleted = broker.delete(acl_filter(TOPIC), user="bob")
        assert len(deleted.filter_results[0].matching_acls) == 2
        # carol has READ on a topic, nothing on the cluster.
        assert int(broker.describe(user="carol").error_code) == refused
    finally:
        broker.close()


def test_without_an_authorizer_the_acl_apis_answer_security_disabled() -> None:
    """As Kafka: ACLs a broker would not enforce are not taken."""
    broker = Broker(static_config=None)
    try:
        disabled = (ErrorCode.security_disabled, "No Authorizer is configured.")
        assert broker.create((TOPIC, "t", LIT, "User:x", READ, ALLOW)) == [disabled]
        assert int(broker.describe().error_code) == ErrorCode.security_disabled
        deleted = broker.delete(acl_filter())
        assert [int(r.error_code) for r in deleted.filter_results] == [ErrorCode.security_disabled]
        assert broker.controller.view(1).image.acls == {}
    finally:
        broker.close()


def test_hostile_requests_are_answered_per_item_and_leave_a_valid_image() -> None:
    """Tier 1 (STYLE.md 8): any codes, names and principals a client sends
    get one answer per creation / filter, and the image holds only ACLs
    `validate_new_acl` accepts."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from metadata_quorum.acls import validate_new_acl

    broker = Broker()
    codes = st.one_of(st.integers(0, 8), st.integers(-128, 127))
    names = st.sampled_from(["t", "", "*", "kafka-cluster", "é", "x" * 40_000])
    principals = st.sampled_from(["User:a", "User:*", "a", "", ":"])
    creation = st.builds(ca3.AclCreation, resource_type=codes, resource_name=names,
                         resource_pattern_type=codes, principal=principals,
                         host=st.sampled_from(["*", "", "10.0.0.1"]), operation=codes,
                         permission_type=codes)
    deletion = st.builds(da3.DeleteAclsFilter, resource_type_filter=codes,
                         resource_name_filter=st.none() | names, pattern_type_filter=codes,
                         principal_filter=st.none() | principals, host_filter=st.none(),
                         operation=codes, permission_type=codes)

    @settings(max_examples=150, deadline=None)
    @given(st.lists(creation, max_size=5), st.lists(deletion, max_size=3))
    def check(creations: list[Any], filters: list[Any]) -> None:
        created = broker.call(CREATE, ca3.CreateAclsRequest(creations=tuple(creations)))
        assert len(created.results) == len(creations)
        acls = broker.controller.view(1).image.acls
        assert all(validate_new_acl(a.binding) is None for a in acls.values())
        deleted = broker.call(DELETE, da3.DeleteAclsRequest(filters=tuple(filters)))
        assert len(deleted.filter_results) == len(filters)
        assert int(broker.describe().error_code) == ErrorCode.none

    try:
        check()
    finally:
        broker.close()
