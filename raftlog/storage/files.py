"""The file-layer port: the only way the storage code touches a disk.

`FileSystem` and `FileHandle` are small Protocols (STYLE.md section 5) with two
implementations that pass one contract suite: `RealFileSystem` here (``os.open``,
``os.writev``, ``os.pread``, ``os.fdatasync``) and
`raftlog.testing.disk.FakeFileSystem`, which loses every byte and directory
entry not yet synced when it is told to crash.

Durability rules both implementations honour:

- bytes appended to a file are durable only after `FileHandle.sync` returns;
- a created, removed or renamed directory entry is durable only after the
  directory is fsynced. `create`, `remove` and `rename` do that themselves
  unless called with ``sync_dir=False`` (so a caller removing many files can
  fsync once with `FileSystem.fsync_dir`).
- directories made with `make_dirs` are durable at once (the log directory is
  made once, by whoever formats storage).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Protocol

BytesLike = bytes | bytearray | memoryview

# Linux's IOV_MAX; os.writev refuses more buffers than this in one call.
_IOV_MAX = 1024


class FileHandle(Protocol):
    """An open file that is only appended to, read at positions and truncated."""

    @property
    def size(self) -> int:
        """Current length in bytes, synced or not."""
        ...

    def append(self, data: BytesLike) -> None:
        """Write all of ``data`` at the end of the file (not yet durable)."""
        ...

    def append_many(self, buffers: Sequence[BytesLike]) -> None:
        """Write the buffers back to back at the end (one ``writev``, no join)."""
        ...

    def read_at(self, position: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``position``; short only at end of file."""
        ...

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (``size`` <= current size; not yet durable)."""
        ...

    def sync(self) -> None:
        """fdatasync: every byte written and every truncation so far becomes durable."""
        ...

    def close(self) -> None:
        """Release the handle. Unsynced bytes stay unsynced."""
        ...


class FileSystem(Protocol):
    """Paths are plain strings; a file's directory is ``os.path.dirname(path)``."""

    def open(self, path: str, *, create: bool = False, sync_dir: bool = True) -> FileHandle:
        """Open ``path`` for append and positional reads.

        With ``create`` a missing file is made (its directory is fsynced when
        ``sync_dir``). Raises `FileNotFoundError` if it is missing and not
        ``create``.
        """
        ...

    def exists(self, path: str) -> bool:
        """Whether ``path`` names a file or a directory."""
        ...

    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) in directory ``path``, sorted."""
        ...

    def make_dirs(self, path: str) -> None:
        """Create ``path`` and its parents if missing."""
        ...

    def remove(self, path: str, *, sync_dir: bool = True) -> None:
        """Unlink ``path``; raises `FileNotFoundError` if it is missing."""
        ...

    def rename(self, src: str, dst: str, *, sync_dir: bool = True) -> None:
        """Atomically replace ``dst`` with ``src`` (POSIX rename)."""
        ...

    def fsync_dir(self, path: str) -> None:
        """Make the directory entries of ``path`` durable."""
        ...


def read_whole_file(fs: FileSystem, path: str) -> bytes:
    """Return the full contents of ``path``. Raises `FileNotFoundError`."""
    handle = fs.open(path)
    try:
        return handle.read_at(0, handle.size)
    finally:
        handle.close()


def write_file_atomically(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file.

    Write a temp file, fsync it, rename it over ``path``, fsync the directory:
    the sequence Kafka's ``CheckpointFile.write`` uses.
    """
    tmp = path + ".tmp"
    handle = fs.open(tmp, create=True, sync_dir=False)
    try:
        handle.truncate(0)
        handle.append(data)
        handle.sync()
    finally:
        handle.close()
    fs.rename(tmp, path, sync_dir=True)


# Test-only (chaos/ lost-writes nemesis): with RAFTLOG_CHAOS_LOSE_UNSYNCED=1 every
# fdatasync of a ``.log`` segment records the synced size in ``<segment>.synced``,
# so a harness that SIGKILLs the node can cut each segment back to that size
# before restarting it: the un-fsynced tail is lost as in a power cut
# (chaos.db.drop_unsynced). Off by default; costs one small write per sync.
SYNCED_SUFFIX = ".synced"
_LOSE_UNSYNCED = os.environ.get("RAFTLOG_CHAOS_LOSE_UNSYNCED") == "1"


def _write_synced_marker(marker: str, size: int) -> None:
    tmp = marker + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(size))
    os.replace(tmp, marker)

class RealFile:
    """`FileHandle` over a file descriptor opened ``O_RDWR | O_APPEND``."""

    __slots__ = ("_broken", "_fd", "_size", "_synced_marker")

    def __init__(self, fd: int, synced_marker: str | None = None) -> None:
        self._fd = fd
        # Tracked here so the append path never needs an fstat.
        self._size = os.fstat(fd).st_size
        self._synced_marker = synced_marker
        # Set when a failed append could not be undone (see `_undo_append`).
        self._broken: str | None = None

    @property
    def size(self) -> int:
        return self._size

    def append(self, data: BytesLike) -> None:
        start = self._begin_append()
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                self._size += written
                view = view[written:]
        except OSError:
            self._undo_append(start)
            raise

    def append_many(self, buffers: Sequence[BytesLike]) -> None:
        start = self._begin_append()
        pending = list(buffers)
        try:
            while pending:
                chunk = pending[:_IOV_MAX]
                want = sum(len(b) for b in chunk)
                written = os.writev(self._fd, chunk)
                self._size += written
                if written == want:
                    del pending[:_IOV_MAX]
                    continue
                # A short write (disk full, signal): drop what went out, retry the rest.
                rest: list[BytesLike] = []
                skip = written
                for buf in pending:
                    if skip >= len(buf):
                        skip -= len(buf)
                        continue
                    rest.append(memoryview(buf)[skip:])
                    skip = 0
                pending = rest
        except OSError:
            self._undo_append(start)
            raise

    def _begin_append(self) -> int:
        if self._broken is not None:
            raise OSError(errno.EIO, self._broken)
        return self._size

    def _undo_append(self, start: int) -> None:
        """An append failed part-way (ENOSPC, EIO): cut the file back to where
        it began. Left in place, the torn bytes would sit under every later
        append (unreadable offsets; recovery truncating at them and losing
        what followed). If even the cut fails, the file refuses every
        further append: a restart's recovery truncates at the torn batch."""
        try:
            os.ftruncate(self._fd, start)
        except OSError as e:
            self._broken = (f"a failed append left {self._size - start} torn bytes at "
                            f"{start} that could not be cut ({e}); reopen the log")
            return
        self._size = start

    def read_at(self, position: int, length: int) -> bytes:
        if length <= 0:
            return b""
        data = os.pread(self._fd, length, position)
        if len(data) == length or len(data) == 0:
            return data
        # pread may return short before EOF (rare); keep reading.
        parts = [data]
        got = len(data)
        while got < length:
            more = os.pread(self._fd, length - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def truncate(self, size: int) -> None:
        if size > self._size:
            raise ValueError(f"truncate to {size} beyond size {self._size}")
        os.ftruncate(self._fd, size)
        self._size = size

    def sync(self) -> None:
        os.fdatasync(self._fd)
        if self._synced_marker is not None:
            _write_synced_marker(self._synced_marker, self._size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RealFileSystem:
    """`FileSystem` over the operating system's files."""

    def open(self, path: str, *, create: bool = False, sync_dir: bool = True) -> RealFile:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        marker = path + SYNCED_SUFFIX if _LOSE_UNSYNCED and path.endswith(".log") else None
        if not create:
            return RealFile(os.open(path, flags), marker)
        try:
            # O_EXCL tells us whether we made the entry (and must fsync the dir).
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return RealFile(os.open(path, flags), marker)
        if sync_dir:
            self.fsync_dir(_dir_of(path))
        return RealFile(fd, marker)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def make_dirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str, *, sync_dir: bool = True) -> None:
        os.unlink(path)
        if sync_dir:
            self.fsync_dir(_dir_of(path))

    def rename(self, src: str, dst: str, *, sync_dir: bool = True) -> None:
        os.rename(src, dst)
        if sync_dir:
            self.fsync_dir(_dir_of(dst))
            if _dir_of(src) != _dir_of(dst):
                self.fsync_dir(_dir_of(src))

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        except OSError as e:  # pragma: no cover - some filesystems refuse dir fsync
            if e.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(fd)


def _dir_of(path: str) -> str:
    return os.path.dirname(path) or "."
