"""SCRAM messages (RFC 5802 section 7): parsing and formatting, no keys and no state.

Each parser takes one message's text (the caller decodes the UTF-8) and
returns a frozen dataclass, or raises `ScramFormatError` saying what is wrong.
They follow RFC 5802's grammar, with Kafka's choices where Kafka makes one
(``ScramMessages``):

- Extension names are one or more ASCII letters: Kafka's one extension,
  ``tokenauth`` (KIP-48 delegation tokens), is longer than the RFC's single
  ALPHA. Unknown extensions are parsed and kept; the caller decides.
- The reserved mandatory-extension attribute ``m=`` is refused, as RFC 5802
  section 5.1 requires (Kafka's parser skips it without a word).
- Channel binding (a ``p=`` GS2 flag) is refused: Kafka offers no
  SCRAM-*-PLUS mechanism.
- User names are any UTF-8 (RFC 5802's saslname), not only ASCII as Kafka's
  pattern has it; nonces are printable ASCII without ``,`` as both say.

Kafka rebuilds the AuthMessage from the fields it parsed; here it is made of
the messages as they were sent (RFC 5802 section 3). The two agree for every
message without extensions, which is what Kafka's clients send.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Final

__all__ = (
    "TOKEN_AUTH_EXTENSION",
    "ClientFinal",
    "ClientFirst",
    "ScramFormatError",
    "ServerFinal",
    "ServerFirst",
    "b64encode",
    "decode_saslname",
    "encode_saslname",
    "is_valid_nonce",
    "parse_client_final",
    "parse_client_first",
    "parse_server_final",
    "parse_server_first",
)

#: Kafka's SCRAM extension asking for delegation-token authentication
#: (``ScramLoginModule.TOKEN_AUTH_CONFIG``).
TOKEN_AUTH_EXTENSION: Final = "tokenauth"

# RFC 5802 section 7: printable = %x21-2B / %x2D-7E (no ","), base64 with
# padding, value = any UTF-8 but NUL and ",".
_PRINTABLE: Final = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_BASE64: Final = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_EXTENSION_NAME: Final = re.compile(r"[A-Za-z]+")
_VALUE: Final = re.compile(r"[^\x00,]+")
_ITERATIONS: Final = re.compile(r"[0-9]{1,10}")
_INT32_MAX: Final = 2**31 - 1

Extensions = tuple[tuple[str, str], ...]


class ScramFormatError(ValueError):
    """A SCRAM message does not follow the grammar; the text says where."""


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """``gs2-header client-first-message-bare``."""

    gs2_header: str  # as sent, e.g. "n,," or "n,a=alice,"; what c= must carry
    authzid: str  # decoded; "" when the header names none
    username: str  # decoded from the saslname
    nonce: str
    extensions: Extensions
    bare: str  # client-first-message-bare exactly as sent (part of the AuthMessage)

    @property
    def token_authenticated(self) -> bool:
        """Whether the client asks for delegation-token authentication
        (Kafka's ``ScramExtensions.tokenAuthenticated``: ``tokenauth`` is
        "true" in any case). Any such extension counts, not only the last."""
        return any(name == TOKEN_AUTH_EXTENSION and value.lower() == "true"
                   for name, value in self.extensions)


@dataclass(frozen=True, slots=True)
class ServerFirst:
    """``r=<client nonce + server nonce>,s=<salt>,i=<iterations>``."""

    nonce: str
    salt: bytes
    iterations: int

    def text(self) -> str:
        return f"r={self.nonce},s={b64encode(self.salt)},i={self.iterations}"


@dataclass(frozen=True, slots=True)
class ClientFinal:
    """``c=<channel binding>,r=<nonce>[,extensions],p=<proof>``."""

    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # everything before ",p=", as sent (part of the AuthMessage)


@dataclass(frozen=True, slots=True)
class ServerFinal:
    """``v=<server signature>`` or ``e=<error>``: exactly one is set."""

    signature: bytes | None
    error: str | None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def is_valid_nonce(nonce: str) -> bool:
    """Whether ``nonce`` is RFC 5802 ``printable``: non-empty, %x21-7E, no ``,``."""
    return _PRINTABLE.fullmatch(nonce) is not None


def encode_saslname(username: str) -> str:
    """RFC 5802 saslname: ``=`` as ``=3D``, then ``,`` as ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def decode_saslname(saslname: str) -> str:
    """The user name a saslname encodes. Raises ScramFormatError when it is
    empty, has a NUL or ``,``, or an ``=`` not starting ``=2C`` or ``=3D``."""
    if _VALUE.fullmatch(saslname) is None:
        raise ScramFormatError("a user name must be non-empty, without NUL or ','")
    parts = saslname.split("=")
    out = [parts[0]]
    for part in parts[1:]:
        if part.startswith("2C"):
            out.append("," + part[2:])
        elif part.startswith("3D"):
            out.append("=" + part[2:])
        else:
            raise ScramFormatError("'=' in a user name must start '=2C' or '=3D'")
    return "".join(out)


def parse_client_first(text: str) -> ClientFirst:
    """``gs2-cbind-flag "," [authzid] "," client-first-message-bare``."""
    flag, sep, rest = text.partition(",")
    if not sep:
        raise ScramFormatError("no GS2 header")
    if flag.startswith("p="):
        raise ScramFormatError("channel binding is not supported")
    if flag not in ("n", "y"):
        raise ScramFormatError(f"GS2 channel binding flag must be 'n' or 'y', not {flag!r}")
    authz_field, sep, bare = rest.partition(",")
    if not sep:
        raise ScramFormatError("GS2 header not terminated by ','")
    if authz_field == "":
        authzid = ""
    elif authz_field.startswith("a="):
        authzid = decode_saslname(authz_field[2:])
    else:
        raise ScramFormatError("GS2 authorization identity must start 'a='")
    attributes = bare.split(",")
    _refuse_mandatory_extension(attributes[0])
    if len(attributes) < 2:
        raise ScramFormatError("expected 'n=<user>,r=<nonce>'")
    username = decode_saslname(_attribute(attributes[0], "n"))
    nonce = _nonce(_attribute(attributes[1], "r"))
    return ClientFirst(
        gs2_header=f"{flag},{authz_field},", authzid=authzid, username=username,
        nonce=nonce, extensions=_extensions(attributes[2:]), bare=bare)


def parse_server_first(text: str) -> ServerFirst:
    """``r=<nonce>,s=<salt>,i=<iterations>[,extensions]``."""
    attributes = text.split(",")
    _refuse_mandatory_extension(attributes[0])
    if len(attributes) < 3:
        raise ScramFormatError("expected 'r=<nonce>,s=<salt>,i=<iterations>'")
    nonce = _nonce(_attribute(attributes[0], "r"))
    salt = _base64(_attribute(attributes[1], "s"), "salt")
    iterations = _attribute(attributes[2], "i")
    if _ITERATIONS.fullmatch(iterations) is None or not 0 < int(iterations) <= _INT32_MAX:
        raise ScramFormatError(f"invalid iteration count {iterations[:20]!r}")
    _extensions(attributes[3:])
    return ServerFirst(nonce=nonce, salt=salt, iterations=int(iterations))


def parse_client_final(text: str) -> ClientFinal:
    """``c=<channel binding>,r=<nonce>[,extensions],p=<proof>``."""
    attributes = text.split(",")
    if len(attributes) < 3:
        raise ScramFormatError("expected 'c=<binding>,r=<nonce>,p=<proof>'")
    channel_binding = _base64(_attribute(attributes[0], "c"), "channel binding")
    nonce = _nonce(_attribute(attributes[1], "r"))
    _extensions(attributes[2:-1])
    proof = _base64(_attribute(attributes[-1], "p"), "proof")
    without_proof = text[: len(text) - len(attributes[-1]) - 1]
    return ClientFinal(
        channel_binding=channel_binding, nonce=nonce, proof=proof, without_proof=without_proof)


def parse_server_final(text: str) -> ServerFinal:
    """``(e=<error> | v=<signature>)[,extensions]``."""
    attributes = text.split(",")
    _extensions(attributes[1:])
    first = attributes[0]
    if first.startswith("e="):
        error = first[2:]
        if _VALUE.fullmatch(error) is None:
            raise ScramFormatError("empty server error")
        return ServerFinal(signature=None, error=error)
    return ServerFinal(signature=_base64(_attribute(first, "v"), "server signature"), error=None)


def _attribute(field: str, name: str) -> str:
    """The value of ``name=value``; raises if ``field`` is another attribute."""
    if not field.startswith(name + "="):
        raise ScramFormatError(f"expected attribute '{name}=', got {field[:20]!r}")
    return field[len(name) + 1:]


def _refuse_mandatory_extension(field: str) -> None:
    if field.startswith("m="):
        raise ScramFormatError("mandatory extensions ('m=') are not supported")


def _nonce(value: str) -> str:
    if not is_valid_nonce(value):
        raise ScramFormatError("a nonce must be non-empty printable ASCII without ','")
    return value


def _base64(value: str, what: str) -> bytes:
    # The pattern admits only the base64 alphabet with its padding, so the
    # decoder cannot fail after it.
    if _BASE64.fullmatch(value) is None:
        raise ScramFormatError(f"{what} is not base64")
    return base64.b64decode(value)


def _extensions(fields: list[str]) -> Extensions:
    out = []
    for field in fields:
        name, sep, value = field.partition("=")
        if not sep or _EXTENSION_NAME.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            raise ScramFormatError(f"invalid extension {field[:20]!r}")
        out.append((name, value))
    return tuple(out)
