"""``raftlog log-dirs --describe``: each broker's log directories and the
partitions in them, as kafka-log-dirs.sh prints them (DescribeLogDirs),
registered by `data_plane.admin_cli`.

    raftlog log-dirs --describe --bootstrap-server H:P
    raftlog log-dirs --describe --bootstrap-server H:P --broker-list 1,2 --topic-list orders

Two lines, then one line of JSON:

    Querying brokers for log directories information
    Received log directory information from brokers 1,2,3
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"orders-0",
    "size":1054,"offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data/1"}]}],
    "version":1}

``size`` is the partition's bytes on disk, ``offsetLag`` how far its log end
trails its high watermark (0 on a leader), ``error`` the Kafka exception a
failed directory reports. Every live broker is asked unless
``--broker-list``; a broker named there that the cluster does not know is
an error, as in Kafka's tool. ``--topic-list`` keeps only those topics'
partitions.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

from kio.schema.describe_log_dirs.v4 import request as dld_req
from kio.schema.describe_log_dirs.v4 import response as dld_resp

from raftlog.net.errors import ErrorCode, TransportError, UnsupportedVersionError

from .admin_cli import CliError, _Admin, _error_name, _metadata, _run_admin, add_command_config

__all__ = ("cmd_log_dirs", "format_log_dirs", "register_log_dirs")

#: The exception class Kafka's tool names for a directory's error code.
_EXCEPTIONS: Final[dict[int, str]] = {
    ErrorCode.kafka_storage_error: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.cluster_authorization_failed:
        "org.apache.kafka.common.errors.ClusterAuthorizationException",
}


def _ids(text: str, option: str) -> set[int]:
    try:
        return {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise CliError(f"{option} expects broker ids like 0,1,2, not {text!r}") from None


def format_log_dirs(answers: dict[int, Any], topics: set[str]) -> str:
    """The JSON line of kafka-log-dirs.sh for ``answers`` (broker id ->
    DescribeLogDirs response), keeping ``topics`` only (all if empty)."""
    brokers = []
    for broker, response in sorted(answers.items()):
        dirs = []
        for result in response.results:
            partitions = [
                {"partition": f"{topic.name}-{int(p.partition_index)}",
                 "size": int(p.partition_size), "offsetLag": int(p.offset_lag),
                 "isFuture": bool(p.is_future_key)}
                for topic in result.topics if not topics or str(topic.name) in topics
                for p in topic.partitions]
            code = int(result.error_code)
            error = None if code == ErrorCode.none else _EXCEPTIONS.get(code, _error_name(code))
            dirs.append({"partitions": partitions, "error": error, "logDir": str(result.log_dir)})
        brokers.append({"broker": broker, "logDirs": dirs})
    return json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":"))


def cmd_log_dirs(args: argparse.Namespace) -> int:
    if not args.describe:
        raise CliError("give --describe (the only action kafka-log-dirs.sh has)")
    asked = _ids(args.broker_list, "--broker-list")
    topics = {t for t in args.topic_list.split(",") if t}

    async def body(admin: _Admin) -> int:
        metadata = await _metadata(admin, None)
        known = {int(b.node_id): (str(b.host), int(b.port)) for b in metadata.brokers}
        missing = asked - set(known)
        if missing:
            raise CliError(
                "The given brokers do not exist from --broker-list: "
                f"{','.join(map(str, sorted(missing)))}. Current existent brokers: "
                f"{','.join(map(str, sorted(known)))}")
        brokers = sorted(asked or known)
        print("Querying brokers for log directories information")
        request = dld_req.DescribeLogDirsRequest(topics=None)
        answers = {}
        for broker in brokers:
            try:
                response: dld_resp.DescribeLogDirsResponse = await admin.send_to(
                    known[broker], request, 4)
            except (TransportError, UnsupportedVersionError) as exc:
                raise CliError(f"broker {broker}: {exc}") from None
            if response.error_code != ErrorCode.none:
                raise CliError(f"broker {broker}: {_error_name(response.error_code)}")
            answers[broker] = response
        print("Received log directory information from brokers "
              f"{','.join(map(str, brokers))}")
        print(format_log_dirs(answers, topics))
        return 0

    return _run_admin(args, body)


def register_log_dirs(sub: Any) -> None:
    parser = sub.add_parser(
        "log-dirs", help="brokers' log directories and partition sizes (kafka-log-dirs.sh)",
        description="Query log directory usage on the brokers, as kafka-log-dirs.sh does.")
    parser.add_argument("--describe", action="store_true", help="describe the log directories")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--broker-list", default="", metavar="ID,ID,...",
                        help="the brokers to ask (default: every live broker)")
    parser.add_argument("--topic-list", default="", metavar="TOPIC,TOPIC,...",
                        help="only these topics' partitions (default: all)")
    parser.add_argument("--timeout-ms", type=int, default=30_000)
    add_command_config(parser)
    parser.set_defaults(func=cmd_log_dirs)
