"""`LocalQuorum`: quorum node processes on loopback, for tests and the benchmark.

Starts ``python -m raftlog.runtime.node`` processes with free ports (found by
binding port 0), kills and restarts them by PID, and always cleans up the
processes it started (`close`, also on ``with`` exit). Each node logs to
``<base_dir>/node<id>.log``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import TracebackType

__all__ = ("LocalQuorum", "free_ports")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
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
