"""SASL/OAUTHBEARER (RFC 7628) as Kafka runs it: KIP-255, with SASL
extensions (KIP-342) and validation of signed JWTs against a JWKS (KIP-768).

The client sends one message, a GS2 header and its bearer token::

    n,[a=<authzid>],%x01auth=Bearer <token>%x01[<key>=<value>%x01]...%x01

and the server validates the token. A valid one completes the exchange with
an empty reply. An invalid one gets an RFC 7628 JSON error challenge
(``{"status":"invalid_token"}``); the client acknowledges it with a lone
%x01 and the server then fails the exchange, sending the JSON text as its
SaslAuthenticate error message (Kafka's OAuthBearerSaslServer and
OAuthBearerSaslClient).

Tokens are JWTs, made and checked by what Kafka ships:

- `UnsecuredLogin`: the default client token maker
  (OAuthBearerUnsecuredLoginCallbackHandler), an unsigned JWS built from
  JAAS options;
- `UnsecuredValidator`: the default broker validator
  (OAuthBearerUnsecuredValidatorCallbackHandler), for those tokens;
- `JwtValidator`: KIP-768's OAuthBearerValidatorCallbackHandler, a signed
  JWT checked against the identity provider's JWKS.

The modules, each importing only `_common` (and `exchange` the sasl module):

- `_common`: the mechanism's names, the errors, `BearerToken`, and the claim
  and SASL extension checks the others share;
- `unsecured`: `UnsecuredLogin` and `UnsecuredValidator`, with their JAAS
  options;
- `signed`: `JwkSet`, `JwtValidator` and the ``sasl.oauthbearer.*``
  settings (`JWT_VALIDATOR_SETTINGS`, `VALIDATOR_HANDLERS`);
- `exchange`: the server and client state machines (`oauthbearer_server`,
  `oauthbearer_client`) and the parsing of the client's initial response.

Import the names from this package; the submodules are its layout, not its
interface.

As in sasl.py, nothing here does I/O, reads a clock or keeps a global: the
shell fetches ``sasl.oauthbearer.jwks.endpoint.url`` (every ``refresh.ms``,
retrying with the backoff settings) and hands the document to
`JwkSet.parse`, and callers pass the time in.
"""

from __future__ import annotations

from raftlog.security.oauthbearer._common import (
    LOGIN_MODULE,
    OAUTHBEARER,
    BearerToken,
    OAuthBearerConfigError,
    TokenValidationError,
)
from raftlog.security.oauthbearer.exchange import oauthbearer_client, oauthbearer_server
from raftlog.security.oauthbearer.signed import (
    JWT_VALIDATOR_SETTINGS,
    VALIDATOR_HANDLERS,
    JwkSet,
    JwtValidator,
)
from raftlog.security.oauthbearer.unsecured import UnsecuredLogin, UnsecuredValidator

__all__ = (
    "JWT_VALIDATOR_SETTINGS",
    "LOGIN_MODULE",
    "OAUTHBEARER",
    "VALIDATOR_HANDLERS",
    "BearerToken",
    "JwkSet",
    "JwtValidator",
    "OAuthBearerConfigError",
    "TokenValidationError",
    "UnsecuredLogin",
    "UnsecuredValidator",
    "oauthbearer_client",
    "oauthbearer_server",
)
