"""Per-link TCP proxies: partitions on loopback, without privileges.

Every directed link ``a -> b`` gets its own `LinkProxy`: node ``a`` is
configured to reach ``b`` at the proxy's port. The proxy can *stall* each
direction of its connections (a black hole: bytes are held, not discarded, so
the stream resumes intact at heal, like TCP retransmission after a real
partition) or *reset* them (close every connection and refuse new ones, like
an RST). chaos-infra.md: Toxiproxy is not installable here, so this is ours.

`ProxyNet` maps grudges (`chaos.nemesis.grudges`) onto the proxies: "``dst``
drops packets from ``src``" stalls the forward direction of proxy
``src -> dst`` and the backward direction of proxy ``dst -> src``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from chaos.nemesis.grudges import Link, Node


class LinkProxy:
    """One listening port forwarding to one target, with cut switches.

    ``forward`` is client -> target, ``backward`` is target -> client.
    Contract: after `cut`, no byte in a cut direction reaches the other side
    until `heal`; bytes held during the cut are delivered after `heal` (stall
    mode). In reset mode open connections are closed and new ones are closed
    on accept.
    """

    def __init__(
        self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1"
    ) -> None:
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._open = {"forward": asyncio.Event(), "backward": asyncio.Event()}
        for ev in self._open.values():
            ev.set()
        self._reset = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.listen_host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def cut(self, *, forward: bool = True, backward: bool = True, reset: bool = False) -> None:
        if forward:
            self._open["forward"].clear()
        if backward:
            self._open["backward"].clear()
        if reset:
            self._reset = True
            for w in list(self._writers):
                w.close()
            self._writers.clear()

    def heal(self) -> None:
        self._reset = False
        for ev in self._open.values():
            ev.set()

    @property
    def is_cut(self) -> bool:
        return self._reset or not all(ev.is_set() for ev in self._open.values())

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._reset:
            writer.close()
            return
        try:
            t_reader, t_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        # Cut while we were connecting: another task sets it during the await
        # (mypy's narrowing cannot see that).
        if self._reset:
            writer.close()  # type: ignore[unreachable]
            t_writer.close()
            return
        self._writers |= {writer, t_writer}
        pumps = [
            asyncio.ensure_future(self._pump(reader, t_writer, "forward")),
            asyncio.ensure_future(self._pump(t_reader, writer, "backward")),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in pumps:
                t.cancel()
                self._tasks.discard(t)
            for w in (writer, t_writer):
                self._writers.discard(w)
                w.close()

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: str
    ) -> None:
        gate = self._open[direction]
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                data = await src.read(65536)
                if not data:
                    return
                await gate.wait()  # stall: hold the bytes until heal
                if self._reset:
                    return
                dst.write(data)
                await dst.drain()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()


class ProxyNet:
    """A proxy per directed link between ``addresses`` (node -> (host, port)).

    Implements the `chaos.nemesis.core.NetBackend` protocol. After `setup`,
    `address(a, b)` is where node ``a`` must send to reach ``b``; the db layer
    writes these into each node's peer-address map.
    """

    def __init__(self, addresses: Mapping[Node, tuple[str, int]], *, reset: bool = False) -> None:
        self.addresses = dict(addresses)
        self.reset = reset
        self.proxies: dict[Link, LinkProxy] = {}

    async def setup(self) -> None:
        for a in self.addresses:
            for b, (host, port) in self.addresses.items():
                if a != b:
                    p = LinkProxy(host, port)
                    await p.start()
                    self.proxies[(a, b)] = p

    def address(self, src: Node, dst: Node) -> tuple[str, int]:
        p = self.proxies[(src, dst)]
        return (p.listen_host, p.port)

    async def cut(self, cut_links: frozenset[Link]) -> None:
        """Make exactly ``cut_links`` dropped (heals everything else first)."""
        await self.heal()
        for src, dst in cut_links:
            # data src -> dst flows forward on proxy src->dst, backward on dst->src
            self.proxies[(src, dst)].cut(forward=True, backward=False, reset=self.reset)
            self.proxies[(dst, src)].cut(forward=False, backward=True, reset=self.reset)

    async def heal(self) -> None:
        for p in self.proxies.values():
            p.heal()

    async def teardown(self) -> None:
        for p in self.proxies.values():
            await p.close()
        self.proxies.clear()
