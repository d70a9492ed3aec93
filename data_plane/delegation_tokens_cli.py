"""``raftlog delegation-tokens``: create, renew, expire and describe
delegation tokens (KIP-48), as kafka-delegation-tokens.sh does, registered
by `data_plane.admin_cli`.

    raftlog delegation-tokens --bootstrap-server H:P --command-config alice.properties \\
        --create --max-life-time-period -1 [--renewer-principal User:bob ...] \\
        [--owner-principal User:carol]
    raftlog delegation-tokens ... --renew --hmac HMAC --renew-time-period -1
    raftlog delegation-tokens ... --expire --hmac HMAC --expiry-time-period -1
    raftlog delegation-tokens ... --describe [--owner-principal User:alice ...]

Token requests need an authenticated channel (SASL, or TLS with a client
certificate) and a principal that did not itself log in with a token, so
``--command-config`` is required, as it is for Kafka's tool. A time period
of -1 means the broker's default (``delegation.token.max.lifetime.ms``,
``delegation.token.expiry.time.ms``); ``--expire`` with -1 removes the
token at once. ``--create`` and ``--describe`` print Kafka's table:
TOKENID, HMAC (base64), OWNER, REQUESTER, RENEWERS, ISSUEDATE, EXPIRYDATE
and MAXDATE (UTC, ``yyyy-MM-dd'T'HH:mm``); ``--renew`` and ``--expire`` print
the new expiry date.

A client logs in with a token over SCRAM as username = TOKENID, password =
HMAC and the JAAS option ``tokenauth="true"``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime
from typing import Any, Final

from kio.schema.create_delegation_token.v3 import request as create_req
from kio.schema.describe_delegation_token.v3 import request as describe_req
from kio.schema.expire_delegation_token.v2 import request as expire_req
from kio.schema.renew_delegation_token.v2 import request as renew_req
from kio.static.primitive import i64Timedelta

from raftlog.net.errors import ErrorCode

from .admin_cli import CliError, _Admin, _error_name, _run_admin, add_command_config

__all__ = ("cmd_delegation_tokens", "register_delegation_tokens")

_HEADER: Final = ("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE",
                  "EXPIRYDATE", "MAXDATE")
#: What a refusal means, for the one-line error.
_EXPLAINED: Final = {
    ErrorCode.delegation_token_auth_disabled:
        "delegation tokens are disabled (set delegation.token.secret.key on every node)",
    ErrorCode.delegation_token_request_not_allowed:
        "token requests need an authenticated SASL or TLS listener and a principal that "
        "did not log in with a delegation token",
    ErrorCode.delegation_token_not_found: "no token has this HMAC",
    ErrorCode.delegation_token_expired: "the token has expired",
    ErrorCode.delegation_token_owner_mismatch: "only the token's owner or a renewer may do this",
    ErrorCode.delegation_token_authorization_failed:
        "creating a token for another owner needs CREATE_TOKENS on that user",
    ErrorCode.invalid_principal_type: "principals must be of type User",
}


def _principal(text: str, option: str) -> tuple[str, str]:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise CliError(f"{option} {text!r} is not a principal of the form Type:name "
                       "(for example User:alice)")
    return kind, name


def _period(ms: int) -> i64Timedelta:
    return i64Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _hmac(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CliError(f"--hmac {text!r} is not base64 (copy the HMAC column of --create "
                       "or --describe)") from None


def _date(value: Any) -> str:
    if isinstance(value, datetime.datetime):
        moment = value
    else:
        moment = datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M")


def _refused(error: int, what: str) -> CliError:
    try:
        code = ErrorCode(error)
    except ValueError:
        return CliError(f"cannot {what}: error {error}")
    reason = _EXPLAINED.get(code)
    return CliError(f"cannot {what}: {_error_name(error)}" + (f" ({reason})" if reason else ""))


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     .rstrip() for row in [_HEADER, *rows])


def _row(token_id: str, hmac: bytes, owner: str, requester: str, renewers: list[str],
         issue: Any, expiry: Any, maximum: Any) -> tuple[str, ...]:
    return (token_id, base64.b64encode(hmac).decode("ascii"), owner, requester,
            "[" + ", ".join(renewers) + "]", _date(issue), _date(expiry), _date(maximum))


def _accept_any(_: Any) -> str | None:
    return None


async def _create(admin: _Admin, args: argparse.Namespace) -> int:
    renewers = tuple(
        create_req.CreatableRenewers(principal_type=kind, principal_name=name)
        for kind, name in (_principal(p, "--renewer-principal")
                           for p in args.renewer_principal or ()))
    owner_kind, owner_name = (None, None)
    if args.owner_principal:
        owner_kind, owner_name = _principal(args.owner_principal[0], "--owner-principal")
    request = create_req.CreateDelegationTokenRequest(
        owner_principal_type=owner_kind, owner_principal_name=owner_name,
        renewers=renewers, max_lifetime=_period(args.max_life_time_period))
    answer = await admin.first(request, 3, _accept_any)
    if answer.error_code != ErrorCode.none:
        raise _refused(answer.error_code, "create a delegation token")
    print("Created delegation token with tokenId : " + answer.token_id)
    print(_table([_row(
        answer.token_id, answer.hmac, f"{answer.principal_type}:{answer.principal_name}",
        f"{answer.token_requester_principal_type}:{answer.token_requester_principal_name}",
        [f"{r.principal_type}:{r.principal_name}" for r in renewers],
        answer.issue_timestamp, answer.expiry_timestamp, answer.max_timestamp)]))
    return 0


async def _renew(admin: _Admin, args: argparse.Namespace) -> int:
    request = renew_req.RenewDelegationTokenRequest(
        hmac=_hmac(args.hmac), renew_period=_period(args.renew_time_period))
    answer = await admin.first(request, 2, _accept_any)
    if answer.error_code != ErrorCode.none:
        raise _refused(answer.error_code, "renew the delegation token")
    print(f"Completed renew operation. New expiry date : {_date(answer.expiry_timestamp)}")
    return 0


async def _expire(admin: _Admin, args: argparse.Namespace) -> int:
    request = expire_req.ExpireDelegationTokenRequest(
        hmac=_hmac(args.hmac), expiry_time_period=_period(args.expiry_time_period))
    answer = await admin.first(request, 2, _accept_any)
    if answer.error_code != ErrorCode.none:
        raise _refused(answer.error_code, "expire the delegation token")
    if args.expiry_time_period < 0:
        print("Completed expire operation. The token was removed.")
    else:
        print(f"Completed expire operation. New expiry date : {_date(answer.expiry_timestamp)}")
    return 0


async def _describe(admin: _Admin, args: argparse.Namespace) -> int:
    owners = None
    if args.owner_principal:
        owners = tuple(describe_req.DescribeDelegationTokenOwner(principal_type=kind,
                                                                 principal_name=name)
                       for kind, name in (_principal(p, "--owner-principal")
                                          for p in args.owner_principal))
    answer = await admin.first(describe_req.DescribeDelegationTokenRequest(owners=owners), 3,
                               _accept_any)
    if answer.error_code != ErrorCode.none:
        raise _refused(answer.error_code, "describe delegation tokens")
    rows = [_row(t.token_id, t.hmac, f"{t.principal_type}:{t.principal_name}",
                 f"{t.token_requester_principal_type}:{t.token_requester_principal_name}",
                 [f"{r.principal_type}:{r.principal_name}" for r in t.renewers],
                 t.issue_timestamp, t.expiry_timestamp, t.max_timestamp)
            for t in answer.tokens]
    print(f"Total number of tokens : {len(rows)}")
    if rows:
        print(_table(rows))
    return 0


def cmd_delegation_tokens(args: argparse.Namespace) -> int:
    actions = [name for name in ("create", "renew", "expire", "describe") if getattr(args, name)]
    if len(actions) != 1:
        raise CliError("exactly one of --create, --renew, --expire or --describe is required")
    action = actions[0]
    if not args.command_config:
        raise CliError("--command-config is required: token requests need an authenticated "
                       "(SASL or mutual TLS) connection")
    if action == "create" and args.max_life_time_period is None:
        raise CliError("--create needs --max-life-time-period (ms; -1: the broker's default)")
    if action == "renew" and (args.hmac is None or args.renew_time_period is None):
        raise CliError("--renew needs --hmac and --renew-time-period (ms; -1: the default)")
    if action == "expire" and (args.hmac is None or args.expiry_time_period is None):
        raise CliError("--expire needs --hmac and --expiry-time-period (ms; -1: remove now)")
    run = {"create": _create, "renew": _renew, "expire": _expire, "describe": _describe}[action]

    async def body(admin: _Admin) -> int:
        return await run(admin, args)

    return _run_admin(args, body)


def register_delegation_tokens(sub: Any) -> None:
    parser = sub.add_parser(
        "delegation-tokens", help="create, renew, expire and describe delegation tokens "
                                  "(kafka-delegation-tokens.sh)",
        description="Manage delegation tokens (KIP-48), as kafka-delegation-tokens.sh does.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--create", action="store_true", help="create a token")
    action.add_argument("--renew", action="store_true", help="renew a token (by its HMAC)")
    action.add_argument("--expire", action="store_true", help="expire a token (by its HMAC)")
    action.add_argument("--describe", action="store_true", help="list the tokens you may see")
    parser.add_argument("--max-life-time-period", type=int, metavar="MS",
                        help="--create: the token's maximum life (-1: the broker's "
                             "delegation.token.max.lifetime.ms)")
    parser.add_argument("--renewer-principal", action="append", metavar="User:NAME",
                        help="--create: a principal that may renew the token (repeatable)")
    parser.add_argument("--owner-principal", action="append", metavar="User:NAME",
                        help="--create: the token's owner (default: you; needs CREATE_TOKENS "
                             "on that user); --describe: only this owner's tokens (repeatable)")
    parser.add_argument("--hmac", help="--renew/--expire: the token's HMAC (base64)")
    parser.add_argument("--renew-time-period", type=int, metavar="MS",
                        help="--renew: how long from now (-1: delegation.token.expiry.time.ms)")
    parser.add_argument("--expiry-time-period", type=int, metavar="MS",
                        help="--expire: how long from now (-1: remove the token at once)")
    parser.add_argument("--timeout-ms", type=int, default=30_000,
                        help="give up after this long without an answer")
    add_command_config(parser)
    parser.set_defaults(func=cmd_delegation_tokens)
