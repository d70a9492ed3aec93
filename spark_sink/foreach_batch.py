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
one row per task (counts and its staged transaction) comes back to the
driver.

Exactly once for read_committed readers (``exactly_once=True``, the
default), by staged transactions (spark_sink/staged.py): each task writes
its rows in a Kafka transaction (transactional id: sink id, topic, task)
and leaves it open; the driver then records the batch as decided in the
sink's state group and commits every task's transaction with EndTxn. A
replayed batch id that is decided is skipped (its commit finished first if
a crash interrupted it); an undecided one is written again from scratch,
and the staged transactions of the lost attempt are aborted by fencing or
by their timeout. The input partitioning need not repeat on a replay
(SPARK-28650), so there is no shuffle. See docs/spark.md for the limits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from .kafka_io import SinkError, WriteConfig, write_task
from .staged import StagedTxn, StateStore, commit_batch, settle_batch, stage_task

__all__ = ("ForeachBatchWriter", "SinkError", "raftlog_sink")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
STATS_SCHEMA = (
    "task int, batch_id long, rows long, skipped boolean, attempt int, "
    "transactional_id string, producer_id long, producer_epoch int"
)


def _stats_arrow() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.schema(
        [
            ("task", pa.int32()),
            ("batch_id", pa.int64()),
            ("rows", pa.int64()),
            ("skipped", pa.bool_()),
            ("attempt", pa.int32()),
            ("transactional_id", pa.string()),
            ("producer_id", pa.int64()),
            ("producer_epoch", pa.int32()),
        ]
    )


_STATS_ARROW = _stats_arrow()


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
        (
            binary(value)
            if value is not None
            else F.to_json(F.struct(*[F.col(c) for c in df.columns])).cast("binary")
        ).alias("value"),
    ]
    if headers is not None:
        cols.append(
            F.col(headers).cast("array<struct<key: string, value: binary>>").alias("headers")
        )
    return df.select(*cols)


def raftlog_sink(
    *,
    bootstrap_servers: str,
    topic: str,
    key: str | None = None,
    value: str | None = "value",
    headers: str | None = None,
    exactly_once: bool = True,
    sink_id: str | None = None,
    allow_null_key: bool = True,
    timeout_s: float = 60.0,
    fail_first_attempt_after: int | None = None,
    on_batch: Callable[[int, list[Any]], None] | None = None,
    **producer_config: Any,
) -> ForeachBatchWriter:
    """A callable for ``writeStream.foreachBatch`` writing each micro-batch
    to ``topic``. ``sink_id`` names the transactional ids and the state
    group (default: the streaming query's id, kept in its checkpoint).
    ``on_batch(batch_id, stats)`` receives one row per write task (task,
    batch_id, rows, skipped, attempt, transactional_id, producer_id,
    producer_epoch), or no rows when the batch was decided before (a
    replay). ``fail_first_attempt_after`` is fault injection for recovery
    tests: the first attempt of each task fails after writing that many rows.

    With ``exactly_once`` the writer keeps one consumer open per sink id
    for the state group; `ForeachBatchWriter.close` (or a ``with`` block)
    releases it once the query has stopped."""
    cfg = WriteConfig(
        bootstrap_servers,
        topic,
        dict(producer_config),
        exactly_once,
        sink_id,
        allow_null_key,
        timeout_s,
        fail_first_attempt_after,
    )

    # One open state consumer per sink id, reused across batches (the
    # driver runs write_batch once per micro-batch, in this process).
    stores: dict[str, StateStore] = {}

    def write_batch(df: Any, batch_id: int) -> None:
        spark = df.sparkSession
        sid = cfg.sink_id or spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if exactly_once and not sid:
            raise SinkError("no streaming query id in this thread; pass sink_id=...")
        store = stores.setdefault(sid, StateStore(cfg, sid)) if exactly_once else None
        if exactly_once and settle_batch(cfg, sid, batch_id, store):
            _report(on_batch, batch_id, [], "already committed: skipped")
            return
        stats = (
            prepare(df, key, value, headers)
            .mapInArrow(_task_writer(cfg, batch_id, sid), STATS_SCHEMA)
            .collect()
        )
        if exactly_once:
            commit_batch(
                cfg,
                sid,
                batch_id,
                [
                    StagedTxn(
                        r.task,
                        r.attempt,
                        r.rows,
                        r.transactional_id,
                        r.producer_id,
                        r.producer_epoch,
                        (),
                    )
                    for r in stats
                ],
                store,
            )
        _report(on_batch, batch_id, stats, "committed" if exactly_once else "written")

    return ForeachBatchWriter(write_batch, stores)


class ForeachBatchWriter:
    """What `raftlog_sink` returns: call it as Spark's foreachBatch function;
    `close` (or leaving a ``with`` block) closes the state consumers it
    keeps open across batches. Writing after `close` opens them again."""

    def __init__(self, write_batch: Callable[[Any, int], None],
                 stores: dict[str, StateStore]) -> None:
        self._write_batch = write_batch
        self._stores = stores

    def __call__(self, df: Any, batch_id: int) -> None:
        self._write_batch(df, batch_id)

    def close(self) -> None:
        stores = list(self._stores.values())
        self._stores.clear()
        for store in stores:
            store.close()

    def __enter__(self) -> ForeachBatchWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _task_writer(
    cfg: WriteConfig, batch_id: int, sink_id: str | None
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        row: dict[str, Any] = {
            "task": task,
            "batch_id": batch_id,
            "skipped": False,
            "attempt": attempt,
            "transactional_id": None,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        if cfg.exactly_once:
            # The driver settled the batch already: no state check per task.
            staged = stage_task(
                cfg,
                batches,
                task=task,
                batch_id=batch_id,
                sink_id=sink_id or "none",
                attempt=attempt,
                check_state=False,
            )
            assert staged is not None
            row.update(
                rows=staged.rows,
                transactional_id=staged.transactional_id,
                producer_id=staged.producer_id,
                producer_epoch=staged.producer_epoch,
            )
        else:
            row["rows"] = write_task(cfg, batches, task=task, batch_id=batch_id, attempt=attempt)
        yield pa.RecordBatch.from_pylist([row], schema=_STATS_ARROW)

    return run


def _report(
    on_batch: Callable[[int, list[Any]], None] | None, batch_id: int, stats: list[Any], outcome: str
) -> None:
    if on_batch is not None:
        on_batch(batch_id, stats)
    if os.environ.get("RAFTLOG_SINK_LOG"):
        written = sum(r.rows for r in stats)
        print(
            f"raftlog_sink: batch {batch_id}: {written} rows in {len(stats)} tasks, {outcome}",
            flush=True,
        )
