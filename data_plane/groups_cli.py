"""``raftlog groups list|describe GROUP --bootstrap-server H:P``:
kafka-consumer-groups.sh ``--list`` and ``--describe``, registered by
`data_plane.admin_cli`.

The shell gathers, over a real Kafka client (confluent-kafka's admin
client, i.e. librdkafka: ListGroups, DescribeGroups and OffsetFetch through
FindCoordinator) plus a consumer's ListOffsets for the log end offsets, and
prints what `data_plane.groups.describe` formats: per partition the
committed (current) offset, the log end offset, the lag and the owning
member. Exit 1 with a message if the cluster cannot answer in time.
"""

from __future__ import annotations

import argparse
import struct
import uuid
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient

from raftlog.net.errors import ErrorCode

from .admin_cli import CliError
from .groups.describe import describe_lines, list_lines, parse_assignment, state_line
from .groups.model import DescribedMember, GroupDescription, ListedGroup, TopicPartition
from .groups.partitioning import OFFSETS_TOPIC

__all__ = ("register_groups",)


def cmd_groups_list(args: argparse.Namespace) -> int:
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    result = admin.list_consumer_groups(request_timeout=args.timeout_ms / 1000).result(
        timeout=args.timeout_ms / 1000)
    groups = [ListedGroup(g.group_id, "consumer", str(getattr(g.state, "name", "")))
              for g in result.valid]
    for line in list_lines(groups):
        print(line)
    return 0


def cmd_groups_describe(args: argparse.Namespace) -> int:
    timeout_s = args.timeout_ms / 1000
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    described = admin.describe_consumer_groups([args.group], request_timeout=timeout_s)
    try:
        group = described[args.group].result(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"describe {args.group}: {e}") from e
    description = _description(group)
    offsets_future = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(args.group)], request_timeout=timeout_s)
    committed: dict[TopicPartition, int] = {}
    try:
        listed = offsets_future[args.group].result(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"offsets of {args.group}: {e}") from e
    for tp in listed.topic_partitions or ():
        if tp.offset >= 0 and tp.topic != OFFSETS_TOPIC:
            committed[TopicPartition(tp.topic, tp.partition)] = tp.offset
    wanted = set(committed)
    for member in description.members:
        wanted |= set(_assigned(member))
    ends = _log_end_offsets(args.bootstrap_server, wanted, timeout_s)
    if not description.members:
        print(state_line(description))
        print()
    for line in describe_lines(description, committed, ends):
        print(line)
    return 0


def _description(group: Any) -> GroupDescription:
    state = str(getattr(group.state, "name", "UNKNOWN"))
    members = tuple(
        DescribedMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id,
            client_id=m.client_id, client_host=m.host, metadata=b"",
            assignment=_encode_assignment(
                [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions]))
        for m in group.members)
    return GroupDescription(group_id=group.group_id, error=ErrorCode.none,
                            state=_KAFKA_STATES.get(state, state.title()),
                            protocol_type="consumer",
                            protocol=str(group.partition_assignor or ""), members=members)


_KAFKA_STATES = {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead",
                 "PREPARING_REBALANCE": "PreparingRebalance",
                 "COMPLETING_REBALANCE": "CompletingRebalance"}


def _encode_assignment(partitions: list[tuple[str, int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 (what describe.py parses)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(struct.pack(">hi", 0, len(by_topic)))
    for topic, ids in by_topic.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(ids))
        out += b"".join(struct.pack(">i", p) for p in ids)
    out += struct.pack(">i", -1)  # no user data
    return bytes(out)


def _assigned(member: DescribedMember) -> list[TopicPartition]:
    return parse_assignment(member.assignment) or []


def _log_end_offsets(bootstrap: str, partitions: set[TopicPartition], timeout_s: float
                     ) -> dict[TopicPartition, int]:
    """ListOffsets latest (the high watermark), as kafka-consumer-groups.sh shows."""
    if not partitions:
        return {}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raftlog-groups-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        out = {}
        for tp in partitions:
            _, high = consumer.get_watermark_offsets(
                ConfluentTopicPartition(tp.topic, tp.partition), timeout=timeout_s)
            out[tp] = int(high)
        return out
    finally:
        consumer.close()


def register_groups(sub: Any) -> None:
    """Add ``groups list|describe`` to the `raftlog` subparsers ``sub``."""
    groups = sub.add_parser("groups", help="consumer groups (kafka-consumer-groups.sh)")
    actions = groups.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every group id")
    describe = actions.add_parser("describe", help="offsets, log end offsets and lag per partition")
    describe.add_argument("group")
    for parser, func in ((listing, cmd_groups_list), (describe, cmd_groups_describe)):
        parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
        parser.add_argument("--timeout-ms", type=int, default=15_000)
        parser.set_defaults(func=func)
