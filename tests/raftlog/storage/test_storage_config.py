"""LogConfig: Kafka names and defaults, parsing and validation."""

from __future__ import annotations

import pytest

from raftlog.storage import ConfigError, LogConfig
from raftlog.storage.config import LONG_MAX


def test_defaults_are_kafkas() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.index_interval_bytes == 4096
    assert c.segment_index_bytes == 10485760
    assert c.retention_ms == 604800000
    assert c.retention_bytes == -1
    assert c.flush_messages == LONG_MAX
    assert c.flush_ms == LONG_MAX
    assert c.message_max_bytes == 1048588
    assert not c.flushes_every_append


def test_from_properties_parses_kafka_names() -> None:
    c = LogConfig.from_properties(
        {"segment.bytes": "2048", "flush.messages": "1", "retention.ms": "-1",
         "message.timestamp.type": "LogAppendTime"}
    )
    assert (c.segment_bytes, c.flush_messages, c.retention_ms) == (2048, 1, -1)
    assert c.message_timestamp_type == "LogAppendTime"
    assert c.flushes_every_append
    assert LogConfig.from_properties(c.to_properties()) == c


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "10"),
        ("segment.bytes", str(1 << 31)),
        ("flush.messages", "0"),
        ("retention.bytes", "-2"),
        ("segment.ms", "abc"),
        ("message.timestamp.type", "WallClock"),
        ("no.such.key", "1"),
    ],
)
def test_from_properties_names_the_bad_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_properties({key: value})
    assert info.value.key == key
    assert key in str(info.value)


def test_constructor_validates_too() -> None:
    with pytest.raises(ConfigError):
        LogConfig(index_interval_bytes=-1)
