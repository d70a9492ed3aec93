"""A failed append (disk full) leaves no torn bytes in the segment.

Bug found by the chaos suite's disk-full nemesis (replica divergence, netns
run seed 11): an append that hit ENOSPC part-way left its partial batch in
the segment file. The next append landed after the torn bytes, so reads of
that offset returned garbage and crash recovery truncated at the torn bytes,
losing later acknowledged records. `RealFile` now cuts the file back to
where a failed append began. Needs root for a small tmpfs (skips otherwise).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from raftlog.clock import SystemClock
from raftlog.records.batch import validate_batch
from raftlog.records.builder import BatchBuilder
from raftlog.storage.config import LogConfig
from raftlog.storage.files import RealFileSystem
from raftlog.storage.log import Log


def _batch(i: int, size: int) -> bytes:
    b = BatchBuilder()
    b.append(b"%d" % i + b"x" * size, timestamp_ms=0)
    return b.build()


def test_a_failed_enospc_append_leaves_no_torn_bytes(tmp_path: Path) -> None:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print(f"SKIP: cannot mount tmpfs: {r.stderr.strip()}")
        pytest.skip(f"cannot mount tmpfs: {r.stderr.strip()}")
    logs: list[Log] = []
    try:
        directory = str(mnt / "t-0")
        config = LogConfig(segment_index_bytes=4096)

        def open_log() -> Log:
            log = Log.open(directory, config, fs=RealFileSystem(), clock=SystemClock())
            logs.append(log)
            return log

        log = open_log()
        log.append_as_leader(_batch(0, 100), leader_epoch=0)
        st = os.statvfs(mnt)
        ballast = mnt / "ballast"
        ballast.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 3000 - 4096))
        with pytest.raises(OSError):
            log.append_as_leader(_batch(1, 20000), leader_epoch=0)  # disk full
        ballast.unlink()  # the disk is healed
        log.append_as_leader(_batch(2, 100), leader_epoch=0)
        assert log.log_end_offset == 2
        # Offset 1 must read back as the batch that holds it, not torn bytes.
        header = validate_batch(log.read(1, 1 << 20).records)  # raises on torn bytes
        assert header.base_offset == 1
        # A crash now (no clean shutdown) must not lose offset 1.
        assert open_log().log_end_offset == 2
    finally:
        for log in logs:
            log.close()
        subprocess.run(["umount", str(mnt)], capture_output=True)
