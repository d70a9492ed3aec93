"""Log cleaner benchmark: one compaction pass against a raw copy of the same bytes.

Writes a log of 1 KiB records (batches of 16, a key per record drawn from
``--keys`` keys, so most records are superseded) with small segments, then
times one `raftlog.storage.cleaner.clean` pass over it, for uncompressed
and zstd batches. The baseline is what any rewrite costs at least: reading
the same segment files and writing them to new files with one fdatasync
each. Prints MB/s and records/s of the cleaner, the bytes kept, and the
cleaner/raw ratio; asserts nothing.

    python bench/cleaner_bench.py            # full run
    python bench/cleaner_bench.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raftlog.clock import SystemClock
from raftlog.records import BatchBuilder, Compression
from raftlog.storage import Log, LogConfig, RealFileSystem
from raftlog.storage.cleaner import CompactionConfig, clean

MB = 1_000_000
RECORD_BYTES = 1024
PER_BATCH = 16


def write_log(directory: str, total_bytes: int, keys: int, codec: Compression) -> tuple[Log, int]:
    """A log of about ``total_bytes`` of records; returns it and its record count."""
    clock = SystemClock()
    log = Log.open(directory, LogConfig(segment_bytes=8 * MB), fs=RealFileSystem(), clock=clock)
    rng = random.Random(1)
    # Words from a seeded vocabulary: zstd compresses these about 2x, as text.
    vocabulary = [bytes(rng.choices(range(97, 123), k=rng.randint(2, 9))) for _ in range(2000)]
    values = [b" ".join(rng.choices(vocabulary, k=200))[:RECORD_BYTES] for _ in range(256)]
    now = clock.wall_ms()
    records = 0
    while log.size_in_bytes < total_bytes:
        builder = BatchBuilder(compression=codec)
        for _ in range(PER_BATCH):
            key = b"key-%06d" % rng.randrange(keys)
            builder.append(values[records % len(values)], key=key, timestamp_ms=now)
            records += 1
        log.append_as_leader(builder.build(), 0)
    log.roll()
    log.flush()
    return log, records


def raw_copy(directory: str, target: str) -> float:
    """Seconds to read every segment file and write it to a new file, synced."""
    os.makedirs(target, exist_ok=True)
    started = time.perf_counter()
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(directory, name), "rb") as src:
            fd = os.open(os.path.join(target, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                while chunk := src.read(1 << 20):
                    os.write(fd, chunk)
                os.fdatasync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - started


def run_once(base: str, total_bytes: int, keys: int, codec: Compression) -> dict[str, float]:
    directory = os.path.join(base, f"log-{codec.name}")
    shutil.rmtree(directory, ignore_errors=True)
    log, records = write_log(directory, total_bytes, keys, codec)
    size_before = log.size_in_bytes
    raw_s = raw_copy(directory, os.path.join(base, "raw"))
    shutil.rmtree(os.path.join(base, "raw"), ignore_errors=True)
    started = time.perf_counter()
    result = clean(log, log.log_end_offset, SystemClock().wall_ms(), CompactionConfig())
    clean_s = time.perf_counter() - started
    assert result is not None and not result.aborted
    size_after = log.size_in_bytes
    log.close()
    shutil.rmtree(directory, ignore_errors=True)
    return {"clean_s": clean_s, "raw_s": raw_s, "bytes": size_before,
            "kept": size_after, "records": records}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 MB, one repeat")
    parser.add_argument("--total-mb", type=int, default=128, help="log size per run")
    parser.add_argument("--keys", type=int, default=2000, help="distinct keys")
    parser.add_argument("--repeat", type=int, default=3, help="runs per codec; medians shown")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    total_mb = 16 if args.quick else args.total_mb
    repeat = 1 if args.quick else args.repeat
    base = tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir)
    print(f"log: {total_mb} MB of {RECORD_BYTES}-byte records, {PER_BATCH} per batch, "
          f"{args.keys} keys, 8 MB segments; one pass; median of {repeat}")
    ratios: dict[str, float] = {}
    try:
        for codec in (Compression.NONE, Compression.ZSTD):
            runs = [run_once(base, total_mb * MB, args.keys, codec) for _ in range(repeat)]
            clean_s = statistics.median(r["clean_s"] for r in runs)
            raw_s = statistics.median(r["raw_s"] for r in runs)
            first = runs[0]
            mb = first["bytes"] / MB
            print(f"  {codec.name.lower():5s} cleaner {mb / clean_s:8.1f} MB/s "
                  f"{first['records'] / clean_s:10.0f} records/s   raw copy {mb / raw_s:8.1f} MB/s"
                  f"   {first['bytes'] / MB:.1f} MB -> {first['kept'] / MB:.2f} MB")
            ratios[codec.name.lower()] = raw_s / clean_s
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("summary (cleaner throughput as a share of a raw copy's; Python decodes every record):")
    for name, ratio in ratios.items():
        print(f"  {name}: ratio vs raw: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
