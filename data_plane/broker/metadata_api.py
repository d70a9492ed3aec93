"""What the broker's data side needs from its metadata side.

The metadata side (`data_plane.broker.lifecycle` and friends) fetches the
``__cluster_metadata`` log as a Raft observer, replays it into a
`metadata_quorum.image.MetadataImage`, registers the broker with the active
controller and heartbeats. The data side (`data_plane.broker.replica_manager`,
the fetchers, the Kafka API) reads partitions, leaders and ISRs from the
published image and sends AlterPartition and controller-bound admin requests
through the same channel. Both sides live on one asyncio event loop.

Kafka's split is the same: ``BrokerMetadataPublisher`` hands
``MetadataImage``/``MetadataDelta`` to ``ReplicaManager.applyDelta``, and
``AlterPartitionManager`` / ``ForwardingManager`` carry requests to the
controller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from data_plane.replication.types import AlterPartitionRequest, AlterPartitionResponse
from metadata_quorum.image import MetadataImage

# Called with (new image, previous image or None for the first publish).
ImageListener = Callable[[MetadataImage, MetadataImage | None], None]


class BrokerMetadata(Protocol):
    """The broker's view of cluster metadata and its channel to the controller."""

    @property
    def broker_id(self) -> int:
        """This broker's ``node.id``."""
        ...

    @property
    def broker_epoch(self) -> int:
        """The epoch the controller granted at the latest registration; -1 before."""
        ...

    @property
    def image(self) -> MetadataImage:
        """The latest published image (an empty image before the first publish)."""
        ...

    def subscribe(self, listener: ImageListener) -> None:
        """Call ``listener`` on the event loop after every publish, in order.

        A publish happens after each committed metadata batch (or loaded
        snapshot) has been replayed. Listeners must not block; they may
        schedule work.
        """
        ...

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """Send AlterPartition (KIP-497, v3 with broker epochs, KIP-903) to the
        active controller, following NOT_CONTROLLER to the new one, and return
        its answer for this partition. A transport failure or timeout comes
        back as a retriable error code (REQUEST_TIMED_OUT), never an exception.
        """
        ...

    async def forward(self, api_key: int, request: object) -> object:
        """Forward a controller-bound admin request (CreateTopics, DeleteTopics,
        ...; a kio request entity) to the active controller and return its kio
        response entity (Kafka's ForwardingManager, KIP-590)."""
        ...
