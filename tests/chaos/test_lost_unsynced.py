"""The lost-writes hook end to end on the storage layer: a log written with
``RAFTLOG_CHAOS_LOSE_UNSYNCED`` markers, cut back by `chaos.db.drop_unsynced`
(a power cut), reopens: segments truncated below their index entries get
their indexes rebuilt, later segments after a hole are dropped, and every
synced batch is still there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chaos.db import drop_unsynced
from raftlog.clock import SystemClock
from raftlog.records import iter_batches
from raftlog.storage import Log, LogConfig, RealFileSystem
from raftlog.storage import files as storage_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "raftlog" / "storage"))
from storage_helpers import make_batch, read_all

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)


@pytest.fixture
def lossy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage_files, "_LOSE_UNSYNCED", True)


def _batch(tag: int, count: int = 2) -> bytes:
    return make_batch(count, value_size=60, tag=tag)


def _open(d: Path) -> Log:
    return Log.open(str(d), CONFIG, fs=RealFileSystem(), clock=SystemClock())


def _crash(log: Log) -> None:
    """Close the file handles without the clean-shutdown marker (a SIGKILL)."""
    for seg in log.segments:
        seg.log_file.close()


def test_unsynced_tail_below_index_entries_is_recovered(tmp_path: Path, lossy: None) -> None:
    d = tmp_path / "chaos-0"
    log = _open(d)
    for i in range(20):
        log.append_as_leader(_batch(i), leader_epoch=1)
    log.flush()
    synced_end = log.log_end_offset
    synced = read_all(log)
    for i in range(20, 50):  # never synced; the active segment grows index entries
        log.append_as_leader(_batch(i), leader_epoch=1)
    assert len(log.segments[-1].offset_index.entries()) >= 2  # entries to lose
    _crash(log)
    cut = drop_unsynced(tmp_path)
    assert cut  # something was cut, below index entries
    log = _open(d)
    try:
        assert log.log_end_offset >= synced_end
        data = read_all(log)
        assert data[: len(synced)] == synced  # every synced batch intact
        offsets = [h.base_offset for h, _ in iter_batches(data)]
        assert offsets == sorted(offsets) and offsets[0] == 0
        # Indexes agree with the data: every offset is readable by lookup.
        for h, _ in iter_batches(data):
            got = log.read(h.base_offset, 1 << 16).records
            assert next(iter(iter_batches(got)))[0].base_offset == h.base_offset
        # The log takes appends at its recovered end.
        end = log.log_end_offset
        info = log.append_as_leader(_batch(999, 1), leader_epoch=2)
        assert info.first_offset == end
    finally:
        log.close()


def test_drop_unsynced_cuts_a_never_synced_segment_to_empty(tmp_path: Path, lossy: None) -> None:
    d = tmp_path / "chaos-0"
    log = _open(d)
    for i in range(10):
        log.append_as_leader(_batch(i), leader_epoch=1)
    _crash(log)
    drop_unsynced(tmp_path)
    log = _open(d)
    try:
        assert log.log_end_offset == 0
        assert log.append_as_leader(_batch(0, 1), leader_epoch=2).first_offset == 0
    finally:
        log.close()
