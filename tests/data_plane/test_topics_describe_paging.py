"""`raftlog topics describe` pages with DescribeTopicPartitions (Kafka's
admin client from 3.8) and joins each topic's pages; a node that does not
serve that API (a controller, an older broker) is asked Metadata instead.
The nodes are fake connections answered by a real broker's handler table."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pytest
from acl_harness import AclBroker

from data_plane import admin_cli
from raftlog.net.errors import UnsupportedVersionError

DESCRIBE_TOPIC_PARTITIONS, METADATA = 75, 3


class _Node:
    """Answers as ``broker`` does, and records what it was asked."""

    def __init__(self, broker: AclBroker, *, serves_describe_partitions: bool = True) -> None:
        self.broker = broker
        self.serves = serves_describe_partitions
        self.asked: list[tuple[int, Any]] = []

    async def send(self, request: Any, version: int) -> Any:
        key = int(request.__api_key__)
        if key == DESCRIBE_TOPIC_PARTITIONS and not self.serves:
            raise UnsupportedVersionError(key, version, "n:1")
        self.asked.append((key, getattr(request, "cursor", None)))
        return await self.broker.answer(key, request, user="admin")

    async def close(self) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[AclBroker]:
    b = AclBroker(brokers=3, authorizer=False)
    b.create_topic("wide", 5, 3)
    b.create_topic("narrow", 1, 1)
    yield b
    b.close()


def _describe(broker: AclBroker, node: _Node, topic: str | None, page: int) -> list[str]:
    async def run() -> list[str]:
        admin = admin_cli._Admin([("n", 1)], 5_000)
        admin._clients[("n", 1)] = node  # type: ignore[assignment]
        topics = await admin_cli._described_topics(admin, [topic] if topic else None, page)
        return [line for t in sorted(topics, key=lambda t: str(t.name))
                for line in admin_cli.format_topic(t)]
    return broker.run(run())


def test_pages_are_joined_into_the_lines_one_answer_gives(broker: AclBroker) -> None:
    whole = _Node(broker)
    expected = _describe(broker, whole, None, 2000)
    assert [key for key, _ in whole.asked] == [DESCRIBE_TOPIC_PARTITIONS]
    assert sum("\tPartition: " in line for line in expected) == 6
    assert expected[0].startswith("Topic: narrow\t")
    paged = _Node(broker)
    assert _describe(broker, paged, None, 2) == expected
    # narrow0 wide0 | wide1 wide2 | wide3 wide4: three pages, each from the
    # last one's cursor.
    cursors = [None if c is None else (str(c.topic_name), int(c.partition_index))
               for _, c in paged.asked]
    assert cursors == [None, ("wide", 1), ("wide", 3)]
    one = _Node(broker)
    assert _describe(broker, one, "wide", 1) == expected[2:]
    assert len(one.asked) == 5


def test_a_node_without_describe_topic_partitions_is_asked_metadata(broker: AclBroker) -> None:
    expected = _describe(broker, _Node(broker), None, 2000)
    old = _Node(broker, serves_describe_partitions=False)
    assert _describe(broker, old, None, 2) == expected
    assert [key for key, _ in old.asked] == [METADATA]


def test_the_page_size_must_be_positive() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=admin_cli._positive)
    assert parser.parse_args(["--n", "3"]).n == 3
    for bad in ("0", "-1", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--n", bad])
