"""Helpers shared by the SASL/OAUTHBEARER tests (test_oauthbearer_*.py):
the time they pass in, hand-made unsigned JWS tokens, a whole exchange as a
shell runs it, and the errors a call must raise."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping

import pytest

from raftlog.security.oauthbearer import OAuthBearerConfigError, TokenValidationError
from raftlog.security.sasl import SaslClient, SaslServer

NOW_MS = 1_700_000_000_000
ALICE = {"unsecuredLoginStringClaim_sub": "alice"}


def b64url(data: object) -> str:
    text = data if isinstance(data, str) else json.dumps(data)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def unsecured(claims: Mapping[str, object], *, header: object = None,
              signature: str = "") -> str:
    """A hand-made three-part JWS (unsigned unless ``signature``)."""
    return f"{b64url({'alg': 'none'} if header is None else header)}.{b64url(claims)}.{signature}"


def run(client: SaslClient, server: SaslServer) -> list[bytes]:
    """The whole exchange, as a shell runs it; returns every token in order."""
    transcript = []
    token = client.initial()
    while not client.complete:
        transcript.append(token)
        reply = server.evaluate(token)
        transcript.append(reply)
        token = client.evaluate(reply)
    return transcript


def config_error(call: Callable[[], object]) -> OAuthBearerConfigError:
    with pytest.raises(OAuthBearerConfigError) as info:
        call()
    return info.value


def refused(call: Callable[[], object]) -> TokenValidationError:
    with pytest.raises(TokenValidationError) as info:
        call()
    return info.value
