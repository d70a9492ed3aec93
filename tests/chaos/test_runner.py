"""The runner's pieces that need no cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from chaos import runner
from chaos.history import HistoryRecorder
from chaos.runner import _settle, summarize
from data_plane.local_cluster import LocalClusterError


class NeverReady:
    async def wait_ready(self, timeout_s: float | None = None) -> None:
        raise LocalClusterError("node 1 exited during start-up; server.log: boom")


class Ready:
    async def wait_ready(self, timeout_s: float | None = None) -> None:
        return None


def test_a_cluster_that_does_not_heal_is_recorded_not_raised(tmp_path: Path) -> None:
    rec = HistoryRecorder(tmp_path / "h.jsonl")
    try:
        why = asyncio.run(_settle(NeverReady(), rec, lambda: 5))  # type: ignore[arg-type]
        assert "node 1 exited" in why
        ok = asyncio.run(_settle(Ready(), rec, lambda: 6))  # type: ignore[arg-type]
        assert ok == ""
        ops = list(rec.history())
        assert [(op.type.value, op.process, op.f) for op in ops] == [
            ("invoke", "nemesis", "wait-ready"),
            ("info", "nemesis", "wait-ready"),
            ("invoke", "nemesis", "wait-ready"),
            ("info", "nemesis", "wait-ready"),
        ]
        assert "node 1 exited" in ops[1].value["error"] and ops[3].value == "ready"
    finally:
        rec.close()


def test_summary_names_the_reason_of_an_unknown_verdict(tmp_path: Path) -> None:
    from chaos.checker import compose
    from chaos.checker.base import make_result
    from chaos.history import History
    from chaos.runner import RunOutcome, _Fixed

    result = compose(
        {
            "lost-writes": _Fixed(make_result({})),
            "cluster-ready": _Fixed(make_result({}, unknown_reason="cluster not ready: boom")),
        }
    ).check(History([]))
    lines = summarize(RunOutcome(result.valid, result, tmp_path, 0, "netns", "why", {}))
    assert "valid: unknown" in lines
    assert "  cluster-ready: unknown (cluster not ready: boom)" in lines


class _BlockingClient:
    """A client whose close blocks until released (librdkafka's KIP-848
    consumer close once blocked for minutes after a node kill)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed = False

    def close(self) -> None:
        self.release.wait(30)
        self.closed = True


class _QuickClient:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_client_close_that_blocks_is_left_behind_and_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "CLIENT_CLOSE_TIMEOUT_S", 0.2)
    abandoned: list[str] = []
    w = runner._Worker(3, None, None, abandoned)  # type: ignore[arg-type]
    stuck, quick = _BlockingClient(), _QuickClient()
    w.producer, w.poller = quick, stuck  # type: ignore[assignment]
    started = time.monotonic()
    w.crash()
    assert time.monotonic() - started < 5  # the worker moved on
    assert quick.closed and not stuck.closed
    assert abandoned == ["process 3: _BlockingClient"]
    assert w.producer is None and w.poller is None and w.process == 1003
    stuck.release.set()  # the thread left behind finishes on its own
    deadline = time.monotonic() + 5
    while not stuck.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stuck.closed
