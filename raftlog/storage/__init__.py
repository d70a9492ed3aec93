"""Durable segment logs of Kafka record batches, with a leader-epoch cache.

ARCHITECTURE.md "Segment storage". Modules by role: ``log`` (the `Log`),
``segment`` (one segment's files), ``index`` (offset and time indexes),
``epoch_cache`` (leader-epoch cache and its checkpoint), ``config``
(`LogConfig`), ``files`` (the file-layer port), ``errors``.
"""

from .config import LogConfig
from .epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
)
from .errors import (
    ConfigError,
    CorruptCheckpointError,
    InvalidEpochError,
    InvalidRecordBatchError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from .failures import ReportingFileSystem
from .files import FileHandle, FileSystem, RealFileSystem
from .log import FetchData, Log, LogAppendInfo
from .segment import LogSegment

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "ConfigError",
    "CorruptCheckpointError",
    "EpochEntry",
    "FetchData",
    "FileHandle",
    "FileSystem",
    "InvalidEpochError",
    "InvalidRecordBatchError",
    "LeaderEpochCache",
    "LeaderEpochCheckpointFile",
    "Log",
    "LogAppendInfo",
    "LogClosedError",
    "LogConfig",
    "LogSegment",
    "OffsetOutOfRangeError",
    "RealFileSystem",
    "RecordTooLargeError",
    "ReportingFileSystem",
    "StorageError",
    "UnexpectedAppendOffsetError",
]
