"""A KafkaProtocolServer on its own event loop thread, for sync test code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from raftlog.net import Handler, KafkaProtocolServer


@contextmanager
def live_server(handlers: Mapping[int, Handler], **options: Any) -> Iterator[KafkaProtocolServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = KafkaProtocolServer("127.0.0.1", 0, handlers, **options)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield server
    finally:

        async def stop() -> None:
            server.close()
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
