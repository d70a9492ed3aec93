"""Kafka's unsecured OAUTHBEARER tokens: the login that makes them
(`UnsecuredLogin`, OAuthBearerUnsecuredLoginCallbackHandler) and the broker's
default validator (`UnsecuredValidator`,
OAuthBearerUnsecuredValidatorCallbackHandler), both configured by JAAS
options, with the unsigned JWS (``{"alg":"none"}``) they exchange."""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from raftlog.security.oauthbearer._common import (
    _INTEGER,
    BearerToken,
    OAuthBearerConfigError,
    TokenValidationError,
    _extension_problem,
    _ms,
    _no_constant,
    _number,
    _parse_int,
    _principal,
    _require_claim_name,
    _required_number,
    _scope,
)

# OAuthBearerUnsecuredLoginCallbackHandler's JAAS options.
_LOGIN_PREFIX: Final = "unsecuredLogin"
_STRING_CLAIM: Final = "unsecuredLoginStringClaim_"
_NUMBER_CLAIM: Final = "unsecuredLoginNumberClaim_"
_LIST_CLAIM: Final = "unsecuredLoginListClaim_"
_EXTENSION: Final = "unsecuredLoginExtension_"
_LOGIN_PRINCIPAL_CLAIM: Final = "unsecuredLoginPrincipalClaimName"
_LOGIN_SCOPE_CLAIM: Final = "unsecuredLoginScopeClaimName"
_LOGIN_LIFETIME: Final = "unsecuredLoginLifetimeSeconds"
# OAuthBearerUnsecuredValidatorCallbackHandler's JAAS options.
_VALIDATOR_PREFIX: Final = "unsecuredValidator"
_VALIDATOR_PRINCIPAL_CLAIM: Final = "unsecuredValidatorPrincipalClaimName"
_VALIDATOR_SCOPE_CLAIM: Final = "unsecuredValidatorScopeClaimName"
_VALIDATOR_REQUIRED_SCOPE: Final = "unsecuredValidatorRequiredScope"
_VALIDATOR_CLOCK_SKEW: Final = "unsecuredValidatorAllowableClockSkewMs"

_MADE_CLAIMS: Final = ("iat", "exp")  # the unsecured login makes these; options may not
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_DECIMAL: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SCOPE_SEPARATORS: Final = re.compile(r"[\s,]+")


@dataclass(frozen=True, slots=True, repr=False)
class UnsecuredLogin:
    """Kafka's unsecured login: the JAAS options of OAuthBearerLoginModule
    that OAuthBearerUnsecuredLoginCallbackHandler reads.

    - ``unsecuredLoginStringClaim_<name>="value"``, ``unsecuredLoginNumberClaim_<name>="123"``
      and ``unsecuredLoginListClaim_<name>=",a,b"`` (the first character
      separates the elements; empty trailing elements are dropped, as Java's
      String.split does) give the claims;
    - ``unsecuredLoginPrincipalClaimName`` (default "sub") names the claim
      holding the principal, which must be given as a string claim;
    - ``unsecuredLoginScopeClaimName`` (default "scope") names the scope claim;
    - ``unsecuredLoginLifetimeSeconds`` (default 3600) is how long tokens last;
    - ``unsecuredLoginExtension_<name>="value"`` are SASL extensions (KIP-342):
      a name of letters other than "auth", a value of printable ASCII, space,
      tab, CR or LF.

    "iat" and "exp" are made with each token and may not be given. Raises
    OAuthBearerConfigError naming the JAAS option at fault."""

    claims: Mapping[str, object]
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    lifetime_s: int = 3600
    extensions: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_claim_name(_LOGIN_PRINCIPAL_CLAIM, self.principal_claim)
        _require_claim_name(_LOGIN_SCOPE_CLAIM, self.scope_claim)
        claims = {name: _claim_value(name, value) for name, value in self.claims.items()}
        for name in _MADE_CLAIMS:
            if name in claims:
                raise OAuthBearerConfigError(
                    _claim_option(name, claims[name]),
                    f"the {name!r} claim is made with each token and cannot be given")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise OAuthBearerConfigError(
                _claim_option(self.principal_claim, principal),
                f"the principal claim {self.principal_claim!r} must be given as a non-blank "
                "string claim")
        scope = claims.get(self.scope_claim)
        if scope is not None and not isinstance(scope, str | tuple):
            raise OAuthBearerConfigError(
                _claim_option(self.scope_claim, scope),
                f"the scope claim {self.scope_claim!r} must be a string or list claim")
        if self.lifetime_s <= 0:
            raise OAuthBearerConfigError(
                _LOGIN_LIFETIME, f"must be a positive number of seconds, got {self.lifetime_s}")
        for name, value in self.extensions.items():
            problem = _extension_problem(name, value)
            if problem is not None:
                raise OAuthBearerConfigError(_EXTENSION + name, problem)
        object.__setattr__(self, "claims", MappingProxyType(claims))
        object.__setattr__(self, "extensions", MappingProxyType(dict(self.extensions)))

    def __repr__(self) -> str:
        # Extension values may be secrets: only their names go into logs.
        return (f"UnsecuredLogin(claims={dict(self.claims)!r}, "
                f"principal_claim={self.principal_claim!r}, scope_claim={self.scope_claim!r}, "
                f"lifetime_s={self.lifetime_s}, extensions=[{', '.join(map(repr, self.extensions))}])")

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredLogin:
        """The login the ``unsecuredLogin*`` options describe; other options
        (``unsecuredValidator*``, anything else) are left alone. Blank claim
        names fall back to the defaults, as in Kafka. Raises
        OAuthBearerConfigError for an unknown ``unsecuredLogin*`` option, a
        claim given twice, or a bad value."""
        claims: dict[str, object] = {}
        given_by: dict[str, str] = {}
        extensions: dict[str, str] = {}
        principal_claim, scope_claim, lifetime_s = "sub", "scope", 3600
        for option, value in options.items():
            if not option.startswith(_LOGIN_PREFIX):
                continue
            if option == _LOGIN_PRINCIPAL_CLAIM:
                principal_claim = value.strip() or "sub"
            elif option == _LOGIN_SCOPE_CLAIM:
                scope_claim = value.strip() or "scope"
            elif option == _LOGIN_LIFETIME:
                lifetime_s = _parse_int(option, value)
            elif option.startswith(_EXTENSION):
                extensions[option[len(_EXTENSION):]] = value
            else:
                name, claim = _parse_claim_option(option, value)
                if name in given_by:
                    raise OAuthBearerConfigError(
                        option, f"the claim {name!r} is already given by {given_by[name]}")
                claims[name] = claim
                given_by[name] = option
        return cls(claims=claims, principal_claim=principal_claim, scope_claim=scope_claim,
                   lifetime_s=lifetime_s, extensions=extensions)

    @property
    def principal(self) -> str:
        principal = self.claims[self.principal_claim]
        assert isinstance(principal, str), "checked in __post_init__"
        return principal

    def token(self, now_ms: int) -> BearerToken:
        """A new unsecured JWS: header ``{"alg":"none"}``, the claims plus
        "iat" (now) and "exp" (now plus the lifetime), in seconds with a
        fraction as Kafka's ``now / 1000.0``; base64url without padding, and
        an empty signature part."""
        issued_s = now_ms / 1000.0
        expires_s = issued_s + self.lifetime_s
        payload = {"exp": expires_s, "iat": issued_s, **self.claims}
        value = ".".join((_b64url_encode(_json_text({"alg": "none"})),
                          _b64url_encode(_json_text(payload)), ""))
        return BearerToken(
            value=value, principal=self.principal,
            scope=_scope(self.claims.get(self.scope_claim), self.scope_claim),
            lifetime_ms=_ms(expires_s), start_ms=_ms(issued_s))


@dataclass(frozen=True, slots=True)
class UnsecuredValidator:
    """Kafka's default OAUTHBEARER validator: unsigned JWS tokens (header
    ``{"alg":"none"}``, empty signature part). The JAAS options are
    ``unsecuredValidatorPrincipalClaimName`` (default "sub"),
    ``unsecuredValidatorScopeClaimName`` (default "scope"),
    ``unsecuredValidatorRequiredScope`` (scope the token must hold; Kafka
    documents it space-delimited, and commas separate too) and
    ``unsecuredValidatorAllowableClockSkewMs`` (default 0). Raises
    OAuthBearerConfigError naming the option at fault."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    def __post_init__(self) -> None:
        _require_claim_name(_VALIDATOR_PRINCIPAL_CLAIM, self.principal_claim)
        _require_claim_name(_VALIDATOR_SCOPE_CLAIM, self.scope_claim)
        required = tuple(self.required_scope)
        if any(not s or _SCOPE_SEPARATORS.search(s) for s in required):
            raise OAuthBearerConfigError(
                _VALIDATOR_REQUIRED_SCOPE, "a scope must be non-empty, without spaces or commas")
        object.__setattr__(self, "required_scope", required)
        if self.clock_skew_ms < 0:
            raise OAuthBearerConfigError(
                _VALIDATOR_CLOCK_SKEW, f"must not be negative, got {self.clock_skew_ms}")

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredValidator:
        """The validator the ``unsecuredValidator*`` options describe; other
        options are left alone. Blank values mean the defaults, as in Kafka.
        Raises OAuthBearerConfigError for an unknown ``unsecuredValidator*``
        option or a bad value."""
        known = (_VALIDATOR_PRINCIPAL_CLAIM, _VALIDATOR_SCOPE_CLAIM, _VALIDATOR_REQUIRED_SCOPE,
                 _VALIDATOR_CLOCK_SKEW)
        for option in options:
            if option.startswith(_VALIDATOR_PREFIX) and option not in known:
                raise OAuthBearerConfigError(option, "unknown unsecured validator option")
        skew = options.get(_VALIDATOR_CLOCK_SKEW, "").strip()
        required = _SCOPE_SEPARATORS.split(options.get(_VALIDATOR_REQUIRED_SCOPE, ""))
        return cls(
            principal_claim=options.get(_VALIDATOR_PRINCIPAL_CLAIM, "").strip() or "sub",
            scope_claim=options.get(_VALIDATOR_SCOPE_CLAIM, "").strip() or "scope",
            required_scope=tuple(dict.fromkeys(s for s in required if s)),
            clock_skew_ms=_parse_int(_VALIDATOR_CLOCK_SKEW, skew) if skew else 0)

    def validate(self, token: str, now_ms: int) -> BearerToken:
        """The token, if it is an unexpired unsecured JWS holding the
        principal claim (a non-blank string), "exp" and, if given, an "iat"
        not in the future, both numbers of seconds, and the required scope.
        Raises TokenValidationError: "insufficient_scope" with the required
        scope when only that is missing, else "invalid_token"."""
        header, claims = _unsecured_jws(token)
        alg = header.get("alg")
        if alg != "none":
            raise TokenValidationError(
                f"an unsecured JWS must have 'none' for its 'alg' header, not {alg!r}")
        if token.rsplit(".", 1)[1]:
            raise TokenValidationError("an unsecured JWS must not have a signature")
        principal = _principal(claims, self.principal_claim, trim=False)
        expires_s = _required_number(claims, "exp")
        issued_s = _number(claims, "iat")
        scope = _scope(claims.get(self.scope_claim), self.scope_claim)
        expires_ms = _ms(expires_s)
        issued_ms = None if issued_s is None else _ms(issued_s)
        # OAuthBearerValidationUtils: iat, then exp, then their order, then the scope.
        if issued_ms is not None and issued_ms > now_ms + self.clock_skew_ms:
            raise TokenValidationError(
                f"the 'iat' claim ({issued_s} s) is after now ({now_ms} ms) plus the allowed "
                f"clock skew ({self.clock_skew_ms} ms)")
        if now_ms - self.clock_skew_ms >= expires_ms:
            raise TokenValidationError(
                f"the token has expired: now ({now_ms} ms) less the allowed clock skew "
                f"({self.clock_skew_ms} ms) is at or after its 'exp' claim ({expires_s} s)")
        if issued_ms is not None and expires_ms <= issued_ms:
            raise TokenValidationError(
                f"the 'exp' claim ({expires_s} s) is not after the 'iat' claim ({issued_s} s)")
        for required in self.required_scope:
            if required not in scope:
                raise TokenValidationError(
                    f"the token's scope {sorted(scope)} lacks the required {required!r} "
                    f"(required: {' '.join(self.required_scope)})",
                    status="insufficient_scope", scope=" ".join(self.required_scope))
        return BearerToken(value=token, principal=principal, scope=scope,
                           lifetime_ms=expires_ms, start_ms=issued_ms)


def _unsecured_jws(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of a three-part JWS, unverified."""
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenValidationError(
            f"an unsecured JWS must have 3 dot-separated parts, not {len(parts)}")
    return _json_part(parts[0], "header"), _json_part(parts[1], "payload")


def _json_part(part: str, what: str) -> dict[str, Any]:
    """A base64url-encoded JSON object. NaN and the infinities are not JSON."""
    try:
        if not _BASE64URL.fullmatch(part) or ("=" in part and len(part) % 4):
            raise ValueError("not base64url")
        unpadded = part.rstrip("=")
        if len(unpadded) % 4 == 1:
            raise ValueError("not base64url")
        data = base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))
        value = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise TokenValidationError(f"the JWS {what} is not base64url-encoded JSON: {e}") from None
    if not isinstance(value, dict):
        raise TokenValidationError(f"the JWS {what} is not a JSON object")
    return value


def _parse_claim_option(option: str, value: str) -> tuple[str, object]:
    """The claim an ``unsecuredLogin*Claim_<name>`` option gives."""
    for prefix in (_STRING_CLAIM, _NUMBER_CLAIM, _LIST_CLAIM):
        if option.startswith(prefix):
            name = option[len(prefix):]
            break
    else:
        raise OAuthBearerConfigError(option, "unknown unsecured login option")
    if not name:
        raise OAuthBearerConfigError(option, "no claim name after the prefix")
    if prefix == _STRING_CLAIM:
        return name, value
    if prefix == _LIST_CLAIM:
        # The first character separates; Java's split drops empty trailing elements.
        items = value[1:].split(value[0]) if len(value) > 1 else []
        while items and not items[-1]:
            items.pop()
        return name, tuple(items)
    text = value.strip()
    if not _DECIMAL.fullmatch(text):
        raise OAuthBearerConfigError(option, f"must be a number, got {value!r}")
    number = int(text) if _INTEGER.fullmatch(text) else float(text)
    if not math.isfinite(number):
        raise OAuthBearerConfigError(option, f"must be a finite number, got {value!r}")
    return name, number


def _claim_value(name: str, value: object) -> object:
    """A claim for the unsecured login: a string, a finite number or a list
    of strings (kept as a tuple)."""
    if not name:
        raise OAuthBearerConfigError(_STRING_CLAIM, "no claim name after the prefix")
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise OAuthBearerConfigError(_NUMBER_CLAIM + name, "must be a finite number")
        return value
    if isinstance(value, list | tuple) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise OAuthBearerConfigError(
        _STRING_CLAIM + name, "a claim must be a string, a number or a list of strings")


def _claim_option(name: str, value: object) -> str:
    """The JAAS option that gives a claim of ``value``'s type."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _NUMBER_CLAIM + name
    return (_LIST_CLAIM if isinstance(value, tuple) else _STRING_CLAIM) + name


def _json_text(value: Mapping[str, object]) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _b64url_encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")
