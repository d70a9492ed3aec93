"""The Kafka-protocol transport of the driver: outbound `KafkaTransport` and the
server handlers for the Raft APIs (`raft_handlers`).

Connections: two ``NetworkClient`` pools per node, one for Fetch and
FetchSnapshot and one for Vote, BeginQuorumEpoch and EndQuorumEpoch. A
server answers requests in order per connection (Kafka's guarantee), so a
Vote behind a long-polling Fetch on one connection would wait up to
``fetch.max.wait.ms``; with separate connections elections never queue
behind replication. This is a transport choice, not a protocol one: the
messages and their order per kind are unchanged.

Failures never raise into the driver: a lost or refused connection becomes
BROKER_NOT_AVAILABLE and a timeout REQUEST_TIMED_OUT
(`wire.error_response`, as Kafka's ``KafkaNetworkChannel`` does), so the
core sees every request end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kio.static.protocol import ResponsePayload

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    DescribeQuorumRequest,
    FetchRequest,
    FetchSnapshotRequest,
    Request,
    Response,
)
from raftlog.net import (
    PLAINTEXT_SECURITY,
    ConnectionSecurity,
    Handler,
    KafkaApiError,
    NetworkClient,
    RequestContext,
)
from raftlog.net.errors import ErrorCode, RequestTimeoutError, TransportError
from raftlog.runtime import wire
from raftlog.runtime.driver import DriverStoppedError, RaftDriver

__all__ = ("KafkaTransport", "raft_handlers")

log = logging.getLogger(__name__)


class KafkaTransport:
    """`raftlog.runtime.driver.Transport` over the Kafka protocol.

    ``addresses`` maps node id -> (host, port) of its controller listener.
    ``request_timeout_ms`` is ``controller.quorum.request.timeout.ms``; fetch
    requests get ``fetch_max_wait_ms`` on top (they long-poll). ``security``:
    how the controller listener wants connections (TLS, SASL).
    """

    def __init__(
        self,
        *,
        local_id: int,
        addresses: Mapping[int, tuple[str, int]],
        request_timeout_ms: int,
        fetch_max_wait_ms: int,
        cluster_id: str | None = None,
        local_endpoint: wire.Endpoint | None = None,
        security: ConnectionSecurity = PLAINTEXT_SECURITY,
    ) -> None:
        self.local_id = local_id
        self.cluster_id = cluster_id
        self.local_endpoint = local_endpoint
        client_id = f"raft-client-{local_id}"
        self._fetch_pool = NetworkClient(
            addresses,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms + fetch_max_wait_ms,
            security=security,
        )
        self._control_pool = NetworkClient(
            addresses, client_id=client_id, request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._known = frozenset(addresses)

    async def send(self, destination: int, request: Request) -> Response:
        if destination not in self._known:
            log.warning("no address for node %d; dropping %s", destination, type(request).__name__)
            return wire.error_response(request, Errors.BROKER_NOT_AVAILABLE)
        pool = (
            self._fetch_pool
            if isinstance(request, FetchRequest | FetchSnapshotRequest)
            else self._control_pool
        )
        try:
            fetch_version = wire.FETCH_VERSION
            if isinstance(request, FetchRequest):
                fetch_version = await self._fetch_version(destination)
            payload = wire.encode_request(
                request,
                destination=destination,
                cluster_id=self.cluster_id,
                local_endpoint=self.local_endpoint,
                fetch_version=fetch_version,
            )
            answer = await pool.send(destination, payload)
        except RequestTimeoutError:
            return wire.error_response(request, Errors.REQUEST_TIMED_OUT)
        except TransportError as exc:
            log.debug("%s to %d failed: %s", type(request).__name__, destination, exc)
            return wire.error_response(request, Errors.BROKER_NOT_AVAILABLE)
        try:
            return wire.decode_response(answer, request)
        except wire.WireError as exc:
            log.warning("bad %s response from %d: %s", type(request).__name__, destination, exc)
            return wire.error_response(request, Errors.UNKNOWN_SERVER_ERROR)

    async def _fetch_version(self, destination: int) -> int:
        """Fetch v18 (with the fetcher's HW, KIP-1166) if ``destination``
        serves it, else v17. Connects first when no handshake has told.
        Raises what connecting raises."""
        client = self._fetch_pool.client(destination)
        version = client.negotiated_version(wire.FETCH_KEY)
        if version is None:
            await client.connect()
            version = client.negotiated_version(wire.FETCH_KEY)
        return wire.FETCH_VERSION if version is None else min(version, wire.FETCH_VERSION)

    async def close(self) -> None:
        await self._fetch_pool.close()
        await self._control_pool.close()


def raft_handlers(
    driver: RaftDriver,
    *,
    cluster_id: str | None = None,
    endpoints: Mapping[int, wire.Endpoint] | None = None,
) -> dict[int, Handler]:
    """Server handlers (api key -> handler) for the Raft APIs and DescribeQuorum.

    Serve them with ``KafkaProtocolServer(..., supported=wire.SUPPORTED_VERSIONS)``.
    A request that does not map (`wire.WireError`) is answered with its error
    code; a stopped driver answers BROKER_NOT_AVAILABLE (through the error
    response of the request).
    """
    known = dict(endpoints or {})

    async def handle(context: RequestContext, body: Any) -> ResponsePayload:
        try:
            source, request = wire.decode_request(
                body, local_id=driver.node_id, cluster_id=cluster_id
            )
        except wire.WireError as exc:
            raise KafkaApiError(exc.error_code, exc.message) from exc
        try:
            if isinstance(request, DescribeQuorumRequest):
                response: Response = await driver.describe_quorum()
            else:
                response = await driver.handle_request(source, request)
        except DriverStoppedError as exc:
            # A node shutting down (or whose driver failed) while peers still
            # send: a retriable refusal, not a handler failure.
            raise KafkaApiError(ErrorCode.broker_not_available,
                                f"node {driver.node_id}: the quorum driver is not running"
                                ) from exc
        return wire.encode_response(response, version=context.api_version, endpoints=known)

    return dict.fromkeys(wire.API_KEYS, handle)
