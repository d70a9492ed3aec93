"""`MetadataLoader`: committed metadata log batches and snapshots -> `MetadataImage`.

The one replay path shared by brokers (Raft observers), standby controllers
and the active controller (KIP-631). It speaks the shapes of raftlog's
consensus listener (``CommittedBatch``, ``SnapshotLoad``) structurally, so
it plugs into ``Ready.deliver`` without importing the consensus package.

Snapshots (KIP-630) hold the image as plain metadata records
(`MetadataImage.to_records`) in v2 batches; the Raft layer adds its own
header/footer control batches around them, which the loader skips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from metadata_quorum.records import (
    MetadataRecord,
    MetadataRecordError,
    build_metadata_batch,
    decode_metadata_batch,
)
from raftlog.records import RecordError, iter_batches

__all__ = [
    "CommittedBatchLike",
    "MetadataLoader",
    "SnapshotIdLike",
    "SnapshotLike",
    "build_snapshot_batches",
]


class CommittedBatchLike(Protocol):
    """raftlog.consensus.ready.CommittedBatch, structurally."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def data(self) -> bytes: ...


class SnapshotIdLike(Protocol):
    @property
    def end_offset(self) -> int: ...
    @property
    def epoch(self) -> int: ...


class SnapshotLike(Protocol):
    """raftlog.consensus.ready.SnapshotLoad, structurally."""

    @property
    def snapshot_id(self) -> SnapshotIdLike: ...
    @property
    def data(self) -> bytes: ...


class MetadataLoader:
    """Holds the image of the committed metadata log.

    Raises (tier 3, stop the node): `MetadataRecordError` for a batch that
    does not decode, `metadata_quorum.delta.MetadataReplayError` for a record
    that does not apply, ValueError for a batch that overlaps what was
    already replayed without being wholly before it.
    """

    def __init__(self, image: MetadataImage = EMPTY_IMAGE) -> None:
        self._image = image

    @property
    def image(self) -> MetadataImage:
        return self._image

    def handle_commit(self, batch: CommittedBatchLike) -> MetadataImage:
        """Replay one committed batch (control batches only advance the offset).

        A batch wholly at or below the image's offset is ignored (already
        included, e.g. by a snapshot).
        """
        last = self._image.provenance.last_offset
        if batch.last_offset <= last:
            return self._image
        if batch.base_offset <= last:
            raise ValueError(
                f"batch {batch.base_offset}..{batch.last_offset} overlaps the image at {last}"
            )
        provenance = MetadataProvenance(batch.last_offset, batch.epoch)
        if batch.is_control:
            self._image = MetadataDelta(self._image).apply(provenance)
            return self._image
        decoded = decode_metadata_batch(batch.data)
        delta = MetadataDelta(self._image)
        for _offset, record in decoded.records:
            delta.replay(record)
        self._image = delta.apply(provenance)
        return self._image

    def handle_load_snapshot(self, snapshot: SnapshotLike) -> MetadataImage:
        """Replace the image with the snapshot's (it covers offsets < end_offset)."""
        snapshot_id = snapshot.snapshot_id
        delta = MetadataDelta(EMPTY_IMAGE)
        try:
            for header, pos in iter_batches(snapshot.data):
                if header.is_control:
                    continue
                end = pos + header.size_in_bytes
                for _offset, record in decode_metadata_batch(snapshot.data[pos:end]).records:
                    delta.replay(record)
        except RecordError as exc:
            raise MetadataRecordError(f"corrupt snapshot: {exc}") from None
        self._image = delta.apply(
            MetadataProvenance(snapshot_id.end_offset - 1, snapshot_id.epoch)
        )
        return self._image


def build_snapshot_batches(
    image: MetadataImage, *, records_per_batch: int = 1000, timestamp_ms: int = 0
) -> bytes:
    """The image's records (`MetadataImage.to_records`) as consecutive v2 batches.

    Offsets start at 0 (snapshot files number their own records). Empty
    bytes for an empty image.
    """
    if records_per_batch < 1:
        raise ValueError("records_per_batch must be >= 1")
    records: Sequence[MetadataRecord] = image.to_records()
    out = bytearray()
    for start in range(0, len(records), records_per_batch):
        chunk = records[start : start + records_per_batch]
        out += build_metadata_batch(
            chunk, base_offset=start, epoch=max(image.provenance.last_epoch, 0),
            timestamp_ms=timestamp_ms,
        )
    return bytes(out)
