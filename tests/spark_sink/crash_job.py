"""A streaming query run as its own process by the crash test: a JSON file
source (one file per micro-batch) through the exactly-once foreachBatch sink.

    python crash_job.py BOOTSTRAP TOPIC INPUT_DIR CHECKPOINT_DIR

Prints ``batch N starting`` and ``batch N committed: ...`` lines, and
``query done`` when availableNow has drained the input.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from spark_helpers import spark_builder

from spark_sink.foreach_batch import raftlog_sink


def main() -> None:
    bootstrap, topic, inputs, checkpoint = sys.argv[1:5]
    spark = spark_builder().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def write(df, batch_id):  # type: ignore[no-untyped-def]
        print(f"batch {batch_id} starting", flush=True)
        stats = []
        with raftlog_sink(
            bootstrap_servers=bootstrap,
            topic=topic,
            key="id",
            value=None,
            on_batch=lambda b, s: stats.extend(s),
            **{"linger.ms": 5},
        ) as wrapped:
            wrapped(df, batch_id)
        if not stats:
            print(f"batch {batch_id} skipped: decided before the crash", flush=True)
            return
        rows = sum(r.rows for r in stats)
        print(
            f"batch {batch_id} committed: {rows} rows written by {len(stats)} tasks "
            f"(staged, then committed by the driver)",
            flush=True,
        )

    q = (
        spark.readStream.schema("id string, n long, pad string")
        .option("maxFilesPerTrigger", 1)
        .json(inputs)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print(f"query {q.id} started", flush=True)
    q.awaitTermination()
    print("query done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
