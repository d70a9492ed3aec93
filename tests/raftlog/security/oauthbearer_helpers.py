"""Helpers shared by the SASL/OAUTHBEARER tests (test_oauthbearer_*.py):
the time they pass in, hand-made unsigned JWS tokens, and the errors a call
must raise (a whole exchange: `sasl_exchange.run`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping

import pytest

from raftlog.security.oauthbearer import OAuthBearerConfigError, TokenValidationError

NOW_MS = 1_700_000_000_000
ALICE = {"unsecuredLoginStringClaim_sub": "alice"}


def b64url(data: object) -> str:
    text = data if isinstance(data, str) else json.dumps(data)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def unsecured(claims: Mapping[str, object], *, header: object = None,
              signature: str = "") -> str:
    """A hand-made three-part JWS (unsigned unless ``signature``)."""
    return f"{b64url({'alg': 'none'} if header is None else header)}.{b64url(claims)}.{signature}"




def config_error(call: Callable[[], object]) -> OAuthBearerConfigError:
    with pytest.raises(OAuthBearerConfigError) as info:
        call()
    return info.value


def refused(call: Callable[[], object]) -> TokenValidationError:
    with pytest.raises(TokenValidationError) as info:
        call()
    return info.value
