"""Spark -> raftlog, exactly once: stream rows into a topic with the
foreachBatch sink, read them back with the raftlog Data Source.

    raftlog cluster up --dir /tmp/rl --detach          # 127.0.0.1:9092,9093,9094
    .venv/bin/python examples/spark_to_raftlog.py [--bootstrap-servers 127.0.0.1:9092]

Creates the topic ``spark-example`` (3 partitions, RF 3) if needed, streams
1,000 generated orders per micro-batch for 3 micro-batches (keys: the
customer; values: the row as JSON) through ``raftlog_sink`` with Kafka
transactions, then reads the topic with ``spark.read.format("raftlog")``
(read_committed) and prints what it wrote: rows per partition and a sample.
Running it again appends 3 more batches under a new query id.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description="Spark -> raftlog, exactly once")
    ap.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="spark-example")
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_sink.datasource import RaftlogDataSource
    from spark_sink.foreach_batch import raftlog_sink

    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers})
    if args.topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(args.topic, 3, 3)])[args.topic].result(30)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-to-raftlog")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RaftlogDataSource)

    orders = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1000)
        .load()
        .select(
            F.col("value").alias("order_id"),
            F.concat(F.lit("customer-"), F.col("value") % 10).alias("customer"),
            (F.col("value") % 97 + 1).alias("amount"),
        )
    )
    written: list[tuple[int, int, int]] = []

    def report(batch_id: int, stats: list) -> None:
        rows = sum(r.rows for r in stats)
        written.append((batch_id, rows, len(stats)))
        print(f"batch {batch_id}: wrote {rows} rows in {len(stats)} transactions")

    sink = raftlog_sink(
        bootstrap_servers=args.bootstrap_servers,
        topic=args.topic,
        key="customer",
        value=None,
        on_batch=report,
    )
    query = (
        orders.writeStream.foreachBatch(sink)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="spark-example-"))
        .start()
    )
    while len(written) < 3:
        query.awaitTermination(0.5)
    query.stop()
    sink.close()  # its state-group consumer

    df = (
        spark.read.format("raftlog")
        .option("bootstrap.servers", args.bootstrap_servers)
        .option("topic", args.topic)
        .load()
    )
    print(f"\ntopic {args.topic} (read_committed): {df.count()} rows")
    for row in df.groupBy("partition").count().orderBy("partition").collect():
        print(f"  partition {row.partition}: {row['count']} rows")
    print("sample:")
    for row in df.orderBy(F.desc("offset")).limit(3).collect():
        print(f"  {row.partition}@{row.offset} key={row.key.decode()} value={row.value.decode()}")
    spark.stop()


if __name__ == "__main__":
    main()
