"""A fake file system that forgets what was not synced when it crashes.

`FakeFileSystem` implements `raftlog.storage.files.FileSystem` in memory. Each
file keeps its synced prefix apart from the bytes written after the last
``sync``; each directory keeps its synced entries apart from entries created,
removed or renamed since its last ``fsync_dir``. `FakeFileSystem.crash` is a
power loss: files and entries go back to their synced state, and with
``torn=True`` a random prefix of each file's unsynced tail survives (a sector
that reached the platter before the power went), chosen by the seeded
``random.Random`` the caller passes (STYLE.md section 5).

``full = True`` is a full disk: every append raises ``ENOSPC`` and writes
nothing, until it is set back.

Simplifications, stated so tests do not rely on more: directories made with
``make_dirs`` are durable at once; a truncation that was not synced is undone
by a crash (the old synced bytes come back), never half-done.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from raftlog.storage.files import BytesLike


@dataclass(slots=True, eq=False)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    # data[:synced_len] is durable, unless a truncation below it is pending,
    # in which case synced_snapshot holds the durable bytes.
    synced_len: int = 0
    synced_snapshot: bytes | None = None


@dataclass(slots=True)
class _Dir:
    entries: dict[str, _Inode] = field(default_factory=dict)
    synced_entries: dict[str, _Inode] = field(default_factory=dict)


class StaleHandleError(RuntimeError):
    """A handle opened before a crash was used after it."""


class FakeFile:
    """`FileHandle` over an in-memory inode."""

    def __init__(self, fs: FakeFileSystem, inode: _Inode) -> None:
        self._fs = fs
        self._inode = inode
        self._generation = fs.generation
        self._closed = False

    def _check(self) -> _Inode:
        if self._closed:
            raise ValueError("I/O on a closed file")
        if self._generation != self._fs.generation:
            raise StaleHandleError("file handle from before a crash")
        return self._inode

    @property
    def size(self) -> int:
        return len(self._check().data)

    def append(self, data: BytesLike) -> None:
        with self._fs.lock:
            inode = self._check()
            self._fs.check_space()
            inode.data += data
            self._fs.bytes_written += len(data)

    def append_many(self, buffers: Sequence[BytesLike]) -> None:
        with self._fs.lock:
            inode = self._check()
            self._fs.check_space()
            for buf in buffers:
                inode.data += buf
                self._fs.bytes_written += len(buf)

    def read_at(self, position: int, length: int) -> bytes:
        with self._fs.lock:
            self._fs.reads += 1
            return bytes(self._check().data[position : position + max(length, 0)])

    def truncate(self, size: int) -> None:
        with self._fs.lock:
            inode = self._check()
            if size > len(inode.data):
                raise ValueError(f"truncate to {size} beyond size {len(inode.data)}")
            if size < inode.synced_len and inode.synced_snapshot is None:
                inode.synced_snapshot = bytes(inode.data[: inode.synced_len])
            del inode.data[size:]

    def sync(self) -> None:
        with self._fs.lock:
            inode = self._check()
            inode.synced_snapshot = None
            inode.synced_len = len(inode.data)
            self._fs.sync_count += 1

    def close(self) -> None:
        self._closed = True


class FakeFileSystem:
    """In-memory `FileSystem` with power-loss semantics; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._dirs: dict[str, _Dir] = {}
        # Bumped by crash(); handles from an older generation refuse to work.
        self.generation = 0
        self.sync_count = 0
        self.dir_sync_count = 0
        self.bytes_written = 0
        self.reads = 0  # read_at calls, for tests of the read path
        self.full = False  # a full disk: appends raise ENOSPC

    def check_space(self) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")

    # --- FileSystem ---------------------------------------------------------

    def open(self, path: str, *, create: bool = False, sync_dir: bool = True) -> FakeFile:
        with self.lock:
            directory, name = self._split(path)
            inode = directory.entries.get(name)
            if inode is None:
                if not create:
                    raise FileNotFoundError(path)
                inode = _Inode()
                directory.entries[name] = inode
                if sync_dir:
                    self._sync_dir(directory)
            return FakeFile(self, inode)

    def exists(self, path: str) -> bool:
        with self.lock:
            path = _norm(path)
            if path in self._dirs:
                return True
            parent = self._dirs.get(os.path.dirname(path))
            return parent is not None and os.path.basename(path) in parent.entries

    def list_dir(self, path: str) -> list[str]:
        with self.lock:
            path = _norm(path)
            if path not in self._dirs:
                raise FileNotFoundError(path)
            subdirs = [
                os.path.basename(p) for p in self._dirs if p != path and os.path.dirname(p) == path
            ]
            return sorted([*self._dirs[path].entries, *subdirs])

    def make_dirs(self, path: str) -> None:
        with self.lock:
            path = _norm(path)
            while path not in self._dirs:
                self._dirs[path] = _Dir()
                parent = os.path.dirname(path)
                if parent == path:
                    break
                path = parent

    def remove(self, path: str, *, sync_dir: bool = True) -> None:
        with self.lock:
            directory, name = self._split(path)
            if name not in directory.entries:
                raise FileNotFoundError(path)
            del directory.entries[name]
            if sync_dir:
                self._sync_dir(directory)

    def rename(self, src: str, dst: str, *, sync_dir: bool = True) -> None:
        with self.lock:
            src_dir, src_name = self._split(src)
            dst_dir, dst_name = self._split(dst)
            if src_name not in src_dir.entries:
                raise FileNotFoundError(src)
            dst_dir.entries[dst_name] = src_dir.entries.pop(src_name)
            if sync_dir:
                self._sync_dir(dst_dir)
                self._sync_dir(src_dir)

    def fsync_dir(self, path: str) -> None:
        with self.lock:
            path = _norm(path)
            if path not in self._dirs:
                raise FileNotFoundError(path)
            self._sync_dir(self._dirs[path])

    # --- faults and inspection ------------------------------------------------

    def crash(self, rng: random.Random | None = None, *, torn: bool = False) -> None:
        """Lose power: keep only what was synced (plus torn tails when asked).

        Every directory gets back its synced entries; every file its synced
        bytes. With ``torn`` (which needs ``rng``), a random prefix, possibly
        empty or whole, of each file's unsynced appended bytes survives.
        Handles opened before the crash become unusable.
        """
        if torn and rng is None:
            raise ValueError("torn tails need a seeded rng")
        with self.lock:
            self.generation += 1
            seen: set[int] = set()
            for directory in self._dirs.values():
                directory.entries = dict(directory.synced_entries)
                for inode in directory.entries.values():
                    if id(inode) in seen:
                        continue
                    seen.add(id(inode))
                    self._crash_inode(inode, rng if torn else None)

    def file_bytes(self, path: str) -> bytes:
        """The current contents of ``path`` (for assertions)."""
        with self.lock:
            directory, name = self._split(path)
            return bytes(directory.entries[name].data)

    def corrupt(self, path: str, position: int, data: bytes) -> None:
        """Overwrite bytes in place as if the disk returned garbage (durably)."""
        with self.lock:
            directory, name = self._split(path)
            inode = directory.entries[name]
            inode.data[position : position + len(data)] = data
            inode.synced_len = len(inode.data)
            inode.synced_snapshot = None

    # --- internals ------------------------------------------------------------

    @staticmethod
    def _crash_inode(inode: _Inode, rng: random.Random | None) -> None:
        if inode.synced_snapshot is not None:
            inode.data = bytearray(inode.synced_snapshot)
        else:
            keep = 0
            unsynced = len(inode.data) - inode.synced_len
            if rng is not None and unsynced > 0:
                keep = rng.randint(0, unsynced)
            del inode.data[inode.synced_len + keep :]
        # What survived a power loss is on the platter now.
        inode.synced_snapshot = None
        inode.synced_len = len(inode.data)

    def _sync_dir(self, directory: _Dir) -> None:
        directory.synced_entries = dict(directory.entries)
        self.dir_sync_count += 1

    def _split(self, path: str) -> tuple[_Dir, str]:
        path = _norm(path)
        parent = os.path.dirname(path)
        directory = self._dirs.get(parent)
        if directory is None:
            raise FileNotFoundError(parent)
        return directory, os.path.basename(path)


def _norm(path: str) -> str:
    return os.path.normpath(path)
