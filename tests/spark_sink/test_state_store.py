"""The sink's state store retries group-coordinator errors until its timeout.

librdkafka retries a failed OffsetFetch / OffsetCommit only twice, then
``committed`` / ``commit`` raise (NOT_COORDINATOR while the state group's
offsets partition changes leader, for one). `StateStore` asks again until
``timeout_s``, as a Kafka consumer does; other errors are raised at once.
A fake consumer stands in for librdkafka, so the errors come on cue.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from spark_sink.kafka_io import WriteConfig
from spark_sink.staged import SinkState, StateStore


class FakeConsumer:
    """Raises the queued errors, one per call, then answers."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.committed_offset: TopicPartition | None = None

    def _fail_next(self) -> None:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        assert timeout > 0
        self._fail_next()
        if self.committed_offset is None:
            return [TopicPartition(partitions[0].topic, 0, -1001)]
        return [self.committed_offset]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        assert not asynchronous
        self._fail_next()
        self.committed_offset = offsets[0]
        return offsets


def store_with(consumer: FakeConsumer, timeout_s: float = 10.0) -> StateStore:
    store = StateStore(WriteConfig("127.0.0.1:1", "out", timeout_s=timeout_s), "sink-1")
    store._consumer = cast(Any, consumer)
    return store


def test_coordinator_errors_are_retried_until_the_state_reads_and_writes() -> None:
    consumer = FakeConsumer([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    store = store_with(consumer)
    pending = (("raftlog-sink.sink-1.out.0", 7, 1),)
    store.write(SinkState(3, pending))  # two failures, then the commit
    assert consumer.calls == 3
    consumer.errors = [KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT]
    assert store.read() == SinkState(3, pending)  # two more failures, then the read
    assert consumer.calls == 6


def test_other_errors_are_raised_at_once() -> None:
    consumer = FakeConsumer([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException) as raised:
        store_with(consumer).read()
    assert raised.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert consumer.calls == 1


def test_retries_stop_at_the_timeout_with_the_last_error() -> None:
    consumer = FakeConsumer([KafkaError.NOT_COORDINATOR] * 1000)
    with pytest.raises(KafkaException) as raised:
        store_with(consumer, timeout_s=0.3).write(SinkState(1))
    assert raised.value.args[0].code() == KafkaError.NOT_COORDINATOR
    assert 2 <= consumer.calls < 20  # backed off, not spun
