"""Staged writes of the Data Source stream writer (spark_sink/staged.py) on a
real 3-node cluster.

Spark tasks (``local[2,2]``) run `RaftlogStreamWriter.write` exactly as a
streaming write does (batch id from the ``streaming.sql.batchId`` local
property); their commit messages come back to the test, which then plays
the driver: ``commit(messages, batchId)`` and ``abort(messages, batchId)`` on
fresh writer instances, as Spark calls them. Between the two phases the
rows are on the log (read_uncommitted) and invisible to read_committed.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from spark_helpers import SPARK_MISSING, create_topic, read_topic, transactions_missing

from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.skipif(SPARK_MISSING is not None, reason=SPARK_MISSING or "")

ROWS = 6000


@pytest.fixture
def txn_cluster(cluster: LocalCluster) -> LocalCluster:
    missing = transactions_missing(cluster)
    if missing:
        pytest.skip(missing)
    return cluster


def open_transactions(
    bootstrap: str, topic: str, partitions: int = 3
) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, last stable offset) where they differ."""
    out = {}
    cs = {
        iso: Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "staged-watch", "isolation.level": iso}
        )
        for iso in ("read_uncommitted", "read_committed")
    }
    try:
        for p in range(partitions):
            _, hw = cs["read_uncommitted"].get_watermark_offsets(
                CTP(topic, p), timeout=10, cached=False
            )
            _, lso = cs["read_committed"].get_watermark_offsets(
                CTP(topic, p), timeout=10, cached=False
            )
            if hw != lso:
                out[p] = (hw, lso)
    finally:
        for c in cs.values():
            c.close()
    return out


def wait_closed(bootstrap: str, topic: str, timeout_s: float = 20.0) -> None:
    """Markers are written after EndTxn answers: wait until no partition has
    an open transaction."""
    deadline = time.monotonic() + timeout_s
    while (left := open_transactions(bootstrap, topic)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"transactions still open: {left}"


def stage(spark: Any, options: dict[str, str], batch_id: int, rows: int = ROWS) -> list[Any]:
    """Run the stream writer's tasks for ``batch_id``; their commit messages."""
    import pyarrow as pa

    from spark_sink.datasource import RaftlogStreamWriter

    df = spark.range(0, rows, numPartitions=3).selectExpr(
        "concat('k-', id) as key", "cast(id as string) as value"
    )
    writer = RaftlogStreamWriter(df.schema, options)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        message = writer.write(batches)
        yield pa.RecordBatch.from_pylist([{"message": pickle.dumps(message)}])

    spark.sparkContext.setLocalProperty("streaming.sql.batchId", str(batch_id))
    try:
        out = df.mapInArrow(run, "message binary").collect()
    finally:
        spark.sparkContext.setLocalProperty("streaming.sql.batchId", None)
    return [pickle.loads(r.message) for r in out]


def driver(spark: Any, options: dict[str, str]) -> Any:
    """A fresh writer, as Spark makes one for commit and abort on the driver."""
    from spark_sink.datasource import RaftlogStreamWriter

    return RaftlogStreamWriter(
        spark.range(1).selectExpr("'' as key", "'' as value").schema, options
    )


def test_stream_writer_stages_until_driver_commit_and_abort_discards(
    spark: Any, txn_cluster: LocalCluster
) -> None:
    bootstrap = txn_cluster.bootstrap_servers
    topic = create_topic(txn_cluster, "staged")
    options = {
        "bootstrap.servers": bootstrap,
        "topic": topic,
        "sink_id": "staged-test",
        # every task's first attempt fails after 1000 rows (local[2,2] retries it)
        "failFirstAttemptAfter": "1000",
    }

    messages = stage(spark, options, batch_id=0)
    print(
        f"\nbatch 0 tasks: {[(m.task, m.attempt, m.rows, m.staged.producer_epoch) for m in messages]}"
    )
    assert sorted(m.task for m in messages) == [0, 1, 2]
    assert all(m.attempt == 1 and not m.skipped for m in messages), messages  # each task retried
    assert sum(m.rows for m in messages) == ROWS
    staged_open = open_transactions(bootstrap, topic)
    committed, raw = read_topic(bootstrap, topic), read_topic(bootstrap, topic, "read_uncommitted")
    print(
        f"staged: read_committed {len(committed)} rows, read_uncommitted {len(raw)} rows, "
        f"open transactions (hw, lso) {staged_open}"
    )
    assert committed == []  # staged rows are invisible to read_committed...
    assert len(raw) >= ROWS + 3 * 1000  # ...but on the log, with the failed attempts' rows
    assert staged_open

    driver(spark, options).commit(messages, 0)
    wait_closed(bootstrap, topic)
    values = sorted(int(v) for _, _, _, v, _ in read_topic(bootstrap, topic))
    print(f"after commit(batch 0): read_committed {len(values)} rows")
    assert values == list(range(ROWS))

    driver(spark, options).commit(messages, 0)  # a retried commit is a no-op
    assert len(read_topic(bootstrap, topic)) == ROWS

    # Batch 1 is staged, then aborted: nothing of it becomes visible.
    options_1 = {k: v for k, v in options.items() if k != "failFirstAttemptAfter"}
    messages_1 = stage(spark, options_1, batch_id=1)
    assert sum(m.rows for m in messages_1) == ROWS and open_transactions(bootstrap, topic)
    driver(spark, options_1).abort(messages_1, 1)
    wait_closed(bootstrap, topic)
    raw_after = len(read_topic(bootstrap, topic, "read_uncommitted"))
    print(
        f"after abort(batch 1): read_committed {len(read_topic(bootstrap, topic))} rows, "
        f"read_uncommitted {raw_after}"
    )
    assert len(read_topic(bootstrap, topic)) == ROWS
    assert raw_after >= len(raw) + ROWS

    # A replay of decided batch 0: every task skips, and commit is a no-op.
    replay = stage(spark, options_1, batch_id=0)
    assert all(m.skipped and m.rows == 0 and m.staged is None for m in replay), replay
    driver(spark, options_1).commit(replay, 0)
    # Batch 1 after its abort (a replay of an undecided batch) writes in full.
    messages_1 = stage(spark, options_1, batch_id=1)
    driver(spark, options_1).commit(messages_1, 1)
    wait_closed(bootstrap, topic)
    values = sorted(int(v) for _, _, _, v, _ in read_topic(bootstrap, topic))
    print(f"after replaying batch 0 (skipped) and batch 1: read_committed {len(values)} rows")
    assert values == sorted(list(range(ROWS)) * 2)


def test_retried_task_fences_the_zombie_attempts_staged_transaction(
    txn_cluster: LocalCluster,
) -> None:
    """A task attempt that staged its rows and then was lost (a zombie) is
    fenced by the next attempt's init_transactions: its transaction is
    aborted and the driver cannot commit it; the new attempt's can."""
    import pyarrow as pa

    from spark_sink.kafka_io import WriteConfig
    from spark_sink.staged import commit_batch, stage_task

    bootstrap = txn_cluster.bootstrap_servers
    topic = create_topic(txn_cluster, "zombie")
    cfg = WriteConfig(bootstrap, topic, {"linger.ms": 5})
    rows = pa.RecordBatch.from_pydict(
        {"key": [f"k{i}" for i in range(500)], "value": [str(i) for i in range(500)]}
    )
    zombie = stage_task(cfg, [rows], task=0, batch_id=0, sink_id="zombie", attempt=0)
    retry = stage_task(cfg, [rows], task=0, batch_id=0, sink_id="zombie", attempt=1)
    assert zombie is not None and retry is not None
    assert retry.producer_id == zombie.producer_id
    assert retry.producer_epoch > zombie.producer_epoch
    assert read_topic(bootstrap, topic) == []
    with pytest.raises(Exception, match="producer_fenced"):
        commit_batch(cfg, "zombie", 0, [zombie])
    commit_batch(cfg, "zombie", 0, [retry])
    wait_closed(bootstrap, topic)
    values = sorted(int(v) for _, _, _, v, _ in read_topic(bootstrap, topic))
    raw = read_topic(bootstrap, topic, "read_uncommitted")
    print(
        f"\nzombie epoch {zombie.producer_epoch}, retry epoch {retry.producer_epoch}: "
        f"read_committed {len(values)} rows, read_uncommitted {len(raw)}"
    )
    assert values == list(range(500))
    assert len(raw) == 1000


def test_driver_crash_after_the_decision_is_finished_by_the_replay(
    txn_cluster: LocalCluster,
) -> None:
    """The driver decided a batch (sink state written with its staged
    transactions) and died before any EndTxn: the replay of that batch id
    commits them instead of writing the batch again, and the tasks of a
    replay skip it without fencing the decided transactions."""
    import pyarrow as pa

    from spark_sink.kafka_io import WriteConfig
    from spark_sink.staged import SinkState, read_state, settle_batch, stage_task, write_state

    bootstrap = txn_cluster.bootstrap_servers
    topic = create_topic(txn_cluster, "decided")
    cfg = WriteConfig(bootstrap, topic, {"linger.ms": 5})
    staged = []
    for task in range(3):
        rows = pa.RecordBatch.from_pydict(
            {
                "key": [f"k{task}-{i}" for i in range(300)],
                "value": [str(task * 300 + i) for i in range(300)],
            }
        )
        s = stage_task(cfg, [rows], task=task, batch_id=4, sink_id="decided")
        assert s is not None
        staged.append(s)
    # The crash: decided, no EndTxn sent.
    write_state(
        cfg,
        "decided",
        SinkState(5, tuple((s.transactional_id, s.producer_id, s.producer_epoch) for s in staged)),
    )
    assert read_topic(bootstrap, topic) == []
    # A replayed task finds the batch decided and leaves its transactional id alone.
    assert stage_task(cfg, [], task=0, batch_id=4, sink_id="decided") is None
    assert settle_batch(cfg, "decided", 4)  # the driver's replay: finish, then skip
    wait_closed(bootstrap, topic)
    values = sorted(int(v) for _, _, _, v, _ in read_topic(bootstrap, topic))
    print(f"\nafter the replay finished the decided batch: read_committed {len(values)} rows")
    assert values == list(range(900))
    assert read_state(cfg, "decided") == SinkState(5)
    assert settle_batch(cfg, "decided", 4) and settle_batch(cfg, "decided", 3)
    assert not settle_batch(cfg, "decided", 5)
