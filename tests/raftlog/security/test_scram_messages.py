"""SCRAM message parsing and saslname escaping (raftlog.security.scram_messages)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.security.scram_messages import (
    ClientFinal,
    ClientFirst,
    ScramFormatError,
    ServerFinal,
    ServerFirst,
    decode_saslname,
    encode_saslname,
    is_valid_nonce,
    parse_client_final,
    parse_client_first,
    parse_server_final,
    parse_server_first,
)

USER_NAMES = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1)


@pytest.mark.parametrize("username, saslname", [
    ("alice", "alice"),
    ("a,b", "a=2Cb"),
    ("a=b", "a=3Db"),
    ("=,", "=3D=2C"),
    ("=2C", "=3D2C"),
    ("ü", "ü"),
])
def test_saslname_escapes_comma_and_equals(username: str, saslname: str) -> None:
    assert encode_saslname(username) == saslname
    assert decode_saslname(saslname) == username


@given(USER_NAMES)
def test_saslname_round_trips_and_never_holds_a_comma(username: str) -> None:
    saslname = encode_saslname(username)
    assert "," not in saslname
    assert decode_saslname(saslname) == username


@pytest.mark.parametrize("saslname", ["", "=", "a=", "a=2", "a=2c", "a=3d", "a=41", "a==3D",
                                      "a,b", "a\0b"])
def test_saslname_refuses_bad_escapes_and_characters(saslname: str) -> None:
    with pytest.raises(ScramFormatError):
        decode_saslname(saslname)


def test_parse_client_first_keeps_the_header_and_bare_message_as_sent() -> None:
    first = parse_client_first("n,a=a=2Cb,n=a=2Cb,r=fyko+d2lbbFgONRv9qkxdawL,foo=x=y,tokenauth=true")
    assert first == ClientFirst(
        gs2_header="n,a=a=2Cb,", authzid="a,b", username="a,b", nonce="fyko+d2lbbFgONRv9qkxdawL",
        extensions=(("foo", "x=y"), ("tokenauth", "true")),
        bare="n=a=2Cb,r=fyko+d2lbbFgONRv9qkxdawL,foo=x=y,tokenauth=true")
    assert first.token_authenticated


@pytest.mark.parametrize("extensions, token_authenticated", [
    ("", False), (",tokenauth=false", False), (",tokenauth=True", True),
    (",tokenauth=yes", False), (",tokenauths=true", False),
])
def test_token_authenticated_is_kafkas_parse_boolean(extensions: str, token_authenticated: bool) -> None:
    assert parse_client_first(f"y,,n=u,r=x{extensions}").token_authenticated is token_authenticated


@pytest.mark.parametrize("text", [
    "", "n", "n,", "n,,", "n,,n=u", "n,,r=x,n=u", "n,,n=u,r=", "n,,n=u,r=a\x7fb",
    "p=tls-unique,,n=u,r=x", "Y,,n=u,r=x", "n,a=,n=u,r=x", "n,z=u,n=u,r=x",
    "n,,m=x,n=u,r=x", "n,,n=u,r=x,", "n,,n=u,r=x,1=2", "n,,n=u,r=x,foo", "n,,n=u,r=x,foo=",
    "n,,n=u,r=x,foo=a\0b",
])
def test_parse_client_first_refuses(text: str) -> None:
    with pytest.raises(ScramFormatError):
        parse_client_first(text)


def test_parse_server_first() -> None:
    assert parse_server_first("r=abcdef,s=QUJD,i=4096,ext=1") == ServerFirst(
        nonce="abcdef", salt=b"ABC", iterations=4096)
    assert ServerFirst(nonce="abc", salt=b"ABC", iterations=4096).text() == "r=abc,s=QUJD,i=4096"


@pytest.mark.parametrize("text", [
    "r=abc,s=QUJD", "r=abc,s=QUJD,i=0", "r=abc,s=QUJD,i=-1", "r=abc,s=QUJD,i=4k",
    "r=abc,s=QUJD,i=2147483648", "r=abc,s=QUJD,i=" + "9" * 5000, "r=abc,s=QUJ,i=4096",
    "r=abc,s=QU D,i=4096", "s=QUJD,r=abc,i=4096", "m=1,r=abc,s=QUJD,i=4096", "r=,s=QUJD,i=1",
])
def test_parse_server_first_refuses(text: str) -> None:
    with pytest.raises(ScramFormatError):
        parse_server_first(text)


def test_parse_client_final_splits_off_the_proof() -> None:
    final = parse_client_final("c=biws,r=abc,ext=1,p=AAEC")
    assert final == ClientFinal(channel_binding=b"n,,", nonce="abc", proof=b"\x00\x01\x02",
                                without_proof="c=biws,r=abc,ext=1")


@pytest.mark.parametrize("text", [
    "c=biws,r=abc", "c=biws,p=AAEC", "r=abc,c=biws,p=AAEC", "c=biws,r=abc,p=AAE",
    "c=bi=s,r=abc,p=AAEC", "c=biws,r=abc,p=AAEC,x=1", "c=biws,r=a,b,p=AAEC",
])
def test_parse_client_final_refuses(text: str) -> None:
    with pytest.raises(ScramFormatError):
        parse_client_final(text)


def test_parse_server_final() -> None:
    assert parse_server_final("v=AAEC") == ServerFinal(signature=b"\0\1\2", error=None)
    assert parse_server_final("v=AAEC,ext=1") == ServerFinal(signature=b"\0\1\2", error=None)
    assert parse_server_final("e=invalid-proof") == ServerFinal(signature=None, error="invalid-proof")
    for text in ("", "v=AAE", "e=", "x=AAEC", "v=AAEC,", "e"):
        with pytest.raises(ScramFormatError):
            parse_server_final(text)


def test_nonce_is_printable_ascii_without_comma() -> None:
    assert is_valid_nonce("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert is_valid_nonce("!~")
    for bad in ("", "a,b", "a b", "a\x7f", "é", "a\n"):
        assert not is_valid_nonce(bad)
