"""`raftlog produce`'s line reader and `raftlog consume`'s formatter: Kafka's
``LineMessageReader`` and ``DefaultMessageFormatter`` properties."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
)

from data_plane.admin_cli import CliError
from data_plane.console_cli import LineReader, MessageFormatter


def test_a_plain_line_is_the_value() -> None:
    assert LineReader.of({}).read(b"a\tb:c", 1) == (None, b"a\tb:c", [])


def test_keys_and_headers_are_split_as_kafka_splits_them() -> None:
    reader = LineReader.of({"parse.key": "true", "key.separator": ":", "parse.headers": "true"})
    assert reader.read(b"h1:v1,h2:v2\tk:v:w", 1) == (
        b"k", b"v:w", [("h1", b"v1"), ("h2", b"v2")])
    assert reader.read(b"\tk:v", 2) == (b"k", b"v", [])  # no headers before the delimiter
    custom = LineReader.of({"parse.headers": "true", "headers.delimiter": "|",
                            "headers.separator": ";", "headers.key.separator": "="})
    assert custom.read(b"a=1;b=2|value", 1) == (None, b"value", [("a", b"1"), ("b", b"2")])


def test_the_null_marker_makes_a_key_value_or_header_value_null() -> None:
    reader = LineReader.of({"parse.key": "true", "parse.headers": "true",
                            "null.marker": "<null>"})
    assert reader.read(b"h:<null>\t<null>\t<null>", 1) == (None, None, [("h", None)])
    assert reader.read(b"h:x\tkey\t<nul>", 2) == (b"key", b"<nul>", [("h", b"x")])


def test_a_missing_separator_is_an_error_unless_ignored() -> None:
    strict = LineReader.of({"parse.key": "true"})
    with pytest.raises(CliError, match=r"no key separator '\\t' on line 3"):
        strict.read(b"novalue", 3)
    lenient = LineReader.of({"parse.key": "true", "ignore.error": "true"})
    assert lenient.read(b"novalue", 3) == (None, b"novalue", [])
    headers = LineReader.of({"parse.headers": "true"})
    with pytest.raises(CliError, match="no headers delimiter"):
        headers.read(b"x", 1)
    with pytest.raises(CliError, match="header 'bare' on line 1 has no ':'"):
        headers.read(b"bare\tv", 1)
    loose = LineReader.of({"parse.headers": "true", "ignore.error": "true"})
    assert loose.read(b"bare\tv", 1) == (None, b"v", [("bare", None)])


@pytest.mark.parametrize(("props", "error"), [
    ({"parse.key": "yes"}, "--property parse.key=yes: expected true or false"),
    ({"key.separator": ""}, "--property key.separator may not be empty"),
    ({"parse.headers": "true", "headers.separator": "|", "headers.delimiter": "|"},
     "headers.delimiter and headers.separator may not be equal"),
    ({"parse.headers": "true", "headers.key.separator": ","},
     "headers.separator and headers.key.separator may not be equal"),
])
def test_unusable_reader_properties_are_refused(props: dict[str, str], error: str) -> None:
    with pytest.raises(CliError, match=error.replace("|", r"\|")):
        LineReader.of(props)


class _Message:
    def __init__(self, *, key: bytes | None = b"k", value: bytes | None = b"v",
                 headers: list[tuple[str, bytes | None]] | None = None,
                 timestamp: tuple[int, int] = (TIMESTAMP_CREATE_TIME, 1700000000123),
                 partition: int = 2, offset: int = 41) -> None:
        self._fields: dict[str, Any] = {"key": key, "value": value, "headers": headers,
                                        "timestamp": timestamp, "partition": partition,
                                        "offset": offset}

    def __getattr__(self, name: str) -> Any:
        return lambda: self._fields[name]


def test_the_default_format_is_the_value_alone() -> None:
    assert MessageFormatter.of({}).format(_Message()) == b"v\n"
    assert MessageFormatter.of({}).format(_Message(value=None)) == b"null\n"


def test_every_field_in_kafkas_order() -> None:
    formatter = MessageFormatter.of({p: "true" for p in (
        "print.timestamp", "print.partition", "print.offset", "print.headers", "print.key")})
    message = _Message(headers=[("a", b"1"), ("b", None)])
    assert formatter.format(message) == b"CreateTime:1700000000123\tPartition:2\tOffset:41\ta:1,b:null\tk\tv\n"
    assert formatter.format(_Message(timestamp=(TIMESTAMP_LOG_APPEND_TIME, 5), key=None)) == \
        b"LogAppendTime:5\tPartition:2\tOffset:41\tNO_HEADERS\tnull\tv\n"
    assert formatter.format(_Message(timestamp=(TIMESTAMP_NOT_AVAILABLE, -1))).startswith(
        b"NO_TIMESTAMP\t")


def test_separators_null_literal_and_no_value() -> None:
    formatter = MessageFormatter.of({"print.key": "true", "print.value": "false",
                                     "key.separator": " | ", "line.separator": ";",
                                     "null.literal": "-", "print.offset": "true"})
    assert formatter.format(_Message(key=None)) == b"Offset:41 | -;"
    headers = MessageFormatter.of({"print.headers": "true", "headers.separator": "&"})
    assert headers.format(_Message(headers=[("x", b"1"), ("y", b"2")])) == b"x:1&y:2\tv\n"
