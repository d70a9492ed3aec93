"""Delegation tokens (KIP-48): the HMAC every node derives, and lookups over the image.

The controller writes DelegationTokenRecords and RemoveDelegationTokenRecords
(`metadata_quorum.controller.delegation_token_control`); replay keeps each
live token's latest record in ``MetadataImage.delegation_tokens``, by token
id. A token's HMAC, the password a client logs in with (SASL/SCRAM, with
the token id as the user name), is in no record: it is HMAC-SHA512 keyed by
``delegation.token.secret.key`` over the token id, so every broker and
controller configured with the same secret computes the same one, and a
leaked log or snapshot lets nobody log in. Kafka's ``DelegationTokenManager``
derives it the same way (UTF-8 bytes of the key and of the id).

Renew, expire and describe requests name a token by its HMAC, so the lookup
is by HMAC too (`find_token_by_hmac`); a SCRAM login names it by id (a
plain mapping access).
"""

from __future__ import annotations

import hashlib
import hmac as _hmac
from collections.abc import Mapping

from metadata_quorum.acls import parse_principal
from metadata_quorum.records import DelegationTokenRecord

__all__ = [
    "USER_TYPE",
    "find_token_by_hmac",
    "principal_type",
    "token_hmac",
]

#: Kafka's ``KafkaPrincipal.USER_TYPE``: the only type a token's renewers may have.
USER_TYPE = "User"


def token_hmac(secret_key: str, token_id: str) -> bytes:
    """The token's HMAC (64 bytes): HMAC-SHA512 with key = UTF-8 of
    ``secret_key``, message = UTF-8 of ``token_id``, as Kafka computes it."""
    return _hmac.new(secret_key.encode("utf-8"), token_id.encode("utf-8"),
                     hashlib.sha512).digest()


def find_token_by_hmac(
    tokens: Mapping[str, DelegationTokenRecord], secret_key: str, hmac: bytes
) -> DelegationTokenRecord | None:
    """The token of ``tokens`` whose HMAC under ``secret_key`` is ``hmac``, or None.

    Each candidate is compared in constant time (``hmac.compare_digest``),
    so the time taken does not tell a guesser how many leading bytes of a
    real HMAC it got right. O(number of tokens); Kafka keeps an HMAC index,
    which pays off only with many tokens and would have to be rebuilt on
    every image.
    """
    for token in tokens.values():
        if _hmac.compare_digest(token_hmac(secret_key, token.token_id), hmac):
            return token
    return None


def principal_type(principal: str) -> str:
    """``"User:alice"`` -> ``"User"``. Raises ValueError unless ``principal``
    is ``Type:name`` with both parts non-empty (split at the first colon,
    as `metadata_quorum.acls.parse_principal`)."""
    kind, _name = parse_principal(principal)
    return kind
