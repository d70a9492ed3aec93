"""Kafka-protocol clients from one broker to the others (inter-broker requests
that are not replication: transaction markers, transaction verification).

One `KafkaProtocolClient` per broker at its endpoint on one listener, as the
metadata image registers it; reused across requests, and replaced when the
broker registers another address.
"""

from __future__ import annotations

from data_plane.broker.metadata_api import BrokerMetadata
from metadata_quorum.image import BrokerRegistration
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity, KafkaProtocolClient

__all__ = ("BrokerClients", "endpoint")


def endpoint(broker: BrokerRegistration, listener_name: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``broker``'s listener ``listener_name``, if it has one."""
    for listener in broker.listeners:
        if listener.name == listener_name:
            return listener.host, listener.port
    return None


class BrokerClients:
    """A client per broker (see the module docstring)."""

    def __init__(self, metadata: BrokerMetadata, listener_name: str, *, client_id: str,
                 request_timeout_ms: int, security: ConnectionSecurity = PLAINTEXT_SECURITY) -> None:
        self.metadata = metadata
        self.listener_name = listener_name
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.security = security
        self._clients: dict[int, tuple[tuple[str, int], KafkaProtocolClient]] = {}

    def get(self, broker_id: int) -> KafkaProtocolClient | None:
        """The client for ``broker_id``; None if the broker is unknown,
        fenced, or has no endpoint on the listener."""
        broker = self.metadata.image.brokers.get(broker_id)
        address = None if broker is None or broker.fenced else endpoint(broker, self.listener_name)
        if address is None:
            return None
        cached = self._clients.get(broker_id)
        if cached is not None and cached[0] == address:
            return cached[1]
        client = KafkaProtocolClient(address[0], address[1], client_id=self.client_id,
                                     request_timeout_ms=self.request_timeout_ms, security=self.security)
        self._clients[broker_id] = (address, client)
        return client

    async def drop(self, broker_id: int) -> None:
        """Close the client of ``broker_id`` (after a failure); the next `get` reconnects."""
        cached = self._clients.pop(broker_id, None)
        if cached is not None:
            await cached[1].close()

    async def close(self) -> None:
        for _, client in self._clients.values():
            await client.close()
        self._clients.clear()
