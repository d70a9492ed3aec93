"""KIP-227 fetch sessions between real brokers (in-process cluster).

A 30-partition RF-3 topic, writes to one partition only. Followers' fetch
requests are observed by wrapping each fetcher's client (production code is
untouched): once their sessions exist, requests and answers name only the
written partition; the high watermark still reaches the followers; acks=all
works; idle partitions stay in the ISR well past a short
``replica.lag.time.max.ms``, and the leaders' sessions park them (fetches
skip them); and a write to an idle (parked) partition wakes the followers'
long-polling fetches at once.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kio.schema.fetch.v16 import request as fetch_req
from kio.schema.produce.v9 import request as p9
from kio.serial import entity_reader

from data_plane.api import fetch as fetch_api
from data_plane.broker.fetcher import ReplicaFetcherManager
from data_plane.testing.inprocess_cluster import ClusterThread, InProcessCluster
from raftlog.net.client import KafkaProtocolClient
from raftlog.net.errors import ErrorCode
from raftlog.records import BatchBuilder

pytestmark = pytest.mark.timeout(120)

TOPIC = "sessions"
PARTITIONS = 30
WRITTEN = 7
LAG_MS = 1_500


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ClusterThread]:
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2",
                                            "replica.lag.time.max.ms": str(LAG_MS)})
    with ClusterThread(c) as ct:
        yield ct


class _Recorder:
    """Stands between every fetcher and its client: (session id, epoch,
    requested, forgotten, answered) per fetch, partitions as (topic id, index)."""

    def __init__(self) -> None:
        self.fetches: list[dict[str, Any]] = []

    def install(self, manager: ReplicaFetcherManager) -> None:
        for fetcher in manager._fetchers.values():
            fetcher.client = cast(Any, _RecordingClient(fetcher.client, self.fetches))


class _RecordingClient:
    """A fetcher's client that records each fetch (`_Recorder`): wrapped,
    not patched in place, so the client object stays as built."""

    def __init__(self, client: Any, fetches: list[dict[str, Any]]) -> None:
        self._client = client
        self._fetches = fetches

    async def send_encoded(self, api_key: int, version: int, body: bytes) -> Any:
        request, _ = entity_reader(fetch_req.FetchRequest)(body, 0)
        response = await self._client.send_encoded(api_key, version, body)
        self._fetches.append({
            "session": (int(request.session_id), int(request.session_epoch)),
            "requested": {(t.topic_id, int(p.partition))
                          for t in request.topics for p in t.partitions},
            "forgotten": {(t.topic_id, int(i))
                          for t in request.forgotten_topics_data for i in t.partitions},
            "error": response.error_code,
            "answered": {(t.topic_id, int(p.partition_index))
                         for t in response.responses for p in t.partitions},
        })
        return response

    async def close(self) -> None:
        await self._client.close()


def _batch(values: list[bytes]) -> bytes:
    builder = BatchBuilder()
    for v in values:
        builder.append(v, timestamp_ms=int(time.time() * 1000))
    return builder.build()


async def _produce(port: int, records: bytes, index: int = WRITTEN) -> tuple[int, int]:
    client = KafkaProtocolClient("127.0.0.1", port, request_timeout_ms=10_000)
    try:
        response: Any = await client.send(p9.ProduceRequest(
            transactional_id=None, acks=-1,  # type: ignore[arg-type]
            timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
            topic_data=(p9.TopicProduceData(name=TOPIC, partition_data=(  # type: ignore[arg-type]
                p9.PartitionProduceData(index=index, records=records),),),),  # type: ignore[arg-type]
        ))
    finally:
        await client.close()
    part = response.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def _create_topic(ct: ClusterThread) -> None:
    c = ct.cluster
    ct.call(c.controller.create_topic, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    ct.run(c.wait_until(lambda: sum(
        1 for b in c.brokers.values() for k, h in b.replicas.partitions.items()
        if k[0] == TOPIC and h.partition.is_leader) == PARTITIONS))


def _wait_for_sessions(ct: ClusterThread) -> None:
    """Until every follower fetcher (6: 2 per broker) has a session with its leader."""
    c = ct.cluster
    ct.run(c.wait_until(lambda: all(
        f.session.session_id != 0 and f.partitions
        for b in c.brokers.values() for f in b.fetchers._fetchers.values()
    ) and sum(len(b.fetchers._fetchers) for b in c.brokers.values()) == 6))


def test_follower_sessions_carry_only_changed_partitions_and_keep_idle_ones_in_sync(
    cluster: ClusterThread,
) -> None:
    ct = cluster
    c = ct.cluster
    _create_topic(ct)
    # Every follower fetcher has a session with its leader.
    _wait_for_sessions(ct)
    topic = c.controller.image.topic_by_name(TOPIC)
    assert topic is not None
    topic_id: uuid.UUID = topic.topic_id
    written = (topic_id, WRITTEN)
    recorder = _Recorder()
    for broker in c.brokers.values():
        ct.call(recorder.install, broker.fetchers)

    leader = c.leader_of(TOPIC, WRITTEN)
    port = c.brokers[leader].server.port
    offsets = []
    for i in range(5):
        error, base = ct.run(_produce(port, _batch([b"v%d" % i, b"w%d" % i])))
        assert error == ErrorCode.none
        offsets.append(base)
    assert offsets == [0, 2, 4, 6, 8]

    # The high watermark reaches both followers.
    followers = [b for b in topic.partitions[WRITTEN].replicas if b != leader]
    ct.run(c.wait_until(lambda: all(
        c.brokers[b].replicas.partitions[(TOPIC, WRITTEN)].partition.high_watermark == 10
        for b in followers)))

    # Idle partitions stay in the ISR past replica.lag.time.max.ms.
    time.sleep(LAG_MS * 2.7 / 1000)
    for index in range(PARTITIONS):
        assert len(topic_now(c).partitions[index].isr) == 3, index
        hosted = c.brokers[c.leader_of(TOPIC, index)].replicas.partitions[(TOPIC, index)]
        assert len(hosted.partition.isr) == 3, index

    fetches = list(recorder.fetches)
    assert fetches, "no follower fetch was observed"
    assert all(f["error"] == ErrorCode.none for f in fetches)
    # Every request was incremental within an established session ...
    assert all(f["session"][0] != 0 and f["session"][1] > 0 for f in fetches)
    # ... naming and answering only the written partition, never an idle one.
    assert all(f["requested"] <= {written} and not f["forgotten"] for f in fetches)
    assert all(f["answered"] <= {written} for f in fetches)
    assert any(written in f["requested"] for f in fetches)
    assert any(written in f["answered"] for f in fetches)
    # Many empty round trips happened (idle partitions, long polls) while
    # the ISR held: the leaders served the cached partitions each time.
    assert sum(1 for f in fetches if not f["requested"] and not f["answered"]) >= 6
    # Between those, each leader's follower sessions skip their idle
    # partitions: every partition but the written one is parked by both
    # followers' sessions (the registry the leader unparks from).
    for index in range(PARTITIONS):
        if index == WRITTEN:
            continue
        parked = c.brokers[c.leader_of(TOPIC, index)].replicas._parked.get((TOPIC, index))
        assert parked is not None and sum(ref() is not None for ref in parked.values()) == 2, index


@pytest.fixture
def long_poll_cluster(tmp_path: object) -> Iterator[ClusterThread]:
    # Followers' fetches park for up to 20 s: a write that did not wake them
    # would take that long to be acknowledged.
    c = InProcessCluster(str(tmp_path), 3, {"min.insync.replicas": "2",
                                            "replica.fetch.wait.max.ms": "20000"})
    with ClusterThread(c) as ct:
        yield ct


@pytest.mark.parametrize("look_again_ms", [1_000, 600_000], ids=["default", "never"])
def test_a_write_to_an_idle_session_partition_wakes_the_parked_follower_fetch(
    long_poll_cluster: ClusterThread, look_again_ms: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "never": the sessions never unpark everything to look again
    # (`_VERIFY_PARKED_MS`), so only the wake-up on the write can serve it.
    monkeypatch.setattr(fetch_api, "_VERIFY_PARKED_MS", look_again_ms)
    ct = long_poll_cluster
    c = ct.cluster
    _create_topic(ct)
    # The first (full) fetches park too: one write per leader answers them,
    # and the followers' sessions start.
    first: dict[int, int] = {}
    for index in range(PARTITIONS):
        first.setdefault(c.leader_of(TOPIC, index), index)
    for leader, index in first.items():
        error, _ = ct.run(_produce(c.brokers[leader].server.port, _batch([b"first"]), index))
        assert error == ErrorCode.none
    _wait_for_sessions(ct)
    time.sleep(1.0)  # a few incremental fetches: every partition is idle and parked
    # One acks=all write to each never-written partition in turn, each
    # acknowledged long before the 20 s long poll would end on its own.
    written = [i for i in range(PARTITIONS) if i not in first.values()][::3]
    for index in written:
        port = c.brokers[c.leader_of(TOPIC, index)].server.port
        started = time.monotonic()
        error, base = ct.run(_produce(port, _batch([b"x%d" % index]), index))
        elapsed = time.monotonic() - started
        assert (error, base) == (ErrorCode.none, 0), index
        assert elapsed < 5.0, (index, elapsed)
    for index in written:
        topic = topic_now(c)
        for broker in topic.partitions[index].replicas:
            hosted = c.brokers[broker].replicas.partitions[(TOPIC, index)]
            assert hosted.partition.log_end_offset == 1, (index, broker)


def topic_now(c: InProcessCluster) -> Any:
    topic = c.controller.image.topic_by_name(TOPIC)
    assert topic is not None
    return topic
