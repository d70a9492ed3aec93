"""``raftlog groups list|describe GROUP|reset-offsets GROUP|delete GROUP
--bootstrap-server H:P``: kafka-consumer-groups.sh ``--list``,
``--describe``, ``--reset-offsets`` and ``--delete``, registered by
`data_plane.admin_cli`.

``reset-offsets`` is a dry run unless ``--execute`` (as Kafka's tool), and
only for a group with no members (Empty, or unknown): ``--to-earliest``,
``--to-latest``, ``--to-offset N``, ``--shift-by N`` (from the committed
offset) or ``--to-datetime`` (ListOffsets by timestamp), each clamped to the
partition's [log start, high watermark], for ``--topic T`` (every
partition), ``--topic T:0,2`` or ``--all-topics`` (those the group has
offsets for).

The shell gathers, over a real Kafka client (confluent-kafka's admin
client, i.e. librdkafka: ListGroups, DescribeGroups and OffsetFetch through
FindCoordinator) plus a consumer's ListOffsets for the log end offsets, and
prints what `data_plane.groups.describe` formats: per partition the
committed (current) offset, the log end offset, the lag and the owning
member. Exit 1 with a message if the cluster cannot answer in time.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
)
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v0 import request as cgd0

from raftlog.net.client import KafkaProtocolClient
from raftlog.net.errors import ErrorCode

from .admin_cli import CliError, add_command_config, command_security
from .client_config import ClientSecurity
from .console_cli import AuthenticationWatch, librdkafka_settings
from .groups.consumer_protocol import encode_assignment
from .groups.describe import (
    MemberRow,
    describe_lines,
    group_state_lines,
    list_lines,
    member_lines,
    parse_assignment,
    state_line,
)
from .groups.model import DescribedMember, GroupDescription, ListedGroup, TopicPartition
from .groups.partitioning import OFFSETS_TOPIC

__all__ = ("register_groups",)


_STATE_NAMES = {"Stable": ConsumerGroupState.STABLE, "Empty": ConsumerGroupState.EMPTY,
                "PreparingRebalance": ConsumerGroupState.PREPARING_REBALANCING,
                "CompletingRebalance": ConsumerGroupState.COMPLETING_REBALANCING,
                "Dead": ConsumerGroupState.DEAD}
_TYPE_NAMES = {"classic": ConsumerGroupType.CLASSIC, "consumer": ConsumerGroupType.CONSUMER}


def _filter(text: str | None, names: dict[str, Any], what: str) -> set[Any]:
    """``--state A,B`` / ``--type A,B`` (case-insensitive); empty: no filter."""
    out = set()
    lowered = {name.lower(): value for name, value in names.items()}
    for item in (text or "").split(","):
        if item.strip():
            value = lowered.get(item.strip().lower())
            if value is None:
                raise CliError(f"unknown {what} {item.strip()!r}; one of: {', '.join(names)}")
            out.add(value)
    return out


def _first_answer(future: Any, timeout_s: float, what: str, admin: AdminClient,
                  watch: AuthenticationWatch) -> Any:
    """The result of a command's first request, waited for in short rounds:
    a refused login (which ``admin.poll`` reports to ``watch``) ends the
    wait at once. Raises `CliError` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return future.result(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
        except TimeoutError:
            admin.poll(0)
            watch.raise_if_refused()
            if time.monotonic() >= deadline:
                raise CliError(f"{what}: no answer within {timeout_s * 1000:.0f} ms") from None
        except Exception as e:
            admin.poll(0)
            watch.raise_if_refused()
            raise CliError(f"{what}: {e}") from e


def cmd_groups_list(args: argparse.Namespace) -> int:
    watch = AuthenticationWatch()
    admin = AdminClient(librdkafka_settings(args.bootstrap_server, command_security(args), watch))
    states = _filter(args.state, _STATE_NAMES, "state")
    types = _filter(args.type, _TYPE_NAMES, "type")
    kwargs: dict[str, Any] = {"request_timeout": args.timeout_ms / 1000}
    if states:
        kwargs["states"] = states
    if types:
        kwargs["types"] = types
    result = _first_answer(admin.list_consumer_groups(**kwargs), args.timeout_ms / 1000,
                           "list groups", admin, watch)
    state_names = {v: k for k, v in _STATE_NAMES.items()}
    groups = [ListedGroup(g.group_id, "consumer", state_names.get(g.state, "Unknown"),
                          group_type=str(getattr(g.type, "name", "unknown")).lower())
              for g in result.valid]
    for line in list_lines(groups, show_type=args.type is not None,
                           show_state=args.state is not None):
        print(line)
    return 0


def cmd_groups_describe(args: argparse.Namespace) -> int:
    timeout_s = args.timeout_ms / 1000
    security = command_security(args)
    watch = AuthenticationWatch()
    settings = librdkafka_settings(args.bootstrap_server, security, watch)
    admin = AdminClient(settings)
    described = admin.describe_consumer_groups([args.group], request_timeout=timeout_s)
    group = _first_answer(described[args.group], timeout_s, f"describe {args.group}", admin,
                          watch)
    description = _description(group)
    if args.state or args.members:
        return _describe_state_or_members(args, group, description, security)
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
    ends = _log_end_offsets(settings, wanted, timeout_s)
    if not description.members:
        print(state_line(description))
        print()
    for line in describe_lines(description, committed, ends):
        print(line)
    return 0


def _describe_state_or_members(args: argparse.Namespace, group: Any,
                               description: GroupDescription, security: ClientSecurity) -> int:
    """``--state`` and/or ``--members [--verbose]`` (kafka-consumer-groups.sh)."""
    kip848 = str(getattr(group.type, "name", "")).upper() == "CONSUMER"
    # librdkafka's description has no epochs and names only the classic
    # states: a KIP-848 group's come from ConsumerGroupDescribe (API 69).
    described = (_consumer_group_described(group, args.timeout_ms, security)
                 if kip848 else None)
    state = described.state if described is not None else description.state
    member_epochs = described.member_epochs if described is not None else {}
    if args.state:
        node = group.coordinator
        coordinator = f"{node.host}:{node.port} ({node.id})" if node is not None else "-"
        epochs = ((described.group_epoch, described.assignment_epoch)
                  if described is not None and args.verbose else None)
        for line in group_state_lines(args.group, coordinator, str(group.partition_assignor or ""),
                                      state, len(group.members), epochs):
            print(line)
    if args.members:
        if args.state:
            print()
        if not group.members:
            print(state_line(description))
            return 0
        rows = [
            MemberRow(member_id=m.member_id, group_instance_id=m.group_instance_id, host=m.host,
                      client_id=m.client_id, assignment=_topic_partitions(m.assignment),
                      target=(_topic_partitions(m.target_assignment)
                              if kip848 and m.target_assignment is not None else None),
                      member_epoch=member_epochs.get(m.member_id))
            for m in group.members]
        for line in member_lines(args.group, rows, verbose=args.verbose):
            print(line)
    return 0


@dataclass(frozen=True, slots=True)
class _Described:
    state: str
    group_epoch: int
    assignment_epoch: int
    member_epochs: dict[str, int]


def _consumer_group_described(group: Any, timeout_ms: int,
                              security: ClientSecurity) -> _Described | None:
    """ConsumerGroupDescribe of ``group`` from its coordinator; None if it
    cannot answer (the table then shows what librdkafka said)."""
    node = group.coordinator
    if node is None:
        return None

    async def ask() -> _Described | None:
        client = KafkaProtocolClient(node.host, int(node.port), client_id="raftlog-groups",
                                     request_timeout_ms=timeout_ms, security=security.connection)
        try:
            response = await client.send(cgd0.ConsumerGroupDescribeRequest(
                group_ids=(group.group_id,), include_authorized_operations=False))
        finally:
            await client.close()
        for g in response.groups:  # type: ignore[union-attr]
            if g.error_code == ErrorCode.none:
                return _Described(str(g.group_state), int(g.group_epoch), int(g.assignment_epoch),
                                  {m.member_id: int(m.member_epoch) for m in g.members})
        return None

    try:
        return asyncio.run(ask())
    except Exception:
        return None


def _topic_partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(tp.topic, tp.partition)
                 for tp in (assignment.topic_partitions if assignment is not None else ()))


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
    return encode_assignment(by_topic)


def _assigned(member: DescribedMember) -> list[TopicPartition]:
    return parse_assignment(member.assignment) or []


def _log_end_offsets(settings: dict[str, Any], partitions: set[TopicPartition], timeout_s: float
                     ) -> dict[TopicPartition, int]:
    """ListOffsets latest (the high watermark), as kafka-consumer-groups.sh
    shows, by a consumer with librdkafka ``settings``."""
    if not partitions:
        return {}
    consumer = Consumer({**settings, "group.id": f"raftlog-groups-{uuid.uuid4()}",
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


def cmd_groups_reset_offsets(args: argparse.Namespace) -> int:
    timeout_s = args.timeout_ms / 1000
    watch = AuthenticationWatch()
    settings = librdkafka_settings(args.bootstrap_server, command_security(args), watch)
    admin = AdminClient(settings)
    described = admin.describe_consumer_groups([args.group], request_timeout=timeout_s)
    group = _first_answer(described[args.group], timeout_s, f"describe {args.group}", admin,
                          watch)
    state = _KAFKA_STATES.get(str(getattr(group.state, "name", "")), "Unknown")
    if group.members:
        raise CliError(f"Assignments can only be reset if the group '{args.group}' is "
                       f"inactive, but the current state is {state}.")
    committed = _committed(admin, args.group, timeout_s)
    partitions = _reset_scope(args, admin, committed, timeout_s)
    consumer = Consumer({**settings, "group.id": f"raftlog-groups-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        targets = {tp: _new_offset(args, consumer, tp, committed.get(tp), timeout_s)
                   for tp in sorted(partitions, key=lambda t: (t.topic, t.partition))}
    finally:
        consumer.close()
    if args.execute:
        altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            args.group, [ConfluentTopicPartition(tp.topic, tp.partition, offset)
                         for tp, offset in targets.items()])], request_timeout=timeout_s)
        try:
            result = altered[args.group].result(timeout=timeout_s)
        except Exception as e:
            raise CliError(f"reset offsets of {args.group}: {e}") from e
        failed = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in result.topic_partitions
                  if tp.error is not None]
        if failed:
            raise CliError(f"reset offsets of {args.group}: {'; '.join(failed)}")
    else:
        print("WARN: No action will be performed as the --execute option is missing. "
              "Add --execute to reset the offsets.")
    rows = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")] + [
        (args.group, tp.topic, str(tp.partition), str(offset)) for tp, offset in targets.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    print()
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _committed(admin: AdminClient, group: str, timeout_s: float) -> dict[TopicPartition, int]:
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                               request_timeout=timeout_s)
    try:
        listed = future[group].result(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"offsets of {group}: {e}") from e
    return {TopicPartition(tp.topic, tp.partition): tp.offset
            for tp in listed.topic_partitions or () if tp.offset >= 0}


def _reset_scope(args: argparse.Namespace, admin: AdminClient,
                 committed: dict[TopicPartition, int], timeout_s: float) -> set[TopicPartition]:
    if args.all_topics:
        return set(committed)
    out: set[TopicPartition] = set()
    for spec in args.topic:
        name, _, ids = spec.partition(":")
        if ids:
            try:
                out |= {TopicPartition(name, int(i)) for i in ids.split(",")}
            except ValueError:
                raise CliError(f"--topic {spec}: partitions must be numbers") from None
            continue
        metadata = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if metadata is None or metadata.error is not None:
            raise CliError(f"topic {name}: {getattr(metadata, 'error', 'not found')}")
        out |= {TopicPartition(name, p) for p in metadata.partitions}
    return out


def _new_offset(args: argparse.Namespace, consumer: Any, tp: TopicPartition,
                current: int | None, timeout_s: float) -> int:
    ctp = ConfluentTopicPartition(tp.topic, tp.partition)
    try:
        low, high = consumer.get_watermark_offsets(ctp, timeout=timeout_s)
    except Exception as e:
        raise CliError(f"offsets of {tp.topic}-{tp.partition}: {e}") from e
    if args.to_earliest:
        target = low
    elif args.to_latest:
        target = high
    elif args.to_offset is not None:
        target = args.to_offset
    elif args.shift_by is not None:
        target = (current if current is not None else high) + args.shift_by
    else:
        at = _parse_datetime(args.to_datetime)
        (found,) = consumer.offsets_for_times(
            [ConfluentTopicPartition(tp.topic, tp.partition, at)], timeout=timeout_s)
        target = high if found.offset < 0 else found.offset
    return min(max(int(target), int(low)), int(high))


def _parse_datetime(text: str) -> int:
    """Kafka's ``--to-datetime`` format, ``YYYY-MM-DDTHH:mm:SS.sss`` (local
    time) with an optional zone (``Z``, ``+01:00``); milliseconds since the epoch."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss") from None
    return int(moment.timestamp() * 1000)


def cmd_groups_delete(args: argparse.Namespace) -> int:
    watch = AuthenticationWatch()
    admin = AdminClient(librdkafka_settings(args.bootstrap_server, command_security(args), watch))
    timeout_s = args.timeout_ms / 1000
    deleted = admin.delete_consumer_groups([args.group], request_timeout=timeout_s)
    _first_answer(deleted[args.group], timeout_s, f"delete {args.group}", admin, watch)
    print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0


def register_groups(sub: Any) -> None:
    """Add ``groups list|describe|reset-offsets|delete`` to the `raftlog` subparsers ``sub``."""
    groups = sub.add_parser("groups", help="consumer groups (kafka-consumer-groups.sh)")
    actions = groups.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every group id")
    listing.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE...]",
                         help="show each group's state; only these states if named")
    listing.add_argument("--type", nargs="?", const="", metavar="classic|consumer",
                         help="show each group's protocol type; only these types if named")
    describe = actions.add_parser("describe", help="offsets, log end offsets and lag per partition")
    describe.add_argument("group")
    describe.add_argument("--state", action="store_true",
                          help="the coordinator, assignor, state and member count instead")
    describe.add_argument("--members", action="store_true",
                          help="one line per member instead")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: each member's partitions (and a KIP-848 "
                               "member's epoch and target); with --state: a KIP-848 group's "
                               "group and assignment epochs")
    reset = actions.add_parser(
        "reset-offsets", help="move an inactive group's committed offsets (dry run unless --execute)")
    reset.add_argument("group")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]")
    scope.add_argument("--all-topics", action="store_true")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    reset.add_argument("--execute", action="store_true")
    delete = actions.add_parser("delete", help="delete an inactive group and its offsets")
    delete.add_argument("group")
    for parser, func in ((listing, cmd_groups_list), (describe, cmd_groups_describe),
                         (reset, cmd_groups_reset_offsets), (delete, cmd_groups_delete)):
        parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
        parser.add_argument("--timeout-ms", type=int, default=15_000)
        add_command_config(parser)
        parser.set_defaults(func=func)
