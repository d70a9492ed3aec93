"""The runner's pieces that need no cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
