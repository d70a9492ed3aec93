"""`raftlog topics create|alter|delete` return once every reachable bootstrap
node shows the change, so the next command sees its own write whichever node
it asks. No cluster: fake connections, one of which lags as a follower
controller does (it applies a committed record a fetch after the leader)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import uuid
from typing import Any

import pytest
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from data_plane import admin_cli
from raftlog.net.errors import ConnectFailedError


class _Cluster:
    def __init__(self) -> None:
        self.committed = False


class _Node:
    """Answers CreateTopics as the active controller (or NOT_CONTROLLER), and
    Metadata, which shows a committed topic only after ``lag`` more asks."""

    def __init__(self, cluster: _Cluster, *, active: bool, lag: int) -> None:
        self.cluster, self.active, self.lag = cluster, active, lag
        self.metadata_asks = 0

    async def send(self, request: Any, version: int) -> Any:
        name = type(request).__name__
        if name == "CreateTopicsRequest":
            if self.active:
                self.cluster.committed = True
            return _created(ErrorCode.none if self.active else ErrorCode.not_controller)
        assert name == "MetadataRequest"
        self.metadata_asks += 1
        shown = self.cluster.committed and self.lag <= 0
        if self.cluster.committed:
            self.lag -= 1
        return _metadata(ErrorCode.none if shown else ErrorCode.unknown_topic_or_partition)

    async def close(self) -> None:
        pass


class _Down:
    def __init__(self) -> None:
        self.asks = 0

    async def send(self, request: Any, version: int) -> Any:
        self.asks += 1
        raise ConnectFailedError("c:3: connection refused")

    async def close(self) -> None:
        pass


def _created(error: ErrorCode) -> ct_resp.CreateTopicsResponse:
    return ct_resp.CreateTopicsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        topics=(ct_resp.CreatableTopicResult(
            name=TopicName("t"), topic_id=uuid.UUID(int=1), error_code=error, error_message=None,
            topic_config_error_code=ErrorCode.none, num_partitions=i32(1),
            replication_factor=i16(1), configs=()),))


def _metadata(error: ErrorCode) -> md_resp.MetadataResponse:
    topic = md_resp.MetadataResponseTopic(
        error_code=error, name=TopicName("t"), topic_id=uuid.UUID(int=1), is_internal=False,
        partitions=(), topic_authorized_operations=i32(-2147483648))
    return md_resp.MetadataResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), brokers=(), cluster_id="c",
        controller_id=i32(2), topics=(topic,))


def _create(nodes: dict[tuple[str, int], Any], timeout_ms: int, *,
            if_not_exists: bool = False) -> int:
    args = argparse.Namespace(topic="t", partitions=1, replication_factor=1, config=None,
                              if_not_exists=if_not_exists)

    async def run() -> int:
        admin = admin_cli._Admin(list(nodes), timeout_ms)
        admin._clients.update(nodes)
        return await admin_cli._topics_create(admin, args)

    return asyncio.run(run())


def test_create_returns_once_a_lagging_follower_shows_the_topic_and_skips_a_dead_node() -> None:
    cluster = _Cluster()
    follower, active, dead = (_Node(cluster, active=False, lag=3),
                              _Node(cluster, active=True, lag=0), _Down())
    assert _create({("a", 1): follower, ("b", 2): active, ("c", 3): dead}, 5_000) == 0
    assert cluster.committed
    # The follower, which the next command asks first, was asked until it
    # showed the topic; the dead node was dropped at its first refusal.
    assert follower.lag < 0 and follower.metadata_asks == 4
    assert active.metadata_asks == 1
    assert dead.asks == 1


def test_a_node_that_never_catches_up_costs_the_deadline_not_an_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _Cluster()
    stuck, active = _Node(cluster, active=False, lag=10**9), _Node(cluster, active=True, lag=0)
    # The write is committed: the command still succeeds, after the timeout,
    # and says on stderr that a node lags.
    assert _create({("a", 1): stuck, ("b", 2): active}, 400) == 0
    assert stuck.metadata_asks > 1
    out, err = capsys.readouterr()
    assert out == "Created topic t.\n"
    assert "not every node shows the change to t yet" in err


def test_a_create_that_every_node_shows_says_nothing_more(
        capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _Cluster()
    assert _create({("b", 2): _Node(cluster, active=True, lag=0)}, 5_000) == 0
    assert capsys.readouterr() == ("Created topic t.\n", "")


class _Exists:
    """The active controller, where topic t is already there."""

    async def send(self, request: Any, version: int) -> Any:
        assert type(request).__name__ == "CreateTopicsRequest"
        return _created(ErrorCode.topic_already_exists)

    async def close(self) -> None:
        pass


def test_if_not_exists_makes_an_existing_topic_a_quiet_success(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(admin_cli.CliError, match="TOPIC_ALREADY_EXISTS"):
        _create({("a", 1): _Exists()}, 1_000)
    assert _create({("a", 1): _Exists()}, 1_000, if_not_exists=True) == 0
    assert capsys.readouterr() == ("", "")  # kafka-topics.sh says nothing either
