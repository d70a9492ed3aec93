"""The broker's channel to the active controller.

After Kafka's ``NodeToControllerChannelManager`` (design only): one logical
channel over which registration, heartbeats, AlterPartition and forwarded
admin requests reach whichever controller is active. Which one that is comes
from, in order:

1. the controller that answered the last request without NOT_CONTROLLER;
2. the Raft leader the node's own metadata replica knows (the active
   controller is the Raft leader, KIP-631), via ``leader_hint``;
3. otherwise the voters of ``controller.quorum.voters`` in turn.

A response whose error is NOT_CONTROLLER (top-level, or every item of a
per-topic answer such as CreateTopics) and a transport failure both move on
to the next candidate after ``retry_backoff_ms``, until the caller's
deadline; then `ControllerUnavailableError`. The channel makes no protocol
decision about the answer; it only routes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from kio.static.protocol import RequestPayload, ResponsePayload

from raftlog.net import PLAINTEXT_SECURITY, ConnectionSecurity, KafkaProtocolClient
from raftlog.net.errors import ErrorCode, NetError

__all__ = (
    "ControllerChannel",
    "ControllerUnavailableError",
    "QuorumControllerChannel",
    "is_not_controller",
)

log = logging.getLogger(__name__)


class ControllerUnavailableError(TimeoutError):
    """No controller answered (other than NOT_CONTROLLER) before the deadline.

    A `TimeoutError`: the request's outcome is unknown (it may have been
    applied by a controller whose answer was lost).
    """


class ControllerChannel(Protocol):
    """Sends a kio request to the active controller (see module doc)."""

    async def send(self, request: RequestPayload, *, timeout_ms: int) -> ResponsePayload:
        """The active controller's response to ``request``.

        Raises `ControllerUnavailableError` after ``timeout_ms``.
        """
        ...

    async def close(self) -> None: ...


def is_not_controller(response: object) -> bool:
    """Whether ``response`` says "not the active controller".

    Kafka answers NOT_CONTROLLER top-level for most controller APIs and per
    item for CreateTopics/DeleteTopics/CreatePartitions, per resource for
    the config APIs and per ACL or filter for CreateAcls/DeleteAcls
    (``ControllerApis``); a per-item
    answer counts only when every item carries it.
    """
    code = getattr(response, "error_code", None)
    if code is not None and int(code) == ErrorCode.not_controller:
        return True
    for name in ("topics", "responses", "results", "filter_results"):
        items = getattr(response, name, None)
        if not isinstance(items, tuple) or not items:
            continue
        codes = [getattr(item, "error_code", None) for item in items]
        if all(c is not None and int(c) == ErrorCode.not_controller for c in codes):
            return True
    return False


class QuorumControllerChannel:
    """`ControllerChannel` over one `KafkaProtocolClient` per controller."""

    def __init__(
        self,
        controllers: Mapping[int, tuple[str, int]],
        leader_hint: Callable[[], int | None],
        *,
        request_timeout_ms: int = 5000,
        retry_backoff_ms: int = 100,
        client_id: str = "raftlog-broker",
        security: ConnectionSecurity = PLAINTEXT_SECURITY,
    ) -> None:
        if not controllers:
            raise ValueError("no controllers to talk to")
        self._addresses = dict(controllers)
        self._order = sorted(self._addresses)
        self._leader_hint = leader_hint
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._client_id = client_id
        self._security = security
        self._clients: dict[int, KafkaProtocolClient] = {}
        self._active: int | None = None
        self._next = 0  # rotation index into _order
        self._closed = False

    @property
    def active_controller_id(self) -> int | None:
        """The controller that last answered (not NOT_CONTROLLER), if any."""
        return self._active

    async def send(self, request: RequestPayload, *, timeout_ms: int) -> ResponsePayload:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        avoid: int | None = None
        while not self._closed:
            target = self._pick(avoid)
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(min(remaining, self._request_timeout_ms / 1000)):
                    response = await self._client(target).send(request)
            except (NetError, TimeoutError, OSError) as exc:
                log.debug("controller %d: %s failed: %r", target, type(request).__name__, exc)
                self._forget(target)
                avoid = target
            else:
                if not is_not_controller(response):
                    self._active = target
                    return response
                self._forget(target)
                avoid = target
            await asyncio.sleep(min(self._retry_backoff_ms / 1000, max(0.0, deadline - loop.time())))
        raise ControllerUnavailableError(
            f"no active controller answered {type(request).__name__} within {timeout_ms} ms"
        )

    async def close(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    def _pick(self, avoid: int | None) -> int:
        if self._active is not None:
            return self._active
        hint = self._leader_hint()
        if hint is not None and hint != avoid and hint in self._addresses:
            return hint
        for _ in self._order:
            candidate = self._order[self._next % len(self._order)]
            self._next += 1
            if candidate != avoid or len(self._order) == 1:
                return candidate
        return self._order[0]

    def _forget(self, node_id: int) -> None:
        if self._active == node_id:
            self._active = None

    def _client(self, node_id: int) -> KafkaProtocolClient:
        client = self._clients.get(node_id)
        if client is None:
            host, port = self._addresses[node_id]
            client = KafkaProtocolClient(
                host,
                port,
                client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms,
                connect_timeout_ms=min(self._request_timeout_ms, 1000),
                security=self._security,
            )
            self._clients[node_id] = client
        return client
