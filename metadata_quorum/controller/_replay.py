"""Helper for commands that build records in steps: the image after some records.

Commands use it to see the effect of their own earlier records (e.g. the
second broker fenced in one sweep must see the first one's elections). It
goes through `MetadataDelta.replay`, the one state-changing path, and keeps
the base image's provenance, so nothing here is state.
"""

from __future__ import annotations

from collections.abc import Iterable

from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import MetadataRecord


def image_after(image: MetadataImage, records: Iterable[MetadataRecord]) -> MetadataImage:
    """``image`` with ``records`` replayed (provenance unchanged)."""
    delta = MetadataDelta(image)
    any_record = False
    for record in records:
        delta.replay(record)
        any_record = True
    return delta.apply(image.provenance) if any_record else image
