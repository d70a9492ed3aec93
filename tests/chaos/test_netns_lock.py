"""Two chaos runs setting up namespaces at once (two pytest workers, two
soaks) must not choose the same 10.77.<x>.0/24: each picks a /24 no route
covers yet, and the route appears only at the end of its set-up."""

from __future__ import annotations

import asyncio

import pytest

from chaos.nemesis import netns


def test_concurrent_setups_take_distinct_subnets() -> None:
    reason = netns.availability()
    if reason is not None:
        print(f"SKIP netns: {reason}")
        pytest.skip(reason)

    async def main() -> list[str]:
        # One process: all start from the same PID-derived octet, so without
        # the set-up lock they would all choose it.
        nets = [netns.NetnsNet(["a", "b"]) for _ in range(3)]
        try:
            await asyncio.gather(*(net.setup() for net in nets))
            return [net.host_address for net in nets]
        finally:
            for net in nets:
                await net.teardown()

    addresses = asyncio.run(main())
    assert len(set(addresses)) == 3, addresses
