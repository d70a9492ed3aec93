"""`raftlog reassign-partitions` input: Kafka's reassignment and
topics-to-move JSON, and the readable error for each malformed part."""

from __future__ import annotations

import pytest

from data_plane.admin_cli import CliError
from data_plane.reassign_cli import parse_reassignment, parse_topics_to_move


def test_kafka_reassignment_json() -> None:
    document = {"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "b", "partition": 4, "replicas": [1]}]}
    assert parse_reassignment(document) == {("a", 0): (2, 3), ("b", 4): (1,)}
    assert parse_topics_to_move({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}) == [
        "a", "b"]


@pytest.mark.parametrize(("document", "message"), [
    ([], "a reassignment file is"),
    ({"partitions": []}, "names no partitions"),
    ({"version": 2, "partitions": []}, "unsupported reassignment file version 2"),
    ({"partitions": [1]}, "partitions[0] is not an object"),
    ({"partitions": [{"partition": 0, "replicas": [1]}]}, "topic must be a non-empty string"),
    ({"partitions": [{"topic": "a", "partition": -1, "replicas": [1]}]},
     "partition must be an integer >= 0"),
    ({"partitions": [{"topic": "a", "partition": True, "replicas": [1]}]},
     "partition must be an integer >= 0"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": []}]},
     "replicas must be a non-empty list of broker ids"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": ["1"]}]},
     "replicas must be a non-empty list of broker ids"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]},
     "name a broker twice"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]},
     'log_dirs other than "any"'),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},
                     {"topic": "a", "partition": 0, "replicas": [2]}]}, "a-0 appears twice"),
])
def test_malformed_reassignment_json_is_named(document: object, message: str) -> None:
    with pytest.raises(CliError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_reassignment(document)


def test_malformed_topics_to_move() -> None:
    with pytest.raises(CliError, match="topics-to-move file is"):
        parse_topics_to_move({"partitions": []})
    with pytest.raises(CliError, match=r"topics\[1\]: topic must be"):
        parse_topics_to_move({"topics": [{"topic": "a"}, {"name": "b"}]})
    with pytest.raises(CliError, match="names no topics"):
        parse_topics_to_move({"topics": []})
