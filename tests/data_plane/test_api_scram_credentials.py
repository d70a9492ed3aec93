"""SCRAM credentials (KIP-554) on a broker's Kafka API: AlterUserScramCredentials
forwarded to the controller (here the fake one, which runs the real
controller command and replays its records), DescribeUserScramCredentials
answered from the broker's metadata image, both called through the broker's
handler table and their answers read back from the wire."""

from __future__ import annotations

import asyncio
import io
import tempfile
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.alter_user_scram_credentials.v0 import request as aus_req
from kio.schema.describe_user_scram_credentials.v0 import request as dus_req
from kio.serial import entity_reader, entity_writer

from data_plane.api.build import response_class
from data_plane.api.common import BrokerApiContext
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.controller_api import CONTROLLER_API_VERSIONS
from data_plane.kafka_api import BROKER_API_VERSIONS, broker_handlers
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.security.scram import credential_from_password, salted_password

T = TypeVar("T")
DESCRIBE, ALTER = 50, 51
SALT = b"pepper-and-salt!"


class Broker:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.controller = FakeMetadataCluster()
        self.controller.register_broker(1, "127.0.0.1", 9)
        meta = self.controller.view(1)
        self.replicas = ReplicaManager(meta, log_dirs=[tempfile.mkdtemp()])
        self.handlers = broker_handlers(BrokerApiContext(meta, self.replicas, "c"))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 10))

    def call(self, api_key: int, request: Any) -> Any:
        """The handler's answer, encoded and decoded as a client would read it."""
        response = self.run(self.handlers[api_key](
            RequestContext(api_key, 0, 1, "test", None, "PLAINTEXT"), request))
        self.run(asyncio.sleep(0))  # deliver any new image to the broker
        buffer = io.BytesIO()
        entity_writer(type(response))(buffer, response)
        decoded, size = entity_reader(response_class(request))(buffer.getvalue(), 0)
        assert size == len(buffer.getvalue())
        return decoded

    def alter(self, *, deletions: tuple[tuple[str, int], ...] = (),
              upsertions: tuple[tuple[str, int, int, str], ...] = ()) -> list[tuple[str, int, str | None]]:
        names = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
        request = aus_req.AlterUserScramCredentialsRequest(
            deletions=tuple(aus_req.ScramCredentialDeletion(name=u, mechanism=m)  # type: ignore[arg-type]
                            for u, m in deletions),
            upsertions=tuple(aus_req.ScramCredentialUpsertion(
                name=u, mechanism=m, iterations=i, salt=SALT,  # type: ignore[arg-type]
                salted_password=salted_password(names.get(m, "SCRAM-SHA-256"), pw, SALT,
                                                min(max(i, 1), 16384)))
                for u, m, i, pw in upsertions))
        response = self.call(ALTER, request)
        return [(r.user, int(r.error_code), r.error_message) for r in response.results]

    def describe(self, users: list[str] | None) -> Any:
        return self.call(DESCRIBE, dus_req.DescribeUserScramCredentialsRequest(
            users=None if users is None else tuple(dus_req.UserName(name=u) for u in users)))

    def close(self) -> None:
        self.run(self.replicas.close())
        self.loop.close()


@pytest.fixture
def broker() -> Iterator[Broker]:
    b = Broker()
    yield b
    b.close()


def infos(result: Any) -> list[tuple[int, int]]:
    return [(int(i.mechanism), int(i.iterations)) for i in result.credential_infos]


def test_both_apis_are_advertised_by_brokers_and_controllers_at_v0() -> None:
    for table in (BROKER_API_VERSIONS, CONTROLLER_API_VERSIONS):
        assert table[DESCRIBE] == (0, 0) and table[ALTER] == (0, 0)


def test_an_alteration_reaches_the_image_and_describe_lists_it(broker: Broker) -> None:
    assert broker.alter(upsertions=(("alice", 1, 8192, "a-secret"), ("alice", 2, 4096, "a-secret"),
                                    ("bob", 2, 4096, "b-secret"))) == [
        ("alice", ErrorCode.none, None), ("bob", ErrorCode.none, None)]
    # What a SASL server will look up: the keys of the password, not the password.
    image = broker.controller.view(1).image
    assert image.scram_credential("alice", "SCRAM-SHA-256") == credential_from_password(
        "SCRAM-SHA-256", "a-secret", 8192, SALT)
    everyone = broker.describe(None)
    assert int(everyone.error_code) == ErrorCode.none
    assert [(r.user, int(r.error_code), infos(r)) for r in everyone.results] == [
        ("alice", ErrorCode.none, [(1, 8192), (2, 4096)]), ("bob", ErrorCode.none, [(2, 4096)])]
    assert broker.describe([]).results == everyone.results  # empty = every user, as in Kafka
    assert broker.alter(deletions=(("alice", 1),)) == [("alice", ErrorCode.none, None)]
    after = broker.describe(["alice"])
    assert [(r.user, infos(r)) for r in after.results] == [("alice", [(2, 4096)])]


def test_describe_names_unknown_and_repeated_users_with_kafkas_errors(broker: Broker) -> None:
    broker.alter(upsertions=(("alice", 1, 4096, "pw"),))
    response = broker.describe(["nobody", "alice", "alice"])
    assert int(response.error_code) == ErrorCode.none
    assert [(r.user, int(r.error_code), r.error_message, infos(r))
            for r in response.results] == [
        ("nobody", ErrorCode.resource_not_found,
         "Attempt to describe a user credential that does not exist: nobody", []),
        ("alice", ErrorCode.duplicate_resource,
         "Cannot describe SCRAM credentials for the same user twice in a single request: alice",
         [])]


def test_the_controllers_refusals_reach_the_client(broker: Broker) -> None:
    assert broker.alter(upsertions=(("alice", 1, 100, "pw"), ("bob", 7, 4096, "pw"),
                                    ("", 1, 4096, "pw"), ("carol", 2, 20000, "pw"))) == [
        ("alice", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("bob", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
        ("carol", ErrorCode.unacceptable_credential, "Too many iterations")]
    assert broker.alter(deletions=(("alice", 1),)) == [
        ("alice", ErrorCode.resource_not_found,
         "Attempt to delete a user credential that does not exist")]
    assert broker.describe(None).results == ()


def test_the_fakes_direct_setter_replays_records_like_the_controller(broker: Broker) -> None:
    """`FakeMetadataCluster.set_scram_credential`, for in-process tests that
    need a user without going through the API."""
    credential = credential_from_password("SCRAM-SHA-512", "pw", 4096, SALT)
    broker.controller.set_scram_credential("dave", "SCRAM-SHA-512", credential)
    broker.run(asyncio.sleep(0))
    assert broker.controller.view(1).image.scram_credential("dave", "SCRAM-SHA-512") == credential
    assert [(r.user, infos(r)) for r in broker.describe(["dave"]).results] == [
        ("dave", [(2, 4096)])]
    broker.controller.set_scram_credential("dave", "SCRAM-SHA-512", None)
    broker.run(asyncio.sleep(0))
    assert broker.describe(None).results == ()


def test_a_forward_that_fails_answers_every_user_request_timed_out(broker: Broker) -> None:
    def unreachable(api_key: int, request: object) -> object:
        raise ConnectionError("controller unreachable")

    broker.controller.forward = unreachable  # type: ignore[method-assign]
    results = broker.alter(deletions=(("alice", 1),),
                           upsertions=(("alice", 2, 4096, "pw"), ("bob", 1, 4096, "pw")))
    assert [(u, e) for u, e, _ in results] == [("alice", ErrorCode.request_timed_out),
                                               ("bob", ErrorCode.request_timed_out)]
    assert all("outcome is unknown" in (m or "") for _, _, m in results)


def test_hostile_alterations_are_answered_per_user_and_leave_a_valid_image() -> None:
    """Tier 1 (STYLE.md 8): whatever a client sends (empty, repeated or
    oversized names, any mechanism byte, any iteration count, any bytes), the
    broker answers one result per user and the image holds only credentials
    a correct controller writes."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    broker = Broker()
    names = st.sampled_from(["alice", "bob", "", "é" * 3, "x" * 40_000])
    mechanisms = st.one_of(st.integers(0, 3), st.integers(-128, 127))
    iterations = st.one_of(st.sampled_from([4095, 4096, 16384, 16385]),
                           st.integers(-(2**31), 2**31 - 1))
    deletion = st.builds(aus_req.ScramCredentialDeletion, name=names, mechanism=mechanisms)
    upsertion = st.builds(aus_req.ScramCredentialUpsertion, name=names, mechanism=mechanisms,
                          iterations=iterations, salt=st.binary(max_size=40),
                          salted_password=st.binary(max_size=80))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(deletion, max_size=4), st.lists(upsertion, max_size=4))
    def check(deletions: list[Any], upsertions: list[Any]) -> None:
        request = aus_req.AlterUserScramCredentialsRequest(
            deletions=tuple(deletions), upsertions=tuple(upsertions))
        response = broker.call(ALTER, request)
        named = list(dict.fromkeys(a.name for a in (*deletions, *upsertions)))
        assert [r.user for r in response.results] == named
        image = broker.controller.view(1).image
        for (user, mechanism), credential in image.scram_credentials.items():
            assert user and mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            assert 4096 <= credential.iterations <= 16384
        described = broker.describe(None)
        assert sorted(r.user for r in described.results) == sorted(
            {user for user, _ in image.scram_credentials})

    try:
        check()
    finally:
        broker.close()
