"""Report a failed write on a `FileSystem`: Kafka's ``LogDirFailureChannel``.

Kafka treats an IOException from a log directory as the failure of that
directory: it stops serving the logs in it, and a broker whose every log
directory has failed shuts down ("Shutdown broker because all log dirs in
... have failed"). `ReportingFileSystem` is the hook for that here. It wraps
a `FileSystem` and calls ``on_error(path, error)`` when a write fails: an
append, truncation or sync of an open file, or creating, removing or
renaming an entry. The error is raised on as before, so the caller still
answers as it did (KAFKA_STORAGE_ERROR to a produce, a follower's back-off).

Not reported: `FileNotFoundError` and `FileExistsError` (they say what the
directory holds, not that the disk is failing; callers test for them), and
reads (a read of a segment that retention just deleted is a race, not a
dead disk).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .files import BytesLike, FileHandle, FileSystem

__all__ = ("ReportingFileSystem",)

OnError = Callable[[str, OSError], None]
_EXPECTED = (FileNotFoundError, FileExistsError)


class ReportingFileSystem:
    """``inner`` with every failed write reported to ``on_error`` (see the module)."""

    def __init__(self, inner: FileSystem, on_error: OnError) -> None:
        self.inner = inner
        self._on_error = on_error

    def _report(self, path: str, error: OSError) -> None:
        if not isinstance(error, _EXPECTED):
            self._on_error(path, error)

    def open(self, path: str, *, create: bool = False, sync_dir: bool = True) -> FileHandle:
        try:
            handle = self.inner.open(path, create=create, sync_dir=sync_dir)
        except OSError as e:
            if create:
                self._report(path, e)
            raise
        return _ReportingFile(handle, path, self._report)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list_dir(self, path: str) -> list[str]:
        return self.inner.list_dir(path)

    def make_dirs(self, path: str) -> None:
        try:
            self.inner.make_dirs(path)
        except OSError as e:
            self._report(path, e)
            raise

    def remove(self, path: str, *, sync_dir: bool = True) -> None:
        try:
            self.inner.remove(path, sync_dir=sync_dir)
        except OSError as e:
            self._report(path, e)
            raise

    def rename(self, src: str, dst: str, *, sync_dir: bool = True) -> None:
        try:
            self.inner.rename(src, dst, sync_dir=sync_dir)
        except OSError as e:
            self._report(dst, e)
            raise

    def fsync_dir(self, path: str) -> None:
        try:
            self.inner.fsync_dir(path)
        except OSError as e:
            self._report(path, e)
            raise


class _ReportingFile:
    """A `FileHandle` whose failed writes are reported with its path."""

    __slots__ = ("_inner", "_path", "_report")

    def __init__(self, inner: FileHandle, path: str, report: OnError) -> None:
        self._inner = inner
        self._path = path
        self._report = report

    @property
    def size(self) -> int:
        return self._inner.size

    def append(self, data: BytesLike) -> None:
        try:
            self._inner.append(data)
        except OSError as e:
            self._report(self._path, e)
            raise

    def append_many(self, buffers: Sequence[BytesLike]) -> None:
        try:
            self._inner.append_many(buffers)
        except OSError as e:
            self._report(self._path, e)
            raise

    def read_at(self, position: int, length: int) -> bytes:
        return self._inner.read_at(position, length)

    def truncate(self, size: int) -> None:
        try:
            self._inner.truncate(size)
        except OSError as e:
            self._report(self._path, e)
            raise

    def sync(self) -> None:
        try:
            self._inner.sync()
        except OSError as e:
            self._report(self._path, e)
            raise

    def close(self) -> None:
        self._inner.close()
