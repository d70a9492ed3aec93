"""A Spark 4 Python Data Source for raftlog topics: ``format("raftlog")``.

    spark.dataSource.register(RaftlogDataSource)
    df = (spark.readStream.format("raftlog")
          .option("bootstrap.servers", "127.0.0.1:9092").option("topic", "events")
          .option("startingOffsets", "earliest").load())
    (df.writeStream.format("raftlog")
       .option("bootstrap.servers", "127.0.0.1:9092").option("topic", "copy")
       .option("checkpointLocation", "/tmp/cp").start())

Reading (streaming and batch) gives Spark's Kafka source schema: key,
value, topic, partition, offset, timestamp, timestampType, headers. One Spark
partition per topic partition; offsets are JSON per partition
(``{"topic": {"0": 42, "1": 17}}``). Options:

- ``bootstrap.servers`` (or ``kafka.bootstrap.servers``), ``topic`` (or ``subscribe``);
- ``startingOffsets``: earliest | latest | JSON (default: latest when
  streaming, earliest in a batch read); ``endingOffsets`` for batch reads;
- ``maxRecordsPerBatch`` (or ``maxOffsetsPerTrigger``): offsets per micro-batch;
- ``isolation.level``: read_committed (default) | read_uncommitted.

``Trigger.AvailableNow`` reads up to the offsets current when the query starts.

Writing (streaming and batch, Arrow writers) takes the columns ``value``
(required), ``key`` and ``headers`` (optional), string or binary. Options:
``bootstrap.servers``, ``topic``, ``exactly_once`` (default true),
``sink_id`` (default: the query id), ``allow_null_key`` and ``kafka.*``
producer settings. Each task stages its rows in a Kafka transaction it
leaves open; the driver's ``commit(messages, batchId)`` decides the batch
and commits them all, ``abort`` aborts them (spark_sink/staged.py; see
docs/spark.md for what that guarantees and where it stops).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type hints
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .kafka_io import (
    SPARK_SCHEMA_DDL,
    SinkError,
    WriteConfig,
    consumer_settings,
    parse_offsets,
    read_range,
    watermarks,
    write_task,
)
from .staged import StagedTxn, abort_staged, commit_batch, settle_batch, stage_task

__all__ = ("RaftlogDataSource",)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def _opt(options: Any, *names: str, default: str | None = None) -> str | None:
    for name in names:
        if name in options and options[name] is not None:
            return str(options[name])
    return default


def _required(options: Any, *names: str) -> str:
    value = _opt(options, *names)
    if not value:
        raise SinkError(f"option {names[0]!r} is required")
    return value


def _truthy(value: str | None, default: bool) -> bool:
    return default if value is None else value.strip().lower() in ("1", "true", "yes")


class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _ReaderBase:
    def __init__(self, options: Any) -> None:
        self.bootstrap = _required(options, "bootstrap.servers", "kafka.bootstrap.servers")
        self.topic = _required(options, "topic", "subscribe")
        self.isolation = (
            _opt(options, "isolation.level", "kafka.isolation.level", default="read_committed")
            or "read_committed"
        )
        self.settings = consumer_settings(self.bootstrap, self.isolation)
        self.idle_timeout_s = float(_opt(options, "readTimeoutSeconds", default="30") or 30)

    def _marks(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import Consumer

        consumer = Consumer(self.settings)
        try:
            return watermarks(consumer, self.topic)
        finally:
            consumer.close()

    def _offsets_json(self, offsets: dict[int, int]) -> dict[str, Any]:
        return {self.topic: {str(p): int(o) for p, o in sorted(offsets.items())}}

    def _from_json(self, offsets: dict[str, Any]) -> dict[int, int]:
        return {int(p): int(o) for p, o in offsets[self.topic].items()}

    def _partitions(self, start: dict[int, int], end: dict[int, int]) -> list[RangePartition]:
        return [RangePartition(self.topic, p, start.get(p, 0), end[p]) for p in sorted(end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(
            self.settings,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
            idle_timeout_s=self.idle_timeout_s,
        )


class RaftlogBatchReader(_ReaderBase, DataSourceReader):
    def __init__(self, options: Any) -> None:
        super().__init__(options)
        marks = self._marks()
        self.start = parse_offsets(
            _opt(options, "startingOffsets", default="earliest") or "earliest", self.topic, marks
        )
        self.end = parse_offsets(
            _opt(options, "endingOffsets", default="latest") or "latest", self.topic, marks
        )

    def partitions(self) -> Sequence[InputPartition]:
        return self._partitions(self.start, self.end)


class RaftlogStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.starting = _opt(options, "startingOffsets", default="latest") or "latest"
        limit = _opt(options, "maxRecordsPerBatch", "maxOffsetsPerTrigger")
        self.max_records = int(limit) if limit else None
        self.available_now: dict[int, int] | None = None

    def initialOffset(self) -> dict[str, Any]:
        return self._offsets_json(parse_offsets(self.starting, self.topic, self._marks()))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = {p: hi for p, (_, hi) in self._marks().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._from_json(start)
        marks = self._marks()
        latest = {p: hi for p, (_, hi) in marks.items()}
        if self.available_now is not None:
            latest = {p: min(hi, self.available_now.get(p, hi)) for p, hi in latest.items()}
        end = {p: max(hi, begin.get(p, marks[p][0])) for p, hi in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = self._capped(begin, end, marks, limit.max_rows)
        return self._offsets_json(end)

    @staticmethod
    def _capped(
        begin: dict[int, int], end: dict[int, int], marks: dict[int, tuple[int, int]], budget: int
    ) -> dict[int, int]:
        """At most ``budget`` offsets in all, shared evenly among partitions
        with a backlog (what is left by one goes to the others)."""
        pos = {p: begin.get(p, marks[p][0]) for p in end}
        lag = {p: end[p] - pos[p] for p in end}
        out = dict(pos)
        left = budget
        while left > 0:
            open_ = [p for p in sorted(lag) if lag[p] > out[p] - pos[p]]
            if not open_:
                break
            share = max(1, left // len(open_))
            for p in open_:
                take = min(share, lag[p] - (out[p] - pos[p]), left)
                out[p] += take
                left -= take
                if left == 0:
                    break
        return out

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = self._from_json(start), self._from_json(end)
        if begin == stop:
            return []
        return self._partitions(begin, stop)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # offsets live in Spark's checkpoint; nothing to release


# --- writers --------------------------------------------------------------------------------


@dataclass
class TaskCommit(WriterCommitMessage):
    """What a write task reports to the driver: its row count and, for
    exactly once, its staged transaction (None when the batch was decided
    before: a replay)."""

    task: int
    batch_id: int
    rows: int
    skipped: bool
    attempt: int
    sink_id: str | None = None
    staged: StagedTxn | None = None


def _write_config(options: Any) -> WriteConfig:
    producer = {
        k[len("kafka.") :]: v
        for k, v in options.items()
        if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
    }
    return WriteConfig(
        bootstrap_servers=_required(options, "bootstrap.servers", "kafka.bootstrap.servers"),
        topic=_required(options, "topic"),
        producer_config=producer,
        exactly_once=_truthy(_opt(options, "exactly_once", "exactlyOnce"), True),
        sink_id=_opt(options, "sink_id", "sinkId"),
        allow_null_key=_truthy(_opt(options, "allow_null_key", "allowNullKey"), True),
        timeout_s=float(_opt(options, "timeoutSeconds", default="60") or 60),
        fail_first_attempt_after=int(fail)
        if (fail := _opt(options, "failFirstAttemptAfter"))
        else None,
        fail_commit=_opt(options, "failCommit"),
    )


def _check_schema(schema: StructType) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise SinkError(f"format('raftlog') writes need a 'value' column; got {sorted(names)}")


def _run_task(
    cfg: WriteConfig, iterator: Iterator[pa.RecordBatch], batch_id: int | None, sink_id: str | None
) -> TaskCommit:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    if batch_id is None:
        prop = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        batch_id = int(prop) if prop is not None else 0
    if sink_id is None:
        sink_id = cfg.sink_id or (ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None)
    if not cfg.exactly_once:
        rows = write_task(cfg, iterator, task=task, batch_id=batch_id, attempt=attempt)
        return TaskCommit(task, batch_id, rows, False, attempt)
    if not sink_id:
        raise SinkError("no streaming query id in this task; set option sink_id")
    staged = stage_task(
        cfg, iterator, task=task, batch_id=batch_id, sink_id=sink_id, attempt=attempt
    )
    if staged is None:
        return TaskCommit(task, batch_id, 0, True, attempt, sink_id)
    return TaskCommit(task, batch_id, staged.rows, False, attempt, sink_id, staged)


def _commit(cfg: WriteConfig, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
    """The driver's commit: every task must have reported for ``batch_id``;
    then commit their staged transactions (or, when the tasks found the
    batch decided, finish that earlier commit)."""
    missing = [i for i, m in enumerate(messages) if not isinstance(m, TaskCommit)]
    if missing:
        raise SinkError(f"batch {batch_id}: no commit message from tasks {missing}")
    commits = [m for m in messages if isinstance(m, TaskCommit)]
    wrong = [m for m in commits if m.batch_id != batch_id]
    if wrong:
        raise SinkError(f"batch {batch_id}: tasks wrote other batch ids: {wrong}")
    if not cfg.exactly_once or not commits:
        return
    sink_ids = {m.sink_id for m in commits}
    if len(sink_ids) != 1 or None in sink_ids:
        raise SinkError(f"batch {batch_id}: tasks disagree on the sink id: {sink_ids}")
    sink_id = commits[0].sink_id
    assert sink_id is not None
    if any(m.skipped for m in commits):
        if not all(m.skipped for m in commits):
            raise SinkError(
                f"batch {batch_id}: the sink state changed while its tasks ran "
                "(two queries with one sink id?)"
            )
        settle_batch(cfg, sink_id, batch_id)
        return
    commit_batch(cfg, sink_id, batch_id, [m.staged for m in commits if m.staged is not None])


def _abort(cfg: WriteConfig, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
    commits = [m for m in messages if isinstance(m, TaskCommit) and m.staged is not None]
    if not cfg.exactly_once or not commits:
        return
    left = abort_staged(
        cfg, commits[0].sink_id, batch_id, [m.staged for m in commits if m.staged is not None]
    )
    if left:
        # Already fenced or timed out (nothing to undo), or the batch was
        # decided (its commit is finished on replay).
        print(f"raftlog writer: abort of batch {batch_id}: {left}", flush=True)


class RaftlogStreamWriter(DataSourceStreamArrowWriter):
    """Tasks stage their rows in open transactions; ``commit`` on the driver
    decides the batch and commits them all; ``abort`` aborts them
    (spark_sink/staged.py)."""

    def __init__(self, schema: StructType, options: Any) -> None:
        _check_schema(schema)
        self.cfg = _write_config(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        return _run_task(self.cfg, iterator, None, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.cfg, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.cfg, messages, batchId)


class RaftlogBatchWriter(DataSourceArrowWriter):
    """A batch write, staged like a streaming batch (batch id 0 of sink id
    ``sink_id``, or ``batch-<uuid>`` per write)."""

    def __init__(self, schema: StructType, options: Any) -> None:
        import uuid

        _check_schema(schema)
        self.cfg = _write_config(options)
        self.sink_id = self.cfg.sink_id or f"batch-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        return _run_task(self.cfg, iterator, 0, self.sink_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.cfg, messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.cfg, messages, 0)


class RaftlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "raftlog"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftlogBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RaftlogStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> RaftlogBatchWriter:
        return RaftlogBatchWriter(schema, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RaftlogStreamWriter:
        return RaftlogStreamWriter(schema, self.options)
