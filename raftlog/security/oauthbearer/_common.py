"""What both OAUTHBEARER validators and the exchange share: the mechanism's
names, the errors (`OAuthBearerConfigError`, `TokenValidationError`), the
validated token (`BearerToken`), the claim checks Kafka's two validators make
alike, and the SASL extension rules (KIP-342)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, NoReturn

OAUTHBEARER: Final = "OAUTHBEARER"
LOGIN_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

_AUTH_KEY: Final = "auth"
_EXTENSION_NAME: Final = re.compile(r"[a-zA-Z]+")  # KIP-342
_EXTENSION_VALUE: Final = re.compile(r"[\x21-\x7E \t\r\n]+")
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")


class OAuthBearerConfigError(ValueError):
    """A bad JAAS option or setting. ``setting`` names it; str(exc) is the
    reason (never a secret)."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting
        self.message = message


class TokenValidationError(Exception):
    """A token refused. ``status`` is the RFC 7628 error status sent to the
    client ("invalid_token", or "insufficient_scope" with ``scope``: the
    required scope, space separated); str(exc) is the specific reason, for
    the server's log only."""

    def __init__(self, reason: str, *, status: str = "invalid_token",
                 scope: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope

    def challenge(self) -> str:
        """The RFC 7628 error challenge, spaced as Kafka's jsonErrorResponse."""
        fields = {"status": self.status}
        if self.scope is not None:
            fields["scope"] = self.scope
        return json.dumps(fields, separators=(", ", ":"))


@dataclass(frozen=True, slots=True, repr=False)
class BearerToken:
    """A token and what it says (Kafka's OAuthBearerToken). ``value`` is the
    credential itself, so it never appears in the repr."""

    value: str  # the compact JWS as sent
    principal: str
    scope: frozenset[str]
    lifetime_ms: int  # expiry ("exp"), ms since the epoch
    start_ms: int | None  # "iat", ms since the epoch, if present

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", frozenset(self.scope))

    def __repr__(self) -> str:
        return (f"BearerToken(principal={self.principal!r}, scope={sorted(self.scope)!r}, "
                f"lifetime_ms={self.lifetime_ms}, start_ms={self.start_ms})")


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _principal(claims: Mapping[str, Any], claim: str, *, trim: bool) -> str:
    """The principal claim: a non-blank string that is valid Unicode. Kafka's
    unsecured validator keeps it as it is; its JWT validator trims it."""
    value = claims.get(claim)
    if value is None:
        raise TokenValidationError(f"the principal claim {claim!r} is missing")
    if not isinstance(value, str):
        raise TokenValidationError(f"the principal claim {claim!r} is not a string")
    if not value.strip():
        raise TokenValidationError(f"the principal claim {claim!r} is blank")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escaped in the JSON
        raise TokenValidationError(
            f"the principal claim {claim!r} is not valid Unicode") from None
    return value.strip() if trim else value


def _required_number(claims: Mapping[str, Any], claim: str) -> int | float:
    value = _number(claims, claim)
    if value is None:
        raise TokenValidationError(f"the {claim!r} claim is missing")
    return value


def _number(claims: Mapping[str, Any], claim: str) -> int | float | None:
    """A time claim, in seconds since the epoch, or None when absent."""
    value = claims.get(claim)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or (isinstance(value, float) and not math.isfinite(value))):
        # PyJWT's JSON parser takes NaN and Infinity; they are not JSON numbers.
        raise TokenValidationError(f"the {claim!r} claim is not a number of seconds")
    return value


def _scope(value: object, claim: str) -> frozenset[str]:
    """A scope claim: absent, a space-separated string, or a list of strings
    (blank ones dropped, as Kafka does)."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list | tuple) and all(isinstance(s, str) for s in value):
        return frozenset(s.strip() for s in value if s.strip())
    raise TokenValidationError(
        f"the scope claim {claim!r} is neither a string nor a list of strings")


def _ms(seconds: int | float) -> int:
    """Seconds since the epoch as ms, rounded like Kafka's Math.round and exact
    however large (a float product could overflow)."""
    return seconds * 1000 if isinstance(seconds, int) else round(Fraction(seconds) * 1000)


def _parse_int(setting: str, value: str) -> int:
    if not _INTEGER.fullmatch(value.strip()):
        raise OAuthBearerConfigError(setting, f"must be an integer, got {value!r}")
    return int(value)


def _require_claim_name(setting: str, name: str) -> None:
    if not name.strip():
        raise OAuthBearerConfigError(setting, "a claim name must not be blank")


def _extension_problem(name: str, value: str) -> str | None:
    """Why Kafka would refuse a SASL extension (KIP-342), or None. The value
    is not quoted: it may be a secret."""
    if name == _AUTH_KEY:
        return "the extension name 'auth' is reserved for the token"
    if not _EXTENSION_NAME.fullmatch(name):
        return "an extension name must be one or more ASCII letters"
    if not _EXTENSION_VALUE.fullmatch(value):
        return "an extension value must be printable ASCII, space, tab, CR or LF, and not empty"
    return None
