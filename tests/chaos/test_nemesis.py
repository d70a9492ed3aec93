from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from chaos.nemesis import grudges as g
from chaos.nemesis import netns, process
from chaos.nemesis.core import ClusterState, PartitionNemesis, ProcessNemesis, resolve_grudge
from chaos.nemesis.grudges import Link
from chaos.nemesis.proxy import LinkProxy, ProxyNet
from data_plane.local_cluster import process_state

NODES = ["n1", "n2", "n3", "n4", "n5"]


# --- grudges -------------------------------------------------------------------


def test_halves_and_isolate_are_symmetric_cuts() -> None:
    gr = g.halves(NODES, random.Random(1))
    sides = {frozenset(NODES) - v for v in gr.values()}
    assert sorted(len(s) for s in sides) == [2, 3]
    for a, b in g.links(gr):
        assert (b, a) in g.links(gr)
    iso = g.isolate("n2", NODES)
    assert iso["n2"] == frozenset({"n1", "n3", "n4", "n5"}) and iso["n1"] == {"n2"}


def test_majority_ring_every_node_sees_a_distinct_majority() -> None:
    gr = g.majority_ring(NODES, random.Random(2))
    views = {n: frozenset(NODES) - gr[n] for n in NODES}
    assert all(len(v) == 3 and n in v for n, v in views.items())
    assert len(set(views.values())) == 5


def test_bridge_and_one_way() -> None:
    gr = g.bridge(NODES, random.Random(3))
    (bridge_node,) = [n for n in NODES if not gr[n] and all(g.can_reach(gr, n, m) for m in NODES)]
    others = [n for n in NODES if n != bridge_node]
    assert any(not g.can_reach(gr, a, b) for a in others for b in others)
    ow = g.one_way("n1", "n2")
    assert g.links(ow) == {("n1", "n2")}
    assert g.can_reach(ow, "n2", "n1") and not g.can_reach(ow, "n1", "n2")


def test_isolate_leader_resolved_at_invoke_time() -> None:
    state = ClusterState(tuple(NODES), leader="n4", controller="n1")
    assert resolve_grudge("isolate-leader", state, random.Random(0))["n4"] == frozenset(NODES) - {
        "n4"
    }
    assert resolve_grudge("isolate-controller", state, random.Random(0))["n1"] == frozenset(
        NODES
    ) - {"n1"}


# --- per-link proxy ----------------------------------------------------------------


async def start_echo() -> tuple[asyncio.base_events.Server, int, list[bytes]]:
    received: list[bytes] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(1024):
            received.append(data)
            w.write(data)
            await w.drain()
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], received


async def roundtrip(port: int, msg: bytes, timeout: float = 0.3) -> bytes | None:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(msg)
        await w.drain()
        return await asyncio.wait_for(r.readexactly(len(msg)), timeout)
    except TimeoutError:
        return None
    finally:
        w.close()


def test_proxy_cut_heal_and_one_way() -> None:
    async def main() -> None:
        server, port, received = await start_echo()
        proxy = LinkProxy("127.0.0.1", port)
        pport = await proxy.start()
        assert await roundtrip(pport, b"hello") == b"hello"

        # both ways: nothing reaches the server
        proxy.cut()
        n = len(received)
        assert await roundtrip(pport, b"lost?") is None
        assert len(received) == n

        # stalled bytes flow after heal on a live connection (TCP semantics)
        r, w = await asyncio.open_connection("127.0.0.1", pport)
        w.write(b"held")
        await w.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.readexactly(4), 0.2)
        proxy.heal()
        assert await asyncio.wait_for(r.readexactly(4), 2) == b"held"
        w.close()

        # one-way: requests arrive, replies are held
        proxy.heal()
        proxy.cut(forward=False, backward=True)
        n = len(received)
        assert await roundtrip(pport, b"oneway") is None
        await asyncio.sleep(0.05)
        assert b"".join(received[n:]) == b"oneway"

        # reset mode: open connections are closed, new ones closed on accept
        proxy.heal()
        r, w = await asyncio.open_connection("127.0.0.1", pport)
        w.write(b"1")
        assert await asyncio.wait_for(r.readexactly(1), 2) == b"1"  # connection is live
        proxy.cut(reset=True)
        assert await asyncio.wait_for(r.read(10), 2) == b""
        w.close()
        proxy.heal()
        assert await roundtrip(pport, b"back") == b"back"
        await proxy.close()
        server.close()

    asyncio.run(main())


def test_proxynet_applies_a_grudge_per_direction() -> None:
    async def main() -> None:
        servers, addrs = [], {}
        for n in ("a", "b", "c"):
            s, port, _ = await start_echo()
            servers.append(s)
            addrs[n] = ("127.0.0.1", port)
        net = ProxyNet(addrs)
        await net.setup()
        assert len(net.proxies) == 6

        async def ok(src: str, dst: str) -> bool:
            return await roundtrip(net.address(src, dst)[1], b"x", 0.2) == b"x"

        await net.cut(g.links(g.isolate("a", ["a", "b", "c"])))
        assert not await ok("a", "b") and not await ok("b", "a") and await ok("b", "c")
        await net.cut(g.links(g.one_way("a", "b")))  # b drops a: a's requests to b stall
        assert not await ok("a", "b") and await ok("a", "c")
        await net.heal()
        assert all([await ok(x, y) for x, y in net.proxies])
        await net.teardown()
        for s in servers:
            s.close()

    asyncio.run(main())


# --- namespaces + nftables -----------------------------------------------------

TCP_SERVER = (
    "import socket;s=socket.socket();s.bind(('0.0.0.0',7000));s.listen(8)\nwhile True: s.accept()"
)
TCP_CLIENT = (
    "import socket,sys;s=socket.socket();s.settimeout(0.5)\n"
    "try: s.connect((sys.argv[1],7000)); print('ok')\nexcept OSError as e: print('cut', e)"
)


def test_netns_nft_grudge_cuts_and_heals() -> None:
    """Node-to-node links cut and heal by nft; the root namespace (the runner
    and its clients) reaches every node through the host veth, also during
    a cut; teardown leaves no namespace, no host link and no process."""
    reason = netns.availability()
    if reason is not None:
        print(f"SKIP netns: {reason}")
        pytest.skip(reason)

    async def main() -> None:
        net = netns.NetnsNet(["a", "b"])
        await net.setup()
        server = subprocess.Popen([*net.exec_prefix("b"), sys.executable, "-c", TCP_SERVER])
        try:

            def connect(src: str | None, dst: str) -> str:
                out = subprocess.run(
                    [
                        *(net.exec_prefix(src) if src else []),
                        sys.executable,
                        "-c",
                        TCP_CLIENT,
                        net.address(dst),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=10,
                )
                return out.stdout.strip()

            deadline = time.monotonic() + 5
            while connect("a", "b") != "ok":
                assert time.monotonic() < deadline, "server in namespace b never came up"
                time.sleep(0.05)
            assert connect(None, "b") == "ok"  # root namespace -> node, via the host veth
            await net.cut(g.links(g.one_way("a", "b")))
            assert "drop" in net.rules("b")
            assert connect("a", "b").startswith("cut")
            assert connect(None, "b") == "ok"  # clients are never partitioned
            await net.heal()
            assert connect("a", "b") == "ok"
        finally:
            await net.teardown()
            server.wait(timeout=5)  # teardown killed it: it was inside a namespace
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"{net.prefix}-" not in listed
        links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
        assert net.host_link not in links

    asyncio.run(main())


def test_netns_prefixes_are_unique_and_fit_interface_names() -> None:
    a, b = netns.default_prefix(), netns.default_prefix()
    assert a != b and a.startswith(netns.NS_PREFIX)
    net = netns.NetnsNet(["n1", "n2", "n3"])
    assert len(net.host_link) <= 15
    with pytest.raises(netns.NetnsError):
        net.address("n1")  # no subnet before setup


# --- process faults ---------------------------------------------------------------


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def test_pause_resume_kill_a_child_process() -> None:
    child = sleeper()
    try:
        for _ in range(20):  # pause and resume return only once /proc shows them
            process.pause(child.pid)
            assert process_state(child.pid) == "T"
            process.resume(child.pid)
            assert process_state(child.pid) not in ("T", None)  # R, S or D: running again
        process.kill(child.pid)
        assert child.wait(5) == -9
        process.kill(child.pid)  # idempotent on a dead (reaped) process
        process.resume(child.pid)
    finally:
        child.kill()
        child.wait()


def test_faketime_shifts_wall_clock_live_not_monotonic(tmp_path: Path) -> None:
    if process.find_libfaketime() is None:
        pytest.skip("libfaketime missing: apt-get install -y faketime")
    offset = tmp_path / "offset"
    env = {**os.environ, **process.faketime_env(offset)}
    prog = (
        "import time,sys\n"
        "a=time.time(); m=time.monotonic(); sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "print(time.time()-a, time.monotonic()-m)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", prog],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "ready"
    process.set_clock_offset(offset, 3600)
    out, _ = child.communicate("go\n", timeout=10)
    wall, mono = map(float, out.split())
    assert 3590 < wall < 3610  # skewed live through the timestamp file
    assert mono < 5  # monotonic untouched (FAKETIME_DONT_FAKE_MONOTONIC)


def test_disk_full_with_tmpfs_then_heal(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        process.mount_tmpfs(mnt, 1 << 20)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount tmpfs: {exc.stderr}")
    try:
        with pytest.raises(OSError) as err, open(mnt / "big", "wb") as f:
            for _ in range(64):
                f.write(b"x" * 65536)
                f.flush()
        assert err.value.errno == 28  # ENOSPC
        (mnt / "big").unlink()
        process.resize_tmpfs(mnt, 4 << 20)
        (mnt / "ok").write_bytes(b"x" * (2 << 20))
        # ballast variant: fill to ~0 free, writes fail, free heals
        (mnt / "ok").unlink()
        assert process.fill_disk(mnt, leave_bytes=0) > 3 << 20
        with pytest.raises(OSError), open(mnt / "more", "wb") as f:
            f.write(b"y" * 65536)
            f.flush()
        process.free_disk(mnt)
        (mnt / "more").write_bytes(b"y" * 65536)
    finally:
        process.umount(mnt)


# --- nemeses on fake backends -------------------------------------------------------


class RecordingNet:
    def __init__(self) -> None:
        self.cuts: list[frozenset[Link]] = []

    async def setup(self) -> None: ...
    async def cut(self, cut_links: frozenset[Link]) -> None:
        self.cuts.append(cut_links)

    async def heal(self) -> None:
        self.cuts.append(frozenset())

    async def teardown(self) -> None: ...


class FakeDB:
    def __init__(self, replicated: list[bool] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.replicated = replicated if replicated is not None else [True]
        self.dead: set[str] = set()
        self.hangs: set[str] = set()

    def fill_disk(self, n: str) -> int:
        self.calls.append(("fill", n))
        return 123

    def free_disk(self, n: str) -> None:
        self.calls.append(("free", n))

    def pid(self, n: str) -> int | None:
        return None if n in self.dead else 1

    async def kill_node(self, n: str) -> None:
        self.calls.append(("kill", n))

    async def stop_node(self, n: str) -> None:
        self.calls.append(("stop", n))
        if n in self.hangs:
            raise TimeoutError(f"{n} did not exit")

    async def start_node(
        self, n: str, extra_env: Mapping[str, str] | None = None, *, lose_unsynced: bool = False
    ) -> None:
        self.calls.append(("start-losing-unsynced" if lose_unsynced else "start", n))

    async def fully_replicated(self, topic: str) -> bool:
        return self.replicated.pop(0) if len(self.replicated) > 1 else self.replicated[0]

    async def pause_node(self, n: str) -> None:
        self.calls.append(("pause", n))

    async def resume_node(self, n: str) -> None:
        self.calls.append(("resume", n))


def test_nemeses_resolve_targets_and_heal() -> None:
    async def main() -> None:
        state = ClusterState(("n1", "n2", "n3"), leader="n2", controller="n3")
        net = RecordingNet()
        pn = PartitionNemesis(net, random.Random(0))
        out = await pn.invoke("start-partition", {"grudge": "isolate-leader"}, state)
        assert out["drops"]["n2"] == ["n1", "n3"]
        assert ("n1", "n2") in net.cuts[-1] and ("n2", "n1") in net.cuts[-1]
        assert await pn.invoke("stop-partition", None, state) == "healed"
        assert net.cuts[-1] == frozenset()

        db = FakeDB()
        proc = ProcessNemesis(db, random.Random(0))  # type: ignore[arg-type]
        assert await proc.invoke("start-kill", {"target": "leader"}, state) == {"nodes": ["n2"]}
        assert await proc.invoke("stop-kill", None, state) == {"nodes": ["n2"]}
        await proc.invoke("start-pause", {"target": "controller"}, state)
        await proc.teardown()  # teardown heals what is still broken
        assert db.calls == [("kill", "n2"), ("start", "n2"), ("pause", "n3"), ("resume", "n3")]

    asyncio.run(main())


def test_restart_is_a_graceful_stop_then_a_start_and_a_hang_is_reported() -> None:
    async def main() -> None:
        state = ClusterState(("n1", "n2", "n3"), leader="n2", controller="n3")
        db = FakeDB()
        proc = ProcessNemesis(db, random.Random(0))  # type: ignore[arg-type]
        assert await proc.invoke("start-restart", {"target": "leader"}, state) == {"nodes": ["n2"]}
        assert await proc.invoke("stop-restart", None, state) == {"nodes": ["n2"]}
        db.hangs.add("n3")
        out = await proc.invoke("start-restart", {"target": "controller"}, state)
        assert out == {"nodes": ["n3"], "hung": ["n3"]}
        await proc.teardown()
        assert db.calls == [("stop", "n2"), ("start", "n2"),
                            ("stop", "n3"), ("kill", "n3"), ("start", "n3")]

    asyncio.run(main())


def test_only_a_lost_writes_fault_loses_unsynced_data_and_only_when_fully_replicated() -> None:
    """A plain SIGKILL keeps the page cache; a lost-writes fault is a power
    cut, and it waits for full replication so it stays a single fault (found
    by the soak, seed 3006: kills that all lost page cache, one after
    another, left the last ISR member empty, KIP-966's double fault)."""

    async def main() -> None:
        state = ClusterState(("n1", "n2", "n3"), leader="n1", controller="n3")
        db = FakeDB(replicated=[False, False, True])
        proc = ProcessNemesis(db, random.Random(0), lossy_wait_s=5)  # type: ignore[arg-type]
        await proc.invoke("start-kill", {"target": "leader"}, state)
        await proc.invoke("stop-kill", None, state)
        assert await proc.invoke("start-lost-writes", {"target": "leader"}, state) == {
            "nodes": ["n1"]
        }  # after two polls saw under-replication
        await proc.invoke("stop-lost-writes", None, state)
        assert db.calls == [
            ("kill", "n1"),
            ("start", "n1"),
            ("kill", "n1"),
            ("start-losing-unsynced", "n1"),
        ]

        never = FakeDB(replicated=[False])
        proc = ProcessNemesis(never, random.Random(0), lossy_wait_s=0.6)  # type: ignore[arg-type]
        out = await proc.invoke("start-lost-writes", {"target": "leader"}, state)
        assert out["nodes"] == [] and "not fully replicated" in out["skipped"]
        assert never.calls == []

    asyncio.run(main())


def test_auto_mode_picks_netns_when_the_machine_allows_it_and_says_so() -> None:
    from chaos.db import pick_mode

    reason = netns.availability()
    mode, why = pick_mode("auto")
    print(mode, why)
    if reason is None:
        assert mode == "netns" and "namespace" in why
        assert pick_mode("netns")[0] == "netns"
    else:
        assert mode == "proxy" and reason in why
        with pytest.raises(RuntimeError, match="netns mode unavailable"):
            pick_mode("netns")
    assert pick_mode("proxy")[0] == "proxy"
    with pytest.raises(ValueError):
        pick_mode("docker")


def test_disk_full_fills_the_target_and_heal_frees_and_restarts_the_dead() -> None:
    from chaos.nemesis.core import DiskFullNemesis

    async def main() -> None:
        state = ClusterState(("n1", "n2", "n3"), leader="n2", controller="n3")
        db = FakeDB()
        disk = DiskFullNemesis(db, random.Random(0))  # type: ignore[arg-type]
        out = await disk.invoke("start-disk-full", {"target": "leader"}, state)
        assert out == {"nodes": ["n2"], "ballast_bytes": {"n2": 123}}
        db.dead.add("n2")  # it died of ENOSPC
        assert await disk.invoke("stop-disk-full", None, state) == {
            "nodes": ["n2"],
            "restarted": ["n2"],
        }
        assert db.calls == [("fill", "n2"), ("free", "n2"), ("start", "n2")]
        db.dead.clear()
        await disk.invoke("start-disk-full", {"target": "controller"}, state)
        await disk.teardown()  # heals; n3 survived, so no restart
        assert db.calls[3:] == [("fill", "n3"), ("free", "n3")]
        assert await disk.invoke("stop-disk-full", None, state) == {"nodes": [], "restarted": []}

    asyncio.run(main())


def test_umount_under_finds_a_leftover_tmpfs(tmp_path: Path) -> None:
    mnt = tmp_path / "cluster" / "node-1" / "data"
    mnt.mkdir(parents=True)
    try:
        process.mount_tmpfs(mnt, 1 << 20)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount tmpfs: {exc.stderr}")
    try:
        assert process.mounts_under(tmp_path / "cluster") == [str(mnt)]
    finally:
        assert process.umount_under(tmp_path / "cluster") == [str(mnt)]
    assert process.mounts_under(tmp_path) == []
