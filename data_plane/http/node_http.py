"""Wiring the HTTP surface into `data_plane.node.run_node` (``http.listener``).

`NodeHttp` is created before the Raft driver (its metrics wrap the driver's
listener for the commit latency), learns the driver, controller and replica
manager as the node builds them, wraps the Kafka handler tables for the
request metrics, and serves once the node's Kafka listeners are up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metadata_quorum.image import MetadataImage
from raftlog.consensus.ready import Listener
from raftlog.net import Handler

from ..config import NodeConfig
from .app import HttpServer, build_app
from .backend import NodeBackend
from .metrics import NodeMetrics, NodeSources, RaftMetricsListener, instrument_handlers

__all__ = ("NodeHttp",)

log = logging.getLogger("raftlog.http")


class NodeHttp:
    """The node's HTTP server and metrics (one per node with ``http.listener``)."""

    def __init__(self, config: NodeConfig, cluster_id: str,
                 image: Callable[[], MetadataImage]) -> None:
        listener = config.http_listener
        if listener is None:
            raise ValueError("http.listener is not set")
        self.config = config
        self.sources = NodeSources(node_id=config.node_id, cluster_id=cluster_id, image=image,
                                   min_insync_replicas=config.min_insync_replicas)
        self.metrics = NodeMetrics(self.sources)
        self._server: HttpServer | None = None
        self._backend: NodeBackend | None = None

    def wrap_listener(self, listener: Listener) -> RaftMetricsListener:
        """The driver's listener, timing commits (`RaftMetricsListener`)."""
        wrapped = RaftMetricsListener(listener, self.metrics)
        sources = self.sources
        wrapped.is_leader = lambda: sources.driver is not None and bool(sources.driver.core.is_leader)
        return wrapped

    def instrument(self, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
        """``handlers`` timed into the request metrics."""
        return instrument_handlers(handlers, self.metrics)

    def attach(self, *, driver: Any = None, controller: Any = None, replicas: Any = None,
               subscribe: Callable[[Any], None] | None = None,
               broker_state: Callable[[], tuple[str, int]] | None = None,
               connections: Any = None, groups: Any = None,
               listeners: Sequence[Any] | None = None, mutation_quotas: Any = None,
               creation_rates: Any = None) -> None:
        """Give the collectors the node's live objects (None: not this role)."""
        if mutation_quotas is not None:
            self.sources.mutation_quotas = mutation_quotas
        if creation_rates is not None:
            self.sources.creation_rates = creation_rates
        if listeners is not None:
            self.sources.listeners = listeners
        if groups is not None:
            self.sources.groups = groups
        if connections is not None:
            self.sources.connections = connections
        if broker_state is not None:
            self.sources.broker_state = broker_state
        if driver is not None:
            self.sources.driver = driver
            self.metrics.collector.start_counting_appends(driver.core.log.end_offset())
        if controller is not None:
            self.sources.controller = controller
        if replicas is not None:
            self.sources.replicas = replicas
        if subscribe is not None:
            subscribe(self.metrics.on_image)

    async def start(self) -> None:
        listener = self.config.http_listener
        assert listener is not None
        brokers = self.config.broker_listeners
        self._backend = NodeBackend(
            cluster_id=self.sources.cluster_id, node_id=self.config.node_id,
            image=self.sources.image, driver=self.sources.driver,
            voters=self.config.voter_addresses,
            listener_name=self.config.inter_broker_listener_name if brokers else None,
            security=self.config.security.client_security(self.config.inter_broker_listener_name),
        )
        self._server = HttpServer(
            build_app(self._backend, self.metrics, broker_state=self.sources.broker_state),
            listener.host, listener.port)
        await self._server.start()
        log.info("HTTP on http://%s:%d (REST /v3, /metrics, /ui)", listener.host,
                 self._server.port)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
        if self._backend is not None:
            await self._backend.close()
