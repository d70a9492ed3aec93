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
import re
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
)
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v0 import request as cgd0
from kio.schema.offset_delete.v0 import request as od0
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

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
    return _reset_offsets(args, [args.group], several=False)


def _reset_offsets(args: argparse.Namespace, groups: list[str], *, several: bool) -> int:
    """Plan (and with ``--execute`` commit) each group's new offsets, then
    print them as kafka-consumer-groups.sh does: a table, or with
    ``--export`` CSV lines (``topic,partition,offset``, with the group
    first when ``several``). A group with members is refused."""
    if args.execute and args.dry_run:
        raise CliError("give --execute or --dry-run, not both")
    _check_scenario(args)
    timeout_s = args.timeout_ms / 1000
    watch = AuthenticationWatch()
    settings = librdkafka_settings(args.bootstrap_server, command_security(args), watch)
    admin = AdminClient(settings)
    from_file = _read_reset_file(args.from_file, groups) if args.from_file else None
    plans: dict[str, dict[TopicPartition, int]] = {}
    for group in groups:
        plans[group] = _plan_reset(args, settings, admin, watch, group, timeout_s,
                                   None if from_file is None else from_file.get(group, {}))
    if args.execute:
        for group, targets in plans.items():
            _commit_offsets(admin, group, targets, timeout_s)
    elif not args.dry_run and not args.export:
        print("WARN: No action will be performed as the --execute option is missing. "
              "Add --execute to reset the offsets, or --dry-run to say that a dry run is meant.",
              file=sys.stderr)
    rows = [(group, tp.topic, tp.partition, offset) for group, targets in plans.items()
            for tp, offset in targets.items()]
    if args.export:
        for group, topic, partition, offset in rows:
            print(",".join(([group] if several else []) + [topic, str(partition), str(offset)]))
        return 0
    table = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")] + [
        (group, topic, str(partition), str(offset)) for group, topic, partition, offset in rows]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    print()
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


_SCENARIOS: Final = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime",
                     "to_current", "by_duration", "from_file")


def _check_scenario(args: argparse.Namespace) -> None:
    # (`--to-offset 0` is given: 0 == False, so test identity.)
    given = [name for name in _SCENARIOS
             if (value := getattr(args, name, None)) is not None and value is not False]
    if len(given) != 1:
        flags = ", ".join("--" + name.replace("_", "-") for name in _SCENARIOS)
        raise CliError(f"--reset-offsets needs exactly one of {flags}")
    if args.from_file is None and not args.topic and not args.all_topics:
        raise CliError("--reset-offsets needs --topic T[:P,...] or --all-topics")
    if args.by_duration is not None:
        _parse_duration_ms(args.by_duration)
    if args.to_datetime is not None:
        _parse_datetime(args.to_datetime)


def _plan_reset(args: argparse.Namespace, settings: dict[str, Any], admin: AdminClient,
                watch: AuthenticationWatch, group: str, timeout_s: float,
                from_file: dict[TopicPartition, int] | None) -> dict[TopicPartition, int]:
    described = admin.describe_consumer_groups([group], request_timeout=timeout_s)
    found = _first_answer(described[group], timeout_s, f"describe {group}", admin, watch)
    state = _KAFKA_STATES.get(str(getattr(found.state, "name", "")), "Unknown")
    if found.members:
        raise CliError(f"Assignments can only be reset if the group '{group}' is "
                       f"inactive, but the current state is {state}.")
    committed = _committed(admin, group, timeout_s)
    if from_file is not None:
        partitions = set(from_file)
    else:
        partitions = _reset_scope(args, admin, committed, timeout_s)
    consumer = Consumer({**settings, "group.id": f"raftlog-groups-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        return {tp: _new_offset(args, consumer, tp, committed.get(tp), timeout_s,
                                None if from_file is None else from_file[tp])
                for tp in sorted(partitions, key=lambda t: (t.topic, t.partition))}
    finally:
        consumer.close()


def _commit_offsets(admin: AdminClient, group: str, targets: dict[TopicPartition, int],
                    timeout_s: float) -> None:
    if not targets:
        return
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [ConfluentTopicPartition(tp.topic, tp.partition, offset)
                for tp, offset in targets.items()])], request_timeout=timeout_s)
    try:
        result = altered[group].result(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"reset offsets of {group}: {e}") from e
    failed = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in result.topic_partitions
              if tp.error is not None]
    if failed:
        raise CliError(f"reset offsets of {group}: {'; '.join(failed)}")


def _read_reset_file(path: str, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """kafka-consumer-groups.sh ``--from-file``: CSV lines
    ``topic,partition,offset`` (one ``--group``) or
    ``group,topic,partition,offset``, as ``--export`` writes them."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise CliError(f"--from-file: cannot read {path}: {e.strerror}") from None
    out: dict[str, dict[TopicPartition, int]] = {}
    for number, line in enumerate(lines, 1):
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and len(groups) == 1:
            fields = [groups[0], *fields]
        try:
            group, topic, partition, offset = fields
            tp, target = TopicPartition(topic, int(partition)), int(offset)
        except ValueError:
            raise CliError(f"--from-file {path}, line {number}: expected "
                           + ("topic,partition,offset or " if len(groups) == 1 else "")
                           + f"group,topic,partition,offset, not {line!r}") from None
        out.setdefault(group, {})[tp] = target
    for group in groups:
        if not out.get(group):
            raise CliError(f"--from-file {path}: no reset plan for group {group}")
    return out


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
    return _topic_scope(args.topic, admin, timeout_s)


def _new_offset(args: argparse.Namespace, consumer: Any, tp: TopicPartition,
                current: int | None, timeout_s: float, planned: int | None = None) -> int:
    """The target for ``tp``, clamped to [log start, high watermark], as
    Kafka's tool clamps it."""
    ctp = ConfluentTopicPartition(tp.topic, tp.partition)
    try:
        low, high = consumer.get_watermark_offsets(ctp, timeout=timeout_s)
    except Exception as e:
        raise CliError(f"offsets of {tp.topic}-{tp.partition}: {e}") from e
    if planned is not None:
        target = planned
    elif args.to_earliest:
        target = low
    elif args.to_latest:
        target = high
    elif args.to_current:
        target = current if current is not None else high
    elif args.to_offset is not None:
        target = args.to_offset
    elif args.shift_by is not None:
        if current is None:
            raise CliError(f"Cannot shift offset for partition {tp.topic}-{tp.partition} "
                           "since there is no current committed offset")
        target = current + args.shift_by
    else:
        at = (_parse_datetime(args.to_datetime) if args.to_datetime is not None
              else int(time.time() * 1000) - _parse_duration_ms(args.by_duration))
        (found,) = consumer.offsets_for_times(
            [ConfluentTopicPartition(tp.topic, tp.partition, at)], timeout=timeout_s)
        target = high if found.offset < 0 else found.offset
    return min(max(int(target), int(low)), int(high))


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{1,9}))?S)?)?",
    re.IGNORECASE)


def _parse_duration_ms(text: str) -> int:
    """``--by-duration``: an ISO-8601 duration as Java's ``Duration.parse``
    takes it, ``PnDTnHnMn.nS`` (e.g. ``PT1H30M``, ``P1D``); milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (2, 3, 4, 5)) or text.strip().upper().endswith("T"):
        raise CliError(f"--by-duration {text!r}: expected an ISO-8601 duration such as PT1H30M "
                       "or P1DT12H (PnDTnHnMn.nS)")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
    whole = int(seconds or 0)
    ms += whole * 1000 + (1 if whole >= 0 else -1) * int(((fraction or "") + "000")[:3])
    return -ms if sign == "-" else ms


def _parse_datetime(text: str) -> int:
    """Kafka's ``--to-datetime`` format, ``YYYY-MM-DDTHH:mm:SS.sss``, with
    an optional zone (``Z``, ``+01:00``); without one it is UTC, as Kafka
    reads it. Milliseconds since the epoch."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def cmd_groups_delete(args: argparse.Namespace) -> int:
    return _delete_groups(args, [args.group])


def _delete_groups(args: argparse.Namespace, groups: list[str]) -> int:
    """DeleteGroups, printed as kafka-consumer-groups.sh ``--delete`` does;
    exit 2 if any group could not be deleted."""
    watch = AuthenticationWatch()
    admin = AdminClient(librdkafka_settings(args.bootstrap_server, command_security(args), watch))
    timeout_s = args.timeout_ms / 1000
    if not groups:
        print("No consumer groups to delete.")
        return 0
    deleted = admin.delete_consumer_groups(groups, request_timeout=timeout_s)
    done: list[str] = []
    failed: list[str] = []
    for group in groups:
        try:
            _first_answer(deleted[group], timeout_s, f"delete {group}", admin, watch)
            done.append(group)
        except CliError as e:
            if len(groups) == 1:
                raise
            failed.append(f"* Group '{group}' could not be deleted due to: "
                          f"{str(e).removeprefix(f'delete {group}: ')}")
    quoted = ", ".join(f"'{g}'" for g in done)
    if not failed:
        print(f"Deletion of requested consumer groups ({quoted}) was successful.")
        return 0
    print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
    for line in failed:
        print(line, file=sys.stderr)
    if done:
        print(f"These consumer groups were deleted successfully: {quoted}")
    return 2


def cmd_groups_delete_offsets(args: argparse.Namespace) -> int:
    """kafka-consumer-groups.sh ``--delete-offsets``: OffsetDelete (API 47)
    at the group's coordinator, for ``--topic T`` (every partition) or
    ``T:0,2``. The coordinator refuses partitions a member is subscribed
    to (GROUP_SUBSCRIBED_TO_TOPIC); each partition's outcome is printed."""
    if not args.topic:
        raise CliError("--delete-offsets needs --topic T[:P,...]")
    timeout_s = args.timeout_ms / 1000
    security = command_security(args)
    watch = AuthenticationWatch()
    admin = AdminClient(librdkafka_settings(args.bootstrap_server, security, watch))
    described = admin.describe_consumer_groups([args.group], request_timeout=timeout_s)
    group = _first_answer(described[args.group], timeout_s, f"describe {args.group}", admin,
                          watch)
    node = group.coordinator
    if node is None:
        raise CliError(f"group {args.group} has no coordinator now; try again")
    partitions = sorted(_topic_scope(args.topic, admin, timeout_s),
                        key=lambda t: (t.topic, t.partition))
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    request = od0.OffsetDeleteRequest(group_id=GroupId(args.group), topics=tuple(
        od0.OffsetDeleteRequestTopic(name=TopicName(topic), partitions=tuple(
            od0.OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ids))
        for topic, ids in by_topic.items()))

    async def ask() -> Any:
        client = KafkaProtocolClient(node.host, int(node.port), client_id="raftlog-groups",
                                     request_timeout_ms=args.timeout_ms,
                                     security=security.connection)
        try:
            return await client.send(request)
        finally:
            await client.close()

    try:
        response = asyncio.run(ask())
    except Exception as e:
        raise CliError(f"delete offsets of {args.group}: {e}") from e
    top = ErrorCode(int(response.error_code))
    if top is not ErrorCode.none:
        raise CliError(f"delete offsets of {args.group}: {top.name.upper()}")
    outcomes = {(str(t.name), int(p.partition_index)): ErrorCode(int(p.error_code))
                for t in response.topics for p in t.partitions}
    errors = [code for code in outcomes.values() if code is not ErrorCode.none]
    if errors:
        print("Error: Encountered some partition-level error, see the follow-up details.",
              file=sys.stderr)
    else:
        print(f"Request succeeded for deleting offsets from group {args.group}.")
    table = [("TOPIC", "PARTITION", "STATUS")] + [
        (topic, str(partition), "Successful" if code is ErrorCode.none
         else f"Error: {code.name.upper()}")
        for (topic, partition), code in sorted(outcomes.items())]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    print()
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 2 if errors else 0


def _topic_scope(specs: list[str], admin: AdminClient, timeout_s: float) -> set[TopicPartition]:
    """``--topic T`` (every partition of T) or ``--topic T:0,2``, repeated."""
    out: set[TopicPartition] = set()
    for spec in specs:
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


# --- kafka-consumer-groups.sh's spelling: one action flag ---------------------------------

_KAFKA_ACTIONS: Final = ("list", "describe", "delete", "reset-offsets", "delete-offsets")


def cmd_groups_kafka(args: argparse.Namespace) -> int:
    """``raftlog groups --bootstrap-server H:P --describe --group G`` and the
    rest of kafka-consumer-groups.sh's form: one action flag, ``--group``
    (repeatable) or ``--all-groups``."""
    action = args.kafka_action
    if action is None:
        raise CliError("one action is needed: --" + ", --".join(_KAFKA_ACTIONS)
                       + " (or groups list|describe|reset-offsets|delete|delete-offsets)")
    if not args.bootstrap_server:
        raise CliError("--bootstrap-server is required")
    groups: list[str] = args.group_ids or []
    if groups and args.all_groups:
        raise CliError("give --group or --all-groups, not both")
    if action == "list":
        if groups or args.all_groups or args.topic:
            raise CliError("--list takes no --group, --all-groups or --topic")
        return cmd_groups_list(args)
    if action != "list" and args.type is not None:
        raise CliError("--type goes with --list only")
    if action == "delete-offsets":
        if len(groups) != 1:
            raise CliError("--delete-offsets needs one --group")
        args.group = groups[0]
        return cmd_groups_delete_offsets(args)
    if not groups and not args.all_groups:
        raise CliError(f"--{action} needs --group G or --all-groups")
    if action == "delete" and args.topic:
        raise CliError("--delete deletes whole groups; for a topic's offsets use "
                       "--delete-offsets --group G --topic T")
    if action == "describe":
        if args.topic:
            raise CliError("--describe takes no --topic")
        if sum((args.state is not None, args.members, args.offsets)) > 1:
            raise CliError("--describe takes at most one of --members, --offsets, --state")
        if args.state:
            raise CliError(f"--describe --state takes no value (got {args.state!r})")
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise CliError("--members, --offsets and --verbose go with --describe")
    if action != "reset-offsets" and (args.execute or args.dry_run or args.export):
        raise CliError("--execute, --dry-run and --export go with --reset-offsets")
    if args.all_groups:
        groups = _every_group(args)
    if action == "delete":
        return _delete_groups(args, groups)
    if action == "reset-offsets":
        return _reset_offsets(args, groups, several=len(groups) > 1 or args.all_groups)
    args.state = args.state is not None
    for index, group in enumerate(sorted(groups)):
        if index:
            print()
        args.group = group
        cmd_groups_describe(args)
    return 0


def _every_group(args: argparse.Namespace) -> list[str]:
    watch = AuthenticationWatch()
    admin = AdminClient(librdkafka_settings(args.bootstrap_server, command_security(args), watch))
    timeout_s = args.timeout_ms / 1000
    result = _first_answer(admin.list_consumer_groups(request_timeout=timeout_s), timeout_s,
                           "list groups", admin, watch)
    return sorted(g.group_id for g in result.valid)


def _add_reset_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The reset scope and scenario options, shared by both spellings."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]")
    scope.add_argument("--all-topics", action="store_true")
    to = parser.add_mutually_exclusive_group(required=required)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true",
                    help="the committed offset; the log end where there is none")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="the first offset at or after it (UTC unless a zone is given)")
    to.add_argument("--by-duration", metavar="PnDTnHnMnS",
                    help="the first offset at or after now minus this ISO-8601 duration")
    to.add_argument("--from-file", metavar="FILE",
                    help="CSV lines topic,partition,offset (or group,topic,partition,offset), "
                         "as --export writes them")
    parser.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.add_argument("--dry-run", action="store_true",
                        help="only print them (the default, said explicitly)")
    parser.add_argument("--export", action="store_true",
                        help="print the plan as CSV, for --from-file")


def _add_connection_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--bootstrap-server", required=required, metavar="HOST:PORT[,...]")
    parser.add_argument("--timeout-ms", type=int, default=15_000)
    add_command_config(parser)


def register_groups(sub: Any) -> None:
    """Add ``groups`` to the `raftlog` subparsers ``sub``, in both spellings:
    ``groups list|describe GROUP|reset-offsets GROUP|delete GROUP|
    delete-offsets GROUP`` and kafka-consumer-groups.sh's action flags."""
    groups = sub.add_parser(
        "groups", help="consumer groups (kafka-consumer-groups.sh)",
        description="Consumer groups, as kafka-consumer-groups.sh: either a subcommand "
                    "(groups describe GROUP --bootstrap-server H:P) or Kafka's action flags "
                    "(groups --bootstrap-server H:P --describe --group GROUP).")
    kafka = groups.add_mutually_exclusive_group()
    for action in _KAFKA_ACTIONS:
        kafka.add_argument(f"--{action}", dest="kafka_action", action="store_const",
                           const=action, help=f"the {action} action (Kafka's spelling)")
    groups.add_argument("--group", dest="group_ids", action="append", metavar="GROUP",
                        help="the group (repeatable)")
    groups.add_argument("--all-groups", action="store_true")
    groups.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE...]",
                        help="--list: show (or filter by) each group's state; --describe: "
                             "the coordinator, assignor, state and member count")
    groups.add_argument("--type", nargs="?", const="", metavar="classic|consumer",
                        help="--list: show (or filter by) each group's protocol type")
    groups.add_argument("--members", action="store_true", help="--describe: one line per member")
    groups.add_argument("--offsets", action="store_true",
                        help="--describe: offsets and lag per partition (the default)")
    groups.add_argument("--verbose", action="store_true")
    _add_reset_options(groups, required=False)
    _add_connection_options(groups, required=False)
    groups.set_defaults(func=cmd_groups_kafka, kafka_action=None)

    actions = groups.add_subparsers(dest="action", required=False)
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
    _add_reset_options(reset, required=True)
    delete = actions.add_parser("delete", help="delete an inactive group and its offsets")
    delete.add_argument("group")
    delete_offsets = actions.add_parser(
        "delete-offsets", help="delete a group's committed offsets of some topics")
    delete_offsets.add_argument("group")
    delete_offsets.add_argument("--topic", action="append", required=True,
                                metavar="TOPIC[:P,P...]")
    for parser, func in ((listing, cmd_groups_list), (describe, cmd_groups_describe),
                         (reset, cmd_groups_reset_offsets), (delete, cmd_groups_delete),
                         (delete_offsets, cmd_groups_delete_offsets)):
        _add_connection_options(parser, required=True)
        parser.set_defaults(func=func)
