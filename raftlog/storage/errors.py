"""Typed errors of the storage layer (STYLE.md section 8).

Caller misuse and bad input raise a subclass of `StorageError`; names follow
the Kafka exception each one mirrors.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error raised by `raftlog.storage`."""


class ConfigError(StorageError, ValueError):
    """A log config value is unknown, unparsable or out of range (names the key)."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for configuration {key}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


class OffsetOutOfRangeError(StorageError):
    """Kafka's OFFSET_OUT_OF_RANGE: the offset is below the log start offset or
    above the log end offset."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class UnexpectedAppendOffsetError(StorageError):
    """A follower append does not continue the log (Kafka's
    UnexpectedAppendOffsetException): a gap or an overlap."""

    def __init__(self, message: str, first_offset: int, expected_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.expected_offset = expected_offset


class InvalidEpochError(StorageError):
    """An append carries a leader epoch lower than the log's latest epoch."""

    def __init__(self, epoch: int, latest_epoch: int) -> None:
        super().__init__(f"leader epoch {epoch} is below the log's latest epoch {latest_epoch}")
        self.epoch = epoch
        self.latest_epoch = latest_epoch


class RecordTooLargeError(StorageError):
    """A batch exceeds ``message.max.bytes``, or one append exceeds
    ``segment.bytes`` (Kafka's RecordTooLarge / RecordBatchTooLarge)."""


class InvalidRecordBatchError(StorageError):
    """The appended bytes are not a sequence of valid, whole record batches."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file exists but cannot be parsed (a broken invariant: these
    files are only ever replaced atomically)."""


class LogClosedError(StorageError):
    """The log was closed (or abandoned after a crash) and cannot be used."""
