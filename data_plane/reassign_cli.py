"""``raftlog reassign-partitions``: move partition replicas between brokers,
like kafka-reassign-partitions.sh (KIP-455: AlterPartitionReassignments,
ListPartitionReassignments).

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: print the
  current assignment of the topics and a proposed one over the listed
  brokers (the placement new topics get), as reassignment JSON;
- ``--execute --reassignment-json-file F``: print the current assignment
  (keep it to roll back), then start the reassignment. Refused while another
  is in progress unless ``--additional``. ``--disallow-replication-factor-change``
  refuses a target of another size (KIP-860);
- ``--verify --reassignment-json-file F``: for each partition in the file,
  whether its reassignment is still in progress or done (or neither: the
  replicas differ from the file's);
- ``--cancel --reassignment-json-file F``: cancel the reassignments of the
  file's partitions (each goes back to its original replicas);
- ``--list``: every reassignment in progress.

The JSON is Kafka's: ``{"version": 1, "partitions": [{"topic": "t",
"partition": 0, "replicas": [1, 2]}]}`` (``log_dirs`` is accepted and must
be ``any``: replicas go to the broker's own choice of log dir). Topics to
move: ``{"version": 1, "topics": [{"topic": "t"}]}``. Replication throttles
(``--throttle``) are not offered: the brokers have no replication quotas.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from kio.schema.alter_partition_reassignments.v1 import request as apr_req
from kio.schema.alter_partition_reassignments.v1 import response as apr_resp
from kio.schema.list_partition_reassignments.v0 import request as lpr_req
from kio.schema.list_partition_reassignments.v0 import response as lpr_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from metadata_quorum.controller.placement import PlacementBroker, PlacementError, place_replicas
from raftlog.net.errors import ErrorCode

from .admin_cli import (
    CliError,
    _Admin,
    _admin_options,
    _check,
    _error_name,
    _metadata,
    _not_controller,
    _run_admin,
)

__all__ = ("ongoing_reassignments", "parse_reassignment", "parse_topics_to_move", "register")

Assignment = dict[tuple[str, int], tuple[int, ...]]


def _load_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path} is not JSON: {e}") from None


def parse_reassignment(document: Any) -> Assignment:
    """The partitions of a reassignment JSON document, in file order. Raises
    `CliError` naming what is wrong."""
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise CliError('a reassignment file is {"version": 1, "partitions": [...]}')
    if document.get("version", 1) != 1:
        raise CliError(f"unsupported reassignment file version {document.get('version')!r}")
    out: Assignment = {}
    for index, entry in enumerate(document["partitions"]):
        where = f"partitions[{index}]"
        if not isinstance(entry, dict):
            raise CliError(f"{where} is not an object")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get(
            "replicas")
        if not isinstance(topic, str) or not topic:
            raise CliError(f"{where}: topic must be a non-empty string")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise CliError(f"{where}: partition must be an integer >= 0")
        if (not isinstance(replicas, list) or not replicas or not all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas)):
            raise CliError(f"{where}: replicas must be a non-empty list of broker ids")
        if len(set(replicas)) != len(replicas):
            raise CliError(f"{where}: replicas {replicas} name a broker twice")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (not isinstance(log_dirs, list) or len(log_dirs) != len(
                replicas) or any(d != "any" for d in log_dirs)):
            raise CliError(f"{where}: log_dirs other than \"any\" are not supported")
        if (topic, partition) in out:
            raise CliError(f"{where}: {topic}-{partition} appears twice")
        out[(topic, partition)] = tuple(replicas)
    if not out:
        raise CliError("the reassignment file names no partitions")
    return out


def parse_topics_to_move(document: Any) -> list[str]:
    if not isinstance(document, dict) or not isinstance(document.get("topics"), list):
        raise CliError('a topics-to-move file is {"version": 1, "topics": [{"topic": "t"}]}')
    names = []
    for index, entry in enumerate(document["topics"]):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise CliError(f"topics[{index}]: topic must be a non-empty string")
        names.append(name)
    if not names:
        raise CliError("the topics-to-move file names no topics")
    return names


def _to_json(assignment: Assignment) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in assignment.items()]}, separators=(",", ":"))


def _names(partitions: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)


async def _current(admin: _Admin, topics: Sequence[str]) -> Assignment:
    """The replicas of every partition of ``topics`` (Metadata); raises
    `CliError` for a topic that does not exist."""
    response = await _metadata(admin, sorted(set(topics)))
    out: Assignment = {}
    for topic in response.topics:
        if topic.error_code != ErrorCode.none:
            raise CliError(f"cannot describe topic {topic.name}: {_error_name(topic.error_code)}")
        for part in sorted(topic.partitions, key=lambda p: int(p.partition_index)):
            out[(str(topic.name), int(part.partition_index))] = tuple(
                int(b) for b in part.replica_nodes)
    return out


async def ongoing_reassignments(admin: _Admin, partitions: Sequence[tuple[str, int]] | None) -> dict[
        tuple[str, int], lpr_resp.OngoingPartitionReassignment]:
    topics: dict[str, list[int]] = {}
    for t, p in partitions or ():
        topics.setdefault(t, []).append(p)
    request = lpr_req.ListPartitionReassignmentsRequest(
        topics=None if partitions is None else tuple(
            lpr_req.ListPartitionReassignmentsTopics(
                name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
            for t, ps in topics.items()))
    response: lpr_resp.ListPartitionReassignmentsResponse = await admin.first(
        request, 0, lambda r: _not_controller([r.error_code]))
    _check(response, "list partition reassignments")
    return {(str(t.name), int(p.partition_index)): p for t in response.topics
            for p in t.partitions}


async def _alter(
    admin: _Admin, targets: dict[tuple[str, int], tuple[int, ...] | None], timeout_ms: int,
    allow_rf_change: bool,
) -> list[tuple[str, int, int, str | None]]:
    """AlterPartitionReassignments: (topic, partition, error code, message) each."""
    topics: dict[str, list[apr_req.ReassignablePartition]] = {}
    for (t, p), replicas in targets.items():
        topics.setdefault(t, []).append(apr_req.ReassignablePartition(
            partition_index=i32(p),
            replicas=None if replicas is None else tuple(BrokerId(b) for b in replicas)))
    request = apr_req.AlterPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        allow_replication_factor_change=allow_rf_change,
        topics=tuple(apr_req.ReassignableTopic(name=TopicName(t), partitions=tuple(ps))
                     for t, ps in topics.items()))
    response: apr_resp.AlterPartitionReassignmentsResponse = await admin.first(
        request, 1, lambda r: _not_controller([r.error_code]))
    _check(response, "reassign partitions")
    return [(str(t.name), int(p.partition_index), int(p.error_code), p.error_message)
            for t in response.responses for p in t.partitions]


def _report(results: list[tuple[str, int, int, str | None]], done: str, what: str) -> int:
    ok = [(t, p) for t, p, code, _ in results if code == ErrorCode.none]
    failed = [(t, p, code, message) for t, p, code, message in results
              if code != ErrorCode.none]
    if ok:
        print(f"Successfully {done} partition reassignment(s) for {_names(ok)}")
    for t, p, code, message in failed:
        print(f"Error {what} {t}-{p}: {_error_name(code)}" + (f": {message}" if message else ""),
              file=sys.stderr)
    if failed:
        raise CliError(f"{len(failed)} partition(s) could not be {done.split()[0]}")
    return 0


def cmd_reassign_partitions(args: argparse.Namespace) -> int:
    modes = [m for m in ("generate", "execute", "verify", "cancel", "list") if getattr(args, m)]
    if len(modes) != 1:
        raise CliError("give exactly one of --generate, --execute, --verify, --cancel, --list")
    mode = modes[0]
    reassignment: Assignment = {}
    if mode in ("execute", "verify", "cancel"):
        if not args.reassignment_json_file:
            raise CliError(f"--{mode} needs --reassignment-json-file")
        reassignment = parse_reassignment(_load_json(args.reassignment_json_file))
    topics_to_move: list[str] = []
    broker_list: list[int] = []
    if mode == "generate":
        if not args.topics_to_move_json_file or not args.broker_list:
            raise CliError("--generate needs --topics-to-move-json-file and --broker-list")
        topics_to_move = parse_topics_to_move(_load_json(args.topics_to_move_json_file))
        try:
            broker_list = sorted({int(b) for b in args.broker_list.split(",")})
        except ValueError:
            raise CliError(f"--broker-list {args.broker_list!r} is not a comma-separated "
                           "list of broker ids") from None

    async def body(admin: _Admin) -> int:
        if mode == "list":
            ongoing = await ongoing_reassignments(admin, None)
            if not ongoing:
                print("No partition reassignments found.")
                return 0
            print("Current partition reassignments:")
            for (t, p), r in sorted(ongoing.items()):
                print(f"{t}-{p}: replicas: {_ids(r.replicas)}. adding: "
                      f"{_ids(r.adding_replicas)}. removing: {_ids(r.removing_replicas)}.")
            return 0
        if mode == "generate":
            current = await _current(admin, topics_to_move)
            print(f"Current partition replica assignment\n{_to_json(current)}\n")
            print(f"Proposed partition reassignment configuration\n"
                  f"{_to_json(_propose(current, broker_list))}")
            return 0
        if mode == "verify":
            return await _verify(admin, reassignment)
        if mode == "cancel":
            results = await _alter(admin, dict.fromkeys(reassignment), args.timeout_ms, True)
            return _report(results, "cancelled", "cancelling the reassignment of")
        # execute
        if not args.additional:
            ongoing = await ongoing_reassignments(admin, None)
            if ongoing:
                raise CliError(
                    "cannot execute because there is an existing partition reassignment "
                    f"({_names(sorted(ongoing))}); use --additional to start this one as well")
        current = await _current(admin, sorted({t for t, _ in reassignment}))
        missing = [tp for tp in reassignment if tp not in current]
        if missing:
            raise CliError(f"no such partition: {_names(missing)}")
        print("Current partition replica assignment\n\n"
              f"{_to_json({tp: current[tp] for tp in reassignment})}\n\n"
              "Save this to use as the --reassignment-json-file option during rollback")
        results = await _alter(admin, dict(reassignment), args.timeout_ms,
                               not args.disallow_replication_factor_change)
        return _report(results, "started", "starting the reassignment of")

    return _run_admin(args, body)


def _ids(ids: Sequence[Any]) -> str:
    return ",".join(str(int(b)) for b in ids)


async def _verify(admin: _Admin, reassignment: Assignment) -> int:
    ongoing = await ongoing_reassignments(admin, list(reassignment))
    current = await _current(admin, sorted({t for t, _ in reassignment}))
    print("Status of partition reassignment:")
    for (t, p), target in reassignment.items():
        if (t, p) in ongoing:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
        elif current.get((t, p)) == target:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            now = current.get((t, p))
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                  f"{list(now) if now is not None else 'unknown'} rather than {list(target)}.")
    return 0


def _propose(current: Assignment, brokers: list[int]) -> Assignment:
    """The placement a new topic would get, per topic, over ``brokers``, with
    each partition's current replication factor."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), replicas in current.items():
        by_topic.setdefault(t, []).append((p, len(replicas)))
    out: Assignment = {}
    placement = [PlacementBroker(b) for b in brokers]
    for topic, parts in by_topic.items():
        rf = max(n for _, n in parts)
        seed = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog-reassign:{topic}").int
        try:
            placed = place_replicas(placement, max(p for p, _ in parts) + 1, rf,
                                    start=seed & 0xFFFF_FFFF, shift=seed >> 96)
        except PlacementError as e:
            raise CliError(f"cannot place {topic}: {e}") from None
        for p, _n in sorted(parts):
            out[(topic, p)] = tuple(placed[p])
    return out


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "reassign-partitions",
        help="move partition replicas between brokers (kafka-reassign-partitions.sh)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true",
                      help="propose an assignment of --topics-to-move-json-file over "
                      "--broker-list")
    mode.add_argument("--execute", action="store_true", help="start the file's reassignment")
    mode.add_argument("--verify", action="store_true",
                      help="report whether the file's reassignment has finished")
    mode.add_argument("--cancel", action="store_true",
                      help="cancel the file's reassignment (back to the original replicas)")
    mode.add_argument("--list", action="store_true", help="every reassignment in progress")
    parser.add_argument("--reassignment-json-file", metavar="FILE")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE")
    parser.add_argument("--broker-list", metavar="ID[,ID...]")
    parser.add_argument("--additional", action="store_true",
                        help="execute even though other reassignments are in progress")
    parser.add_argument("--disallow-replication-factor-change", action="store_true",
                        help="refuse targets that change a partition's replica count (KIP-860)")
    _admin_options(parser, broker=True)
    parser.set_defaults(func=cmd_reassign_partitions)
