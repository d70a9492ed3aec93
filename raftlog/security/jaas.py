"""Kafka's ``sasl.jaas.config`` values: one JAAS login module entry.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

The grammar is Kafka's (``JaasConfig``, a java.io.StreamTokenizer):

- an entry is ``<login module> <flag> (<name>=<value>)* ;`` and the text
  holds exactly one (``JaasContext``);
- the flag is required, requisite, sufficient or optional, in any case;
- a name or value is a bare word (anything up to white space, ``;``, ``=``,
  a quote or ``/``) or a string in double or single quotes, where a backslash
  escapes: ``\\n``, ``\\t``, ``\\r``, ``\\b``, ``\\f``, ``\\v``, ``\\a``, one to
  three octal digits, and any other character stands for itself;
- white space is every character up to U+0020; ``//`` comments run to the
  end of the line and ``/* */`` ones to their close;
- a repeated option keeps its last value.

Two things Kafka's tokenizer lets pass silently are errors here: a quoted
string not closed on its line, and a lone ``/`` (Kafka takes it for a
comment to the end of the line, so ``keyTab=/etc/x.keytab`` loses its value).
Messages use Kafka's wording and add what was expected and where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

from raftlog.security.sasl import OAUTHBEARER, PLAIN, SCRAM_SHA_256, SCRAM_SHA_512

__all__ = (
    "FLAGS",
    "MODULES",
    "JaasEntry",
    "client_credentials",
    "parse_jaas_config",
    "plain_users",
)

#: The login module Kafka's clients and brokers name for each mechanism.
MODULES: Final = {
    PLAIN: "org.apache.kafka.common.security.plain.PlainLoginModule",
    SCRAM_SHA_256: "org.apache.kafka.common.security.scram.ScramLoginModule",
    SCRAM_SHA_512: "org.apache.kafka.common.security.scram.ScramLoginModule",
    OAUTHBEARER: "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}

#: JAAS control flags (javax.security.auth.login.AppConfigurationEntry), lower case.
FLAGS: Final = ("required", "requisite", "sufficient", "optional")

_PLAIN_USER_PREFIX: Final = "user_"  # PlainServerCallbackHandler's option prefix
_SPECIAL: Final = frozenset(";=\"'/")
_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL: Final = frozenset("01234567")


@dataclass(frozen=True, slots=True, repr=False)
class JaasEntry:
    """One login module entry. ``flag`` is lower case; ``options`` is
    read-only. Raises ValueError for an empty module name or unknown flag."""

    login_module: str
    flag: str
    options: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.login_module:
            raise ValueError("Login module not specified in JAAS config")
        if self.flag not in FLAGS:
            raise ValueError(f"Invalid login module control flag '{self.flag}' in JAAS config")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def __repr__(self) -> str:
        # Option values hold passwords: only their names go into logs.
        return (f"JaasEntry(login_module={self.login_module!r}, flag={self.flag!r}, "
                f"options=[{', '.join(map(repr, self.options))}])")


def parse_jaas_config(text: str) -> JaasEntry:
    """The one entry in ``text``. Raises ValueError, saying what was expected
    and where, for anything else."""
    tokens = _tokenize(text)
    entries: list[JaasEntry] = []
    position = 0
    while position < len(tokens):
        entry, position = _parse_entry(text, tokens, position)
        entries.append(entry)
    if not entries:
        raise ValueError("Login module not specified in JAAS config: the value is empty")
    if len(entries) != 1:
        raise ValueError(
            f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """The PLAIN users a broker's entry declares: ``user_<name>="<password>"``."""
    return {key[len(_PLAIN_USER_PREFIX):]: value for key, value in entry.options.items()
            if key.startswith(_PLAIN_USER_PREFIX) and len(key) > len(_PLAIN_USER_PREFIX)}


def client_credentials(entry: JaasEntry) -> tuple[str, str] | None:
    """The ``username`` and ``password`` options, or None when neither is
    there. Raises ValueError when only one is."""
    username = entry.options.get("username")
    password = entry.options.get("password")
    if username is None and password is None:
        return None
    if username is None or password is None:
        present, missing = ("username", "password") if password is None else ("password", "username")
        raise ValueError(f"JAAS config has a '{present}' option but no '{missing}'")
    return username, password


class _Kind(Enum):
    WORD = "word"
    QUOTED = "quoted string"
    SEMICOLON = ";"
    EQUALS = "="


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str  # a word's or string's value (escapes resolved)
    offset: int  # where it starts in the config text


def _parse_entry(text: str, tokens: list[_Token], position: int) -> tuple[JaasEntry, int]:
    """One entry from ``tokens[position]``; returns it and the next position."""
    module = tokens[position]
    if not _is_value(module) or not module.text:
        raise ValueError("Login module not specified in JAAS config: expected a login module "
                         f"class name {_found(text, module)}")
    if position + 1 == len(tokens):
        raise ValueError("Login module control flag not specified in JAAS config: expected "
                         f"{_flags()} after '{module.text}' at the end of the value")
    flag = tokens[position + 1]
    if not _is_value(flag):
        raise ValueError("Login module control flag is not available in the JAAS config: "
                         f"expected {_flags()} {_found(text, flag)}")
    if flag.text.lower() not in FLAGS:
        raise ValueError(f"Invalid login module control flag '{flag.text}' in JAAS config "
                         f"{_where(text, flag.offset)}: expected {_flags()}")
    options: dict[str, str] = {}
    position += 2
    while True:
        if position == len(tokens):
            raise ValueError("JAAS config entry not terminated by semi-colon: expected ';' "
                             "at the end of the value")
        key = tokens[position]
        if key.kind is _Kind.SEMICOLON:
            return JaasEntry(module.text, flag.text.lower(), options), position + 1
        if not _is_value(key):
            raise ValueError(f"Invalid JAAS config: expected an option name or ';' "
                             f"{_found(text, key)}")
        equals = tokens[position + 1] if position + 1 < len(tokens) else None
        value = tokens[position + 2] if position + 2 < len(tokens) else None
        if equals is None or equals.kind is not _Kind.EQUALS:
            raise ValueError(f"Value not specified for key '{key.text}' in JAAS config: "
                             f"expected '=' {_found(text, equals)}")
        if value is None or not _is_value(value):
            raise ValueError(f"Value not specified for key '{key.text}' in JAAS config: "
                             f"expected a value {_found(text, value)}")
        options[key.text] = value.text
        position += 3


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            i = _skip_comment(text, i)
        elif c == ";":
            tokens.append(_Token(_Kind.SEMICOLON, c, i))
            i += 1
        elif c == "=":
            tokens.append(_Token(_Kind.EQUALS, c, i))
            i += 1
        elif c in "\"'":
            value, end = _quoted(text, i)
            tokens.append(_Token(_Kind.QUOTED, value, i))
            i = end
        else:
            start = i
            while i < len(text) and text[i] > " " and text[i] not in _SPECIAL:
                i += 1
            tokens.append(_Token(_Kind.WORD, text[start:i], start))
    return tokens


def _skip_comment(text: str, start: int) -> int:
    """The offset after the comment at ``start`` (a ``/``)."""
    following = text[start + 1:start + 2]
    if following == "/":
        ends = [e for e in (text.find("\n", start), text.find("\r", start)) if e >= 0]
        return min(ends) if ends else len(text)
    if following == "*":
        end = text.find("*/", start + 2)
        if end < 0:
            raise ValueError(f"Invalid JAAS config: comment '/*' {_where(text, start)} "
                             "is not closed by '*/'")
        return end + 2
    raise ValueError(f"Invalid JAAS config: unexpected '/' {_where(text, start)}; "
                     "quote a value that contains '/'")


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The value of the string opening at ``start`` and the offset after it."""
    quote = text[start]
    out: list[str] = []
    i = start + 1
    while True:
        if i == len(text) or text[i] in "\n\r":
            raise ValueError(f"Invalid JAAS config: quoted string {_where(text, start)} "
                             f"is not closed by {quote} on its line")
        c = text[i]
        i += 1
        if c == quote:
            return "".join(out), i
        if c != "\\":
            out.append(c)
            continue
        if i == len(text):
            continue  # the check above reports the open string
        c = text[i]
        i += 1
        if c in _OCTAL:
            # Up to three digits when the first is 0-3 (at most \377), else two.
            digits = c
            while len(digits) < (3 if c <= "3" else 2) and i < len(text) and text[i] in _OCTAL:
                digits += text[i]
                i += 1
            out.append(chr(int(digits, 8)))
        else:
            out.append(_ESCAPES.get(c, c))


def _is_value(token: _Token | None) -> bool:
    return token is not None and token.kind in (_Kind.WORD, _Kind.QUOTED)


def _flags() -> str:
    return ", ".join(FLAGS[:-1]) + " or " + FLAGS[-1]


def _found(text: str, token: _Token | None) -> str:
    # Not the token's text: a misplaced one may well be a password.
    if token is None:
        return "at the end of the value"
    shown = f"'{token.text}'" if token.kind in (_Kind.SEMICOLON, _Kind.EQUALS) else (
        f"a {token.kind.value}")
    return f"{_where(text, token.offset)}, found {shown}"


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"at line {line}, column {column}"
