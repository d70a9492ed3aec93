"""The file-layer port: one contract suite run against the real and the fake
file system (STYLE.md section 5), then the fake's crash semantics."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.storage.files import (
    FileSystem,
    RealFileSystem,
    read_whole_file,
    write_file_atomically,
)
from raftlog.testing.disk import FakeFileSystem, StaleHandleError


@pytest.fixture(params=["real", "fake"])
def any_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[FileSystem, str]]:
    if request.param == "real":
        yield RealFileSystem(), str(tmp_path / "d")
    else:
        yield FakeFileSystem(), "/mnt/d"


# --- contract: both implementations -----------------------------------------


def test_open_missing_without_create_raises(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    with pytest.raises(FileNotFoundError):
        fs.open(os.path.join(d, "nope"))


def test_append_read_at_and_size(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    f = fs.open(os.path.join(d, "a.log"), create=True)
    assert f.size == 0
    f.append(b"hello ")
    f.append_many([b"wor", bytearray(b"ld"), memoryview(b"!!")[:1]])
    assert f.size == 12
    assert f.read_at(0, 12) == b"hello world!"
    assert f.read_at(6, 5) == b"world"
    assert f.read_at(10, 100) == b"d!"  # short only at end of file
    assert f.read_at(50, 10) == b""
    f.close()


def test_append_many_with_more_buffers_than_iov_max(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    f = fs.open(os.path.join(d, "many"), create=True)
    parts = [bytes([i % 256]) * 3 for i in range(2500)]
    f.append_many(parts)
    assert f.read_at(0, f.size) == b"".join(parts)
    f.close()


def test_truncate_then_append(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    f = fs.open(os.path.join(d, "t"), create=True)
    f.append(b"0123456789")
    f.sync()
    f.truncate(4)
    assert f.size == 4
    f.append(b"xy")
    assert f.read_at(0, 100) == b"0123xy"
    with pytest.raises(ValueError):
        f.truncate(100)
    f.close()


def test_reopen_sees_the_bytes_and_create_keeps_existing(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    path = os.path.join(d, "r")
    f = fs.open(path, create=True)
    f.append(b"abc")
    f.sync()
    f.close()
    assert fs.open(path).read_at(0, 3) == b"abc"
    assert fs.open(path, create=True).size == 3


def test_list_exists_rename_remove(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    for name in ("b", "a"):
        fs.open(os.path.join(d, name), create=True).close()
    assert fs.list_dir(d) == ["a", "b"]
    fs.rename(os.path.join(d, "a"), os.path.join(d, "c"))
    assert fs.list_dir(d) == ["b", "c"]
    assert not fs.exists(os.path.join(d, "a"))
    assert fs.exists(os.path.join(d, "c"))
    assert fs.exists(d)
    fs.remove(os.path.join(d, "b"))
    fs.fsync_dir(d)
    assert fs.list_dir(d) == ["c"]
    with pytest.raises(FileNotFoundError):
        fs.remove(os.path.join(d, "b"))


def test_rename_replaces_the_target(any_fs: tuple[FileSystem, str]) -> None:
    fs, d = any_fs
    fs.make_dirs(d)
    write_file_atomically(fs, os.path.join(d, "cp"), b"one")
    write_file_atomically(fs, os.path.join(d, "cp"), b"two")
    assert read_whole_file(fs, os.path.join(d, "cp")) == b"two"
    assert fs.list_dir(d) == ["cp"]


# --- the fake's power-loss semantics --------------------------------------------


def _fake() -> FakeFileSystem:
    fs = FakeFileSystem()
    fs.make_dirs("/d")
    return fs


def test_crash_drops_unsynced_bytes_and_keeps_synced() -> None:
    fs = _fake()
    f = fs.open("/d/f", create=True)
    f.append(b"durable")
    f.sync()
    f.append(b"-volatile")
    fs.crash()
    assert fs.file_bytes("/d/f") == b"durable"
    with pytest.raises(StaleHandleError):
        f.append(b"x")


def test_crash_drops_a_file_whose_directory_entry_was_not_synced() -> None:
    fs = _fake()
    f = fs.open("/d/new", create=True, sync_dir=False)
    f.append(b"data")
    f.sync()  # the bytes are durable, but nothing names them
    fs.crash()
    assert not fs.exists("/d/new")


def test_crash_undoes_unsynced_remove_and_rename() -> None:
    fs = _fake()
    fs.open("/d/a", create=True).close()
    fs.open("/d/b", create=True).close()
    fs.remove("/d/a", sync_dir=False)
    fs.rename("/d/b", "/d/c", sync_dir=False)
    fs.crash()
    assert fs.list_dir("/d") == ["a", "b"]


def test_crash_undoes_an_unsynced_truncation() -> None:
    fs = _fake()
    f = fs.open("/d/f", create=True)
    f.append(b"0123456789")
    f.sync()
    f.truncate(3)
    f.append(b"zz")
    fs.crash()
    assert fs.file_bytes("/d/f") == b"0123456789"


def test_torn_crash_keeps_a_prefix_of_the_unsynced_tail() -> None:
    seen = set()
    for seed in range(40):
        fs = _fake()
        f = fs.open("/d/f", create=True)
        f.append(b"AAAA")
        f.sync()
        f.append(b"BBBBBBBB")
        fs.crash(random.Random(seed), torn=True)
        data = fs.file_bytes("/d/f")
        assert data.startswith(b"AAAA")
        assert b"AAAABBBBBBBB".startswith(data)
        seen.add(len(data))
    assert len(seen) > 3  # the tear point really varies with the seed


def test_torn_crash_needs_an_rng() -> None:
    with pytest.raises(ValueError):
        _fake().crash(torn=True)


def test_sync_counters_count_file_and_directory_syncs() -> None:
    fs = _fake()
    f = fs.open("/d/f", create=True)  # one directory sync
    f.sync()
    f.sync()
    assert (fs.sync_count, fs.dir_sync_count) == (2, 1)
