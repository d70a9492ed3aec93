"""SCRAM credentials (KIP-554): DescribeUserScramCredentials over an image.

The controller writes UserScramCredentialRecords and
RemoveUserScramCredentialRecords
(`metadata_quorum.controller.scram_control`); the image holds the
credentials in ``MetadataImage.scram_credentials``; brokers answer
DescribeUserScramCredentials from their image with
`describe_user_scram_credentials`, as Kafka's KRaft brokers do
(``ScramImage.describe``), and a SASL server looks a login up with
``MetadataImage.scram_credential``. A description lists each credential's
mechanism and iteration count, never its salt or keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from metadata_quorum.image import ScramCredentialKey
from metadata_quorum.records import ScramMechanism
from raftlog.net.errors import ErrorCode
from raftlog.security.scram import ScramCredential

__all__ = [
    "DESCRIBE_DUPLICATE_USER",
    "DESCRIBE_UNKNOWN_USER",
    "UserScramCredentialsDescription",
    "describe_user_scram_credentials",
]

#: Kafka's per-user messages (``ScramImage``), followed by the user name.
DESCRIBE_DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_UNKNOWN_USER = "Attempt to describe a user credential that does not exist: "


@dataclass(frozen=True, slots=True)
class UserScramCredentialsDescription:
    """One user's answer: its (mechanism, iterations) pairs, or an error."""

    user: str
    error: ErrorCode
    message: str | None = None
    credential_infos: tuple[tuple[ScramMechanism, int], ...] = ()


def describe_user_scram_credentials(
    credentials: Mapping[ScramCredentialKey, ScramCredential],
    users: Sequence[str] | None,
) -> tuple[UserScramCredentialsDescription, ...]:
    """Kafka's semantics: ``users`` None or empty describes every user with a
    credential (sorted by name); otherwise each named user once, in request
    order, RESOURCE_NOT_FOUND if it has no credential and DUPLICATE_RESOURCE
    if it is named more than once. Mechanisms come in type order."""
    if not users:
        names = sorted({user for user, _mechanism in credentials})
        return tuple(_describe_one(credentials, user) for user in names)
    counts: dict[str, int] = {}
    for user in users:
        counts[user] = counts.get(user, 0) + 1
    results = []
    for user, count in counts.items():
        if count > 1:
            results.append(UserScramCredentialsDescription(
                user, ErrorCode.duplicate_resource, DESCRIBE_DUPLICATE_USER + user))
            continue
        found = _describe_one(credentials, user)
        if not found.credential_infos:
            found = UserScramCredentialsDescription(
                user, ErrorCode.resource_not_found, DESCRIBE_UNKNOWN_USER + user)
        results.append(found)
    return tuple(results)


def _describe_one(
    credentials: Mapping[ScramCredentialKey, ScramCredential], user: str
) -> UserScramCredentialsDescription:
    infos = []
    for mechanism in ScramMechanism:
        credential = credentials.get((user, mechanism.mechanism_name))
        if credential is not None:
            infos.append((mechanism, credential.iterations))
    return UserScramCredentialsDescription(user, ErrorCode.none, None, tuple(infos))
