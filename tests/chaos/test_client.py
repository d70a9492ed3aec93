"""The chaos clients' own logic, with librdkafka's Consumer replaced by a fake."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError

import chaos.client as client
from chaos.client import ConfluentGroupPoller, Endpoint
from chaos.history import OpType


class FakeMessage:
    def __init__(self, partition: int, offset: int, value: bytes | None,
                 error: KafkaError | None = None) -> None:
        self._partition, self._offset, self._value, self._error = partition, offset, value, error

    def error(self) -> KafkaError | None:
        return self._error

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return None


class FakeConsumer:
    made: ClassVar[list[FakeConsumer]] = []
    # What each consumer's consume() calls return, in turn, by creation order.
    script: ClassVar[list[list[list[FakeMessage]]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.subscribed: list[str] = []
        self.closed = False
        self.batches = FakeConsumer.script[len(FakeConsumer.made)]
        FakeConsumer.made.append(self)

    def subscribe(self, topics: list[str]) -> None:
        self.subscribed = topics

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        return self.batches.pop(0) if self.batches else []

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_consumer(monkeypatch: pytest.MonkeyPatch) -> type[FakeConsumer]:
    FakeConsumer.made = []
    FakeConsumer.script = []
    monkeypatch.setattr(client, "Consumer", FakeConsumer)
    return FakeConsumer


def test_a_group_poller_replaces_a_consumer_that_hit_a_fatal_error(
    fake_consumer: type[FakeConsumer],
) -> None:
    fatal = KafkaError(KafkaError.GROUP_ID_NOT_FOUND, "ConsumerGroupHeartbeat fatal error",
                       fatal=True)
    fake_consumer.script = [
        [[FakeMessage(0, 7, b"70"), FakeMessage(-1, -1, None, fatal)]],
        [[FakeMessage(1, 3, b"31")]],
    ]
    poller = ConfluentGroupPoller(Endpoint("127.0.0.1:1"), "t", "g", "consumer")
    first = fake_consumer.made[0]

    # What was read before the error counts; the error is named.
    op, value = poller.poll()
    assert op is OpType.OK
    assert value == {"records": {"0": [[7, 70]]}, "fatal": str(fatal)}
    assert first.closed and poller.restarts == 1
    (_, replacement) = fake_consumer.made
    assert replacement.subscribed == ["t"]
    assert replacement.config == first.config
    assert replacement.config["group.protocol"] == "consumer"

    assert poller.poll() == (OpType.OK, {"records": {"1": [[3, 31]]}})
    assert poller.restarts == 1 and not replacement.closed


def test_a_non_fatal_error_keeps_the_consumer(fake_consumer: type[FakeConsumer]) -> None:
    transient = KafkaError(KafkaError._TRANSPORT, "broker down")
    fake_consumer.script = [[[FakeMessage(-1, -1, None, transient), FakeMessage(2, 0, b"5")]]]
    poller = ConfluentGroupPoller(Endpoint("127.0.0.1:1"), "t", "g", "classic")
    assert poller.poll() == (OpType.OK, {"records": {"2": [[0, 5]]}})
    assert poller.restarts == 0 and not fake_consumer.made[0].closed
