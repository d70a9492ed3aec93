"""kafka-consumer-groups.sh-style output."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from data_plane.groups.describe import (
    MemberRow,
    describe_lines,
    group_state_lines,
    list_lines,
    member_lines,
    parse_assignment,
    state_line,
)
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


def test_member_and_state_lines() -> None:
    rows = [MemberRow("m2", None, "/h", "c2", (TopicPartition("t", 1),), target=()),
            MemberRow("m1", "i1", "/h", "c1", (TopicPartition("t", 0), TopicPartition("u", 2)),
                      target=(TopicPartition("t", 0), TopicPartition("t", 1)))]
    assert member_lines("g", rows) == [
        "GROUP CONSUMER-ID GROUP-INSTANCE-ID HOST CLIENT-ID #PARTITIONS",
        "g     m1          i1                /h   c1        2",
        "g     m2          -                 /h   c2        1",
    ]
    assert member_lines("g", rows, verbose=True)[1:] == [
        "g     m1          i1                /h   c1        2           t(0),u(2)  t(0,1)",
        "g     m2          -                 /h   c2        1           t(1)       -",
    ]
    classic = [MemberRow("m", None, "/h", "c", ())]
    assert member_lines("g", classic, verbose=True)[0].endswith("#PARTITIONS ASSIGNMENT")
    assert group_state_lines("g", "127.0.0.1:9092 (1)", "uniform", "Stable", 2) == [
        "GROUP COORDINATOR (ID)   ASSIGNMENT-STRATEGY STATE  #MEMBERS",
        "g     127.0.0.1:9092 (1) uniform             Stable 2",
    ]


def test_kip848_epochs_in_the_state_and_member_lines() -> None:
    assert group_state_lines("g", "h:1 (1)", "range", "Reconciling", 2, (5, 4)) == [
        "GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE       GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS",
        "g     h:1 (1)          range               Reconciling 5           4                2",
    ]
    rows = [MemberRow("m", None, "/h", "c", (TopicPartition("t", 0),),
                      target=(TopicPartition("t", 0),), member_epoch=4)]
    assert member_lines("g", rows, verbose=True) == [
        "GROUP CONSUMER-ID GROUP-INSTANCE-ID HOST CLIENT-ID #PARTITIONS MEMBER-EPOCH ASSIGNMENT "
        "TARGET-ASSIGNMENT",
        "g     m           -                 /h   c         1           4            t(0)       t(0)",
    ]
