"""``raftlog acls``: add, remove and list ACLs (kafka-acls.sh, KIP-801).

    raftlog acls --add --allow-principal User:alice --operation Read --topic orders \\
        --bootstrap-server 127.0.0.1:9092
    raftlog acls --add --allow-principal User:app --producer --topic orders --idempotent ...
    raftlog acls --add --allow-principal User:app --consumer --topic orders --group billing ...
    raftlog acls --list [--topic orders] [--principal User:alice] ...
    raftlog acls --remove --force --allow-principal User:alice --operation Read --topic orders ...

kafka-acls.sh's options, checks and output (Kafka 4's ``AclCommand``):

- resources: ``--topic``, ``--group``, ``--transactional-id``,
  ``--delegation-token`` and ``--user-principal`` (each repeatable; the
  last two for delegation tokens, KIP-48/KIP-373) and ``--cluster``, with ``--resource-pattern-type``
  ``literal`` (the default), ``prefixed``, or for --list/--remove the
  filters ``any`` and ``match``;
- entries: ``--allow-principal``/``--deny-principal`` (repeatable, ``Type:name``)
  from ``--allow-host``/``--deny-host`` (``*`` unless given), for each
  ``--operation`` (kafka-acls.sh's names: Read, Write, Create, Delete,
  Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs,
  IdempotentWrite, CreateTokens, DescribeTokens, All; default All);
- ``--producer``: Write, Describe, Create on the topics, Write, Describe on
  the transactional ids, and with ``--idempotent`` IdempotentWrite on the
  cluster; ``--consumer``: Read, Describe on the topics and Read on the
  groups. They replace ``--operation`` and allow no deny options.
- ``--add`` lists, per resource, each ACL that already exists (``Acl
  (pattern=..., entry=...) already exists.``) and adds the others
  (``Adding ACLs for resource `ResourcePattern(...)`: ``, then one
  ``\\t(principal=..., host=..., operation=..., permissionType=...)`` line
  each); ``--list`` prints ``Current ACLs for resource `...`:`` blocks,
  with ``--principal`` only that principal's entries; ``--remove`` prints
  nothing. Resources and entries are printed sorted (kafka-acls.sh's order
  is a hash set's).
- ``--remove`` asks for a ``y`` per resource as kafka-acls.sh does, unless
  ``--force``; with stdin not a terminal it refuses instead of waiting.
  Without an entry option it removes every ACL of the resource filter.

Errors are one line on stderr, exit 2 (kafka-acls.sh prints its usage and
exits 1). Differences: ``--cluster`` names the cluster's literal pattern
whatever ``--resource-pattern-type`` says (kafka-acls.sh silently drops it
unless the type is literal); an unknown ``--operation`` name is refused by
name.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

from kio.schema.create_acls.v3 import request as ca_req
from kio.schema.create_acls.v3 import response as ca_resp
from kio.schema.delete_acls.v3 import request as da_req
from kio.schema.delete_acls.v3 import response as da_resp
from kio.schema.describe_acls.v3 import request as dsc_req
from kio.schema.describe_acls.v3 import response as dsc_resp
from kio.static.primitive import i8

from data_plane.admin_cli import CliError, _Admin, _admin_options, _error_name, _run_admin
from metadata_quorum.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    parse_principal,
)
from raftlog.net.errors import ErrorCode

__all__ = (
    "Entry",
    "Pattern",
    "cmd_acls",
    "format_adding",
    "format_current",
    "format_entry",
    "format_pattern",
    "operation_named",
    "register_acls",
    "resource_entries",
    "resource_filters",
)

_VERSION: Final = 3
Op = AclOperation

#: kafka-acls.sh's ``--operation`` names (``SecurityUtils.operationName``).
OPERATION_NAMES: Final = {
    "".join(w.capitalize() for w in op.name.split("_")): op
    for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)
}
#: Kafka's ``AclEntry.supportedOperations`` (ALL is valid on every type too).
SUPPORTED_OPERATIONS: Final = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                   Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS,
                                   Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                                     Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}
_PATTERN_TYPES: Final = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
                         "any": PatternType.ANY, "match": PatternType.MATCH}


class Pattern(NamedTuple):
    """A resource pattern, or (with pattern type ANY or MATCH) a pattern filter."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType


class Entry(NamedTuple):
    """An access control entry (Kafka's ``AccessControlEntry``)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


# --- what the options ask for ----------------------------------------------------


def operation_named(name: str) -> AclOperation:
    """Kafka's ``SecurityUtils.operation``: ``ClusterAction``, or any case
    without the underscores (``CLUSTERACTION``). Raises `CliError`."""
    text = name.strip()
    for known, op in OPERATION_NAMES.items():
        if text == known or text.upper() == known.upper():
            return op
    raise CliError(f"unknown operation {text!r}: valid operations are "
                   + ", ".join(OPERATION_NAMES))


def _principals(values: Sequence[str] | None) -> list[str]:
    principals = []
    for value in values or ():
        try:
            kind, name = parse_principal(value.strip())
        except ValueError as exc:
            raise CliError(str(exc)) from None
        principals.append(f"{kind}:{name}")
    return list(dict.fromkeys(principals))


def _hosts(hosts: Sequence[str] | None, principals: Sequence[str] | None) -> list[str]:
    """kafka-acls.sh's ``getHosts``: the hosts given, else ``*`` if there are
    principals, else none."""
    if hosts:
        return list(dict.fromkeys(h.strip() for h in hosts))
    return [WILDCARD] if principals else []


def resource_filters(args: argparse.Namespace, *, required: bool) -> list[Pattern]:
    """The resources the options name, in kafka-acls.sh's order (topics,
    cluster, groups, transactional ids, delegation tokens, users). Raises `CliError` if ``required``
    and there are none."""
    pattern_type = _PATTERN_TYPES[args.resource_pattern_type]
    filters = [Pattern(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic or ()]
    if args.cluster or args.idempotent:
        filters.append(Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    filters += [Pattern(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group or ()]
    filters += [Pattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type)
                for t in args.transactional_id or ()]
    filters += [Pattern(ResourceType.DELEGATION_TOKEN, t.strip(), pattern_type)
                for t in args.delegation_token or ()]
    filters += [Pattern(ResourceType.USER, u.strip(), pattern_type)
                for u in args.user_principal or ()]
    if not filters and required:
        raise CliError("You must provide at least one resource: --topic <topic> or --cluster "
                       "or --group <group> or --transactional-id <transactional-id> or "
                       "--delegation-token <Delegation Token ID> or "
                       "--user-principal <User Principal>")
    return list(dict.fromkeys(filters))


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> frozenset[Entry]:
    """kafka-acls.sh's ``getAcl``: every (principal, host, operation) of the
    allow options, then of the deny options."""
    ops = list(operations)
    entries: set[Entry] = set()
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        for principal in _principals(principals):
            for host in _hosts(hosts, principals):
                entries.update(Entry(principal, host, op, permission) for op in ops)
    return frozenset(entries)


def resource_entries(args: argparse.Namespace) -> dict[Pattern, frozenset[Entry]]:
    """kafka-acls.sh's ``getResourceFilterToAcls``: each resource (filter)
    with the entries to add or remove there, ``--producer``/``--consumer``
    expanded. Raises `CliError` for an operation a resource type does not
    have."""
    out: dict[Pattern, frozenset[Entry]] = {}
    filters = resource_filters(args, required=True)
    if not (args.producer or args.consumer):
        entries = _entries(args, [operation_named(o) for o in args.operation or ["All"]])
        out = dict.fromkeys(filters, entries)
    if args.producer:
        for f in filters:
            if f.resource_type is ResourceType.TOPIC:
                out[f] = _entries(args, (Op.WRITE, Op.DESCRIBE, Op.CREATE))
            elif f.resource_type is ResourceType.TRANSACTIONAL_ID:
                out[f] = _entries(args, (Op.WRITE, Op.DESCRIBE))
        if args.idempotent:
            cluster = Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            out[cluster] = _entries(args, (Op.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            ops = {ResourceType.TOPIC: (Op.READ, Op.DESCRIBE),
                   ResourceType.GROUP: (Op.READ,)}.get(f.resource_type)
            if ops is not None:
                out[f] = out.get(f, frozenset()) | _entries(args, ops)
    for f, entries in out.items():
        valid = SUPPORTED_OPERATIONS[f.resource_type] | {Op.ALL}
        if any(e.operation not in valid for e in entries):
            raise CliError(f"ResourceType {f.resource_type.name} only supports operations "
                           f"[{', '.join(op.name for op in sorted(valid))}]")
    return out


def check_options(args: argparse.Namespace) -> None:
    """kafka-acls.sh's ``checkArgs`` (its messages). Raises `CliError`."""
    def given(*names: str) -> list[str]:
        return [n for n in names if getattr(args, n.replace("-", "_"))]

    if args.list:
        for other in given("producer", "consumer", "allow-host", "allow-principal",
                           "deny-host", "deny-principal"):
            raise CliError(f'Option "--list" can\'t be used with option "--{other}"')
    for role in given("producer", "consumer"):
        for other in given("operation", "deny-principal", "deny-host"):
            raise CliError(f'Option "--{role}" can\'t be used with option "--{other}"')
    if args.principal and not args.list:
        raise CliError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise CliError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise CliError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise CliError("With --consumer you must specify a --topic and a --group and no "
                       "--cluster or --transactional-id option should be specified.")


# --- output ------------------------------------------------------------------------


def format_pattern(pattern: Pattern) -> str:
    """Kafka's ``ResourcePattern.toString`` (and ``ResourcePatternFilter``'s)."""
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def format_entry(entry: Entry) -> str:
    """Kafka's ``AccessControlEntry.toString``."""
    return (f"(principal={entry.principal}, host={entry.host}, "
            f"operation={entry.operation.name}, permissionType={entry.permission.name})")


def _entry_order(entry: Entry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission)


def _pattern_order(pattern: Pattern) -> tuple[int, str, int]:
    return int(pattern.resource_type), pattern.name, int(pattern.pattern_type)


def format_adding(pattern: Pattern, entries: Iterable[Entry]) -> list[str]:
    """kafka-acls.sh's lines for the ACLs ``--add`` is adding to ``pattern``
    (the trailing space, the space before the first tab, the blank line)."""
    lines = [f"\t{format_entry(e)}" for e in sorted(entries, key=_entry_order)]
    return [f"Adding ACLs for resource `{format_pattern(pattern)}`: ", " " + lines[0],
            *lines[1:], ""]


def format_current(acls: dict[Pattern, set[Entry]]) -> list[str]:
    """kafka-acls.sh's ``Current ACLs for resource`` blocks, sorted."""
    lines: list[str] = []
    for pattern in sorted(acls, key=_pattern_order):
        lines.append(f"Current ACLs for resource `{format_pattern(pattern)}`:")
        lines += [f"\t{format_entry(e)}" for e in sorted(acls[pattern], key=_entry_order)]
        lines.append("")
    return lines


# --- the requests --------------------------------------------------------------------


def _retriable(codes: Iterable[int]) -> str | None:
    """Answers to retry elsewhere (a controller that is not active, a broker
    that could not reach it: ACL writes are idempotent)."""
    for code in codes:
        if code in (ErrorCode.not_controller, ErrorCode.request_timed_out):
            return _error_name(code)
    return None


def _failure(code: int, message: str | None) -> CliError:
    return CliError("Error while executing ACL command: " + _error_name(code)
                    + (f": {message}" if message else ""))


async def describe(admin: _Admin, pattern: Pattern | None) -> dict[Pattern, set[Entry]]:
    """The ACLs of ``pattern`` (a filter; None: every ACL), by resource pattern."""
    request = dsc_req.DescribeAclsRequest(
        resource_type_filter=i8(int(pattern.resource_type if pattern else ResourceType.ANY)),
        resource_name_filter=pattern.name if pattern else None,
        pattern_type_filter=i8(int(pattern.pattern_type if pattern else PatternType.ANY)),
        principal_filter=None, host_filter=None, operation=i8(int(Op.ANY)),
        permission_type=i8(int(AclPermissionType.ANY)))
    response: dsc_resp.DescribeAclsResponse = await admin.first(
        request, _VERSION, lambda r: _retriable([r.error_code]))
    if response.error_code != ErrorCode.none:
        raise _failure(response.error_code, response.error_message)
    out: dict[Pattern, set[Entry]] = {}
    for resource in response.resources:
        key = Pattern(ResourceType(int(resource.resource_type)), resource.resource_name,
                      PatternType(int(resource.pattern_type)))
        out.setdefault(key, set()).update(
            Entry(a.principal, a.host, AclOperation(int(a.operation)),
                  AclPermissionType(int(a.permission_type))) for a in resource.acls)
    return out


async def _create(admin: _Admin, pattern: Pattern, entries: Sequence[Entry]) -> None:
    request = ca_req.CreateAclsRequest(creations=tuple(
        ca_req.AclCreation(
            resource_type=i8(int(pattern.resource_type)), resource_name=pattern.name,
            resource_pattern_type=i8(int(pattern.pattern_type)), principal=e.principal,
            host=e.host, operation=i8(int(e.operation)), permission_type=i8(int(e.permission)))
        for e in entries))
    response: ca_resp.CreateAclsResponse = await admin.first(
        request, _VERSION, lambda r: _retriable([x.error_code for x in r.results]))
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise _failure(result.error_code, result.error_message)


async def _delete(admin: _Admin, pattern: Pattern, entries: Sequence[Entry]) -> None:
    """kafka-acls.sh's ``removeAcls``: one filter per entry (exactly that
    entry), or with no entries one that matches every entry."""
    def one(entry: Entry | None) -> da_req.DeleteAclsFilter:
        return da_req.DeleteAclsFilter(
            resource_type_filter=i8(int(pattern.resource_type)),
            resource_name_filter=pattern.name, pattern_type_filter=i8(int(pattern.pattern_type)),
            principal_filter=entry.principal if entry else None,
            host_filter=entry.host if entry else None,
            operation=i8(int(entry.operation if entry else Op.ANY)),
            permission_type=i8(int(entry.permission if entry else AclPermissionType.ANY)))

    request = da_req.DeleteAclsRequest(
        filters=tuple(one(e) for e in entries) if entries else (one(None),))
    response: da_resp.DeleteAclsResponse = await admin.first(
        request, _VERSION, lambda r: _retriable([x.error_code for x in r.filter_results]))
    for result in response.filter_results:
        if result.error_code != ErrorCode.none:
            raise _failure(result.error_code, result.error_message)


def _confirm(args: argparse.Namespace, question: str) -> bool:
    """kafka-acls.sh's ``confirmAction``: yes with --force, else ask."""
    if args.force:
        return True
    if not sys.stdin.isatty():
        raise CliError("--remove asks for confirmation, and stdin is not a terminal: "
                       "give --force to remove without asking")
    print(question, flush=True)
    return input().strip().lower() == "y"


# --- the command ------------------------------------------------------------------------


def cmd_acls(args: argparse.Namespace) -> int:
    check_options(args)
    if args.list:
        filters = resource_filters(args, required=False)
        principals = _principals(args.principal)

        async def list_acls(admin: _Admin) -> int:
            found: dict[Pattern, set[Entry]] = {}
            targets: list[Pattern | None] = list(filters) or [None]
            for f in targets:
                for pattern, entries in (await describe(admin, f)).items():
                    found.setdefault(pattern, set()).update(entries)
            if not principals:
                lines = format_current(found)
            else:
                lines = []
                for principal in principals:
                    lines.append(f"ACLs for principal `{principal}`")
                    lines += format_current({
                        p: own for p, entries in found.items()
                        if (own := {e for e in entries if e.principal == principal})})
            for line in lines:
                print(line)
            return 0

        return _run_admin(args, list_acls)

    plan = resource_entries(args)
    if args.add:
        pattern_type = _PATTERN_TYPES[args.resource_pattern_type]
        if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise CliError(f"A '--resource-pattern-type' value of '{pattern_type.name}' is not "
                           "valid when adding acls.")
        if any(not entries for entries in plan.values()):
            raise CliError("You must specify one of: --allow-principal, --deny-principal when "
                           "trying to add ACLs.")

        async def add(admin: _Admin) -> int:
            for pattern, entries in plan.items():
                existing = (await describe(admin, pattern)).get(pattern, set())
                new = []
                for entry in sorted(entries, key=_entry_order):
                    if entry in existing:
                        print(f"Acl (pattern={format_pattern(pattern)}, "
                              f"entry={format_entry(entry)}) already exists.")
                    else:
                        new.append(entry)
                if new:
                    for line in format_adding(pattern, new):
                        print(line)
                    await _create(admin, pattern, new)
            return 0

        return _run_admin(args, add)

    async def remove(admin: _Admin) -> int:
        for pattern, entries in plan.items():
            if entries:
                listed = "\n".join(f"\t{format_entry(e)}"
                                   for e in sorted(entries, key=_entry_order))
                question = (f"Are you sure you want to remove ACLs: \n {listed}\n from resource "
                            f"filter `{format_pattern(pattern)}`? (y/n)")
            else:
                question = ("Are you sure you want to delete all ACLs for resource filter "
                            f"`{format_pattern(pattern)}`? (y/n)")
            if _confirm(args, question):
                await _delete(admin, pattern, sorted(entries, key=_entry_order))
        return 0

    return _run_admin(args, remove)


def register_acls(sub: Any) -> None:
    """Add ``acls`` to the `raftlog` subparsers ``sub``."""
    parser = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true",
                        help="list ACLs (of the resources given, else every ACL)")
    parser.add_argument("--topic", action="append", metavar="TOPIC",
                        help="a topic ('*': every topic); repeatable")
    parser.add_argument("--group", action="append", metavar="GROUP",
                        help="a consumer group ('*': every group); repeatable")
    parser.add_argument("--transactional-id", action="append", metavar="ID",
                        help="a transactional id ('*': every one); repeatable")
    parser.add_argument("--delegation-token", action="append", metavar="TOKEN_ID",
                        help="a delegation token (Describe lets a principal see it); "
                             "repeatable")
    parser.add_argument("--user-principal", action="append", metavar="User:NAME",
                        help="a user, for CreateTokens (create tokens it owns) and "
                             "DescribeTokens (see its tokens); repeatable")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", type=str.lower, default="literal",
                        choices=tuple(_PATTERN_TYPES),
                        help="literal (default) or prefixed; --list and --remove also take the "
                        "filters any (every pattern type, the exact name) and match (every "
                        "pattern that applies to the name)")
    parser.add_argument("--allow-principal", action="append", metavar="TYPE:NAME",
                        help="e.g. User:alice, User:* for everyone; repeatable")
    parser.add_argument("--deny-principal", action="append", metavar="TYPE:NAME",
                        help="repeatable; a DENY wins over any ALLOW")
    parser.add_argument("--allow-host", action="append", metavar="HOST",
                        help="where --allow-principal may connect from (default *)")
    parser.add_argument("--deny-host", action="append", metavar="HOST",
                        help="where --deny-principal is denied from (default *)")
    parser.add_argument("--operation", action="append", metavar="OPERATION",
                        help="repeatable; default All. One of " + ", ".join(OPERATION_NAMES))
    parser.add_argument("--principal", action="append", metavar="TYPE:NAME",
                        help="--list: only this principal's ACLs; repeatable")
    parser.add_argument("--producer", action="store_true",
                        help="Write, Describe and Create on the topics, Write and Describe on "
                        "the transactional ids")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--consumer", action="store_true",
                        help="Read and Describe on the topics, Read on the groups")
    parser.add_argument("--force", action="store_true",
                        help="--remove without asking for confirmation")
    _admin_options(parser, broker=True)
    parser.set_defaults(func=cmd_acls)
