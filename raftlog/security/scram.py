"""SCRAM credentials (RFC 5802, RFC 7677), as Kafka derives and stores them.

A server never keeps a password: it keeps, per user and mechanism, the salt,
the iteration count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``
and ``ServerKey = HMAC(SaltedPassword, "Server Key")``, where
``SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)``. Kafka's
``AlterUserScramCredentials`` carries the salt and the salted password (the
client salts), and the controller derives the two keys
(``ScramCredentialUtils``/``ScramFormatter``). Kafka applies no SASLprep to
the password: its UTF-8 bytes are salted as they are, and so are they here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

__all__ = (
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "ScramCredential",
    "credential_from_password",
    "credential_from_salted",
    "hash_name",
    "salted_password",
)

#: Kafka's SCRAM mechanisms: name -> (hashlib name, mechanism type as
#: Kafka's ScramMechanism numbers it in its records and APIs).
SCRAM_MECHANISMS: Final = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}

#: Kafka's bounds on a credential's iteration count (ScramMechanism's
#: minIterations; AlterUserScramCredentials refuses more than 16384).
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps to check a SCRAM user (``ScramCredential`` in Kafka)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hash_name(mechanism: str) -> str:
    """The hashlib name of SCRAM ``mechanism``. Raises ValueError for any other."""
    try:
        return SCRAM_MECHANISMS[mechanism][0]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)`` of RFC 5802: PBKDF2 with HMAC over the
    mechanism's hash, one hash length long."""
    name = hash_name(mechanism)
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)


def credential_from_salted(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential for a salted password (what the controller
    derives from an AlterUserScramCredentials upsertion)."""
    name = hash_name(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(name, client_key).digest(),
        server_key=hmac.digest(salted, b"Server Key", name),
        iterations=iterations,
    )


def credential_from_password(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password``, with a random 32-byte salt unless given."""
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)
