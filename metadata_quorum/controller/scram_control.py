"""AlterUserScramCredentials (KIP-554): validate, then write SCRAM credential records.

After Kafka's ``ScramControlManager`` (design only). A request carries
deletions (user, mechanism) and upsertions (user, mechanism, iterations,
salt, salted password). The client salts: the password never reaches the
controller, which derives the stored and server keys from the salted
password (`raftlog.security.scram.credential_from_salted`) and writes them
in a UserScramCredentialRecord; a deletion becomes a
RemoveUserScramCredentialRecord.

There is one result per user, and a user's alterations are all or nothing:
the first problem found refuses all of them, in this order:

1. each alteration: an empty name (UNACCEPTABLE_CREDENTIAL "Username must
   not be empty"), an unknown mechanism (UNSUPPORTED_SASL_MECHANISM
   "Unknown SCRAM mechanism"), iterations below the mechanism's minimum or
   above 16384 (UNACCEPTABLE_CREDENTIAL "Too few iterations" / "Too many
   iterations");
2. the same (user, mechanism) twice in the request, whether deleted or
   upserted (DUPLICATE_RESOURCE "A user credential cannot be altered twice
   in the same request");
3. deleting a credential that does not exist (RESOURCE_NOT_FOUND "Attempt
   to delete a user credential that does not exist").

Kafka's messages, codes and checks; the duplicate rule is per (user,
mechanism) as in KIP-554's first implementation (``ZkAdminManager``), so one
request can set a user's SCRAM-SHA-256 and SCRAM-SHA-512 credentials
together. Kafka's KRaft controller counts any second alteration of a user
as a duplicate, which refuses that request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    ScramMechanism,
    UserScramCredentialRecord,
)
from raftlog.net.errors import ErrorCode
from raftlog.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted

from .result import ControllerResult

__all__ = [
    "AlterUserScramCredentialsRequest",
    "AlterUserScramCredentialsResult",
    "ScramCredentialDeletion",
    "ScramCredentialUpsertion",
    "alter_user_scram_credentials",
]

#: Kafka's messages (``ScramControlManager``).
EMPTY_USERNAME = "Username must not be empty"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW_ITERATIONS = "Too few iterations"
TOO_MANY_ITERATIONS = "Too many iterations"
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_UNKNOWN = "Attempt to delete a user credential that does not exist"
# The record encoding's limit on a string (int16 length); Kafka's is larger.
_MAX_NAME_BYTES = (1 << 15) - 1


@dataclass(frozen=True, slots=True)
class ScramCredentialDeletion:
    """Remove ``name``'s credential for mechanism type ``mechanism`` (unvalidated)."""

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramCredentialUpsertion:
    """Set ``name``'s credential for mechanism type ``mechanism`` (unvalidated)."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsRequest:
    deletions: tuple[ScramCredentialDeletion, ...] = ()
    upsertions: tuple[ScramCredentialUpsertion, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsResult:
    user: str
    error: ErrorCode
    message: str | None = None


_Alteration = ScramCredentialDeletion | ScramCredentialUpsertion


def alter_user_scram_credentials(
    image: MetadataImage, request: AlterUserScramCredentialsRequest
) -> ControllerResult[tuple[AlterUserScramCredentialsResult, ...]]:
    """One result per user named in ``request``, in order of first mention
    (deletions before upsertions); records for the users that succeed, each
    user's deletions before its upsertions. See the module docstring."""
    alterations: list[_Alteration] = [*request.deletions, *request.upsertions]
    by_user: dict[str, list[_Alteration]] = {}
    for alteration in alterations:
        by_user.setdefault(alteration.name, []).append(alteration)
    records: list[MetadataRecord] = []
    results = []
    for user, own in by_user.items():
        error, message = _check_user(image, own)
        results.append(AlterUserScramCredentialsResult(user, error, message))
        if error is ErrorCode.none:
            records.extend(_records(own))
    return ControllerResult(tuple(records), tuple(results))


def _check_user(
    image: MetadataImage, alterations: list[_Alteration]
) -> tuple[ErrorCode, str | None]:
    for alteration in alterations:
        error, message = _check_alteration(alteration)
        if error is not ErrorCode.none:
            return error, message
    mechanisms = [alteration.mechanism for alteration in alterations]
    if len(set(mechanisms)) != len(mechanisms):
        return ErrorCode.duplicate_resource, ALTERED_TWICE
    for alteration in alterations:
        if isinstance(alteration, ScramCredentialDeletion):
            name = ScramMechanism(alteration.mechanism).mechanism_name
            if image.scram_credential(alteration.name, name) is None:
                return ErrorCode.resource_not_found, DELETE_UNKNOWN
    return ErrorCode.none, None


def _check_alteration(alteration: _Alteration) -> tuple[ErrorCode, str | None]:
    if not alteration.name:
        return ErrorCode.unacceptable_credential, EMPTY_USERNAME
    if len(alteration.name.encode("utf-8")) > _MAX_NAME_BYTES:
        return ErrorCode.unacceptable_credential, (
            f"Username is longer than {_MAX_NAME_BYTES} bytes")
    if alteration.mechanism not in tuple(ScramMechanism):
        return ErrorCode.unsupported_sasl_mechanism, UNKNOWN_MECHANISM
    if isinstance(alteration, ScramCredentialUpsertion):
        # Kafka's minimum is the mechanism's (4096 for both SHA-256 and SHA-512).
        if alteration.iterations < MIN_ITERATIONS:
            return ErrorCode.unacceptable_credential, TOO_FEW_ITERATIONS
        if alteration.iterations > MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, TOO_MANY_ITERATIONS
    return ErrorCode.none, None


def _records(alterations: list[_Alteration]) -> list[MetadataRecord]:
    deletions: list[MetadataRecord] = []
    upsertions: list[MetadataRecord] = []
    for alteration in alterations:
        mechanism = ScramMechanism(alteration.mechanism)
        if isinstance(alteration, ScramCredentialDeletion):
            deletions.append(RemoveUserScramCredentialRecord(alteration.name, mechanism))
            continue
        credential = credential_from_salted(
            mechanism.mechanism_name, alteration.salt, alteration.salted_password,
            alteration.iterations)
        upsertions.append(UserScramCredentialRecord(
            alteration.name, mechanism, credential.salt, credential.stored_key,
            credential.server_key, credential.iterations))
    return deletions + upsertions
