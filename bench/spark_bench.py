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

Both run exactly once (Kafka transactions, one per task per batch) unless
``--no-exactly-once``. The figure per writer is rows written / the summed
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

GOAL = 100_000
PARTITIONS = 6


def session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from spark_sink.datasource import RaftlogDataSource

    spark.dataSource.register(RaftlogDataSource)
    return spark


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
        fut.result(30)


def run(spark: Any, writer: str, bootstrap: str, topic: str, rows_per_batch: int,
        batches: int, exactly_once: bool) -> dict[str, float]:
    from pyspark.sql import functions as F

    from spark_sink.foreach_batch import raftlog_sink

    src = (spark.readStream.format("rate-micro-batch")
           .option("rowsPerBatch", rows_per_batch).option("numPartitions", 2).load())
    cp = tempfile.mkdtemp(prefix="spark-bench-")
    if writer == "foreachBatch":
        w = src.writeStream.foreachBatch(raftlog_sink(
            bootstrap_servers=bootstrap, topic=topic, key="value", value=None,
            exactly_once=exactly_once))
    else:
        rows = src.select(F.col("value").cast("string").alias("key"),
                          F.to_json(F.struct("timestamp", "value")).alias("value"))
        w = (rows.writeStream.format("raftlog").option("bootstrap.servers", bootstrap)
             .option("topic", topic).option("exactly_once", str(exactly_once).lower()))
    started = time.monotonic()
    q = w.option("checkpointLocation", cp).trigger(processingTime="0 seconds").start()
    while len([p for p in q.recentProgress if p["numInputRows"]]) < batches + 1:
        if q.exception() is not None:
            raise RuntimeError(q.exception())
        time.sleep(0.2)
    q.stop()
    wall = time.monotonic() - started
    progress = [p for p in q.recentProgress if p["numInputRows"]][: batches + 1]
    measured = progress[1:]  # the first batch warms up the Python workers
    rows = sum(p["numInputRows"] for p in measured)
    secs = sum(p["durationMs"]["triggerExecution"] for p in measured) / 1000
    total_rows = sum(p["numInputRows"] for p in progress)
    for p in measured:
        d = p["durationMs"]["triggerExecution"]
        print(f"  {writer:13s} batch {p['batchId']:3d}: {p['numInputRows']:8d} rows in "
              f"{d:6d} ms = {p['numInputRows'] / d * 1000:9,.0f} rows/s")
    return {"rows": rows, "secs": secs, "rate": rows / secs, "query_rate": total_rows / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 measured batches of 100k rows")
    ap.add_argument("--rows-per-batch", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--exactly-once", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    if args.quick:
        args.rows_per_batch, args.batches = 100_000, 3

    directory = tempfile.mkdtemp(prefix="spark-bench-cluster-")
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast(),
                                 properties={"min.insync.replicas": "2"})
    cluster = LocalCluster(directory, layout)
    cluster.up(timeout_s=60)
    print(f"cluster: 3 nodes, RF 3, min.insync.replicas=2, acks=all: {cluster.bootstrap_servers}")
    print(f"{args.batches} measured micro-batches of {args.rows_per_batch:,} rows per writer, "
          f"exactly_once={args.exactly_once}, Spark local[2]")
    results = {}
    try:
        spark = session()
        for writer in ("foreachBatch", "datasource"):
            topic = f"bench-{writer.lower()}"
            create_topic(cluster.bootstrap_servers, topic)
            results[writer] = run(spark, writer, cluster.bootstrap_servers, topic,
                                  args.rows_per_batch, args.batches, args.exactly_once)
        spark.stop()
    finally:
        cluster.stop(timeout_s=10)
    print()
    print(f"{'writer':14s} {'rows':>10s} {'batch s':>8s} {'rows/s':>10s} {'query rows/s':>13s}")
    for writer, r in results.items():
        print(f"{writer:14s} {r['rows']:10,.0f} {r['secs']:8.2f} {r['rate']:10,.0f} "
              f"{r['query_rate']:13,.0f}")
    summary = ", ".join(f"{w} {r['rate']:,.0f} rows/s ({r['rate'] / GOAL:.2f}x goal)"
                        for w, r in results.items())
    print(f"\nsummary: Spark -> raftlog (RF 3, acks=all, exactly_once={args.exactly_once}): "
          f"{summary}; goal {GOAL:,} rows/s")


if __name__ == "__main__":
    main()
