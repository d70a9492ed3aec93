"""A scripted test context over ``GroupCoordinatorShard`` (importable harness, STYLE.md section 2)."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from typing import Any

from data_plane.groups.group import GroupState
from data_plane.groups.model import (
    CoordinatorResult,
    GroupConfig,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinProtocol,
    LeaveGroupRequest,
    LeavingMember,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from data_plane.groups.shard import GroupCoordinatorShard
from raftlog.net.errors import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return bytes(out + struct.pack(">i", -1))


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = bytearray(struct.pack(">hi", 0, len(parts)))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return bytes(out + struct.pack(">i", -1))


@dataclass
class Ctx:
    """Drives one shard; collects every reply by handle and every record."""

    config: GroupConfig = field(default_factory=lambda: GroupConfig(initial_rebalance_delay_ms=0))
    now_ms: int = 1_000_000
    seed: int = 1
    shard: GroupCoordinatorShard = field(init=False)
    replies: dict[Any, Any] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list)
    batches: list[CoordinatorResult] = field(default_factory=list)
    _next_handle: int = 0

    def __post_init__(self) -> None:
        self.shard = GroupCoordinatorShard(7, self.config, rng=random.Random(self.seed))

    def handle(self) -> int:
        self._next_handle += 1
        return self._next_handle

    def absorb(self, result: CoordinatorResult) -> CoordinatorResult:
        """Take a result as the broker would once its records are committed
        (this harness commits instantly): replies released, offsets readable."""
        if result.write_id is not None:
            self.shard.mark_committed(result.write_id)
        for r in result.replies:
            assert r.handle not in self.replies, f"handle {r.handle} answered twice"
            self.replies[r.handle] = r.response
        self.records.extend(result.records)
        self.batches.append(result)
        return result

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: tuple[JoinProtocol, ...] | None = None,
        topics: tuple[str, ...] = ("t",),
        require_known: bool = True,
        session_ms: int = SESSION_MS,
        protocol_type: str = "consumer",
        client_id: str = "client",
    ) -> int:
        h = self.handle()
        protos = protocols or (JoinProtocol("range", subscription(*topics)),)
        req = JoinGroupRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocols=protos,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=REBALANCE_MS,
            client_id=client_id,
            client_host="/127.0.0.1",
            require_known_member_id=require_known,
        )
        self.absorb(self.shard.handle_join_group(h, req, self.now_ms))
        return h

    def join_new(self, **kw: Any) -> tuple[str, int]:
        """KIP-394 two-step join: MEMBER_ID_REQUIRED, then join with the id."""
        first = self.join(**kw)
        member_id = self.replies[first].member_id
        return member_id, self.join(member_id, **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: tuple[tuple[str, bytes], ...] = (),
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> int:
        h = self.handle()
        req = SyncGroupRequest(group, generation, member_id, instance, assignments=assignments)
        self.absorb(self.shard.handle_sync_group(h, req, self.now_ms))
        return h

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> Any:
        h = self.handle()
        req = HeartbeatRequest(group, generation, member_id, instance)
        self.absorb(self.shard.handle_heartbeat(h, req, self.now_ms))
        return self.replies[h].error

    def leave(self, *members: LeavingMember, group: str = "g") -> Any:
        h = self.handle()
        self.absorb(
            self.shard.handle_leave_group(h, LeaveGroupRequest(group, members), self.now_ms)
        )
        return self.replies[h]

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        *,
        group: str = "g",
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str = "",
    ) -> Any:
        h = self.handle()
        parts = tuple(
            OffsetCommitPartition(t, p, o, 5, metadata) for (t, p), o in sorted(offsets.items())
        )
        req = OffsetCommitRequest(group, generation, member_id, parts, instance)
        self.absorb(self.shard.handle_offset_commit(h, req, self.now_ms))
        return self.replies[h]

    def advance(self, ms: int) -> CoordinatorResult:
        self.now_ms += ms
        return self.absorb(self.shard.tick(self.now_ms))

    def pending(self, h: int) -> bool:
        return h not in self.replies


def settle(ctx: Ctx, handles: dict[str, int], group_id: str = "g") -> int:
    """Rejoin members until the rebalance completes; returns the new generation."""
    group = ctx.shard.group(group_id)
    assert group is not None
    while group.state is GroupState.PREPARING_REBALANCE:
        for m in list(group.members.values()):
            if not m.is_awaiting_join:
                handles[m.member_id] = ctx.join(m.member_id, instance=m.group_instance_id)
    gens: set[int] = {ctx.replies[h].generation_id for h in handles.values()}
    assert len(gens) == 1, gens
    return gens.pop()


def stable_group(ctx: Ctx, n: int) -> tuple[list[str], int]:
    """n dynamic members, rebalance completed and synced; returns (member ids, generation)."""
    handles: dict[str, int] = {}
    for _ in range(n):
        mid, h = ctx.join_new()
        handles[mid] = h
    gen = settle(ctx, handles)
    ids = list(handles)
    group = ctx.shard.group("g")
    assert group is not None
    leader = group.leader_id
    syncs = [ctx.sync(m, gen, round_robin_assign(ids) if m == leader else ()) for m in ids]
    assert all(ctx.replies[s].error == ErrorCode.none for s in syncs)
    return ids, gen


def round_robin_assign(ids: list[str]) -> tuple[tuple[str, bytes], ...]:
    # Round-robin over 6 partitions of topic t: the client-side assignor.
    parts: dict[str, list[int]] = {m: [] for m in ids}
    for p in range(6):
        parts[ids[p % len(ids)]].append(p)
    return tuple((m, assignment({"t": ps})) for m, ps in parts.items())
