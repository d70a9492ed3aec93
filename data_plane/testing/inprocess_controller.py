"""One KRaft controller in-process: a one-voter `RaftDriver` over a memory log,
running the real `ControllerService` and the controller listener's handlers.

What a node runs (``data_plane.node.run_node``) minus the sockets: requests go
straight to `controller_handlers`, the quorum has one voter, so it elects
itself and commits what it proposes at once. For tests that need the
controller's whole request path: the handler's translation, the command in
the driver's task, replay of the committed records, the answer after the
commit.

`InProcessController.call` returns the handler's answer. The driver's
health is `InProcessController.driver.running`: a command or replay that
raises out of the driver stops it, as it would stop a node.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from data_plane.controller_api import controller_handlers
from data_plane.controller_service import ControllerService
from metadata_quorum.controller.quorum_controller import ControllerRole
from metadata_quorum.controller.result import ControllerConfig
from raftlog.clock import SystemClock
from raftlog.consensus.config import QuorumConfig, VoterAddress
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import Request, Response
from raftlog.consensus.roles import ElectionState
from raftlog.net import Handler, RequestContext
from raftlog.runtime import wire
from raftlog.runtime.driver import RaftDriver
from raftlog.testing.memory_log import MemoryLog

__all__ = ("InProcessController",)

NODE_ID = 1


class _MemoryStore:
    def __init__(self) -> None:
        self.state: ElectionState | None = None

    def write(self, state: ElectionState) -> None:
        self.state = state


class _NoPeers:
    """A one-voter quorum sends nothing; anything sent is answered unavailable."""

    async def send(self, destination: int, request: Request) -> Response:
        return wire.error_response(request, Errors.BROKER_NOT_AVAILABLE)

    async def close(self) -> None:
        pass


class InProcessController:
    """Node 1, sole voter and active controller. Use inside a running event loop:
    ``await start()``, then `call`, then ``await stop()``."""

    def __init__(self, config: ControllerConfig | None = None,
                 snapshot_max_bytes: int = 20 * 1024 * 1024) -> None:
        self.service = ControllerService(NODE_ID, config or ControllerConfig(), snapshot_max_bytes)
        clock = SystemClock()
        self.log = MemoryLog()
        core = KRaftCore(
            node_id=NODE_ID,
            config=QuorumConfig(voters=frozenset({NODE_ID}), election_timeout_ms=50,
                                append_linger_ms=0),
            log=self.log,
            rng=random.Random(NODE_ID),
            stored=None,
            now_ms=clock.wall_ms(),
        )
        self.driver = RaftDriver(core=core, log=self.log, state_store=_MemoryStore(),
                                 transport=_NoPeers(), clock=clock,
                                 listener=self.service.listener)
        self.service.attach(self.driver)
        self.handlers: dict[int, Handler] = controller_handlers(
            self.service, (VoterAddress(NODE_ID, "127.0.0.1", 9093),))

    async def start(self, timeout_s: float = 10.0) -> None:
        """Start the driver; return once this node is the active controller and
        its first records (the bootstrap's) are committed."""
        self.driver.start()
        controller = self.service.controller
        async with asyncio.timeout(timeout_s):
            while not (controller.role is ControllerRole.ACTIVE
                       and controller.last_committed_offset >= 0):
                if not self.driver.running:
                    raise RuntimeError("the controller's Raft driver stopped while starting")
                await asyncio.sleep(0.005)

    async def stop(self) -> None:
        await self.driver.stop(resign=False)

    async def call(self, api_key: int, body: Any, *, timeout_s: float = 10.0) -> Any:
        """Run the controller listener's handler for ``api_key`` on ``body``."""
        version = int(getattr(body, "__version__", 0))
        context = RequestContext(api_key, version, 1, "in-process", None, "CONTROLLER")
        async with asyncio.timeout(timeout_s):
            return await self.handlers[api_key](context, body)
