"""The cluster subcommands of the `raftlog` CLI (registered by `data_plane.cli`).

- ``server start FILE``: run a node in the foreground (`data_plane.node`);
- ``storage format --cluster-id ID --config FILE [--ignore-formatted]`` and
  ``storage random-uuid``, like kafka-storage.sh;
- ``quorum describe --status|--replication --bootstrap-controller HOST:PORT``
  or ``--bootstrap-server HOST:PORT`` (a broker forwards DescribeQuorum to
  the active controller), printing what kafka-metadata-quorum.sh prints;
- ``topics create|list|describe|alter|delete --bootstrap-controller HOST:PORT`` or
  ``--bootstrap-server HOST:PORT`` (a broker: Metadata, with live leaders
  and ISRs; CreateTopics/CreatePartitions/DeleteTopics forwarded), printing
  what kafka-topics.sh prints; ``alter --partitions N`` adds partitions;
  ``create``, ``alter`` and ``delete`` return once every reachable
  bootstrap node's Metadata shows the change (within ``--timeout-ms``), so
  the next command sees it whichever node answers;
- ``configs describe|alter --topic T | --broker ID | --broker-defaults`` with
  ``--add-config k=v,k2=[a,b]`` and ``--delete-config k,k2``, like
  kafka-configs.sh (IncrementalAlterConfigs); ``--client``/``--user``/``--ip``
  for client quotas (`data_plane.quotas_cli`) and ``--user NAME`` for SCRAM
  credentials (`data_plane.scram_cli`);
- ``delete-records --topic T --partition P --offset O`` (-1: the high
  watermark), like kafka-delete-records.sh, sent to the partition's leader;
- ``get-offsets`` (`data_plane.offsets_cli`), like kafka-get-offsets.sh,
  ``log-dirs --describe`` (`data_plane.log_dirs_cli`), like kafka-log-dirs.sh,
  and ``delegation-tokens`` (`data_plane.delegation_tokens_cli`), like
  kafka-delegation-tokens.sh;
- ``leader-election --election-type preferred|unclean --topic T --partition P
  | --all-topic-partitions``, like kafka-leader-election.sh (ElectLeaders);
- ``reassign-partitions --generate|--execute|--verify|--cancel|--list``, like
  kafka-reassign-partitions.sh (`data_plane.reassign_cli`);
- ``transactions list|describe|describe-producers|find-hanging|abort``, like
  kafka-transactions.sh (`data_plane.transactions_cli`);
- ``cluster up|status|down`` (`data_plane.cluster_cli`), ``produce`` and
  ``consume`` (`data_plane.console_cli`);
- ``cluster unregister --id N --bootstrap-server|--bootstrap-controller
  HOST:PORT``, like kafka-cluster.sh unregister (UnregisterBroker);
- ``cluster describe --bootstrap-controller HOST:PORT``: the cluster id, the
  active controller and every registered broker with its address, rack and
  fenced state (DescribeCluster v2 with fenced brokers, KIP-1073);
- ``metadata dump FILE`` (`metadata_quorum.dump`).

``--bootstrap-controller`` takes one or more comma-separated controllers.
DescribeQuorum is answered by the Raft leader only and writes by the active
controller only: the client tries each address (and, once known, the
leader's) until one answers, within ``--timeout-ms``. Every failure is
reported as a `CliError` (one line, exit 2).

Every command that takes ``--bootstrap-server`` (here and in the other
``*_cli`` modules) also takes Kafka's ``--command-config FILE``: the client
properties (`data_plane.client_config`) its clients connect with to a TLS
or SASL listener; so does every command that takes
``--bootstrap-controller``, for the controller listener. A refused login,
a broker certificate that cannot be verified, or an authorizer's refusal is
not retried: it fails the command at once, as in Kafka's tools.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from kio.schema.create_partitions.v3 import request as cp_req
from kio.schema.create_partitions.v3 import response as cp_resp
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.delete_records.v2 import request as dr_req
from kio.schema.delete_records.v2 import response as dr_resp
from kio.schema.delete_topics.v6 import request as dt_req
from kio.schema.delete_topics.v6 import response as dt_resp
from kio.schema.describe_cluster.v0 import request as dc_req
from kio.schema.describe_cluster.v0 import response as dc_resp
from kio.schema.describe_cluster.v2 import request as dc_req_v2
from kio.schema.describe_cluster.v2 import response as dc_resp_v2
from kio.schema.describe_configs.v4 import request as dcfg_req
from kio.schema.describe_configs.v4 import response as dcfg_resp
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.describe_topic_partitions.v0 import request as dtp_req
from kio.schema.describe_topic_partitions.v0 import response as dtp_resp
from kio.schema.elect_leaders.v2 import request as el_req
from kio.schema.elect_leaders.v2 import response as el_resp
from kio.schema.incremental_alter_configs.v1 import request as iac_req
from kio.schema.incremental_alter_configs.v1 import response as iac_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import BrokerId, TopicName
from kio.schema.unregister_broker.v0 import request as ub_req
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from metadata_quorum.bootstrap import BootstrapError, parse_add_scram
from metadata_quorum.features import NEW_CLUSTER_FEATURES, parse_feature
from metadata_quorum.topic_names import INTERNAL_TOPICS
from raftlog import kafka_uuid
from raftlog.consensus.messages import DescribeQuorumRequest
from raftlog.net import KafkaProtocolClient
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import (
    ConnectFailedError,
    DisconnectedError,
    ErrorCode,
    SaslAuthenticationFailedError,
    TlsHandshakeFailedError,
    TransportError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from raftlog.net.registry import KIO_API_KEYS, api_name, kio_version_range
from raftlog.runtime import event_loop, wire

from .client_config import ClientConfigError, ClientSecurity, load_command_config
from .config import ConfigError, load_config
from .oauth_jwks import JwksError
from .storage_format import StorageError, format_storage, random_uuid

__all__ = ("CliError", "add_command_config", "command_security", "register")

T = TypeVar("T")


class CliError(Exception):
    """A problem to report to the user as one line, exit code 2."""


# --- server / storage / metadata ---------------------------------------------------


def cmd_server_start(args: argparse.Namespace) -> int:
    from .node import run_node

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise CliError(f"invalid configuration: {exc}") from None
    logging.getLogger().handlers.clear()
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s node{config.node_id} %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    logging.getLogger("raftlog.net.client").setLevel(logging.NOTSET)  # see cli.main
    # SIGUSR1 prints every thread's stack to the log (Kafka's jstack): how to
    # see where a node that does not stop is stuck. (Only with a real stderr:
    # an in-process caller that captured it has no file descriptor to give.)
    with contextlib.suppress(OSError, ValueError):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    try:
        event_loop.loop_factory()  # a bad RAFTLOG_EVENT_LOOP fails here, readably
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        return event_loop.run(run_node(config))
    except (StorageError, JwksError) as exc:
        raise CliError(str(exc)) from None


def cmd_storage_format(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        records = [parse_add_scram(spec) for spec in args.add_scram or ()]
        features = dict(NEW_CLUSTER_FEATURES)
        features.update(parse_feature(spec) for spec in args.feature or ())
        written = format_storage(config, args.cluster_id, ignore_formatted=args.ignore_formatted,
                                 bootstrap_records=records, features=features)
    except (ConfigError, StorageError, BootstrapError, ValueError) as exc:
        raise CliError(str(exc)) from None
    for directory in written:
        print(f"Formatting {directory} with cluster.id {args.cluster_id} (node.id {config.node_id})")
    if not written:
        print("All of the log directories are already formatted.")
    return 0


def cmd_storage_info(args: argparse.Namespace) -> int:
    """kafka-storage.sh info: each storage directory of the node's config,
    its ``meta.properties``, and what would stop the node starting (exit 1)."""
    from data_plane.storage_format import read_meta_properties, storage_dirs

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    found, problems, metas = [], [], {}
    for directory in storage_dirs(config):
        if not os.path.isdir(directory):
            problems.append(f"{directory} does not exist")
            continue
        found.append(directory)
        try:
            meta = read_meta_properties(directory)
        except StorageError as exc:
            problems.append(str(exc))
            continue
        if meta is None:
            problems.append(f"{directory} is not formatted.")
            continue
        metas[directory] = meta
        if meta.node_id != config.node_id:
            problems.append(f"{directory} belongs to node.id {meta.node_id}, but node.id is "
                            f"{config.node_id}")
    if len({m.cluster_id for m in metas.values()}) > 1:
        problems.append("the directories name different cluster ids: "
                        + ", ".join(sorted({m.cluster_id for m in metas.values()})))
    print("Found log directories:" if found else "Found no log directories.")
    for directory in found:
        print(f"  {directory}")
    for directory, meta in metas.items():
        print(f"\nFound metadata in {directory}: {{cluster.id={meta.cluster_id}, "
              f"directory.id={meta.directory_id}, node.id={meta.node_id}, version=1}}")
    if problems:
        print("\nFound problem" + ("s:" if len(problems) > 1 else ":"))
        for problem in problems:
            print(f"  {problem}")
        return 1
    return 0


def cmd_storage_random_uuid(args: argparse.Namespace) -> int:
    print(random_uuid())
    return 0


def cmd_metadata_dump(args: argparse.Namespace) -> int:
    from metadata_quorum.dump import dump_metadata_log

    for path in args.files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
        print(f"Dumping {path}")
        for line in dump_metadata_log(data):
            print(line)
    return 0


# --- the admin client ------------------------------------------------------------


def _parse_bootstrap(text: str) -> list[tuple[str, int]]:
    result = []
    for entry in text.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CliError(f"bootstrap address {entry!r} is not HOST:PORT")
        result.append((host, int(port)))
    return result


class _Admin:
    """Sends to the controllers (or brokers) in turn until one answers
    acceptably; every connection is secured as ``security`` says (TLS, SASL)."""

    def __init__(self, bootstrap: list[tuple[str, int]], timeout_ms: int,
                 security: ConnectionSecurity = PLAINTEXT_SECURITY) -> None:
        self._addresses = list(bootstrap)
        self._deadline = time.monotonic() + timeout_ms / 1000
        self._clients: dict[tuple[str, int], KafkaProtocolClient] = {}
        self.security = security

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()

    def client(self, address: tuple[str, int]) -> KafkaProtocolClient:
        client = self._clients.get(address)
        if client is None:
            client = KafkaProtocolClient(
                *address, client_id="raftlog-admin", request_timeout_ms=5000,
                connect_timeout_ms=1000, reconnect_backoff_max_ms=200, security=self.security,
            )
            self._clients[address] = client
        return client

    async def send_to(self, address: tuple[str, int], request: Any, version: int) -> Any:
        """``request`` to the node at ``address`` alone (a partition's leader),
        on this admin's connection to it. Raises what
        `KafkaProtocolClient.send` raises."""
        return await self.client(address).send(request, version)

    def prefer(self, host: str, port: int) -> None:
        if (host, port) in self._addresses:
            self._addresses.remove((host, port))
        self._addresses.insert(0, (host, port))

    async def first(
        self,
        request: Any,
        version: int,
        accept: Callable[[Any], str | None],
        *,
        unsupported_raises: bool = False,
    ) -> Any:
        """The first response ``accept`` returns None for (else it names the
        retriable error); raises `CliError` at the deadline with the last error.
        ``unsupported_raises``: a node that does not serve the request's API
        version raises `UnsupportedVersionError` at once (the caller falls back
        to an older API) instead of being passed over."""
        last_error = "no controller answered"
        while True:
            pause = 0.2
            for address in list(self._addresses):
                client = self.client(address)
                try:
                    response = await client.send(request, version)
                except (SaslAuthenticationFailedError, TlsHandshakeFailedError) as exc:
                    # Refused credentials, or a certificate not trusted,
                    # stay so: retrying until the deadline would only hide
                    # the reason (Kafka's admin client fails at once too).
                    raise CliError(str(exc)) from None
                except TransportError as exc:
                    last_error = _transport_error(address, exc, self.security)
                    continue
                except UnsupportedVersionError as exc:
                    if unsupported_raises:
                        raise
                    # An older node, or a controller asked for a broker API.
                    last_error = f"{address[0]}:{address[1]}: {exc}"
                    continue
                error = accept(response)
                if error is None:
                    return response
                last_error = f"{address[0]}:{address[1]}: {error}"
                if error.startswith(_REFUSALS):
                    # The ACLs say no: asking again, or another node, will not change it.
                    raise CliError(last_error)
                # KIP-219: a throttled answer says how long to wait (a
                # controller mutation quota's, KIP-599, before a retry).
                throttle = getattr(response, "throttle_time", None)
                if isinstance(throttle, datetime.timedelta):
                    pause = max(pause, throttle.total_seconds())
            now = time.monotonic()
            if now >= self._deadline:
                raise CliError(last_error)
            await asyncio.sleep(min(pause, max(self._deadline - now, 0.0)))

    async def until_every(self, request: Any, version: int, done: Callable[[Any], bool]) -> bool:
        """Asks every bootstrap node until each that answers gives a response
        ``done`` holds for; a node that cannot be reached is left out. True
        once they all agree, False at the deadline (the caller's change is
        made by then; only its propagation is late)."""
        waiting = list(self._addresses)
        while waiting:
            for address in list(waiting):
                client = self.client(address)
                try:
                    response = await client.send(request, version)
                except (TransportError, UnsupportedVersionError):  # refused logins too
                    waiting.remove(address)
                    continue
                if done(response):
                    waiting.remove(address)
            if not waiting:
                break
            if time.monotonic() >= self._deadline:
                return False
            await asyncio.sleep(0.05)
        return True


def _transport_error(address: tuple[str, int], exc: TransportError,
                     security: ConnectionSecurity) -> str:
    """The line for a connection that failed: ``exc`` names the address
    already; a PLAINTEXT client dropped by a node most likely spoke to a TLS
    or SASL listener, which closes such a client without a word."""
    text = str(exc)
    if not text.startswith(f"{address[0]}:{address[1]}"):
        text = f"{address[0]}:{address[1]}: {text}"
    if security.protocol == "PLAINTEXT" and isinstance(exc, DisconnectedError) \
            and not isinstance(exc, ConnectFailedError):
        text += (" (if the listener is SSL, SASL_PLAINTEXT or SASL_SSL, give its client "
                 "settings with --command-config)")
    return text


#: Answers no retry mends (an authorizer's refusal).
_REFUSALS: Final = ("CLUSTER_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
                    "GROUP_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")


def _run_admin(args: argparse.Namespace, body: Callable[[_Admin], Awaitable[int]]) -> int:
    # --bootstrap-server (topics): a broker answers Metadata itself and
    # forwards CreateTopics/DeleteTopics to the active controller.
    brokers = getattr(args, "bootstrap_server", None)
    bootstrap = brokers or args.bootstrap_controller
    security = command_security(args)
    connection = security.connection

    async def run() -> int:
        admin = _Admin(_parse_bootstrap(bootstrap), args.timeout_ms, connection)
        try:
            return await body(admin)
        finally:
            await admin.close()

    return asyncio.run(run())


def add_command_config(parser: argparse.ArgumentParser, *, controllers: bool = False) -> None:
    """Add Kafka's ``--command-config FILE`` (client properties, see
    `data_plane.client_config`) to ``parser``; ``controllers``: the command
    also takes ``--bootstrap-controller``, which the help text says the
    file does not apply to."""
    text = ("client properties for a TLS or SASL broker listener, as Kafka's tools take "
            "them: security.protocol, sasl.mechanism and sasl.jaas.config (or sasl.username "
            "and sasl.password), ssl.truststore.*, ssl.keystore.*, "
            "ssl.endpoint.identification.algorithm")
    if controllers:
        text += "; with --bootstrap-controller, for the controller listener"
    parser.add_argument("--command-config", metavar="FILE", help=text)


def command_security(args: argparse.Namespace) -> ClientSecurity:
    """How the clients of a command reach the brokers: its
    ``--command-config`` file (PLAINTEXT without one). Raises `CliError`
    naming what the file gets wrong."""
    try:
        return load_command_config(getattr(args, "command_config", None))
    except ClientConfigError as exc:
        raise CliError(str(exc)) from None


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


def _check(result: Any, what: str) -> None:
    """Raise `CliError` "cannot <what>: CODE[: message]" if ``result`` (a
    per-item answer) carries an error."""
    if result.error_code != ErrorCode.none:
        message = getattr(result, "error_message", None)
        raise CliError(f"cannot {what}: {_error_name(result.error_code)}"
                       + (f": {message}" if message else ""))


def _topic_id_text(topic_id: uuid.UUID | None) -> str:
    if topic_id is None:
        return ""
    return kafka_uuid.to_text(topic_id)


# --- quorum describe ---------------------------------------------------------------


async def _describe_quorum(admin: _Admin) -> dq_resp.DescribeQuorumResponse:
    request = wire.encode_request(DescribeQuorumRequest(), destination=-1)

    def accept(response: dq_resp.DescribeQuorumResponse) -> str | None:
        if response.error_code != ErrorCode.none:
            return _error_name(response.error_code)
        partition = response.topics[0].partitions[0]
        if partition.error_code != ErrorCode.none:
            return f"{_error_name(partition.error_code)} (leader {partition.leader_id})"
        return None

    response: dq_resp.DescribeQuorumResponse = await admin.first(request, 2, accept)
    return response


def format_quorum_status(
    cluster_id: str, partition: dq_resp.PartitionData
) -> list[str]:
    """kafka-metadata-quorum.sh ``describe --status`` lines."""
    voters = {int(v.replica_id): v for v in partition.current_voters}
    leader = voters.get(int(partition.leader_id))
    leader_leo = int(leader.log_end_offset) if leader is not None else -1
    lag, lag_time_ms = 0, -1
    if leader is not None and voters:
        laggard = min(voters.values(), key=lambda v: int(v.log_end_offset))
        lag = leader_leo - int(laggard.log_end_offset)
        if laggard is leader or lag <= 0:
            lag_time_ms = 0  # every voter is caught up
        elif int(leader.last_caught_up_timestamp) >= 0 and int(laggard.last_caught_up_timestamp) >= 0:
            # The leader's timestamp is taken when it answers; a follower's
            # may be a few ms newer than that, so clamp at 0 as a lag.
            lag_time_ms = max(0, int(leader.last_caught_up_timestamp)
                              - int(laggard.last_caught_up_timestamp))
    ids = ",".join(str(i) for i in sorted(voters))
    observers = ",".join(str(int(o.replica_id)) for o in partition.observers)
    rows = [
        ("ClusterId", cluster_id),
        ("LeaderId", str(int(partition.leader_id))),
        ("LeaderEpoch", str(int(partition.leader_epoch))),
        ("HighWatermark", str(int(partition.high_watermark))),
        ("MaxFollowerLag", str(lag)),
        ("MaxFollowerLagTimeMs", str(lag_time_ms)),
        ("CurrentVoters", f"[{ids}]"),
        ("CurrentObservers", f"[{observers}]"),
    ]
    return [f"{name + ':':<24}{value}" for name, value in rows]


def format_quorum_replication(partition: dq_resp.PartitionData) -> list[str]:
    """kafka-metadata-quorum.sh ``describe --replication`` table."""
    leader_id = int(partition.leader_id)
    replicas = [(v, "Follower") for v in partition.current_voters] + [
        (o, "Observer") for o in partition.observers
    ]
    leader_leo = next(
        (int(v.log_end_offset) for v, _ in replicas if int(v.replica_id) == leader_id), 0
    )
    header = ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
              "Status")
    rows: list[tuple[str, ...]] = [header]
    ordered = sorted(replicas, key=lambda r: (int(r[0].replica_id) != leader_id, r[1] != "Follower"))
    for replica, status in ordered:
        node_id = int(replica.replica_id)
        rows.append((
            str(node_id),
            str(int(replica.log_end_offset)),
            str(max(0, leader_leo - int(replica.log_end_offset))),
            str(int(replica.last_fetch_timestamp)),
            str(int(replica.last_caught_up_timestamp)),
            "Leader" if node_id == leader_id else status,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def cmd_quorum_describe(args: argparse.Namespace) -> int:
    async def body(admin: _Admin) -> int:
        response = await _describe_quorum(admin)
        partition = response.topics[0].partitions[0]
        if args.status:
            cluster = await admin.first(
                dc_req.DescribeClusterRequest(include_cluster_authorized_operations=False), 0,
                lambda r: None if r.error_code == ErrorCode.none else _error_name(r.error_code),
            )
            assert isinstance(cluster, dc_resp.DescribeClusterResponse)
            lines = format_quorum_status(cluster.cluster_id, partition)
        else:
            lines = format_quorum_replication(partition)
        print("\n".join(lines))
        return 0

    return _run_admin(args, body)


# --- cluster --------------------------------------------------------------------------


def format_cluster(response: dc_resp_v2.DescribeClusterResponse) -> list[str]:
    """``cluster describe`` output: one header, then one line per broker."""
    lines = [
        f"ClusterId: {response.cluster_id}\tControllerId: {int(response.controller_id)}"
        f"\tBrokers: {len(response.brokers)}"
    ]
    for broker in sorted(response.brokers, key=lambda b: int(b.broker_id)):
        lines.append(
            f"BrokerId: {int(broker.broker_id)}\tEndpoint: {broker.host}:{int(broker.port)}"
            f"\tRack: {broker.rack if broker.rack is not None else '-'}"
            f"\tFenced: {'true' if broker.is_fenced else 'false'}"
        )
    return lines


def cmd_cluster_describe(args: argparse.Namespace) -> int:
    async def body(admin: _Admin) -> int:
        response = await admin.first(
            dc_req_v2.DescribeClusterRequest(
                include_cluster_authorized_operations=False, include_fenced_brokers=True
            ),
            2,
            lambda r: None if r.error_code == ErrorCode.none else _error_name(r.error_code),
        )
        assert isinstance(response, dc_resp_v2.DescribeClusterResponse)
        print("\n".join(format_cluster(response)))
        return 0

    return _run_admin(args, body)


def cmd_cluster_id(args: argparse.Namespace) -> int:
    """kafka-cluster.sh cluster-id: the id DescribeCluster names."""
    async def body(admin: _Admin) -> int:
        response = await admin.first(
            dc_req.DescribeClusterRequest(include_cluster_authorized_operations=False), 0,
            lambda r: None if r.error_code == ErrorCode.none else _error_name(r.error_code))
        print(f"Cluster ID: {response.cluster_id}")
        return 0

    return _run_admin(args, body)


def cmd_broker_api_versions(args: argparse.Namespace) -> int:
    """kafka-broker-api-versions.sh: each broker's ApiVersions ranges, as
    Kafka's tool prints them; ``usable`` is the highest version this
    client's schemas (kio's) share with the broker, and an API this client
    knows that the broker does not serve is UNSUPPORTED."""
    async def body(admin: _Admin) -> int:
        response = await _metadata(admin, [])
        failed = 0
        for broker in sorted(response.brokers, key=lambda b: int(b.node_id)):
            address = (str(broker.host), int(broker.port))
            rack = "null" if broker.rack is None else str(broker.rack)
            try:
                client = admin.client(address)
                await client.connect()
                versions = dict(client.peer_versions or {})
            except Exception as exc:
                print(f"{address[0]}:{address[1]} (id: {int(broker.node_id)} rack: {rack}) -> "
                      f"ERROR: {exc}")
                failed += 1
                continue
            print(f"{address[0]}:{address[1]} (id: {int(broker.node_id)} rack: {rack}) -> (")
            print(",\n".join(f"\t{line}" for line in api_version_lines(versions)))
            print(")")
        return 2 if failed else 0

    return _run_admin(args, body)


# APIs Kafka serves on controller listeners only (Raft, registration,
# AlterPartition, Envelope ...): not listed as UNSUPPORTED by a broker, as
# Kafka's tool lists only the broker listener's APIs.
_CONTROLLER_ONLY_APIS: Final = frozenset({52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82})


def api_version_lines(versions: Mapping[int, tuple[int, int]]) -> list[str]:
    """One line per API, by key: ``Name(key): min to max [usable: v]``."""
    lines = []
    for key in sorted(set(versions) | (KIO_API_KEYS - _CONTROLLER_ONLY_APIS)):
        try:
            name = "".join(part.title() for part in api_name(key).split("_"))
            mine: tuple[int, int] | None = kio_version_range(key)
        except UnknownApiKeyError:
            name, mine = "UNKNOWN", None
        served = versions.get(key)
        if served is None:
            lines.append(f"{name}({key}): UNSUPPORTED")
            continue
        low, high = served
        text = f"{low}" if low == high else f"{low} to {high}"
        if mine is None:
            lines.append(f"{name}({key}): {text}")
        elif mine[1] < low:
            lines.append(f"{name}({key}): {text} [unusable: node too new]")
        elif high < mine[0]:
            lines.append(f"{name}({key}): {text} [unusable: node too old]")
        else:
            lines.append(f"{name}({key}): {text} [usable: {min(high, mine[1])}]")
    return lines


def cmd_cluster_unregister(args: argparse.Namespace) -> int:
    """kafka-cluster.sh unregister: remove a broker's registration for good
    (a decommissioned broker; a running one registers again)."""
    async def body(admin: _Admin) -> int:
        response = await admin.first(
            ub_req.UnregisterBrokerRequest(broker_id=BrokerId(args.id)), 0,
            lambda r: _not_controller([r.error_code]))
        if response.error_code != ErrorCode.none:
            message = f": {response.error_message}" if response.error_message else ""
            raise CliError(f"cannot unregister broker {args.id}: "
                           f"{_error_name(response.error_code)}{message}")
        print(f"Broker {args.id} is no longer registered.")
        return 0

    return _run_admin(args, body)


# --- topics --------------------------------------------------------------------------


def _not_controller(errors: Sequence[int]) -> str | None:
    """The retriable error of a controller's answer: NOT_CONTROLLER (or a
    forward that timed out), or THROTTLING_QUOTA_EXCEEDED (KIP-599), retried
    after the answer's throttle time until the deadline, as Kafka's admin
    client does by default (``retryOnQuotaViolation``)."""
    if any(e in (ErrorCode.not_controller, ErrorCode.request_timed_out) for e in errors):
        return "NOT_CONTROLLER"
    if any(e == ErrorCode.throttling_quota_exceeded for e in errors):
        return "THROTTLING_QUOTA_EXCEEDED (the controller mutation quota)"
    return None


async def _metadata(admin: _Admin, names: Sequence[str] | None) -> md_resp.MetadataResponse:
    request = md_req.MetadataRequest(
        topics=None if names is None else tuple(
            md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(n))
            for n in names
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    response: md_resp.MetadataResponse = await admin.first(request, 12, lambda r: None)
    return response


async def _until_seen(admin: _Admin, name: str,
                      done: Callable[[md_resp.MetadataResponseTopic], bool]) -> None:
    """Returns once every reachable bootstrap node's Metadata shows the
    change just committed (``done`` holds for topic ``name``), or at the
    deadline. The active controller answers a write once the metadata log
    has committed it; the other nodes apply it a fetch later. Waiting here
    means ``topics create`` followed by ``topics describe`` (or ``delete``
    by ``list``) sees its own write, whichever node the next command asks.
    A node not allowed to describe the topic is not waited for."""
    request = md_req.MetadataRequest(
        topics=(md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(name)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )

    def shows(response: md_resp.MetadataResponse) -> bool:
        topic = next((t for t in response.topics if str(t.name) == name), None)
        if topic is None:
            return False
        return topic.error_code == ErrorCode.topic_authorization_failed or done(topic)

    if not await admin.until_every(request, 12, shows):
        print(f"raftlog: not every node shows the change to {name} yet (--timeout-ms reached)",
              file=sys.stderr)


def cmd_topics(args: argparse.Namespace) -> int:
    async def body(admin: _Admin) -> int:
        match args.action:
            case "create":
                return await _topics_create(admin, args)
            case "delete":
                return await _topics_delete(admin, args)
            case "alter":
                return await _topics_alter(admin, args)
            case "list":
                for name in await _matching_topics(admin, args, must_exist=False):
                    print(name)
                return 0
            case _:
                return await _topics_describe(admin, args)

    if args.action in ("create", "delete", "alter") and not args.topic:
        raise CliError(f"topics {args.action} needs --topic")
    if args.action == "alter" and args.partitions < 1:
        raise CliError("topics alter needs --partitions N (the new, larger partition count)")
    return _run_admin(args, body)


async def _topics_create(admin: _Admin, args: argparse.Namespace) -> int:
    configs = []
    for item in args.config or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--config {item!r} is not key=value")
        configs.append(ct_req.CreatableTopicConfig(name=key, value=value))
    request = ct_req.CreateTopicsRequest(
        topics=(ct_req.CreatableTopic(
            name=TopicName(args.topic),
            num_partitions=i32(args.partitions),
            replication_factor=i16(args.replication_factor),
            assignments=(),
            configs=tuple(configs),
        ),),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30_000)),
        validate_only=False,
    )
    response: ct_resp.CreateTopicsResponse = await admin.first(
        request, 7, lambda r: _not_controller([t.error_code for t in r.topics])
    )
    if args.if_not_exists and response.topics[0].error_code == ErrorCode.topic_already_exists:
        return 0  # kafka-topics.sh --if-not-exists: nothing said
    _check(response.topics[0], f"create topic {args.topic}")
    await _until_seen(admin, args.topic, lambda t: t.error_code == ErrorCode.none)
    print(f"Created topic {args.topic}.")
    return 0


async def _topics_alter(admin: _Admin, args: argparse.Namespace) -> int:
    request = cp_req.CreatePartitionsRequest(
        topics=(cp_req.CreatePartitionsTopic(
            name=TopicName(args.topic), count=i32(args.partitions), assignments=None),),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30_000)),
        validate_only=False,
    )
    response: cp_resp.CreatePartitionsResponse = await admin.first(
        request, 3, lambda r: _not_controller([t.error_code for t in r.results])
    )
    if args.if_exists and response.results[0].error_code == ErrorCode.unknown_topic_or_partition:
        return 0
    _check(response.results[0], f"add partitions to {args.topic}")
    await _until_seen(admin, args.topic, lambda t: len(t.partitions) >= args.partitions)
    print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


async def _topics_delete(admin: _Admin, args: argparse.Namespace) -> int:
    request = dt_req.DeleteTopicsRequest(
        topics=(dt_req.DeleteTopicState(name=TopicName(args.topic), topic_id=uuid.UUID(int=0)),),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30_000)),
    )
    response: dt_resp.DeleteTopicsResponse = await admin.first(
        request, 6, lambda r: _not_controller([t.error_code for t in r.responses])
    )
    if args.if_exists and response.responses[0].error_code == ErrorCode.unknown_topic_or_partition:
        return 0
    _check(response.responses[0], f"delete topic {args.topic}")
    await _until_seen(admin, args.topic,
                      lambda t: t.error_code == ErrorCode.unknown_topic_or_partition)
    print(f"Deleted topic {args.topic}.")
    return 0


def format_topic(topic: Any,
                 configs: Sequence[tuple[str, str]] = (),
                 reassigning: Mapping[int, tuple[Sequence[int], Sequence[int]]] | None = None,
                 *,
                 header: bool = True,
                 keep: Callable[[Any], bool] | None = None,
                 ) -> list[str]:
    """kafka-topics.sh ``--describe`` lines for one topic (a Metadata or
    DescribeTopicPartitions answer's); ``configs`` are the topic's own
    settings (``name=value``, comma-separated, as Kafka); ``reassigning``:
    partition -> (adding, removing) replicas of the reassignments in
    progress, shown as Kafka shows them (the replication factor then leaves
    out the replicas being added). ``header``: the topic line first;
    ``keep``: only the partitions it holds for (None: all; the report
    options of `_topics_describe`)."""
    reassigning = reassigning or {}
    partitions = sorted(topic.partitions, key=lambda p: int(p.partition_index))
    rf = 0
    if partitions:
        first = partitions[0]
        rf = len(first.replica_nodes) - len(reassigning.get(int(first.partition_index), ((),))[0])
    lines = [
        f"Topic: {topic.name}\tTopicId: {_topic_id_text(topic.topic_id)}\t"
        f"PartitionCount: {len(partitions)}\tReplicationFactor: {rf}\t"
        f"Configs: {','.join(f'{k}={v}' for k, v in configs)}"
    ] if header else []
    for p in partitions:
        if keep is not None and not keep(p):
            continue
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {int(p.partition_index)}\t"
            f"Leader: {_leader_text(int(p.leader_id))}\t"
            f"Replicas: {','.join(str(int(b)) for b in p.replica_nodes)}\t"
            f"Isr: {','.join(str(int(b)) for b in p.isr_nodes)}"
        )
        moving = reassigning.get(int(p.partition_index))
        if moving is not None:
            adding, removing = moving
            lines[-1] += (f"\tAdding Replicas: {','.join(str(int(b)) for b in adding)}"
                          f"\tRemoving Replicas: {','.join(str(int(b)) for b in removing)}")
        # KIP-966, from DescribeTopicPartitions; a Metadata answer has none (N/A).
        for label, field_name in (("Elr", "eligible_leader_replicas"),
                                  ("LastKnownElr", "last_known_elr")):
            members = getattr(p, field_name, None)
            shown = "N/A" if members is None else ",".join(str(int(b)) for b in members)
            lines[-1] += f"\t{label}: {shown}"
    return lines


def _leader_text(leader: int) -> str:
    return "none" if leader < 0 else str(leader)


async def _described_topics(admin: _Admin, names: Sequence[str] | None,
                            page_limit: int) -> list[Any]:
    """The topics ``names`` (None: all) with their partitions, as
    DescribeTopicPartitions pages them (``page_limit`` partitions a page,
    capped by the broker), joined per topic, as Kafka's admin client does
    from 3.8. A node that does not serve that API (a controller, an older
    broker) is asked Metadata instead."""
    request = dtp_req.DescribeTopicPartitionsRequest(
        topics=tuple(dtp_req.TopicRequest(name=TopicName(n)) for n in names or ()),
        response_partition_limit=i32(page_limit),
    )
    joined: dict[str, dtp_resp.DescribeTopicPartitionsResponseTopic] = {}
    pages = 0
    while True:
        try:
            response: dtp_resp.DescribeTopicPartitionsResponse = await admin.first(
                request, 0, lambda r: None, unsupported_raises=True)
        except UnsupportedVersionError:
            if pages:
                raise CliError("a node stopped serving DescribeTopicPartitions while "
                               "paging; try again") from None
            return list((await _metadata(admin, names)).topics)
        pages += 1
        for topic in response.topics:
            name = str(topic.name)
            seen = joined.get(name)
            joined[name] = topic if seen is None else dataclasses.replace(
                seen, partitions=seen.partitions + topic.partitions)
        cursor = response.next_cursor
        if cursor is None:
            return list(joined.values())
        request = dataclasses.replace(request, cursor=dtp_req.Cursor(
            topic_name=cursor.topic_name, partition_index=cursor.partition_index))


_ENTITY_TYPES: Final = ("topics", "brokers", "broker-loggers", "clients", "users", "ips")
_DEFAULT_ENTITY: Final = "\x00default"
# --entity-type -> (the flag's dest for a name, its dest for the default).
_ENTITY_FLAGS: Final = {"topics": ("topic", None), "brokers": ("broker", "broker_defaults"),
                        "broker-loggers": ("broker_logger", None),
                        "clients": ("client", "client_defaults"),
                        "users": ("user", "user_defaults"), "ips": ("ip", "ip_defaults")}


def _entities_to_flags(func: Callable[[argparse.Namespace], int]
                       ) -> Callable[[argparse.Namespace], int]:
    """``func`` taking kafka-configs.sh's ``--entity-type T --entity-name N``
    (or ``--entity-default``) as the short flags (``--topic N``,
    ``--broker-defaults`` ...). The n-th type takes the n-th name or
    default; a describe may leave the last type without one (every entity
    of that type, as Kafka's)."""
    def run(args: argparse.Namespace) -> int:
        types = args.entity_type or []
        names = args.entity_names or []
        if not types:
            if names:
                raise CliError("--entity-name and --entity-default need --entity-type")
            return func(args)
        if len(set(types)) != len(types):
            raise CliError("each --entity-type may be given once")
        if len(types) > 1 and sorted(types) != ["clients", "users"]:
            raise CliError("only --entity-type users and clients go together")
        if len(names) > len(types) or len(names) < len(types) - (args.action == "describe"):
            raise CliError("give an --entity-name or --entity-default for each --entity-type"
                           + (" (a describe may leave out the last)"
                              if args.action == "describe" else ""))
        given = (args.topic, args.broker, args.broker_defaults, args.broker_logger, args.client,
                 args.client_defaults, args.user, args.user_defaults, args.ip, args.ip_defaults)
        if any(v not in (None, False) for v in given):
            raise CliError("give --entity-type or --topic/--broker/--client/--user/--ip, not both")
        from data_plane.quotas_cli import ANY_NAME

        for index, entity_type in enumerate(types):
            name_dest, default_dest = _ENTITY_FLAGS[entity_type]
            name = names[index] if index < len(names) else ANY_NAME
            if name == _DEFAULT_ENTITY:
                if default_dest is None:
                    raise CliError(f"--entity-default does not apply to --entity-type {entity_type}")
                setattr(args, default_dest, True)
            elif name == ANY_NAME and entity_type in ("topics", "brokers", "broker-loggers"):
                args.every_entity = entity_type  # describe: every topic or broker
            else:
                setattr(args, name_dest, name)
        return func(args)

    return run


_TOPICS_ACTIONS: Final = ("create", "list", "describe", "alter", "delete")
_CONFIGS_ACTIONS: Final = ("describe", "alter")


def add_action(parser: argparse.ArgumentParser, choices: Sequence[str], tool: str) -> None:
    """The command's action, as ``raftlog topics create`` or as Kafka's
    tools spell it, ``--create`` (``tool``: the Kafka script, for the help).

    The parser gets an optional positional ``action`` and one flag per
    choice; `with_action` wraps the command function to pick the one given."""
    parser.add_argument("action", nargs="?", choices=choices,
                        help=f"or, as {tool} takes it, a flag: --{choices[0]} ...")
    flags = parser.add_mutually_exclusive_group()
    for choice in choices:
        flags.add_argument(f"--{choice}", dest="action_flag", action="store_const", const=choice,
                           help=f"the {choice} action")


def with_action(func: Callable[[argparse.Namespace], int], choices: Sequence[str]
                ) -> Callable[[argparse.Namespace], int]:
    """``func`` with ``args.action`` set from the positional or the flag
    `add_action` added; `CliError` for neither or two different ones."""
    def run(args: argparse.Namespace) -> int:
        flag = getattr(args, "action_flag", None)
        if args.action is not None and flag is not None and flag != args.action:
            raise CliError(f"two actions given: {args.action} and --{flag}")
        args.action = args.action or flag
        if args.action is None:
            raise CliError("an action is needed: one of " + ", ".join(choices)
                           + " (or --" + ", --".join(choices) + ")")
        return func(args)

    return run


def _positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


async def _matching_topics(admin: _Admin, args: argparse.Namespace, *,
                           must_exist: bool) -> list[str]:
    """The topics ``--topic`` names, sorted: every topic without it; as in
    kafka-topics.sh (list, describe), a regular expression the whole name
    must match (``a,b`` means ``a|b``). ``--exclude-internal`` leaves out the
    internal topics. None matching when ``must_exist``: `CliError`, or
    nothing with ``--if-exists``."""
    names = sorted(str(t.name) for t in (await _metadata(admin, None)).topics)
    if args.exclude_internal:
        names = [n for n in names if n not in INTERNAL_TOPICS]
    if not args.topic:
        return names
    text = args.topic.strip().strip("'\"").replace(",", "|")
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise CliError(f"--topic {args.topic!r} is not a valid regular expression: {exc}") from None
    found = [n for n in names if pattern.fullmatch(n)]
    if not found and must_exist and not args.if_exists:
        raise CliError(f"Topic '{args.topic}' does not exist as expected")
    return found


#: kafka-topics.sh --describe options that print only some partitions.
_PARTITION_REPORTS: Final = ("under_replicated_partitions", "unavailable_partitions",
                             "under_min_isr_partitions", "at_min_isr_partitions")


async def _topics_describe(admin: _Admin, args: argparse.Namespace) -> int:
    """kafka-topics.sh ``--describe``. With a report option
    (``--under-replicated-partitions`` and the like) only the partitions it
    picks are printed, without topic lines; ``--topics-with-overrides``
    prints only the topic lines of topics with settings of their own."""
    from .reassign_cli import ongoing_reassignments

    names = await _matching_topics(admin, args, must_exist=True)
    if not names:
        return 0
    topics = await _described_topics(admin, names, args.partition_size_limit_per_response)
    reports = [r for r in _PARTITION_REPORTS if getattr(args, r, False)]
    live = {int(b.node_id) for b in (await _metadata(admin, [])).brokers} \
        if "unavailable_partitions" in reports else set()
    ongoing = await ongoing_reassignments(admin, None)
    for topic in sorted(topics, key=lambda t: str(t.name)):
        if topic.error_code != ErrorCode.none:
            if topic.error_code == ErrorCode.unknown_topic_or_partition and args.if_exists:
                continue  # deleted since it was listed
            raise CliError(f"topic {topic.name}: {_error_name(topic.error_code)}")
        reassigning = {p: (tuple(int(b) for b in r.adding_replicas),
                           tuple(int(b) for b in r.removing_replicas))
                       for (t, p), r in ongoing.items() if t == str(topic.name)}
        configs = await _topic_configs(admin, str(topic.name))
        overrides = sorted((k, v) for k, v, source in configs if source == _DYNAMIC_TOPIC_CONFIG)
        if args.topics_with_overrides:
            if overrides and not reports:
                print(format_topic(topic, overrides, reassigning)[0])
            continue
        keep = None
        if reports:
            min_isr = next((int(v) for k, v, _ in configs if k == "min.insync.replicas"), 1)
            keep = _report_filter(reports, reassigning, live, min_isr)
        lines = format_topic(topic, overrides, reassigning, header=not reports, keep=keep)
        if lines:
            print("\n".join(lines))
    return 0


def _report_filter(reports: Sequence[str],
                   reassigning: Mapping[int, tuple[Sequence[int], Sequence[int]]],
                   live: set[int], min_isr: int) -> Callable[[Any], bool]:
    """Whether a partition is one the report options pick (any of them), by
    Kafka's TopicCommand rules."""
    def keep(p: Any) -> bool:
        leader, isr = int(p.leader_id), len(p.isr_nodes)
        rf = len(p.replica_nodes) - len(reassigning.get(int(p.partition_index), ((),))[0])
        return (("under_replicated_partitions" in reports and rf - isr > 0)
                or ("unavailable_partitions" in reports and (leader < 0 or leader not in live))
                or ("under_min_isr_partitions" in reports and (leader < 0 or isr < min_isr))
                or ("at_min_isr_partitions" in reports and isr == min_isr))
    return keep


# DescribeConfigs resource type and config source (Kafka's ConfigResource.Type
# TOPIC, DescribeConfigsResponse.ConfigSource DYNAMIC_TOPIC_CONFIG).
_TOPIC_RESOURCE = 2
_DYNAMIC_TOPIC_CONFIG = 1


async def _topic_configs(admin: _Admin, name: str) -> list[tuple[str, str, int]]:
    """Every config of topic ``name``: (key, value, config source)."""
    request = dcfg_req.DescribeConfigsRequest(
        resources=(dcfg_req.DescribeConfigsResource(
            resource_type=i8(_TOPIC_RESOURCE), resource_name=name, configuration_keys=None),),
        include_synonyms=False, include_documentation=False,
    )
    response: dcfg_resp.DescribeConfigsResponse = await admin.first(request, 4, lambda r: None)
    out: list[tuple[str, str, int]] = []
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise CliError(f"topic {name} configs: {_error_name(result.error_code)}")
        out.extend((str(c.name), "" if c.value is None else str(c.value), int(c.config_source))
                   for c in result.configs)
    return out


async def _topic_overrides(admin: _Admin, name: str) -> list[tuple[str, str]]:
    """The configs set on the topic itself (what kafka-topics.sh lists)."""
    return sorted((k, v) for k, v, source in await _topic_configs(admin, name)
                  if source == _DYNAMIC_TOPIC_CONFIG)


# --- configs (kafka-configs.sh) ------------------------------------------------------

_BROKER_RESOURCE = 4
_BROKER_LOGGER_RESOURCE = 8
# IncrementalAlterConfigs operations.
_SET, _DELETE = 0, 1


def parse_add_config(text: str) -> list[tuple[str, str]]:
    """kafka-configs.sh ``--add-config``: ``k1=v1,k2=[a,b]`` (brackets hold a
    list value, whose commas are kept). Raises `CliError`."""
    items: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise CliError(f"--add-config {text!r}: unbalanced ']'")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise CliError(f"--add-config {text!r}: unbalanced '['")
    items.append(text[start:])
    out = []
    for item in items:
        key, sep, value = item.strip().partition("=")
        if not sep or not key:
            raise CliError(f"--add-config entry {item!r} is not key=value")
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out.append((key, value))
    return out


#: DescribeConfigs config sources, as kafka-configs.sh names them.
_SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                 3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                 5: "DEFAULT_CONFIG"}


def _config_resource(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, name, label) from ``--topic``, ``--broker`` or ``--broker-defaults``."""
    if args.topic:
        return _TOPIC_RESOURCE, args.topic, f"topic {args.topic}"
    if args.broker is not None:
        if not args.broker.isdigit():
            raise CliError(f"--broker takes a broker id, not {args.broker!r}")
        return _BROKER_RESOURCE, args.broker, f"broker {args.broker}"
    if args.broker_logger is not None:
        if not args.broker_logger.isdigit():
            raise CliError(f"--broker-logger takes a broker id, not {args.broker_logger!r}")
        return _BROKER_LOGGER_RESOURCE, args.broker_logger, f"broker-logger {args.broker_logger}"
    return _BROKER_RESOURCE, "", "brokers in the cluster"


async def _prefer_broker(admin: _Admin, name: str) -> None:
    """Ask broker ``name`` (an id) first: what it alone can answer or check
    (its configs, a keystore it must load), as Kafka's admin client does."""
    metadata = await _metadata(admin, [])
    broker = next((b for b in metadata.brokers if str(int(b.node_id)) == name), None)
    if broker is None:
        raise CliError(f"broker {name} is not in the cluster")
    admin.prefer(str(broker.host), int(broker.port))


async def _describe_broker_configs(
    admin: _Admin, name: str, resource_type: int = _BROKER_RESOURCE,
) -> list[tuple[str, str | None, int, bool]]:
    """(key, value (None: sensitive), config source, read only) of a broker (``name`` its id,
    asked of that broker) or of the cluster default (``name`` ""); with
    ``resource_type`` BROKER_LOGGER, that broker's loggers and levels."""
    if name:
        await _prefer_broker(admin, name)
    request = dcfg_req.DescribeConfigsRequest(
        resources=(dcfg_req.DescribeConfigsResource(
            resource_type=i8(resource_type), resource_name=name, configuration_keys=None),),
        include_synonyms=False, include_documentation=False,
    )
    response: dcfg_resp.DescribeConfigsResponse = await admin.first(
        request, 4, lambda r: None if r.results[0].error_code == ErrorCode.none
        else _error_name(r.results[0].error_code))
    return [(str(c.name), None if c.value is None else str(c.value), int(c.config_source),
             bool(c.read_only)) for c in response.results[0].configs]


#: An IncrementalAlterConfigs operation: (key, operation (``_SET``,
#: ``_DELETE``, ...), value; None for ``_DELETE``).
ConfigOp = tuple[str, int, str | None]
#: A resource to alter: (resource type, name, its operations).
ConfigResource = tuple[int, str, Sequence[ConfigOp]]


async def incremental_alter_configs(
    admin: _Admin, resources: Sequence[ConfigResource], *, validate_only: bool = False
) -> list[iac_resp.AlterConfigsResourceResponse]:
    """IncrementalAlterConfigs of ``resources``, tried on the next node while
    the controller is unknown. The answer of each resource, in request
    order; its ``error_code`` is for the caller to check. Raises `CliError`
    when no node answers in time."""
    request = iac_req.IncrementalAlterConfigsRequest(
        resources=tuple(
            iac_req.AlterConfigsResource(
                resource_type=i8(rtype), resource_name=name, configs=tuple(
                    iac_req.AlterableConfig(name=key, config_operation=i8(op), value=value)
                    for key, op, value in ops))
            for rtype, name, ops in resources),
        validate_only=validate_only,
    )
    response: iac_resp.IncrementalAlterConfigsResponse = await admin.first(
        request, 1, lambda r: _not_controller([x.error_code for x in r.responses]))
    return list(response.responses)


def cmd_configs(args: argparse.Namespace) -> int:
    from data_plane.quotas_cli import cmd_quota_configs, wants_quotas

    if wants_quotas(args):
        if bool(args.topic) or args.broker is not None or args.broker_defaults \
                or args.broker_logger is not None:
            raise CliError("quotas (--client, --user, --ip) cannot be combined with --topic or "
                           "--broker")
        return cmd_quota_configs(args)
    every = getattr(args, "every_entity", None)
    if every is not None:
        async def each(admin: _Admin) -> int:
            if every == "topics":
                names = sorted(str(t.name) for t in (await _metadata(admin, None)).topics)
                resources = [(_TOPIC_RESOURCE, n, f"topic {n}") for n in names]
            else:
                brokers = sorted(int(b.node_id) for b in (await _metadata(admin, [])).brokers)
                kind, label = ((_BROKER_RESOURCE, "broker") if every == "brokers"
                               else (_BROKER_LOGGER_RESOURCE, "broker-logger"))
                resources = [(kind, str(b), f"{label} {b}") for b in brokers]
            for rtype, name, label in resources:
                await _describe_configs_of(admin, args, rtype, name, label)
            return 0

        return _run_admin(args, each)
    if sum((bool(args.topic), args.broker is not None, bool(args.broker_defaults),
            args.broker_logger is not None)) != 1:
        raise CliError("configs needs one of --topic T, --broker ID, --broker-defaults, "
                       "--broker-logger ID, "
                       "--client [ID], --client-defaults, --user [NAME], --user-defaults, --ip [ADDRESS] "
                       "or --ip-defaults")
    if args.action == "alter" and not (args.add_config or args.delete_config):
        raise CliError("configs alter needs --add-config and/or --delete-config")
    rtype, name, label = _config_resource(args)

    async def body(admin: _Admin) -> int:
        if args.action == "describe":
            await _describe_configs_of(admin, args, rtype, name, label)
            return 0
        ops: list[ConfigOp] = [(k, _SET, v) for item in args.add_config or ()
                               for k, v in parse_add_config(item)]
        ops += [(k.strip(), _DELETE, None)
                for item in args.delete_config or () for k in item.split(",") if k.strip()]
        if rtype in (_BROKER_RESOURCE, _BROKER_LOGGER_RESOURCE) and name \
                and not getattr(args, "bootstrap_controller", None):
            await _prefer_broker(admin, name)
        answers = await incremental_alter_configs(admin, [(rtype, name, ops)])
        _check(answers[0], f"alter the configs of {label}")
        print(f"Completed updating {'default ' if rtype == _BROKER_RESOURCE and not name else ''}"
              f"config for {label}.")
        return 0

    return _run_admin(args, body)


async def _describe_configs_of(admin: _Admin, args: argparse.Namespace, rtype: int, name: str,
                               label: str) -> None:
    """Print one resource's configs as kafka-configs.sh --describe does: a
    topic's overrides; a broker's dynamic configs (``--all``: every one,
    with its source); the cluster-wide defaults for ``name`` ""."""
    if rtype == _TOPIC_RESOURCE:
        overrides = await _topic_overrides(admin, name)
        print(f"Dynamic configs for {label} are:")
        for key, value in overrides:
            print(f"  {key}={value}")
        return
    if rtype == _BROKER_LOGGER_RESOURCE:
        print(f"Dynamic configs for {label} are:")
        for key, level, _, _ in await _describe_broker_configs(admin, name, rtype):
            print(f"  {key}={level}")
        return
    entries = await _describe_broker_configs(admin, name)
    dynamic = 2 if name else 3
    heading = "All configs" if args.all else ("Dynamic configs" if name else "Default configs")
    print(f"{heading} for {label} are:")
    for key, current, source, read_only in sorted(entries, key=lambda e: e[0]):
        shown = "null sensitive=true" if current is None else current  # kafka-configs.sh
        if args.all:
            flags = " (read-only)" if read_only else ""
            print(f"  {key}={shown} {_SOURCE_NAMES.get(source, source)}{flags}")
        elif source == dynamic:
            print(f"  {key}={shown}")


# --- delete-records (kafka-delete-records.sh) ------------------------------------------


def cmd_delete_records(args: argparse.Namespace) -> int:
    """kafka-delete-records.sh: DeleteRecords at each partition's leader, for
    ``--offset-json-file`` (Kafka's form) or ``--topic --partition
    --offset``; prints Kafka's lines, exit 2 if any partition failed."""
    command_security(args)  # its refusal first, as for every command
    wanted = _records_to_delete(args)

    async def body(admin: _Admin) -> int:
        response = await _metadata(admin, sorted({topic for topic, _ in wanted}))
        brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        topics = {str(t.name): t for t in response.topics}
        outcomes: dict[tuple[str, int], str] = {}
        by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for topic, partition in wanted:
            found = topics.get(topic)
            part = None if found is None or found.error_code != ErrorCode.none else next(
                (p for p in found.partitions if int(p.partition_index) == partition), None)
            address = None if part is None else brokers.get(int(part.leader_id))
            if part is None:
                outcomes[(topic, partition)] = "error: UNKNOWN_TOPIC_OR_PARTITION"
            elif address is None:
                outcomes[(topic, partition)] = "error: LEADER_NOT_AVAILABLE"
            else:
                by_leader.setdefault(address, []).append((topic, partition))
        print("Executing records delete operation")
        for address, partitions in by_leader.items():
            grouped: dict[str, list[int]] = {}
            for topic, partition in partitions:
                grouped.setdefault(topic, []).append(partition)
            request = dr_req.DeleteRecordsRequest(
                topics=tuple(dr_req.DeleteRecordsTopic(name=TopicName(topic), partitions=tuple(
                    dr_req.DeleteRecordsPartition(partition_index=i32(p),
                                                  offset=i64(wanted[(topic, p)]))
                    for p in ids)) for topic, ids in grouped.items()),
                timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=args.timeout_ms)),
            )
            try:
                answer: dr_resp.DeleteRecordsResponse = await admin.send_to(address, request, 2)
            except Exception as exc:  # this leader is unreachable: its partitions failed
                for tp in partitions:
                    outcomes[tp] = f"error: {exc}"
                continue
            for t in answer.topics:
                for p in t.partitions:
                    outcomes[(str(t.name), int(p.partition_index))] = (
                        f"low_watermark: {int(p.low_watermark)}"
                        if p.error_code == ErrorCode.none
                        else f"error: {_error_name(p.error_code)}")
        print("Records delete operation completed:")
        for (topic, partition), outcome in sorted(outcomes.items()):
            print(f"partition: {topic}-{partition}\t{outcome}")
        return 2 if any(o.startswith("error") for o in outcomes.values()) else 0

    return _run_admin(args, body)


def _records_to_delete(args: argparse.Namespace) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset, from ``--offset-json-file`` (Kafka's
    ``{"partitions": [{"topic": T, "partition": P, "offset": O}], "version":
    1}``) or ``--topic/--partition/--offset``. Offset -1: the high watermark."""
    single = (args.topic, args.partition, args.offset)
    if args.offset_json_file is None:
        if None in single:
            raise CliError("give --offset-json-file FILE, or --topic, --partition and --offset")
        entries = [single]
    else:
        if any(v is not None for v in single):
            raise CliError("give --offset-json-file or --topic/--partition/--offset, not both")
        where = f"--offset-json-file {args.offset_json_file}"
        try:
            with open(args.offset_json_file, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as exc:
            raise CliError(f"{where}: cannot read it: {exc.strerror}") from None
        except ValueError:
            raise CliError(f"{where}: the input string is not a valid JSON") from None
        if not isinstance(data, dict):
            raise CliError(f"{where}: expected a JSON object with \"partitions\"")
        if data.get("version", 1) != 1:
            raise CliError(f"{where}: not supported version field value {data.get('version')}")
        if not isinstance(data.get("partitions"), list):
            raise CliError(f"{where}: missing partitions field")
        entries = []
        for item in data["partitions"]:
            try:
                topic, partition, offset = item["topic"], item["partition"], item["offset"]
            except (KeyError, TypeError):
                raise CliError(f"{where}: each partition needs topic, partition and offset "
                               f"(got {item!r})") from None
            if not (isinstance(topic, str) and isinstance(partition, int)
                    and isinstance(offset, int)) or isinstance(partition, bool):
                raise CliError(f"{where}: topic is a string, partition and offset numbers "
                               f"(got {item!r})")
            entries.append((topic, partition, offset))
    out: dict[tuple[str, int], int] = {}
    duplicates = sorted({f"{t}-{p}" for t, p, _ in entries
                         if sum(1 for e in entries if e[:2] == (t, p)) > 1})
    if duplicates:
        raise CliError("Offset json file contains duplicate topic partitions: "
                       + ",".join(duplicates))
    for topic, partition, offset in entries:
        if offset < -1:
            raise CliError(f"{topic}-{partition}: the offset must be -1 (the high watermark) "
                           "or an offset")
        out[(topic, partition)] = offset
    if not out:
        raise CliError("no partitions to delete records from")
    return out


# --- leader-election (kafka-leader-election.sh) ----------------------------------------


def _election_partitions(path: str) -> dict[str, list[int]]:
    """kafka-leader-election.sh's ``--path-to-json-file``:
    ``{"partitions": [{"topic": "foo", "partition": 1}]}``; topic -> partitions."""
    where = f"--path-to-json-file {path}"
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise CliError(f"{where}: cannot read it: {exc.strerror}") from None
    except ValueError:
        raise CliError(f"{where}: not valid JSON") from None
    items = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise CliError(f"{where}: expected {{\"partitions\": [{{\"topic\": T, "
                       f"\"partition\": P}}, ...]}}")
    out: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for item in items:
        topic = item.get("topic") if isinstance(item, dict) else None
        partition = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) \
                or isinstance(partition, bool):
            raise CliError(f"{where}: each entry needs a topic and a partition (got {item!r})")
        if (topic, partition) in seen:
            raise CliError(f"{where}: {topic}-{partition} is listed twice")
        seen.add((topic, partition))
        out.setdefault(topic, []).append(partition)
    return out


def cmd_leader_election(args: argparse.Namespace) -> int:
    """Print what kafka-leader-election.sh prints; exit 2 if any partition
    could not be elected (ELECTION_NOT_NEEDED is not a failure)."""
    if sum((args.all_topic_partitions, args.topic is not None,
            args.path_to_json_file is not None)) != 1:
        raise CliError("give --topic (with --partition), --path-to-json-file or "
                       "--all-topic-partitions")
    if args.topic is not None and args.partition is None:
        raise CliError("--topic needs --partition")
    election = args.election_type.upper()
    chosen: dict[str, list[int]] = {}
    if args.path_to_json_file is not None:
        chosen = _election_partitions(args.path_to_json_file)
    elif args.topic is not None:
        chosen = {args.topic: [args.partition]}

    async def body(admin: _Admin) -> int:
        request = el_req.ElectLeadersRequest(
            election_type=i8(0 if election == "PREFERRED" else 1),
            topic_partitions=None if args.all_topic_partitions else tuple(
                el_req.TopicPartitions(topic=TopicName(topic),
                                       partitions=tuple(i32(p) for p in partitions))
                for topic, partitions in chosen.items()),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=args.timeout_ms)),
        )
        response: el_resp.ElectLeadersResponse = await admin.first(
            request, 2, lambda r: _not_controller([r.error_code]))
        _check(response, f"elect leaders ({election})")
        elected, not_needed, failed = [], [], []
        for topic in response.replica_election_results:
            for part in topic.partition_result:
                name = f"{topic.topic}-{int(part.partition_id)}"
                if part.error_code == ErrorCode.none:
                    elected.append(name)
                elif part.error_code == ErrorCode.election_not_needed:
                    not_needed.append(name)
                else:
                    failed.append(f"{name}: {_error_name(part.error_code)}"
                                  + (f": {part.error_message}" if part.error_message else ""))
        if elected:
            print(f"Successfully completed leader election ({election}) for partitions "
                  f"{', '.join(elected)}")
        if not_needed:
            print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
        if not (elected or not_needed or failed):
            print("No partition needed an election")
        for line in failed:
            print(f"Error completing leader election ({election}) for partition: {line}",
                  file=sys.stderr)
        if failed:
            raise CliError(f"{len(failed)} replica(s) could not be elected")
        return 0

    return _run_admin(args, body)


# --- registration ------------------------------------------------------------------


def _admin_options(parser: argparse.ArgumentParser, *, broker: bool = False) -> None:
    if broker:
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                           help="brokers (Metadata; admin writes forwarded)")
        where.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]")
        add_command_config(parser, controllers=True)
    else:
        parser.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,...]")
        add_command_config(parser, controllers=True)
    parser.add_argument("--timeout-ms", type=int, default=15_000,
                        help="give up after this long without an acceptable answer")


def register(sub: Any, only: str | None = None) -> None:
    """Add the cluster subcommands to the `raftlog` subparsers ``sub``.

    With ``only`` (the command a command line names), the commands that
    other modules define (acls, reassign-partitions, transactions, features,
    produce, consume, groups) are added only if named: importing them all (Kafka
    clients, the group model, many more protocol schemas) is about a third
    of a second of every CLI call on these machines. Help and errors need
    every command: `data_plane.cli.build_parser` asks for them all then."""

    def wanted(*commands: str) -> bool:
        return only is None or only in commands

    server = sub.add_parser("server", help="run a node").add_subparsers(dest="action", required=True)
    start = server.add_parser("start", help="run a node in the foreground (logs to stderr)")
    start.add_argument("config", metavar="FILE", help="server.properties")
    start.add_argument("--log-level", default="INFO")
    start.set_defaults(func=cmd_server_start)

    storage = sub.add_parser("storage", help="format log directories (kafka-storage.sh)")
    storage_sub = storage.add_subparsers(dest="action", required=True)
    fmt = storage_sub.add_parser("format", help="write meta.properties into every log dir")
    fmt.add_argument("--cluster-id", required=True)
    fmt.add_argument("--config", required=True, metavar="FILE")
    fmt.add_argument("--ignore-formatted", action="store_true")
    fmt.add_argument("--add-scram", action="append", metavar="MECHANISM=[name=N,password=P]",
                     help="a SCRAM credential the new cluster starts with (KIP-900), e.g. "
                          "'SCRAM-SHA-256=[name=broker,password=s]'; repeatable; give the same "
                          "ones to every controller")
    fmt.add_argument("--feature", action="append", metavar="NAME=LEVEL",
                     help="a feature level for the new cluster, e.g. "
                          "'eligible.leader.replicas.version=0' to format without KIP-966 "
                          "eligible leader replicas (on, level 1, by default, as in Kafka "
                          "4.1); repeatable; give the same ones to every controller")
    fmt.set_defaults(func=cmd_storage_format)
    info = storage_sub.add_parser(
        "info", help="the node's storage directories and their meta.properties")
    info.add_argument("--config", "-c", required=True, metavar="FILE")
    info.set_defaults(func=cmd_storage_info)
    storage_sub.add_parser("random-uuid", help="print a new cluster id").set_defaults(
        func=cmd_storage_random_uuid
    )

    quorum = sub.add_parser("quorum", help="describe the metadata quorum (kafka-metadata-quorum.sh)")
    describe = quorum.add_subparsers(dest="action", required=True).add_parser("describe")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true")
    what.add_argument("--replication", action="store_true")
    _admin_options(describe, broker=True)
    describe.set_defaults(func=cmd_quorum_describe)

    topics = sub.add_parser("topics", help="manage topics (kafka-topics.sh)")
    add_action(topics, _TOPICS_ACTIONS, "kafka-topics.sh")
    topics.add_argument("--topic", help="list, describe: a regular expression the whole "
                        "name must match (a,b: either); create, alter, delete: one name")
    topics.add_argument("--partitions", type=int, default=-1,
                        help="create: the count; alter: the new, larger count")
    topics.add_argument("--replication-factor", type=int, default=-1)
    topics.add_argument("--config", action="append", metavar="KEY=VALUE")
    topics.add_argument("--if-exists", action="store_true",
                        help="alter, delete, describe: do nothing (exit 0) if the topic is not there")
    topics.add_argument("--if-not-exists", action="store_true",
                        help="create: do nothing (exit 0) if the topic is already there")
    topics.add_argument("--exclude-internal", action="store_true",
                        help="list, describe: leave out __consumer_offsets and "
                        "__transaction_state")
    for flag, what in (("--under-replicated-partitions", "whose ISR is smaller than their "
                        "replica set"),
                       ("--unavailable-partitions", "without a live leader"),
                       ("--under-min-isr-partitions", "whose ISR is below min.insync.replicas "
                        "(or without a leader)"),
                       ("--at-min-isr-partitions", "whose ISR is at min.insync.replicas")):
        topics.add_argument(flag, action="store_true",
                            help=f"describe: only the partitions {what}")
    topics.add_argument("--topics-with-overrides", action="store_true",
                        help="describe: only the topics with configs of their own (topic lines)")
    topics.add_argument("--partition-size-limit-per-response", type=_positive, default=2000,
                        metavar="N", help="describe: partitions per DescribeTopicPartitions "
                        "answer (Kafka's admin default 2000; the broker caps it at "
                        "max.request.partition.size.limit)")
    _admin_options(topics, broker=True)
    topics.set_defaults(func=with_action(cmd_topics, _TOPICS_ACTIONS))

    configs = sub.add_parser(
        "configs",
        help="topic, broker, client-quota and SCRAM credential configs (kafka-configs.sh)")
    add_action(configs, _CONFIGS_ACTIONS, "kafka-configs.sh")
    entity = configs.add_mutually_exclusive_group()
    entity.add_argument("--topic")
    entity.add_argument("--broker", metavar="ID",
                        help="one broker's dynamic configs (kafka-configs.sh --entity-type "
                        "brokers --entity-name ID)")
    entity.add_argument("--broker-defaults", action="store_true",
                        help="the cluster-wide broker defaults (kafka-configs.sh --entity-default)")
    entity.add_argument("--broker-logger", metavar="ID",
                        help="one running broker's log levels (KIP-412; --entity-type "
                        "broker-loggers): --add-config LOGGER=LEVEL (TRACE, DEBUG, INFO, WARN, "
                        "ERROR, FATAL, OFF; root is the root logger), --delete-config LOGGER "
                        "to inherit again; until the broker restarts")
    # Client quotas (KIP-546): a user and/or a client id; not with the above.
    from data_plane.quotas_cli import ANY_NAME

    configs.add_argument("--client", nargs="?", const=ANY_NAME, metavar="ID",
                         help="a client id's quotas (kafka-configs.sh --entity-type clients "
                         "--entity-name ID); describe without ID: every client id")
    configs.add_argument("--client-defaults", action="store_true",
                         help="the default client-id quotas (--entity-type clients "
                         "--entity-default)")
    configs.add_argument("--user", nargs="?", const=ANY_NAME, metavar="NAME",
                         help="a user's quotas and SCRAM credentials (--entity-type users; "
                         "--add-config 'SCRAM-SHA-256=[iterations=N,password=P]'); with "
                         "--client, that pair's quotas; describe without NAME: every user")
    configs.add_argument("--user-defaults", action="store_true",
                         help="the default user quotas (--entity-type users --entity-default)")
    configs.add_argument("--ip", nargs="?", const=ANY_NAME, metavar="ADDRESS",
                         help="an address's connection_creation_rate (KIP-612, --entity-type "
                         "ips); describe without ADDRESS: every address")
    configs.add_argument("--ip-defaults", action="store_true",
                         help="the default address quota (--entity-type ips --entity-default)")
    # kafka-configs.sh's long form; `_entities_to_flags` turns it into the above.
    configs.add_argument("--entity-type", action="append", choices=_ENTITY_TYPES,
                         help="with --entity-name or --entity-default: the long form of "
                         "--topic, --broker, --client, --user and --ip (users and clients "
                         "together: that pair)")
    configs.add_argument("--entity-name", dest="entity_names", action="append",
                         metavar="NAME", help="the name for the --entity-type in the same place")
    configs.add_argument("--entity-default", dest="entity_names", action="append_const",
                         const=_DEFAULT_ENTITY,
                         help="the default entity for the --entity-type in the same place")
    configs.add_argument("--all", action="store_true",
                         help="describe: every setting of the broker, with its source")
    configs.add_argument("--add-config", action="append", metavar="K=V[,K2=[A,B]]")
    configs.add_argument("--delete-config", action="append", metavar="K[,K2]")
    _admin_options(configs, broker=True)
    configs.set_defaults(func=with_action(_entities_to_flags(cmd_configs), _CONFIGS_ACTIONS))

    delete_records = sub.add_parser(
        "delete-records", help="move a partition's log start offset (kafka-delete-records.sh)")
    delete_records.add_argument(
        "--offset-json-file", metavar="FILE",
        help='Kafka\'s form: {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], '
             '"version": 1}')
    delete_records.add_argument("--topic", help="with --partition and --offset: one partition")
    delete_records.add_argument("--partition", type=int)
    delete_records.add_argument("--offset", type=int,
                                help="delete the records below it; -1: below the high watermark")
    delete_records.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    delete_records.add_argument("--timeout-ms", type=int, default=30_000)
    add_command_config(delete_records)
    delete_records.set_defaults(func=cmd_delete_records)

    election = sub.add_parser(
        "leader-election", help="elect preferred or unclean leaders (kafka-leader-election.sh)")
    election.add_argument("--election-type", required=True, type=str.lower,
                          choices=("preferred", "unclean"))
    election.add_argument("--topic")
    election.add_argument("--partition", type=int)
    election.add_argument("--all-topic-partitions", action="store_true")
    election.add_argument("--path-to-json-file", metavar="FILE",
                          help='the partitions, as kafka-leader-election.sh takes them: '
                               '{"partitions": [{"topic": "foo", "partition": 1}]}')
    _admin_options(election, broker=True)
    election.set_defaults(func=cmd_leader_election)

    if wanted("acls"):
        from .acls_cli import register_acls

        register_acls(sub)
    if wanted("reassign-partitions"):
        from .reassign_cli import register as register_reassign

        register_reassign(sub)
    if wanted("transactions"):
        from .transactions_cli import register as register_transactions

        register_transactions(sub)
    if wanted("features"):
        from .features_cli import register_features

        register_features(sub)

    from .cluster_cli import register_cluster

    cluster = sub.add_parser("cluster", help="a local cluster (up/status/down); describe brokers")
    cluster_actions = cluster.add_subparsers(dest="action", required=True)
    register_cluster(cluster_actions)
    cluster_describe = cluster_actions.add_parser(
        "describe", help="brokers with their endpoint, rack and fenced state"
    )
    _admin_options(cluster_describe)
    cluster_describe.set_defaults(func=cmd_cluster_describe)
    cluster_id = cluster_actions.add_parser(
        "cluster-id", help="the cluster's id (kafka-cluster.sh cluster-id)")
    _admin_options(cluster_id, broker=True)
    cluster_id.set_defaults(func=cmd_cluster_id)
    unregister = cluster_actions.add_parser(
        "unregister", help="remove a decommissioned broker's registration (kafka-cluster.sh)")
    unregister.add_argument("--id", type=int, required=True, help="the broker id")
    _admin_options(unregister, broker=True)
    unregister.set_defaults(func=cmd_cluster_unregister)

    versions = sub.add_parser(
        "broker-api-versions",
        help="each broker's API version ranges (kafka-broker-api-versions.sh)")
    versions.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    add_command_config(versions)
    versions.add_argument("--timeout-ms", type=int, default=15_000)
    versions.set_defaults(func=cmd_broker_api_versions)

    if wanted("produce", "consume"):
        from .console_cli import register_console

        register_console(sub)
    if wanted("producer-perf-test", "consumer-perf-test"):
        from .perf_cli import register_perf

        register_perf(sub)
    if wanted("groups"):
        from .groups_cli import register_groups

        register_groups(sub)
    if wanted("get-offsets"):
        from .offsets_cli import register_get_offsets

        register_get_offsets(sub)
    if wanted("log-dirs"):
        from .log_dirs_cli import register_log_dirs

        register_log_dirs(sub)
    if wanted("delegation-tokens"):
        from .delegation_tokens_cli import register_delegation_tokens

        register_delegation_tokens(sub)

    metadata = sub.add_parser("metadata", help="metadata log tools")
    dump = metadata.add_subparsers(dest="action", required=True).add_parser(
        "dump", help="decode a __cluster_metadata segment or snapshot"
    )
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.set_defaults(func=cmd_metadata_dump)
