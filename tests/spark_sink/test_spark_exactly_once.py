"""Exactly once through Kafka transactions (slow: each runs Spark jobs, one
restarts a Spark driver).

- crash and restart: a streaming query (its own process) writes JSON files
  through the foreachBatch sink; the whole driver process group is SIGKILLed
  while a batch's staged transactions are open (read_uncommitted sees more
  rows than read_committed); the query restarts from its checkpoint and
  replays that batch id. A read_committed consumer then sees every row
  exactly once.
- task retry: the first attempt of every write task fails after writing part
  of its rows (``local[2,2]`` retries it); same result, and the aborted rows
  are on the log (read_uncommitted) but invisible to read_committed.
- the Data Source writer under the same injected failure, round trip from the
  raftlog source, row for row.

They need a cluster that serves Kafka transactions; until it does, they are
skipped saying so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from spark_helpers import (
    SPARK_MISSING,
    create_topic,
    raftlog_stream,
    read_topic,
    transactions_missing,
)
from test_spark_sink import write_inputs

from data_plane.local_cluster import LocalCluster

# Driver crash, task retry and the failing round trip: about three minutes,
# behind --long; tests/spark_sink/test_spark_sink.py keeps a fast end-to-end
# test in the default suite.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.skipif(SPARK_MISSING is not None, reason=SPARK_MISSING or ""),
]

JOB = Path(__file__).resolve().parent / "crash_job.py"


@pytest.fixture
def txn_cluster(cluster: LocalCluster) -> LocalCluster:
    missing = transactions_missing(cluster)
    if missing:
        pytest.skip(missing)
    return cluster


def committed_ns(bootstrap: str, topic: str) -> list[int]:
    return [json.loads(v)["n"] for _, _, _, v, _ in read_topic(bootstrap, topic)]


def test_sigkill_driver_mid_batch_then_restart_writes_every_row_once(
    txn_cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = txn_cluster.bootstrap_servers
    topic = create_topic(txn_cluster, "crash")
    rows = write_inputs(tmp_path / "in", files=5, per_file=20_000)
    cmd = [sys.executable, str(JOB), bootstrap, topic, str(tmp_path / "in"), str(tmp_path / "cp")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    transcript: list[str] = []

    def log(line: str) -> None:
        transcript.append(line)
        print(line, flush=True)

    watch = {
        iso: Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "crash-watch", "isolation.level": iso}
        )
        for iso in ("read_uncommitted", "read_committed")
    }

    def ends(consumers: dict[str, Any]) -> dict[int, tuple[int, int]]:
        out = {}
        for p in range(3):
            _, hw = consumers["read_uncommitted"].get_watermark_offsets(
                CTP(topic, p), timeout=5, cached=False
            )
            _, lso = consumers["read_committed"].get_watermark_offsets(
                CTP(topic, p), timeout=5, cached=False
            )
            out[p] = (hw, lso)
        return out

    run1 = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert run1.stdout is not None
    killed_mid_txn = False
    for line in run1.stdout:
        log(f"[run 1] {line.rstrip()}")
        if line.startswith("batch 2 starting"):
            # Kill once a transaction has records on the log: the high
            # watermark (read_uncommitted) is past the last stable offset.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                open_txn = {p: (hw, lso) for p, (hw, lso) in ends(watch).items() if hw > lso}
                if open_txn:
                    os.killpg(run1.pid, signal.SIGKILL)
                    killed_mid_txn = True
                    log(
                        f"[test] SIGKILL driver process group {run1.pid} mid-batch: partition -> "
                        f"(high watermark, last stable offset) {open_txn}"
                    )
                    break
                time.sleep(0.01)
            break
    if not killed_mid_txn:
        os.killpg(run1.pid, signal.SIGKILL)
    run1.wait(30)
    for c in watch.values():
        c.close()
    assert killed_mid_txn, "\n".join(transcript)
    before = committed_ns(bootstrap, topic)
    log(
        f"[test] after the crash: read_committed sees {len(before)} rows "
        f"({len(set(before))} distinct)"
    )

    run2 = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    for line in run2.stdout.splitlines():
        log(f"[run 2] {line}")
    assert run2.returncode == 0, run2.stderr[-3000:]
    assert "query done" in run2.stdout

    ns = committed_ns(bootstrap, topic)
    uncommitted = len(read_topic(bootstrap, topic, "read_uncommitted"))
    log(
        f"[test] input rows {len(rows)}; read_committed rows {len(ns)}, distinct {len(set(ns))}; "
        f"read_uncommitted rows {uncommitted} (aborted writes included)"
    )
    assert len(ns) == len(rows)
    assert sorted(ns) == sorted(r["n"] for r in rows)
    # The replay ran batch 2 again: written afresh if the crash came before
    # the driver's decision (the staged transactions of run 1 were fenced),
    # or skipped after its commit was finished if the crash came after it.
    assert any(
        line.startswith(("[run 2] batch 2 committed", "[run 2] batch 2 skipped"))
        for line in transcript
    )


def test_task_retry_after_partial_write_adds_no_duplicates(
    spark: Any, txn_cluster: LocalCluster
) -> None:
    from spark_sink.foreach_batch import raftlog_sink

    bootstrap = txn_cluster.bootstrap_servers
    topic = create_topic(txn_cluster, "retry")
    df = spark.range(0, 30_000, numPartitions=2).selectExpr(
        "concat('k-', id) as key", "cast(id as string) as value"
    )
    stats: list[Any] = []
    sink = raftlog_sink(
        bootstrap_servers=bootstrap,
        topic=topic,
        key="key",
        value="value",
        sink_id="retry-test",
        fail_first_attempt_after=4000,
        on_batch=lambda b, s: stats.extend(s),
    )
    sink(df, 0)
    print(f"\ntask results: {[(r.task, r.rows, r.attempt, r.skipped) for r in stats]}")
    assert all(r.attempt == 1 for r in stats if r.rows), stats  # every task failed once
    committed = read_topic(bootstrap, topic)
    raw = read_topic(bootstrap, topic, "read_uncommitted")
    values = sorted(int(v) for _, _, _, v, _ in committed)
    print(f"read_committed {len(committed)} rows; read_uncommitted {len(raw)} rows")
    assert values == list(range(30_000))
    assert len(raw) > len(committed)  # the failed attempts did write, then were aborted

    # The same batch id again (a replay after a driver crash): decided, so
    # the driver skips it without running a task.
    stats.clear()
    sink(df, 0)
    sink.close()
    assert stats == [], stats
    assert len(read_topic(bootstrap, topic)) == 30_000


def test_datasource_writer_round_trip_with_task_retries(
    spark: Any, txn_cluster: LocalCluster, tmp_path: Path
) -> None:
    from spark_sink.foreach_batch import raftlog_sink

    bootstrap = txn_cluster.bootstrap_servers
    src, dst = create_topic(txn_cluster, "ds-src"), create_topic(txn_cluster, "ds-dst")
    df = spark.range(0, 9000, numPartitions=3).selectExpr(
        "concat('k-', id % 500) as key",
        "cast(id as string) as value",
        "array(named_struct('key', 'h', 'value', cast(cast(id as string) as binary))) as headers",
    )
    with raftlog_sink(
        bootstrap_servers=bootstrap,
        topic=src,
        key="key",
        value="value",
        headers="headers",
        sink_id="ds-src",
    ) as sink:
        sink(df, 0)
    stream = raftlog_stream(spark, bootstrap, src, 4000)
    q = (
        stream.select("key", "value", "headers")
        .writeStream.format("raftlog")
        .option("bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("failFirstAttemptAfter", 1000)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    a = sorted((p, k, v, tuple(h or ())) for p, _, k, v, h in read_topic(bootstrap, src))
    b = sorted((p, k, v, tuple(h or ())) for p, _, k, v, h in read_topic(bootstrap, dst))
    assert len(a) == 9000
    assert a == b


@pytest.mark.parametrize("fail", ["before_decision", "after_decision"])
def test_datasource_writer_commit_failure_then_restart_writes_every_row_once(
    spark: Any, txn_cluster: LocalCluster, tmp_path: Path, fail: str
) -> None:
    """Spark's own driver path: the stream writer's ``commit`` fails (fault
    injection) before or after deciding the first batch, so Spark calls
    ``abort`` and the query dies; a restart from the checkpoint replays the
    batch. Before the decision, abort discards the staged transactions and
    the replay rewrites the batch; after it, abort leaves them (they are
    decided, and read_committed sees nothing yet), and the replay's tasks
    skip while its commit finishes the decided one."""
    from test_spark_staged import open_transactions, wait_closed

    from spark_sink.foreach_batch import raftlog_sink

    bootstrap = txn_cluster.bootstrap_servers
    src = create_topic(txn_cluster, f"cf-src-{fail}")
    dst = create_topic(txn_cluster, f"cf-dst-{fail}")
    df = spark.range(0, 6000, numPartitions=3).selectExpr(
        "concat('k-', id) as key", "cast(id as string) as value"
    )
    with raftlog_sink(
        bootstrap_servers=bootstrap, topic=src, key="key", value="value", sink_id=f"cf-src-{fail}"
    ) as sink:
        sink(df, 0)

    def start(fail_commit: str | None) -> Any:
        stream = raftlog_stream(spark, bootstrap, src, 4000)
        w = (
            stream.select("key", "value")
            .writeStream.format("raftlog")
            .option("bootstrap.servers", bootstrap)
            .option("topic", dst)
            .option("checkpointLocation", str(tmp_path / "cp"))
        )
        if fail_commit:
            w = w.option("failCommit", fail_commit)
        return w.trigger(availableNow=True).start()

    q = start(fail)
    with pytest.raises(Exception, match="injected failure: commit of batch 0"):
        q.awaitTermination(180)
    raw = read_topic(bootstrap, dst, "read_uncommitted")
    held = open_transactions(bootstrap, dst)
    print(
        f"\n{fail}: query failed in commit; read_committed {len(read_topic(bootstrap, dst))} "
        f"rows, read_uncommitted {len(raw)}, open transactions (hw, lso) {held}"
    )
    assert read_topic(bootstrap, dst) == []
    assert len(raw) >= 3000  # the batch was staged
    if fail == "before_decision":
        wait_closed(bootstrap, dst)  # abort ended them
    else:
        assert held  # decided, left open for the replay to commit

    q = start(None)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    wait_closed(bootstrap, dst)
    values = sorted(int(v) for _, _, _, v, _ in read_topic(bootstrap, dst))
    print(
        f"{fail}: after the restart read_committed {len(values)} rows "
        f"({len(set(values))} distinct), read_uncommitted "
        f"{len(read_topic(bootstrap, dst, 'read_uncommitted'))}"
    )
    assert values == list(range(6000))
