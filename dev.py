#!/usr/bin/env python3
"""One-command set-up for raftlog, needing only Python 3.11 and pip.

    python3 dev.py up      set everything up, then run the main job
    python3 dev.py test    set everything up, then run the test suite

Set-up makes a virtual environment in .venv and installs the project with
its dev, bench, chaos and spark extras into it. It reinstalls only when pyproject.toml changes (a
hash is kept in .venv/.dev-stamp). Any further arguments go to the command:
`python3 dev.py test -k records`, `python3 dev.py up --base-port 19092 --detach`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".dev-stamp"


def _run(*cmd: str | Path) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT)


def _check(*cmd: str | Path) -> None:
    code = _run(*cmd)
    if code != 0:
        sys.exit(f"dev.py: set-up step failed (exit {code}): {' '.join(map(str, cmd))}")


#: The distribution's own Python 3.11, preferred for .venv when it can make one.
SYSTEM_PYTHON = Path("/usr/bin/python3.11")


def base_python() -> Path:
    """The Python 3.11 that .venv is built on.

    ``RAFTLOG_PYTHON`` if set; else the distribution's ``/usr/bin/python3.11``
    when it exists and can make a virtual environment; else the Python
    running this script. Debian's is linked statically and built with PGO
    and LTO; a version manager's default build (pyenv's, first on these
    machines' PATH) puts the interpreter in a shared libpython built without
    them, and spends about a sixth more CPU per record on a broker's
    request path (bench/README.md, "Which Python runs the nodes").
    """
    chosen = os.environ.get("RAFTLOG_PYTHON")
    if chosen:
        path = Path(chosen)
        if not _python_311_with_venv(path):
            sys.exit(f"dev.py: RAFTLOG_PYTHON={chosen} is not a Python 3.11 with venv and ensurepip")
        return path
    if SYSTEM_PYTHON.exists() and _python_311_with_venv(SYSTEM_PYTHON):
        return SYSTEM_PYTHON
    if sys.version_info[:2] != (3, 11):
        sys.exit(f"dev.py: raftlog needs Python 3.11, this is {sys.version.split()[0]}")
    return Path(sys.executable)


def _python_311_with_venv(python: Path) -> bool:
    probe = "import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))"
    try:
        return subprocess.call([str(python), "-c", probe], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


def _venv_base() -> str | None:
    """The ``executable`` .venv was built on, from its pyvenv.cfg."""
    try:
        lines = (VENV / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "executable":
            return value.strip()
    return None


def setup() -> None:
    """Create .venv on `base_python` and install the project (editable)
    with its dev, bench, chaos and spark extras."""
    base = base_python()
    built_on = _venv_base()
    if (BIN / "python").exists() and built_on is not None and (
            os.path.realpath(built_on) != os.path.realpath(base)):
        print(f"dev.py: rebuilding .venv on {base} (it was built on {built_on})", flush=True)
        shutil.rmtree(VENV)
    if not (BIN / "python").exists():
        print(f"dev.py: creating .venv on {base}", flush=True)
        if _run(base, "-m", "venv", VENV) != 0:  # ensurepip missing on some distro Pythons
            sys.exit("dev.py: could not create a virtual environment; "
                     "install your distribution's python3-venv package")
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text().strip() != want:
        _check(BIN / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        _check(BIN / "python", "-m", "pip", "install", "--quiet", "-e", ".[dev,bench,chaos,spark]")
        STAMP.write_text(want)
    compile_sources()


#: The project's packages (the editable install runs them from the tree).
PACKAGES = ("raftlog", "metadata_quorum", "data_plane", "chaos", "spark_sink")


def compile_sources() -> None:
    """Write the packages' bytecode (only what changed since the last time).

    With PYTHONDONTWRITEBYTECODE set (this machine's environment sets it),
    Python never caches what it compiles, so every node and every CLI call
    compiled the project from source again: about a fifth of a CLI call's
    start-up. Caches written here are still read under that setting.
    pip compiles the installed dependencies itself. The venv's Python
    compiles them: its bytecode is the kind that is read."""
    code = subprocess.call([str(BIN / "python"), "-m", "compileall", "-q",
                            *(str(ROOT / package) for package in PACKAGES)], cwd=ROOT)
    if code != 0:
        sys.exit(f"dev.py: could not compile the packages (compileall exit {code})")


# Debian packages the tests use: the chaos suite's fault backends
# (chaos-infra.md: network namespaces, nftables partitions, libfaketime clock
# skew), docker-compose to validate docker-compose.yml (no engine runs),
# kcat as one more real Kafka client, nats-server (the benchmark's peer),
# and headless Chromium with its driver for the dashboard test.
SYSTEM_TOOLS = {"ip": "iproute2", "nft": "nftables", "faketime": "faketime",
                "docker-compose": "docker-compose", "kcat": "kcat",
                "nats-server": "nats-server", "chromium": "chromium",
                "chromedriver": "chromium-driver"}


def system_tools() -> None:
    """Install missing test tools with apt-get when we are root.

    Without them (not root, no apt-get, no network) the tests that need them
    skip and print why; nothing else depends on them.
    """
    missing = sorted({pkg for tool, pkg in SYSTEM_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"dev.py: not installing {', '.join(missing)} (needs root and apt-get); "
              "the chaos tests that need them will skip", flush=True)
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        print("+", " ".join(cmd), flush=True)
        if subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL) != 0:
            print(f"dev.py: could not install {', '.join(missing)}; "
                  "the chaos tests that need them will skip", flush=True)
            return


def up(args: list[str]) -> int:
    """The main job: `raftlog cluster up`, a local 3-node cluster in the
    foreground until Ctrl-C. Its data, configs, logs and pids go to
    .cluster/ unless --dir is given; running it again restarts that cluster."""
    if not any(a == "--dir" or a.startswith("--dir=") for a in args):
        args = ["--dir", str(ROOT / ".cluster"), *args]
    cmd = [str(BIN / "raftlog"), "cluster", "up", *args]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C: the cluster launcher stops the nodes cleanly; pass it
            # on (a terminal already did) and wait for it to finish.
            proc.send_signal(signal.SIGINT)


def test(args: list[str]) -> int:
    """Lint, type-check, then pytest. Extra args go to pytest, as they are.

    Without arguments, the default suite runs in parallel (pytest-xdist): one
    worker per core, at most four, each taking whole test files
    (``--dist loadfile``) so a module's shared cluster stays in one worker,
    the longest files first (``tests/durations.py``).
    """
    if not args:
        for step in (
            (BIN / "ruff", "check", "."),
            (BIN / "mypy"),
        ):
            code = _run(*step) if isinstance(step, tuple) else _run(step)
            if code != 0:
                return code
        workers = min(4, len(os.sched_getaffinity(0)))
        if workers > 1:
            # Files run longest first (tests/durations.py), not by test count.
            args = ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder",
                    "--durations", "25"]
    return _run(BIN / "python", "-m", "pytest", *args)


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("up", "test"):
        print(__doc__)
        return 2
    os.chdir(ROOT)
    setup()
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "test":
        system_tools()
    return up(rest) if command == "up" else test(rest)


if __name__ == "__main__":
    sys.exit(main())
