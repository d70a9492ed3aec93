"""Storage benchmark: the segment log against raw os.write + fdatasync.

Appends 1 KiB records in ~64 KiB batches (built once, up front, so building
is not measured) through `Log.append_as_leader`, with

  (a) a sync per batch (``flush.messages=1``, the Raft log's policy), and
  (b) one sync at the end (group commit: appends, then one `Log.flush`),

and writes the same bytes to a plain file with ``os.write`` + ``os.fdatasync``
in the same two modes. Then reads the whole log back in 1 MiB fetches.
Prints MB/s for each, the log/raw ratios, and a summary; asserts nothing.

    python bench/storage_bench.py            # full run
    python bench/storage_bench.py --quick    # a few seconds
    python bench/storage_bench.py --total-mb 512 --sync-mb 64 --dir /work/tmp
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raftlog.clock import SystemClock
from raftlog.records import BatchBuilder, iter_batches
from raftlog.storage import Log, LogConfig, RealFileSystem

MB = 1_000_000


def build_batches(count: int, batch_bytes: int, record_bytes: int) -> list[bytes]:
    """``count`` distinct batches of ~``batch_bytes`` made of ``record_bytes`` records."""
    per_batch = max(1, batch_bytes // (record_bytes + 10))
    now = SystemClock().wall_ms()
    batches = []
    for b in range(count):
        builder = BatchBuilder()
        for r in range(per_batch):
            value = (b"%08d-%08d|" % (b, r)) * (record_bytes // 18 + 1)
            builder.append(value[:record_bytes], timestamp_ms=now + r)
        batches.append(builder.build())
    return batches


def plan(pool: list[bytes], total_bytes: int) -> list[bytes]:
    """Cycle the pool until ``total_bytes`` are covered."""
    out: list[bytes] = []
    size = 0
    while size < total_bytes:
        batch = pool[len(out) % len(pool)]
        out.append(batch)
        size += len(batch)
    return out


def raw_run(directory: str, batches: list[bytes], sync_each: bool) -> float:
    """Seconds to write ``batches`` to a fresh plain file and make them durable."""
    path = os.path.join(directory, "raw.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        start = time.perf_counter()
        write, fdatasync = os.write, os.fdatasync
        if sync_each:
            for batch in batches:
                write(fd, batch)
                fdatasync(fd)
        else:
            for batch in batches:
                write(fd, batch)
            fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def log_run(directory: str, batches: list[bytes], sync_each: bool, keep: bool = False) -> float:
    """Seconds to append ``batches`` to a fresh log and make them durable."""
    log_dir = os.path.join(directory, "log")
    shutil.rmtree(log_dir, ignore_errors=True)
    config = LogConfig(flush_messages=1) if sync_each else LogConfig()
    log = Log.open(log_dir, config, fs=RealFileSystem(), clock=SystemClock())
    now = SystemClock().wall_ms()
    append = log.append_as_leader
    try:
        start = time.perf_counter()
        for batch in batches:
            append(batch, 1, now)
        log.flush()
        elapsed = time.perf_counter() - start
        assert log.flushed_offset == log.log_end_offset
        return elapsed
    finally:
        log.close()
        if not keep:
            shutil.rmtree(log_dir, ignore_errors=True)


def read_back(directory: str, fetch_bytes: int) -> tuple[float, int]:
    """Seconds and bytes to read the kept log from start to end in fetches."""
    log = Log.open(
        os.path.join(directory, "log"), LogConfig(), fs=RealFileSystem(), clock=SystemClock()
    )
    try:
        start = time.perf_counter()
        offset, total = log.log_start_offset, 0
        end = log.log_end_offset
        while offset < end:
            data = log.read(offset, fetch_bytes).records
            total += len(data)
            # The last batch's header says where the next fetch starts.
            offset = _next_offset_after(data)
        return time.perf_counter() - start, total
    finally:
        log.close()


def _next_offset_after(data: bytes) -> int:
    last = None
    for header, _ in iter_batches(data, validate_crc=False):
        last = header
    assert last is not None
    return last.next_offset


def median_seconds(run: Callable[[], float], repeat: int) -> float:
    return statistics.median(run() for _ in range(repeat))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run (small sizes, 1 repeat)")
    parser.add_argument(
        "--total-mb", type=float, default=256, help="MB appended with one sync at the end"
    )
    parser.add_argument(
        "--sync-mb", type=float, default=32, help="MB appended with a sync per batch"
    )
    parser.add_argument("--batch-kib", type=int, default=64, help="batch size in KiB")
    parser.add_argument("--record-bytes", type=int, default=1024, help="record value size")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per figure (the median is shown)"
    )
    parser.add_argument("--fetch-kib", type=int, default=1024, help="read-back fetch size in KiB")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir in /tmp)")
    args = parser.parse_args(argv)
    if args.quick:
        args.total_mb, args.sync_mb, args.repeat = 32, 4, 1

    pool = build_batches(64, args.batch_kib * 1024, args.record_bytes)
    bulk = plan(pool, int(args.total_mb * MB))
    synced = plan(pool, int(args.sync_mb * MB))
    bulk_bytes = sum(map(len, bulk))
    synced_bytes = sum(map(len, synced))
    directory = tempfile.mkdtemp(prefix="raftlog-bench-", dir=args.dir)
    print(
        f"dir={directory} batch={len(pool[0])} B ({len(pool[0]) // (args.record_bytes + 10)} records) "
        f"repeat={args.repeat}"
    )
    try:
        results: dict[str, float] = {}
        for mode, batches, size in (
            ("sync per batch", synced, synced_bytes),
            ("one sync at end", bulk, bulk_bytes),
        ):
            sync_each = mode == "sync per batch"
            # Interleave raw and log runs so both see the same disk weather.
            raw_times, log_times = [], []
            for _ in range(args.repeat):
                raw_times.append(raw_run(directory, batches, sync_each))
                log_times.append(log_run(directory, batches, sync_each))
            raw_mbs = size / statistics.median(raw_times) / MB
            log_mbs = size / statistics.median(log_times) / MB
            results[mode] = log_mbs / raw_mbs
            print(
                f"{mode:16s} {size / MB:8.1f} MB in {len(batches)} batches: "
                f"raw {raw_mbs:8.1f} MB/s   log {log_mbs:8.1f} MB/s   ratio {log_mbs / raw_mbs:.2f}"
            )
        log_run(directory, bulk, sync_each=False, keep=True)
        seconds, total = read_back(directory, args.fetch_kib * 1024)
        read_mbs = total / seconds / MB
        print(
            f"read back        {total / MB:8.1f} MB in {args.fetch_kib} KiB fetches: {read_mbs:8.1f} MB/s"
        )
        print("summary:")
        for mode, ratio in results.items():
            print(f"  ratio vs raw ({mode}): {ratio:.2f}")
        print(f"  read-back throughput: {read_mbs:.1f} MB/s")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
