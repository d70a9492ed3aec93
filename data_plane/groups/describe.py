"""Text for ``raftlog groups list|describe GROUP``, in kafka-consumer-groups.sh's layout.

Pure formatting: the CLI gathers a ``GroupDescription`` (DescribeGroups),
the committed offsets (OffsetFetch) and log end offsets (ListOffsets latest)
and prints what this returns. Like the Kafka tool, a partition with a
committed offset but no owner shows "-" for the consumer columns, and a
partition owned but never committed shows "-" for CURRENT-OFFSET and LAG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .consumer_protocol import MalformedConsumerProtocolError, decode_assignment
from .model import GroupDescription, ListedGroup, TopicPartition

HEADER = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)



def parse_assignment(data: bytes) -> list[TopicPartition] | None:
    """Partitions of a ConsumerProtocolAssignment (any version); None if the
    bytes do not parse (e.g. a non-consumer protocol)."""
    try:
        partitions, _ = decode_assignment(data)
    except MalformedConsumerProtocolError:
        return None
    return [TopicPartition(topic, p) for topic, ps in partitions for p in ps]


def describe_lines(
    description: GroupDescription,
    committed: Mapping[TopicPartition, int],
    log_end_offsets: Mapping[TopicPartition, int],
) -> list[str]:
    """The header and one line per partition, columns padded to align.

    Partitions are those assigned to a member or with a committed offset,
    sorted by topic and partition. LAG = LOG-END-OFFSET - CURRENT-OFFSET when
    both are known.
    """
    owners: dict[TopicPartition, tuple[str, str, str]] = {}
    for m in description.members:
        for tp in parse_assignment(m.assignment) or []:
            owners[tp] = (m.member_id, m.client_host, m.client_id)
    rows: list[tuple[str, ...]] = [HEADER]
    for tp in sorted(set(owners) | set(committed)):
        current = committed.get(tp)
        end = log_end_offsets.get(tp)
        lag = end - current if current is not None and end is not None else None
        owner = owners.get(tp, ("-", "-", "-"))
        rows.append(
            (
                description.group_id,
                tp.topic,
                str(tp.partition),
                _or_dash(current),
                _or_dash(end),
                _or_dash(lag),
                *owner,
            )
        )
    return _align(rows)


def state_line(description: GroupDescription) -> str:
    """What kafka-consumer-groups.sh prints above the table when a group has no members."""
    if description.state == "Dead":
        return f"Consumer group '{description.group_id}' does not exist."
    if not description.members:
        return f"Consumer group '{description.group_id}' has no active members."
    return f"Consumer group '{description.group_id}' is {description.state}."


def list_lines(groups: Iterable[ListedGroup], *, show_type: bool = False,
               show_state: bool = False) -> list[str]:
    """``--list``: one group id per line, sorted; with ``--type`` and/or
    ``--state``, a table with those columns (Kafka 4's tool)."""
    ordered = sorted(groups, key=lambda g: g.group_id)
    if not show_type and not show_state:
        return [g.group_id for g in ordered]
    header = ("GROUP", *(("TYPE",) if show_type else ()), *(("STATE",) if show_state else ()))
    rows: list[tuple[str, ...]] = [header]
    for g in ordered:
        rows.append((g.group_id, *((g.group_type.title(),) if show_type else ()),
                     *((g.state,) if show_state else ())))
    return _align(rows)


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One member for ``--describe --members``: its partitions now and, in a
    KIP-848 group, the target the coordinator is moving it to (None: classic)."""

    member_id: str
    group_instance_id: str | None
    host: str
    client_id: str
    assignment: tuple[TopicPartition, ...]
    target: tuple[TopicPartition, ...] | None = None
    member_epoch: int | None = None


def member_lines(group_id: str, members: Iterable[MemberRow], *, verbose: bool = False) -> list[str]:
    """``--describe --members [--verbose]``: one line per member, its
    partition count, and with ``verbose`` the partitions themselves (and a
    KIP-848 member's target assignment)."""
    members = list(members)
    targets = verbose and any(m.target is not None for m in members)
    epochs = verbose and any(m.member_epoch is not None for m in members)
    header = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
              *(("MEMBER-EPOCH",) if epochs else ()),
              *(("ASSIGNMENT",) if verbose else ()), *(("TARGET-ASSIGNMENT",) if targets else ()))
    rows: list[tuple[str, ...]] = [header]
    for m in sorted(members, key=lambda m: m.member_id):
        rows.append((group_id, m.member_id, m.group_instance_id or "-", m.host, m.client_id,
                     str(len(m.assignment)),
                     *((_or_dash(m.member_epoch),) if epochs else ()),
                     *((_partitions_text(m.assignment),) if verbose else ()),
                     *((_partitions_text(m.target or ()),) if targets else ())))
    return _align(rows)


def group_state_lines(group_id: str, coordinator: str, assignor: str, state: str,
                      members: int, epochs: tuple[int, int] | None = None) -> list[str]:
    """``--describe --state``: the coordinator, assignor, state and member
    count; ``epochs`` (a KIP-848 group's group and assignment epochs, shown
    with ``--verbose``) adds two columns."""
    header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
              *(("GROUP-EPOCH", "ASSIGNMENT-EPOCH") if epochs else ()), "#MEMBERS")
    row = (group_id, coordinator, assignor or "-", state,
           *((str(epochs[0]), str(epochs[1])) if epochs else ()), str(members))
    return _align([header, row])


def _partitions_text(partitions: Iterable[TopicPartition]) -> str:
    """``topic(0,1),other(3)`` as Kafka's tool prints an assignment; "-" for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "-"
    return ",".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items()))


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _align(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        " ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
