"""Helpers for the Spark tests (imported by the tests and by crash_job.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP

from data_plane.local_cluster import LocalCluster

try:
    import pyspark  # noqa: F401

    SPARK_MISSING = None
except ImportError as exc:  # depends on the environment
    SPARK_MISSING = (
        f"pyspark is not installed ({exc}); pip install 'pyspark==4.3.0' pyarrow 'pandas<3'"
    )

CLI = [sys.executable, "-m", "data_plane"]


def spark_builder(master: str = "local[2,2]") -> Any:
    """The tuned local session (issue 8): no UI, 2 shuffle partitions,
    serial GC and C1 only, loopback, workers on this interpreter."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master(master)
        .appName("raftlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "5000")
    )


def create_topic(cluster: LocalCluster, name: str, partitions: int = 3) -> str:
    result = subprocess.run(
        [
            *CLI,
            "topics",
            "create",
            "--topic",
            name,
            "--partitions",
            str(partitions),
            "--replication-factor",
            "3",
            "--bootstrap-server",
            cluster.bootstrap_servers,
        ],
        capture_output=True,
        text=True,
        timeout=40,
    )
    assert result.returncode == 0, result.stderr
    cluster.wait_topic(name, partitions)
    return name


def raftlog_stream(spark: Any, bootstrap: str, topic: str, max_records_per_batch: int) -> Any:
    """A streaming DataFrame over ``topic`` from the earliest offset, through
    the raftlog Data Source."""
    return (
        spark.readStream.format("raftlog")
        .option("bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerBatch", max_records_per_batch)
        .load()
    )


def read_topic(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 30.0
) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    """Every record up to the current end: (partition, offset, key, value, headers)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-test-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(CTP(topic, p), timeout=10, cached=False)
            for p in parts
        }
        consumer.assign([CTP(topic, p, lo) for p, (lo, _) in ends.items()])
        out = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pos = {
                tp.partition: tp.offset for tp in consumer.position([CTP(topic, p) for p in parts])
            }
            if all(pos[p] >= hi for p, (_, hi) in ends.items()):
                break
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error() is None:
                    out.append(
                        (msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers())
                    )
        return out
    finally:
        consumer.close()


_TXN_SUPPORT: dict[str, str | None] = {}


def transactions_missing(cluster: LocalCluster) -> str | None:
    """None when the cluster serves Kafka transactions; else why not."""
    key = cluster.bootstrap_servers
    if key not in _TXN_SUPPORT:
        producer = Producer({"bootstrap.servers": key, "transactional.id": "spark-test-probe"})
        try:
            producer.init_transactions(10)
            _TXN_SUPPORT[key] = None
        except KafkaException as exc:
            _TXN_SUPPORT[key] = (
                f"the cluster does not serve Kafka transactions yet "
                f"(init_transactions: {exc.args[0].str()})"
            )
    return _TXN_SUPPORT[key]
