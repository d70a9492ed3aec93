"""``raftlog get-offsets``: partitions' offsets, as kafka-get-offsets.sh
(``GetOffsetShell``) prints them, registered by `data_plane.admin_cli`.

    raftlog get-offsets --bootstrap-server H:P --topic orders
    raftlog get-offsets --bootstrap-server H:P --topic-partitions 'orders:0-2,audit'
    raftlog get-offsets --bootstrap-server H:P --topic orders --partitions 0,3 --time earliest
    raftlog get-offsets --bootstrap-server H:P --time 1700000000000

Which partitions:
- ``--topic REGEX`` (the whole name must match; ``a,b`` means ``a|b``) and
  ``--partitions 0,3``; without them, every partition of every topic;
- or ``--topic-partitions``: comma-separated ``TOPIC_REGEX[:PARTITIONS]``
  rules, where PARTITIONS is ``N``, ``N-M`` (M exclusive), ``N-`` or
  ``-M``, and an empty topic regex matches every topic;
- internal topics are included unless ``--exclude-internal-topics``.

``--time``: ``latest``/-1 (the high watermark, the default),
``earliest``/-2 (the log start offset), ``max-timestamp``/-3 (the record
with the largest timestamp), ``earliest-local``/-4 and ``latest-tiered``/-5
(KIP-405 and KIP-1005; there is no tiered storage, so -4 is the log start
offset and -5 finds none), or a timestamp in ms (the first record at or
after it).

Each line is ``topic:partition:offset``, sorted as Kafka's tool sorts them
(by ``topic-partition`` as text). A partition with no offset for the time
asked (a timestamp after the last record) is left out, as Kafka's tool does.
ListOffsets goes to each partition's leader, one request per leader; a leader
change or a leader still catching up is retried until ``--timeout-ms``, and
a partition that still fails is reported on stderr (``Skip getting offsets
for topic-partition ...``) while the others are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.list_offsets.v9 import request as lo_req
from kio.schema.list_offsets.v9 import response as lo_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from raftlog.net.errors import ErrorCode, TransportError, UnsupportedVersionError

from .admin_cli import CliError, _Admin, _error_name, _metadata, _run_admin, add_command_config

__all__ = ("cmd_get_offsets", "parse_time", "parse_topic_partitions", "register_get_offsets")

#: ``--time`` names and the ListOffsets timestamps they stand for.
_NAMED_TIMES: Final = {"latest": -1, "earliest": -2, "max-timestamp": -3,
                       "earliest-local": -4, "latest-tiered": -5}
#: The ListOffsets version each special timestamp needs (others: v7 is enough).
_VERSION_FOR: Final = {-4: 8, -5: 9}
#: Answers worth asking again (a leader moved, or has not caught up yet).
_RETRIABLE: Final = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch,
    ErrorCode.offset_not_available, ErrorCode.unknown_topic_or_partition,
    ErrorCode.request_timed_out,
})
_RULE: Final = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_TIME_HELP: Final = ("Malformed time argument {!r}. Please use -1 or latest / -2 or earliest / "
                     "-3 or max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a "
                     "timestamp in milliseconds")


def parse_time(text: str) -> int:
    """``--time`` as a ListOffsets timestamp; `CliError` if it is neither a
    name, a special value nor a timestamp."""
    if text in _NAMED_TIMES:
        return _NAMED_TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise CliError(_TIME_HELP.format(text)) from None
    if value < -5:
        raise CliError(_TIME_HELP.format(text))
    return value


@dataclass(frozen=True, slots=True)
class _Rule:
    """One topic-partition pattern: topics matching ``topic`` (None: any),
    partitions in [low, high)."""

    topic: re.Pattern[str] | None
    low: int = 0
    high: int | None = None

    def matches(self, topic: str, partition: int) -> bool:
        return ((self.topic is None or self.topic.fullmatch(topic) is not None)
                and self.low <= partition and (self.high is None or partition < self.high))


def _topic_regex(text: str, option: str) -> re.Pattern[str] | None:
    text = text.strip().strip("'\"").replace(",", "|").replace(" ", "")
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise CliError(f"{option} {text!r} is not a valid regular expression: {exc}") from None


def parse_topic_partitions(text: str) -> list[_Rule]:
    """``--topic-partitions``: ``topic1:1,topic2:0-3,topic3,topic4:5-,:-3``."""
    rules = []
    for spec in text.split(","):
        found = _RULE.fullmatch(spec)
        if found is None:
            raise CliError(f"--topic-partitions: {spec!r} is not TOPIC_REGEX[:N|N-M|N-|-M]")
        topic, single, low, high = found.groups()
        pattern = _topic_regex(topic, "--topic-partitions")
        if single:
            rules.append(_Rule(pattern, int(single), int(single) + 1))
        else:
            rules.append(_Rule(pattern, int(low) if low else 0, int(high) if high else None))
    return rules


def _partition_set(text: str | None) -> set[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return {int(p) for p in text.split(",")}
    except ValueError:
        raise CliError("--partitions expects a comma separated list of numeric partition ids, "
                       f"but received: {text}") from None


def _selector(args: argparse.Namespace) -> Callable[[str, int], bool]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise CliError("--topic-partitions cannot be used with --topic or --partitions")
        rules = parse_topic_partitions(args.topic_partitions)
        return lambda topic, partition: any(r.matches(topic, partition) for r in rules)
    pattern = None if args.topic is None else _topic_regex(args.topic, "--topic")
    partitions = _partition_set(args.partitions)
    return lambda topic, partition: (
        (pattern is None or pattern.fullmatch(topic) is not None)
        and (partitions is None or partition in partitions))


TP = tuple[str, int]


def _list_request(timestamp: int, partitions: Iterable[tuple[TP, int]]) -> lo_req.ListOffsetsRequest:
    by_topic: dict[str, list[lo_req.ListOffsetsPartition]] = {}
    for (topic, partition), epoch in partitions:
        by_topic.setdefault(topic, []).append(lo_req.ListOffsetsPartition(
            partition_index=i32(partition), current_leader_epoch=i32(epoch),
            timestamp=i64(timestamp)))
    return lo_req.ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=i8(0),
        topics=tuple(lo_req.ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps))
                     for t, ps in by_topic.items()))


async def _offsets(admin: _Admin, args: argparse.Namespace, timestamp: int,
                   wanted: Callable[[str, int], bool]) -> tuple[dict[TP, int], dict[TP, str]]:
    """Each selected partition's offset (-1: none for that time), and the
    partitions that failed, with why."""
    version = _VERSION_FOR.get(timestamp, 7)
    deadline = time.monotonic() + args.timeout_ms / 1000
    offsets: dict[TP, int] = {}
    failed: dict[TP, str] = {}
    pending: set[TP] | None = None  # None: not listed yet
    while True:
        metadata = await _metadata(admin, None)
        brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in metadata.brokers}
        leaders: dict[int, list[tuple[TP, int]]] = {}
        selected = set()
        for topic in metadata.topics:
            name = str(topic.name)
            if args.exclude_internal_topics and topic.is_internal:
                continue
            for part in topic.partitions:
                tp = (name, int(part.partition_index))
                if (pending is None and wanted(*tp)) or (pending is not None and tp in pending):
                    selected.add(tp)
                    leaders.setdefault(int(part.leader_id), []).append(
                        (tp, int(part.leader_epoch)))
        if pending is None:
            if not selected:
                raise CliError("Could not match any topic-partitions with the specified filters")
            pending = selected
        for tp in pending - selected:  # deleted meanwhile
            failed[tp] = _error_name(ErrorCode.unknown_topic_or_partition)
        pending &= selected
        for leader, parts in leaders.items():
            address = brokers.get(leader)
            if address is None:
                for tp, _ in parts:
                    failed[tp] = _error_name(ErrorCode.leader_not_available)
                continue
            try:
                response: lo_resp.ListOffsetsResponse = await admin.send_to(
                    address, _list_request(timestamp, parts), version)
            except UnsupportedVersionError as exc:
                for tp, _ in parts:
                    pending.discard(tp)
                    failed[tp] = str(exc)
                continue
            except TransportError as exc:
                for tp, _ in parts:
                    failed[tp] = str(exc)
                continue
            _take(response, pending, offsets, failed)
        if not pending or time.monotonic() >= deadline:
            return offsets, {tp: failed[tp] for tp in pending}
        await asyncio.sleep(0.2)


def _take(response: Any, pending: set[TP], offsets: dict[TP, int], failed: dict[TP, str]) -> None:
    for topic in response.topics:
        for part in topic.partitions:
            tp = (str(topic.name), int(part.partition_index))
            if tp not in pending:
                continue
            code = int(part.error_code)
            if code == ErrorCode.none:
                offsets[tp] = int(part.offset)
                pending.discard(tp)
                failed.pop(tp, None)
            else:
                failed[tp] = _error_name(code)
                if code not in _RETRIABLE:
                    pending.discard(tp)


def format_offsets(offsets: Mapping[TP, int]) -> list[str]:
    """``topic:partition:offset`` lines, sorted by ``topic-partition`` as text
    (Kafka's ``TopicPartition.toString`` order), without the partitions that
    have no offset."""
    ordered = sorted(offsets.items(), key=lambda item: f"{item[0][0]}-{item[0][1]}")
    return [f"{topic}:{partition}:{offset}" for (topic, partition), offset in ordered
            if offset >= 0]


def cmd_get_offsets(args: argparse.Namespace) -> int:
    timestamp = parse_time(args.time)
    wanted = _selector(args)

    async def body(admin: _Admin) -> int:
        offsets, failed = await _offsets(admin, args, timestamp, wanted)
        for (topic, partition), why in sorted(failed.items()):
            print(f"Skip getting offsets for topic-partition {topic}-{partition} due to error: "
                  f"{why}", file=sys.stderr)
        for line in format_offsets(offsets):
            print(line)
        return 0

    return _run_admin(args, body)


def register_get_offsets(sub: Any) -> None:
    parser = sub.add_parser(
        "get-offsets", help="partitions' offsets by time (kafka-get-offsets.sh)",
        description="Print partitions' offsets at a time, as kafka-get-offsets.sh does.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--topic", help="a regular expression the whole topic name must match")
    parser.add_argument("--partitions", metavar="N,N,...",
                        help="comma-separated partition ids (with --topic, or alone)")
    parser.add_argument("--topic-partitions", metavar="TOPIC_REGEX[:N|N-M|N-|-M],...",
                        help="topic-partition patterns (not with --topic or --partitions)")
    parser.add_argument("--time", default="latest",
                        help="latest/-1 (default), earliest/-2, max-timestamp/-3, "
                             "earliest-local/-4, latest-tiered/-5, or a timestamp in ms")
    parser.add_argument("--exclude-internal-topics", action="store_true",
                        help="leave out __consumer_offsets and the other internal topics")
    parser.add_argument("--timeout-ms", type=int, default=30_000,
                        help="give up on a partition after this long without an answer")
    add_command_config(parser)
    parser.set_defaults(func=cmd_get_offsets)
