"""Compiled hot paths: the modules every acks=all record runs through, built
with mypyc into C extensions beside their sources.

The code stays plain, fully typed Python; mypyc turns the modules listed in
`MODULES` (all ``mypy --strict`` clean) into extension modules that CPython
imports in place of the ``.py`` files. That takes the interpreter's dispatch
off the request path: transport framing, the produce and fetch handlers, the
purgatory, the partition cores, the log and its segments. Everything else
stays interpreted, and so does everything when nothing is compiled: the
sources are the program either way.

``python3 dev.py up|test`` builds them (``python -m raftlog.native build``)
whenever a listed source changed, and runs pure Python when there is no C
compiler or Python headers, or with ``RAFTLOG_NATIVE=0``.

Compiled modules must never run older code than their sources: the build
writes a digest of the sources, and `check_fresh` (called by the CLI and the
test suite before anything else) refuses a tree whose compiled modules no
longer match it.

What mypyc changes, and the code keeps to:
- types are checked at run time where values cross into compiled code, so an
  annotation must be true, not only accepted by mypy;
- a compiled class can be subclassed by interpreted code only when it says so
  (``mypyc_attr(allow_interpreted_subclasses=True)``: the deliberately broken
  variants in ``*/testing/broken*.py`` and test operations do);
- instances of compiled classes take no new attributes, and their methods
  cannot be replaced on an instance: tests inject faults through the fake
  disk and stand-in objects, not by patching.

This module names ``data_plane`` modules as paths only; it imports nothing
outside the standard library, so the build can run before anything else.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Final

__all__ = ("MODULES", "StaleNativeBuildError", "check_fresh", "describe", "state")

#: The tree the modules belong to: this file is ``<root>/raftlog/native.py``.
ROOT: Final = Path(__file__).resolve().parent.parent

#: Compiled modules, as paths from the repository root. Only modules without
#: interpreted subclasses or patched attributes outside the exceptions above.
MODULES: Final = (
    "raftlog/records/batch.py",
    "raftlog/storage/epoch_cache.py",
    "raftlog/storage/files.py",
    "raftlog/storage/index.py",
    "raftlog/storage/log.py",
    "raftlog/storage/segment.py",
    "raftlog/net/codec.py",
    "raftlog/net/connection.py",
    "raftlog/net/client.py",
    "raftlog/net/server.py",
    "data_plane/api/encoders.py",
    "data_plane/api/fetch.py",
    "data_plane/api/fetch_session.py",
    "data_plane/api/produce.py",
    "data_plane/broker/replica_manager.py",
    "data_plane/purgatory.py",
    "data_plane/replication/follower.py",
    "data_plane/replication/isr.py",
    "data_plane/replication/leader.py",
    "data_plane/replication/partition.py",
    "data_plane/replication/types.py",
)

#: mypyc's shared library for all of them: ``raftlog/native_lib__mypyc.*.so``,
#: inside the package so that it imports wherever ``raftlog`` does.
SHARED_LIB_GROUP: Final = "raftlog.native_lib"
BUILD_DIR: Final = ROOT / "build" / "native"
STAMP: Final = BUILD_DIR / "sources.sha256"
_MYPY_CONFIG: Final = BUILD_DIR / "mypy.ini"
# mypy's settings for the build: the project's strict checking, without
# pyproject's warning about sections for modules the build does not read.
_MYPY_INI: Final = """\
[mypy]
python_version = 3.11
strict = True
[mypy-crc32c]
ignore_missing_imports = True
[mypy-sortedcontainers.*]
ignore_missing_imports = True
"""


class StaleNativeBuildError(RuntimeError):
    """Compiled modules that do not match their sources."""


def _extension_path(module: str) -> Path:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return ROOT / (module.removesuffix(".py") + suffix)


def _compiled() -> list[Path]:
    return [p for p in map(_extension_path, MODULES) if p.exists()]


def digest() -> str:
    """What the compiled modules were built from: the module list, their
    sources and the Python. (Cheap: the CLI checks it at every start.)"""
    h = hashlib.sha256()
    h.update(sys.version.encode())
    for module in MODULES:
        h.update(module.encode())
        h.update(hashlib.sha256((ROOT / module).read_bytes()).digest())
    return h.hexdigest()


def state() -> str:
    """``pure`` (nothing compiled), ``fresh`` or ``stale``."""
    compiled = _compiled()
    if not compiled:
        return "pure"
    if len(compiled) != len(MODULES) or not STAMP.exists():
        return "stale"
    return "fresh" if STAMP.read_text().strip() == digest() else "stale"


def describe() -> str:
    """One line for benchmark headers: what the nodes of this tree run."""
    return {"fresh": "compiled (mypyc)", "pure": "pure Python"}.get(state(), "stale build")


def check_fresh() -> None:
    """Raise `StaleNativeBuildError` if compiled modules would shadow sources
    that changed since they were built."""
    if state() == "stale":
        raise StaleNativeBuildError(
            "the compiled modules (raftlog.native) are older than their sources: "
            "run `python3 dev.py test` or `.venv/bin/python -m raftlog.native build` "
            "to rebuild them, or `.venv/bin/python -m raftlog.native clean` to run pure Python"
        )


def clean() -> None:
    """Remove every compiled module: the sources run as they are."""
    for path in _compiled():
        path.unlink()
    for lib in (ROOT / "raftlog").glob("native_lib__mypyc*"):
        lib.unlink()
    STAMP.unlink(missing_ok=True)


def _can_compile() -> str | None:
    """Why this machine cannot build the extensions, or None if it can."""
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        return f"no Python headers in {include} (Debian: python3-dev)"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "mypyc is not installed (it comes with the dev extra's mypy)"
    return None


def build() -> int:
    """Compile `MODULES` unless they are fresh. Falls back to pure Python
    (and says why) when this machine cannot compile."""
    current = state()
    if current == "fresh":
        print("raftlog.native: compiled modules are up to date", flush=True)
        return 0
    reason = _can_compile()
    if reason is not None:
        clean()
        print(f"raftlog.native: running pure Python: {reason}", flush=True)
        return 0
    clean()
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    _MYPY_CONFIG.write_text(_MYPY_INI)
    print(f"raftlog.native: compiling {len(MODULES)} modules with mypyc "
          "(a minute or two)", flush=True)
    log_path = BUILD_DIR / "build.log"
    with log_path.open("w") as out:
        code = subprocess.call([sys.executable, "-m", "raftlog.native", "_compile"], cwd=ROOT,
                               stdout=out, stderr=subprocess.STDOUT)
    if code != 0 or len(_compiled()) != len(MODULES):
        clean()
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-20:])
        print(f"raftlog.native: the build failed (exit {code}); see {log_path}:\n{tail}",
              flush=True)
        return 1
    STAMP.write_text(digest() + "\n")
    print("raftlog.native: compiled", flush=True)
    return 0


def _compile() -> None:
    """The build itself (in a child process of `build`, in the tree's root):
    mypyc writes C for `MODULES` and setuptools compiles it in place."""
    from mypyc.build import mypycify
    from setuptools import setup

    extensions = mypycify(
        ["--config-file", str(_MYPY_CONFIG), *MODULES], opt_level="3", debug_level="0",
        target_dir=str(BUILD_DIR / "c"), group_name=SHARED_LIB_GROUP,
    )
    setup(name="raftlog-native", ext_modules=extensions,
          script_args=["build_ext", "--inplace", "--build-temp", str(BUILD_DIR / "temp")])


def main(argv: list[str]) -> int:
    command = argv[0] if len(argv) == 1 else None
    if command == "build":
        return build()
    if command == "clean":
        clean()
        return 0
    if command == "status":
        print(state())
        return 0
    if command == "_compile":
        _compile()
        return 0
    print("usage: python -m raftlog.native build|clean|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
