"""KIP-612 per-address connection-creation rates (`IpConnectionRates`) and
their place in the listeners' `ConnectionQuotas`."""

from __future__ import annotations

from data_plane.broker.client_quotas import QuotaWindow
from data_plane.broker.connection_rate_quotas import IpConnectionRates
from raftlog.net.connection_quotas import ConnectionLimits, ConnectionQuotas

RATE = "connection_creation_rate"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def rates(quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]],
          clock: Clock) -> IpConnectionRates:
    r = IpConnectionRates(QuotaWindow(11, 1000), clock_ms=clock)
    r.update(quotas)
    return r


def test_a_burst_is_measured_over_the_whole_window_then_refused() -> None:
    clock = Clock()
    r = rates({(("ip", "10.0.0.1"),): {RATE: 2}}, clock)
    # The rate counts at least 10 full windows: 20 connections at once are 2/s.
    assert [r.check("10.0.0.1") for _ in range(20)] == [None] * 20
    why = r.check("10.0.0.1")
    assert why is not None and "10.0.0.1" in why and "connection_creation_rate of 2/s" in why
    assert r.throttled == 1
    # Refused attempts count: still over after more tries, under once time passes.
    assert r.check("10.0.0.1") is not None
    clock.ms += 11_000
    assert r.check("10.0.0.1") is None


def test_the_default_entity_bounds_every_other_address_and_zero_refuses() -> None:
    clock = Clock()
    r = rates({(("ip", None),): {RATE: 1}, (("ip", "10.0.0.9"),): {RATE: 0},
               (("client-id", "app"),): {"producer_byte_rate": 5}}, clock)
    assert r.bound_for("10.0.0.2") == 1 and r.bound_for("10.0.0.9") == 0
    assert r.check("10.0.0.9") is not None  # 0: nothing from this address
    assert [r.check("10.0.0.2") for _ in range(10)] == [None] * 10
    assert r.check("10.0.0.2") is not None
    assert r.check("10.0.0.3") is None  # its own sensor


def test_without_ip_quotas_nothing_is_recorded_and_updates_apply() -> None:
    clock = Clock()
    r = rates({}, clock)
    assert not r.enabled
    assert all(r.check("10.0.0.1") is None for _ in range(1000))
    assert r.rate("10.0.0.1") == 0.0
    r.update({(("ip", "::ffff:10.0.0.1"),): {RATE: 1}})  # IPv4-mapped: the IPv4 address
    assert r.bound_for("10.0.0.1") == 1
    assert [r.check("::ffff:10.0.0.1") for _ in range(10)] == [None] * 10
    assert r.check("10.0.0.1") is not None
    r.update({})
    assert r.check("10.0.0.1") is None and r.rate("10.0.0.1") == 0.0


def test_connection_quotas_refuse_on_the_rate_check_and_count_it() -> None:
    clock = Clock()
    r = rates({(("ip", "10.0.0.1"),): {RATE: 0}}, clock)
    quotas = ConnectionQuotas(ConnectionLimits(), rate_check=r.check)
    assert quotas.admit("10.0.0.1") is not None
    assert quotas.refused == 1 and quotas.open == 0 and quotas.count("10.0.0.1") == 0
    assert quotas.admit("10.0.0.2") is None and quotas.open == 1
