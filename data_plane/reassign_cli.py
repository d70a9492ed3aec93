"""``raftlog reassign-partitions``: move partition replicas between brokers,
like kafka-reassign-partitions.sh (KIP-455: AlterPartitionReassignments,
ListPartitionReassignments).

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: print the
  current assignment of the topics and a proposed one over the listed
  brokers (the placement new topics get), as reassignment JSON;
- ``--execute --reassignment-json-file F``: print the current assignment
  (keep it to roll back), then start the reassignment. Refused while another
  is in progress unless ``--additional``. ``--disallow-replication-factor-change``
  refuses a target of another size (KIP-860). ``--throttle N`` first bounds
  the catch-up of the new replicas to N bytes/s (see below);
- ``--verify --reassignment-json-file F``: for each partition in the file,
  whether its reassignment is still in progress or done (or neither: the
  replicas differ from the file's). Once none is in progress, the
  replication throttles are removed unless ``--preserve-throttles``;
- ``--cancel --reassignment-json-file F``: cancel the reassignments of the
  file's partitions (each goes back to its original replicas), then remove
  the throttles unless ``--preserve-throttles``;
- ``--list``: every reassignment in progress.

The JSON is Kafka's: ``{"version": 1, "partitions": [{"topic": "t",
"partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/data/2"]}]}``
(``log_dirs`` optional: per replica, ``any`` for the broker's own choice, or
an absolute path of one of that broker's ``log.dirs``, to which the
replica then moves with AlterReplicaLogDirs, as Kafka's tool does: sent
before the reassignment, and retried for new replicas until they exist or
``--timeout`` passes; ``--verify`` reports those moves too). Topics to
move: ``{"version": 1, "topics": [{"topic": "t"}]}``.

Throttles (KIP-73), as kafka-reassign-partitions.sh sets them: for each
partition that gains a replica, every replica it has now may lead, so each
is listed in its topic's ``leader.replication.throttled.replicas``, and each
replica being added is listed in ``follower.replication.throttled.replicas``
(``partition:broker,...``; the topic's whole list is SET, and partitions of
reassignments already in progress count too, so ``--additional`` keeps
their throttles). Every broker those lists name gets
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
N. All of it is validated, then set, before the reassignment starts: a
refused change starts nothing. The throttles stay until ``--verify`` sees
the file's reassignment done (or ``--cancel``) and deletes the rates on every
broker and the lists on the file's topics.

``--replica-alter-log-dirs-throttle N`` (with ``--execute`` and ``log_dirs``)
sets ``replica.alter.log.dirs.io.max.bytes.per.second`` N on each broker
with a replica moving between its log dirs, before the moves start. It is
deleted with the other rates, by ``--verify`` once the reassignment and the
file's log-dir moves are done (or by ``--cancel``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.alter_partition_reassignments.v1 import request as apr_req
from kio.schema.alter_partition_reassignments.v1 import response as apr_resp
from kio.schema.alter_replica_log_dirs.v2 import request as arld_req
from kio.schema.alter_replica_log_dirs.v2 import response as arld_resp
from kio.schema.describe_log_dirs.v4 import request as dld_req
from kio.schema.describe_log_dirs.v4 import response as dld_resp
from kio.schema.list_partition_reassignments.v0 import request as lpr_req
from kio.schema.list_partition_reassignments.v0 import response as lpr_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from metadata_quorum.controller.configuration_control import (
    ALTER_LOG_DIRS_IO_MAX_RATE,
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
)
from metadata_quorum.controller.placement import PlacementBroker, PlacementError, place_replicas
from raftlog.net.errors import ErrorCode, TransportError, UnsupportedVersionError

from .admin_cli import (
    _BROKER_RESOURCE,
    _DELETE,
    _SET,
    _TOPIC_RESOURCE,
    CliError,
    ConfigOp,
    ConfigResource,
    _Admin,
    _admin_options,
    _check,
    _error_name,
    _metadata,
    _not_controller,
    _run_admin,
    incremental_alter_configs,
)

__all__ = (
    "NO_THROTTLE",
    "PartitionMove",
    "ThrottlePlan",
    "ongoing_reassignments",
    "parse_reassignment",
    "parse_topics_to_move",
    "partition_moves",
    "register",
    "throttle_plan",
)

Assignment = dict[tuple[str, int], tuple[int, ...]]

#: ``--throttle``'s default: set no throttle.
NO_THROTTLE: Final = -1


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
                replicas) or not all(isinstance(d, str) and d for d in log_dirs)):
            raise CliError(f"{where}: log_dirs must list a directory (or \"any\") for each "
                           "replica")
        if log_dirs is not None and any(d != ANY_LOG_DIR and not d.startswith("/")
                                        for d in log_dirs):
            raise CliError(f"{where}: log_dirs must be absolute paths or \"any\"")
        if (topic, partition) in out:
            raise CliError(f"{where}: {topic}-{partition} appears twice")
        out[(topic, partition)] = tuple(replicas)
    if not out:
        raise CliError("the reassignment file names no partitions")
    return out


#: A replica whose log dir is the broker's choice (reassignment JSON).
ANY_LOG_DIR: Final = "any"

#: (topic, partition, broker) -> the log dir the replica is to move to.
ReplicaLogDirs = dict[tuple[str, int, int], str]


def parse_replica_log_dirs(document: Any) -> ReplicaLogDirs:
    """The ``log_dirs`` of a reassignment file (checked by
    `parse_reassignment` first) other than ``any``, per replica."""
    out: ReplicaLogDirs = {}
    for entry in document["partitions"]:
        for broker, log_dir in zip(entry["replicas"], entry.get("log_dirs") or (), strict=False):
            if log_dir != ANY_LOG_DIR:
                out[(entry["topic"], entry["partition"], broker)] = log_dir
    return out


def _replica_names(replicas: Sequence[tuple[str, int, int]]) -> str:
    """Kafka's ``TopicPartitionReplica`` spelling: ``topic-partition-broker``."""
    return ",".join(f"{t}-{p}-{b}" for t, p, b in sorted(replicas))


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


# --- throttles (pure) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """The replicas of a partition that send its log (``sources``: those it
    had before the reassignment; any of them may lead) and those that copy
    it (``destinations``: the replicas being added, none of them a source)."""

    sources: frozenset[int]
    destinations: frozenset[int]

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a partition move needs a replica to copy from")
        if self.sources & self.destinations:
            raise ValueError(f"brokers {sorted(self.sources & self.destinations)} are both a "
                             "source and a destination")


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    """The throttle configs of a reassignment: per topic, the values of
    ``leader.replication.throttled.replicas`` and
    ``follower.replication.throttled.replicas`` (``partition:broker,...``,
    sorted by partition then broker), and the brokers that get the rates."""

    leader: Mapping[str, str]
    follower: Mapping[str, str]
    brokers: tuple[int, ...]


def partition_moves(
    current: Mapping[tuple[str, int], Sequence[int]],
    target: Mapping[tuple[str, int], Sequence[int]],
    ongoing: Mapping[tuple[str, int], tuple[Sequence[int], Sequence[int]]],
) -> dict[tuple[str, int], PartitionMove]:
    """The partitions that will copy their log to a new replica once
    ``target`` is started, and how. ``current``: the replicas of each
    partition of ``target`` now; ``ongoing``: (replicas, adding replicas) of
    each reassignment in progress. A partition being reassigned already
    keeps its original replicas (its replicas but the adding ones) as the
    sources; a retargeted one copies to what its new target adds to them.
    Partitions that only drop or reorder replicas copy nothing and are left
    out. Raises `ValueError` for a partition of ``target`` in neither
    ``current`` nor ``ongoing``."""
    moves: dict[tuple[str, int], PartitionMove] = {}
    for tp, (replicas, adding) in ongoing.items():
        sources = frozenset(replicas) - frozenset(adding)
        moves[tp] = PartitionMove(sources, frozenset(adding))
    for tp, replicas in target.items():
        if tp in moves:
            sources = moves[tp].sources
        elif tp in current:
            sources = frozenset(current[tp])
        else:
            raise ValueError(f"no current replicas for {tp[0]}-{tp[1]}")
        moves[tp] = PartitionMove(sources, frozenset(replicas) - sources)
    return {tp: move for tp, move in moves.items() if move.destinations}


def throttle_plan(moves: Mapping[tuple[str, int], PartitionMove]) -> ThrottlePlan:
    """The throttled replica lists and throttled brokers of ``moves``: each
    source a leader replica, each destination a follower replica, every
    broker of either a throttled broker."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (topic, partition), move in sorted(moves.items()):
        leader.setdefault(topic, []).extend(f"{partition}:{b}" for b in sorted(move.sources))
        follower.setdefault(topic, []).extend(
            f"{partition}:{b}" for b in sorted(move.destinations))
        brokers |= move.sources | move.destinations
    return ThrottlePlan(
        leader={t: ",".join(items) for t, items in leader.items()},
        follower={t: ",".join(items) for t, items in follower.items()},
        brokers=tuple(sorted(brokers)))


def throttle_configs(plan: ThrottlePlan, rate: int) -> list[ConfigResource]:
    """The IncrementalAlterConfigs resources that set ``plan`` with the
    rate ``rate`` bytes/s: each topic's lists, then each broker's rates."""
    topics = [(_TOPIC_RESOURCE, t, [(LEADER_THROTTLED_REPLICAS, _SET, plan.leader[t]),
                                    (FOLLOWER_THROTTLED_REPLICAS, _SET, plan.follower[t])])
              for t in sorted(plan.leader)]
    brokers = [(_BROKER_RESOURCE, str(b), [(LEADER_THROTTLED_RATE, _SET, str(rate)),
                                           (FOLLOWER_THROTTLED_RATE, _SET, str(rate))])
               for b in plan.brokers]
    return [*topics, *brokers]


def clear_throttle_configs(topics: Sequence[str], brokers: Sequence[int]) -> list[ConfigResource]:
    """The IncrementalAlterConfigs resources that delete the rates of
    ``brokers`` and the throttled replica lists of ``topics``."""
    rates: Sequence[ConfigOp] = [(LEADER_THROTTLED_RATE, _DELETE, None),
                                 (FOLLOWER_THROTTLED_RATE, _DELETE, None),
                                 (ALTER_LOG_DIRS_IO_MAX_RATE, _DELETE, None)]
    lists: Sequence[ConfigOp] = [(LEADER_THROTTLED_REPLICAS, _DELETE, None),
                                 (FOLLOWER_THROTTLED_REPLICAS, _DELETE, None)]
    return ([(_BROKER_RESOURCE, str(b), rates) for b in brokers]
            + [(_TOPIC_RESOURCE, t, lists) for t in topics])


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
    _check_throttle_options(mode, args.throttle, args.preserve_throttles)
    _check_log_dir_throttle(mode, args.replica_alter_log_dirs_throttle)
    reassignment: Assignment = {}
    log_dirs: ReplicaLogDirs = {}
    if mode in ("execute", "verify", "cancel"):
        if not args.reassignment_json_file:
            raise CliError(f"--{mode} needs --reassignment-json-file")
        document = _load_json(args.reassignment_json_file)
        reassignment = parse_reassignment(document)
        log_dirs = parse_replica_log_dirs(document)
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
            await _verify(admin, reassignment, log_dirs, args.preserve_throttles)
            return 0
        if mode == "cancel":
            return await _cancel(admin, reassignment, args)
        return await _execute(admin, reassignment, args, log_dirs)

    return _run_admin(args, body)


def _check_throttle_options(mode: str, throttle: int, preserve_throttles: bool) -> None:
    """Raise `CliError` for a throttle option its mode does not take, or a
    rate that is neither -1 (no throttle) nor a number of bytes/s."""
    if throttle != NO_THROTTLE:
        if mode != "execute":
            raise CliError("--throttle goes with --execute")
        if throttle < 0:
            raise CliError(f"--throttle {throttle}: give a rate in bytes/s (>= 0), or "
                           f"{NO_THROTTLE} for no throttle")
    if preserve_throttles and mode not in ("verify", "cancel"):
        raise CliError("--preserve-throttles goes with --verify or --cancel")


def _check_log_dir_throttle(mode: str, throttle: int) -> None:
    if throttle == NO_THROTTLE:
        return
    if mode != "execute":
        raise CliError("--replica-alter-log-dirs-throttle goes with --execute")
    if throttle < 0:
        raise CliError(f"--replica-alter-log-dirs-throttle {throttle}: give a rate in bytes/s "
                       f"(>= 0), or {NO_THROTTLE} for no throttle")


async def _execute(admin: _Admin, reassignment: Assignment, args: argparse.Namespace,
                   log_dirs: ReplicaLogDirs | None = None) -> int:
    ongoing = await ongoing_reassignments(admin, None)
    if ongoing and not args.additional:
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
    if args.throttle != NO_THROTTLE:
        # Before the reassignment starts: no byte of the catch-up goes unthrottled.
        in_progress = {tp: ([int(b) for b in r.replicas], [int(b) for b in r.adding_replicas])
                       for tp, r in ongoing.items()}
        try:
            plan = throttle_plan(partition_moves(current, reassignment, in_progress))
        except ValueError as e:  # a reassignment in progress that adds every replica
            raise CliError(f"cannot compute the throttles: {e}") from None
        try:
            await _set_throttles(admin, plan, args.throttle)
        except CliError as e:
            raise CliError(f"{e}; the reassignment was not started") from None
    log_dirs = log_dirs or {}
    if args.replica_alter_log_dirs_throttle != NO_THROTTLE:
        await _set_log_dir_throttle(admin, log_dirs, args.replica_alter_log_dirs_throttle)
    pending: ReplicaLogDirs = {}
    if log_dirs:
        # Kafka's order: the replicas that exist start moving first (a new
        # one is REPLICA_NOT_AVAILABLE until the reassignment creates it).
        pending = await _alter_log_dirs(admin, log_dirs)
    results = await _alter(admin, dict(reassignment), args.timeout_ms,
                           not args.disallow_replication_factor_change)
    _report(results, "started", "starting the reassignment of")
    if log_dirs:
        deadline = time.monotonic() + args.timeout_ms / 1000
        while pending and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            pending = await _alter_log_dirs(admin, pending)
        started = sorted(set(log_dirs) - set(pending))
        if started:
            print(f"Successfully started log directory move{'s' if len(started) > 1 else ''} "
                  f"for: {_replica_names(started)}")
        if pending:
            raise CliError(
                f"Timed out before log directory move{'s' if len(pending) > 1 else ''} could "
                f"be started for: {_replica_names(sorted(pending))}")
    return 0


async def _brokers(admin: _Admin) -> dict[int, tuple[str, int]]:
    metadata = await _metadata(admin, None)
    return {int(b.node_id): (str(b.host), int(b.port)) for b in metadata.brokers}


async def _alter_log_dirs(admin: _Admin, moves: ReplicaLogDirs) -> ReplicaLogDirs:
    """AlterReplicaLogDirs to each broker for its replicas in ``moves``;
    returns those not started yet because the replica does not exist there
    (REPLICA_NOT_AVAILABLE). Raises `CliError` for any other error."""
    known = await _brokers(admin)
    by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
    for (topic, partition, broker), log_dir in moves.items():
        by_broker.setdefault(broker, {}).setdefault(log_dir, {}).setdefault(
            topic, []).append(partition)
    pending: ReplicaLogDirs = {}
    failed = []
    for broker, dirs in sorted(by_broker.items()):
        if broker not in known:
            raise CliError(f"broker {broker} is not registered (or is fenced): cannot move "
                           "its replicas' log dirs")
        request = arld_req.AlterReplicaLogDirsRequest(dirs=tuple(
            arld_req.AlterReplicaLogDir(path=path, topics=tuple(
                arld_req.AlterReplicaLogDirTopic(
                    name=TopicName(t), partitions=tuple(i32(p) for p in sorted(ps)))
                for t, ps in topics.items()))
            for path, topics in dirs.items()))
        try:
            response: arld_resp.AlterReplicaLogDirsResponse = await admin.send_to(
                known[broker], request, 2)
        except (TransportError, UnsupportedVersionError) as exc:
            raise CliError(f"broker {broker}: {exc}") from None
        for result in response.results:
            for part in result.partitions:
                replica = (str(result.topic_name), int(part.partition_index), broker)
                if part.error_code == ErrorCode.replica_not_available:
                    pending[replica] = moves[replica]
                elif part.error_code != ErrorCode.none:
                    failed.append(f"{_replica_names([replica])}: {_error_name(part.error_code)}")
    if failed:
        raise CliError("cannot move log dirs: " + "; ".join(failed))
    return pending


async def _verify_log_dirs(admin: _Admin, log_dirs: ReplicaLogDirs) -> int:
    """Kafka's "Status of replica log directory movement", from each
    broker's DescribeLogDirs: where each replica is, and where it is going.
    Returns how many of the moves are still in progress."""
    known = await _brokers(admin)
    current: dict[tuple[str, int, int], str] = {}
    future: dict[tuple[str, int, int], str] = {}
    for broker in sorted({b for _, _, b in log_dirs}):
        if broker not in known:
            continue
        try:
            response: dld_resp.DescribeLogDirsResponse = await admin.send_to(
                known[broker], dld_req.DescribeLogDirsRequest(topics=None), 4)
        except (TransportError, UnsupportedVersionError):
            continue
        for result in response.results:
            for described in result.topics:
                for part in described.partitions:
                    replica = (str(described.name), int(part.partition_index), broker)
                    (future if part.is_future_key else current)[replica] = str(result.log_dir)
    print("Status of replica log directory movement:")
    moving = 0
    for replica in sorted(log_dirs):
        target = log_dirs[replica]
        topic, partition, broker = replica
        name = _replica_names([replica])
        if replica not in current:
            print(f"Partition {topic}-{partition} is not found in any live log dir on broker "
                  f"{broker}. There is likely an offline log directory on the broker.")
        elif replica in future:
            moving += 1
            if future[replica] == target:
                print(f"Reassignment of replica {name} is still in progress.")
            else:
                print(f"Partition {topic}-{partition} on broker {broker} is being moved to log "
                      f"dir {future[replica]} instead of {target}.")
        elif current[replica] == target:
            print(f"Reassignment of replica {name} completed successfully.")
        else:
            print(f"Partition {topic}-{partition} on broker {broker} is not being moved from "
                  f"log dir {current[replica]} to {target}.")
    return moving


async def _cancel(admin: _Admin, reassignment: Assignment, args: argparse.Namespace) -> int:
    results = await _alter(admin, dict.fromkeys(reassignment), args.timeout_ms, True)
    try:
        _report(results, "cancelled", "cancelling the reassignment of")
    except CliError as e:
        if args.preserve_throttles:
            raise
        raise CliError(f"{e}; the throttles, if any, were left in place (--verify removes "
                       "them once none of the file's partitions is being reassigned)") from None
    if not args.preserve_throttles:
        await _clear_throttles(admin, reassignment)
    return 0


async def _set_throttles(admin: _Admin, plan: ThrottlePlan, rate: int) -> None:
    """Set ``plan`` with ``rate`` bytes/s; raises `CliError` if refused."""
    if not plan.brokers:
        print("No partition gains a replica: there is nothing to throttle.")
        return
    print("Warning: the throttle stays until --verify reports this reassignment complete "
          "and removes it; run --verify until it does, or replication stays bounded.")
    if rate == 0:
        print("Warning: a throttle of 0 B/s stops the new replicas from catching up.",
              file=sys.stderr)
    await _alter_configs_or_raise(admin, throttle_configs(plan, rate),
                                  "set the replication throttles")
    print(f"The inter-broker throttle limit was set to {rate} B/s")


async def _set_log_dir_throttle(admin: _Admin, log_dirs: ReplicaLogDirs, rate: int) -> None:
    """Set ``replica.alter.log.dirs.io.max.bytes.per.second`` ``rate`` on
    every broker with a replica in ``log_dirs``, before the moves start."""
    brokers = sorted({b for _, _, b in log_dirs})
    if not brokers:
        print("No replica moves between log dirs: there is nothing to throttle.")
        return
    await _alter_configs_or_raise(
        admin, [(_BROKER_RESOURCE, str(b), [(ALTER_LOG_DIRS_IO_MAX_RATE, _SET, str(rate))])
                for b in brokers],
        "set the log-dir move throttle")
    print(f"The replica-alter-dir throttle limit was set to {rate} B/s")


async def _clear_throttles(admin: _Admin, reassignment: Assignment) -> None:
    """Delete both rates on every broker and both throttled replica lists on
    each topic of ``reassignment`` that still exists. The brokers: those
    Metadata lists (the live ones), the replicas of the file's topics and
    the file's targets, so a fenced broker that was throttled is cleared too
    (deleting a rate a broker does not have changes nothing)."""
    metadata = await _metadata(admin, sorted({t for t, _ in reassignment}))
    topics = [str(t.name) for t in metadata.topics if t.error_code == ErrorCode.none]
    brokers = {int(b.node_id) for b in metadata.brokers}
    brokers.update(int(r) for t in metadata.topics for p in t.partitions
                   for r in p.replica_nodes)
    brokers.update(b for replicas in reassignment.values() for b in replicas)
    print(f"Clearing broker-level throttles on brokers {_ids(sorted(brokers))}")
    for topic in sorted(topics):
        print(f"Clearing topic-level throttles on topic {topic}")
    await _alter_configs_or_raise(admin, clear_throttle_configs(sorted(topics), sorted(brokers)),
                                  "clear the replication throttles")


async def _alter_configs_or_raise(
    admin: _Admin, resources: Sequence[ConfigResource], what: str
) -> None:
    """Validate every change of ``resources`` (IncrementalAlterConfigs,
    validate_only), then make them. Raises `CliError` naming each refused
    resource: after a refused validation nothing was changed; should the
    real change still be refused for some (a concurrent change), the error
    says how many resources were changed."""
    for validate_only in (True, False):
        answers = await incremental_alter_configs(admin, resources, validate_only=validate_only)
        refused = [a for a in answers if a.error_code != ErrorCode.none]
        if not refused:
            continue
        reasons = "; ".join(
            f"{_resource_label(int(a.resource_type), str(a.resource_name))}: "
            f"{_error_name(a.error_code)}" + (f": {a.error_message}" if a.error_message else "")
            for a in refused)
        outcome = ("nothing was changed" if validate_only else
                   f"{len(answers) - len(refused)} of {len(answers)} resources were changed")
        raise CliError(f"cannot {what}: {reasons} ({outcome})")


def _resource_label(resource_type: int, name: str) -> str:
    return f"topic {name}" if resource_type == _TOPIC_RESOURCE else f"broker {name}"


def _ids(ids: Sequence[Any]) -> str:
    return ",".join(str(int(b)) for b in ids)


async def _verify(admin: _Admin, reassignment: Assignment, log_dirs: ReplicaLogDirs,
                  preserve_throttles: bool) -> None:
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
    in_progress = [tp for tp in reassignment if tp in ongoing]
    moving = await _verify_log_dirs(admin, log_dirs) if log_dirs else 0
    if preserve_throttles:
        return
    if in_progress or moving:
        what = [f"{len(in_progress)} partition(s) are being reassigned"] if in_progress else []
        if moving:
            what.append(f"{moving} replica(s) are moving between log dirs")
        print(f"The throttles, if any, stay while {' and '.join(what)}: run --verify "
              "again later.")
    else:
        await _clear_throttles(admin, reassignment)


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
    parser.add_argument("--throttle", type=int, default=NO_THROTTLE, metavar="BYTES_PER_S",
                        help="execute: bound the replication of the moving partitions to this "
                        "many bytes/s per broker (KIP-73), set before the reassignment starts; "
                        "with --additional, updates the rate of those in progress. Run --verify "
                        "until done to remove it. Default -1: no throttle")
    parser.add_argument("--replica-alter-log-dirs-throttle", type=int, default=NO_THROTTLE,
                        metavar="BYTES_PER_S",
                        help="execute: bound each broker's copying of replicas between its log "
                        "dirs (the file's log_dirs) to this many bytes/s "
                        "(replica.alter.log.dirs.io.max.bytes.per.second). Run --verify until "
                        "done to remove it. Default -1: no throttle")
    parser.add_argument("--preserve-throttles", action="store_true",
                        help="verify, cancel: leave the replication throttles in place")
    _admin_options(parser, broker=True)
    parser.set_defaults(func=cmd_reassign_partitions)
