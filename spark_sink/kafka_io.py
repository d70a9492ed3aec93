"""Client-side Kafka helpers shared by the foreachBatch sink and the Data
Source: Kafka's default partitioner (murmur2), the Spark Kafka source schema,
producing a task's rows, and reading an offset range. The
exactly-once protocol (staged transactions) is in staged.py.

Only confluent-kafka and pyarrow are used here (no Spark import), so the
module loads in executors and in the driver's Data Source runners alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type hints
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from raftlog.records.partitioner import partition_for_key

# Spark's Kafka source schema (key, value, topic, partition, offset, timestamp,
# timestampType, headers) as Arrow types.
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", HEADERS_TYPE),
    ]
)
SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>"
)

DEFAULT_MAX_MESSAGE_BYTES = 1_000_000


class SinkError(Exception):
    """A row or batch the sink refuses; the message names the row."""


# --- Kafka's default partitioner ---------------------------------------------------------


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key:
    ``toPositive(murmur2(key)) % numPartitions``."""
    return partition_for_key(key, num_partitions)


# --- configuration ----------------------------------------------------------------------


@dataclass(frozen=True)
class WriteConfig:
    """What a write task needs; pickled into every task."""

    bootstrap_servers: str
    topic: str
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    exactly_once: bool = True
    # Names the transactional ids and the state group; the query id by default.
    sink_id: str | None = None
    allow_null_key: bool = True
    timeout_s: float = 60.0
    # Fault injection for recovery tests: the first attempt of every task
    # flushes this many rows to the log, then fails.
    fail_first_attempt_after: int | None = None
    # Fault injection for recovery tests: the driver's commit fails
    # "before_decision" (nothing decided; Spark then calls abort) or
    # "after_decision" (decided, no EndTxn sent: a driver crash there).
    fail_commit: str | None = None

    def __post_init__(self) -> None:
        if self.fail_commit not in (None, "before_decision", "after_decision"):
            raise ValueError(
                f"fail_commit must be before_decision or after_decision, not {self.fail_commit!r}"
            )

    @property
    def max_message_bytes(self) -> int:
        return int(self.producer_config.get("message.max.bytes", DEFAULT_MAX_MESSAGE_BYTES))

    def transactional_id(self, sink_id: str, task: int) -> str:
        return f"raftlog-sink.{sink_id}.{self.topic}.{task}"

    def state_group(self, sink_id: str) -> str:
        """The consumer group whose committed offset for (topic, 0) is the
        first undecided batch id (see spark_sink/staged.py)."""
        return f"raftlog-sink.{sink_id}.{self.topic}"


def producer_settings(cfg: WriteConfig) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "bootstrap.servers": cfg.bootstrap_servers,
        "acks": "all",
        "enable.idempotence": True,
        # Java's default partitioner: murmur2 of the key; null keys spread.
        "partitioner": "murmur2_random",
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 512 * 1024,
    }
    settings.update({k: v for k, v in cfg.producer_config.items()})
    return settings


# --- the task writer ----------------------------------------------------------------------


def _describe(key: bytes | None, row: int, task: int, batch_id: int, value: Any = None) -> str:
    shown = "null" if key is None else repr(bytes(key[:60]))
    where = f"row {row} of task {task} in batch {batch_id} (key={shown}"
    if value is not None:
        where += f", value={bytes(value[:40])!r}" + ("..." if len(value) > 40 else "")
    return where + ")"


def _binary_column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """The column as Arrow binary (strings are UTF-8 already), or None."""
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        return None
    col = batch.column(idx)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return col
    if (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_null(col.type)
    ):
        return col.cast(pa.binary())
    raise SinkError(f"column {name!r} must be string or binary, not {col.type}")


def _check_rows(
    cfg: WriteConfig,
    keys: pa.Array | None,
    values: pa.Array,
    limit: int,
    first_row: int,
    task: int,
    batch_id: int,
) -> None:
    """Null keys (when keys are required) and records over message.max.bytes,
    checked on the whole Arrow batch; the error names the first bad row."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if not cfg.allow_null_key and (keys is None or keys.null_count):
        i = 0 if keys is None else pc.index(pc.is_null(keys), True).as_py()
        raise SinkError(
            f"{_describe(None, first_row + i, task, batch_id, values[i].as_py())}: "
            "null key, and the sink requires keys"
        )
    size = pc.fill_null(pc.binary_length(values), 0)
    if keys is not None:
        size = pc.add(size, pc.fill_null(pc.binary_length(keys), 0))
    if pc.max(size).as_py() > limit:
        i = pc.index(pc.greater(size, limit), True).as_py()
        key = keys[i].as_py() if keys is not None else None
        raise SinkError(
            f"{_describe(key, first_row + i, task, batch_id, values[i].as_py())}: "
            f"record of {size[i].as_py()} bytes exceeds message.max.bytes={limit}"
        )


def produce_batches(
    cfg: WriteConfig,
    producer: Producer,
    batches: Iterable[pa.RecordBatch],
    *,
    task: int,
    batch_id: int,
    attempt: int,
) -> int:
    """Produce the rows of ``batches`` (columns ``value`` and optional ``key``
    / ``headers``, string or binary); returns the row count. Bad rows raise
    `SinkError` naming the row. Does not flush."""
    rows = 0
    limit = cfg.max_message_bytes
    topic = cfg.topic
    produce = producer.produce
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        keys, values = _binary_column(batch, "key"), _binary_column(batch, "value")
        if values is None:
            raise SinkError("the rows to write need a 'value' column")
        _check_rows(cfg, keys, values, limit, rows, task, batch_id)
        vals = values.to_pylist()
        ks = keys.to_pylist() if keys is not None else [None] * n
        hidx = batch.schema.get_field_index("headers")
        hdrs = None
        if hidx >= 0:
            hdrs = [
                [(h["key"], h["value"]) for h in hs] if hs else None
                for hs in batch.column(hidx).to_pylist()
            ]
        done = 0
        while done < n:
            # One tight loop per batch (the per-row Python cost is most of
            # a task's CPU); a full queue (BufferError) polls, then resumes
            # at the row that did not fit.
            j = done
            try:
                if hdrs is None:
                    for j in range(done, n):
                        produce(topic, vals[j], ks[j])
                else:
                    for j in range(done, n):
                        produce(topic, vals[j], ks[j], headers=hdrs[j])
                done = n
            except BufferError:
                done = j
                producer.poll(0.05)
            except KafkaException as exc:
                raise SinkError(
                    f"{_describe(ks[j], rows + j, task, batch_id, vals[j])}: {exc.args[0].str()}"
                ) from exc
        rows += n
        producer.poll(0)
        if (
            cfg.fail_first_attempt_after is not None
            and attempt == 0
            and rows >= cfg.fail_first_attempt_after
        ):
            producer.flush(cfg.timeout_s)
            raise RuntimeError(
                f"injected failure: task {task} attempt {attempt} of batch "
                f"{batch_id} after {rows} rows were written"
            )
    return rows


def write_task(
    cfg: WriteConfig,
    batches: Iterable[pa.RecordBatch],
    *,
    task: int,
    batch_id: int,
    attempt: int = 0,
) -> int:
    """At least once (``exactly_once=False``): write one task's rows with an
    idempotent producer and wait for every acknowledgement; returns the row
    count. Exactly once goes through `spark_sink.staged.stage_task`."""
    settings, errors = reporting_producer_settings(cfg)
    producer = Producer(settings)
    rows = produce_batches(cfg, producer, batches, task=task, batch_id=batch_id, attempt=attempt)
    flush_or_raise(producer, errors, cfg, task=task, batch_id=batch_id)
    return rows


def reporting_producer_settings(cfg: WriteConfig) -> tuple[dict[str, Any], list[str]]:
    """`producer_settings` plus a delivery callback that collects the first
    failures into the returned list. Only failed deliveries call back into
    Python (one call per record would cost more than the produce itself)."""
    settings = producer_settings(cfg)
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(f"{err.str()} (partition {msg.partition()})")

    settings["delivery.report.only.error"] = True
    settings["on_delivery"] = delivered
    return settings, errors


def flush_or_raise(producer: Producer, errors: list[str], cfg: WriteConfig, *,
                   task: int, batch_id: int) -> None:
    """Wait for every acknowledgement; `SinkError` if any is missing or failed."""
    left = producer.flush(cfg.timeout_s)
    if left:
        raise SinkError(
            f"task {task} of batch {batch_id}: {left} records not "
            f"acknowledged within {cfg.timeout_s} s"
        )
    if errors:
        raise SinkError(f"task {task} of batch {batch_id}: delivery failed: {errors}")


# --- reading ----------------------------------------------------------------------------


def consumer_settings(
    bootstrap_servers: str, isolation_level: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    if isolation_level not in ("read_committed", "read_uncommitted"):
        raise ValueError(
            f"isolation.level must be read_committed or read_uncommitted, not {isolation_level!r}"
        )
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "raftlog-spark-reader",  # never joins or commits
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": isolation_level,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    }
    settings.update(extra or {})
    return settings


def partition_ids(consumer: Consumer, topic: str, timeout_s: float = 30.0) -> list[int]:
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        reason = meta.error if meta is not None else "no metadata"
        raise SinkError(f"topic {topic!r} is not available: {reason}")
    return sorted(meta.partitions)


def watermarks(
    consumer: Consumer, topic: str, timeout_s: float = 30.0
) -> dict[int, tuple[int, int]]:
    """partition -> (earliest, latest); latest is the last stable offset under
    read_committed (ListOffsets with the consumer's isolation level)."""
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
        for p in partition_ids(consumer, topic, timeout_s)
    }


def parse_offsets(spec: str, topic: str, marks: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """``earliest`` / ``latest`` / Spark's JSON (``{"t": {"0": 5, "1": -2}}``,
    -2 earliest, -1 latest) to partition -> offset."""
    if spec == "earliest":
        return {p: lo for p, (lo, _) in marks.items()}
    if spec == "latest":
        return {p: hi for p, (_, hi) in marks.items()}
    try:
        given = json.loads(spec)[topic]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f'offsets must be earliest, latest or JSON like {{"{topic}": {{"0": 0}}}}; got {spec!r}'
        ) from exc
    out = {}
    for p, (lo, hi) in marks.items():
        o = int(given.get(str(p), -2))
        out[p] = lo if o == -2 else hi if o == -1 else o
    return out


def read_range(
    settings: Mapping[str, Any],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    chunk: int = 10_000,
    idle_timeout_s: float = 30.0,
) -> Iterator[pa.RecordBatch]:
    """The records of one partition in [start, end) as Arrow batches in the
    Kafka source schema. Under read_committed, aborted records and control
    records are skipped, so fewer than end - start rows may come back."""
    if start >= end:
        return
    consumer = Consumer(dict(settings))
    tp = TopicPartition(topic, partition, start)
    consumer.assign([tp])
    try:
        done = False
        last_progress = time.monotonic()
        while not done:
            msgs = consumer.consume(chunk, timeout=0.5)
            cols: dict[str, list[Any]] = {n: [] for n in ARROW_SCHEMA.names}
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                off = msg.offset()
                assert off is not None  # a fetched record has an offset
                if off >= end:
                    done = True
                    break
                ts_type, ts = msg.timestamp()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["topic"].append(topic)
                cols["partition"].append(partition)
                cols["offset"].append(off)
                cols["timestamp"].append(ts * 1000 if ts >= 0 else None)
                cols["timestampType"].append(max(ts_type - 1, 0))
                hdrs = msg.headers()
                pairs = hdrs.items() if isinstance(hdrs, dict) else hdrs or ()
                cols["headers"].append([{"key": k, "value": v} for k, v in pairs] or None)
                if off >= end - 1:
                    done = True
            if cols["offset"]:
                last_progress = time.monotonic()
                yield pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)
            if not done:
                pos = consumer.position([TopicPartition(topic, partition)])[0].offset
                if pos >= end:
                    break
                if not msgs and time.monotonic() - last_progress > idle_timeout_s:
                    raise SinkError(
                        f"{topic}[{partition}]: no records past offset {pos} "
                        f"within {idle_timeout_s} s while reading to {end}"
                    )
    finally:
        consumer.close()
