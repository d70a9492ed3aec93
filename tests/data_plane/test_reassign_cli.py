"""`raftlog reassign-partitions` input: Kafka's reassignment and
topics-to-move JSON, and the readable error for each malformed part; the
replication throttles (KIP-73) that ``--throttle`` sets and ``--verify``
removes, and the order it does so in."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.incremental_alter_configs.v1 import response as iac_resp
from kio.static.primitive import i8

from data_plane import reassign_cli
from data_plane.admin_cli import CliError, ConfigResource
from data_plane.reassign_cli import (
    Assignment,
    PartitionMove,
    ThrottlePlan,
    clear_throttle_configs,
    parse_reassignment,
    parse_replica_log_dirs,
    parse_topics_to_move,
    partition_moves,
    register,
    throttle_configs,
    throttle_plan,
)
from raftlog.net.errors import ErrorCode


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
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["d"]}]},
     'log_dirs must be absolute paths or "any"'),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["/d"]}]},
     "log_dirs must list a directory"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},
                     {"topic": "a", "partition": 0, "replicas": [2]}]}, "a-0 appears twice"),
])
def test_malformed_reassignment_json_is_named(document: object, message: str) -> None:
    with pytest.raises(CliError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_reassignment(document)


def test_log_dirs_name_the_replicas_to_move() -> None:
    document = {"partitions": [
        {"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/data/2"]},
        {"topic": "b", "partition": 3, "replicas": [3]}]}
    assert parse_reassignment(document) == {("a", 0): (1, 2), ("b", 3): (3,)}
    assert parse_replica_log_dirs(document) == {("a", 0, 2): "/data/2"}


def test_malformed_topics_to_move() -> None:
    with pytest.raises(CliError, match="topics-to-move file is"):
        parse_topics_to_move({"partitions": []})
    with pytest.raises(CliError, match=r"topics\[1\]: topic must be"):
        parse_topics_to_move({"topics": [{"topic": "a"}, {"name": "b"}]})
    with pytest.raises(CliError, match="names no topics"):
        parse_topics_to_move({"topics": []})


# --- throttles --------------------------------------------------------------------------


def test_leaders_are_the_current_replicas_and_followers_the_added_ones() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (2, 3), ("u", 0): (3,)}
    target = {("t", 0): (2, 3), ("t", 1): (3, 2), ("u", 0): (1, 2)}
    moves = partition_moves(current, target, {})
    # t-1 only changes its preferred leader: nothing to copy, nothing throttled.
    assert moves == {("t", 0): PartitionMove(frozenset({1, 2}), frozenset({3})),
                     ("u", 0): PartitionMove(frozenset({3}), frozenset({1, 2}))}
    assert throttle_plan(moves) == ThrottlePlan(
        leader={"t": "0:1,0:2", "u": "0:3"}, follower={"t": "0:3", "u": "0:1,0:2"},
        brokers=(1, 2, 3))


def test_throttled_replicas_sort_by_partition_then_broker_as_numbers() -> None:
    current: Assignment = {("t", 10): (11,), ("t", 2): (3, 1)}
    target: Assignment = {("t", 10): (2,), ("t", 2): (9, 3, 1)}
    plan = throttle_plan(partition_moves(current, target, {}))
    assert plan.leader == {"t": "2:1,2:3,10:11"}
    assert plan.follower == {"t": "2:9,10:2"}
    assert plan.brokers == (1, 2, 3, 9, 11)


def test_reassignments_in_progress_keep_their_throttles_and_original_sources() -> None:
    """--additional: a topic's lists are SET whole, so they must list the
    partitions already moving too; a retargeted partition copies from the
    replicas it had before its first reassignment."""
    current = {("t", 0): (1, 2, 3)}  # Metadata: 3 is being added
    ongoing = {("t", 0): ((1, 2, 3), (3,)), ("t", 1): ((2, 4), (4,))}
    moves = partition_moves(current, {("t", 0): (1, 4)}, ongoing)
    assert moves == {("t", 0): PartitionMove(frozenset({1, 2}), frozenset({4})),
                     ("t", 1): PartitionMove(frozenset({2}), frozenset({4}))}
    assert throttle_plan(moves).leader == {"t": "0:1,0:2,1:2"}
    assert throttle_plan(moves).follower == {"t": "0:4,1:4"}


def test_a_target_partition_without_replicas_is_misuse() -> None:
    with pytest.raises(ValueError, match="no current replicas for t-0"):
        partition_moves({}, {("t", 0): (1,)}, {})
    with pytest.raises(ValueError, match="both a source and a destination"):
        PartitionMove(frozenset({1}), frozenset({1}))


assignments = st.dictionaries(
    st.tuples(st.sampled_from("ab"), st.integers(0, 12)),
    st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True).map(tuple),
    min_size=1, max_size=6)


@given(assignments, st.data())
def test_throttles_match_a_naive_reading_of_the_rule(current: Assignment, data: Any) -> None:
    target = {tp: data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True)
                            .map(tuple)) for tp in current}
    plan = throttle_plan(partition_moves(current, target, {}))
    moving = [tp for tp in target if set(target[tp]) - set(current[tp])]
    leader = {f"{t}/{p}:{b}" for t, p in moving for b in current[(t, p)]}
    follower = {f"{t}/{p}:{b}" for t, p in moving for b in set(target[(t, p)]) - set(current[(t, p)])}
    assert {f"{t}/{e}" for t, v in plan.leader.items() for e in v.split(",")} == leader
    assert {f"{t}/{e}" for t, v in plan.follower.items() for e in v.split(",")} == follower
    assert set(plan.brokers) == {b for tp in moving for b in (*current[tp], *target[tp])}
    assert set(plan.leader) == set(plan.follower) == {t for t, _ in moving}


def test_the_configs_set_and_cleared() -> None:
    plan = ThrottlePlan(leader={"t": "0:1"}, follower={"t": "0:2"}, brokers=(1, 2))
    assert throttle_configs(plan, 1000) == [
        (2, "t", [("leader.replication.throttled.replicas", 0, "0:1"),
                  ("follower.replication.throttled.replicas", 0, "0:2")]),
        (4, "1", [("leader.replication.throttled.rate", 0, "1000"),
                  ("follower.replication.throttled.rate", 0, "1000")]),
        (4, "2", [("leader.replication.throttled.rate", 0, "1000"),
                  ("follower.replication.throttled.rate", 0, "1000")])]
    assert clear_throttle_configs(["t"], [3]) == [
        (4, "3", [("leader.replication.throttled.rate", 1, None),
                  ("follower.replication.throttled.rate", 1, None),
                  ("replica.alter.log.dirs.io.max.bytes.per.second", 1, None)]),
        (2, "t", [("leader.replication.throttled.replicas", 1, None),
                  ("follower.replication.throttled.replicas", 1, None)])]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["reassign-partitions", "--bootstrap-server", "localhost:1",
                              *argv])


@pytest.mark.parametrize(("argv", "message"), [
    (("--execute", "--throttle", "-2"), r"--throttle -2: give a rate in bytes/s \(>= 0\)"),
    (("--verify", "--throttle", "100"), "--throttle goes with --execute"),
    (("--execute", "--preserve-throttles"), "--preserve-throttles goes with --verify or --cancel"),
    (("--list", "--preserve-throttles"), "--preserve-throttles goes with"),
    (("--verify", "--replica-alter-log-dirs-throttle", "10"),
     "--replica-alter-log-dirs-throttle goes with --execute"),
    (("--execute", "--replica-alter-log-dirs-throttle", "-5"),
     r"--replica-alter-log-dirs-throttle -5: give a rate in bytes/s \(>= 0\)"),
])
def test_throttle_options_are_checked_before_anything_is_sent(
    argv: tuple[str, ...], message: str
) -> None:
    args = parse(*argv, "--reassignment-json-file", "/nonexistent.json")
    with pytest.raises(CliError, match=message):
        args.func(args)


def test_throttle_defaults_to_none() -> None:
    args = parse("--execute")
    assert args.throttle == reassign_cli.NO_THROTTLE == -1
    assert args.replica_alter_log_dirs_throttle == -1
    assert args.preserve_throttles is False


class FakeCluster:
    """Stands in for the module's requests: answers IncrementalAlterConfigs
    with ``refuse`` (resource name -> error) and records every call."""

    def __init__(self, refuse: dict[str, ErrorCode] | None = None) -> None:
        self.refuse = refuse or {}
        self.calls: list[tuple[str, Any]] = []

    async def alter_configs(
        self, admin: Any, resources: Sequence[ConfigResource], *, validate_only: bool = False
    ) -> list[iac_resp.AlterConfigsResourceResponse]:
        self.calls.append(("validate" if validate_only else "alter configs",
                           [name for _, name, _ in resources]))
        return [iac_resp.AlterConfigsResourceResponse(
            error_code=self.refuse.get(name, ErrorCode.none),
            error_message="bad value" if name in self.refuse else None,
            resource_type=i8(rtype), resource_name=name) for rtype, name, _ in resources]

    async def ongoing(self, admin: Any, partitions: Any) -> dict[Any, Any]:
        return {}

    async def current(self, admin: Any, topics: Sequence[str]) -> Assignment:
        return {("t", 0): (1,)}

    async def reassign(self, admin: Any, targets: Any, timeout_ms: int,
                       allow_rf_change: bool) -> list[tuple[str, int, int, str | None]]:
        self.calls.append(("reassign", dict(targets)))
        return [(t, p, ErrorCode.none, None) for t, p in targets]


def execute(monkeypatch: pytest.MonkeyPatch, fake: FakeCluster, throttle: int) -> int:
    monkeypatch.setattr(reassign_cli, "incremental_alter_configs", fake.alter_configs)
    monkeypatch.setattr(reassign_cli, "ongoing_reassignments", fake.ongoing)
    monkeypatch.setattr(reassign_cli, "_current", fake.current)
    monkeypatch.setattr(reassign_cli, "_alter", fake.reassign)
    args = parse("--execute", "--throttle", str(throttle))
    return asyncio.run(reassign_cli._execute(None, {("t", 0): (1, 2)}, args))  # type: ignore[arg-type]


def test_the_throttle_is_validated_then_set_before_the_reassignment_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeCluster()
    assert execute(monkeypatch, fake, 5000) == 0
    assert fake.calls == [("validate", ["t", "1", "2"]), ("alter configs", ["t", "1", "2"]),
                          ("reassign", {("t", 0): (1, 2)})]
    out = capsys.readouterr().out
    assert "--verify" in out and "The inter-broker throttle limit was set to 5000 B/s" in out


def test_a_refused_throttle_changes_nothing_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCluster(refuse={"2": ErrorCode.invalid_config})
    with pytest.raises(CliError, match="cannot set the replication throttles: broker 2: "
                       "INVALID_CONFIG: bad value \\(nothing was changed\\); the reassignment "
                       "was not started"):
        execute(monkeypatch, fake, 5000)
    assert fake.calls == [("validate", ["t", "1", "2"])]


def test_the_log_dir_throttle_is_set_on_the_moving_brokers_before_the_moves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeCluster()
    moved: list[Any] = []

    async def alter_log_dirs(admin: Any, moves: Any) -> dict[Any, Any]:
        fake.calls.append(("alter log dirs", sorted(moves)))
        moved.append(moves)
        return {}

    async def alter_configs(admin: Any, resources: Sequence[ConfigResource], *,
                            validate_only: bool = False) -> Any:
        fake.calls.append(("configs", [(name, ops) for _, name, ops in resources]))
        return await FakeCluster.alter_configs(fake, admin, resources,
                                               validate_only=validate_only)

    for name, value in (("ongoing_reassignments", fake.ongoing), ("_current", fake.current),
                        ("_alter", fake.reassign), ("_alter_log_dirs", alter_log_dirs),
                        ("incremental_alter_configs", alter_configs)):
        monkeypatch.setattr(reassign_cli, name, value)
    args = parse("--execute", "--replica-alter-log-dirs-throttle", "2048")
    log_dirs = {("t", 0, 1): "/data/b", ("t", 0, 3): "/data/c"}
    assert asyncio.run(reassign_cli._execute(
        None, {("t", 0): (1, 3)}, args, log_dirs)) == 0  # type: ignore[arg-type]
    rate = [("replica.alter.log.dirs.io.max.bytes.per.second", 0, "2048")]
    configs = [c for c in fake.calls if c[0] == "configs"]
    assert configs == [("configs", [("1", rate), ("3", rate)])] * 2  # validated, then set
    assert [c[0] for c in fake.calls if c[0] != "validate" and c[0] != "alter configs"] == [
        "configs", "configs", "alter log dirs", "reassign"]
    assert "The replica-alter-dir throttle limit was set to 2048 B/s" in capsys.readouterr().out


def test_without_throttle_no_config_is_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCluster()
    assert execute(monkeypatch, fake, -1) == 0
    assert fake.calls == [("reassign", {("t", 0): (1, 2)})]
