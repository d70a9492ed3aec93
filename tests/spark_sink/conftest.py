"""Fixtures for the Spark tests: one real 3-node cluster (RF 3,
``min.insync.replicas=2``) and one tuned ``local[2,2]`` SparkSession per
session (``local[N,F]``: a failed task is retried once).

Every test here is skipped, with the reason, when pyspark is not installed
(``pip install "pyspark==4.3.0" pyarrow "pandas<3"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from spark_helpers import SPARK_MISSING, spark_builder

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if SPARK_MISSING is not None:
        pytest.skip(SPARK_MISSING)
    started = time.monotonic()
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    from spark_sink.datasource import RaftlogDataSource

    session.dataSource.register(RaftlogDataSource)
    print(f"\nSparkSession ready in {time.monotonic() - started:.1f} s")
    yield session
    session.stop()
    # py4j's connection objects log "Closing down clientserver connection"
    # from __del__ at interpreter exit, after pytest has closed the stream the
    # handler writes to ("--- Logging error ---" after the summary).
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(
        base_port=None,
        timeouts=Timeouts.fast(),
        properties={"min.insync.replicas": "2", "auto.create.topics.enable": "false"},
    )
    c = LocalCluster(tmp_path_factory.mktemp("spark-cluster"), layout)
    started = time.monotonic()
    c.up(timeout_s=40)
    print(f"\ncluster ready in {time.monotonic() - started:.1f} s: {c.bootstrap_servers}")
    try:
        yield c
    finally:
        c.stop(timeout_s=10)
