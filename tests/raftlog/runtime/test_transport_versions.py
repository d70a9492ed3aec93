"""KafkaTransport picks the Fetch version its peer serves (KIP-1166).

A peer serving Fetch 17-18 gets v18 with the fetcher's high watermark; a
peer serving only v17 (a raftlog node from before KIP-1166) gets v17, which
it reads as "no HW sent", so the two generations still replicate."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    HIGH_WATERMARK_UNSUPPORTED,
    FetchRequest,
    FetchResponse,
)
from raftlog.net import KafkaProtocolServer, RequestContext
from raftlog.runtime import wire
from raftlog.runtime.transport import KafkaTransport


@pytest.mark.parametrize(("served", "sent"), [((17, 18), 18), ((17, 17), 17)])
def test_fetch_goes_at_the_highest_version_the_peer_serves(
    served: tuple[int, int], sent: int
) -> None:
    seen: list[tuple[int, FetchRequest]] = []

    async def fetch(context: RequestContext, body: Any) -> Any:
        _, request = wire.decode_request(body, local_id=1)
        assert isinstance(request, FetchRequest)
        seen.append((context.api_version, request))
        return wire.encode_response(
            FetchResponse(Errors.NONE, 4, 1, 40, 0), version=context.api_version)

    async def body() -> None:
        supported = dict(wire.SUPPORTED_VERSIONS)
        supported[wire.FETCH_KEY] = served
        handlers = dict.fromkeys(wire.API_KEYS, fetch)
        async with KafkaProtocolServer("127.0.0.1", 0, handlers, supported=supported) as server:
            transport = KafkaTransport(
                local_id=2, addresses={1: ("127.0.0.1", server.port)},
                request_timeout_ms=2000, fetch_max_wait_ms=0)
            try:
                for _ in range(2):  # the second rides the negotiated connection
                    answer = await transport.send(
                        1, FetchRequest(2, 4, 40, 4, 0, 1 << 20, high_watermark=35))
                    assert answer == FetchResponse(Errors.NONE, 4, 1, 40, 0)
            finally:
                await transport.close()

    asyncio.run(body())
    assert [version for version, _ in seen] == [sent, sent]
    want = 35 if sent == 18 else HIGH_WATERMARK_UNSUPPORTED
    assert [request.high_watermark for _, request in seen] == [want, want]
