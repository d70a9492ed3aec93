"""`LocalQuorum`: quorum node processes on loopback, for tests and the benchmark.

Starts ``python -m raftlog.runtime.node`` processes with free ports
(`free_ports`), kills and restarts them by PID, and always cleans up the
processes it started (`close`, also on ``with`` exit). Each node logs to
``<base_dir>/node<id>.log``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType

__all__ = ("LocalQuorum", "free_ports")


#: Where `free_ports` records what it handed out, and the lock around it.
PORT_REGISTRY = os.path.join(tempfile.gettempdir(), "raftlog-free-ports.json")
#: A port handed out is not handed out again, to any process, for this long.
PORT_HOLD_S = 120.0
_LOWEST_PORT = 10_000


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free now, for servers started soon.

    Between this call and the server's bind, another process could take a
    port. Two guards:
    - the ports come from below the kernel's ephemeral range
      (``ip_local_port_range``), which outgoing connections draw their
      source ports from: no client connection can take one;
    - processes share a registry (`PORT_REGISTRY`, under an ``flock``): a
      port handed out in the last `PORT_HOLD_S` seconds is not handed out
      again (parallel test workers, two soaks).

    Each port is checked free by binding it. Falls back to the kernel's
    choice (binding port 0) when the range below the ephemeral one is too
    small or ``host`` cannot be bound.
    """
    low = _ephemeral_low()
    if low - _LOWEST_PORT < 10 * count:
        return _kernel_ports(count, host)
    rng = random.Random()
    with open(PORT_REGISTRY + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        held = _read_registry(now)
        picked: list[int] = []
        for _ in range(50 * count + 100):
            if len(picked) == count:
                break
            port = rng.randrange(_LOWEST_PORT, low)
            if port in held or port in picked:
                continue
            if _bindable(host, port):
                picked.append(port)
        if len(picked) < count:
            return _kernel_ports(count, host)
        held.update((port, now) for port in picked)
        _write_registry(held)
    return picked


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _read_registry(now: float) -> dict[int, float]:
    try:
        with open(PORT_REGISTRY) as f:
            raw = json.load(f)
        return {int(port): float(t) for port, t in raw.items() if now - float(t) < PORT_HOLD_S}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}  # missing or unreadable: start afresh


def _write_registry(held: dict[int, float]) -> None:
    tmp = f"{PORT_REGISTRY}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "w") as f:
            json.dump({str(port): t for port, t in held.items()}, f)
        os.replace(tmp, PORT_REGISTRY)


def _kernel_ports(count: int, host: str) -> list[int]:
    """``count`` distinct ports that were free a moment ago (bind to port 0)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class LocalQuorum:
    """``voters`` voter processes (ids 1..n) plus observers (ids n+1..) in ``base_dir``.

    ``node_args`` are passed to every node (timeouts, linger, snapshots).
    ``command`` starts one node; it takes the node's command-line arguments
    (the default is ``python -m raftlog.runtime.node``; the benchmark wraps it).
    """

    def __init__(
        self,
        base_dir: str,
        *,
        voters: int = 3,
        observers: int = 0,
        node_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        command: Sequence[str] = (sys.executable, "-m", "raftlog.runtime.node"),
    ) -> None:
        self.base_dir = base_dir
        self.command = tuple(command)
        ports = free_ports(voters + observers, host)
        self.addresses = {i + 1: (host, ports[i]) for i in range(voters + observers)}
        self.voter_ids = tuple(range(1, voters + 1))
        self.observer_ids = tuple(range(voters + 1, voters + observers + 1))
        self.voters_spec = ",".join(f"{i}@{host}:{self.addresses[i][1]}" for i in self.voter_ids)
        self.node_args = tuple(node_args)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        os.makedirs(base_dir, exist_ok=True)

    def __enter__(self) -> LocalQuorum:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def node_dir(self, node_id: int) -> str:
        return os.path.join(self.base_dir, f"node{node_id}")

    def log_path(self, node_id: int) -> str:
        return os.path.join(self.base_dir, f"node{node_id}.log")

    def start(self, node_id: int, extra_args: Sequence[str] = ()) -> None:
        """Start (or restart) node ``node_id``; returns once its port accepts."""
        if self.is_running(node_id):
            raise RuntimeError(f"node {node_id} is already running")
        host, port = self.addresses[node_id]
        args = [
            *self.command,
            "--node-id",
            str(node_id),
            "--voters",
            self.voters_spec,
            "--dir",
            self.node_dir(node_id),
            "--listen",
            f"{host}:{port}",
            *self.node_args,
            *extra_args,
        ]
        with open(self.log_path(node_id), "ab") as log_file:
            self.processes[node_id] = subprocess.Popen(
                args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._wait_listening(node_id)

    def start_all(self) -> None:
        for node_id in self.voter_ids:
            self.start(node_id)

    def is_running(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and process.poll() is None

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout_s: float = 10.0) -> int:
        """Send ``sig`` to the node's PID and wait for it to exit; returns its status."""
        process = self.processes[node_id]
        if process.poll() is None:
            process.send_signal(sig)
        return process.wait(timeout=timeout_s)

    def stop(self, node_id: int) -> int:
        """Graceful stop (SIGTERM); SIGKILL after 10 s."""
        try:
            return self.kill(node_id, signal.SIGTERM)
        except subprocess.TimeoutExpired:
            return self.kill(node_id, signal.SIGKILL)

    def close(self) -> None:
        """SIGKILL every process still running (by PID) and reap it."""
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)

    def _wait_listening(self, node_id: int, timeout_s: float = 20.0) -> None:
        host, port = self.addresses[node_id]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running(node_id):
                raise RuntimeError(f"node {node_id} exited; see {self.log_path(node_id)}")
            with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
                return
            time.sleep(0.02)
        raise TimeoutError(f"node {node_id} did not listen on {host}:{port}")
