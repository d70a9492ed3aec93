"""The fast end-to-end Spark test (default suite) and the bad-row errors.

Real PySpark (``local[2,2]``) against a real 3-node cluster: a file source
streams JSON rows through the foreachBatch sink into a topic; the raftlog
streaming source (``maxRecordsPerBatch``, ``availableNow``) reads it back and
the raftlog Data Source writer copies it into a second topic; a batch read
of both topics must agree row for row (key, value, partition) and hold
exactly the input rows. The sinks run transactionally (exactly once) when
the cluster serves Kafka transactions, and with idempotent producers
(at-least-once) until then; the test prints which.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import (
    SPARK_MISSING,
    create_topic,
    raftlog_stream,
    read_topic,
    transactions_missing,
)

from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.skipif(SPARK_MISSING is not None, reason=SPARK_MISSING or "")

ROWS_PER_FILE = 300
FILES = 3


def write_inputs(
    directory: Path, files: int = FILES, per_file: int = ROWS_PER_FILE
) -> list[dict[str, Any]]:
    rows = []
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        chunk = [
            {"id": f"user-{f}-{i}", "n": f * per_file + i, "tag": "x" * (i % 7)}
            for i in range(per_file)
        ]
        (directory / f"part-{f:03d}.json").write_text("\n".join(json.dumps(r) for r in chunk))
        rows.extend(chunk)
    return rows


def test_file_source_to_sink_then_source_to_datasource_writer_round_trip(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    started = time.monotonic()
    from spark_sink.foreach_batch import raftlog_sink

    bootstrap = cluster.bootstrap_servers
    eos = transactions_missing(cluster) is None
    print(f"\nsinks exactly_once={eos} ({transactions_missing(cluster) or 'transactions served'})")
    first, second = create_topic(cluster, "rt-first"), create_topic(cluster, "rt-second")
    rows = write_inputs(tmp_path / "in")

    batches: list[tuple[int, list[Any]]] = []
    source = (
        spark.readStream.schema("id string, n long, tag string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    with raftlog_sink(
        bootstrap_servers=bootstrap,
        topic=first,
        key="id",
        value=None,
        exactly_once=eos,
        on_batch=lambda b, s: batches.append((b, s)),
    ) as sink:
        q = (
            source.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp1"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    assert [b for b, _ in batches] == [0, 1, 2]
    assert sum(r.rows for _, s in batches for r in s) == len(rows)

    stream = raftlog_stream(spark, bootstrap, first, 400)
    q2 = (
        stream.select("key", "value", "headers")
        .writeStream.format("raftlog")
        .option("bootstrap.servers", bootstrap)
        .option("topic", second)
        .option("exactly_once", str(eos).lower())
        .option("checkpointLocation", str(tmp_path / "cp2"))
        .trigger(availableNow=True)
        .start()
    )
    q2.awaitTermination(120)
    assert q2.exception() is None, q2.exception()
    progress = [p["numInputRows"] for p in q2.recentProgress if p["numInputRows"]]
    assert len(progress) >= 3 and max(progress) <= 400, progress  # maxRecordsPerBatch held

    def batch_read(topic: str) -> list[tuple[bytes, bytes, int]]:
        df = (
            spark.read.format("raftlog")
            .option("bootstrap.servers", bootstrap)
            .option("topic", topic)
            .load()
        )
        assert df.columns == [
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestampType",
            "headers",
        ]
        return sorted(
            (bytes(r.key), bytes(r.value), r.partition)
            for r in df.select("key", "value", "partition").collect()
        )

    a, b = batch_read(first), batch_read(second)
    assert a == b  # row for row, each in the same partition (murmur2 of the same key)
    assert len(a) == len(rows)
    assert sorted(json.loads(v)["n"] for _, v, _ in a) == sorted(r["n"] for r in rows)
    assert {k.decode() for k, _, _ in a} == {r["id"] for r in rows}
    # A plain Kafka consumer (read_committed) agrees with the Spark reader.
    direct = read_topic(bootstrap, second)
    assert sorted((k, v, p) for p, _, k, v, _ in direct) == b
    print(f"round trip of {len(rows)} rows in {time.monotonic() - started:.1f} s")


def test_bad_rows_fail_the_batch_naming_the_row(spark: Any, cluster: LocalCluster) -> None:
    from spark_sink.foreach_batch import raftlog_sink
    from spark_sink.kafka_io import SinkError

    topic = create_topic(cluster, "bad-rows", partitions=1)
    bootstrap = cluster.bootstrap_servers
    null_key = spark.createDataFrame([("a", "1"), (None, "2")], "k string, v string")
    sink = raftlog_sink(
        bootstrap_servers=bootstrap,
        topic=topic,
        key="k",
        value="v",
        allow_null_key=False,
        exactly_once=False,
        sink_id="bad",
    )
    with pytest.raises(
        Exception, match=r"row \d+ of task \d+ in batch 7 \(key=null, value=b'2'\): null key"
    ) as info:
        sink(null_key, 7)
    assert SinkError.__name__ in str(info.value)

    big = spark.createDataFrame([("ok", "small"), ("huge", "y" * 2000)], "k string, v string")
    sink = raftlog_sink(
        bootstrap_servers=bootstrap,
        topic=topic,
        key="k",
        value="v",
        exactly_once=False,
        sink_id="bad",
        **{"message.max.bytes": 1500},
    )
    with pytest.raises(
        Exception,
        match=r"row \d+ of task \d+ in batch 3 \(key=b'huge', value=b'y{40}'\.\.\.\): record of 2004 bytes exceeds message.max.bytes=1500",
    ):
        sink(big, 3)
