"""`free_ports`: ports for servers started a moment later, safe from the two
ways another process could take one first: an outgoing connection's source
port (the kernel draws those from the ephemeral range) and another process
asking for free ports at the same time (pytest-xdist workers, two soaks)."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import pytest

from raftlog.runtime import local_quorum
from raftlog.runtime.local_quorum import free_ports


@pytest.fixture(autouse=True)
def _own_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_quorum, "PORT_REGISTRY", str(tmp_path / "ports.json"))


def _pick(registry: str, n: int) -> list[int]:
    local_quorum.PORT_REGISTRY = registry
    return free_ports(n)


def test_ports_are_free_distinct_and_below_the_ephemeral_range(tmp_path: Path) -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(30)
    assert len(set(ports)) == 30
    assert all(local_quorum._LOWEST_PORT <= p < low for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # still free


def test_a_port_is_not_handed_out_twice_within_the_hold(tmp_path: Path) -> None:
    registry = str(tmp_path / "shared.json")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        batches = pool.starmap(_pick, [(registry, 200)] * 8)
    everything = [p for batch in batches for p in batch]
    assert len(everything) == len(set(everything)) == 1600


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setattr(local_quorum, "_ephemeral_low", lambda: taken + 1)
        monkeypatch.setattr(local_quorum, "_LOWEST_PORT", taken - 40)
        ports = free_ports(3)
    assert all(taken - 40 <= p < taken for p in ports), ports  # drawn from the range, not it
    assert len(set(ports)) == 3
