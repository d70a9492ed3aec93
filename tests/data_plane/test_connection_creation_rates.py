"""KIP-612's node and listener connection-creation rates
(`data_plane.broker.connection_rate_quotas.ConnectionCreationRates`) and
their settings."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from data_plane.broker.client_quotas import QuotaWindow
from data_plane.broker.connection_rate_quotas import ConnectionCreationRates
from data_plane.config import ConfigError, parse_config, parse_properties


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def rates(clock: Clock, node: int = 2**31 - 1, **listeners: int) -> ConnectionCreationRates:
    return ConnectionCreationRates(QuotaWindow(11, 1000), node_rate=node,
                                   listener_rates=listeners,
                                   exempt_listeners=frozenset({"INTERNAL"}), clock_ms=clock)


def test_a_burst_past_the_bound_is_served_in_turn() -> None:
    clock = Clock()
    r = rates(clock, node=2)
    # The rate counts at least 10 windows: 20 at once is 2/s, within the bound.
    assert [r.throttle_ms("EXTERNAL") for _ in range(20)] == [0] * 20
    # Past it each waits its turn: the 21st (2.1/s) half a second, (0.1 / 2)
    # of the 10 s window; the ones behind it, recorded when their turn
    # comes, each at most a window (1 s) after the one before, as Kafka's
    # acceptor takes them (the rate stays over the bound until the burst's
    # samples age out).
    waits = [r.throttle_ms("EXTERNAL") for _ in range(10)]
    assert waits[0] == 500
    gaps = [b - a for a, b in itertools.pairwise(waits)]
    assert all(0 < g <= 1000 for g in gaps), gaps
    assert r.throttled == 10
    # Once the queue has drained and the rate fallen, a new one goes at once.
    clock.ms += 60_000
    assert r.throttle_ms("EXTERNAL") == 0


def test_one_wait_is_at_most_a_window_and_a_zero_rate_waits_the_most() -> None:
    clock = Clock()
    r = rates(clock, EXTERNAL=0)
    assert r.throttle_ms("EXTERNAL") == 1000
    assert r.throttle_ms("EXTERNAL") == 2000  # behind the first, a window more


def test_the_exempt_listener_is_held_back_by_its_own_rate_only() -> None:
    clock = Clock()
    r = rates(clock, node=0, INTERNAL=100)
    assert r.throttle_ms("INTERNAL") == 0  # the node's 0 does not apply
    assert r.throttle_ms("EXTERNAL") == 1000
    assert r.throttle_ms("OTHER") == 1000  # the node's sensor is shared; its own turn
    assert not rates(clock).enabled
    assert rates(clock).throttle_ms("EXTERNAL") == 0


def _config(tmp_path: Any, extra: str) -> Any:
    return parse_config(parse_properties(
        "node.id=1\nprocess.roles=broker,controller\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path}\n" + extra), {})


def test_the_settings_are_checked(tmp_path: Any) -> None:
    config = _config(tmp_path, "max.connection.creation.rate=50\n"
                     "listener.name.plaintext.max.connection.creation.rate=5\n")
    settings = dict(config.broker_settings)
    assert settings["max.connection.creation.rate"] == "50"
    assert settings["listener.name.plaintext.max.connection.creation.rate"] == "5"
    with pytest.raises(ConfigError, match=r"max\.connection\.creation\.rate"):
        _config(tmp_path, "max.connection.creation.rate=-1\n")
    with pytest.raises(ConfigError, match="no listener named 'external'"):
        _config(tmp_path, "listener.name.external.max.connection.creation.rate=5\n")
