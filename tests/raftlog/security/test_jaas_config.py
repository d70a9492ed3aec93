"""Kafka `sasl.jaas.config` parsing (raftlog.security.jaas)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.security.jaas import (
    MODULES,
    JaasEntry,
    client_credentials,
    parse_jaas_config,
    plain_users,
)
from raftlog.security.sasl import PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, SUPPORTED_MECHANISMS

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
BROKER = (f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
          'user_admin="admin-secret" user_alice="alice-secret";')


def test_parses_kafkas_broker_example() -> None:
    entry = parse_jaas_config(BROKER)
    assert entry.login_module == PLAIN_MODULE
    assert entry.flag == "required"
    assert dict(entry.options) == {
        "username": "admin", "password": "admin-secret",
        "user_admin": "admin-secret", "user_alice": "alice-secret"}
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert client_credentials(entry) == ("admin", "admin-secret")


def test_a_scram_client_entry_has_credentials_and_no_plain_users() -> None:
    entry = parse_jaas_config(f"{SCRAM_MODULE} required username=alice password='al ice';")
    assert client_credentials(entry) == ("alice", "al ice")
    assert plain_users(entry) == {}


def test_an_entry_without_options() -> None:
    entry = parse_jaas_config(f"{SCRAM_MODULE} optional;")
    assert entry == JaasEntry(SCRAM_MODULE, "optional", {})
    assert client_credentials(entry) is None


@pytest.mark.parametrize("flag", ["required", "REQUIRED", "Requisite", "sufficient", "OPTIONAL"])
def test_flags_are_case_insensitive_and_kept_lower_case(flag: str) -> None:
    assert parse_jaas_config(f"m {flag};").flag == flag.lower()


@pytest.mark.parametrize("value, expected", [
    (r'"a\"b"', 'a"b'),
    (r"'a\'b'", "a'b"),
    (r'"a\\b"', "a\\b"),
    (r'"tab\there"', "tab\there"),
    (r'"\n\r\b\f\v\a"', "\n\r\b\f\v\a"),
    (r'"\101\60\0"', "A0\0"),
    (r'"\477"', "'7"),  # a first digit above 3 takes two digits at most
    (r'"\q\;"', "q;"),  # any other escaped character stands for itself
    ('"a;b=c d"', "a;b=c d"),
    ('"it\'s"', "it's"),
    ("'say \"hi\"'", 'say "hi"'),
    ('""', ""),
    ('"ünï"', "ünï"),
    ("a.b-c:d@e+f*g", "a.b-c:d@e+f*g"),
    ('"/etc/kafka.keytab"', "/etc/kafka.keytab"),
    ('"a\\\nb"', "a\nb"),  # an escaped line break
])
def test_values_quoted_escaped_or_bare(value: str, expected: str) -> None:
    assert parse_jaas_config(f"m required key={value};").options["key"] == expected


def test_white_space_comments_and_quoted_keys() -> None:
    text = (f"  // a line comment\n\t{PLAIN_MODULE}\r\n  /* a\n block */ required\n"
            '  "user_bob"  =  bob-secret // trailing\n'
            "  user_carol=/*inline*/'c';  \n")
    entry = parse_jaas_config(text)
    assert plain_users(entry) == {"bob": "bob-secret", "carol": "c"}


def test_a_repeated_option_keeps_its_last_value() -> None:
    assert parse_jaas_config("m required a=1 a=2;").options == {"a": "2"}


def test_options_are_read_only_and_values_stay_out_of_repr() -> None:
    entry = parse_jaas_config(BROKER)
    with pytest.raises(TypeError):
        entry.options["user_eve"] = "x"  # type: ignore[index]
    assert "admin-secret" not in repr(entry)
    assert "user_alice" in repr(entry)


def test_plain_users_needs_a_name_after_the_prefix() -> None:
    assert plain_users(parse_jaas_config('m required user_="x" user_a=1 users_b=2;')) == {"a": "1"}


@pytest.mark.parametrize("options, missing", [("username=a", "password"), ("password=b", "username")])
def test_client_credentials_refuses_half_a_pair(options: str, missing: str) -> None:
    with pytest.raises(ValueError, match=f"no '{missing}'"):
        client_credentials(parse_jaas_config(f"m required {options};"))


@pytest.mark.parametrize("text, message", [
    ("", "Login module not specified in JAAS config: the value is empty"),
    ("  \n // only a comment", "Login module not specified in JAAS config: the value is empty"),
    ("a required; b optional;", "JAAS config property contains 2 login modules, should be 1 module"),
    ("a required; b optional; c sufficient;",
     "JAAS config property contains 3 login modules, should be 1 module"),
    (";", "Login module not specified in JAAS config: expected a login module class name "
          "at line 1, column 1, found ';'"),
    ('"" required;', "Login module not specified in JAAS config"),
    ("a", "Login module control flag not specified in JAAS config: expected required, "
          "requisite, sufficient or optional after 'a' at the end of the value"),
    ("a ;", "Login module control flag is not available in the JAAS config: expected required, "
            "requisite, sufficient or optional at line 1, column 3, found ';'"),
    ("a\n bogus;", "Invalid login module control flag 'bogus' in JAAS config at line 2, "
                   "column 2: expected required, requisite, sufficient or optional"),
    ("a required", "JAAS config entry not terminated by semi-colon: expected ';' at the end"),
    ('a required x="y"', "JAAS config entry not terminated by semi-colon"),
    ("a required x", "Value not specified for key 'x' in JAAS config: expected '=' at the end"),
    ("a required x;", "Value not specified for key 'x' in JAAS config: expected '=' "
                      "at line 1, column 13, found ';'"),
    ("a required password secret;", "Value not specified for key 'password' in JAAS config: "
                                     "expected '=' at line 1, column 21, found a word"),
    ("a required x=", "Value not specified for key 'x' in JAAS config: expected a value at the end"),
    ("a required x=;", "Value not specified for key 'x' in JAAS config: expected a value "
                       "at line 1, column 14, found ';'"),
    ("a required x==y;", "Value not specified for key 'x' in JAAS config: expected a value"),
    ("a required =y;", "Invalid JAAS config: expected an option name or ';' at line 1, "
                       "column 12, found '='"),
    ('a required x="y;', "Invalid JAAS config: quoted string at line 1, column 14 is not "
                         'closed by " on its line'),
    ("a required x='y\n';", "Invalid JAAS config: quoted string at line 1, column 14 is not "
                            "closed by ' on its line"),
    ('a required x="y\\', "Invalid JAAS config: quoted string at line 1, column 14 is not "
                          'closed by " on its line'),
    ("a required x=/etc/k;", "Invalid JAAS config: unexpected '/' at line 1, column 14; "
                             "quote a value that contains '/'"),
    ("a required /* open", "Invalid JAAS config: comment '/*' at line 1, column 12 is not "
                           "closed by '*/'"),
    ("a required /*/ x=1;", "Invalid JAAS config: comment '/*' at line 1, column 12 is not "
                            "closed by '*/'"),
])
def test_malformed_configs_are_refused_with_what_and_where(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_jaas_config(text)
    assert str(info.value).startswith(message)


def test_error_messages_do_not_show_misplaced_values() -> None:
    with pytest.raises(ValueError) as info:
        parse_jaas_config('a required password "hunter2";')
    assert "hunter2" not in str(info.value)


def test_entry_validates_when_built_directly() -> None:
    with pytest.raises(ValueError, match="Invalid login module control flag 'REQUIRED'"):
        JaasEntry("m", "REQUIRED", {})
    with pytest.raises(ValueError, match="Login module not specified"):
        JaasEntry("", "required", {})


def test_modules_name_kafkas_login_module_for_each_mechanism() -> None:
    assert set(MODULES) == set(SUPPORTED_MECHANISMS)
    assert MODULES[PLAIN] == PLAIN_MODULE
    assert MODULES[SCRAM_SHA_256] == MODULES[SCRAM_SHA_512] == SCRAM_MODULE


def quote(value: str) -> str:
    """A naive reference quoter: escape what a double-quoted string cannot hold."""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"')
               .replace("\n", "\\n").replace("\r", "\\r"))
    return f'"{escaped}"'


@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]*", fullmatch=True), st.text()))
def test_quoted_values_round_trip(options: dict[str, str]) -> None:
    text = f"{PLAIN_MODULE} sufficient " + " ".join(
        f"{key}={quote(value)}" for key, value in options.items()) + ";"
    entry = parse_jaas_config(text)
    assert entry.flag == "sufficient"
    assert dict(entry.options) == options
