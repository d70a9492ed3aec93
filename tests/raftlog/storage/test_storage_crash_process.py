"""Real-process crash test: a child appends with flush.messages=1 and prints each
offset once its fdatasync returned; the parent SIGKILLs it at a random moment,
reopens the log and checks every acknowledged batch is there, intact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from storage_helpers import make_batch

from raftlog.clock import SystemClock
from raftlog.records import iter_batches
from raftlog.storage import Log, LogConfig, RealFileSystem

REPO = Path(__file__).resolve().parents[3]
CONFIG = LogConfig(flush_messages=1, segment_bytes=16 * 1024, index_interval_bytes=512)

CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
from storage_helpers import make_batch
from raftlog.clock import SystemClock
from raftlog.storage import Log, LogConfig, RealFileSystem
config = LogConfig(flush_messages=1, segment_bytes=16 * 1024, index_interval_bytes=512)
log = Log.open(sys.argv[1], config, fs=RealFileSystem(), clock=SystemClock())
tag = int(sys.argv[3])
print("ready", flush=True)
while True:
    info = log.append_as_leader(make_batch(3, value_size=100, tag=tag), leader_epoch=1)
    # flush.messages=1: the append returned after fdatasync, so this is an ack.
    print(info.first_offset, tag, flush=True)
    tag += 1
"""


def _tail(batch: bytes) -> bytes:
    # Everything but baseOffset, batchLength and partitionLeaderEpoch (leader-assigned).
    return batch[16:]


@pytest.mark.slow
def test_every_acknowledged_batch_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(os.getpid())
    directory = str(tmp_path / "log")
    acked: dict[int, int] = {}  # first offset -> tag
    next_tag = 0
    for _round in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, directory, str(Path(__file__).parent), str(next_tag)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        want = rng.randint(5, 80)
        for _ in range(want):
            offset, tag = map(int, child.stdout.readline().split())
            acked[offset] = tag
            next_tag = tag + 1
        time.sleep(rng.random() * 0.02)  # kill mid-append, mid-sync or in between
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
        for line in rest.splitlines():  # acks printed before the kill landed
            fields = line.split()
            if len(fields) != 2:
                continue  # cut short by the kill: counted as not acknowledged
            offset, tag = map(int, fields)
            acked[offset] = tag
            next_tag = tag + 1
        next_tag += 1000  # never reuse a tag of an unacknowledged batch

        log = Log.open(directory, CONFIG, fs=RealFileSystem(), clock=SystemClock())
        stored = {}
        offset = 0
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for header, pos in iter_batches(data):
                stored[header.base_offset] = data[pos : pos + header.size_in_bytes]
                offset = header.next_offset
        log.close()
        for first_offset, tag in acked.items():
            assert first_offset in stored, f"acknowledged batch at {first_offset} lost"
            assert _tail(stored[first_offset]) == _tail(make_batch(3, value_size=100, tag=tag))
    assert len(acked) >= 15
