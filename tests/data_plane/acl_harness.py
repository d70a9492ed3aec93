"""A broker with the standard authorizer on, for ACL enforcement tests: one
`ReplicaManager` over the fake controller (`FakeMetadataCluster`), its
handler table, and requests made as any principal (`RequestContext.user`)
from a chosen host. ACLs go straight into the fake controller's image."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import tempfile
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kio.serial import entity_reader, entity_writer

from data_plane.api.build import response_class
from data_plane.api.common import BrokerApiContext
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.kafka_api import broker_handlers
from data_plane.security_config import STANDARD_AUTHORIZER
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from metadata_quorum.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from metadata_quorum.image import frozen_mapping
from raftlog.net import NO_RESPONSE, EncodedBody, NoResponse, RequestContext

T = TypeVar("T")
HOST = "10.0.0.7"


def acl(principal: str, operation: AclOperation, resource_type: ResourceType, name: str, *,
        deny: bool = False, pattern: PatternType = PatternType.LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation,
                      AclPermissionType.DENY if deny else AclPermissionType.ALLOW)


class AclBroker:
    """Broker 1 (the leader of every partition) of a fake cluster whose
    brokers 1..``brokers`` are registered; ``User:admin`` is a super user."""

    def __init__(self, brokers: int = 1, *, authorizer: bool = True,
                 allow_if_no_acl: bool = False, config: dict[str, str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.cluster = FakeMetadataCluster()
        for broker_id in range(1, brokers + 1):
            self.cluster.register_broker(broker_id, "127.0.0.1", 9000 + broker_id)
        self.meta = self.cluster.view(1)
        static = {"auto.create.topics.enable": "true", **(config or {})}
        if authorizer:
            static.update({"authorizer.class.name": STANDARD_AUTHORIZER,
                           "super.users": "User:admin",
                           "allow.everyone.if.no.acl.found": str(allow_if_no_acl).lower()})
        self.replicas = ReplicaManager(self.meta, log_dirs=[tempfile.mkdtemp()],
                                       static_config=static)

        async def start() -> None:
            self.replicas.start()
        self.run(start())
        self.api = BrokerApiContext(self.meta, self.replicas, "c")
        self.handlers = broker_handlers(self.api)
        # What reached the controller: (api key, request); and canned
        # answers for what the fake controller does not serve.
        self.forwarded: list[tuple[int, Any]] = []
        self.answers: dict[int, Callable[[Any], Any]] = {}
        serve = self.cluster.forward

        def forward(api_key: int, request: Any) -> Any:
            self.forwarded.append((api_key, request))
            if api_key in self.answers:
                return self.answers[api_key](request)
            return serve(api_key, request)
        self.cluster.forward = forward  # type: ignore[method-assign]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 10))

    def settle(self) -> None:
        """Deliver published images to the broker."""
        self.run(asyncio.sleep(0))
        self.run(asyncio.sleep(0))

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> uuid.UUID:
        self.cluster.create_topic(name, partitions, replication_factor, {"min.insync.replicas": "1"})
        self.settle()
        return self.cluster.image.topic_ids[name]

    def set_acls(self, *bindings: AclBinding) -> None:
        """Replace every ACL of the image (a new metadata image, as a
        replayed AccessControlEntryRecord would make)."""
        acls = {acl_id: StandardAcl(acl_id, b) for b in bindings for acl_id in [uuid.uuid4()]}
        self.cluster._publish(dataclasses.replace(self.cluster.image, acls=frozen_mapping(acls)))
        self.settle()

    def call(self, api_key: int, request: Any, user: str = "alice",
             host: str = HOST) -> Any:
        """The handler's answer as a client reads it off the wire."""
        return self.run(self.answer(api_key, request, user, host))

    async def answer(self, api_key: int, request: Any, user: str = "alice",
                     host: str = HOST) -> Any:
        """`call` from a coroutine running on the broker's loop (`run`)."""
        ctx = RequestContext(api_key, int(request.__version__), 1, "test", (host, 5555),
                             "PLAINTEXT", user=user)
        response = await self.handlers[api_key](ctx, request)
        if response is NO_RESPONSE or isinstance(response, NoResponse):
            return response
        if isinstance(response, EncodedBody):
            data = response.data
        else:
            buffer = io.BytesIO()
            entity_writer(type(response))(buffer, response)
            data = buffer.getvalue()
        decoded, size = entity_reader(response_class(request))(data, 0)
        assert size == len(data)
        return decoded

    def log_end(self, topic: str, partition: int = 0) -> int:
        hosted = self.replicas.get((topic, partition))
        assert hosted is not None
        return hosted.partition.log_end_offset

    def forwarded_keys(self) -> list[int]:
        keys = [key for key, _ in self.forwarded]
        self.forwarded.clear()
        return keys

    def close(self) -> None:
        self.run(self.replicas.close())
        self.loop.close()
