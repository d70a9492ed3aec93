"""The JWKS a listener's KIP-768 OAUTHBEARER validator checks signatures
with (``sasl.oauthbearer.jwks.endpoint.url``), kept current while the node
runs: the I/O shell around `raftlog.security.oauthbearer.JwtValidator`.

- ``file:`` URLs are read at start-up; a file that cannot be read or parsed
  fails start-up, naming the setting. ``http:`` and ``https:`` URLs are
  fetched at start-up too; if that fails the node still starts (tokens are
  refused until keys arrive) and retries with
  ``sasl.oauthbearer.jwks.endpoint.retry.backoff.ms``, doubling up to
  ``...retry.backoff.max.ms``.
- Every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` the document is read
  again (files too, so rotated keys are picked up). A token naming a key id
  the set lacks asks for an early refresh, at most once per retry backoff:
  an identity provider that rotates keys publishes the new one before it
  signs with it. The token itself is refused (the SASL exchange cannot wait
  for the network); the client's next login succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import jwt

from raftlog.security.oauthbearer import (
    BearerToken,
    JwkSet,
    JwtValidator,
    TokenValidationError,
)

__all__ = ("JwksError", "JwksSource")

log = logging.getLogger(__name__)

_SETTING = "sasl.oauthbearer.jwks.endpoint.url"


class JwksError(Exception):
    """The JWKS could not be read or parsed (str: why)."""


class JwksSource:
    """One validator's keys: `start` loads them, `run` keeps them current,
    `validate` checks a token with the keys held now."""

    def __init__(self, validator: JwtValidator, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.validator = validator
        self._keys = JwkSet.parse(b'{"keys": []}')
        self._clock = clock
        self._wake = asyncio.Event()
        self._last_early_refresh = float("-inf")
        self.loads = 0  # successful loads (a metric for tests and logs)

    @property
    def keys(self) -> JwkSet:
        return self._keys

    async def start(self) -> None:
        """The first load. Raises JwksError for a ``file:`` URL that fails;
        an HTTP one that fails is logged and retried by `run`."""
        try:
            await self.refresh()
        except JwksError:
            if _scheme(self.validator.jwks_url) == "file":
                raise
            log.error("%s %s: no keys yet; retrying", _SETTING, self.validator.jwks_url,
                      exc_info=True)

    async def refresh(self) -> None:
        """Read and parse the document now. Raises JwksError."""
        url = self.validator.jwks_url
        try:
            if _scheme(url) == "file":
                document = await asyncio.to_thread(_read_file, url)
            else:
                document = await _fetch(url)
            keys = JwkSet.parse(document)
        except (TimeoutError, OSError, ValueError) as exc:
            raise JwksError(f"{_SETTING} {url}: {exc}") from exc
        if keys.key_ids != self._keys.key_ids:
            log.info("%s %s: %d keys (%s)", _SETTING, url, len(keys.key_ids),
                     ", ".join(sorted(keys.key_ids)) or "none with an id")
        self._keys = keys
        self.loads += 1

    async def run(self) -> None:
        """Refresh every refresh.ms, early when asked, with backoff on failure."""
        backoff_ms = self.validator.retry_backoff_ms
        ok = self.loads > 0
        while True:
            wait_ms = self.validator.refresh_ms if ok else backoff_ms
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_ms / 1000)
            self._wake.clear()  # after the wait: a request made before it counts
            try:
                await self.refresh()
            except JwksError as exc:
                ok = False
                log.warning("%s; retrying in %d ms", exc, backoff_ms)
                backoff_ms = min(backoff_ms * 2, self.validator.retry_backoff_max_ms)
                continue
            ok = True
            backoff_ms = self.validator.retry_backoff_ms

    def validate(self, token: str) -> BearerToken:
        """Check ``token`` with the keys held now. Raises TokenValidationError;
        a key id the set lacks also asks `run` for an early refresh."""
        try:
            return self.validator.validate(token, self._keys, self._clock())
        except TokenValidationError:
            if self._unknown_key(token):
                self._refresh_early()
            raise

    def _unknown_key(self, token: str) -> bool:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            return False
        return isinstance(kid, str) and kid not in self._keys.key_ids

    def _refresh_early(self) -> None:
        now = time.monotonic()
        if (now - self._last_early_refresh) * 1000 >= self.validator.retry_backoff_ms:
            self._last_early_refresh = now
            self._wake.set()


def _scheme(url: str) -> str:
    return urllib.parse.urlsplit(url).scheme.lower()


def _read_file(url: str) -> bytes:
    parts = urllib.parse.urlsplit(url)
    return Path(urllib.parse.unquote(parts.path)).read_bytes()


async def _fetch(url: str) -> bytes:
    """GET ``url``. Raises OSError (aiohttp's client errors too), TimeoutError
    or ValueError (not 200)."""
    # Imported here: aiohttp is a fifth of every CLI call's start-up, and
    # only a node with a JWKS URL over HTTP fetches one.
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=10)
    try:
        async with (aiohttp.ClientSession(timeout=timeout) as session,
                    session.get(url) as response):
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            return await response.read()
    except aiohttp.ClientError as exc:
        raise OSError(str(exc) or type(exc).__name__) from exc
