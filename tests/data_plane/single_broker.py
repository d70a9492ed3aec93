"""A single in-process broker to call Kafka API handlers on directly."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from typing import Any

from kio.serial import entity_reader

from data_plane.api.build import response_class
from data_plane.api.common import BrokerApiContext
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.kafka_api import broker_handlers
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from metadata_quorum.controller.delegation_token_control import DelegationTokenSettings
from raftlog.net import NO_RESPONSE, EncodedBody, RequestContext
from raftlog.net.codec import encode_response

TOKEN_SECRET = "single-broker-token-secret"

__all__ = ("SingleBroker",)


class SingleBroker:
    """One broker's Kafka API handlers over a `FakeMetadataCluster`, on an
    event loop of its own that runs only during `call`. It leads topic
    ``t`` (two partitions, ``min.insync.replicas=1``) and one partition of
    each coordinator topic (so ``offsets.topic.num.partitions`` and
    ``transaction.state.log.num.partitions`` are 1); ``static_config`` is
    the rest of its server.properties."""

    def __init__(self, static_config: Mapping[str, str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self._started: set[asyncio.Task[Any]] = set()
        self.cluster = FakeMetadataCluster()
        meta = self.cluster.view(1)
        self.cluster.register_broker(1, "127.0.0.1", 9)
        self.restore_baseline()
        self.replicas = ReplicaManager(meta, log_dirs=[tempfile.mkdtemp()],
                                       static_config={
            "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
            **(static_config or {})})

        async def start() -> None:
            self.replicas.start()
        self.loop.run_until_complete(start())
        # Delegation tokens on, and the listener SASL_PLAINTEXT for their
        # first check: token requests (as ANONYMOUS) reach the controller's
        # commands through the Envelope.
        self.cluster.delegation_tokens = DelegationTokenSettings(secret_key=TOKEN_SECRET)
        self.api = BrokerApiContext(meta, self.replicas, "c",
                                    delegation_tokens=self.cluster.delegation_tokens,
                                    listener_protocols={"PLAINTEXT": "SASL_PLAINTEXT"})
        self.handlers = broker_handlers(self.api)

    def restore_baseline(self) -> None:
        """Topic ``t`` (two partitions) and the coordinators' topics (one
        partition each), all led here: created if missing (a generated
        DeleteTopics may have removed them)."""
        for name, count, configs in (
                ("t", 2, {"min.insync.replicas": "1"}),
                ("__consumer_offsets", 1, {"cleanup.policy": "compact"}),
                ("__transaction_state", 1, {"cleanup.policy": "compact"})):
            if self.cluster.image.topic_by_name(name) is None:
                self.cluster.create_topic(name, count, 1, configs)

    def register_peers(self) -> None:
        """Register broker 2 (unfenced, 127.0.0.2:9092) and broker 3 (fenced,
        127.0.0.3:9092) beside this one."""
        self.cluster.register_broker(2, "127.0.0.2", 9092)
        self.cluster.register_broker(3, "127.0.0.3", 9092)
        self.cluster.fence_broker(3)

    def call(self, key: int, request: Any) -> Any:
        """``request`` (a kio request) answered by the handler of ``key``,
        within 5 s; the answer is checked to be of the request's response
        class and to encode."""
        return self.loop.run_until_complete(asyncio.wait_for(self._answer(key, request), 5))

    def start(self, key: int, request: Any) -> asyncio.Task[Any]:
        """``request`` handled as a task, so several can wait at once (a
        JoinGroup parked on a rebalance): it runs while `call` or `run_for`
        runs the loop. Its result is checked as `call`'s."""
        task = self.loop.create_task(self._answer(key, request))
        self._started.add(task)
        task.add_done_callback(self._started.discard)
        return task

    def run_for(self, seconds: float) -> None:
        """Run the loop (parked requests, the coordinators' timers) for ``seconds``."""
        self.loop.run_until_complete(asyncio.sleep(seconds))

    async def _answer(self, key: int, request: Any) -> Any:
        ctx = RequestContext(key, int(request.__version__), 1, "fuzz", None, "PLAINTEXT")
        response = await self.handlers[key](ctx, request)
        if response is NO_RESPONSE:
            return response
        if isinstance(response, EncodedBody):
            # A hand-encoded body must be exactly one kio response of the request's version.
            data = response.data
            response, size = entity_reader(response_class(request))(data, 0)
            assert size == len(data)
        assert type(response) is response_class(request)
        encode_response(response, 1)
        return response

    def close(self) -> None:
        """Stop the broker's tasks (and any `start`ed request) and close its loop."""
        for task in list(self._started):
            task.cancel()
        self.loop.run_until_complete(self.replicas.close())
        self.loop.close()
