"""SASL/OAUTHBEARER, Kafka's unsecured tokens
(raftlog.security.oauthbearer.unsecured): the login that makes them from
JAAS options, the validator that checks them, and fuzzing with hostile
tokens and claims. Every time is passed in: nothing reads a clock."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oauthbearer_helpers import ALICE, NOW_MS, b64url, config_error, refused, unsecured

from raftlog.security.oauthbearer import TokenValidationError, UnsecuredLogin, UnsecuredValidator

NOW_S = NOW_MS / 1000


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


# --- the unsecured login ------------------------------------------------------


def test_an_unsecured_login_token_round_trips_through_the_unsecured_validator() -> None:
    login = UnsecuredLogin.from_jaas({**ALICE, "unsecuredLoginStringClaim_scope": "read write",
                                      "unsecuredLoginLifetimeSeconds": "60"})
    made = login.token(NOW_MS + 123)
    assert login.principal == "alice"
    assert made.principal == "alice"
    assert made.scope == {"read", "write"}
    assert made.start_ms == NOW_MS + 123
    assert made.lifetime_ms == NOW_MS + 123 + 60_000
    checked = UnsecuredValidator().validate(made.value, NOW_MS + 1000)
    assert checked == made


def test_an_unsecured_token_is_an_unpadded_jws_with_alg_none_and_no_signature() -> None:
    value = UnsecuredLogin.from_jaas(ALICE).token(NOW_MS + 5).value
    header, _, signature = value.split(".")
    assert "=" not in value
    assert signature == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    # Kafka's now / 1000.0: seconds with the milliseconds as a fraction.
    assert claims_of(value) == {"exp": 1_700_003_600.005, "iat": 1_700_000_000.005, "sub": "alice"}


def test_number_and_list_claims_become_json_numbers_and_arrays() -> None:
    login = UnsecuredLogin.from_jaas({
        **ALICE,
        "unsecuredLoginNumberClaim_n": "12", "unsecuredLoginNumberClaim_f": " -1.5e2 ",
        "unsecuredLoginListClaim_scope": ",a,b", "unsecuredLoginListClaim_pipes": "|x||y||",
        "unsecuredLoginListClaim_empty": ",", "unsecuredLoginListClaim_none": ""})
    claims = claims_of(login.token(NOW_MS).value)
    assert claims["n"] == 12
    assert claims["f"] == -150.0
    assert claims["scope"] == ["a", "b"]
    assert claims["pipes"] == ["x", "", "y"]  # Java's split keeps inner empty elements only
    assert claims["empty"] == claims["none"] == []
    assert login.token(NOW_MS).scope == {"a", "b"}


def test_custom_principal_and_scope_claims_on_both_sides() -> None:
    login = UnsecuredLogin.from_jaas({
        "unsecuredLoginPrincipalClaimName": "client_id", "unsecuredLoginScopeClaimName": "scp",
        "unsecuredLoginStringClaim_client_id": "svc", "unsecuredLoginListClaim_scp": " a b"})
    validator = UnsecuredValidator.from_jaas({
        "unsecuredValidatorPrincipalClaimName": "client_id",
        "unsecuredValidatorScopeClaimName": "scp", "unsecuredValidatorRequiredScope": "b"})
    token = validator.validate(login.token(NOW_MS).value, NOW_MS)
    assert (token.principal, token.scope) == ("svc", frozenset({"a", "b"}))
    # The default validator looks for "sub".
    assert "'sub' is missing" in str(refused(
        lambda: UnsecuredValidator().validate(login.token(NOW_MS).value, NOW_MS)))


def test_blank_claim_name_options_mean_the_defaults_and_other_options_are_left_alone() -> None:
    login = UnsecuredLogin.from_jaas({
        **ALICE, "unsecuredLoginPrincipalClaimName": " ", "unsecuredLoginScopeClaimName": "",
        "unsecuredValidatorRequiredScope": "x", "username": "ignored"})
    assert (login.principal_claim, login.scope_claim, login.lifetime_s) == ("sub", "scope", 3600)
    assert login.claims == {"sub": "alice"}


def test_login_extensions_are_kept_in_order_and_the_login_is_read_only() -> None:
    login = UnsecuredLogin.from_jaas({**ALICE, "unsecuredLoginExtension_traceId": "t-1",
                                      "unsecuredLoginExtension_logicalCluster": "lkc 1"})
    assert list(login.extensions.items()) == [("traceId", "t-1"), ("logicalCluster", "lkc 1")]
    assert "'traceId'" in repr(login) and "t-1" not in repr(login)
    with pytest.raises(TypeError):
        login.claims["sub"] = "mallory"  # type: ignore[index]
    with pytest.raises(TypeError):
        login.extensions["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize("options, setting, fragment", [
    ({}, "unsecuredLoginStringClaim_sub", "principal claim 'sub' must be given"),
    ({"unsecuredLoginStringClaim_sub": "  "}, "unsecuredLoginStringClaim_sub", "non-blank"),
    ({"unsecuredLoginNumberClaim_sub": "1"}, "unsecuredLoginNumberClaim_sub", "string claim"),
    ({"unsecuredLoginListClaim_sub": ",a"}, "unsecuredLoginListClaim_sub", "string claim"),
    ({**ALICE, "unsecuredLoginPrincipalClaimName": "cid"}, "unsecuredLoginStringClaim_cid",
     "principal claim 'cid'"),
    ({**ALICE, "unsecuredLoginNumberClaim_exp": "1"}, "unsecuredLoginNumberClaim_exp",
     "'exp' claim is made"),
    ({**ALICE, "unsecuredLoginStringClaim_iat": "1"}, "unsecuredLoginStringClaim_iat",
     "'iat' claim is made"),
    ({**ALICE, "unsecuredLoginNumberClaim_n": "abc"}, "unsecuredLoginNumberClaim_n", "a number"),
    ({**ALICE, "unsecuredLoginNumberClaim_n": "NaN"}, "unsecuredLoginNumberClaim_n", "a number"),
    ({**ALICE, "unsecuredLoginNumberClaim_n": "1e999"}, "unsecuredLoginNumberClaim_n", "finite"),
    ({**ALICE, "unsecuredLoginNumberClaim_scope": "1"}, "unsecuredLoginNumberClaim_scope",
     "string or list claim"),
    ({**ALICE, "unsecuredLoginStringClaim_": "x"}, "unsecuredLoginStringClaim_", "no claim name"),
    ({**ALICE, "unsecuredLoginStringClaim_a": "x", "unsecuredLoginListClaim_a": ",x"},
     "unsecuredLoginListClaim_a", "already given by unsecuredLoginStringClaim_a"),
    ({**ALICE, "unsecuredLoginLifetimeSeconds": "1h"}, "unsecuredLoginLifetimeSeconds", "integer"),
    ({**ALICE, "unsecuredLoginLifetimeSeconds": ""}, "unsecuredLoginLifetimeSeconds", "integer"),
    ({**ALICE, "unsecuredLoginLifetimeSeconds": "0"}, "unsecuredLoginLifetimeSeconds", "positive"),
    ({**ALICE, "unsecuredLoginLifetimeSeconds": "-60"}, "unsecuredLoginLifetimeSeconds",
     "positive"),
    ({**ALICE, "unsecuredLoginExtension_auth": "x"}, "unsecuredLoginExtension_auth", "reserved"),
    ({**ALICE, "unsecuredLoginExtension_trace_id": "x"}, "unsecuredLoginExtension_trace_id",
     "ASCII letters"),
    ({**ALICE, "unsecuredLoginExtension_": "x"}, "unsecuredLoginExtension_", "ASCII letters"),
    ({**ALICE, "unsecuredLoginExtension_x": ""}, "unsecuredLoginExtension_x", "extension value"),
    ({**ALICE, "unsecuredLoginExtension_x": "s\x01cret"}, "unsecuredLoginExtension_x",
     "extension value"),
    ({**ALICE, "unsecuredLoginExtension_x": "sécret"}, "unsecuredLoginExtension_x",
     "extension value"),
    ({**ALICE, "unsecuredLoginStringclaim_sub": "typo"}, "unsecuredLoginStringclaim_sub",
     "unknown"),
])
def test_every_bad_login_option_is_named(options: dict[str, str], setting: str,
                                         fragment: str) -> None:
    error = config_error(lambda: UnsecuredLogin.from_jaas(options))
    assert isinstance(error, ValueError)
    assert error.setting == setting
    assert fragment in str(error) == error.message
    assert "cret" not in str(error)  # extension values may be secrets


@pytest.mark.parametrize("claims, fragment", [
    ({"sub": "a", "flag": True}, "a claim must be"),
    ({"sub": "a", "n": float("inf")}, "finite"),
    ({"sub": "a", "l": ["x", 1]}, "a claim must be"),
    ({"sub": "a", "": "x"}, "no claim name"),
])
def test_a_login_built_directly_checks_its_claims(claims: dict[str, object],
                                                  fragment: str) -> None:
    assert fragment in str(config_error(lambda: UnsecuredLogin(claims)))


def test_a_login_built_directly_takes_lists() -> None:
    login = UnsecuredLogin({"sub": "a", "scope": ["x", "y"]}, lifetime_s=1)
    assert login.claims["scope"] == ("x", "y")
    assert login.token(NOW_MS).lifetime_ms == NOW_MS + 1000


# --- the unsecured validator ------------------------------------------------


def test_unsecured_validator_options() -> None:
    assert UnsecuredValidator.from_jaas({}) == UnsecuredValidator()
    validator = UnsecuredValidator.from_jaas({
        "unsecuredValidatorPrincipalClaimName": " cid ", "unsecuredValidatorScopeClaimName": "scp",
        "unsecuredValidatorRequiredScope": " a b,c  a ",
        "unsecuredValidatorAllowableClockSkewMs": " 250 ",
        "unsecuredLoginStringClaim_sub": "left alone"})
    assert validator == UnsecuredValidator("cid", "scp", ("a", "b", "c"), 250)
    assert UnsecuredValidator.from_jaas(
        {"unsecuredValidatorAllowableClockSkewMs": " "}).clock_skew_ms == 0


@pytest.mark.parametrize("options, setting, fragment", [
    ({"unsecuredValidatorAllowableClockSkewMs": "1s"}, "unsecuredValidatorAllowableClockSkewMs",
     "integer"),
    ({"unsecuredValidatorAllowableClockSkewMs": "-1"}, "unsecuredValidatorAllowableClockSkewMs",
     "negative"),
    ({"unsecuredValidatorRequiredScopes": "a"}, "unsecuredValidatorRequiredScopes", "unknown"),
])
def test_every_bad_validator_option_is_named(options: dict[str, str], setting: str,
                                             fragment: str) -> None:
    error = config_error(lambda: UnsecuredValidator.from_jaas(options))
    assert (error.setting, fragment in str(error)) == (setting, True)


def test_an_unsecured_validator_built_directly_checks_its_fields() -> None:
    assert config_error(lambda: UnsecuredValidator(principal_claim=" ")).setting == (
        "unsecuredValidatorPrincipalClaimName")
    assert config_error(lambda: UnsecuredValidator(scope_claim="")).setting == (
        "unsecuredValidatorScopeClaimName")
    assert config_error(lambda: UnsecuredValidator(required_scope=("a b",))).setting == (
        "unsecuredValidatorRequiredScope")


EXP = NOW_MS // 1000 + 60  # a minute from now, in seconds


@pytest.mark.parametrize("claims, now_ms, skew_ms", [
    ({"sub": "a", "exp": EXP}, NOW_MS, 0),
    ({"sub": "a", "exp": EXP}, EXP * 1000 - 1, 0),  # the last millisecond before exp
    ({"sub": "a", "exp": EXP}, EXP * 1000 + 499, 500),  # past exp, within the skew
    ({"sub": "a", "exp": EXP, "iat": NOW_S + 0.5}, NOW_MS + 500, 0),  # iat == now
    ({"sub": "a", "exp": EXP, "iat": NOW_S + 1}, NOW_MS, 1000),  # iat ahead, within the skew
    ({"sub": "a", "exp": EXP, "scope": 5 * " "}, NOW_MS, 0),
])
def test_unsecured_tokens_within_their_time_and_skew_are_accepted(
        claims: dict[str, object], now_ms: int, skew_ms: int) -> None:
    token = UnsecuredValidator(clock_skew_ms=skew_ms).validate(unsecured(claims), now_ms)
    assert token.principal == "a"
    assert token.lifetime_ms == EXP * 1000


@pytest.mark.parametrize("claims, now_ms, skew_ms, fragment", [
    ({"sub": "a", "exp": EXP}, EXP * 1000, 0, "expired"),  # on exp: expired, as Kafka
    ({"sub": "a", "exp": EXP}, EXP * 1000 + 500, 500, "expired"),
    ({"sub": "a", "exp": EXP}, EXP * 1000 + 10_000, 500, "expired"),
    ({"sub": "a", "exp": EXP, "iat": NOW_S + 1}, NOW_MS, 999, "'iat' claim"),
    ({"sub": "a", "exp": NOW_S, "iat": NOW_S}, NOW_MS - 5000, 10_000, "not after the 'iat'"),
    ({"exp": EXP}, NOW_MS, 0, "principal claim 'sub' is missing"),
    ({"sub": None, "exp": EXP}, NOW_MS, 0, "principal claim 'sub' is missing"),
    ({"sub": " \t", "exp": EXP}, NOW_MS, 0, "principal claim 'sub' is blank"),
    ({"sub": "", "exp": EXP}, NOW_MS, 0, "principal claim 'sub' is blank"),
    ({"sub": ["a"], "exp": EXP}, NOW_MS, 0, "principal claim 'sub' is not a string"),
    ({"sub": "\ud800", "exp": EXP}, NOW_MS, 0, "not valid Unicode"),
    ({"sub": "a"}, NOW_MS, 0, "'exp' claim is missing"),
    ({"sub": "a", "exp": str(EXP)}, NOW_MS, 0, "'exp' claim is not a number"),
    ({"sub": "a", "exp": True}, NOW_MS, 0, "'exp' claim is not a number"),
    ({"sub": "a", "exp": EXP, "iat": "now"}, NOW_MS, 0, "'iat' claim is not a number"),
    ({"sub": "a", "exp": EXP, "scope": 7}, NOW_MS, 0, "scope claim 'scope' is neither"),
    ({"sub": "a", "exp": EXP, "scope": ["x", 7]}, NOW_MS, 0, "scope claim 'scope' is neither"),
])
def test_every_unsecured_claim_failure_names_the_claim(
        claims: dict[str, object], now_ms: int, skew_ms: int, fragment: str) -> None:
    error = refused(lambda: UnsecuredValidator(clock_skew_ms=skew_ms).validate(
        unsecured(claims), now_ms))
    assert fragment in str(error) == error.reason
    assert (error.status, error.scope) == ("invalid_token", None)


GOOD = {"sub": "a", "exp": EXP}
NONE = b64url({"alg": "none"})


@pytest.mark.parametrize("token, fragment", [
    (unsecured(GOOD, signature="c2ln"), "must not have a signature"),
    (unsecured(GOOD, header={"alg": "HS256"}), "'alg' header, not 'HS256'"),
    (unsecured(GOOD, header={"typ": "JWT"}), "not None"),
    (unsecured(GOOD, header=["alg", "none"]), "header is not a JSON object"),
    (unsecured(GOOD)[:-1], "3 dot-separated parts, not 2"),
    (unsecured(GOOD) + ".", "3 dot-separated parts, not 4"),
    ("", "not 1"),
    (f"{NONE}.{b64url('[1]')}.", "payload is not a JSON object"),
    (f"{NONE}.{b64url('{')}.", "payload is not base64url-encoded JSON"),
    (NONE + "." + b64url('{"sub": "a", "exp": NaN}') + ".", "NaN is not a JSON number"),
    (f"{NONE}.{b64url('[' * 100_000)}.", "payload is not base64url"),
    (f"{NONE}.e30!.", "payload is not base64url"),
    (f"{NONE}.e30==.", "payload is not base64url"),  # padding must fill 4
    (f"{NONE}.e.", "payload is not base64url"),
    (NONE + "." + b64url("\xff") + ".", "not base64url"),
    (f"e30.{b64url(GOOD)}.", "'alg' header, not None"),
    (f"eyJhbGciOiJub25lIn0.{b64url(GOOD)}.", "principal"),  # parses: only a control
])
def test_malformed_and_signed_tokens_are_refused_by_the_unsecured_validator(
        token: str, fragment: str) -> None:
    validator = UnsecuredValidator()
    if fragment == "principal":
        assert validator.validate(token, NOW_MS).principal == "a"
        return
    error = refused(lambda: validator.validate(token, NOW_MS))
    assert fragment in str(error)
    assert error.status == "invalid_token"


def test_padded_base64url_is_accepted_as_javas_decoder_does() -> None:
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').decode()
    assert header.endswith("=")
    assert UnsecuredValidator().validate(f"{header}.{b64url(GOOD)}.", NOW_MS).principal == "a"


def test_missing_scope_is_insufficient_scope_with_the_required_scope() -> None:
    validator = UnsecuredValidator(required_scope=("read", "write"))
    error = refused(lambda: validator.validate(unsecured({**GOOD, "scope": ["read"]}), NOW_MS))
    assert (error.status, error.scope) == ("insufficient_scope", "read write")
    assert "'write'" in error.reason
    assert error.challenge() == '{"status":"insufficient_scope", "scope":"read write"}'
    error = refused(lambda: validator.validate(unsecured(GOOD), NOW_MS))
    assert error.status == "insufficient_scope"
    # Either form of the scope claim satisfies it.
    for scope in ("write other read", ["read", " write ", ""]):
        token = validator.validate(unsecured({**GOOD, "scope": scope}), NOW_MS)
        assert {"read", "write"} <= token.scope


@given(st.text(st.characters(exclude_categories=()), max_size=300))
def test_arbitrary_text_never_escapes_the_unsecured_validator(token: str) -> None:
    with contextlib.suppress(TokenValidationError):
        UnsecuredValidator().validate(token, NOW_MS)


@given(st.dictionaries(st.sampled_from(["sub", "exp", "iat", "scope"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                                    | st.text(max_size=5),
                                    lambda inner: st.lists(inner, max_size=3), max_leaves=5)))
def test_arbitrary_claims_never_escape_the_unsecured_validator(claims: dict[str, object]) -> None:
    try:
        token = UnsecuredValidator(required_scope=("a",)).validate(unsecured(claims), NOW_MS)
    except TokenValidationError:
        return
    assert token.principal.strip() and "a" in token.scope
