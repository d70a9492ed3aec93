"""Client quotas in the Produce and Fetch handlers (`data_plane.api.produce`,
`data_plane.api.fetch`), called directly on a broker whose replica manager
runs on a fake clock, so the quota arithmetic is exact: the throttle time in
the answer, the connection mute, KIP-219's version split, the consumer's
max-bytes cap, the throttled fetch answer and fetch sessions around it."""

from __future__ import annotations

import asyncio
import datetime
import tempfile
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.fetch.v7 import request as f7
from kio.schema.fetch.v16 import request as f16
from kio.schema.produce.v5 import request as p5
from kio.schema.produce.v9 import request as p9
from kio.serial import entity_reader

from data_plane.api.build import response_class
from data_plane.api.common import BrokerApiContext
from data_plane.api.fetch import handle_fetch
from data_plane.api.produce import handle_produce
from data_plane.broker.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.testing.fake_broker_metadata import FakeMetadataCluster
from raftlog.net import NO_RESPONSE, EncodedBody, NoResponse, RequestContext
from raftlog.records import BatchBuilder
from raftlog.testing.clock import FakeClock

T = TypeVar("T")
TOPIC = "t"
BOUND = 1000.0  # bytes per second; the window is 11 x 1 s: 10 s minimum


class Broker:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.controller = FakeMetadataCluster()
        self.controller.register_broker(1, "127.0.0.1", 9)
        self.controller.create_topic(TOPIC, 1, 1)
        meta = self.controller.view(1)
        self.replicas = ReplicaManager(meta, log_dirs=[tempfile.mkdtemp()], clock=self.clock)

        async def start() -> None:
            self.replicas.start()
        self.run(start())
        self.api = BrokerApiContext(meta, self.replicas, "c")
        self.topic_id = self.controller.image.topic_ids[TOPIC]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 10))

    def set_quota(self, entity: Any, key: str, value: float | None) -> None:
        self.controller.set_client_quota(entity, key, value)
        self.run(asyncio.sleep(0))  # deliver the image

    def produce(self, client_id: str | None, records: bytes, *, version: int = 9,
                acks: int = 1) -> Any:
        request = produce_request(version, records, acks)
        return self.run(handle_produce(self.api, context(0, version, client_id), request))

    def fetch(self, client_id: str | None, offset: int, *, version: int = 16,
              replica_id: int = -1, session_id: int = 0, session_epoch: int = -1,
              named: bool = True, max_bytes: int = 1 << 20) -> Any:
        partitions = (f16.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset,  # type: ignore[arg-type]
            partition_max_bytes=1 << 20),) if named else ()  # type: ignore[arg-type]
        common: dict[str, Any] = {
            "max_wait": datetime.timedelta(0), "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": session_id, "session_epoch": session_epoch,
            "forgotten_topics_data": (),
        }
        if version == 16:
            request: Any = f16.FetchRequest(
                replica_state=f16.ReplicaState(replica_id=replica_id, replica_epoch=-1),  # type: ignore[arg-type]
                topics=(f16.FetchTopic(topic_id=self.topic_id, partitions=partitions),)
                if named else (),
                **common,
            )
        else:
            request = f7.FetchRequest(
                replica_id=replica_id,  # type: ignore[arg-type]
                topics=(f7.FetchTopic(topic=TOPIC, partitions=(  # type: ignore[arg-type]
                    f7.FetchPartition(partition=0, fetch_offset=offset,  # type: ignore[arg-type]
                                      log_start_offset=-1,  # type: ignore[arg-type]
                                      partition_max_bytes=1 << 20),)),),  # type: ignore[arg-type]
                **common,
            )
        return self.run(handle_fetch(self.api, context(1, version, client_id), request)), request

    def close(self) -> None:
        self.run(self.replicas.close())
        self.loop.close()


def context(api_key: int, version: int, client_id: str | None) -> RequestContext:
    return RequestContext(api_key, version, 1, client_id, None, "PLAINTEXT")


def decode(body: EncodedBody, request: Any) -> Any:
    response, size = entity_reader(response_class(request))(body.data, 0)
    assert size == len(body.data)
    return response


def throttle_ms(response: Any) -> int:
    return int(response.throttle_time.total_seconds() * 1000)


def batch(size: int) -> bytes:
    """A record batch of about ``size`` bytes."""
    builder = BatchBuilder()
    builder.append(b"x" * max(size - 80, 1), timestamp_ms=1_700_000_000_000)
    return builder.build()


@pytest.fixture
def broker() -> Iterator[Broker]:
    b = Broker()
    yield b
    b.close()


def produce_request(version: int, records: bytes, acks: int = 1) -> Any:
    mod: Any = p9 if version == 9 else p5
    return mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
        topic_data=(mod.TopicProduceData(name=TOPIC, partition_data=(
            mod.PartitionProduceData(index=0, records=records),),),),
    )


# ---- produce ----------------------------------------------------------------------


def test_without_quotas_produce_does_no_quota_work(broker: Broker) -> None:
    body = broker.produce("app", batch(500))
    assert isinstance(body, EncodedBody) and body.throttle_ms == 0
    assert broker.produce("app", batch(500), acks=0) is NO_RESPONSE
    quotas = broker.replicas.client_quotas
    assert not quotas.produce.enabled and quotas.produce.sensors == {}


def test_a_producer_over_its_quota_is_answered_with_the_throttle_time_and_muted(
    broker: Broker,
) -> None:
    broker.set_quota((("client-id", "app"),), PRODUCER_BYTE_RATE, BOUND)
    records = batch(6000)
    request = produce_request(9, records)
    first = broker.produce("app", records)
    assert first.throttle_ms == 0 and throttle_ms(decode(first, request)) == 0  # 600 B/s
    second = broker.produce("app", records)
    # 2 x len(records) bytes over the 10 s minimum window, against 1000 B/s.
    expected = round((2 * len(records) / 10 - BOUND) / BOUND * 10_000)
    assert second.throttle_ms == expected > 0
    assert throttle_ms(decode(second, request)) == expected
    assert not second.delay_response  # v9: the client backs off itself (KIP-219)
    part = decode(second, request).responses[0].partition_responses[0]
    assert int(part.error_code) == 0 and int(part.base_offset) == 1  # appended all the same
    # Another client id has no quota: never throttled, nothing measured.
    assert broker.produce("other", records).throttle_ms == 0
    assert set(broker.replicas.client_quotas.produce.sensors) == {("", "app")}


def test_old_produce_versions_get_their_throttled_answer_delayed(broker: Broker) -> None:
    broker.set_quota((("client-id", None),), PRODUCER_BYTE_RATE, BOUND)
    records = batch(12_000)
    body = broker.produce("old", records, version=5)
    assert body.throttle_ms > 0 and body.delay_response
    assert throttle_ms(decode(body, produce_request(5, records))) == body.throttle_ms


def test_an_acks_0_producer_over_its_quota_is_only_muted(broker: Broker) -> None:
    broker.set_quota((("user", "ANONYMOUS"),), PRODUCER_BYTE_RATE, BOUND)
    assert broker.produce(None, batch(5000), acks=0) is NO_RESPONSE
    muted = broker.produce(None, batch(8000), acks=0)
    assert isinstance(muted, NoResponse) and muted.throttle_ms > 0
    # A user quota: one sensor for the user, whatever the client id.
    assert set(broker.replicas.client_quotas.produce.sensors) == {("ANONYMOUS", "")}


# ---- fetch ------------------------------------------------------------------------


def fill(broker: Broker, batches: int, size: int) -> int:
    for _ in range(batches):
        assert broker.produce("writer", batch(size)).throttle_ms == 0
    return batches


def records_of(response: Any) -> bytes:
    return b"".join(bytes(p.records or b"") for t in response.responses for p in t.partitions)


def test_a_consumer_fetch_is_capped_then_answered_empty_once_it_would_go_over(
    broker: Broker,
) -> None:
    fill(broker, 8, 3000)
    broker.set_quota((("client-id", "reader"),), CONSUMER_BYTE_RATE, BOUND)
    sensor_key = ("", "reader")
    # The cap: bound * (11 - 1) windows * 1 s = 10 000 bytes (whole batches).
    body, request = broker.fetch("reader", 0)
    first = decode(body, request)
    assert body.throttle_ms == 0
    got = len(records_of(first))
    assert 6000 <= got <= 10_000  # 3 batches fit, a 4th would not
    # The next three batches would take it over: Kafka's throttled answer
    # is empty, and the bytes it would have carried are taken back.
    body, request = broker.fetch("reader", 3)
    second = decode(body, request)
    assert second.responses == () and int(second.error_code) == 0
    assert body.throttle_ms == round((2 * got / 10 - BOUND) / BOUND * 10_000) > 0
    assert throttle_ms(second) == body.throttle_ms and not body.delay_response
    sensor = broker.replicas.client_quotas.fetch.sensors[sensor_key]
    assert sensor.bytes.total(broker.clock.monotonic_ms()) == got


def test_the_first_answer_of_an_empty_window_goes_out_whole_even_if_too_big(
    broker: Broker,
) -> None:
    """One batch always goes whole (KIP-74): a consumer whose quota allows
    less than a batch per window still moves, one throttled batch at a time."""
    fill(broker, 4, 3000)
    broker.set_quota((("client-id", "reader"),), CONSUMER_BYTE_RATE, 100.0)  # 1 000 B/window
    body, request = broker.fetch("reader", 0)
    first = decode(body, request)
    assert first_offset(first) == 0 and len(records_of(first)) > 1000
    assert body.throttle_ms > 0
    # Over its bound now: the next fetch is answered empty at once.
    body, request = broker.fetch("reader", 1)
    assert decode(body, request).responses == () and body.throttle_ms > 0
    # Once the window has emptied, the next batch goes, again throttled.
    broker.clock.advance(11_000)
    body, request = broker.fetch("reader", 1)
    assert first_offset(decode(body, request)) == 1 and body.throttle_ms > 0


def test_a_consumer_already_over_its_quota_gets_an_empty_answer_at_once(broker: Broker) -> None:
    fill(broker, 6, 3000)
    broker.set_quota((("client-id", "reader"),), CONSUMER_BYTE_RATE, 100.0)
    body, _ = broker.fetch("reader", 0)  # the first answer of the window: whole, throttled
    assert body.throttle_ms > 0
    sensor = broker.replicas.client_quotas.fetch.sensors[("", "reader")]
    recorded = sensor.bytes.total(broker.clock.monotonic_ms())
    body, request = broker.fetch("reader", 1, version=7)
    answer = decode(body, request)
    assert body.throttle_ms > 0 and throttle_ms(answer) == body.throttle_ms
    assert answer.responses == () and int(answer.error_code) == 0
    assert body.delay_response  # Fetch v7: before KIP-219, Kafka holds the answer
    assert sensor.bytes.total(broker.clock.monotonic_ms()) == recorded  # nothing recorded


def test_the_throttled_answer_leaves_the_incremental_session_able_to_deliver(
    broker: Broker,
) -> None:
    """The throttled answer to an incremental fetch sends nothing; the next
    fetch, which names nothing (the client asks again from where it was),
    gets the records it would have carried."""
    fill(broker, 6, 3000)
    broker.set_quota((("client-id", "reader"),), CONSUMER_BYTE_RATE, BOUND)
    sessions = broker.api.fetch_sessions
    # A new session (epoch 0): two batches, within the bound.
    body, request = broker.fetch("reader", 0, session_epoch=0, max_bytes=6500)
    created = decode(body, request)
    session_id = int(created.session_id)
    assert session_id != 0 and body.throttle_ms == 0
    assert first_offset(created) == 0
    # Epoch 1 moves to offset 2: two more batches would take it over.
    body, request = broker.fetch("reader", 2, session_id=session_id, session_epoch=1,
                                 max_bytes=6500)
    throttled = decode(body, request)
    assert body.throttle_ms > 0 and throttled.responses == ()
    assert int(throttled.session_id) == session_id
    session = sessions.get(session_id)
    assert session is not None and session.epoch == 2  # the context moved it on
    # Once the samples are gone, epoch 2 (naming nothing) gets offset 2 on.
    broker.clock.advance(11_000)
    body, request = broker.fetch("reader", 2, session_id=session_id, session_epoch=2,
                                 named=False, max_bytes=6500)
    later = decode(body, request)
    assert body.throttle_ms == 0 and int(later.session_id) == session_id
    assert first_offset(later) == 2


def first_offset(response: Any) -> int:
    """The base offset of the first batch in the answer."""
    records = records_of(response)
    assert records, "no records in the answer"
    return int.from_bytes(records[:8], "big")


def test_a_session_created_by_a_throttled_fetch_is_dropped(broker: Broker) -> None:
    fill(broker, 6, 3000)
    broker.set_quota((("client-id", None),), CONSUMER_BYTE_RATE, BOUND)
    broker.fetch("reader", 0)  # three batches, within the bound
    sessions = broker.api.fetch_sessions
    before = len(sessions)
    body, request = broker.fetch("reader", 3, session_epoch=0)  # three more would go over
    answer = decode(body, request)
    assert body.throttle_ms > 0 and int(answer.session_id) == 0 and answer.responses == ()
    assert len(sessions) == before  # Kafka creates none for a throttled full fetch


def test_follower_fetches_are_never_client_throttled(broker: Broker) -> None:
    fill(broker, 6, 3000)
    broker.set_quota((("client-id", None),), CONSUMER_BYTE_RATE, 1.0)
    for offset in (0, 2, 4):
        body, request = broker.fetch("broker-2", offset, replica_id=2)
        assert body.throttle_ms == 0 and throttle_ms(decode(body, request)) == 0
    assert broker.replicas.client_quotas.fetch.sensors == {}
