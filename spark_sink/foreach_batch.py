"""An exactly-once foreachBatch sink from Spark to a raftlog (Kafka) topic.

    query = (df.writeStream
             .foreachBatch(raftlog_sink(bootstrap_servers="127.0.0.1:9092",
                                        topic="events", key="user", value=None))
             .option("checkpointLocation", "/tmp/cp")
             .start())

- ``value``: a column name, or None for the whole row as JSON (``to_json``).
- ``key``: a column name or None (null keys, spread over partitions).
- ``headers``: a column of ``array<struct<key string, value binary>>`` (Spark's
  Kafka schema) or None.
- Every other keyword is a librdkafka producer setting (``linger.ms=50``).

Records go where a Kafka producer would put them: librdkafka's
``murmur2_random`` partitioner is Java's default partitioner (murmur2 of the
key). The executors write: each task runs ``mapInArrow`` over its rows; only
one row of counts per task comes back to the driver.

Exactly once for read_committed readers (``exactly_once=True``, the
default): the batch is hash-partitioned on the key (the value when the key
is null) into a fixed number of tasks, so a replayed batch id gives every
task the same set of rows even if the input partitions differ
(SPARK-28650). Task t writes in a Kafka transaction with transactional id
(sink id, topic, t) and commits, in the same transaction, offset
``batch_id + 1`` for its marker group; a task whose marker already covers
the batch skips. See docs/spark.md for the limits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from .kafka_io import SinkError, WriteConfig, partition_ids, write_task

__all__ = ("SinkError", "raftlog_sink")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
STATS_SCHEMA = "task int, batch_id long, rows long, skipped boolean, attempt int"


def _task_partitions(cfg: WriteConfig) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": "raftlog-sink-meta"})
    try:
        return len(partition_ids(consumer, cfg.topic, cfg.timeout_s))
    finally:
        consumer.close()


def prepare(df: Any, key: str | None, value: str | None, headers: str | None) -> Any:
    """The batch as (key binary, value binary[, headers]) columns; strings are
    UTF-8, other types go through their string form."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    def binary(name: str) -> Any:
        col = F.col(name)
        dtype = df.schema[name].dataType
        return col if isinstance(dtype, BinaryType) else col.cast("string").cast("binary")

    cols = [
        (binary(key) if key is not None else F.lit(None).cast("binary")).alias("key"),
        (binary(value) if value is not None
         else F.to_json(F.struct(*[F.col(c) for c in df.columns])).cast("binary")).alias("value"),
    ]
    if headers is not None:
        cols.append(F.col(headers).cast("array<struct<key: string, value: binary>>").alias("headers"))
    return df.select(*cols)


def raftlog_sink(*, bootstrap_servers: str, topic: str, key: str | None = None,
                 value: str | None = "value", headers: str | None = None,
                 exactly_once: bool = True, sink_id: str | None = None,
                 allow_null_key: bool = True, tasks: int | None = None,
                 timeout_s: float = 60.0, fail_first_attempt_after: int | None = None,
                 on_batch: Callable[[int, list[Any]], None] | None = None,
                 **producer_config: Any) -> Callable[[Any, int], None]:
    """A function for ``writeStream.foreachBatch`` writing each micro-batch
    to ``topic``. ``sink_id`` names the transactional ids and marker groups
    (default: the streaming query's id, kept in its checkpoint). ``tasks``
    is the number of write tasks (default: the topic's partition count);
    it must not change across a restart. ``on_batch(batch_id, stats)``
    receives one row per task (task, batch_id, rows, skipped, attempt).
    ``fail_first_attempt_after`` is fault injection for recovery tests: the
    first attempt of each task fails after writing that many rows."""
    cfg = WriteConfig(bootstrap_servers, topic, dict(producer_config), exactly_once, sink_id,
                      allow_null_key, timeout_s, fail_first_attempt_after)

    def write_batch(df: Any, batch_id: int) -> None:
        spark = df.sparkSession
        sid = cfg.sink_id or spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if exactly_once and not sid:
            raise SinkError("no streaming query id in this thread; pass sink_id=...")
        prepared = prepare(df, key, value, headers)
        if exactly_once:
            from pyspark.sql import functions as F

            n = tasks or _task_partitions(cfg)
            shard = F.when(F.col("key").isNull(), F.hash("value")).otherwise(F.hash("key"))
            prepared = prepared.repartition(n, shard)

        def run(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa
            from pyspark import TaskContext

            ctx = TaskContext.get()
            task = ctx.partitionId() if ctx else 0
            attempt = ctx.attemptNumber() if ctx else 0
            result = write_task(cfg, batches, task=task, batch_id=batch_id,
                                sink_id=sid or "none", attempt=attempt)
            yield pa.RecordBatch.from_pylist(
                [{"task": result.task, "batch_id": result.batch_id, "rows": result.rows,
                  "skipped": result.skipped, "attempt": result.attempt}],
                schema=pa.schema([("task", pa.int32()), ("batch_id", pa.int64()),
                                  ("rows", pa.int64()), ("skipped", pa.bool_()),
                                  ("attempt", pa.int32())]))

        stats = prepared.mapInArrow(run, STATS_SCHEMA).collect()
        if on_batch is not None:
            on_batch(batch_id, stats)
        if os.environ.get("RAFTLOG_SINK_LOG"):
            written = sum(r.rows for r in stats)
            skipped = sum(1 for r in stats if r.skipped)
            print(f"raftlog_sink: batch {batch_id}: {written} rows in {len(stats)} tasks, "
                  f"{skipped} skipped (already committed)", flush=True)

    return write_batch
