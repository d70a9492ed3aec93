"""The JWKS shell of KIP-768's validator (data_plane.oauth_jwks): a file:
JWKS read at start (start-up fails when it cannot be), an https-style one
fetched over HTTP (a loopback aiohttp server here) and retried when it
fails, periodic refresh, and the early refresh a token with an unknown key
id asks for."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from data_plane.oauth_jwks import JwksError, JwksSource
from raftlog.security.oauthbearer import JwtValidator, TokenValidationError


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwks(keys: dict[str, rsa.RSAPrivateKey]) -> str:
    out = []
    for kid, key in keys.items():
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        out.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
    return json.dumps({"keys": out})


def _token(key: rsa.RSAPrivateKey, kid: str) -> str:
    now = int(time.time())
    return jwt.encode({"sub": "alice", "iat": now, "exp": now + 300}, key, algorithm="RS256",
                      headers={"kid": kid})


def run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def test_a_file_jwks_is_read_at_start_and_checks_tokens(tmp_path: Path) -> None:
    k1 = _key()
    path = tmp_path / "jwks.json"
    path.write_text(_jwks({"k1": k1}))

    async def main() -> None:
        source = JwksSource(JwtValidator(jwks_url=path.as_uri()))
        await source.start()
        assert source.keys.key_ids == frozenset({"k1"}) and source.loads == 1
        assert source.validate(_token(k1, "k1")).principal == "alice"
        with pytest.raises(TokenValidationError):
            source.validate(_token(_key(), "k1"))  # another key under the same id

    run(main())


def test_an_unreadable_file_jwks_stops_start_up(tmp_path: Path) -> None:
    async def main() -> None:
        missing = JwksSource(JwtValidator(jwks_url=(tmp_path / "none.json").as_uri()))
        with pytest.raises(JwksError, match=r"sasl\.oauthbearer\.jwks\.endpoint\.url"):
            await missing.start()
        bad = tmp_path / "bad.json"
        bad.write_text("{not json")
        with pytest.raises(JwksError):
            await JwksSource(JwtValidator(jwks_url=bad.as_uri())).start()

    run(main())


def test_an_unknown_key_id_asks_for_an_early_refresh(tmp_path: Path) -> None:
    k1, k2 = _key(), _key()
    path = tmp_path / "jwks.json"
    path.write_text(_jwks({"k1": k1}))

    async def main() -> None:
        # refresh.ms of an hour: only the early refresh can bring k2 in.
        source = JwksSource(JwtValidator(jwks_url=path.as_uri(), retry_backoff_ms=50))
        await source.start()
        runner = asyncio.create_task(source.run())
        try:
            path.write_text(_jwks({"k1": k1, "k2": k2}))
            with pytest.raises(TokenValidationError):
                source.validate(_token(k2, "k2"))  # refused now, and asks for the keys
            for _ in range(100):
                if "k2" in source.keys.key_ids:
                    break
                await asyncio.sleep(0.02)
            assert source.validate(_token(k2, "k2")).principal == "alice"
        finally:
            runner.cancel()

    run(main())


def test_an_http_jwks_is_fetched_and_retried_until_it_answers() -> None:
    k1 = _key()
    state: dict[str, Any] = {"status": 503, "hits": 0}

    async def serve(request: web.Request) -> web.Response:
        state["hits"] += 1
        if state["status"] != 200:
            return web.Response(status=state["status"])
        return web.Response(text=_jwks({"k1": k1}), content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/jwks", serve)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            source = JwksSource(JwtValidator(jwks_url=f"http://127.0.0.1:{port}/jwks",
                                             retry_backoff_ms=20, retry_backoff_max_ms=40))
            await source.start()  # an HTTP JWKS that fails does not stop start-up
            assert source.loads == 0 and source.keys.key_ids == frozenset()
            with pytest.raises(TokenValidationError):
                source.validate(_token(k1, "k1"))
            task = asyncio.create_task(source.run())
            await asyncio.sleep(0.15)
            assert state["hits"] >= 3  # retried with backoff
            state["status"] = 200
            for _ in range(100):
                if source.loads:
                    break
                await asyncio.sleep(0.02)
            assert source.validate(_token(k1, "k1")).principal == "alice"
            task.cancel()
        finally:
            await runner.cleanup()

    run(main())
