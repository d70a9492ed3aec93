"""`BrokerServices`: what the node hands the broker's data side.

`data_plane.node` is the composition root: it builds the metadata side
(`BrokerLifecycle` over the node's one metadata replay) and then calls the
data side's composition function (``DataSide``) with a `BrokerServices`,
before the broker listener starts. The data side registers its Kafka API
handlers in ``handlers``/``supported`` (ApiVersions is answered by the
server itself from ``supported``), subscribes to the metadata, and appends
its shutdown to ``on_stop``. Without a data side the broker listener serves
ApiVersions only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raftlog.net import Handler

from ..config import NodeConfig
from .metadata_api import BrokerMetadata

if TYPE_CHECKING:
    from .group_runtime import GroupCoordinatorRuntime
    from .replica_manager import ReplicaManager

__all__ = ("BrokerServices", "DataSide")


@dataclass(slots=True)
class BrokerServices:
    """The broker's composition slots (mutable until the listener starts)."""

    config: NodeConfig
    cluster_id: str
    metadata: BrokerMetadata
    # api_key -> handler, and api_key -> (min, max) version, on the broker listener(s).
    handlers: dict[int, Handler] = field(default_factory=dict)
    supported: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Awaited in order at shutdown, after controlled shutdown, before the
    # metadata side stops (the data side flushes its logs here).
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Set by the data side: read-only views for the HTTP metrics (`data_plane.http`).
    replicas: ReplicaManager | None = None
    groups: GroupCoordinatorRuntime | None = None


DataSide = Callable[[BrokerServices], Awaitable[None]]
"""The data side's composition: attach to ``services``; raise to refuse to start."""
