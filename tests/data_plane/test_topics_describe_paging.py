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
from data_plane.api.build import build, response_class
from data_plane.api.common import NO_THROTTLE
from raftlog.net.errors import ErrorCode, UnsupportedVersionError

DESCRIBE_TOPIC_PARTITIONS, METADATA, LIST_PARTITION_REASSIGNMENTS = 75, 3, 46


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
    assert any("\tElr: \tLastKnownElr: " in line for line in expected), expected
    old = _Node(broker, serves_describe_partitions=False)
    # The same facts; Metadata carries no ELR, shown N/A as kafka-topics.sh does.
    assert _describe(broker, old, None, 2) == [
        line.replace("\tElr: \tLastKnownElr: ", "\tElr: N/A\tLastKnownElr: N/A")
        for line in expected]
    assert [key for key, _ in old.asked] == [METADATA]


def test_the_page_size_must_be_positive() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=admin_cli._positive)
    assert parser.parse_args(["--n", "3"]).n == 3
    for bad in ("0", "-1", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--n", bad])


# --- kafka-topics.sh --describe's report options, --topic as a regex, --if-exists ---------


def _topics(broker: AclBroker, action: str, *flags: str, topic: str | None = None,
            **values: Any) -> tuple[int, list[str]]:
    """`raftlog topics ACTION` against ``broker``: (exit code, stdout lines)."""
    argv = [action, "--bootstrap-server", "n:1", *flags]
    if topic is not None:
        argv += ["--topic", topic]
    parser = argparse.ArgumentParser()
    admin_cli.register(parser.add_subparsers(dest="command"), "topics")
    args = parser.parse_args(["topics", *argv])
    for key, value in values.items():
        setattr(args, key, value)
    node = _Node(broker)
    printed: list[str] = []

    async def run() -> int:
        admin = admin_cli._Admin([("n", 1)], 5_000)
        admin._clients[("n", 1)] = node  # type: ignore[assignment]
        match action:
            case "describe":
                return await admin_cli._topics_describe(admin, args)
            case _:
                names = await admin_cli._matching_topics(admin, args, must_exist=False)
                printed.extend(names)
                return 0

    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = broker.run(run())
    return code, printed + out.getvalue().splitlines()


@pytest.fixture
def degraded() -> Iterator[AclBroker]:
    """Broker 3 fenced: every partition of "wide" (RF 3) is down to two in
    sync, the partition of "solo" (RF 1) that broker 3 held has no leader;
    "wide" has min.insync.replicas=2 of its own, "solo" 1."""
    b = AclBroker(brokers=3, authorizer=False)
    # No reassignments: the fake controller answers ListPartitionReassignments empty.
    b.answers[LIST_PARTITION_REASSIGNMENTS] = lambda request: build(
        response_class(request), {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "topics": []})
    b.create_topic("wide", 2, 3)
    b.create_topic("solo", 3, 1)
    b.cluster.set_topic_config("wide", "min.insync.replicas", "2")
    b.cluster.set_topic_config("solo", "min.insync.replicas", None)  # the default, 1
    b.cluster.fence_broker(3)
    b.settle()
    yield b
    b.close()


def _partitions(lines: list[str]) -> list[tuple[str, int]]:
    out = []
    for line in lines:
        fields = dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))
        out.append((fields["Topic"], int(fields["Partition"])))
    return out


def test_report_options_print_only_the_partitions_they_pick(degraded: AclBroker) -> None:
    image = degraded.cluster.image
    solo = image.topics[image.topic_ids["solo"]].partitions
    leaderless = [("solo", pid) for pid, reg in sorted(solo.items()) if reg.leader < 0]
    assert len(leaderless) == 1
    wide = [("wide", 0), ("wide", 1)]

    code, lines = _topics(degraded, "describe", "--under-replicated-partitions")
    assert code == 0 and _partitions(lines) == wide  # no topic lines
    assert _partitions(_topics(degraded, "describe", "--unavailable-partitions")[1]) == leaderless
    # Under min ISR: no leader, or fewer in sync than min.insync.replicas.
    assert _partitions(_topics(degraded, "describe", "--under-min-isr-partitions")[1]) \
        == leaderless
    assert _partitions(_topics(degraded, "describe", "--at-min-isr-partitions")[1]) == sorted(
        wide + [("solo", pid) for pid, reg in solo.items() if len(reg.isr) == 1])
    # Two options: a partition either picks.
    both = _topics(degraded, "describe", "--under-replicated-partitions",
                   "--unavailable-partitions")[1]
    assert _partitions(both) == sorted(leaderless + wide)


def test_topics_with_overrides_prints_their_topic_lines_only(degraded: AclBroker) -> None:
    code, lines = _topics(degraded, "describe", "--topics-with-overrides")
    assert code == 0 and len(lines) == 1
    assert lines[0].startswith("Topic: wide\t") and lines[0].endswith(
        "Configs: min.insync.replicas=2")


def test_topic_is_a_regex_over_whole_names_and_if_exists_quiets_a_miss(
        degraded: AclBroker) -> None:
    degraded.create_topic("wider", 1, 1)
    assert _topics(degraded, "list", topic="wide")[1] == ["wide"]  # whole-name match
    assert _topics(degraded, "list", topic="wide.*")[1] == ["wide", "wider"]
    assert _topics(degraded, "list", topic="solo,wider")[1] == ["solo", "wider"]
    code, lines = _topics(degraded, "describe", topic="wid.*")
    assert code == 0
    assert [line.split("\t")[0] for line in lines if line.startswith("Topic: ")] == [
        "Topic: wide", "Topic: wider"]
    with pytest.raises(admin_cli.CliError, match="Topic 'nope' does not exist as expected"):
        _topics(degraded, "describe", topic="nope")
    assert _topics(degraded, "describe", "--if-exists", topic="nope") == (0, [])
    assert _topics(degraded, "list", topic="nope") == (0, [])
    with pytest.raises(admin_cli.CliError, match="not a valid regular expression"):
        _topics(degraded, "describe", topic="(")


def test_exclude_internal_leaves_out_the_internal_topics(degraded: AclBroker) -> None:
    degraded.create_topic("__consumer_offsets", 1, 1)
    assert "__consumer_offsets" in _topics(degraded, "list")[1]
    assert _topics(degraded, "list", "--exclude-internal")[1] == ["solo", "wide"]
