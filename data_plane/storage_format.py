"""Log directory formatting: ``meta.properties``, like ``kafka-storage.sh format``.

`format_storage(config, cluster_id)` writes, in every directory of
``log.dirs`` and ``metadata.log.dir``, a ``meta.properties`` file::

    version=1
    cluster.id=<cluster id>
    node.id=<node.id>
    directory.id=<random uuid, base64url as Kafka prints it>

written to a temporary file, fsynced, renamed, and the directory fsynced, so
a crash leaves either no file or a whole one. A formatted directory is not
formatted again (`AlreadyFormattedError`) unless ``ignore_formatted``.

`check_formatted(config)` is what a node runs before it touches its log: it
refuses (`StorageNotFormattedError`, `StorageMismatchError`) a directory with
no ``meta.properties`` or one written for another cluster or node.

Why the node refuses to start rather than formatting itself (KAFKA-14077,
KIP-853): a Raft voter's promises (its vote, its log) live in its directory.
A voter whose disk was wiped and that restarted on an empty directory would
come back with no log and no memory of its vote, could vote twice in an epoch
or, with enough such peers, elect a leader missing committed records. Making
"format" an explicit operator step means an empty directory is an error, not
a fresh start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from data_plane.config import NodeConfig, parse_properties
from metadata_quorum.bootstrap import write_bootstrap
from metadata_quorum.features import NEW_CLUSTER_FEATURES
from metadata_quorum.records import FeatureLevelRecord, MetadataRecord
from raftlog import kafka_uuid

__all__ = (
    "META_PROPERTIES",
    "AlreadyFormattedError",
    "MetaProperties",
    "StorageError",
    "StorageMismatchError",
    "StorageNotFormattedError",
    "check_formatted",
    "format_storage",
    "fsync_dir",
    "random_uuid",
    "read_meta_properties",
    "validate_cluster_id",
    "write_durably",
)

META_PROPERTIES: Final = "meta.properties"


class StorageError(Exception):
    """A log directory problem to report to the operator."""


class AlreadyFormattedError(StorageError):
    pass


class StorageNotFormattedError(StorageError):
    pass


class StorageMismatchError(StorageError):
    pass


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The contents of one ``meta.properties`` (version 1)."""

    cluster_id: str
    node_id: int
    directory_id: str

    def encode(self) -> bytes:
        return (
            "#\n# written by raftlog storage format\n"
            "version=1\n"
            f"cluster.id={self.cluster_id}\n"
            f"node.id={self.node_id}\n"
            f"directory.id={self.directory_id}\n"
        ).encode()


def random_uuid() -> str:
    """A random UUID as Kafka prints one: 22 characters of unpadded base64url.

    Never one starting with ``-``, which a command line would read as an option.
    """
    return kafka_uuid.to_text(kafka_uuid.random_uuid())


def validate_cluster_id(cluster_id: str) -> None:
    """Kafka requires a cluster id that decodes as a base64url UUID (16 bytes)."""
    try:
        kafka_uuid.from_text(cluster_id)
    except ValueError:
        raise StorageError(
            f"cluster id {cluster_id!r} is not a base64url UUID (use `raftlog storage random-uuid`)"
        ) from None


def storage_dirs(config: NodeConfig) -> list[str]:
    """Every directory the node writes to: ``log.dirs`` and ``metadata.log.dir``."""
    dirs = list(config.log_dirs)
    if config.metadata_log_dir not in dirs:
        dirs.append(config.metadata_log_dir)
    return dirs


def read_meta_properties(directory: str) -> MetaProperties | None:
    """The directory's ``meta.properties``, or None if it has none.

    Raises `StorageError` if the file exists but is unreadable or malformed.
    """
    path = os.path.join(directory, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from None
    if props.get("version") != "1":
        raise StorageError(f"{path}: unsupported version {props.get('version')!r}")
    try:
        return MetaProperties(
            cluster_id=props["cluster.id"],
            node_id=int(props["node.id"]),
            directory_id=props.get("directory.id", ""),
        )
    except (KeyError, ValueError) as exc:
        raise StorageError(f"{path}: malformed ({exc})") from None


def format_storage(
    config: NodeConfig, cluster_id: str, *, ignore_formatted: bool = False,
    bootstrap_records: Sequence[MetadataRecord] = (),
    features: Mapping[str, int] = NEW_CLUSTER_FEATURES,
) -> list[str]:
    """Write ``meta.properties`` into every storage directory (creating it),
    and the bootstrap file into the metadata log directory when it is
    formatted now: a FeatureLevelRecord per feature of ``features`` above
    level 0 (a new cluster's defaults unless ``--feature`` says otherwise),
    then ``bootstrap_records`` (``--add-scram``, KIP-900).

    Returns the directories formatted (skipping already-formatted ones when
    ``ignore_formatted``). Raises `AlreadyFormattedError` if any directory is
    formatted and not ``ignore_formatted`` (before writing anything), and
    `StorageError` for a bad cluster id.
    """
    validate_cluster_id(cluster_id)
    dirs = storage_dirs(config)
    formatted = [d for d in dirs if read_meta_properties(d) is not None]
    if formatted and not ignore_formatted:
        raise AlreadyFormattedError(
            f"log directory {formatted[0]} is already formatted "
            "(use --ignore-formatted to skip formatted directories)"
        )
    written: list[str] = []
    for directory in dirs:
        if directory in formatted:
            continue
        os.makedirs(directory, exist_ok=True)
        records = [*(FeatureLevelRecord(name, level)
                     for name, level in sorted(features.items()) if level > 0),
                   *bootstrap_records]
        if records and directory == config.metadata_log_dir:
            write_bootstrap(directory, records)  # before meta.properties
        meta = MetaProperties(cluster_id, config.node_id, random_uuid())
        write_durably(directory, META_PROPERTIES, meta.encode())
        written.append(directory)
    return written


def check_formatted(config: NodeConfig, cluster_id: str | None = None) -> str:
    """Check every storage directory before start-up; return the cluster id.

    Raises `StorageNotFormattedError` for a directory without
    ``meta.properties`` and `StorageMismatchError` when directories disagree
    on the cluster id, or name another ``node.id`` (or ``cluster_id``, if given).
    """
    seen: str | None = cluster_id
    for directory in storage_dirs(config):
        meta = read_meta_properties(directory)
        if meta is None:
            raise StorageNotFormattedError(
                f"log directory {directory} is not formatted: run "
                "`raftlog storage format --cluster-id ID --config FILE` first"
            )
        if meta.node_id != config.node_id:
            raise StorageMismatchError(
                f"log directory {directory} belongs to node.id {meta.node_id}, "
                f"but node.id is {config.node_id}"
            )
        if seen is not None and meta.cluster_id != seen:
            raise StorageMismatchError(
                f"log directory {directory} belongs to cluster {meta.cluster_id}, "
                f"expected {seen}"
            )
        seen = meta.cluster_id
    assert seen is not None  # storage_dirs is never empty
    return seen


def write_durably(directory: str, name: str, data: bytes) -> None:
    """Write ``data`` to ``directory/name`` as a crash leaves it whole or
    not at all: a temporary file, fsynced, renamed, the directory fsynced."""
    path = os.path.join(directory, name)
    temp = path + ".tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(directory)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

