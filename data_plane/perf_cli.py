"""``raftlog producer-perf-test`` and ``raftlog consumer-perf-test``:
kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh on a real Kafka
client (confluent-kafka, i.e. librdkafka), registered by
`data_plane.admin_cli`.

The producer sends ``--num-records`` records of ``--record-size`` bytes (or
lines of ``--payload-file``) at up to ``--throughput`` records a second (-1:
as fast as it can), and prints what Kafka's tool prints: a line every five
seconds, then the totals with the latency percentiles. Latency is each
record's time from ``produce`` to its delivery report, as Kafka's tool
measures from ``send`` to its callback. ``--producer-props K=V ...`` are
librdkafka settings (its names for Java's common ones are alike: acks,
linger.ms, batch.size, compression.type ...).

The consumer reads ``--messages`` records from the start of ``--topic`` in
a group and prints Kafka's CSV line of totals and rates.
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, Producer

from .admin_cli import CliError, command_security
from .console_cli import (
    AuthenticationWatch,
    add_config_file,
    client_properties,
    librdkafka_settings,
    new_client,
)

__all__ = ("latency_summary", "register_perf")

_WINDOW_S: Final = 5.0
_MB: Final = 1024 * 1024


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.payload_file is not None:
        try:
            with open(args.payload_file, "rb") as f:
                text = f.read()
        except OSError as exc:
            raise CliError(f"--payload-file: cannot read {args.payload_file}: "
                           f"{exc.strerror}") from None
        delimiter = args.payload_delimiter.encode().decode("unicode_escape").encode()
        payloads = [p for p in text.split(delimiter) if p]
        if not payloads:
            raise CliError(f"--payload-file {args.payload_file} has no payloads")
        return payloads
    if args.record_size is None or args.record_size < 0:
        raise CliError("give --record-size N or --payload-file FILE")
    # Kafka's tool fills the record with random uppercase letters.
    rng = random.Random(0)
    return [bytes(rng.randrange(65, 91) for _ in range(args.record_size))]


def latency_summary(latencies_ms: list[float]) -> tuple[float, float, int, int, int, int]:
    """(average, max, 50th, 95th, 99th, 99.9th) of ``latencies_ms``, the
    percentiles as whole milliseconds as Kafka's tool prints them."""
    if not latencies_ms:
        return 0.0, 0.0, 0, 0, 0, 0
    ordered = sorted(latencies_ms)

    def nth(fraction: float) -> int:
        return int(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))])

    return (sum(ordered) / len(ordered), ordered[-1], nth(0.5), nth(0.95), nth(0.99),
            nth(0.999))


class _Window:
    """The running totals Kafka's tool prints every five seconds."""

    def __init__(self, now: float) -> None:
        self.reset(now)

    def reset(self, now: float) -> None:
        self.start = now
        self.count = 0
        self.bytes = 0
        self.latency_sum = 0.0
        self.latency_max = 0.0

    def record(self, size: int, latency_ms: float) -> None:
        self.count += 1
        self.bytes += size
        self.latency_sum += latency_ms
        self.latency_max = max(self.latency_max, latency_ms)

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        return (f"{self.count} records sent, {self.count / elapsed:.1f} records/sec "
                f"({self.bytes / elapsed / _MB:.2f} MB/sec), "
                f"{self.latency_sum / max(self.count, 1):.1f} ms avg latency, "
                f"{self.latency_max:.1f} ms max latency.")


def cmd_producer_perf_test(args: argparse.Namespace) -> int:
    if args.num_records < 1:
        raise CliError("--num-records must be at least 1")
    payloads = _payloads(args)
    watch = AuthenticationWatch()
    producer = new_client(Producer, client_properties(args.producer_props, "--producer-props", {
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        "client.id": "raftlog-producer-perf-test"}), "--producer-props")
    latencies: list[float] = []
    errors: list[str] = []
    started = time.monotonic()
    window = _Window(started)
    sizes = [len(p) for p in payloads]
    out: Callable[[str], None] = print

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err.str())
            return
        latency_ms = (msg.latency() or 0.0) * 1000
        latencies.append(latency_ms)
        window.record(len(msg.value() or b""), latency_ms)

    interval = 1.0 / args.throughput if args.throughput > 0 else 0.0
    for i in range(args.num_records):
        if interval:
            ahead = started + i * interval - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
        while True:
            try:
                producer.produce(args.topic, payloads[i % len(payloads)], on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        watch.raise_if_refused()
        now = time.monotonic()
        if now - window.start >= _WINDOW_S:
            out(window.line(now))
            window.reset(now)
    remaining = producer.flush(max(60.0, args.num_records / 1000))
    elapsed = time.monotonic() - started
    sent = len(latencies)
    total_bytes = sum(sizes[i % len(sizes)] for i in range(sent))
    avg, worst, p50, p95, p99, p999 = latency_summary(latencies)
    out(f"{sent} records sent, {sent / elapsed:.1f} records/sec "
        f"({total_bytes / elapsed / _MB:.2f} MB/sec), {avg:.2f} ms avg latency, "
        f"{worst:.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, "
        f"{p999} ms 99.9th.")
    if errors or remaining:
        print(f"raftlog producer-perf-test: {len(errors)} record(s) failed"
              + (f", first: {errors[0]}" if errors else "")
              + (f"; {remaining} not acknowledged in time" if remaining else ""),
              file=sys.stderr)
        return 1
    return 0


def cmd_consumer_perf_test(args: argparse.Namespace) -> int:
    if args.messages < 1:
        raise CliError("--messages must be at least 1")
    watch = AuthenticationWatch()
    consumer = Consumer({
        **librdkafka_settings(args.bootstrap_server, command_security(args), watch),
        "group.id": args.group or f"perf-consumer-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "enable.auto.commit": True, "client.id": "raftlog-consumer-perf-test",
    })
    assigned_at: list[float] = []
    consumer.subscribe([args.topic],
                       on_assign=lambda c, ps: assigned_at.append(time.monotonic()))
    started = time.monotonic()
    wall_start = datetime.datetime.now()
    count = size = 0
    last_record = started
    try:
        while count < args.messages:
            msg = consumer.poll(0.2)
            watch.raise_if_refused()
            now = time.monotonic()
            if msg is None or msg.error() is not None:
                if (now - last_record) * 1000 > args.timeout and count < args.messages:
                    print(f"WARNING: Exiting before consuming the expected number of messages: "
                          f"timeout ({args.timeout} ms) exceeded. You can use the --timeout "
                          f"option to increase the timeout.", file=sys.stderr)
                    break
                continue
            count += 1
            size += len(msg.value() or b"")
            last_record = now
    finally:
        consumer.close()
    ended = time.monotonic()
    elapsed = max(ended - started, 1e-9)
    rebalance_ms = (assigned_at[0] - started) * 1000 if assigned_at else 0.0
    fetch_s = max(elapsed - rebalance_ms / 1000, 1e-9)
    mb = size / _MB
    wall_end = wall_start + datetime.timedelta(seconds=elapsed)
    fmt = "%Y-%m-%d %H:%M:%S:%f"
    print("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
          "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    print(f"{wall_start.strftime(fmt)[:-3]}, {wall_end.strftime(fmt)[:-3]}, {mb:.4f}, "
          f"{mb / elapsed:.4f}, {count}, {count / elapsed:.4f}, {math.floor(rebalance_ms)}, "
          f"{math.floor(fetch_s * 1000)}, {mb / fetch_s:.4f}, {count / fetch_s:.4f}")
    return 0 if count >= args.messages else 1


def register_perf(sub: Any) -> None:
    """Add ``producer-perf-test`` and ``consumer-perf-test`` to ``sub``."""
    producer = sub.add_parser(
        "producer-perf-test", help="produce load and print throughput and latency "
        "(kafka-producer-perf-test.sh)")
    producer.add_argument("--topic", required=True)
    producer.add_argument("--num-records", type=int, required=True)
    size = producer.add_mutually_exclusive_group(required=True)
    size.add_argument("--record-size", type=int, metavar="BYTES")
    size.add_argument("--payload-file", metavar="FILE",
                      help="payloads, one per --payload-delimiter (a new line by default), "
                           "sent in turn")
    producer.add_argument("--payload-delimiter", default="\\n")
    producer.add_argument("--throughput", type=float, required=True,
                          help="records a second at most; -1: no limit")
    producer.add_argument("--producer-props", nargs="+", metavar="K=V",
                          help="producer settings, e.g. acks=all linger.ms=5")
    producer.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    add_config_file(producer, "--producer.config")
    producer.set_defaults(func=cmd_producer_perf_test)

    consumer = sub.add_parser(
        "consumer-perf-test", help="consume and print throughput (kafka-consumer-perf-test.sh)")
    consumer.add_argument("--topic", required=True)
    consumer.add_argument("--messages", type=int, required=True)
    consumer.add_argument("--group", help="the group (a fresh perf-consumer-... by default)")
    consumer.add_argument("--from-latest", action="store_true",
                          help="start at the end when the group has no offsets")
    consumer.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                          help="give up after this long without a record")
    consumer.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    add_config_file(consumer, "--consumer.config")
    consumer.set_defaults(func=cmd_consumer_perf_test)
