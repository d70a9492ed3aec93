"""KIP-768's OAUTHBEARER validator: signed JWTs (`JwtValidator`, Kafka's
OAuthBearerValidatorCallbackHandler) checked against the public keys of the
identity provider's JWKS (`JwkSet`), and the ``sasl.oauthbearer.*`` broker
settings that configure it. Fetching the JWKS is the shell's job."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from raftlog.security.oauthbearer._common import (
    BearerToken,
    OAuthBearerConfigError,
    TokenValidationError,
    _ms,
    _no_constant,
    _number,
    _parse_int,
    _principal,
    _require_claim_name,
    _required_number,
    _scope,
)

#: sasl.server.callback.handler.class values that select the JWKS validator
#: (KIP-768): the 3.4+ name and the 3.1-3.3 one.
VALIDATOR_HANDLERS: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")

_JWKS_URL: Final = "sasl.oauthbearer.jwks.endpoint.url"
_JWKS_REFRESH: Final = "sasl.oauthbearer.jwks.endpoint.refresh.ms"
_JWKS_BACKOFF: Final = "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"
_JWKS_BACKOFF_MAX: Final = "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"
_AUDIENCE: Final = "sasl.oauthbearer.expected.audience"
_ISSUER: Final = "sasl.oauthbearer.expected.issuer"
_SUB_CLAIM: Final = "sasl.oauthbearer.sub.claim.name"
_SCOPE_CLAIM: Final = "sasl.oauthbearer.scope.claim.name"
_CLOCK_SKEW: Final = "sasl.oauthbearer.clock.skew.seconds"
#: The broker settings JwtValidator reads (Kafka's names), for config validation elsewhere.
JWT_VALIDATOR_SETTINGS: Final = (
    _JWKS_URL, _JWKS_REFRESH, _JWKS_BACKOFF, _JWKS_BACKOFF_MAX, _AUDIENCE, _ISSUER,
    _SUB_CLAIM, _SCOPE_CLAIM, _CLOCK_SKEW)

#: KIP-768's algorithms, with the key type (and curve) each verifies with.
_ALGORITHM_KEYS: Final = MappingProxyType({
    **{f"{family}{bits}": ("RSA", None) for family in ("RS", "PS") for bits in (256, 384, 512)},
    "ES256": ("EC", "P-256"), "ES384": ("EC", "P-384"), "ES512": ("EC", "P-521")})
_MIN_RSA_BITS: Final = 2048  # jose4j, which Kafka verifies with, refuses shorter RSA keys


@dataclass(frozen=True, slots=True)
class _Jwk:
    """One verification key of a JWKS."""

    index: int  # its place in the document, to name it when it has no kid
    kid: str | None
    alg: str | None  # the JWK's "alg", when it names one
    curve: str | None  # EC keys: "P-256", "P-384" or "P-521"
    key: RSAPublicKey | EllipticCurvePublicKey

    def name(self) -> str:
        return f"key {self.kid!r}" if self.kid is not None else f"key {self.index}"

    def verifies(self, alg: str) -> bool:
        kty, curve = _ALGORITHM_KEYS[alg]
        key_kty = "RSA" if isinstance(self.key, RSAPublicKey) else "EC"
        return kty == key_kty and curve == self.curve and self.alg in (None, alg)


class JwkSet:
    """Public keys of a JWKS document (RFC 7517), by key id. Build one with
    `parse`."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[_Jwk] = ()) -> None:
        self._keys = tuple(keys)

    def __repr__(self) -> str:
        return f"JwkSet({[k.name() for k in self._keys]})"

    @classmethod
    def parse(cls, document: str | bytes) -> JwkSet:
        """The signing keys of ``document``. Keys whose "use" is not "sig",
        whose "key_ops" lack "verify", or whose type, curve or "alg" KIP-768
        does not verify with (symmetric "oct" keys, Ed25519, encryption
        algorithms) are skipped. Raises ValueError naming what is wrong for
        anything that is not a JWKS, a malformed key, or one that holds a
        private key (whoever fetches the JWKS could then sign tokens)."""
        try:
            data = json.loads(document, parse_constant=_no_constant)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"the JWKS is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError("the JWKS is not a JSON object")
        entries = data.get("keys")
        if not isinstance(entries, list):
            raise ValueError("the JWKS has no \"keys\" array")
        keys = (_parse_jwk(index, entry) for index, entry in enumerate(entries))
        return cls(k for k in keys if k is not None)

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(k.kid for k in self._keys if k.kid is not None)

    def _candidates(self, kid: str | None, alg: str) -> tuple[_Jwk, ...]:
        """The keys that may have signed a token with ``kid`` and ``alg``.
        Raises TokenValidationError when there are none."""
        if kid is not None:
            named = tuple(k for k in self._keys if k.kid == kid)
            if not named:
                raise TokenValidationError(
                    f"unknown kid {kid!r}: no such key in the JWKS "
                    f"(its key ids: {', '.join(sorted(self.key_ids)) or 'none'})")
        elif len(self._keys) != 1:
            raise TokenValidationError(
                f"the token has no 'kid' and the JWKS has {len(self._keys)} keys to choose from")
        else:
            named = self._keys
        usable = tuple(k for k in named if k.verifies(alg))
        if not usable:
            raise TokenValidationError(
                f"the JWKS {named[0].name()} cannot verify the token's algorithm {alg}")
        return usable


@dataclass(frozen=True, slots=True)
class JwtValidator:
    """KIP-768's validator (OAuthBearerValidatorCallbackHandler): a JWS
    signed with RS256/384/512, PS256/384/512 or ES256/384/512 by the key of
    the JWKS its "kid" names (when the JWKS has one key, a token may omit
    "kid"). "exp" and the sub claim are required; "iat" and "nbf" are
    checked when present; "aud" must hold one of ``expected_audience`` when
    that is set, and "iss" must be ``expected_issuer`` when that is set. The
    time checks allow ``clock_skew_s`` of leeway. The scope claim is a
    space-separated string or a list of strings. The ``refresh_ms`` and
    backoff fields are for the shell that fetches ``jwks_url``. Raises
    OAuthBearerConfigError naming the setting at fault."""

    jwks_url: str
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3_600_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10_000

    def __post_init__(self) -> None:
        _check_jwks_url(self.jwks_url)
        audience = tuple(self.expected_audience)
        if any(not a.strip() for a in audience):
            raise OAuthBearerConfigError(_AUDIENCE, "an audience must not be blank")
        object.__setattr__(self, "expected_audience", audience)
        if self.expected_issuer is not None and not self.expected_issuer.strip():
            raise OAuthBearerConfigError(_ISSUER, "must not be blank when set")
        _require_claim_name(_SUB_CLAIM, self.sub_claim)
        _require_claim_name(_SCOPE_CLAIM, self.scope_claim)
        for setting, value in ((_CLOCK_SKEW, self.clock_skew_s), (_JWKS_REFRESH, self.refresh_ms),
                               (_JWKS_BACKOFF, self.retry_backoff_ms),
                               (_JWKS_BACKOFF_MAX, self.retry_backoff_max_ms)):
            if value < 0:
                raise OAuthBearerConfigError(setting, f"must be at least 0, got {value}")
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise OAuthBearerConfigError(
                _JWKS_BACKOFF_MAX, f"must be at least {_JWKS_BACKOFF} "
                f"({self.retry_backoff_max_ms} < {self.retry_backoff_ms})")

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> JwtValidator:
        """The validator the `JWT_VALIDATOR_SETTINGS` in ``settings`` describe
        (listener prefixes already resolved; other keys are ignored).
        ``sasl.oauthbearer.jwks.endpoint.url`` is required and must be a
        file:, http: or https: URL; the audience is comma-separated; a blank
        issuer means none. Raises OAuthBearerConfigError(setting, reason)."""
        url = settings.get(_JWKS_URL, "").strip()
        if not url:
            raise OAuthBearerConfigError(
                _JWKS_URL, "is required to validate signed tokens (KIP-768)")
        audience = settings.get(_AUDIENCE, "").strip()
        return cls(
            jwks_url=url,
            expected_audience=tuple(a.strip() for a in audience.split(",")) if audience else (),
            expected_issuer=settings.get(_ISSUER, "").strip() or None,
            sub_claim=settings.get(_SUB_CLAIM, "sub").strip(),
            scope_claim=settings.get(_SCOPE_CLAIM, "scope").strip(),
            clock_skew_s=_int_setting(settings, _CLOCK_SKEW, 30),
            refresh_ms=_int_setting(settings, _JWKS_REFRESH, 3_600_000),
            retry_backoff_ms=_int_setting(settings, _JWKS_BACKOFF, 100),
            retry_backoff_max_ms=_int_setting(settings, _JWKS_BACKOFF_MAX, 10_000))

    def validate(self, token: str, keys: JwkSet, now_s: float) -> BearerToken:
        """The token, if signed by a key of ``keys`` and valid at ``now_s``
        (seconds since the epoch). Raises TokenValidationError
        ("invalid_token"); an unknown kid says so in the reason."""
        if not token.isascii():  # nor can PyJWT encode a lone surrogate
            raise TokenValidationError("malformed JWS: not ASCII")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenValidationError(f"malformed JWS: {e}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in _ALGORITHM_KEYS:
            raise TokenValidationError(
                f"the JWS algorithm {alg!r} is not allowed "
                f"(allowed: {', '.join(_ALGORITHM_KEYS)})")
        kid = header.get("kid")  # PyJWT has checked that it is a string, if present
        claims: dict[str, Any] | None = None
        for candidate in keys._candidates(kid, alg):
            if isinstance(candidate.key, RSAPublicKey) and candidate.key.key_size < _MIN_RSA_BITS:
                raise TokenValidationError(
                    f"the JWKS {candidate.name()} is a {candidate.key.key_size}-bit RSA key; "
                    f"at least {_MIN_RSA_BITS} bits are required")
            try:
                claims = self._decode(token, candidate.key, alg)
                break
            except jwt.InvalidSignatureError:
                continue
        if claims is None:
            raise TokenValidationError(
                f"the signature does not verify with the JWKS {candidate.name()}")
        subject = _principal(claims, self.sub_claim, trim=True)
        expires_s = _required_number(claims, "exp")
        not_before_s = _number(claims, "nbf")
        issued_s = _number(claims, "iat")
        scope = _scope(claims.get(self.scope_claim), self.scope_claim)
        skew = self.clock_skew_s
        if now_s >= expires_s + skew:  # jose4j: expired on or after exp
            raise TokenValidationError(
                f"the token has expired: its 'exp' claim ({expires_s} s) plus the allowed clock "
                f"skew ({skew} s) is at or before now ({now_s} s)")
        if not_before_s is not None and now_s + skew < not_before_s:
            raise TokenValidationError(
                f"the token is not valid yet: its 'nbf' claim ({not_before_s} s) is after now "
                f"({now_s} s) plus the allowed clock skew ({skew} s)")
        if issued_s is not None and issued_s > now_s + skew:
            raise TokenValidationError(
                f"the 'iat' claim ({issued_s} s) is after now ({now_s} s) plus the allowed "
                f"clock skew ({skew} s)")
        return BearerToken(value=token, principal=subject, scope=scope,
                           lifetime_ms=_ms(expires_s),
                           start_ms=None if issued_s is None else _ms(issued_s))

    def _decode(self, token: str, key: RSAPublicKey | EllipticCurvePublicKey,
                alg: str) -> dict[str, Any]:
        """The verified claims, "aud" and "iss" checked and "exp" and the sub
        claim present. Raises InvalidSignatureError for a signature that does
        not verify, TokenValidationError for the rest. PyJWT's time checks
        read the clock: they are off, and `validate` makes them."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[alg],
                audience=self.expected_audience or None, issuer=self.expected_issuer,
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                         "verify_aud": bool(self.expected_audience),
                         "verify_iss": self.expected_issuer is not None,
                         "verify_sub": False, "verify_jti": False,
                         "require": ["exp", self.sub_claim]})
        except jwt.InvalidSignatureError:
            raise
        except jwt.MissingRequiredClaimError as e:
            raise TokenValidationError(f"the {e.claim!r} claim is missing") from None
        except jwt.InvalidAudienceError as e:
            raise TokenValidationError(
                f"the 'aud' claim does not name an expected audience "
                f"({', '.join(self.expected_audience)}): {e}") from None
        except jwt.InvalidIssuerError as e:
            raise TokenValidationError(
                f"the 'iss' claim is not the expected issuer {self.expected_issuer!r}: {e}"
            ) from None
        except jwt.PyJWTError as e:
            raise TokenValidationError(f"invalid JWT: {e}") from None
        return claims


def _parse_jwk(index: int, entry: object) -> _Jwk | None:
    """One JWKS entry as a key, or None when KIP-768 does not verify with it."""
    if not isinstance(entry, dict):
        raise ValueError(f"JWKS key {index} is not a JSON object")
    kid = entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ValueError(f"JWKS key {index}: its \"kid\" is not a string")
    name = f"JWKS key {index}" if kid is None else f"JWKS key {index} (kid {kid!r})"
    kty, use, ops, alg, curve = (entry.get(k) for k in ("kty", "use", "key_ops", "alg", "crv"))
    if not isinstance(kty, str):
        raise ValueError(f"{name} has no \"kty\"")
    if any(v is not None and not isinstance(v, str) for v in (use, alg)):
        raise ValueError(f"{name}: \"use\" and \"alg\" must be strings")
    if ops is not None and not isinstance(ops, list):
        raise ValueError(f"{name}: \"key_ops\" must be an array")
    if "d" in entry:
        raise ValueError(f"{name} holds a private key: a JWKS must publish public keys only")
    if (use is not None and use != "sig") or (ops is not None and "verify" not in ops):
        return None
    if kty not in ("RSA", "EC") or (alg is not None and alg not in _ALGORITHM_KEYS):
        return None
    if kty == "EC" and not isinstance(curve, str):
        raise ValueError(f"{name} is an EC key without a \"crv\"")
    if kty == "EC" and curve not in ("P-256", "P-384", "P-521"):
        return None
    if alg is not None and _ALGORITHM_KEYS[alg] != (kty, curve if kty == "EC" else None):
        raise ValueError(f"{name}: its \"alg\" {alg} does not fit its key type")
    try:
        key = (RSAAlgorithm if kty == "RSA" else ECAlgorithm).from_jwk(entry)
    except (jwt.PyJWTError, ValueError, TypeError) as e:
        # PyJWT raises InvalidKeyError, or ValueError/TypeError from the
        # base64 and number decoding, depending on the field at fault.
        raise ValueError(f"{name} is not a valid {kty} public key: {e}") from None
    if not isinstance(key, RSAPublicKey | EllipticCurvePublicKey):
        raise ValueError(f"{name} is not a public key")
    return _Jwk(index=index, kid=kid, alg=alg, curve=curve if kty == "EC" else None, key=key)


def _check_jwks_url(url: str) -> None:
    # The URL itself stays out of the message: it may carry credentials.
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise OAuthBearerConfigError(_JWKS_URL, "is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("file", "http", "https"):
        raise OAuthBearerConfigError(
            _JWKS_URL, f"uses an unsupported scheme ({scheme or 'none'}); "
            "supported: file, http, https")
    if scheme != "file" and not parts.hostname:
        raise OAuthBearerConfigError(_JWKS_URL, f"is an {scheme} URL without a host")
    if scheme == "file" and not parts.path:
        raise OAuthBearerConfigError(_JWKS_URL, "is a file URL without a path")


def _int_setting(settings: Mapping[str, str], setting: str, default: int) -> int:
    value = settings.get(setting, "").strip()
    return _parse_int(setting, value) if value else default
