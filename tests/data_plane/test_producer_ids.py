"""ProducerIdManager: concurrent InitProducerIds never share an id.

Regression (found by chaos run seed 7, `raftlog chaos run --nemesis
kill,pause,partition,clock,lost-writes --seed 7`): two InitProducerId
requests arriving before the broker had a block both waited on the same
AllocateProducerIds fetch and both installed its block, so both producers got
id 0; the second one's first batch was then taken for a duplicate of the
first's (same pid, epoch, sequence) and acknowledged at the first's offset
without being written: lost acknowledged writes, two values at one offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from types import SimpleNamespace
from typing import Any

from data_plane.broker.producer_ids import ProducerIdManager


class _Metadata:
    broker_id = 1
    broker_epoch = 5

    def __init__(self) -> None:
        self.next_start = 0
        self.calls = 0

    async def forward(self, api_key: int, request: Any) -> Any:
        self.calls += 1
        await asyncio.sleep(0.01)
        start, self.next_start = self.next_start, self.next_start + 10
        return SimpleNamespace(error_code=0, producer_id_start=start, producer_id_len=10)


def test_concurrent_generate_before_the_first_block_gives_unique_ids() -> None:
    async def main() -> list[int]:
        mgr = ProducerIdManager(_Metadata())  # type: ignore[arg-type]
        first = await asyncio.gather(*(mgr.generate() for _ in range(4)))
        more = [await mgr.generate() for _ in range(30)]  # across block boundaries
        await mgr.close()
        return [*first, *more]

    ids = asyncio.run(main())
    assert len(ids) == len(set(ids)), sorted(ids)


def test_concurrent_generate_at_a_block_boundary_gives_unique_ids() -> None:
    async def main() -> list[int]:
        mgr = ProducerIdManager(_Metadata())  # type: ignore[arg-type]
        ids = []
        for _ in range(5):
            ids += await asyncio.gather(*(mgr.generate() for _ in range(7)))
        await mgr.close()
        return ids

    ids = asyncio.run(main())
    assert len(ids) == len(set(ids)), sorted(ids)


class _ControlledMetadata:
    """AllocateProducerIds that the test answers, one call at a time."""

    broker_id = 1
    broker_epoch = 5

    def __init__(self, block_len: int = 10) -> None:
        self.block_len = block_len
        self.next_start = 0
        self.pending: list[asyncio.Future[None]] = []

    async def forward(self, api_key: int, request: Any) -> Any:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(gate)
        await gate
        start, self.next_start = self.next_start, self.next_start + self.block_len
        return SimpleNamespace(error_code=0, producer_id_start=start,
                               producer_id_len=self.block_len)


def test_a_cancelled_waiter_neither_orphans_the_fetch_nor_lets_a_block_be_reused() -> None:
    """Regression (chaos seed 2001: two producers with one producer id): a
    client disconnecting while its InitProducerId waited for the controller
    cleared the shared fetch, so the next request started a second one; a
    waiter of the older fetch that woke after the newer block was installed
    installed its block again and handed out its ids a second time."""

    async def main() -> list[int]:
        md = _ControlledMetadata(block_len=2)
        mgr = ProducerIdManager(md)  # type: ignore[arg-type]
        ids: list[int] = []
        a = asyncio.create_task(mgr.generate())
        b = asyncio.create_task(mgr.generate())
        await asyncio.sleep(0)
        a.cancel()  # its client went away
        await asyncio.sleep(0)
        c = asyncio.create_task(mgr.generate())  # a retry
        await asyncio.sleep(0)
        assert len(md.pending) == 1, "a cancelled waiter must not start a second fetch"
        md.pending[0].set_result(None)
        ids += await asyncio.gather(b, c)
        assert a.cancelled()
        # Exhaust blocks with waiters that wake together, cancelling some.
        for round_ in range(20):
            tasks = [asyncio.create_task(mgr.generate()) for _ in range(5)]
            for _ in range(3):
                await asyncio.sleep(0)
            tasks[round_ % 5].cancel()
            while not all(t.done() for t in tasks):
                for gate in md.pending:
                    if not gate.done():
                        gate.set_result(None)
                await asyncio.sleep(0)
            ids += [t.result() for t in tasks if not t.cancelled()]
        await mgr.close()
        return ids

    ids = asyncio.run(main())
    assert len(ids) == len(set(ids)), sorted(ids)


def test_seeded_concurrent_generate_with_cancellations_and_failures_never_repeats() -> None:
    class _Flaky:
        broker_id = 1
        broker_epoch = 5

        def __init__(self, rnd: random.Random) -> None:
            self.rnd = rnd
            self.next_start = 0

        async def forward(self, api_key: int, request: Any) -> Any:
            for _ in range(self.rnd.randrange(20)):
                await asyncio.sleep(0)
            if self.rnd.random() < 0.15:
                raise ConnectionError("controller unreachable")
            if self.rnd.random() < 0.1:
                return SimpleNamespace(error_code=41)  # NOT_CONTROLLER
            start, self.next_start = self.next_start, self.next_start + 3
            for _ in range(self.rnd.randrange(20)):
                await asyncio.sleep(0)
            return SimpleNamespace(error_code=0, producer_id_start=start, producer_id_len=3)

    async def run(seed: int) -> list[int]:
        rnd = random.Random(seed)
        mgr = ProducerIdManager(_Flaky(rnd))  # type: ignore[arg-type]
        ids: list[int] = []

        async def client() -> None:
            for _ in range(rnd.randrange(30)):
                await asyncio.sleep(0)
            task = asyncio.create_task(mgr.generate())
            if rnd.random() < 0.3:
                for _ in range(rnd.randrange(10)):
                    await asyncio.sleep(0)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                ids.append(await task)

        await asyncio.gather(*(client() for _ in range(150)))
        await mgr.close()
        return ids

    for seed in range(40):
        ids = asyncio.run(run(seed))
        assert len(ids) == len(set(ids)), (seed, sorted(ids))
