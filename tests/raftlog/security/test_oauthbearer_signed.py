"""SASL/OAUTHBEARER, KIP-768's JWKS validator
(raftlog.security.oauthbearer.signed) with keys made here and tokens signed
by PyJWT: the algorithms, the key a token names, claims and times with the
clock skew, the exchange with it, `JwkSet.parse` and the
``sasl.oauthbearer.*`` settings, and fuzzing with hostile tokens and keys.
Every time is passed in: nothing reads a clock."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Mapping
from functools import partial
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from oauthbearer_helpers import b64url, config_error, refused, unsecured
from sasl_exchange import run

from raftlog.security.oauthbearer import (
    BearerToken,
    JwkSet,
    JwtValidator,
    TokenValidationError,
    oauthbearer_client,
    oauthbearer_server,
)

# --- KIP-768: signed tokens against a JWKS ------------------------------------


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEYS = {"ES256": ec.generate_private_key(ec.SECP256R1()),
           "ES384": ec.generate_private_key(ec.SECP384R1()),
           "ES512": ec.generate_private_key(ec.SECP521R1())}
URL = "https://idp.example.com/oauth2/v1/keys"
NOW = 1_700_000_000.0
CLAIMS = {"sub": "alice", "exp": int(NOW) + 600, "iat": int(NOW) - 10, "scope": "read write"}


def jwk(key: Any, kid: str | None, **extra: object) -> dict[str, Any]:
    """The public JWK of ``key`` (an RSA or EC private key)."""
    algorithm = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
    entry: dict[str, Any] = algorithm.to_jwk(key.public_key(), as_dict=True)
    if kid is not None:
        entry["kid"] = kid
    return {**entry, **extra}


def jwks(*entries: dict[str, Any]) -> JwkSet:
    return JwkSet.parse(json.dumps({"keys": list(entries)}))


KEYS = jwks(jwk(RSA_KEY, "rsa", use="sig"), jwk(OTHER_RSA_KEY, "rsa2"),
            *(jwk(key, alg.lower(), alg=alg) for alg, key in EC_KEYS.items()))


def signed(claims: Mapping[str, object] = CLAIMS, *, key: Any = RSA_KEY, alg: str = "RS256",
           kid: str | None = "rsa", **headers: object) -> str:
    """A JWS of ``claims`` (any JSON, NaN included: PyJWT's encode would
    refuse some of what a token may hold)."""
    extra = dict(headers) if kid is None else {"kid": kid, **headers}
    return jwt.PyJWS().encode(json.dumps(claims).encode(), key, algorithm=alg,
                              headers=extra or None)


@pytest.mark.parametrize("alg, key, kid", [
    *((alg, RSA_KEY, "rsa") for alg in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")),
    *((alg, key, alg.lower()) for alg, key in EC_KEYS.items()),
])
def test_tokens_signed_with_each_kip_768_algorithm_are_accepted(alg: str, key: Any,
                                                                kid: str) -> None:
    token = signed(key=key, alg=alg, kid=kid)
    checked = JwtValidator(URL).validate(token, KEYS, NOW)
    assert checked == BearerToken(token, "alice", frozenset({"read", "write"}),
                                  (int(NOW) + 600) * 1000, (int(NOW) - 10) * 1000)


def test_the_kid_picks_the_key() -> None:
    assert KEYS.key_ids == {"rsa", "rsa2", "es256", "es384", "es512"}
    token = signed(key=OTHER_RSA_KEY, kid="rsa2")
    assert JwtValidator(URL).validate(token, KEYS, NOW).principal == "alice"
    error = refused(lambda: JwtValidator(URL).validate(signed(kid="rsa2"), KEYS, NOW))
    assert "signature does not verify with the JWKS key 'rsa2'" in str(error)


def test_a_jwks_of_one_key_serves_tokens_without_kid() -> None:
    one = jwks(jwk(RSA_KEY, None))
    assert one.key_ids == frozenset()
    assert JwtValidator(URL).validate(signed(kid=None), one, NOW).principal == "alice"
    assert JwtValidator(URL).validate(signed(kid=None), jwks(jwk(RSA_KEY, "k")),
                                      NOW).principal == "alice"
    error = refused(lambda: JwtValidator(URL).validate(signed(kid=None), KEYS, NOW))
    assert "no 'kid'" in str(error)
    assert "has 0 keys" in str(refused(
        lambda: JwtValidator(URL).validate(signed(kid=None), jwks(), NOW)))


def test_an_unknown_kid_says_so() -> None:
    error = refused(lambda: JwtValidator(URL).validate(signed(kid="rotated"), KEYS, NOW))
    assert "unknown kid 'rotated'" in str(error)
    assert error.status == "invalid_token"


@pytest.mark.parametrize("token, fragment", [
    (signed(key=OTHER_RSA_KEY), "signature does not verify with the JWKS key 'rsa'"),
    (signed(key=EC_KEYS["ES256"], alg="ES256", kid="rsa"), "key 'rsa' cannot verify"),
    (signed(alg="RS256", kid="es256"), "key 'es256' cannot verify"),
    (signed(key=EC_KEYS["ES384"], alg="ES384", kid="es256"), "key 'es256' cannot verify"),
    (signed(key=EC_KEYS["ES256"], alg="ES256", kid="es256")[:-4] + "AAAA", "signature"),
])
def test_a_signature_by_another_key_or_algorithm_is_refused(token: str, fragment: str) -> None:
    assert fragment in str(refused(lambda: JwtValidator(URL).validate(token, KEYS, NOW)))


def test_a_jwk_alg_binds_the_key_to_that_algorithm() -> None:
    keys = jwks(jwk(RSA_KEY, "rsa", alg="RS512"))
    assert JwtValidator(URL).validate(signed(alg="RS512"), keys, NOW).principal == "alice"
    assert "cannot verify the token's algorithm RS256" in str(refused(
        lambda: JwtValidator(URL).validate(signed(alg="RS256"), keys, NOW)))


def test_unsigned_and_symmetric_tokens_are_refused() -> None:
    secret = b"s" * 64
    keys = jwks(jwk(RSA_KEY, "rsa"), {"kty": "oct", "kid": "hmac",
                                      "k": base64.urlsafe_b64encode(secret).decode().rstrip("=")})
    assert keys.key_ids == {"rsa"}  # the oct key is skipped
    for token, alg in ((unsecured(CLAIMS, header={"alg": "none", "kid": "rsa"}), "'none'"),
                       (signed(key=secret, alg="HS256", kid="hmac"), "'HS256'"),
                       (signed(key=secret, alg="HS256", kid="rsa"), "'HS256'"),
                       (unsecured(CLAIMS, header={"kid": "rsa"}, signature="AAAA"), "None")):
        error = refused(partial(JwtValidator(URL).validate, token, keys, NOW))
        assert f"algorithm {alg} is not allowed" in str(error)


def test_rsa_keys_under_2048_bits_are_refused() -> None:
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.warns(jwt.warnings.InsecureKeyLengthWarning):
        token = signed(key=small, kid="small")
    error = refused(lambda: JwtValidator(URL).validate(token, jwks(jwk(small, "small")), NOW))
    assert "1024-bit RSA key" in str(error)


EXPIRES = CLAIMS["exp"]
assert isinstance(EXPIRES, int)


@pytest.mark.parametrize("claims, now, fragment", [
    (CLAIMS, EXPIRES + 30, "expired"),  # exp + skew: on it, as jose4j
    (CLAIMS, EXPIRES + 3600, "expired"),
    ({**CLAIMS, "nbf": NOW + 31}, NOW, "'nbf' claim"),
    ({**CLAIMS, "iat": NOW + 31}, NOW, "'iat' claim"),
    ({**CLAIMS, "exp": None}, NOW, "'exp' claim is missing"),
    ({k: v for k, v in CLAIMS.items() if k != "exp"}, NOW, "'exp' claim is missing"),
    ({**CLAIMS, "exp": "soon"}, NOW, "'exp' claim is not a number"),
    ({**CLAIMS, "exp": float("inf")}, NOW, "'exp' claim is not a number"),
    ({**CLAIMS, "nbf": [1]}, NOW, "'nbf' claim is not a number"),
    ({k: v for k, v in CLAIMS.items() if k != "sub"}, NOW, "'sub' claim is missing"),
    ({**CLAIMS, "sub": "  "}, NOW, "principal claim 'sub' is blank"),
    ({**CLAIMS, "sub": 42}, NOW, "principal claim 'sub' is not a string"),
    ({**CLAIMS, "scope": {"a": 1}}, NOW, "scope claim 'scope' is neither"),
])
def test_claims_and_times_are_checked_with_the_clock_skew(claims: dict[str, object], now: float,
                                                          fragment: str) -> None:
    error = refused(lambda: JwtValidator(URL).validate(signed(claims), KEYS, now))
    assert fragment in str(error)
    assert error.status == "invalid_token"


@pytest.mark.parametrize("claims, now", [
    (CLAIMS, EXPIRES + 29.999),
    ({**CLAIMS, "nbf": NOW + 30}, NOW),
    ({**CLAIMS, "iat": NOW + 30}, NOW),
    ({**CLAIMS, "nbf": NOW - 1, "iat": NOW - 1, "jti": 7, "aud": "anyone"}, NOW),
])
def test_times_within_the_skew_are_accepted(claims: dict[str, object], now: float) -> None:
    assert JwtValidator(URL).validate(signed(claims), KEYS, now).principal == "alice"


def test_a_custom_skew() -> None:
    token = signed({**CLAIMS, "nbf": NOW + 5})
    assert "'nbf'" in str(refused(
        lambda: JwtValidator(URL, clock_skew_s=0).validate(token, KEYS, NOW)))
    assert JwtValidator(URL, clock_skew_s=5).validate(token, KEYS, NOW).principal == "alice"


@pytest.mark.parametrize("aud, expected, ok", [
    ("kafka", ("kafka",), True),
    (["other", "kafka"], ("kafka",), True),
    ("kafka", ("broker", "kafka"), True),  # any expected audience will do
    ("other", ("kafka",), False),
    (["a", "b"], ("kafka", "c"), False),
    (None, ("kafka",), False),
    ("anything", (), True),  # not checked unless expected
])
def test_the_audience(aud: object, expected: tuple[str, ...], ok: bool) -> None:
    claims = CLAIMS if aud is None else {**CLAIMS, "aud": aud}
    validator = JwtValidator(URL, expected_audience=expected)
    if ok:
        assert validator.validate(signed(claims), KEYS, NOW).principal == "alice"
    else:
        assert "'aud' claim" in str(refused(lambda: validator.validate(signed(claims), KEYS, NOW)))


@pytest.mark.parametrize("iss, ok", [
    ("https://idp.example.com", True),
    ("https://evil.example.com", False),
    (None, False),
    (["https://idp.example.com"], False),
])
def test_the_issuer(iss: object, ok: bool) -> None:
    claims = CLAIMS if iss is None else {**CLAIMS, "iss": iss}
    validator = JwtValidator(URL, expected_issuer="https://idp.example.com")
    if ok:
        assert validator.validate(signed(claims), KEYS, NOW).principal == "alice"
    else:
        assert "'iss' claim" in str(refused(lambda: validator.validate(signed(claims), KEYS, NOW)))
    assert JwtValidator(URL).validate(signed(claims), KEYS, NOW).principal == "alice"


def test_a_custom_sub_claim_is_required_and_trimmed() -> None:
    validator = JwtValidator(URL, sub_claim="client_id")
    token = signed({**CLAIMS, "sub": 12345, "client_id": " svc-1 "})
    assert validator.validate(token, KEYS, NOW).principal == "svc-1"
    assert "'client_id' claim is missing" in str(refused(
        lambda: validator.validate(signed(CLAIMS), KEYS, NOW)))


@pytest.mark.parametrize("scope, expected", [
    ("read  write", {"read", "write"}),
    (["read", "write", " "], {"read", "write"}),
    ([], set()),
    ("", set()),
    (None, set()),
])
def test_the_scope_claim_is_a_string_or_a_list(scope: object, expected: set[str]) -> None:
    claims = {k: v for k, v in CLAIMS.items() if k != "scope"}
    if scope is not None:
        claims["scp"] = scope
    token = JwtValidator(URL, scope_claim="scp").validate(signed(claims), KEYS, NOW)
    assert token.scope == expected


@pytest.mark.parametrize("token, fragment", [
    ("", "malformed JWS"),
    ("\ud800.e30.", "not ASCII"),
    ("é.e30.", "not ASCII"),
    ("a.b", "malformed JWS"),
    ("!!!.e30.", "malformed JWS"),
    (f"{b64url({'alg': 'RS256', 'kid': 7})}.e30.AAAA", "Key ID"),
    (f"{b64url({'alg': 'RS256', 'kid': 'rsa', 'crit': ['exp']})}.e30.AAAA", "crit"),
    (f"{b64url('[1]')}.e30.AAAA", "malformed JWS"),
    (f"{b64url({'alg': ['RS256']})}.e30.AAAA", "not allowed"),
])
def test_malformed_signed_tokens_are_refused(token: str, fragment: str) -> None:
    assert fragment in str(refused(lambda: JwtValidator(URL).validate(token, KEYS, NOW)))


@given(st.text(st.characters(exclude_categories=()), max_size=300))
def test_arbitrary_text_never_escapes_the_jwt_validator(token: str) -> None:
    with contextlib.suppress(TokenValidationError):
        JwtValidator(URL).validate(token, KEYS, NOW)


SIGNED = signed({**CLAIMS, "aud": "kafka"}, key=EC_KEYS["ES256"], alg="ES256", kid="es256")


@given(st.lists(st.tuples(st.integers(0, len(SIGNED)), st.integers(0, 8),
                          st.text("AZaz09-_.=/+ é", max_size=4)), min_size=1, max_size=4))
def test_mangled_signed_tokens_never_escape_the_jwt_validator(
        edits: list[tuple[int, int, str]]) -> None:
    token = SIGNED
    for at, cut, insert in edits:
        token = token[:at] + insert + token[at + cut:]
    validator = JwtValidator(URL, expected_audience=("kafka",))
    with contextlib.suppress(TokenValidationError):
        assert validator.validate(token, KEYS, NOW).principal == "alice"


def test_the_exchange_with_the_jwt_validator() -> None:
    validator = JwtValidator(URL, expected_audience=("kafka",))
    server = oauthbearer_server(lambda token: validator.validate(token, KEYS, NOW))
    token = validator.validate(signed({**CLAIMS, "aud": "kafka"}), KEYS, NOW)
    run(oauthbearer_client(lambda: token), server)
    assert server.authorization_id == "alice"
    server = oauthbearer_server(lambda token: validator.validate(token, KEYS, NOW))
    client = oauthbearer_client(lambda: token)
    assert client.evaluate(server.evaluate(client.initial())) == b""
    assert client.complete


# --- JwkSet.parse -------------------------------------------------------------


def test_keys_kip_768_does_not_verify_with_are_skipped() -> None:
    okp = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate().public_key(), as_dict=True)
    k1 = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256K1()).public_key(), as_dict=True)
    keys = JwkSet.parse(json.dumps({"keys": [
        jwk(RSA_KEY, "enc", use="enc"),
        jwk(RSA_KEY, "oaep", alg="RSA-OAEP"),
        jwk(RSA_KEY, "encrypt", key_ops=["encrypt"]),
        jwk(RSA_KEY, "verify", key_ops=["verify"]),
        {"kty": "oct", "kid": "oct", "k": "c2VjcmV0"},
        {**okp, "kid": "ed"},
        {**k1, "kid": "k1"},
        {"kty": "unknown", "kid": "u"},
        jwk(RSA_KEY, "rsa", use="sig", alg="PS256"),
    ], "other": "members ignored"}).encode())
    assert keys.key_ids == {"verify", "rsa"}
    assert "rsa" in repr(keys)


@pytest.mark.parametrize("document, fragment", [
    ("", "not valid JSON"),
    (b"\xff\xfe\xff", "not valid JSON"),
    ('{"keys": [NaN]}', "not valid JSON"),
    ("[" * 100_000, "not valid JSON"),
    ("[]", "not a JSON object"),
    ("{}", "no \"keys\" array"),
    ('{"keys": {}}', "no \"keys\" array"),
    ('{"keys": [1]}', "JWKS key 0 is not a JSON object"),
    ('{"keys": [{"kid": 1, "kty": "RSA"}]}', "\"kid\" is not a string"),
    ('{"keys": [{"kid": "a"}]}', "JWKS key 0 (kid 'a') has no \"kty\""),
    ('{"keys": [{"kty": "RSA", "use": 1}]}', "must be strings"),
    ('{"keys": [{"kty": "RSA", "key_ops": "verify"}]}', "\"key_ops\" must be an array"),
    ('{"keys": [{"kty": "RSA", "e": "AQAB"}]}', "not a valid RSA public key"),
    ('{"keys": [{"kty": "RSA", "e": "AQAB", "n": 5}]}', "not a valid RSA public key"),
    ('{"keys": [{"kty": "RSA", "e": "AQAB", "n": "!!"}]}', "not a valid RSA public key"),
    ('{"keys": [{"kty": "EC", "x": "AA", "y": "AA"}]}', "EC key without a \"crv\""),
    ('{"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}', "not a valid EC"),
    ('{"keys": [{"kty": "EC", "crv": "P-256", "x": 1, "y": 2}]}', "not a valid EC"),
    ('{"keys": [{"kty": "RSA", "alg": "ES256"}]}', "does not fit its key type"),
])
def test_jwks_errors_say_what_is_wrong(document: str | bytes, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        JwkSet.parse(document)
    assert fragment in str(info.value)


def test_a_point_off_the_curve_and_mismatched_curves_are_errors() -> None:
    entry = jwk(EC_KEYS["ES256"], "ec")
    entry["y"] = entry["x"]
    with pytest.raises(ValueError, match="not a valid EC public key"):
        jwks(entry)
    with pytest.raises(ValueError, match="does not fit"):
        jwks(jwk(EC_KEYS["ES256"], "ec", alg="ES384"))


@pytest.mark.parametrize("key", [RSA_KEY, EC_KEYS["ES256"]])
def test_a_jwks_holding_a_private_key_is_refused(key: Any) -> None:
    algorithm = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
    private = algorithm.to_jwk(key, as_dict=True)
    with pytest.raises(ValueError, match="holds a private key"):
        jwks({**private, "kid": "leaked"})


@given(st.dictionaries(st.sampled_from(["kty", "kid", "use", "alg", "crv", "n", "e", "x", "y",
                                        "key_ops"]),
                       st.sampled_from(["RSA", "EC", "P-256", "sig", "RS256", "ES256", "AQAB",
                                        "AA", "", "!", "verify"]) | st.integers()
                       | st.lists(st.text(max_size=3), max_size=2)))
def test_arbitrary_keys_parse_or_raise_value_error(entry: dict[str, object]) -> None:
    with contextlib.suppress(ValueError):
        JwkSet.parse(json.dumps({"keys": [entry]}))


# --- JwtValidator.from_settings -----------------------------------------------


def test_settings_defaults() -> None:
    validator = JwtValidator.from_settings({"sasl.oauthbearer.jwks.endpoint.url": URL,
                                            "sasl.mechanism": "ignored"})
    assert validator == JwtValidator(URL)
    assert (validator.expected_audience, validator.expected_issuer) == ((), None)
    assert (validator.sub_claim, validator.scope_claim) == ("sub", "scope")
    assert (validator.clock_skew_s, validator.refresh_ms) == (30, 3_600_000)
    assert (validator.retry_backoff_ms, validator.retry_backoff_max_ms) == (100, 10_000)


def test_every_setting_is_read() -> None:
    validator = JwtValidator.from_settings({
        "sasl.oauthbearer.jwks.endpoint.url": " file:///etc/kafka/jwks.json ",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "60000",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "0",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "0",
        "sasl.oauthbearer.expected.audience": "kafka, broker",
        "sasl.oauthbearer.expected.issuer": " https://idp ",
        "sasl.oauthbearer.sub.claim.name": "client_id",
        "sasl.oauthbearer.scope.claim.name": "scp",
        "sasl.oauthbearer.clock.skew.seconds": "0"})
    assert validator == JwtValidator(
        "file:///etc/kafka/jwks.json", ("kafka", "broker"), "https://idp", "client_id", "scp",
        0, 60_000, 0, 0)
    assert JwtValidator.from_settings({
        "sasl.oauthbearer.jwks.endpoint.url": "HTTP://idp:8080/keys",
        "sasl.oauthbearer.expected.issuer": " ", "sasl.oauthbearer.expected.audience": " ",
    }) == JwtValidator("HTTP://idp:8080/keys")


@pytest.mark.parametrize("settings, setting, fragment", [
    ({}, "sasl.oauthbearer.jwks.endpoint.url", "is required"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "  "}, "sasl.oauthbearer.jwks.endpoint.url",
     "is required"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "ftp://idp/keys"},
     "sasl.oauthbearer.jwks.endpoint.url", "unsupported scheme (ftp)"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "idp.example.com/keys"},
     "sasl.oauthbearer.jwks.endpoint.url", "unsupported scheme (none)"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "https:///keys"},
     "sasl.oauthbearer.jwks.endpoint.url", "without a host"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "https://idp:99999/keys"},
     "sasl.oauthbearer.jwks.endpoint.url", "not a valid URL"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "https://[::1/keys"},
     "sasl.oauthbearer.jwks.endpoint.url", "not a valid URL"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "file:"},
     "sasl.oauthbearer.jwks.endpoint.url", "without a path"),
    ({"sasl.oauthbearer.jwks.endpoint.refresh.ms": "-1"},
     "sasl.oauthbearer.jwks.endpoint.refresh.ms", "at least 0"),
    ({"sasl.oauthbearer.jwks.endpoint.refresh.ms": "1h"},
     "sasl.oauthbearer.jwks.endpoint.refresh.ms", "integer"),
    ({"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "1.5"},
     "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "integer"),
    ({"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "-5"},
     "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "at least 0"),
    ({"sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "-5"},
     "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "at least 0"),
    ({"sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "50"},
     "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "(50 < 100)"),
    ({"sasl.oauthbearer.clock.skew.seconds": "-1"}, "sasl.oauthbearer.clock.skew.seconds",
     "at least 0"),
    ({"sasl.oauthbearer.clock.skew.seconds": "thirty"}, "sasl.oauthbearer.clock.skew.seconds",
     "integer"),
    ({"sasl.oauthbearer.expected.audience": "a,,b"}, "sasl.oauthbearer.expected.audience",
     "blank"),
    ({"sasl.oauthbearer.sub.claim.name": " "}, "sasl.oauthbearer.sub.claim.name", "blank"),
    ({"sasl.oauthbearer.scope.claim.name": ""}, "sasl.oauthbearer.scope.claim.name", "blank"),
])
def test_every_bad_setting_is_named(settings: dict[str, str], setting: str,
                                    fragment: str) -> None:
    full = {"sasl.oauthbearer.jwks.endpoint.url": URL, **settings} if (
        setting != "sasl.oauthbearer.jwks.endpoint.url") else settings
    error = config_error(lambda: JwtValidator.from_settings(full))
    assert error.setting == setting
    assert fragment in str(error)


def test_a_jwks_url_with_credentials_stays_out_of_the_message() -> None:
    for url in ("gopher://user:hunter2@idp/keys", "https://user:hunter2@idp:99999/keys"):
        error = config_error(partial(JwtValidator.from_settings,
                                     {"sasl.oauthbearer.jwks.endpoint.url": url}))
        assert "hunter2" not in str(error)


def test_a_validator_built_directly_checks_its_fields() -> None:
    assert config_error(lambda: JwtValidator(URL, expected_issuer="")).setting == (
        "sasl.oauthbearer.expected.issuer")
    assert config_error(lambda: JwtValidator("mailto:x")).setting == (
        "sasl.oauthbearer.jwks.endpoint.url")
    assert JwtValidator(URL, expected_audience=["a"]).expected_audience == ("a",)  # type: ignore[arg-type]
