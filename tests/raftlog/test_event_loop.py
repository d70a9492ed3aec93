"""`raftlog.runtime.event_loop`: node processes run on uvloop unless told not to."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from raftlog.runtime import event_loop


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_auto_picks_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.ENV_VAR, raising=False)
    assert event_loop.run(_loop_type()) is uvloop.Loop
    assert event_loop.describe().startswith("uvloop ")


def test_env_var_selects_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV_VAR, "asyncio")
    loop_type = event_loop.run(_loop_type())
    assert loop_type is not uvloop.Loop and issubclass(loop_type, asyncio.BaseEventLoop)
    assert event_loop.describe() == "asyncio"


def test_explicit_choice_beats_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV_VAR, "asyncio")
    assert event_loop.run(_loop_type(), choice="uvloop") is uvloop.Loop


def test_unknown_choice_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="auto, uvloop or asyncio"):
        event_loop.loop_factory("tokio")


def test_run_returns_the_result_and_closes_its_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return 42

    assert event_loop.run(main(), choice="uvloop") == 42
    assert loops[0].is_closed()
