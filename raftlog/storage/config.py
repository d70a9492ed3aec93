"""Per-log configuration with Kafka's topic-config names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from raftlog.storage.errors import ConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
_DAY_MS = 24 * 60 * 60 * 1000

# Kafka key -> dataclass field; every key is parsed as an integer.
_KEYS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "message.max.bytes": "message_max_bytes",
    "message.timestamp.type": "message_timestamp_type",
}
#: The values of ``message.timestamp.type``.
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one log (Kafka topic configs; defaults are Kafka's).

    Ranges follow Kafka's ``LogConfig`` validators, except that
    ``segment.bytes`` may go down to 14 bytes (Kafka 3.x's lower bound, not
    4.0's 1 MiB) so tests can roll often. Raises `ConfigError` naming the key.
    """

    # Roll to a new segment once the active one would exceed this size.
    segment_bytes: int = 1 << 30
    # Roll once the first batch of the active segment is older than this.
    segment_ms: int = 7 * _DAY_MS
    # An offset/time index entry after at least this many bytes of batches.
    index_interval_bytes: int = 4096
    # Index size bound: 8-byte offset entries, 12-byte time entries.
    segment_index_bytes: int = 10 * 1024 * 1024
    # Delete a segment once its newest record is older than this; -1 keeps all.
    retention_ms: int = 7 * _DAY_MS
    # Delete oldest segments while the log is bigger than this; -1 keeps all.
    retention_bytes: int = -1
    # fdatasync after this many records since the last flush; 1 = every append.
    flush_messages: int = LONG_MAX
    # fdatasync when this long has passed since the last flush.
    flush_ms: int = LONG_MAX
    # Largest record batch accepted (Kafka's max.message.bytes default).
    message_max_bytes: int = 1048588
    # CreateTime: the producer's timestamps; LogAppendTime: the leader stamps
    # each batch with its clock as it appends it.
    message_timestamp_type: str = "CreateTime"

    def __post_init__(self) -> None:
        _check("segment.bytes", self.segment_bytes, 14, INT_MAX)
        _check("segment.ms", self.segment_ms, 1, LONG_MAX)
        _check("index.interval.bytes", self.index_interval_bytes, 0, INT_MAX)
        _check("segment.index.bytes", self.segment_index_bytes, 12, INT_MAX)
        _check("retention.ms", self.retention_ms, -1, LONG_MAX)
        _check("retention.bytes", self.retention_bytes, -1, LONG_MAX)
        _check("flush.messages", self.flush_messages, 1, LONG_MAX)
        _check("flush.ms", self.flush_ms, 0, LONG_MAX)
        _check("message.max.bytes", self.message_max_bytes, 0, INT_MAX)
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ConfigError("message.timestamp.type", self.message_timestamp_type,
                              f"must be one of {', '.join(TIMESTAMP_TYPES)}")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build a config from Kafka-named string properties; unset keys keep defaults.

        Raises `ConfigError` for an unknown key, a non-integer value, or a
        value out of range, naming the key.
        """
        values: dict[str, int | str] = {}
        for key, raw in props.items():
            name = _KEYS.get(key)
            if name is None:
                raise ConfigError(key, raw, "unknown log configuration")
            if name == "message_timestamp_type":
                values[name] = str(raw).strip()
                continue
            try:
                values[name] = int(str(raw).strip())
            except ValueError:
                raise ConfigError(key, raw, "not an integer") from None
        return cls(**values)  # type: ignore[arg-type]  # each key parsed to its field's type

    def to_properties(self) -> dict[str, str]:
        """The inverse of `from_properties`: every key with its value."""
        by_field = {f: k for k, f in _KEYS.items()}
        return {by_field[f.name]: str(getattr(self, f.name)) for f in fields(self)}

    @property
    def flushes_every_append(self) -> bool:
        """``flush.messages=1``: every append is synced before it returns."""
        return self.flush_messages == 1


def _check(key: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, value, f"must be an integer in [{low}, {high}]")
