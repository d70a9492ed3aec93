"""Process, clock and disk faults as plain functions on PIDs and paths.

- kill / pause / resume: signals (``SIGKILL``, ``SIGSTOP``, ``SIGCONT``). A
  paused node still completes TCP handshakes; requests time out
  (chaos-infra.md).
- clock skew: libfaketime, wall clock only. `faketime_env` gives the env for
  a (re)started node: ``LD_PRELOAD`` of libfaketime with
  ``FAKETIME_TIMESTAMP_FILE`` + ``FAKETIME_NO_CACHE=1`` so `set_clock_offset`
  changes the skew live, and ``FAKETIME_DONT_FAKE_MONOTONIC=1`` because a
  faked monotonic clock stalls asyncio timers (chaos-infra.md).
- lost un-fsynced writes: the node runs with `LOSSY_ENV` set, so its storage
  buffers appends until fsync; a SIGKILL then loses the unsynced tail (a
  power cut, not just a crash: KIP-966's "last replica standing").
- disk full: a size-limited tmpfs (`mount_tmpfs`, `resize_tmpfs`) or, without
  mount rights, `fill_disk` with a ballast file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
from pathlib import Path

from data_plane.local_cluster import wait_process_state

LIBFAKETIME_PATHS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
)

LOSSY_ENV = {"RAFTLOG_CHAOS_LOSE_UNSYNCED": "1"}
"""Env flag asking a node's storage to keep appends in memory until fsync.

Contract for the node side (not built yet): with this set, bytes written but
not fdatasync'ed are lost when the process is SIGKILLed."""


def kill(pid: int) -> None:
    """SIGKILL; no error if the process is already gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def pause(pid: int) -> None:
    """SIGSTOP, returning once /proc shows the process stopped (delivery is
    asynchronous)."""
    os.kill(pid, signal.SIGSTOP)
    wait_process_state(pid, stopped=True)


def resume(pid: int) -> None:
    """SIGCONT; no error if the process is already gone (heal is idempotent)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
        wait_process_state(pid, stopped=False)


def find_libfaketime() -> str | None:
    for p in LIBFAKETIME_PATHS:
        if os.path.exists(p):
            return p
    return None


def faketime_env(offset_file: str | os.PathLike[str], *, lib: str | None = None) -> dict[str, str]:
    """Env for a node whose wall clock follows ``offset_file`` (e.g. ``+3600``).

    Raises FileNotFoundError if libfaketime is missing (``apt-get install -y
    faketime``). Creates the file with offset ``+0`` if absent.
    """
    lib = lib or find_libfaketime()
    if lib is None:
        raise FileNotFoundError("libfaketime not found: apt-get install -y faketime")
    path = Path(offset_file)
    if not path.exists():
        path.write_text("+0\n")
    return {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": str(path),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def set_clock_offset(offset_file: str | os.PathLike[str], seconds: float) -> None:
    """Skew the wall clock of every process started with `faketime_env` on it."""
    tmp = Path(f"{offset_file}.tmp")
    tmp.write_text(f"{seconds:+g}\n")
    tmp.replace(offset_file)  # atomic: a reader never sees a half-written offset


def mount_tmpfs(directory: str | os.PathLike[str], size_bytes: int) -> None:
    """Mount a tmpfs of ``size_bytes`` at ``directory`` (root only)."""
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory)],
        check=True,
        capture_output=True,
        text=True,
    )


def resize_tmpfs(directory: str | os.PathLike[str], size_bytes: int) -> None:
    """Grow (heal) or shrink a mounted tmpfs live."""
    subprocess.run(
        ["mount", "-o", f"remount,size={size_bytes}", str(directory)],
        check=True,
        capture_output=True,
        text=True,
    )


def umount(directory: str | os.PathLike[str]) -> None:
    subprocess.run(["umount", str(directory)], check=False, capture_output=True)


def mounts_under(directory: str | os.PathLike[str]) -> list[str]:
    """Mount points at or below ``directory`` (from /proc/self/mounts), deepest first."""
    root = os.path.realpath(directory)
    found = []
    with contextlib.suppress(FileNotFoundError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) < 2:
                continue
            point = fields[1].replace("\\040", " ")
            if point == root or point.startswith(root + os.sep):
                found.append(point)
    return sorted(set(found), key=len, reverse=True)


def umount_under(directory: str | os.PathLike[str]) -> list[str]:
    """Unmount everything mounted at or below ``directory`` (a killed run's
    tmpfs data dirs, before its directory is removed); what was unmounted."""
    points = mounts_under(directory)
    for p in points:
        umount(p)
    return points


BALLAST = ".chaos-ballast"


def fill_disk(directory: str | os.PathLike[str], leave_bytes: int = 0) -> int:
    """Fill the file system holding ``directory`` up to ``leave_bytes`` free.

    Allocates a ballast file (``fallocate``) and returns its size. Heal with
    `free_disk`. Fine on tmpfs or a loop file system; on a shared disk it
    fills everyone's disk, so only use it on a dedicated mount.
    """
    st = shutil.disk_usage(directory)
    size = max(0, st.free - leave_bytes)
    path = Path(directory) / BALLAST
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if size:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:  # tmpfs may refuse the last pages: fall back
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return path.stat().st_size


def free_disk(directory: str | os.PathLike[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        (Path(directory) / BALLAST).unlink()
