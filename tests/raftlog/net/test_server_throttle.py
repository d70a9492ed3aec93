"""KIP-219 connection muting in `KafkaProtocolServer`, over loopback: a
throttled answer (`EncodedBody.throttle_ms`, `NoResponse`) stops the server
reading the connection until the throttle time has passed.

Timing assertions are lower bounds only ("not before the mute ended"), which
a loaded machine cannot break; nothing asserts that something happens
quickly."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from net_messages import vote_request

from raftlog.net import EncodedBody, KafkaProtocolServer, NoResponse, RequestContext, codec

MUTE_MS = 300
VOTE = 52


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


class Peer:
    """A raw client: writes Vote requests, reads response frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> Peer:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, *correlation_ids: int) -> None:
        self.writer.write(b"".join(
            codec.encode_request(vote_request(2, candidate_epoch=cid), cid, "raw")
            for cid in correlation_ids))
        await self.writer.drain()

    async def read_correlation_id(self) -> int:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return codec.peek_correlation_id(await self.reader.readexactly(size))

    def close(self) -> None:
        self.writer.close()


Answer = Callable[[int], Awaitable[Any]]


def recording_handler(answer: Answer, called_at: dict[int, float]) -> Any:
    """A Vote handler noting when each correlation id was handled (loop
    time) and answering ``answer(correlation id)``."""

    async def handle(context: RequestContext, body: Any) -> Any:
        del body
        called_at[context.correlation_id] = asyncio.get_running_loop().time()
        return await answer(context.correlation_id)

    return handle


@contextlib.asynccontextmanager
async def serving(
    answer: Answer, **server_options: Any
) -> AsyncIterator[tuple[KafkaProtocolServer, Peer, dict[int, float]]]:
    """A server on loopback whose Vote handler answers ``answer``, a raw peer
    connected to it, and when each correlation id was handled (loop time)."""
    called_at: dict[int, float] = {}
    handlers = {VOTE: recording_handler(answer, called_at)}
    async with KafkaProtocolServer("127.0.0.1", 0, handlers, **server_options) as server:
        peer = await Peer.connect(server.port)
        try:
            yield server, peer, called_at
        finally:
            peer.close()


def test_a_request_sent_during_the_mute_is_read_only_after_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        returned_at: dict[int, float] = {}

        async def answer(cid: int) -> Any:
            returned_at[cid] = loop.time()
            return EncodedBody(b"", throttle_ms=MUTE_MS if cid == 0 else 0)

        async with serving(answer) as (_server, peer, called_at):
            await peer.send(0)
            assert await peer.read_correlation_id() == 0
            await peer.send(1)  # during the mute
            assert await peer.read_correlation_id() == 1
            assert called_at[1] >= returned_at[0] + MUTE_MS / 1000
            # Unmuted: the next request is read as usual (and not muted again).
            await peer.send(2)
            assert await peer.read_correlation_id() == 2

    run(main())


def test_the_throttled_answer_itself_is_sent_at_once() -> None:
    """KIP-219 (Produce v6+, Fetch v8+): the answer carries the throttle time
    and leaves at once; only the next requests wait."""

    async def main() -> None:
        async def answer(cid: int) -> Any:
            del cid
            return EncodedBody(b"", throttle_ms=60_000)

        async with serving(answer) as (server, peer, _called_at):
            await peer.send(0)
            assert await peer.read_correlation_id() == 0  # not a minute later
            (protocol,) = server._connections
            assert protocol._muted and protocol._read_paused

    run(main())


def test_delay_response_holds_the_throttled_answer_until_the_mute_ends() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        returned_at: dict[int, float] = {}

        async def answer(cid: int) -> Any:
            returned_at[cid] = loop.time()
            return EncodedBody(b"", throttle_ms=MUTE_MS if cid == 0 else 0,
                               delay_response=cid == 0)

        async with serving(answer) as (_server, peer, _called_at):
            await peer.send(0)
            assert await peer.read_correlation_id() == 0
            assert loop.time() >= returned_at[0] + MUTE_MS / 1000
            await peer.send(1)
            assert await peer.read_correlation_id() == 1

    run(main())


def test_no_response_with_a_throttle_mutes_without_answering() -> None:
    """An acks=0 produce over its quota: nothing to answer, only the mute."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        returned_at: dict[int, float] = {}
        muted = asyncio.Event()

        async def answer(cid: int) -> Any:
            if cid == 0:
                returned_at[0] = loop.time()
                muted.set()  # the server mutes before this task yields again
                return NoResponse(MUTE_MS)
            return EncodedBody(b"")

        async with serving(answer) as (_server, peer, called_at):
            await peer.send(0)
            await muted.wait()
            await peer.send(1)
            assert await peer.read_correlation_id() == 1  # none for 0
            assert called_at[1] >= returned_at[0] + MUTE_MS / 1000

    run(main())


def test_a_longer_mute_is_not_shortened_by_a_shorter_one() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        returned_at: dict[int, float] = {}

        async def answer(cid: int) -> Any:
            # Both handlers start before either mutes; 1 answers while 0's
            # mute runs.
            await asyncio.sleep({0: 0.01, 1: 0.05}.get(cid, 0))
            returned_at[cid] = loop.time()
            return EncodedBody(b"", throttle_ms={0: MUTE_MS, 1: 10}.get(cid, 0))

        async with serving(answer) as (_server, peer, called_at):
            await peer.send(0, 1)  # one chunk: both read before the mute
            assert await peer.read_correlation_id() == 0
            assert await peer.read_correlation_id() == 1
            await peer.send(2)
            assert await peer.read_correlation_id() == 2
            assert called_at[2] >= returned_at[0] + MUTE_MS / 1000

    run(main())


def test_requests_read_before_the_mute_wait_for_it_in_order() -> None:
    """A pipelined request already read when the mute begins is not handled
    until it ends (Kafka would not have read it yet); order is kept."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        returned_at: dict[int, float] = {}
        order: list[int] = []

        async def answer(cid: int) -> Any:
            order.append(cid)
            returned_at[cid] = loop.time()
            return EncodedBody(b"", throttle_ms=MUTE_MS if cid == 0 else 0)

        async with serving(answer) as (_server, peer, called_at):
            await peer.send(0, 1, 2, 3)  # one chunk: all read at once
            assert [await peer.read_correlation_id() for _ in range(4)] == [0, 1, 2, 3]
            assert order == [0, 1, 2, 3]
            assert min(called_at[c] for c in (1, 2, 3)) >= returned_at[0] + MUTE_MS / 1000

    run(main())


def test_the_end_of_a_mute_does_not_lift_the_in_flight_limit() -> None:
    """With max_in_flight_per_connection=1 and a second request pending when
    the mute ends, reading stays paused until that request is answered."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        release = asyncio.Event()

        async def answer(cid: int) -> Any:
            if cid == 0:
                return EncodedBody(b"", throttle_ms=50)
            if cid == 1:
                await release.wait()
            return EncodedBody(b"")

        async with serving(answer, max_in_flight_per_connection=1) as (server, peer, called_at):
            await peer.send(0, 1)  # one chunk: both read, then paused (2 >= 1)
            assert await peer.read_correlation_id() == 0
            await asyncio.sleep(0.2)  # past the 50 ms mute
            (protocol,) = server._connections
            assert not protocol._muted
            assert protocol._read_paused  # request 1 still holds the limit
            await peer.send(2)
            await asyncio.sleep(0.1)
            assert 2 not in called_at
            released_at = loop.time()
            release.set()
            assert await peer.read_correlation_id() == 1
            assert await peer.read_correlation_id() == 2
            assert called_at[2] >= released_at

    run(main())


def test_a_mute_and_write_backpressure_both_must_end_before_reading_resumes() -> None:
    async def main() -> None:
        async def answer(cid: int) -> Any:
            del cid
            return EncodedBody(b"")

        async with serving(answer) as (server, peer, _called_at):
            await peer.send(0)
            assert await peer.read_correlation_id() == 0
            (protocol,) = server._connections
            protocol.mute(50)
            protocol.pause_writing()  # as the transport would over its high-water mark
            assert protocol._read_paused
            await asyncio.sleep(0.2)  # the mute is over
            assert not protocol._muted and protocol._read_paused
            protocol.resume_writing()
            assert not protocol._read_paused
            # And the other way round: backpressure gone first, the mute holds.
            protocol.mute(10_000)
            protocol.pause_writing()
            protocol.resume_writing()
            assert protocol._read_paused

    run(main())


class FixedQuota:
    """A request quota (`RequestTimeQuota`) throttling every charged request
    ``throttle_ms``; ``backs_off``: whether its clients throttle themselves."""

    def __init__(self, throttle_ms: int, backs_off: bool) -> None:
        self.throttle_ms = throttle_ms
        self.backs_off = backs_off
        self.charged: list[int] = []

    @property
    def enabled(self) -> bool:
        return True

    def record(self, context: RequestContext, elapsed_ns: int) -> int:
        assert elapsed_ns > 0
        self.charged.append(context.correlation_id)
        return self.throttle_ms

    def client_throttles(self, api_key: int, api_version: int) -> bool:
        return self.backs_off


def test_a_request_over_its_time_quota_mutes_and_is_held_when_the_client_does_not_back_off(
) -> None:
    """KIP-124: the server charges a handler's loop time when the handler
    did not (`RequestClock.charged`), mutes the connection for the throttle
    time, and holds the answer as long for a client that does not back off
    by itself, also an answer the handler encoded itself."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        returned_at: dict[int, float] = {}

        async def answer(cid: int) -> Any:
            returned_at[cid] = loop.time()
            return EncodedBody(b"")

        for backs_off in (True, False):
            quota = FixedQuota(MUTE_MS, backs_off)
            async with serving(answer, request_quota=quota) as (_server, peer, called_at):
                await peer.send(0)
                assert await peer.read_correlation_id() == 0
                if not backs_off:
                    assert loop.time() >= returned_at[0] + MUTE_MS / 1000
                await peer.send(1)  # during the mute
                assert await peer.read_correlation_id() == 1
                assert called_at[1] >= returned_at[0] + MUTE_MS / 1000
                assert quota.charged == [0, 1]

    run(main())


def test_a_handler_that_charged_itself_is_not_charged_again() -> None:
    async def main() -> None:
        async def answer(cid: int) -> Any:
            del cid
            return EncodedBody(b"")

        quota = FixedQuota(60_000, False)
        called_at: dict[int, float] = {}
        handle = recording_handler(answer, called_at)

        async def charging(context: RequestContext, body: Any) -> Any:
            assert context.clock is not None
            context.clock.charged = True  # as Produce and Fetch do
            return await handle(context, body)

        async with KafkaProtocolServer("127.0.0.1", 0, {VOTE: charging},
                                       request_quota=quota) as server:
            peer = await Peer.connect(server.port)
            try:
                await peer.send(0)
                assert await peer.read_correlation_id() == 0  # not held a minute
                assert quota.charged == []
            finally:
                peer.close()

    run(main())
