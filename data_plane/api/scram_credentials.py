"""SCRAM credentials (KIP-554) on the Kafka protocol.

DescribeUserScramCredentials (v0) is answered by any broker from its
metadata image, as Kafka's KRaft brokers answer it: mechanisms and
iteration counts only, never salts or keys. With an authorizer it needs
DESCRIBE on the cluster; refused, Kafka's error answer: the error at the top
and once per user asked for (with no user name). AlterUserScramCredentials (v0)
is forwarded by brokers to the active controller (`data_plane.api.admin`);
the controller listener (`data_plane.controller_api`) and the in-process
fake controller translate it with `alter_request` and
`alter_response_values`.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from data_plane.api.build import build, response_class
from metadata_quorum.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_quorum.controller.scram_control import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResult,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from metadata_quorum.image import ScramCredentialKey
from metadata_quorum.scram_credentials import describe_user_scram_credentials
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.security.scram import ScramCredential

if TYPE_CHECKING:
    from data_plane.api.common import BrokerApiContext

__all__ = (
    "alter_failed",
    "alter_request",
    "alter_response_values",
    "describe_response_values",
    "handle_describe_user_scram_credentials",
)

_NO_THROTTLE: Final = datetime.timedelta(0)


def alter_request(body: Any) -> AlterUserScramCredentialsRequest:
    """A kio AlterUserScramCredentialsRequest as the controller's command input."""
    return AlterUserScramCredentialsRequest(
        deletions=tuple(ScramCredentialDeletion(str(d.name), int(d.mechanism))
                        for d in body.deletions),
        upsertions=tuple(
            ScramCredentialUpsertion(str(u.name), int(u.mechanism), int(u.iterations),
                                     bytes(u.salt), bytes(u.salted_password))
            for u in body.upsertions),
    )


def alter_failed(body: Any, error: ErrorCode,
                 message: str | None = None) -> tuple[AlterUserScramCredentialsResult, ...]:
    """``error`` for every user the request names (once each, in order): the
    answer when the controller could not be asked or lost the lead."""
    users = dict.fromkeys(str(a.name) for a in (*body.deletions, *body.upsertions))
    return tuple(AlterUserScramCredentialsResult(user, error, message) for user in users)


def alter_response_values(
    results: Iterable[AlterUserScramCredentialsResult],
) -> Mapping[str, object]:
    """An AlterUserScramCredentialsResponse body for `build`."""
    return {"throttle_time": _NO_THROTTLE, "results": [
        {"user": r.user, "error_code": r.error, "error_message": r.message} for r in results]}


def describe_response_values(
    credentials: Mapping[ScramCredentialKey, ScramCredential], body: Any
) -> Mapping[str, object]:
    """A DescribeUserScramCredentialsResponse body for `build`, from an
    image's ``scram_credentials`` (`describe_user_scram_credentials`)."""
    users: Sequence[str] | None = (
        None if body.users is None else [str(u.name) for u in body.users])
    return {
        "throttle_time": _NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None,
        "results": [
            {"user": d.user, "error_code": d.error, "error_message": d.message,
             "credential_infos": [{"mechanism": int(m), "iterations": i}
                                  for m, i in d.credential_infos]}
            for d in describe_user_scram_credentials(credentials, users)],
    }


async def handle_describe_user_scram_credentials(
    api: BrokerApiContext, ctx: RequestContext, request: Any
) -> Any:
    if not api.authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        error, message = ErrorCode.cluster_authorization_failed, "not authorized to DESCRIBE the cluster"
        return build(response_class(request), {
            "throttle_time": _NO_THROTTLE, "error_code": error, "error_message": message,
            "results": [{"user": "", "error_code": error, "error_message": message}
                        for _ in request.users or ()]})
    return build(response_class(request),
                 describe_response_values(api.image.scram_credentials, request))
