"""Connection limits (`raftlog.net.connection_quotas`): per-address and total
limits over a node's listeners, and idle expiry, in `KafkaProtocolServer`
over loopback. Timing assertions are lower bounds only, or generous waits
for something that must happen."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_server_throttle import Peer, recording_handler, run

from data_plane.config import ConfigError, NodeConfig, parse_config, parse_properties
from raftlog.net import EncodedBody, KafkaProtocolServer
from raftlog.net.connection_quotas import (
    INT32_MAX,
    ConnectionLimits,
    ConnectionQuotas,
    parse_ip_overrides,
)

VOTE = 52


def test_overrides_parse_ipv4_and_ipv6() -> None:
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("127.0.0.1:5, 10.0.0.2:0") == {"127.0.0.1": 5, "10.0.0.2": 0}
    assert parse_ip_overrides("::1:7,[fe80::1]:2") == {"::1": 7, "fe80::1": 2}


def test_a_hostname_override_covers_every_address_it_resolves_to() -> None:
    overrides = parse_ip_overrides("localhost:9")
    assert overrides and set(overrides.values()) == {9}
    assert "127.0.0.1" in overrides or "::1" in overrides


@pytest.mark.parametrize("bad", ["127.0.0.1", "no-such-host.invalid:3", "127.0.0.1:-1", ":4",
                                 "127.0.0.1:x", "bad_host!:2"])
def test_bad_overrides_are_named(bad: str) -> None:
    with pytest.raises(ValueError, match="not"):
        parse_ip_overrides(bad)


def test_quotas_count_per_address_and_in_all() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(
        max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 0, "10.0.0.5": 3},
        max_connections=6))
    assert quotas.admit("127.0.0.1") is None
    assert quotas.admit("::ffff:127.0.0.1") is None  # the same address, IPv4-mapped
    refused = quotas.admit("127.0.0.1")
    assert refused is not None and "maximum of 2" in refused
    assert quotas.admit("10.0.0.9") is not None  # an override of 0 refuses it entirely
    assert [quotas.admit("10.0.0.5") for _ in range(4)] == [None, None, None, quotas.admit(
        "10.0.0.5")]
    assert quotas.count("10.0.0.5") == 3
    assert quotas.admit("10.0.0.6") is None  # 6 open: the node's maximum
    refused = quotas.admit("10.0.0.7")
    assert refused is not None and "maximum of 6" in refused
    assert quotas.refused == 5
    quotas.release("127.0.0.1")
    assert quotas.count("127.0.0.1") == 1 and quotas.open == 5
    assert quotas.admit("127.0.0.1") is None


def test_limits_take_kafkas_defaults() -> None:
    limits = ConnectionLimits.from_config({})
    assert limits.max_connections_per_ip == INT32_MAX == limits.max_connections
    assert limits.idle_ms == 600_000
    assert limits.limit_for("1.2.3.4") == INT32_MAX


def parse_node_config(text: str) -> NodeConfig:
    return parse_config(parse_properties(text), {})


def test_node_config_accepts_and_checks_the_settings(tmp_path: Any) -> None:
    base = ("node.id=1\nprocess.roles=broker,controller\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
            "controller.listener.names=CONTROLLER\n"
            f"log.dirs={tmp_path}\n")
    config = parse_node_config(base + "max.connections.per.ip=50\n"
                               "max.connections.per.ip.overrides=127.0.0.1:200\n"
                               "connections.max.idle.ms=-1\nsocket.request.max.bytes=1048576\n")
    settings = dict(config.broker_settings)
    assert settings["max.connections.per.ip"] == "50"
    assert settings["max.connections.per.ip.overrides"] == "127.0.0.1:200"
    assert settings["connections.max.idle.ms"] == "-1"
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        parse_node_config(base + "max.connections.per.ip.overrides=localhost:x\n")
    with pytest.raises(ConfigError, match=r"max\.connections"):
        parse_node_config(base + "max.connections=-1\n")


# ---- the server ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def server_with(limits: ConnectionLimits,
                      answer: Any = None) -> AsyncIterator[KafkaProtocolServer]:
    handlers = {VOTE: recording_handler(answer or _answer, {})}
    async with KafkaProtocolServer("127.0.0.1", 0, handlers,
                                   connection_quotas=ConnectionQuotas(limits)) as server:
        yield server


async def closed_by_server(peer: Peer, within_s: float = 5.0) -> bool:
    """Whether the server closes ``peer``'s connection (EOF) within the time."""
    try:
        data = await asyncio.wait_for(peer.reader.read(1), within_s)
    except ConnectionError:
        return True  # reset: closed too
    except TimeoutError:
        return False
    return data == b""


def test_connections_over_the_per_address_limit_are_closed() -> None:
    async def main() -> None:
        async with server_with(ConnectionLimits(max_connections_per_ip=2, idle_ms=-1)) as server:
            first, second = await Peer.connect(server.port), await Peer.connect(server.port)
            third = await Peer.connect(server.port)
            assert await closed_by_server(third)
            # The admitted ones still work.
            await first.send(1)
            assert await first.read_correlation_id() == 1
            await second.send(2)
            assert await second.read_correlation_id() == 2
            # One closes: there is room again.
            first.close()
            await asyncio.sleep(0.2)
            fourth = await Peer.connect(server.port)
            await fourth.send(4)
            assert await fourth.read_correlation_id() == 4
            for peer in (second, third, fourth):
                peer.close()

    run(main())


def test_idle_connections_are_closed_but_not_a_long_request() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def slow(cid: int) -> Any:
            if cid == 9:
                await release.wait()
            return await _answer(cid)

        idle_ms = 200
        async with server_with(ConnectionLimits(idle_ms=idle_ms), slow) as server:
            loop = asyncio.get_running_loop()
            # Before connecting: the server starts the idle clock when it
            # accepts, which is before connect() returns here.
            opened = loop.time()
            idle, busy = await Peer.connect(server.port), await Peer.connect(server.port)
            await busy.send(9)  # in flight until released
            assert await closed_by_server(idle)
            assert loop.time() - opened >= idle_ms / 1000
            # Three idle periods later the busy one is still open and answers.
            await asyncio.sleep(3 * idle_ms / 1000)
            release.set()
            assert await busy.read_correlation_id() == 9
            # Its answer was its last activity: idle from then on, then closed.
            answered = loop.time()
            assert await closed_by_server(busy)
            assert loop.time() - answered >= idle_ms / 1000 - 0.05
            for peer in (idle, busy):
                peer.close()

    run(main())


def test_without_quotas_nothing_is_limited_or_expired() -> None:
    async def main() -> None:
        handlers = {VOTE: recording_handler(_answer, {})}
        async with KafkaProtocolServer("127.0.0.1", 0, handlers) as server:
            peers = [await Peer.connect(server.port) for _ in range(5)]
            await asyncio.sleep(0.3)
            for cid, peer in enumerate(peers):
                await peer.send(cid)
                assert await peer.read_correlation_id() == cid
                peer.close()

    run(main())


async def _answer(cid: int) -> Any:
    del cid
    return EncodedBody(b"")


def test_listener_limits_and_the_listeners_max_connections_spares() -> None:
    """KIP-402: ``listener.name.<l>.max.connections`` bounds one listener;
    ``max.connections`` holds back every listener but the exempt ones
    (inter-broker, controller), whose connections still count."""
    limits = ConnectionLimits.from_config(
        {"max.connections": "2", "listener.name.external.max.connections": "1"},
        ["EXTERNAL", "INTERNAL", "CONTROLLER"],
        exempt_listeners=frozenset({"INTERNAL", "CONTROLLER"}))
    assert limits.per_listener == {"EXTERNAL": 1}
    quotas = ConnectionQuotas(limits)
    assert quotas.admit("10.0.0.1", "EXTERNAL") is None
    refused = quotas.admit("10.0.0.2", "EXTERNAL")
    assert refused is not None and "listener EXTERNAL" in refused
    assert quotas.admit("10.0.0.3", "INTERNAL") is None  # total now 2
    assert quotas.admit("10.0.0.4", "CONTROLLER") is None  # exempt: 3 open
    assert quotas.open == 3
    quotas.release("10.0.0.1", "EXTERNAL")
    # EXTERNAL has room again, but the node is at max.connections (2 open).
    refused = quotas.admit("10.0.0.5", "EXTERNAL")
    assert refused is not None and "maximum of 2 connections" in refused
    quotas.release("10.0.0.4", "CONTROLLER")
    assert quotas.admit("10.0.0.5", "EXTERNAL") is None
    assert quotas.refused == 2


def test_creation_rate_limits_parse_and_are_checked() -> None:
    limits = ConnectionLimits.from_config(
        {"max.connection.creation.rate": "10",
         "listener.name.external.max.connection.creation.rate": "3"},
        ["EXTERNAL", "INTERNAL"])
    assert limits.max_connection_creation_rate == 10
    assert limits.per_listener_creation_rate == {"EXTERNAL": 3}
    assert ConnectionLimits().max_connection_creation_rate == INT32_MAX
    with pytest.raises(ValueError, match="negative"):
        ConnectionLimits(max_connection_creation_rate=-1)


def test_a_throttled_new_connection_is_read_only_after_its_wait() -> None:
    """KIP-612: a connection the creation rates hold back is accepted, but
    nothing it sends is read (so answered) until its wait is over; one that
    is not held back is answered at once."""
    waits = iter([0, 400])

    async def main() -> None:
        quotas = ConnectionQuotas(ConnectionLimits(idle_ms=-1))
        quotas.creation_throttle = lambda listener: next(waits)
        handlers = {VOTE: recording_handler(_answer, {})}
        async with KafkaProtocolServer("127.0.0.1", 0, handlers,
                                       connection_quotas=quotas) as server:
            loop = asyncio.get_running_loop()
            first = await Peer.connect(server.port)
            started = loop.time()
            await first.send(1)
            assert await first.read_correlation_id() == 1
            assert loop.time() - started < 0.3
            second = await Peer.connect(server.port)
            started = loop.time()
            await second.send(2)
            assert await second.read_correlation_id() == 2
            assert loop.time() - started >= 0.35
            await first.send(3)  # the first is not held back by the second's wait
            assert await first.read_correlation_id() == 3
            first.close()
            second.close()

    run(main())
