"""``raftlog produce`` and ``raftlog consume``: kafka-console-producer and
kafka-console-consumer, on a real Kafka client (confluent-kafka, i.e.
librdkafka), registered by `data_plane.admin_cli`.

- ``produce --bootstrap-server H:P --topic T``: one record per stdin line,
  read as Kafka's ``LineMessageReader`` reads it (``--property`` or, as
  Kafka 4 names it, ``--reader-property``): ``parse.key`` /
  ``key.separator`` (tab), ``parse.headers`` / ``headers.delimiter`` (tab)
  / ``headers.separator`` (,) / ``headers.key.separator`` (:),
  ``null.marker`` (a key or value equal to it is null) and
  ``ignore.error`` (a line without the separator is a value, not an
  error). ``--acks`` (Kafka's ``--request-required-acks``, default all,
  with idempotence as Kafka's producer), ``--compression-type`` (or
  ``--compression-codec [CODEC]``, gzip without a value), ``--sync`` (each
  record acknowledged before the next is read) and ``--producer-property
  K=V`` for any other producer setting. Exits 0 once every record was
  acknowledged, 1 naming the first delivery error.
- ``consume --bootstrap-server H:P --topic T``: prints records as Kafka's
  ``DefaultMessageFormatter`` does (``--property`` or ``--formatter-property``:
  ``print.timestamp``, ``print.partition``, ``print.offset``,
  ``print.headers``, ``print.key``, ``print.value``, ``key.separator``,
  ``line.separator``, ``headers.separator``, ``null.literal``). Partitions
  are assigned directly (``assign``), from the earliest offset with
  ``--from-beginning``, else from the end; ``--offset`` takes a number,
  ``earliest`` or ``latest``. Exits after ``--max-messages`` or
  ``--timeout-ms`` without a record. ``--group G`` subscribes as a member
  of consumer group G instead (the group's partitions, from its committed
  offsets; what was printed is committed); ``--include REGEX`` subscribes
  to every topic the regular expression matches. ``--isolation-level``
  is read_uncommitted unless given, as in Kafka's tool;
  ``--consumer-property K=V`` sets any other consumer setting.

Both take ``--command-config FILE`` (`data_plane.client_config`; Kafka's
older ``--producer.config`` and ``--consumer.config`` name the same file)
for a TLS or SASL listener, and stop at the first refused login or failed
TLS handshake (`AuthenticationWatch`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from .admin_cli import CliError, add_command_config, command_security
from .client_config import ClientConfigError, ClientSecurity

__all__ = ("AuthenticationWatch", "add_config_file", "client_properties", "librdkafka_settings",
           "new_client", "register_console")


class AuthenticationWatch:
    """A librdkafka ``error_cb`` that keeps the first refused login or
    failed TLS handshake.

    librdkafka reports a refused SASL login, or a broker certificate it
    cannot verify, as an ordinary error and keeps reconnecting until the
    command's own timeout runs out; Kafka's tools stop at the first
    authentication failure (an SSL handshake failure is one), since
    retrying cannot mend it. Commands call `raise_if_refused` where they
    wait, to do the same."""

    def __init__(self) -> None:
        self.refusal: str | None = None

    def __call__(self, error: KafkaError) -> None:
        if self.refusal is None:
            if error.code() == KafkaError._AUTHENTICATION:
                self.refusal = f"authentication failed: {error.str()}"
            elif error.code() == KafkaError._SSL:
                self.refusal = f"TLS handshake failed: {error.str()}"

    def raise_if_refused(self) -> None:
        """Raise `CliError` with librdkafka's reason if a login was refused
        or a TLS handshake failed."""
        if self.refusal is not None:
            raise CliError(self.refusal)


def librdkafka_settings(bootstrap: str, security: ClientSecurity,
                        watch: AuthenticationWatch) -> dict[str, Any]:
    """The settings every librdkafka client of a command starts from:
    ``bootstrap.servers``, the ``--command-config`` security and, with TLS
    or SASL, ``watch`` as the error callback (on PLAINTEXT, librdkafka logs
    its errors itself, as it always has)."""
    try:
        client = security.librdkafka()
    except ClientConfigError as exc:  # a delegation token: librdkafka cannot send it
        raise CliError(str(exc)) from None
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, **client}
    if security.protocol != "PLAINTEXT":
        settings["error_cb"] = watch
    return settings


def _properties(items: list[str] | None, option: str = "--property") -> dict[str, str]:
    result = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"{option} {item!r} is not key=value")
        result[key.strip()] = value
    return result


def _flag(props: dict[str, str], key: str, default: bool) -> bool:
    text = props.get(key)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise CliError(f"--property {key}={text}: expected true or false")
    return text.strip().lower() == "true"


def client_properties(items: list[str] | None, option: str,
                       fixed: dict[str, Any]) -> dict[str, Any]:
    """``--producer-property``/``--consumer-property`` K=V, over ``fixed``."""
    extra = _properties(items, option)
    security = sorted(k for k in extra if k.startswith(("security.", "sasl.", "ssl.")))
    if security:
        raise CliError(f"{option} {', '.join(security)}: give security settings in "
                       "--command-config")
    return {**fixed, **extra}


def new_client(factory: Any, settings: dict[str, Any], option: str) -> Any:
    """A librdkafka client; a setting it refuses is a `CliError` naming it."""
    try:
        return factory(settings)
    except KafkaException as exc:
        raise CliError(f"{option}: {exc.args[0].str()}") from None


@dataclass(frozen=True, slots=True)
class LineReader:
    """How kafka-console-producer's ``LineMessageReader`` splits a line:
    ``[headers<delimiter>][key<separator>]value``."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def of(cls, props: dict[str, str]) -> LineReader:
        def sep(key: str, default: str) -> bytes:
            value = props.get(key, default)
            if not value:
                raise CliError(f"--property {key} may not be empty")
            return value.encode()

        marker = props.get("null.marker")
        reader = cls(
            parse_key=_flag(props, "parse.key", False), key_separator=sep("key.separator", "\t"),
            parse_headers=_flag(props, "parse.headers", False),
            headers_delimiter=sep("headers.delimiter", "\t"),
            headers_separator=sep("headers.separator", ","),
            headers_key_separator=sep("headers.key.separator", ":"),
            null_marker=marker.encode() if marker else None,
            ignore_error=_flag(props, "ignore.error", False))
        if reader.parse_headers:
            # Kafka's reader refuses these pairs too: a line could not be split.
            for (one, a), (other, b) in itertools.combinations((
                    ("headers.delimiter", reader.headers_delimiter),
                    ("headers.separator", reader.headers_separator),
                    ("headers.key.separator", reader.headers_key_separator)), 2):
                if a == b:
                    raise CliError(f"{one} and {other} may not be equal")
        return reader

    def read(self, line: bytes, number: int
             ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of one line; `CliError` for a line without a
        separator it needs (unless ``ignore.error``)."""
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            text, found, rest = line.partition(self.headers_delimiter)
            if found:
                line = rest
                headers = [self._header(h, number) for h in text.split(self.headers_separator)
                           if h]
            elif not self.ignore_error:
                raise CliError(f"no headers delimiter {self.headers_delimiter.decode()!r} "
                               f"on line {number}")
        key: bytes | None = None
        if self.parse_key:
            head, found, rest = line.partition(self.key_separator)
            if found:
                key, line = head, rest
            elif not self.ignore_error:
                raise CliError(f"no key separator {self.key_separator.decode()!r} on line "
                               f"{number}")
        return self._null(key), self._null(line), headers

    def _header(self, text: bytes, number: int) -> tuple[str, bytes | None]:
        name, found, value = text.partition(self.headers_key_separator)
        if not found and self.ignore_error:  # Kafka's reader: a header without a value
            return name.decode(errors="replace"), None
        if not found:
            raise CliError(f"header {text.decode(errors='replace')!r} on line {number} has no "
                           f"{self.headers_key_separator.decode()!r}")
        return name.decode(errors="replace"), self._null(value)

    def _null(self, field: bytes | None) -> bytes | None:
        return None if field is None or field == self.null_marker else field


def cmd_produce(args: argparse.Namespace) -> int:
    reader = LineReader.of(_properties(args.property))
    watch = AuthenticationWatch()
    acks = {"all": "all", "-1": "all", "1": "1", "0": "0"}[args.acks]
    producer = new_client(Producer, client_properties(args.producer_property,
                                                    "--producer-property", {
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        "acks": acks,
        "compression.type": args.compression_type,
        # As Kafka's producer since 3.0: idempotent when every in-sync
        # replica acknowledges (librdkafka allows it with acks=all only).
        "enable.idempotence": acks == "all",
        "linger.ms": 5,
        "message.timeout.ms": args.timeout_ms,
        "client.id": "raftlog-console-producer",
    }), "--producer-property")
    errors: list[str] = []
    acked = [0]

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
        else:
            acked[0] += 1

    for number, raw in enumerate(sys.stdin.buffer, start=1):
        key, value, headers = reader.read(raw.rstrip(b"\r\n"), number)
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, headers=headers or None,
                                 on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
                watch.raise_if_refused()
        producer.poll(0)
        watch.raise_if_refused()
        if args.sync:
            _drain(producer, watch, args.timeout_ms)
            if errors:
                break
    remaining = _drain(producer, watch, args.timeout_ms)
    if errors:
        print(f"raftlog produce: {len(errors)} record(s) failed, first: {errors[0]}",
              file=sys.stderr)
        return 1
    if remaining:
        print(f"raftlog produce: {remaining} record(s) not acknowledged in time", file=sys.stderr)
        return 1
    return 0


def _drain(producer: Any, watch: AuthenticationWatch, timeout_ms: int) -> int:
    """Flush; past message.timeout.ms every record has its delivery report
    (error or not). The records still waiting."""
    deadline = time.monotonic() + timeout_ms / 1000 + 10
    remaining = int(producer.flush(0.2))
    while remaining and time.monotonic() < deadline:
        watch.raise_if_refused()
        remaining = int(producer.flush(0.2))
    return remaining


def _start_offset(args: argparse.Namespace) -> int:
    if args.offset is not None:
        if args.partition is None:
            raise CliError("--offset needs --partition")
        named = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}
        if args.offset in named:
            return named[args.offset]
        if not args.offset.isdigit():
            raise CliError(f"--offset {args.offset!r} is not a number, earliest or latest")
        return int(args.offset)
    return OFFSET_BEGINNING if args.from_beginning else OFFSET_END


@dataclass(frozen=True, slots=True)
class MessageFormatter:
    """Kafka's ``DefaultMessageFormatter``: the chosen fields of a record in
    the order timestamp, partition, offset, headers, key, value, separated
    by ``key.separator`` and ended by ``line.separator``."""

    timestamp: bool = False
    partition: bool = False
    offset: bool = False
    headers: bool = False
    key: bool = False
    value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def of(cls, props: dict[str, str]) -> MessageFormatter:
        return cls(
            timestamp=_flag(props, "print.timestamp", False),
            partition=_flag(props, "print.partition", False),
            offset=_flag(props, "print.offset", False),
            headers=_flag(props, "print.headers", False),
            key=_flag(props, "print.key", False), value=_flag(props, "print.value", True),
            key_separator=props.get("key.separator", "\t").encode(),
            line_separator=props.get("line.separator", "\n").encode(),
            headers_separator=props.get("headers.separator", ",").encode(),
            null_literal=props.get("null.literal", "null").encode())

    def format(self, msg: Any) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind, ms = msg.timestamp()
            fields.append(_TIMESTAMP_TYPES[kind].encode() + b":" + str(ms).encode()
                          if kind in _TIMESTAMP_TYPES else b"NO_TIMESTAMP")
        if self.partition:
            fields.append(b"Partition:" + str(msg.partition()).encode())
        if self.offset:
            fields.append(b"Offset:" + str(msg.offset()).encode())
        if self.headers:
            headers = msg.headers()
            fields.append(self.headers_separator.join(
                name.encode() + b":" + (self.null_literal if value is None else value)
                for name, value in headers) if headers else b"NO_HEADERS")
        if self.key:
            key = msg.key()
            fields.append(self.null_literal if key is None else key)
        if self.value:
            value = msg.value()
            fields.append(self.null_literal if value is None else value)
        return self.key_separator.join(fields) + self.line_separator


_TIMESTAMP_TYPES: Final = {TIMESTAMP_CREATE_TIME: "CreateTime",
                           TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}


def cmd_consume(args: argparse.Namespace) -> int:
    formatter = MessageFormatter.of(_properties(args.property))
    if (args.topic is None) == (args.include is None):
        raise CliError("give --topic T or --include REGEX")
    if args.group or args.include:
        return _consume_group(args, formatter)
    start = _start_offset(args)
    watch = AuthenticationWatch()
    consumer = new_client(Consumer, client_properties(args.consumer_property,
                                                    "--consumer-property", {
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        # librdkafka insists on a group.id; with assign() and no commits it is
        # never joined.
        "group.id": "raftlog-console-consumer-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": args.isolation_level,
        "client.id": "raftlog-console-consumer",
    }), "--consumer-property")
    try:
        metadata = _topic_metadata(consumer, args.topic, watch)
        topic = metadata.topics.get(args.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            reason = topic.error.str() if topic is not None and topic.error else "unknown topic"
            raise CliError(f"topic {args.topic}: {reason}")
        partitions = sorted(topic.partitions)
        if args.partition is not None:
            if args.partition not in partitions:
                raise CliError(f"topic {args.topic} has no partition {args.partition}")
            partitions = [args.partition]
        consumer.assign([ConfluentTopicPartition(args.topic, p, start) for p in partitions])
        return _consume_loop(consumer, args, formatter, watch)
    finally:
        consumer.close()


def _topic_metadata(consumer: Consumer, topic: str, watch: AuthenticationWatch,
                    timeout_s: float = 10) -> Any:
    """``topic``'s metadata, asked in short rounds so that a refused login
    (reported between them, by ``poll``) ends the wait. Raises `CliError`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.list_topics(topic, timeout=min(1.0, timeout_s))
        except KafkaException as exc:
            consumer.poll(0)  # serves error_cb
            watch.raise_if_refused()
            if time.monotonic() >= deadline:
                raise CliError(f"topic {topic}: {exc.args[0].str()}") from None


def _consume_group(args: argparse.Namespace, formatter: MessageFormatter) -> int:
    """``--group`` or ``--include``: subscribe as a member of the group (a
    fresh ``console-consumer-N`` group for ``--include`` without one, as
    Kafka's tool makes); start from its committed offsets (else earliest
    with --from-beginning, else latest), commit what was printed
    (synchronously before leaving, so a restart resumes there)."""
    if args.partition is not None or args.offset is not None:
        raise CliError("--group and --include cannot be combined with --partition/--offset")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as exc:
            raise CliError(f"--include {args.include!r}: {exc}") from None
    group = args.group or f"console-consumer-{random.randrange(100_000)}"
    watch = AuthenticationWatch()
    consumer = new_client(Consumer, client_properties(args.consumer_property,
                                                    "--consumer-property", {
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        "group.id": group,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": args.isolation_level,
        "client.id": "raftlog-console-consumer",
    }), "--consumer-property")
    try:
        # librdkafka subscribes by pattern to a name that starts with ^.
        consumer.subscribe([args.topic if args.include is None else "^" + args.include])
        return _consume_loop(consumer, args, formatter, watch)
    finally:
        with contextlib.suppress(KafkaException):  # nothing consumed since the last commit
            consumer.commit(asynchronous=False)
        consumer.close()


def _consume_loop(consumer: Consumer, args: argparse.Namespace, formatter: MessageFormatter,
                  watch: AuthenticationWatch) -> int:
    seen = 0
    idle_since = time.monotonic()
    out = sys.stdout.buffer
    while args.max_messages is None or seen < args.max_messages:
        msg = consumer.poll(0.2)
        watch.raise_if_refused()
        if msg is None:
            if args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                break
            continue
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            if not error.retriable():
                raise CliError(f"consume failed: {error.str()}")
            continue
        idle_since = time.monotonic()
        seen += 1
        out.write(formatter.format(msg))
        out.flush()
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def add_config_file(parser: argparse.ArgumentParser, old_name: str) -> None:
    """``--command-config`` and Kafka's older name for the same file."""
    add_command_config(parser)
    parser.add_argument(old_name, dest="command_config", metavar="FILE",
                        help="the same as --command-config (Kafka's older name)")


def register_console(sub: Any) -> None:
    """Add ``produce`` and ``consume`` to the `raftlog` subparsers ``sub``."""
    produce = sub.add_parser("produce", help="stdin lines to a topic (kafka-console-producer)")
    produce.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--property", "--reader-property", action="append",
                         metavar="KEY=VALUE",
                         help="how a line is read: parse.key=true, key.separator=SEP, "
                              "parse.headers=true, headers.delimiter=SEP, "
                              "headers.separator=SEP, headers.key.separator=SEP, "
                              "null.marker=TEXT, ignore.error=true")
    produce.add_argument("--acks", "--request-required-acks", choices=("all", "-1", "1", "0"),
                         default="all")
    compression = produce.add_mutually_exclusive_group()
    compression.add_argument("--compression-type", default="none", choices=_CODECS)
    compression.add_argument("--compression-codec", dest="compression_type", nargs="?",
                             const="gzip", choices=_CODECS,
                             help="Kafka's name for --compression-type (gzip without a value)")
    produce.add_argument("--sync", action="store_true",
                         help="each record acknowledged before the next line is read")
    produce.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                         help="any other producer setting (librdkafka names Java's common ones "
                              "alike: linger.ms, batch.size, enable.idempotence ...)")
    produce.add_argument("--timeout-ms", type=int, default=30_000,
                         help="message.timeout.ms: give up on a record after this long")
    add_config_file(produce, "--producer.config")
    produce.set_defaults(func=cmd_produce)

    consume = sub.add_parser("consume", help="print a topic's records (kafka-console-consumer)")
    consume.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    consume.add_argument("--topic")
    consume.add_argument("--include", metavar="REGEX",
                         help="every topic this regular expression matches (subscribes)")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", help="a number, earliest or latest (needs --partition)")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int,
                         help="exit after this long without a record")
    consume.add_argument("--property", "--formatter-property", action="append",
                         metavar="KEY=VALUE",
                         help="what is printed: print.timestamp, print.partition, print.offset, "
                              "print.headers, print.key, print.value (=true/false), "
                              "key.separator, line.separator, headers.separator, null.literal")
    consume.add_argument("--group", help="consume as a member of this consumer group "
                         "(subscribe; offsets committed)")
    consume.add_argument("--isolation-level", default="read_uncommitted",
                         choices=("read_uncommitted", "read_committed"),
                         help="read_committed: only committed transactions' records, up to the "
                              "last stable offset")
    consume.add_argument("--consumer-property", action="append", metavar="KEY=VALUE",
                         help="any other consumer setting")
    add_config_file(consume, "--consumer.config")
    consume.set_defaults(func=cmd_consume)


_CODECS: Final = ("none", "gzip", "zstd", "lz4", "snappy")
