"""Spark -> raftlog throughput (issue 8 §4): rows/s from a rate source
through the sink into a 3-node cluster (RF 3, ``min.insync.replicas=2``,
acks=all).

    .venv/bin/python bench/spark_bench.py [--quick] [--rows-per-batch N] [--batches N]
                                          [--exactly-once | --no-exactly-once]

Spark runs ``local[2]`` with the tuned session of issue 8. The source is
``rate-micro-batch`` (a fixed number of rows per micro-batch, generated in the
JVM); each row becomes key = the row number as a string, value = the row as
JSON (~50 bytes). Two writers, one topic each (6 partitions):

- foreachBatch: ``raftlog_sink(...)`` (mapInArrow on the executors);
- the Data Source writer: ``writeStream.format("raftlog")`` (Arrow writer).

Both run exactly once unless ``--no-exactly-once``: each task stages its rows
in a Kafka transaction and the driver commits them (spark_sink/staged.py).
``--compression`` sets the producers' ``compression.type``; ``--writers``
picks the writers. The figure per writer is rows written / the summed
wall time of the measured micro-batches (``durationMs.triggerExecution``),
after one warm-up batch; the whole query's rows/s is printed too. Prints
a table and a summary line against the goal of 100k rows/s; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

GOAL = 100_000
PARTITIONS = 6


def session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from spark_sink.datasource import RaftlogDataSource

    spark.dataSource.register(RaftlogDataSource)
    return spark


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
        fut.result(30)


def run(
    spark: Any,
    writer: str,
    bootstrap: str,
    topic: str,
    rows_per_batch: int,
    batches: int,
    exactly_once: bool,
    producer: dict[str, str],
) -> dict[str, float]:
    from pyspark.sql import functions as F

    from spark_sink.foreach_batch import raftlog_sink

    src = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    cp = tempfile.mkdtemp(prefix="spark-bench-")
    close_sink: Callable[[], None] = lambda: None  # noqa: E731
    if writer.startswith("foreachBatch"):
        sink = raftlog_sink(
            bootstrap_servers=bootstrap,
            topic=topic,
            key="value",
            value=None,
            exactly_once=exactly_once,
            **producer,
        )
        close_sink = sink.close
        if writer == "foreachBatch-shuffle":
            # The earlier design: hash-partition each batch on the key into
            # one task per topic partition before writing.
            def shuffled(df: Any, batch_id: int) -> None:
                sink(df.repartition(PARTITIONS, F.hash("value")), batch_id)

            w = src.writeStream.foreachBatch(shuffled)
        else:
            w = src.writeStream.foreachBatch(sink)
    else:
        rows = src.select(
            F.col("value").cast("string").alias("key"),
            F.to_json(F.struct("timestamp", "value")).alias("value"),
        )
        w = (
            rows.writeStream.format("raftlog")
            .option("bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("exactly_once", str(exactly_once).lower())
        )
        for k, v in producer.items():
            w = w.option(f"kafka.{k}", v)
    started = time.monotonic()
    q = w.option("checkpointLocation", cp).trigger(processingTime="0 seconds").start()
    while len([p for p in q.recentProgress if p["numInputRows"]]) < batches + 1:
        if q.exception() is not None:
            raise RuntimeError(q.exception())
        time.sleep(0.2)
    q.stop()
    close_sink()  # the sink's state consumers
    wall = time.monotonic() - started
    progress = [p for p in q.recentProgress if p["numInputRows"]][: batches + 1]
    measured = progress[1:]  # the first batch warms up the Python workers
    rows = sum(p["numInputRows"] for p in measured)
    secs = sum(p["durationMs"]["triggerExecution"] for p in measured) / 1000
    total_rows = sum(p["numInputRows"] for p in progress)
    for p in measured:
        d = p["durationMs"]["triggerExecution"]
        print(
            f"  {writer:19s} batch {p['batchId']:3d}: {p['numInputRows']:8d} rows in "
            f"{d:6d} ms = {p['numInputRows'] / d * 1000:9,.0f} rows/s "
            f"(addBatch {p['durationMs'].get('addBatch', 0)} ms)"
        )
    return {"rows": rows, "secs": secs, "rate": rows / secs, "query_rate": total_rows / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 measured batches of 100k rows")
    ap.add_argument("--rows-per-batch", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--exactly-once", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--compression",
        default="none",
        choices=("none", "gzip", "lz4", "zstd"),
        help="the producers' compression.type",
    )
    ap.add_argument(
        "--writers",
        default="foreachBatch,datasource",
        help="comma-separated: foreachBatch, datasource, foreachBatch-shuffle (the sink "
        "after a repartition on the key, the earlier design's cost)",
    )
    args = ap.parse_args()
    producer = {"compression.type": args.compression} if args.compression != "none" else {}
    if args.quick:
        args.rows_per_batch, args.batches = 100_000, 3

    directory = tempfile.mkdtemp(prefix="spark-bench-cluster-")
    layout = ClusterLayout.build(
        base_port=None, timeouts=Timeouts.fast(), properties={"min.insync.replicas": "2"}
    )
    cluster = LocalCluster(directory, layout)
    cluster.up(timeout_s=60)
    print(f"cluster: 3 nodes, RF 3, min.insync.replicas=2, acks=all: {cluster.bootstrap_servers}")
    print(
        f"{args.batches} measured micro-batches of {args.rows_per_batch:,} rows per writer, "
        f"exactly_once={args.exactly_once}, compression={args.compression}, Spark local[2]"
    )
    load_before = os.getloadavg()
    results = {}
    try:
        spark = session()
        for writer in args.writers.split(","):
            topic = f"bench-{writer.lower()}"
            create_topic(cluster.bootstrap_servers, topic)
            results[writer] = run(
                spark,
                writer,
                cluster.bootstrap_servers,
                topic,
                args.rows_per_batch,
                args.batches,
                args.exactly_once,
                producer,
            )
        spark.stop()
    finally:
        cluster.stop(timeout_s=10)
    print()
    print(f"{'writer':20s} {'rows':>10s} {'batch s':>8s} {'rows/s':>10s} {'query rows/s':>13s}")
    for writer, r in results.items():
        print(
            f"{writer:20s} {r['rows']:10,.0f} {r['secs']:8.2f} {r['rate']:10,.0f} "
            f"{r['query_rate']:13,.0f}"
        )
    summary = ", ".join(
        f"{w} {r['rate']:,.0f} rows/s ({r['rate'] / GOAL:.2f}x goal)" for w, r in results.items()
    )
    if "datasource" in results:
        ds = results["datasource"]["rate"]
        for writer, r in results.items():
            if writer != "datasource":
                print(f"{writer} / datasource: {r['rate'] / ds:.2f}")
    load = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} "
        f"{load_before[2]:.2f}, after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"({os.cpu_count()} CPUs)"
    )
    print(
        f"\nsummary: Spark -> raftlog (RF 3, acks=all, exactly_once={args.exactly_once}, "
        f"compression={args.compression}): {summary}; goal {GOAL:,} rows/s"
    )


if __name__ == "__main__":
    main()
