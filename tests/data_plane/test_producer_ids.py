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
