"""Committed metadata -> published `MetadataImage`s, for the broker's subscribers.

One metadata log per node, one replay (`metadata_quorum.loader.MetadataLoader`)
per node. The Raft driver of ``__cluster_metadata-0`` has exactly one
listener, and which one depends on the roles:

- **broker only** (the node is a Raft observer): `BrokerMetadataListener`
  owns a `MetadataLoader`, replays each committed batch or loaded snapshot,
  and publishes the resulting image;
- **combined** (the node is a voter): `CombinedMetadataListener` hands each
  callback to the controller's listener first (whose `QuorumController`
  owns the node's one `MetadataLoader`) and then publishes the controller's
  committed image. No second log, no second replay: the broker sees
  exactly the image the controller committed.

Both record the Raft leader (the active controller, or the one about to
be), which the controller channel uses as its first guess, and plan
snapshots like the controller does (`SnapshotPlanner`).

`MetadataPublisher` calls subscribers synchronously, in subscription order,
once per publish, in the driver task (Kafka's ``MetadataPublisher``).
Subscribers must not block. A subscriber that raises is a bug on the data
side: it is logged and re-raised, so the driver fails and the node stops
(tier 3) rather than running on an image the data side never applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.loader import MetadataLoader, build_snapshot_batches
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, Listener, SnapshotLoad

from .metadata_api import ImageListener

__all__ = (
    "BrokerMetadataListener",
    "CombinedMetadataListener",
    "MetadataPublisher",
    "SnapshotPlanner",
)

log = logging.getLogger(__name__)


class MetadataPublisher:
    """The latest published image, its subscribers, and the known Raft leader."""

    def __init__(self) -> None:
        self._image: MetadataImage = EMPTY_IMAGE
        self._subscribers: list[ImageListener] = []
        self._on_publish: list[Callable[[MetadataImage], None]] = []
        self.leader = LeaderAndEpoch(None, -1)
        self.publishes = 0
        # The data side hears nothing until the gate opens (`open_gate`):
        # the last image handed to the subscribers, None before the first.
        self._gate_open = False
        self._gate_opened = asyncio.Event()
        self._delivered: MetadataImage | None = None

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def leader_id(self) -> int | None:
        return self.leader.leader_id

    def subscribe(self, listener: ImageListener) -> None:
        """Add a data-side subscriber; it first hears of the next delivery."""
        self._subscribers.append(listener)

    @property
    def gate_open(self) -> bool:
        return self._gate_open

    def open_gate(self) -> None:
        """Start handing images to the data side, beginning with the current one.

        The broker lifecycle opens the gate once this broker has registered
        and replayed the metadata log past its own registration record
        (Kafka installs its metadata publishers only after that initial
        catch-up). Until then the image may still show this broker's
        *previous* incarnation as a partition leader or ISR member: a broker
        that restarted after losing unflushed data must not act on that, or
        followers would truncate to its shorter log. Registration succeeds
        only once the controller has fenced the previous incarnation, which
        moves leadership off it and takes it out of every ISR (KIP-841), so
        the first image delivered no longer names it.
        """
        if self._gate_open:
            return
        self._gate_open = True
        self._gate_opened.set()
        if self._image is EMPTY_IMAGE:
            return  # nothing replayed yet: the first publish is the first delivery
        log.info("metadata publishing to the data side starts at offset %d",
                 self._image.provenance.last_offset)
        self._deliver(self._image)

    async def wait_gate_open(self) -> None:
        """Until `open_gate`: this broker registered and caught up."""
        await self._gate_opened.wait()

    def on_publish(self, hook: Callable[[MetadataImage], None]) -> None:
        """An internal hook (the lifecycle), run before the subscribers."""
        self._on_publish.append(hook)

    def publish(self, image: MetadataImage) -> None:
        """Make ``image`` current and tell everyone; a no-op if it is already current.

        Raises ValueError if ``image`` is older than the current one (replay
        never goes back: a broken invariant).
        """
        previous = self._image
        if image is previous:
            return
        if image.provenance.last_offset < previous.provenance.last_offset:
            raise ValueError(
                f"publishing an image at {image.provenance.last_offset} after one at "
                f"{previous.provenance.last_offset}"
            )
        self._image = image
        self.publishes += 1
        for hook in self._on_publish:
            hook(image)
        self._deliver(image)

    def _deliver(self, image: MetadataImage) -> None:
        """Hand ``image`` to the subscribers if the gate is open and they have
        not seen it (with the image they saw last, None the first time)."""
        if not self._gate_open or self._delivered is image:
            return
        previous, self._delivered = self._delivered, image
        for subscriber in self._subscribers:
            try:
                subscriber(image, previous)
            except Exception:
                log.exception("metadata subscriber %r failed", subscriber)
                raise


class SnapshotPlanner:
    """Decides when a metadata snapshot is due (every ``max_bytes`` committed bytes).

    ``due`` is ``(end_offset, epoch, data)`` for the node's snapshot loop to
    write (`RaftDriver.create_snapshot`), or None.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        self.due: tuple[int, int, bytes] | None = None

    def handle_commit(self, batch: CommittedBatch, image: MetadataImage) -> None:
        self._bytes += len(batch.data)
        if self._bytes >= self.max_bytes and not batch.is_control:
            self._bytes = 0
            self.due = (batch.last_offset + 1, batch.epoch, build_snapshot_batches(image))

    def reset(self) -> None:
        self._bytes = 0


class BrokerMetadataListener:
    """The observer's Raft listener: replay into its own loader, then publish."""

    def __init__(self, publisher: MetadataPublisher, snapshot_max_bytes: int) -> None:
        self.publisher = publisher
        self.loader = MetadataLoader()
        self.snapshots = SnapshotPlanner(snapshot_max_bytes)

    def handle_commit(self, batch: CommittedBatch) -> None:
        image = self.loader.handle_commit(batch)
        self.snapshots.handle_commit(batch, image)
        self.publisher.publish(image)

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        image = self.loader.handle_load_snapshot(snapshot)
        self.snapshots.reset()
        log.info("broker loaded metadata snapshot %s", snapshot.snapshot_id)
        self.publisher.publish(image)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.publisher.leader = leader


class CombinedMetadataListener:
    """A voter's Raft listener in combined mode: the controller first, then publish.

    ``committed_image`` reads the image the controller's loader holds after
    each callback (``QuorumController.committed_image``).
    """

    def __init__(
        self,
        controller_listener: Listener,
        committed_image: Callable[[], MetadataImage],
        publisher: MetadataPublisher,
    ) -> None:
        self.controller_listener = controller_listener
        self.committed_image = committed_image
        self.publisher = publisher

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.controller_listener.handle_commit(batch)
        self.publisher.publish(self.committed_image())

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        self.controller_listener.handle_load_snapshot(snapshot)
        self.publisher.publish(self.committed_image())

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.publisher.leader = leader
        self.controller_listener.handle_leader_change(leader)
