"""``raftlog produce`` and ``raftlog consume``: kafka-console-producer and
kafka-console-consumer, on a real Kafka client (confluent-kafka, i.e.
librdkafka), registered by `data_plane.admin_cli`.

- ``produce --bootstrap-server H:P --topic T [--property parse.key=true
  --property key.separator=:] [--acks all|1|0] [--compression-type
  none|gzip|zstd|lz4|snappy]``: one record per stdin line; exits 0 once
  every record was acknowledged, 1 naming the first delivery error.
  Idempotence is off: InitProducerId is not served yet.
- ``consume --bootstrap-server H:P --topic T [--from-beginning]
  [--partition N --offset O] [--max-messages N] [--timeout-ms MS]
  [--property print.key=true]``: prints values (``key<TAB>value`` with
  print.key). Partitions are assigned directly (``assign``), from the
  earliest offset with ``--from-beginning``, else from the end; ``--offset``
  takes a number, ``earliest`` or ``latest``. Exits after ``--max-messages``
  or ``--timeout-ms`` without a record. ``--group G`` subscribes as a
  member of consumer group G instead (the group's partitions, from its
  committed offsets; what was printed is committed).

Both take ``--command-config FILE`` (`data_plane.client_config`) for a TLS or
SASL listener, and stop at the first refused login or failed TLS handshake
(`AuthenticationWatch`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from .admin_cli import CliError, add_command_config, command_security
from .client_config import ClientConfigError, ClientSecurity

__all__ = ("AuthenticationWatch", "librdkafka_settings", "register_console")


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


def _properties(items: list[str] | None) -> dict[str, str]:
    result = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--property {item!r} is not key=value")
        result[key.strip()] = value
    return result


def cmd_produce(args: argparse.Namespace) -> int:
    props = _properties(args.property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    separator = props.get("key.separator", "\t")
    watch = AuthenticationWatch()
    producer = Producer({
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        "acks": {"all": "all", "-1": "all", "1": "1", "0": "0"}[args.acks],
        "compression.type": args.compression_type,
        "enable.idempotence": False,
        "linger.ms": 5,
        "message.timeout.ms": args.timeout_ms,
        "client.id": "raftlog-console-producer",
    })
    errors: list[str] = []
    acked = [0]

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
        else:
            acked[0] += 1

    for number, raw in enumerate(sys.stdin.buffer, start=1):
        line = raw.rstrip(b"\r\n")
        key: bytes | None = None
        if parse_key:
            key, sep, line = line.partition(separator.encode())
            if not sep:
                raise CliError(f"no key separator {separator!r} on line {number}")
        while True:
            try:
                producer.produce(args.topic, value=line, key=key, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
                watch.raise_if_refused()
        producer.poll(0)
        watch.raise_if_refused()
    # Past message.timeout.ms every record has its delivery report (error or not).
    deadline = time.monotonic() + args.timeout_ms / 1000 + 10
    remaining = producer.flush(0.2)
    while remaining and time.monotonic() < deadline:
        watch.raise_if_refused()
        remaining = producer.flush(0.2)
    if errors:
        print(f"raftlog produce: {len(errors)} record(s) failed, first: {errors[0]}",
              file=sys.stderr)
        return 1
    if remaining:
        print(f"raftlog produce: {remaining} record(s) not acknowledged in time", file=sys.stderr)
        return 1
    return 0


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


def cmd_consume(args: argparse.Namespace) -> int:
    props = _properties(args.property)
    print_key = props.get("print.key", "false").lower() == "true"
    separator = props.get("key.separator", "\t")
    if args.group:
        return _consume_group(args, print_key, separator)
    start = _start_offset(args)
    watch = AuthenticationWatch()
    consumer = Consumer({
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        # librdkafka insists on a group.id; with assign() and no commits it is
        # never joined.
        "group.id": "raftlog-console-consumer-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "client.id": "raftlog-console-consumer",
    })
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
        return _consume_loop(consumer, args, print_key, separator, watch)
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


def _consume_group(args: argparse.Namespace, print_key: bool, separator: str) -> int:
    """``--group``: subscribe as a member of the group; start from its committed
    offsets (else earliest with --from-beginning, else latest), commit what
    was printed (synchronously before leaving, so a restart resumes there)."""
    if args.partition is not None or args.offset is not None:
        raise CliError("--group cannot be combined with --partition/--offset")
    watch = AuthenticationWatch()
    consumer = Consumer({
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        "group.id": args.group,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "client.id": "raftlog-console-consumer",
    })
    try:
        consumer.subscribe([args.topic])
        return _consume_loop(consumer, args, print_key, separator, watch)
    finally:
        with contextlib.suppress(KafkaException):  # nothing consumed since the last commit
            consumer.commit(asynchronous=False)
        consumer.close()


def _consume_loop(consumer: Consumer, args: argparse.Namespace, print_key: bool,
                  separator: str, watch: AuthenticationWatch) -> int:
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
        value = msg.value() or b""
        if print_key:
            key = msg.key()
            out.write((key if key is not None else b"null") + separator.encode())
        out.write(value + b"\n")
        out.flush()
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def register_console(sub: Any) -> None:
    """Add ``produce`` and ``consume`` to the `raftlog` subparsers ``sub``."""
    produce = sub.add_parser("produce", help="stdin lines to a topic (kafka-console-producer)")
    produce.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--property", action="append", metavar="KEY=VALUE",
                         help="parse.key=true, key.separator=SEP")
    produce.add_argument("--acks", choices=("all", "-1", "1", "0"), default="all")
    produce.add_argument("--compression-type", default="none",
                         choices=("none", "gzip", "zstd", "lz4", "snappy"))
    produce.add_argument("--timeout-ms", type=int, default=30_000,
                         help="message.timeout.ms: give up on a record after this long")
    add_command_config(produce)
    produce.set_defaults(func=cmd_produce)

    consume = sub.add_parser("consume", help="print a topic's records (kafka-console-consumer)")
    consume.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", help="a number, earliest or latest (needs --partition)")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int,
                         help="exit after this long without a record")
    consume.add_argument("--property", action="append", metavar="KEY=VALUE",
                         help="print.key=true, key.separator=SEP")
    consume.add_argument("--group", help="consume as a member of this consumer group "
                         "(subscribe; offsets committed)")
    add_command_config(consume)
    consume.set_defaults(func=cmd_consume)
