"""The SSL principal: who a TLS client is, from its certificate.

- `distinguished_name` prints a certificate's subject the way Java's
  ``X500Principal.getName()`` does (RFC 2253), which is the string Kafka's
  SSL principal builder starts from.
- `PrincipalMapper` is Kafka's ``ssl.principal.mapping.rules`` (KIP-371).
- `peer_principal` combines the two for one connection.

`raftlog.security.tls` re-exports these; it builds the contexts.
"""

from __future__ import annotations

import re
import ssl
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = (
    "ANONYMOUS",
    "NoMatchingRule",
    "PrincipalMapper",
    "distinguished_name",
    "java_trim",
    "peer_principal",
)

ANONYMOUS: Final = "ANONYMOUS"  # KafkaPrincipal.ANONYMOUS's name
_JAVA_WHITE_SPACE: Final = "".join(map(chr, range(0x21)))  # what String.trim() strips


def java_trim(text: str) -> str:
    """``text`` as Java's ``String.trim()`` leaves it (Kafka trims every
    config value this way)."""
    return text.strip(_JAVA_WHITE_SPACE)


def peer_principal(ssl_object: ssl.SSLObject | None, mapper: PrincipalMapper) -> str:
    """The SSL principal's name for a connection (the caller adds "User:"):
    ANONYMOUS without TLS or when the peer sent no certificate, else the
    mapped distinguished name of its certificate's subject. Raises
    NoMatchingRule when no rule maps it (Kafka then fails the connection)."""
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    return mapper.name(distinguished_name(der))


# Java's RFC 2253 keywords (sun.security.x509.AVAKeyword); every other
# attribute type is printed as its dotted OID with a hex value.
_RFC2253_KEYWORDS: Final = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
    "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# The string types Java prints as text: PrintableString, T61String,
# IA5String, GeneralString, BMPString, UTF8String. Others are printed in hex.
_STRING_TAGS: Final = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPED: Final = frozenset(',=+<>#;"\\')
_SEQUENCE: Final = 0x30
_SET: Final = 0x31
_OID: Final = 0x06


def distinguished_name(der_certificate: bytes) -> str:
    """The certificate's subject as Java's ``X500Principal.getName()``
    prints it (RFC 2253), the string Kafka's principal is built from.

    RDNs most specific first, joined by ",", the values of a multi-valued
    RDN in their DER order joined by "+"; keywords CN, C, L, ST, O, OU,
    STREET, DC and UID, any other type as ``<dotted OID>=#<hex of the DER
    value>``; in a value, each of ``,=+<>#;"\\`` gets a backslash (Java
    escapes "=" and every "#", not only a leading one), NUL is ``\\00``, and
    leading and trailing spaces and carriage returns get a backslash. As in
    Java, a string value's bytes are read as UTF-8 whatever its type, and a
    value that is not one of Java's string types is printed in hex.
    cryptography's ``Name.rfc4514_string()`` differs on all of these.
    Raises ValueError when the bytes are not a DER certificate."""
    try:
        rdns = _subject_rdns(der_certificate)
    except (IndexError, ValueError) as e:
        raise ValueError(f"not a DER X.509 certificate: {e}") from None
    return ",".join("+".join(_rfc2253_attribute(oid, tlv) for oid, tlv in rdn)
                    for rdn in reversed(rdns))


def _subject_rdns(der: bytes) -> list[list[tuple[str, bytes]]]:
    """The subject's RDNs in DER order, each a list of (OID, value TLV)."""
    tag, start, end = _der_element(der, 0, len(der))
    if tag != _SEQUENCE or end != len(der):
        raise ValueError("the certificate is not one DER SEQUENCE")
    tag, start, end = _der_element(der, start, end)
    if tag != _SEQUENCE:
        raise ValueError("no tbsCertificate")
    # tbsCertificate: [0] version (optional), serialNumber, signature,
    # issuer, validity, subject, ... (RFC 5280 section 4.1)
    members = list(_der_children(der, start, end))
    first = 1 if members and members[0][0] == 0xA0 else 0
    tag, _, start, end = members[first + 4]
    if tag != _SEQUENCE:
        raise ValueError("the subject is not a SEQUENCE")
    rdns = []
    for tag, _, set_start, set_end in _der_children(der, start, end):
        if tag != _SET:
            raise ValueError("an RDN is not a SET")
        rdn = []
        for tag, _, ava_start, ava_end in _der_children(der, set_start, set_end):
            parts = list(_der_children(der, ava_start, ava_end))
            if tag != _SEQUENCE or len(parts) != 2 or parts[0][0] != _OID:
                raise ValueError("an attribute is not SEQUENCE { OID, value }")
            (_, _, oid_start, oid_end), (_, value_at, _, value_end) = parts
            rdn.append((_oid_text(der[oid_start:oid_end]), der[value_at:value_end]))
        if not rdn:
            raise ValueError("an RDN is empty")
        rdns.append(rdn)
    return rdns


def _der_element(der: bytes, at: int, end: int) -> tuple[int, int, int]:
    """(tag, contents start, contents end) of the DER element at ``at``."""
    if at + 2 > end:
        raise ValueError("truncated")
    tag, length = der[at], der[at + 1]
    if tag & 0x1F == 0x1F:
        raise ValueError("multi-byte tags do not occur in certificates")
    start = at + 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or start + count > end:
            raise ValueError("bad length")
        length = int.from_bytes(der[start:start + count], "big")
        start += count
    if start + length > end:
        raise ValueError("truncated")
    return tag, start, start + length


def _der_children(der: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(tag, element start, contents start, contents end) of each element."""
    at = start
    while at < end:
        tag, contents, after = _der_element(der, at, end)
        yield tag, at, contents, after
        at = after


def _oid_text(body: bytes) -> str:
    if not body or body[-1] & 0x80:
        raise ValueError("bad OID")
    arcs, value = [], 0
    for byte in body:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)  # X.690 8.19.4: the first two arcs share a number
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def _rfc2253_attribute(oid: str, tlv: bytes) -> str:
    # sun.security.x509.AVA.toRFC2253String, as X500Principal.getName() uses it.
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is None or tlv[0] not in _STRING_TAGS:
        return f"{keyword or oid}=#{tlv.hex()}"
    _, start, end = _der_element(tlv, 0, len(tlv))
    text = tlv[start:end].decode("utf-8", errors="replace")
    escaped = "".join("\\00" if c == "\0" else "\\" + c if c in _ESCAPED else c for c in text)
    # Then a backslash before each leading and trailing space or CR.
    size = len(escaped)
    lead = size - len(escaped.lstrip(" \r"))
    trail = 0 if lead == size else size - len(escaped.rstrip(" \r"))
    return f"{keyword}=" + "".join("\\" + c if i < lead or i >= size - trail else c
                                   for i, c in enumerate(escaped))


# ---------------------------------------------------------------------------
# ssl.principal.mapping.rules (SslPrincipalMapper, KIP-371)

class NoMatchingRule(ValueError):
    """No mapping rule applies to a distinguished name."""


# Kafka's grammar, kept as Kafka writes it: a rule is DEFAULT, or
# RULE:pattern/replacement/ with an optional L or U, where a backslash
# escapes any character (so "\/" is a slash in the pattern); the last
# alternative takes anything else, to be reported as invalid.
_RULE: Final = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)", re.ASCII)
_RULE_PARSER: Final = re.compile(_RULE, re.ASCII)


@dataclass(frozen=True, slots=True)
class _Rule:
    text: str  # as Kafka's Rule.toString prints it
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[str | int, ...]  # literal text and group numbers
    case: str  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java's String.replaceAll: every match, not only the full one.
        result = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(piece if isinstance(piece, str) else match.group(piece) or ""
                       for piece in self.replacement)


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: an ordered list of rules,
    each ``DEFAULT`` (the DN unchanged) or ``RULE:pattern/replacement/[L|U]``
    (when the Java regex matches the whole DN, every match is replaced as
    Java's ``String.replaceAll`` does, ``$1`` and ``${name}`` naming groups,
    then L lower-cases or U upper-cases the result)."""

    __slots__ = ("_rules",)

    def __init__(self, rules: tuple[_Rule, ...]) -> None:
        self._rules = rules

    @classmethod
    def parse(cls, rules: str) -> PrincipalMapper:
        """Parses the setting's value as Kafka splits it: comma-separated
        rules, white space around them ignored, empty ones skipped (patterns
        may contain commas). Raises ValueError naming the bad rule, also
        for an empty list, a pattern Python's re cannot compile, and a
        replacement that would fail on every match."""
        parsed = []
        for split in _RULE_SPLITTER.finditer(java_trim(rules)):
            text = split.group(1)
            match = _RULE_PARSER.match(text)
            assert match is not None  # the last alternative matches anything
            if match.end() != len(text):
                raise ValueError(f"Invalid rule: `{text}`, unmatched substring: "
                                 f"`{text[match.end():]}` (a rule is DEFAULT or "
                                 "RULE:pattern/replacement/ with an optional L or U)")
            if match.group(1) is not None:
                parsed.append(_Rule("DEFAULT", None, (), ""))
            elif match.group(2) is not None:
                parsed.append(_compile_rule(text, match.group(2), match.group(3), match.group(4)))
        if not parsed:
            raise ValueError("no rules: every TLS client with a certificate would be refused "
                             "(the default is DEFAULT)")
        return cls(tuple(parsed))

    def name(self, distinguished_name: str) -> str:
        """The principal name the first applicable rule gives. Raises
        NoMatchingRule when none applies."""
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules "
                             f"[{', '.join(r.text for r in self._rules)}]")

    def __repr__(self) -> str:
        return f"PrincipalMapper(rules=[{', '.join(r.text for r in self._rules)}])"


def _compile_rule(text: str, pattern: str, replacement: str, case: str) -> _Rule:
    try:
        with warnings.catch_warnings():
            # Python warns where Java's syntax means something else (nested
            # classes, && in a class); those patterns are refused.
            warnings.simplefilter("error", FutureWarning)
            compiled = re.compile(_python_regex(pattern), re.ASCII)
    except (re.error, FutureWarning, ValueError) as e:
        raise ValueError(f"Invalid rule: `{text}`: the pattern {pattern!r} is not a regular "
                         f"expression Python can use: {e}") from None
    try:
        pieces = _parse_replacement(replacement, compiled)
    except ValueError as e:
        raise ValueError(f"Invalid rule: `{text}`: in the replacement {replacement!r}, "
                         f"{e}") from None
    shown = f"RULE:{pattern}/{replacement}" + (f"/{case}" if case else "")
    return _Rule(shown, compiled, pieces, case)


def _python_regex(pattern: str) -> str:
    """Java regex syntax that Python spells differently: named groups
    ``(?<name>`` and ``\\k<name>``, ``\\Q...\\E`` quoting, ``\\z`` and ``\\Z``.
    The rest is the same or refused by re.compile. Flags follow Java's
    defaults: \\w, \\d, \\s and (?i) are ASCII-only (re.ASCII)."""
    out = []
    at, in_class = 0, False
    while at < len(pattern):
        c = pattern[at]
        if c == "\\" and at + 1 < len(pattern):
            escape = pattern[at + 1]
            if escape == "Q":
                close = pattern.find("\\E", at + 2)
                close = len(pattern) if close < 0 else close
                out.append(re.escape(pattern[at + 2:close]))
                at = close + 2
                continue
            if escape == "k" and not in_class and pattern.startswith("<", at + 2):
                close = pattern.find(">", at + 3)
                if close < 0:
                    raise ValueError("\\k<name> is not closed")
                out.append(f"(?P={pattern[at + 3:close]})")
                at = close + 1
                continue
            # Java's \z is Python's \Z; Java's \Z also allows a final newline.
            out.append({"z": "\\Z", "Z": "(?=\\n?\\Z)"}.get(escape, c + escape)
                       if not in_class else c + escape)
            at += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # A "]" straight after "[" or "[^" is a literal in both syntaxes.
            opening = "[^" if pattern.startswith("[^", at) else "["
            if pattern.startswith("]", at + len(opening)):
                opening += "]"
            out.append(opening)
            at += len(opening)
            continue
        elif pattern.startswith("(?<", at) and pattern[at + 3:at + 4].isalpha():
            out.append("(?P<")
            at += 3
            continue
        out.append(c)
        at += 1
    return "".join(out)


def _parse_replacement(replacement: str, pattern: re.Pattern[str]) -> tuple[str | int, ...]:
    """Java's Matcher.appendReplacement syntax, with Kafka's change
    (SslPrincipalMapper.escapeLiteralBackReferences): ``$n`` whose first
    digit is not a group is a literal ``$`` (when the pattern has groups).
    ``$12`` is group 12 if the pattern has 12 groups, else group 1 then "2";
    ``${name}`` is a named group; a backslash makes the next character
    literal. Raises ValueError for what Java would throw on at every match."""
    groups = pattern.groups
    pieces: list[str | int] = []
    literal: list[str] = []

    def group(number: int) -> None:
        if literal:
            pieces.append("".join(literal))
            literal.clear()
        pieces.append(number)

    at = 0
    while at < len(replacement):
        c = replacement[at]
        if c == "\\":
            if at + 1 == len(replacement):
                raise ValueError("a backslash at the end escapes nothing")
            literal.append(replacement[at + 1])
            at += 2
        elif c != "$":
            literal.append(c)
            at += 1
        elif replacement.startswith("{", at + 1):
            name_end = at + 2
            while name_end < len(replacement) and replacement[name_end].isascii() \
                    and replacement[name_end].isalnum():
                name_end += 1
            name = replacement[at + 2:name_end]
            if not replacement.startswith("}", name_end) or not name or name[0].isdigit():
                raise ValueError("'${' must be followed by a group name and '}' "
                                 "(write \\$ for a $)")
            if name not in pattern.groupindex:
                raise ValueError(f"the pattern has no group named {name!r}")
            group(pattern.groupindex[name])
            at = name_end + 1
        elif at + 1 < len(replacement) and replacement[at + 1] in "0123456789":
            number = int(replacement[at + 1])
            if number > groups:
                if groups == 0:
                    raise ValueError(f"${number} refers to a group, but the pattern has none")
                literal.append("$")
                at += 1
                continue
            at += 2
            while (at < len(replacement) and replacement[at] in "0123456789"
                   and number * 10 + int(replacement[at]) <= groups):
                number = number * 10 + int(replacement[at])
                at += 1
            group(number)
        else:
            raise ValueError("'$' must be followed by a group number or {name} (write \\$ for a $)")
    if literal:
        pieces.append("".join(literal))
    return tuple(pieces)
