"""Which topic a partition directory belongs to, and directories no longer
assigned to this broker (Kafka's ``partition.metadata``, KIP-516, and its
stray replicas, KAFKA-14616).

A partition directory is named ``<topic>-<partition>``, so a topic deleted
and created again under the same name reuses the name. A broker that was
down meanwhile would otherwise open the old topic's log as the new topic's
replica: same names, same early leader epochs, so the follower's divergence
check can take the old records for the new ones. Each directory therefore
holds ``partition.metadata`` with its topic id, written when the replica is
first opened; a directory whose id differs from the metadata's is the old
topic's and is deleted before the replica is created.

A directory for a partition the metadata no longer assigns to this broker
(its topic was deleted, or a reassignment moved it away, while the broker
was down) is a stray: nothing would ever open or delete it. The first
metadata image the broker acts on, which is past its own registration, so
current, lists them and they are deleted. The controller removes a replica
only once every broker of the new assignment is in sync, or with its
topic, so a stray never holds the only copy of acknowledged data.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Collection, Sequence

from raftlog import kafka_uuid
from raftlog.storage.files import FileSystem, read_whole_file, write_file_atomically

__all__ = ("PARTITION_METADATA_FILE", "delete_strays", "read_topic_id", "write_topic_id")

log = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
#: The metadata log's directory shares ``log.dirs`` (``metadata.log.dir``
#: defaults to the first): never a stray.
_METADATA_PREFIX = "__cluster_metadata-"
#: Files only a partition log directory holds: a directory without any is
#: not ours to delete.
_LOG_FILE_SUFFIXES = (".log", ".index", ".timeindex")
_LOG_FILE_NAMES = ("leader-epoch-checkpoint", PARTITION_METADATA_FILE)


def read_topic_id(fs: FileSystem, directory: str) -> uuid.UUID | None:
    """The topic id in ``directory``'s ``partition.metadata``; None if the
    file is missing or unreadable (a directory from before the file
    existed)."""
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    if not fs.exists(path):
        return None
    try:
        text = read_whole_file(fs, path).decode("utf-8")
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return kafka_uuid.from_text(fields["topic_id"].strip())
    except (OSError, UnicodeDecodeError, KeyError, ValueError) as e:
        log.warning("%s: unreadable %s (%r); treated as absent", directory,
                    PARTITION_METADATA_FILE, e)
        return None


def write_topic_id(fs: FileSystem, directory: str, topic_id: uuid.UUID) -> None:
    """Write ``partition.metadata`` (Kafka's text format), atomically."""
    write_file_atomically(
        fs, os.path.join(directory, PARTITION_METADATA_FILE),
        f"version: 0\ntopic_id: {kafka_uuid.to_text(topic_id)}\n".encode())


def _partition_of(name: str) -> tuple[str, int] | None:
    topic, sep, index = name.rpartition("-")
    if not sep or not topic or not index.isdigit():
        return None
    return topic, int(index)


def delete_strays(fs: FileSystem, log_dirs: Sequence[str],
                  assigned: Collection[tuple[str, int]]) -> list[str]:
    """Delete every partition directory in ``log_dirs`` whose partition is
    not in ``assigned``; returns their paths. Only directories that hold
    partition log files count (the metadata log's never does)."""
    deleted = []
    for log_dir in log_dirs:
        try:
            names = fs.list_dir(log_dir)
        except FileNotFoundError:
            continue
        for name in names:
            key = _partition_of(name)
            if key is None or key in assigned or name.startswith(_METADATA_PREFIX):
                continue
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            try:
                files = fs.list_dir(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not any(f.endswith(_LOG_FILE_SUFFIXES) or f in _LOG_FILE_NAMES for f in files):
                continue
            log.warning("deleting stray replica %s: the metadata does not assign %s-%d to "
                        "this broker", path, key[0], key[1])
            shutil.rmtree(path, ignore_errors=True)
            deleted.append(path)
    return deleted
