"""``raftlog configs alter|describe --user NAME``: SCRAM credentials
(kafka-configs.sh ``--entity-type users``, KIP-554), beside the user's
client quotas (`data_plane.quotas_cli`).

    raftlog configs alter --user alice --add-config \\
        'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    raftlog configs alter --user alice --delete-config SCRAM-SHA-256
    raftlog configs describe --user alice     # quotas, then its SCRAM credentials
    raftlog configs describe --user           # every user's quotas, then credentials

A credential's value is kafka-configs.sh's ``[iterations=N,]password=P``
(iterations 4096 unless given). The CLI salts: it draws a random 32-byte
salt, computes the salted password (PBKDF2, `raftlog.security.scram`) and
sends both in AlterUserScramCredentials; the password itself never leaves
the CLI. The controller checks the iteration count, so an out-of-range
count is refused with its reason (``Too few iterations``).

Describe prints kafka-configs.sh's line, mechanisms and iteration counts
only: ``SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from kio.schema.alter_user_scram_credentials.v0 import request as aus_req
from kio.schema.alter_user_scram_credentials.v0 import response as aus_resp
from kio.schema.describe_user_scram_credentials.v0 import request as dus_req
from kio.schema.describe_user_scram_credentials.v0 import response as dus_resp
from kio.static.primitive import i8, i32

from data_plane.admin_cli import CliError, _Admin, _error_name
from metadata_quorum.records import ScramMechanism
from raftlog.net.errors import ErrorCode
from raftlog.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, salted_password

__all__ = (
    "DEFAULT_ITERATIONS",
    "alter_scram_credentials",
    "describe_scram_credentials",
    "is_scram_key",
    "scram_request",
)

#: kafka-configs.sh's iteration count when ``iterations=`` is not given.
DEFAULT_ITERATIONS: Final = MIN_ITERATIONS
_SALT_BYTES: Final = 32


def is_scram_key(key: str) -> bool:
    """Whether a config key names a SCRAM mechanism (``SCRAM-SHA-256``)."""
    return any(key == m.mechanism_name for m in ScramMechanism)


def scram_request(
    user: str, added: Sequence[tuple[str, str]], deleted: Sequence[str]
) -> aus_req.AlterUserScramCredentialsRequest:
    """The AlterUserScramCredentials request for ``user``: an upsertion per
    ``(mechanism, "[iterations=N,]password=P")`` in ``added`` (salted here),
    a deletion per mechanism in ``deleted``. Raises `CliError` for a value
    that does not parse (without echoing the password)."""
    upsertions = []
    for key, value in added:
        mechanism = ScramMechanism.from_mechanism_name(key)
        iterations, password = _parse_credential(key, value)
        salt = os.urandom(_SALT_BYTES)
        # Out of range, the controller refuses it and says why: salting
        # would be wasted (or take hours, for a huge count).
        salted = (salted_password(key, password, salt, iterations)
                  if MIN_ITERATIONS <= iterations <= MAX_ITERATIONS else b"")
        upsertions.append(aus_req.ScramCredentialUpsertion(
            name=user, mechanism=i8(int(mechanism)), iterations=i32(iterations), salt=salt,
            salted_password=salted))
    deletions = tuple(
        aus_req.ScramCredentialDeletion(
            name=user, mechanism=i8(int(ScramMechanism.from_mechanism_name(key))))
        for key in deleted)
    return aus_req.AlterUserScramCredentialsRequest(
        deletions=deletions, upsertions=tuple(upsertions))


def _parse_credential(key: str, value: str) -> tuple[int, str]:
    """kafka-configs.sh's ``[iterations=N,]password=P`` (-1: the default)."""
    iterations = DEFAULT_ITERATIONS
    rest = value
    if value.startswith("iterations="):
        count, sep, rest = value[len("iterations="):].partition(",")
        try:
            iterations = int(count)
        except ValueError:
            # Not echoed: a malformed value may run into the password.
            raise CliError(f"{key}: iterations must be a whole number") from None
        if not sep:
            rest = ""
        if iterations == -1:
            iterations = DEFAULT_ITERATIONS
    if not rest.startswith("password="):
        raise CliError(f"{key}: a SCRAM credential is [iterations=N,]password=P")
    return iterations, rest[len("password="):]


async def alter_scram_credentials(
    admin: _Admin, request: aus_req.AlterUserScramCredentialsRequest, label: str
) -> None:
    """Send ``request`` (one user's alterations) to the active controller,
    through a broker or directly. Raises `CliError` with the controller's
    code and message if it refused them."""
    response: aus_resp.AlterUserScramCredentialsResponse = await admin.first(
        request, 0, lambda r: _retriable([x.error_code for x in r.results]))
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise CliError(f"cannot alter the SCRAM credentials of {label}: "
                           f"{_error_name(result.error_code)}"
                           + (f": {result.error_message}" if result.error_message else ""))


async def describe_scram_credentials(admin: _Admin, user: str | None) -> list[str]:
    """kafka-configs.sh's lines for ``user``'s credentials (None: every user
    with one); nothing for a user without credentials, as kafka-configs.sh
    prints nothing for them. Raises `CliError` for any other error."""
    request = dus_req.DescribeUserScramCredentialsRequest(
        users=None if user is None else (dus_req.UserName(name=user),))
    response: dus_resp.DescribeUserScramCredentialsResponse = await admin.first(
        request, 0, lambda r: None)
    if response.error_code != ErrorCode.none:
        raise CliError(f"cannot describe SCRAM credentials: {_error_name(response.error_code)}"
                       + (f": {response.error_message}" if response.error_message else ""))
    lines = []
    for result in response.results:
        if result.error_code == ErrorCode.resource_not_found:
            continue
        if result.error_code != ErrorCode.none:
            raise CliError(f"cannot describe the SCRAM credentials of user-principal "
                           f"'{result.user}': {_error_name(result.error_code)}"
                           + (f": {result.error_message}" if result.error_message else ""))
        infos = ", ".join(f"{_mechanism_name(int(i.mechanism))}=iterations={int(i.iterations)}"
                          for i in result.credential_infos)
        lines.append(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
    return lines


def _mechanism_name(mechanism_type: int) -> str:
    try:
        return ScramMechanism(mechanism_type).mechanism_name
    except ValueError:
        return f"UNKNOWN({mechanism_type})"


def _retriable(codes: Sequence[Any]) -> str | None:
    """Answers to retry elsewhere (a broker that could not reach the controller)."""
    for code in codes:
        if code in (ErrorCode.not_controller, ErrorCode.request_timed_out):
            return _error_name(code)
    return None
