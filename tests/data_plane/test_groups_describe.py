"""kafka-consumer-groups.sh-style output."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from data_plane.groups.describe import describe_lines, list_lines, parse_assignment, state_line
from data_plane.groups.model import DescribedMember, GroupDescription, ListedGroup, TopicPartition
from data_plane.groups.testing import assignment


def test_describe_lines_with_lag_and_unowned_partition() -> None:
    desc = GroupDescription(
        "g",
        E.none,
        "Stable",
        "consumer",
        "range",
        (DescribedMember("m-1", None, "cli", "/10.0.0.1", b"", assignment({"t": [0]})),),
    )
    lines = describe_lines(
        desc, {TopicPartition("t", 0): 5, TopicPartition("t", 1): 7}, {TopicPartition("t", 0): 9}
    )
    assert [line.split() for line in lines] == [
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        ["g", "t", "0", "5", "9", "4", "m-1", "/10.0.0.1", "cli"],
        ["g", "t", "1", "7", "-", "-", "-", "-", "-"],
    ]
    assert lines[1].index("5") == lines[0].index("CURRENT-OFFSET")  # columns align


def test_state_and_list_lines() -> None:
    assert (
        state_line(GroupDescription("g", E.none, "Dead", "", ""))
        == "Consumer group 'g' does not exist."
    )
    assert "no active members" in state_line(GroupDescription("g", E.none, "Empty", "consumer", ""))
    assert list_lines([ListedGroup("b", "consumer", "Stable"), ListedGroup("a", "", "Empty")]) == [
        "a",
        "b",
    ]
    groups = [ListedGroup("b", "consumer", "Stable", group_type="consumer"),
              ListedGroup("a-long-name", "", "Empty")]
    assert list_lines(groups, show_type=True, show_state=True) == [
        "GROUP       TYPE     STATE",
        "a-long-name Classic  Empty",
        "b           Consumer Stable",
    ]
    assert list_lines(groups, show_state=True) == [
        "GROUP       STATE", "a-long-name Empty", "b           Stable"]


def test_parse_assignment_rejects_garbage() -> None:
    assert parse_assignment(b"\x00") is None
    assert parse_assignment(assignment({"x": [1, 2]})) == [
        TopicPartition("x", 1),
        TopicPartition("x", 2),
    ]
