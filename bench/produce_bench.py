"""Produce/consume benchmark (issue 5 §5): raftlog vs NATS JetStream R3.

    .venv/bin/python bench/produce_bench.py [--quick] [--records N] [--rate R]

In the shape of kafka-producer-perf-test. Both systems run 3 server processes
on loopback, with the client in this process: one system at a time for the
full-load, consume and fixed-rate phases; both at once for the one-at-a-time
phase, whose blocks are interleaved (``--one-rounds`` rounds, the system that
goes first alternating), so that the host's drift weighs on both alike.

raftlog: a 3-node combined-mode cluster (``data_plane.local_cluster``),
topics with RF 3 and ``min.insync.replicas=2``, driven by the
confluent-kafka (librdkafka) producer with ``acks=all``:

- full-load produce to a 6-partition topic, no compression and zstd: MB/s,
  records/s, and p50/p99 latency from the delivery reports
  (``Message.latency()``);
- a fixed moderate rate (``--rate``, default 2,000 records/s) to a
  1-partition topic: p50/p99;
- one at a time: produce one record, ``flush()`` until it is delivered,
  repeat: p50/p99. Twice, like for like with JetStream (see below): to one
  log (a 1-partition topic) and to six logs (a 6-partition topic; with
  ``linger.ms=0`` librdkafka puts each keyless record on a random
  partition, so the leader changes from record to record);
- consume: a confluent-kafka consumer, ``assign()`` at the beginning of every
  partition, reads everything the full-load produce wrote: MB/s.

NATS JetStream: 3 ``nats-server`` processes (Debian package), JetStream with
file storage in a temp dir, clustered with routes, a stream with 3 replicas,
driven by nats-py:

- pipelined publish with acks: ``js.publish_async`` (up to 4,000 in
  flight), and concurrent ``js.publish`` tasks; the faster is the figure;
- the same fixed rate to one stream; one at a time (``await js.publish``
  each) to one stream, and to six streams (a random one per publish), on
  a connection to each stream leader's server (a Kafka client sends to the
  partition leader: the same hops), and, as in earlier runs, all through
  one connection to the first server;
- pull consume: a pull consumer (``AckPolicy.NONE``) fetching batches.

Records are 1 KiB of semi-compressible text: words drawn at random (seeded)
from a fixed vocabulary of 2,000 pseudo-words, so zstd has something to do;
the header line reports how well it does. MB = 10^6 bytes of record values.
Server and client CPU (from /proc and getrusage) are reported per phase.

Prints a side-by-side table and a summary of ratios against the issue's goals;
asserts nothing. nats-py is a ``bench`` extra (``pip install nats-py``);
``apt-get install nats-server``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raftlog.runtime import event_loop

MB = 1_000_000
RECORD_BYTES = 1024
PARTITIONS = 6
# The latency targets, like for like: one log is a 1-partition topic and one
# JetStream stream; six logs are a 6-partition topic and six streams, each
# record to a random one. A JetStream stream is one replicated log (one Raft
# group, one leader), as a partition is.
LATENCY_LOGS = (1, PARTITIONS)
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------- utilities


def make_payloads(count: int, size: int, seed: int = 5) -> list[bytes]:
    """``count`` distinct ``size``-byte records of random words (semi-compressible)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = [
        "".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(2000)
    ]
    payloads = []
    for _ in range(count):
        words: list[str] = []
        length = 0
        while length < size:
            word = rng.choice(vocabulary)
            words.append(word)
            length += len(word) + 1
        payloads.append(" ".join(words).encode()[:size])
    return payloads


def zstd_ratio(payloads: list[bytes]) -> tuple[float, float]:
    """Compression ratios of zstd level 3 on one record and on 64-record batches."""
    try:
        import zstandard
    except ImportError:
        return float("nan"), float("nan")
    compressor = zstandard.ZstdCompressor(level=3)
    one = statistics.mean(len(p) / len(compressor.compress(p)) for p in payloads[:256])
    batches = [b"".join(payloads[i : i + 64]) for i in range(0, min(len(payloads), 1024), 64)]
    many = statistics.mean(len(b) / len(compressor.compress(b)) for b in batches)
    return one, many


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    if len(samples_ms) < 2:
        return float("nan"), float("nan")
    ordered = sorted(samples_ms)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def process_cpu_s(pids: list[int]) -> float:
    """utime + stime of ``pids`` (and of their threads), in seconds."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return total / CLK_TCK


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Phase:
    """Wall time and CPU (servers, this client) of one measured phase."""

    server_pids: list[int]
    started: float = 0.0
    elapsed: float = 0.0
    server_cpu: float = 0.0
    client_cpu: float = 0.0

    def __enter__(self) -> Phase:
        self._server0 = process_cpu_s(self.server_pids)
        self._client0 = self_cpu_s()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.server_cpu = process_cpu_s(self.server_pids) - self._server0
        self.client_cpu = self_cpu_s() - self._client0

    @classmethod
    def total(cls, phases: list[Phase]) -> Phase:
        """The blocks of one interleaved measurement, as one phase."""
        merged = cls([])
        for phase in phases:
            merged.elapsed += phase.elapsed
            merged.server_cpu += phase.server_cpu
            merged.client_cpu += phase.client_cpu
        return merged

    def cpu_text(self, records: int = 0, idle_cores: float = 0.0) -> str:
        text = (
            f"servers {self.server_cpu / self.elapsed:.2f} cores, "
            f"client {self.client_cpu / self.elapsed:.2f} cores"
        )
        if records:
            # CPU per record above the idle servers' (heartbeats, timers):
            # steadier than latency on a busy machine.
            busy = self.server_cpu - idle_cores * self.elapsed
            text += f"; {busy / records * 1000:.2f} ms server CPU/record over idle"
        return text


def idle_server_cores(pids: list[int], seconds: float = 2.0) -> float:
    """The servers' CPU while no client runs (heartbeats, timers), in cores."""
    with Phase(pids) as phase:
        time.sleep(seconds)
    return phase.server_cpu / phase.elapsed


@dataclass
class Figures:
    """One system's results, keyed by metric; values already formatted."""

    system: str
    text: dict[str, str] = field(default_factory=dict)
    value: dict[str, float] = field(default_factory=dict)

    def add(self, metric: str, text: str, **values: float) -> None:
        self.text[metric] = text
        self.value.update(values)
        print(f"  {self.system:9s} {metric:44s} {text}", flush=True)


def throughput_text(records: int, seconds: float) -> str:
    return (
        f"{records * RECORD_BYTES / MB / seconds:.1f} MB/s, "
        f"{records / seconds:,.0f} rec/s"
    )


def latency_text(samples_ms: list[float]) -> str:
    p50, p99 = percentiles(samples_ms)
    return f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so the ``finally`` blocks stop the servers."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------- raftlog


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS,
                 security: dict[str, object] | None = None) -> None:
    """``security``: the client's security settings (librdkafka's names)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(security or {})})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=3,
        config={"min.insync.replicas": "2"},
    )
    for future in admin.create_topics([topic], operation_timeout=30).values():
        future.result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every partition has a leader and 3 in sync
        meta = admin.list_topics(name, timeout=10).topics[name]
        if (
            meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == 3 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name} never got leaders and a full ISR")


def kafka_producer(bootstrap: str, **extra: object) -> object:
    from confluent_kafka import Producer

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        # 32 MiB of client buffer, Java's buffer.memory default, as the perf test has.
        "queue.buffering.max.kbytes": 32 * 1024,
    }
    config.update(extra)
    return Producer(config)


def kafka_full_load(
    bootstrap: str, topic: str, payloads: list[bytes], records: int, compression: str,
    pids: list[int], security: dict[str, object] | None = None,
) -> tuple[int, Phase, list[float], int]:
    """Produce ``records`` as fast as librdkafka takes them (linger.ms=5, its default)."""
    producer = kafka_producer(
        bootstrap, **{"compression.type": compression, "linger.ms": 5, **(security or {})}
    )
    latencies: list[float] = []
    errors = 0

    def on_delivery(err: object, msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1
        else:
            latencies.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    producer.produce(topic, payloads[0], on_delivery=on_delivery)  # warm up metadata
    producer.flush(30)
    latencies.clear()
    pool = len(payloads)
    produce, poll = producer.produce, producer.poll
    with Phase(pids) as phase:
        for i in range(records):
            while True:
                try:
                    produce(topic, payloads[i % pool], on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            if i & 1023 == 0:
                poll(0)
        left = producer.flush(120)
    return records - left - errors, phase, latencies, errors


def kafka_fixed_rate(
    bootstrap: str, topic: str, payloads: list[bytes], rate: int, seconds: float
) -> tuple[list[float], float]:
    producer = kafka_producer(bootstrap, **{"linger.ms": 0})
    latencies: list[float] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            latencies.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    producer.produce(topic, payloads[0], on_delivery=on_delivery)
    producer.flush(30)
    latencies.clear()
    count = int(rate * seconds)
    started = time.perf_counter()
    for i in range(count):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # not poll(timeout): sub-ms timeouts spin
        producer.produce(topic, payloads[i % len(payloads)], on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(60)
    achieved = count / (time.perf_counter() - started)
    return latencies, achieved


def kafka_warm_up(producer: object, topic: str, partitions: int, payloads: list[bytes]) -> None:
    """A few records to every partition: connections to every leader, metadata."""
    for i in range(20):
        producer.produce(topic, payloads[i], partition=i % partitions)  # type: ignore[attr-defined]
        producer.flush(30)  # type: ignore[attr-defined]


def kafka_one_at_a_time(
    producer: object, topic: str, payloads: list[bytes], count: int, first: int = 0
) -> list[float]:
    """Produce one record, ``flush()`` until it is delivered, ``count`` times."""
    produce, flush = producer.produce, producer.flush  # type: ignore[attr-defined]
    samples = []
    for i in range(first, first + count):
        started = time.perf_counter()
        produce(topic, payloads[i % len(payloads)])
        flush(30)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def kafka_consume(bootstrap: str, topic: str, expected: int, pids: list[int]) -> tuple[int, int, Phase]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"produce-bench-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    records = 0
    value_bytes = 0
    deadline = time.monotonic() + 300
    with Phase(pids) as phase:
        while records < expected and time.monotonic() < deadline:
            # consume() can hold on to what it has until num_messages or the timeout
            # (seen here: 0.5 s stalls with timeout=0.5), so: a short timeout, and
            # never more than is left.
            want = min(1000, expected - records)
            for msg in consumer.consume(num_messages=want, timeout=0.01):
                if msg.error() is None:
                    records += 1
                    value_bytes += len(msg.value())
    consumer.close()
    return records, value_bytes, phase


def run_raftlog(args: argparse.Namespace, payloads: list[bytes], root: Path) -> Figures:
    from data_plane.local_cluster import ClusterLayout, LocalCluster

    figures = Figures("raftlog")
    layout = ClusterLayout.build(base_port=None, properties={"min.insync.replicas": "2"})
    cluster = LocalCluster(root, layout)
    try:
        cluster.up(timeout_s=90)
        bootstrap = cluster.bootstrap_servers
        pids = list(cluster.pids.values())
        print(f"raftlog cluster up: {bootstrap} (pids {pids})", flush=True)
        run_kafka_phases(args, payloads, bootstrap, pids, figures)
    finally:
        cluster.stop(timeout_s=20)
    return figures


def latency_topic(logs: int) -> str:
    return f"bench-lat{logs}"


def one_at_a_time_label(logs: int) -> str:
    return "one at a time, one log" if logs == 1 else f"one at a time, {logs} logs"


def run_kafka_phases(
    args: argparse.Namespace, payloads: list[bytes], bootstrap: str, pids: list[int],
    figures: Figures,
) -> None:
    if "rate" in args.phases:
        create_topic(bootstrap, latency_topic(1), partitions=1)
    for compression in ("none", "zstd") if "full" in args.phases else ():
        topic = f"bench-{compression}"
        create_topic(bootstrap, topic)
        delivered, phase, latencies, errors = kafka_full_load(
            bootstrap, topic, payloads, args.records, compression, pids
        )
        label = "no compression" if compression == "none" else "zstd"
        figures.add(
            f"full-load produce ({label})",
            throughput_text(delivered, phase.elapsed)
            + (f" ({errors} errors)" if errors else ""),
            **{f"produce_mbs_{compression}": delivered * RECORD_BYTES / MB / phase.elapsed},
        )
        figures.add(f"  latency ({label})", latency_text(latencies))
        figures.add(f"  CPU ({label})", phase.cpu_text())
        if compression == "none":
            records, value_bytes, cphase = kafka_consume(bootstrap, topic, delivered, pids)
            figures.add(
                "consume",
                throughput_text(records, cphase.elapsed) + f" ({records:,} records)",
                consume_mbs=value_bytes / MB / cphase.elapsed,
            )
            figures.add("  CPU (consume)", cphase.cpu_text())
    if "rate" in args.phases:
        with Phase(pids) as phase:
            latencies, achieved = kafka_fixed_rate(
                bootstrap, latency_topic(1), payloads, args.rate, args.rate_seconds
            )
        figures.add(f"fixed rate {args.rate:,} rec/s",
                    latency_text(latencies) + f" (achieved {achieved:,.0f}/s)")
        figures.add("  CPU (fixed rate)", phase.cpu_text())


# ------------------------------------------------------------ NATS JetStream


class NatsCluster:
    """Three clustered ``nats-server`` processes with JetStream, stopped by PID."""

    def __init__(self, root: Path, nodes: int = 3) -> None:
        self.root = root
        ports = free_ports(2 * nodes)
        self.client_ports = ports[:nodes]
        self.route_ports = ports[nodes:]
        self.processes: list[subprocess.Popen[bytes]] = []
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
        for i in range(nodes):
            store = root / f"js{i + 1}"
            store.mkdir(parents=True, exist_ok=True)
            (root / f"n{i + 1}.conf").write_text(
                f"server_name: n{i + 1}\n"
                f"listen: 127.0.0.1:{self.client_ports[i]}\n"
                f'jetstream {{ store_dir: "{store}", max_memory_store: 256MB, '
                f"max_file_store: 20GB }}\n"
                f"cluster {{ name: bench, listen: 127.0.0.1:{self.route_ports[i]}, "
                f"routes: [{routes}] }}\n"
            )

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def server_name(self, nc: object) -> str:
        """The name (n1..) of the server the nats-py connection ``nc`` is on."""
        url = nc.connected_url  # type: ignore[attr-defined]
        port = url.port if url is not None else None
        if port in self.client_ports:
            return f"n{self.client_ports.index(port) + 1}"
        return "?"

    def start(self) -> None:
        binary = shutil.which("nats-server")
        if binary is None:
            raise RuntimeError("nats-server not found (apt-get install -y nats-server)")
        for i in range(len(self.client_ports)):
            log = open(self.root / f"n{i + 1}.log", "ab")  # noqa: SIM115 - the child's
            self.processes.append(
                subprocess.Popen([binary, "-c", str(self.root / f"n{i + 1}.conf")],
                                 stdout=log, stderr=log)
            )
        deadline = time.monotonic() + 30
        for port in self.client_ports:  # listening before the client connects
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()

    def __enter__(self) -> NatsCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def js_connect(urls: list[str]) -> tuple[object, object]:
    import nats

    nc = await nats.connect(servers=urls[:1], pending_size=64 * 1024 * 1024)
    return nc, nc.jetstream(timeout=30, publish_async_max_pending=4000)


async def js_add_stream(js: object, name: str, subject: str, timeout_s: float = 60) -> None:
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(name=name, subjects=[subject], num_replicas=3,
                          storage=StorageType.FILE)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await js.add_stream(config)  # type: ignore[attr-defined]
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def js_publish_async(
    js: object, subject: str, payloads: list[bytes], records: int, pids: list[int]
) -> tuple[int, Phase, list[float]]:
    latencies: list[float] = []
    failures = 0
    publish_async = js.publish_async  # type: ignore[attr-defined]
    pool = len(payloads)
    clock = time.perf_counter

    def done(started: float) -> object:
        def callback(future: asyncio.Future[object]) -> None:
            nonlocal failures
            if future.cancelled() or future.exception() is not None:
                failures += 1
            else:
                latencies.append((clock() - started) * 1000)

        return callback

    with Phase(pids) as phase:
        for i in range(records):
            future = await publish_async(subject, payloads[i % pool])
            future.add_done_callback(done(clock()))
        await js.publish_async_completed()  # type: ignore[attr-defined]
    return records - failures, phase, latencies


async def js_publish_concurrent(
    js: object, subject: str, payloads: list[bytes], records: int, tasks: int,
    pids: list[int],
) -> tuple[int, Phase, list[float]]:
    latencies: list[float] = []
    publish = js.publish  # type: ignore[attr-defined]
    pool = len(payloads)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < records:
            i = next_index
            next_index += 1
            started = time.perf_counter()
            await publish(subject, payloads[i % pool])
            latencies.append((time.perf_counter() - started) * 1000)

    with Phase(pids) as phase:
        await asyncio.gather(*(worker() for _ in range(tasks)))
    return len(latencies), phase, latencies


async def js_fixed_rate(
    js: object, subject: str, payloads: list[bytes], rate: int, seconds: float
) -> tuple[list[float], float]:
    latencies: list[float] = []
    count = int(rate * seconds)

    def done(started: float) -> object:
        def callback(future: asyncio.Future[object]) -> None:
            if not future.cancelled() and future.exception() is None:
                latencies.append((time.perf_counter() - started) * 1000)

        return callback

    started = time.perf_counter()
    for i in range(count):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        future = await js.publish_async(subject, payloads[i % len(payloads)])  # type: ignore[attr-defined]
        future.add_done_callback(done(time.perf_counter()))
    await js.publish_async_completed()  # type: ignore[attr-defined]
    return latencies, count / (time.perf_counter() - started)


async def js_warm_up(targets: list[tuple[object, str]], payloads: list[bytes]) -> None:
    for i in range(20):
        js, subject = targets[i % len(targets)]
        await js.publish(subject, payloads[i])  # type: ignore[attr-defined]


async def js_one_at_a_time(
    targets: list[tuple[object, str]], payloads: list[bytes], count: int,
    pick: random.Random, first: int = 0,
) -> list[float]:
    """``await js.publish`` one at a time, each to a random one of ``targets``
    (a JetStream context and a subject; ``pick``, seeded), as librdkafka
    picks a random partition for a keyless record."""
    samples = []
    for i in range(first, first + count):
        js, subject = targets[pick.randrange(len(targets))]
        started = time.perf_counter()
        await js.publish(subject, payloads[i % len(payloads)])  # type: ignore[attr-defined]
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def js_add_latency_streams(js: object, logs_list: tuple[int, ...]) -> None:
    for logs in logs_list:
        for stream, subject in js_latency_streams(logs):
            await js_add_stream(js, stream, subject.rsplit(".", 1)[0] + ".>")


def js_latency_streams(logs: int) -> list[tuple[str, str]]:
    """(stream, subject) for each log of a latency target: the fixed-rate
    stream LAT for one log; LAT{logs}N0, LAT{logs}N1, ... for more."""
    if logs == 1:
        return [("LAT", "lat.x")]
    return [(f"LAT{logs}N{i}", f"lat{logs}.{i}.x") for i in range(logs)]


async def js_leaders(js: object, streams: list[str]) -> list[str]:
    """The server (n1..) that leads each stream."""
    leaders = []
    for stream in streams:
        info = await js.stream_info(stream)  # type: ignore[attr-defined]
        leaders.append(str(info.cluster.leader if info.cluster else "?"))
    return leaders


async def js_pull_consume(
    js: object, stream: str, subject: str, expected: int, pids: list[int]
) -> tuple[int, int, Phase]:
    import nats.errors
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
    sub = await js.pull_subscribe(subject, durable="bench", stream=stream, config=config)  # type: ignore[attr-defined]
    records = 0
    value_bytes = 0
    deadline = time.monotonic() + 300
    with Phase(pids) as phase:
        while records < expected and time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(batch=min(1000, expected - records), timeout=5)
            except nats.errors.TimeoutError:
                continue
            records += len(msgs)
            value_bytes += sum(len(m.data) for m in msgs)
    await sub.unsubscribe()
    return records, value_bytes, phase


async def js_full_load_and_consume(
    args: argparse.Namespace, payloads: list[bytes], js: object, pids: list[int],
    figures: Figures,
) -> None:
    """Full-load publish (pipelined and concurrent, the faster is the figure), then consume."""
    await js.publish("pipe.x", payloads[0])  # type: ignore[attr-defined]
    await js.publish("conc.x", payloads[0])  # type: ignore[attr-defined]
    delivered, phase, latencies = await js_publish_async(
        js, "pipe.x", payloads, args.records, pids
    )
    mbs_async = delivered * RECORD_BYTES / MB / phase.elapsed
    figures.add("publish_async (4,000 in flight)", throughput_text(delivered, phase.elapsed))
    figures.add("  latency (publish_async)", latency_text(latencies))
    figures.add("  CPU (publish_async)", phase.cpu_text())
    cdelivered, cphase, clatencies = await js_publish_concurrent(
        js, "conc.x", payloads, args.records, args.js_tasks, pids
    )
    mbs_conc = cdelivered * RECORD_BYTES / MB / cphase.elapsed
    figures.add(
        f"concurrent publish ({args.js_tasks} tasks)",
        throughput_text(cdelivered, cphase.elapsed),
    )
    figures.add("  latency (concurrent publish)", latency_text(clatencies))
    figures.add("  CPU (concurrent publish)", cphase.cpu_text())
    if mbs_async >= mbs_conc:
        best = ("publish_async", delivered, phase, latencies, "PIPE", "pipe.>")
    else:
        best = ("concurrent publish", cdelivered, cphase, clatencies, "CONC", "conc.>")
    name, count, bphase, blatencies, stream, subject = best
    figures.add(
        "full-load produce (no compression)",
        throughput_text(count, bphase.elapsed) + f" [{name}]",
        produce_mbs_none=max(mbs_async, mbs_conc),
    )
    figures.add("  latency (no compression)", latency_text(blatencies))
    figures.add("  CPU (no compression)", bphase.cpu_text())
    figures.add("full-load produce (zstd)", "n/a (no client compression)")
    records, value_bytes, rphase = await js_pull_consume(js, stream, subject, count, pids)
    figures.add(
        "consume",
        throughput_text(records, rphase.elapsed) + f" ({records:,} records)",
        consume_mbs=value_bytes / MB / rphase.elapsed,
    )
    figures.add("  CPU (consume)", rphase.cpu_text())


async def run_js_phases(
    args: argparse.Namespace, payloads: list[bytes], cluster: NatsCluster, figures: Figures
) -> None:
    nc, js = await js_connect(cluster.urls)
    pids = cluster.pids
    try:
        await js_add_stream(js, "PIPE", "pipe.>")
        await js_add_stream(js, "CONC", "conc.>")
        if "full" in args.phases:
            await js_full_load_and_consume(args, payloads, js, pids, figures)
        if "rate" in args.phases:
            await js_add_latency_streams(js, (1,))  # the fixed rate's stream, LAT
            with Phase(pids) as phase:
                latencies, achieved = await js_fixed_rate(
                    js, "lat.x", payloads, args.rate, args.rate_seconds
                )
            figures.add(f"fixed rate {args.rate:,} rec/s",
                        latency_text(latencies) + f" (achieved {achieved:,.0f}/s)")
            figures.add("  CPU (fixed rate)", phase.cpu_text())
    finally:
        await nc.close()  # type: ignore[attr-defined]


def run_jetstream(args: argparse.Namespace, payloads: list[bytes], root: Path) -> Figures:
    figures = Figures("JetStream")
    with NatsCluster(root) as cluster:
        cluster.start()
        print(f"JetStream cluster up: {','.join(cluster.urls)} (pids {cluster.pids})", flush=True)
        asyncio.run(run_js_phases(args, payloads, cluster, figures))
    return figures


# ------------------------------------------------ one at a time, interleaved


def nats_available() -> bool:
    try:
        import nats  # noqa: F401
    except ImportError:
        print("  nats-py not installed (pip install nats-py); JetStream skipped")
        return False
    return True


def run_one_at_a_time(
    args: argparse.Namespace, payloads: list[bytes], root: Path,
    ours: Figures | None, theirs: Figures | None,
) -> None:
    """The one-at-a-time targets, with both systems' clusters up at once and
    their blocks interleaved.

    ``--one-rounds`` rounds; each runs every target on each system, and the
    system that goes first alternates from round to round. Run back to back,
    as the other phases are, the two systems' figures would be minutes apart,
    and this host's speed has moved by up to 2x within minutes
    (bench/README.md); interleaved, a drift weighs on both alike. Fresh
    clusters, so neither carries the full-load phases' data. While one system
    runs a block, the other's servers idle beside it; both idle figures are
    printed."""
    with contextlib.ExitStack() as stack:
        kafka: tuple[object, list[int]] | None = None
        if ours is not None:
            from data_plane.local_cluster import ClusterLayout, LocalCluster

            layout = ClusterLayout.build(base_port=None, properties={"min.insync.replicas": "2"})
            cluster = LocalCluster(root / "raftlog", layout)
            stack.callback(cluster.stop, timeout_s=20)
            cluster.up(timeout_s=90)
            bootstrap = cluster.bootstrap_servers
            print(f"raftlog cluster up for the latency phase: {bootstrap} "
                  f"(pids {list(cluster.pids.values())})", flush=True)
            producer = kafka_producer(bootstrap, **{"linger.ms": 0})
            for logs in LATENCY_LOGS:
                create_topic(bootstrap, latency_topic(logs), partitions=logs)
                kafka_warm_up(producer, latency_topic(logs), logs, payloads)
            kafka = (producer, list(cluster.pids.values()))
        nats: NatsCluster | None = None
        if theirs is not None:
            nats = stack.enter_context(NatsCluster(root / "jetstream"))
            nats.start()
            print(f"JetStream cluster up for the latency phase: {','.join(nats.urls)} "
                  f"(pids {nats.pids})", flush=True)
        asyncio.run(interleave_one_at_a_time(args, payloads, kafka, nats, ours, theirs))


# JetStream's one-at-a-time variants: how the client reaches each stream.
JS_TO_LEADER = "JetStream"  # a connection to the stream leader's server
JS_VIA_ONE = "JetStream via one server"  # one connection, to n1 (runs before the sixth session)


async def interleave_one_at_a_time(
    args: argparse.Namespace, payloads: list[bytes], kafka: tuple[object, list[int]] | None,
    nats: NatsCluster | None, ours: Figures | None, theirs: Figures | None,
) -> None:
    """The rounds of `run_one_at_a_time`.

    JetStream runs two ways. A Kafka client sends each record straight to
    its partition's leader. nats-py talks to the one server it is connected
    to, and a publish to a stream led by another server crosses one more
    route hop each way: client, n1, leader, followers, leader, n1, client.
    So the goal figure (`JS_TO_LEADER`) publishes each record on a
    connection to its stream leader's server, the same hops as ours. The
    other (`JS_VIA_ONE`) is the earlier method, one connection to n1,
    printed for comparison with earlier runs."""
    connections: list[object] = []
    targets: dict[tuple[str, int], list[tuple[object, str]]] = {}
    placement: dict[int, str] = {}
    if nats is not None:
        by_server: dict[str, object] = {}
        for url in nats.urls:
            nc, js = await js_connect([url])
            connections.append(nc)
            by_server[nats.server_name(nc)] = js
        first = next(iter(by_server))
        await js_add_latency_streams(by_server[first], LATENCY_LOGS)
        for logs in LATENCY_LOGS:
            streams = js_latency_streams(logs)
            leaders = await js_leaders(by_server[first], [stream for stream, _ in streams])
            targets[(JS_TO_LEADER, logs)] = [
                (by_server[leader], subject)
                for leader, (_, subject) in zip(leaders, streams, strict=True)]
            targets[(JS_VIA_ONE, logs)] = [(by_server[first], subject) for _, subject in streams]
            for key in ((JS_TO_LEADER, logs), (JS_VIA_ONE, logs)):
                await js_warm_up(targets[key], payloads)
            local = sum(1 for leader in leaders if leader == first)
            placement[logs] = (f"leaders {', '.join(leaders)} ({local} of {len(leaders)} on "
                               f"{first}, the server of the one-server client)")
    try:
        idle = {
            "raftlog": idle_server_cores(kafka[1]) if kafka is not None else 0.0,
            "JetStream": idle_server_cores(nats.pids) if nats is not None else 0.0,
        }
        rounds = max(1, args.one_rounds)
        per_block = -(-args.one_count // rounds)
        samples: dict[tuple[str, int], list[float]] = {}
        blocks: dict[tuple[str, int], list[Phase]] = {}
        pick = random.Random(7)
        systems = ("raftlog", JS_TO_LEADER, JS_VIA_ONE)
        for r in range(rounds):
            order = systems if r % 2 == 0 else systems[::-1]
            for logs in LATENCY_LOGS:
                for system in order:
                    if system == "raftlog" and kafka is not None:
                        with Phase(kafka[1]) as phase:
                            got = kafka_one_at_a_time(
                                kafka[0], latency_topic(logs), payloads, per_block, r * per_block)
                    elif system != "raftlog" and nats is not None:
                        with Phase(nats.pids) as phase:
                            got = await js_one_at_a_time(
                                targets[(system, logs)], payloads, per_block, pick, r * per_block)
                    else:
                        continue
                    samples.setdefault((system, logs), []).extend(got)
                    blocks.setdefault((system, logs), []).append(phase)
        reports: list[tuple[Figures, str, str, str]] = []  # figures, system, label suffix, key suffix
        if ours is not None:
            reports.append((ours, "raftlog", "", ""))
        if theirs is not None:
            reports.append((theirs, JS_TO_LEADER, "", ""))
            reports.append((theirs, JS_VIA_ONE, ", via one server", "_via_one"))
        for figures, system, label_suffix, key_suffix in reports:
            for logs in LATENCY_LOGS:
                got = samples[(system, logs)]
                label = one_at_a_time_label(logs) + label_suffix
                p50, p99 = percentiles(got)
                figures.add(label, latency_text(got) + f" ({rounds} interleaved rounds)",
                            **{f"one_p50_{logs}{key_suffix}": p50,
                               f"one_p99_{logs}{key_suffix}": p99})
                figures.add(f"  CPU ({label})", Phase.total(blocks[(system, logs)])
                            .cpu_text(len(got), idle[figures.system]))
        if theirs is not None:
            for logs in LATENCY_LOGS:
                theirs.add(f"  placement ({one_at_a_time_label(logs)})", placement[logs])
        for shown in (ours, theirs):
            if shown is not None:
                shown.add("  idle servers (one at a time)",
                          f"{idle[shown.system]:.3f} cores, also beside the other "
                          "system's blocks")
    finally:
        for nc in connections:
            await nc.close()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- main


def versions() -> str:
    parts = []
    try:
        import confluent_kafka

        parts.append(f"confluent-kafka {confluent_kafka.version()[0]} "
                     f"(librdkafka {confluent_kafka.libversion()[0]})")
    except ImportError:
        parts.append("confluent-kafka missing")
    try:
        from importlib.metadata import version

        parts.append(f"nats-py {version('nats-py')}")
    except Exception:
        parts.append("nats-py missing")
    binary = shutil.which("nats-server")
    if binary:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        parts.append(out.strip())
    return "; ".join(parts)


def print_table(ours: Figures | None, theirs: Figures | None) -> None:
    metrics: list[str] = []
    for figures in (ours, theirs):
        if figures:
            metrics += [m for m in figures.text if m not in metrics]
    width = max(len(m) for m in metrics)
    values = [
        [(f.text.get(m, "-") if f else "-") for f in (ours, theirs)] for m in metrics
    ]
    w1 = max(len("raftlog"), *(len(v[0]) for v in values))
    w2 = max(len("JetStream R3"), *(len(v[1]) for v in values))
    print(f"| {'metric':{width}s} | {'raftlog':{w1}s} | {'JetStream R3':{w2}s} |")
    print(f"|{'-' * (width + 2)}|{'-' * (w1 + 2)}|{'-' * (w2 + 2)}|")
    for metric, (a, b) in zip(metrics, values, strict=True):
        print(f"| {metric:{width}s} | {a:{w1}s} | {b:{w2}s} |")


def print_summary(ours: Figures | None, theirs: Figures | None) -> None:
    if not ours:
        print("raftlog did not run; no ratios")
        return
    o = ours.value
    if theirs:
        t = theirs.value
        for label, ours_key, theirs_key, goal in (
            ("produce MB/s", "produce_mbs_none", "produce_mbs_none", " (goal >= 3)"),
            ("produce MB/s, raftlog with zstd", "produce_mbs_zstd", "produce_mbs_none", ""),
            ("one-at-a-time p50, one log: 1 partition vs 1 stream, the same hops",
             "one_p50_1", "one_p50_1", " (goal <= 2)"),
            (f"one-at-a-time p50, {PARTITIONS} logs: {PARTITIONS} partitions vs "
             f"{PARTITIONS} streams, the same hops", f"one_p50_{PARTITIONS}",
             f"one_p50_{PARTITIONS}", " (goal <= 2)"),
            ("one-at-a-time p50, one log, JetStream via one server (runs before the "
             "sixth session of 2026-11-21)", "one_p50_1", "one_p50_1_via_one", ""),
            (f"one-at-a-time p50, {PARTITIONS} logs, JetStream via one server (runs "
             "before the sixth session)", f"one_p50_{PARTITIONS}",
             f"one_p50_{PARTITIONS}_via_one", ""),
            (f"one-at-a-time p50, {PARTITIONS} partitions vs 1 stream via one server, "
             "the pairing of runs before 2026-11-21", f"one_p50_{PARTITIONS}",
             "one_p50_1_via_one", ""),
            ("consume MB/s", "consume_mbs", "consume_mbs", " (goal >= 2)"),
        ):
            if ours_key in o and theirs_key in t:  # phases not run (--phases) are skipped
                print(f"ratio vs JetStream ({label}): {o[ours_key] / t[theirs_key]:.2f}{goal}")
    for logs in LATENCY_LOGS:
        if f"one_p99_{logs}" in o:
            print(f"one-at-a-time p99, {one_at_a_time_label(logs)[len('one at a time, '):]}: "
                  f"{o[f'one_p99_{logs}']:.2f} ms (goal <= 10 ms)")


def settle_disk(base: Path, keep: bool) -> None:
    """Before the latency phase: delete the full-load phases' files (unless
    ``--dir`` keeps them) and write back whatever is still dirty.

    Those phases leave gigabytes in the page cache; the kernel writes dirty
    pages back some 30 s later (``vm.dirty_expire_centisecs``), that is
    during the latency blocks, on the same two cores. Both systems' files go
    the same way, before either system's latency cluster starts."""
    started = time.perf_counter()
    if not keep:
        for name in ("raftlog", "jetstream"):
            shutil.rmtree(base / name, ignore_errors=True)
    os.sync()
    print(f"disk settled before the latency phase in {time.perf_counter() - started:.1f} s "
          f"({'files kept' if keep else 'full-load files deleted'}, then sync)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds a phase)")
    parser.add_argument("--records", type=int, default=None, help="records per full-load run")
    parser.add_argument("--rate", type=int, default=2000, help="fixed rate, records/s")
    parser.add_argument("--js-tasks", type=int, default=256, help="concurrent js.publish tasks")
    parser.add_argument("--only", choices=("raftlog", "jetstream"), default=None)
    parser.add_argument("--dir", default=None, help="keep the servers' files here")
    parser.add_argument(
        "--phases", default="full,rate,one",
        help="comma-separated subset of full (full-load produce and consume), rate, one",
    )
    parser.add_argument("--one-count", type=int, default=None,
                        help="one-at-a-time produces per target and system "
                             "(default 2,000; 300 with --quick)")
    parser.add_argument("--one-rounds", type=int, default=4,
                        help="interleaved rounds the one-at-a-time produces are split into")
    args = parser.parse_args()
    args.records = args.records or (100_000 if args.quick else 500_000)
    args.rate_seconds = 3.0 if args.quick else 15.0
    args.one_count = args.one_count or (300 if args.quick else 2000)
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not args.phases <= {"full", "rate", "one"}:
        parser.error(f"unknown phase in --phases: {sorted(args.phases)}")
    payloads = make_payloads(4096, RECORD_BYTES)
    one, batch = zstd_ratio(payloads)
    print(
        f"produce bench: {args.records:,} records of {RECORD_BYTES} B per full-load run, "
        f"acks=all / R3, cpus={os.cpu_count()}, node event loop: {event_loop.describe()}\n"
        f"payloads: random words from a 2,000-word vocabulary; zstd-3 ratio "
        f"{one:.2f}x per record, {batch:.2f}x per 64-record batch\n{versions()}",
        flush=True,
    )
    ours = theirs = None
    # full and rate: one system at a time; one: both at once, interleaved.
    sequential = args.phases - {"one"}
    with sigterm_as_exit(), tempfile.TemporaryDirectory(prefix="produce-bench-") as tmp:
        base = Path(args.dir) if args.dir else Path(tmp)
        if args.only != "jetstream":
            ours = run_raftlog(args, payloads, base / "raftlog") if sequential else Figures("raftlog")
        if args.only != "raftlog" and nats_available():
            theirs = (run_jetstream(args, payloads, base / "jetstream") if sequential
                      else Figures("JetStream"))
        if "one" in args.phases:
            if sequential:
                settle_disk(base, keep=args.dir is not None)
            run_one_at_a_time(args, payloads, base / "latency", ours, theirs)
    print()
    print_table(ours, theirs)
    print()
    print_summary(ours, theirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
