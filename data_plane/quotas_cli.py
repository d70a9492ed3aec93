"""``raftlog configs describe|alter --client/--user``: client quotas
(kafka-configs.sh ``--entity-type clients|users``, KIP-546).

    raftlog configs alter --client app --add-config producer_byte_rate=1048576
    raftlog configs alter --client-defaults --add-config consumer_byte_rate=2097152
    raftlog configs alter --user alice --client app --delete-config producer_byte_rate
    raftlog configs describe --client app       # that entity
    raftlog configs describe --client           # every entity with a client id
    raftlog configs describe --user alice --client
    raftlog configs alter --ip 10.0.0.7 --add-config connection_creation_rate=10   # KIP-612
    raftlog configs alter --ip-defaults --add-config connection_creation_rate=100

``--client ID`` / ``--user NAME`` name an entity (kafka-configs.sh
``--entity-name``), ``--client-defaults`` / ``--user-defaults`` the default
(``--entity-default``); a user and a client together name a (user,
client-id) entity. Describe without a name lists every entity of that type.
A client's user is the name it authenticated with on a SASL listener, and
``ANONYMOUS`` on a PLAINTEXT one.

Output follows kafka-configs.sh: ``Quota configs for client-id 'app' are
producer_byte_rate=1048576.0``.

``--user NAME`` also takes SCRAM credentials (``SCRAM-SHA-256=[...]``,
`data_plane.scram_cli`); describe lists them after the user's quotas. As
kafka-configs.sh, one alter sets either quotas or credentials: they are two
admin requests, and a mix could half succeed.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from kio.schema.alter_client_quotas.v1 import request as acq_req
from kio.schema.alter_client_quotas.v1 import response as acq_resp
from kio.schema.alter_user_scram_credentials.v0 import request as aus_req
from kio.schema.describe_client_quotas.v1 import request as dcq_req
from kio.schema.describe_client_quotas.v1 import response as dcq_resp
from kio.static.primitive import f64, i8

from data_plane.admin_cli import CliError, _Admin, _error_name, _run_admin, parse_add_config
from data_plane.scram_cli import (
    alter_scram_credentials,
    describe_scram_credentials,
    is_scram_key,
    scram_request,
)
from raftlog.net.errors import ErrorCode

__all__ = ("ANY_NAME", "cmd_quota_configs", "entity_label", "wants_quotas")

ALTER_CLIENT_QUOTAS_KEY: Final = 49
DESCRIBE_CLIENT_QUOTAS_KEY: Final = 48
#: ``--client`` / ``--user`` without a name (describe: any entity of the type).
ANY_NAME: Final = "\x00any"
_EXACT, _DEFAULT, _ANY = 0, 1, 2


def wants_quotas(args: argparse.Namespace) -> bool:
    return any((args.client is not None, args.client_defaults,
                args.user is not None, args.user_defaults,
                getattr(args, "ip", None) is not None, getattr(args, "ip_defaults", False)))


def _parts(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name / None for the default / ANY_NAME) as asked."""
    if args.user is not None and args.user_defaults:
        raise CliError("give --user NAME or --user-defaults, not both")
    if args.client is not None and args.client_defaults:
        raise CliError("give --client ID or --client-defaults, not both")
    parts: list[tuple[str, str | None]] = []
    ip, ip_defaults = getattr(args, "ip", None), getattr(args, "ip_defaults", False)
    if ip is not None or ip_defaults:
        if ip is not None and ip_defaults:
            raise CliError("give --ip ADDRESS or --ip-defaults, not both")
        if args.user is not None or args.user_defaults or args.client is not None \
                or args.client_defaults:
            raise CliError("an ip entity cannot be combined with --user or --client")
        if ip == "":
            raise CliError("an empty ip address: use --ip-defaults")
        return [("ip", None if ip_defaults else ip)]
    if args.user is not None or args.user_defaults:
        parts.append(("user", None if args.user_defaults else args.user))
    if args.client is not None or args.client_defaults:
        parts.append(("client-id", None if args.client_defaults else args.client))
    for entity_type, name in parts:
        if name == "":
            raise CliError(f"an empty {entity_type} name: use --"
                           f"{'user' if entity_type == 'user' else 'client'}-defaults")
    return parts


def entity_label(entity: list[tuple[str, str | None]]) -> str:
    """kafka-configs.sh's wording: ``user-principal 'alice', client-id 'app'``,
    ``the default client-id``."""
    words = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    ordered = sorted(entity, key=lambda p: 0 if p[0] == "user" else 1)
    return ", ".join(f"the default {words.get(t, t)}" if n is None else f"{words.get(t, t)} '{n}'"
                     for t, n in ordered)


def _value_text(value: float) -> str:
    return repr(float(value))


def cmd_quota_configs(args: argparse.Namespace) -> int:
    parts = _parts(args)
    if args.action == "alter":
        if any(n == ANY_NAME for _, n in parts):
            raise CliError("configs alter needs a name (--client ID, --user NAME) or "
                           "--client-defaults/--user-defaults")
        if not (args.add_config or args.delete_config):
            raise CliError("configs alter needs --add-config and/or --delete-config")
        added = [kv for item in args.add_config or () for kv in parse_add_config(item)]
        deleted = [k.strip() for item in args.delete_config or () for k in item.split(",")
                   if k.strip()]
        scram = _scram_request(parts, added, deleted)
        ops = []
        for key, text in added:
            if is_scram_key(key):
                continue
            try:
                value = float(text)
            except ValueError:
                raise CliError(f"{key}={text!r}: a quota is a number") from None
            ops.append(acq_req.OpData(key=key, value=f64(value), remove=False))
        ops += [acq_req.OpData(key=k, value=f64(0.0), remove=True)
                for k in deleted if not is_scram_key(k)]
        if scram is not None and ops:
            # Two admin requests could half succeed; kafka-configs.sh refuses too.
            raise CliError("Cannot alter both quota and SCRAM credential configs "
                           "simultaneously for 'users'")

        async def alter(admin: _Admin) -> int:
            label = entity_label(parts)
            if scram is not None:
                await alter_scram_credentials(admin, scram, label)
            if ops:
                await _alter_quotas(admin, parts, ops)
            print(f"Completed updating config for {label}.")
            return 0

        return _run_admin(args, alter)

    async def describe(admin: _Admin) -> int:
        components = tuple(
            dcq_req.ComponentData(
                entity_type=t,
                match_type=i8(_ANY if n == ANY_NAME else _DEFAULT if n is None else _EXACT),
                match=None if n is None or n == ANY_NAME else n)
            for t, n in parts)
        # strict: only entities of exactly these types (kafka-configs.sh's describe).
        request = dcq_req.DescribeClientQuotasRequest(components=components, strict=True)
        response: dcq_resp.DescribeClientQuotasResponse = await admin.first(
            request, 1, lambda r: _retriable(r.error_code))
        if response.error_code != ErrorCode.none:
            raise CliError(f"cannot describe quotas: {_error_name(response.error_code)}"
                           + (f": {response.error_message}" if response.error_message else ""))
        entries: Any = response.entries or ()
        if not entries and not any(n == ANY_NAME for _, n in parts):
            print(f"Quota configs for {entity_label(parts)} are ")
        for entry in entries:
            entity = [(str(e.entity_type), e.entity_name) for e in entry.entity]
            values = ", ".join(f"{v.key}={_value_text(v.value)}" for v in entry.values)
            print(f"Quota configs for {entity_label(entity)} are {values}")
        # Then a user's SCRAM credentials, as kafka-configs.sh does: for a
        # user alone (not a default, not with a client id).
        if len(parts) == 1 and parts[0][0] == "user" and parts[0][1] is not None:
            name = parts[0][1]
            for line in await describe_scram_credentials(
                    admin, None if name == ANY_NAME else name):
                print(line)
        return 0

    return _run_admin(args, describe)


async def _alter_quotas(admin: _Admin, parts: list[tuple[str, str | None]],
                        ops: list[acq_req.OpData]) -> None:
    request = acq_req.AlterClientQuotasRequest(
        entries=(acq_req.EntryData(
            entity=tuple(acq_req.EntityData(entity_type=t, entity_name=n) for t, n in parts),
            ops=tuple(ops)),),
        validate_only=False)
    response: acq_resp.AlterClientQuotasResponse = await admin.first(
        request, 1, lambda r: _retriable(r.entries[0].error_code))
    entry = response.entries[0]
    if entry.error_code != ErrorCode.none:
        raise CliError(f"cannot alter the quotas of {entity_label(parts)}: "
                       f"{_error_name(entry.error_code)}"
                       + (f": {entry.error_message}" if entry.error_message else ""))


def _scram_request(
    parts: list[tuple[str, str | None]], added: list[tuple[str, str]], deleted: list[str]
) -> aus_req.AlterUserScramCredentialsRequest | None:
    """The SCRAM half of an alter (None if it names no mechanism). SCRAM
    credentials belong to a named user alone (kafka-configs.sh's rules)."""
    scram_added = [(k, v) for k, v in added if is_scram_key(k)]
    scram_deleted = [k for k in deleted if is_scram_key(k)]
    if not (scram_added or scram_deleted):
        return None
    names = ", ".join(sorted({k for k, _ in scram_added} | set(scram_deleted)))
    if len(parts) != 1 or parts[0][0] != "user":
        raise CliError(f"SCRAM credentials ({names}) belong to a user alone: use --user NAME "
                       "without --client or --ip")
    user = parts[0][1]
    if user is None:
        raise CliError("--user-defaults is not allowed with SCRAM credentials: they belong "
                       "to a named user")
    return scram_request(user, scram_added, scram_deleted)


def _retriable(code: int) -> str | None:
    """Answers to retry elsewhere (a broker that could not reach the controller)."""
    if code in (ErrorCode.not_controller, ErrorCode.request_timed_out):
        return _error_name(code)
    return None
