"""N brokers in one process on loopback, over `FakeMetadataCluster`.

Each broker is a real `ReplicaManager` with segment logs in a temporary
directory, a `ReplicaFetcherManager` and a `KafkaProtocolServer` with the
broker handlers on an ephemeral port, so real Kafka clients can connect.
`ClusterThread` runs the whole cluster on an event loop in a background
thread, for blocking clients (kafka-python, confluent-kafka).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from data_plane.broker.fetcher import ReplicaFetcherManager
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.kafka_api import broker_server
from data_plane.testing.fake_broker_metadata import FakeBrokerMetadata, FakeMetadataCluster
from raftlog.net import KafkaProtocolServer

__all__ = ("ClusterThread", "InProcessBroker", "InProcessCluster")

T = TypeVar("T")


@dataclass(slots=True)
class InProcessBroker:
    broker_id: int
    metadata: FakeBrokerMetadata
    replicas: ReplicaManager
    fetchers: ReplicaFetcherManager
    server: KafkaProtocolServer
    running: bool = True


class InProcessCluster:
    """``size`` brokers (ids 1..size) sharing one fake controller."""

    def __init__(self, base_dir: str, size: int = 3,
                 static_config: Mapping[str, str] | None = None) -> None:
        self.base_dir = base_dir
        self.size = size
        self.static_config = dict(static_config or {})
        self.controller = FakeMetadataCluster()
        self.brokers: dict[int, InProcessBroker] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{b.server.port}" for b in self.brokers.values() if b.running)

    async def start(self) -> None:
        for broker_id in range(1, self.size + 1):
            await self.start_broker(broker_id)

    async def start_broker(self, broker_id: int, port: int = 0) -> InProcessBroker:
        """Start (or restart) broker ``broker_id`` and register it."""
        metadata = self.controller.view(broker_id)
        replicas = ReplicaManager(
            metadata, log_dirs=[os.path.join(self.base_dir, f"broker-{broker_id}")],
            static_config=self.static_config,
        )
        fetchers = ReplicaFetcherManager(replicas)
        server = broker_server(metadata, replicas, cluster_id="in-process-cluster",
                               host="127.0.0.1", port=port)
        await server.start()
        self.controller.register_broker(broker_id, "127.0.0.1", server.port)
        await asyncio.sleep(0)  # deliver the registration
        replicas.start()
        fetchers.start()
        broker = InProcessBroker(broker_id, metadata, replicas, fetchers, server)
        self.brokers[broker_id] = broker
        return broker

    async def kill_broker(self, broker_id: int) -> None:
        """Stop a broker abruptly (listener and tasks), then fence it in metadata."""
        broker = self.brokers[broker_id]
        broker.running = False
        broker.server.close()
        await broker.server.wait_closed()
        await broker.fetchers.close()
        await broker.replicas.close()
        self.controller.fence_broker(broker_id)

    async def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.running:
                broker.running = False
                broker.server.close()
                await broker.server.wait_closed()
                await broker.fetchers.close()
                await broker.replicas.close()

    async def wait_until(self, predicate: Any, timeout_s: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("condition not reached")
            await asyncio.sleep(0.01)

    def leader_of(self, topic: str, partition: int) -> int:
        t = self.controller.image.topic_by_name(topic)
        assert t is not None
        return t.partitions[partition].leader


class ClusterThread:
    """Runs an `InProcessCluster` on its own event loop in a daemon thread."""

    def __init__(self, cluster: InProcessCluster) -> None:
        self.cluster = cluster
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ClusterThread:
        self._thread.start()
        self.run(self.cluster.start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self.cluster.stop(), timeout_s=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def call(self, fn: Any, *args: Any) -> Any:
        async def _call() -> Any:
            return fn(*args)
        return self.run(_call())
