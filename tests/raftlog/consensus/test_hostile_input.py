"""STYLE.md section 8, tier 1: bad or stale peer input never stops a node.

Hypothesis steps random, well-typed (they pass `__post_init__`) but hostile
messages into a core in every role: unknown or self-naming node ids,
offsets past the log, epochs from nowhere, DivergingEpochs below the
committed offset, snapshot chunks that do not fit, corrupt record batches,
responses echoing real or made-up correlation ids. Nothing may raise out of
`step`/`tick`/the Ready cycle, and the monotonic invariants must hold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from raftlog.consensus.errors import Errors
from raftlog.consensus.messages import (
    HIGH_WATERMARK_UNSUPPORTED,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Body,
    DescribeQuorumRequest,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.consensus.snapshot import SnapshotId
from raftlog.testing.context import RaftTestContext, leader_batch

NODE_IDS = st.sampled_from([1, 2, 3, 4, 9, 99])
HINT_IDS = st.sampled_from([-1, 1, 2, 3, 9, 99])
EPOCHS = st.integers(0, 6)
OFFSETS = st.integers(0, 40)
ERRORS = st.sampled_from(list(Errors))


def _records(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["none", "batch", "corrupt", "garbage"]))
    if kind == "none":
        return b""
    batch = leader_batch(draw(EPOCHS), *(b"v" for _ in range(draw(st.integers(1, 3)))),
                         base_offset=draw(OFFSETS))
    if kind == "batch":
        return batch
    if kind == "corrupt":
        data = bytearray(batch)
        data[draw(st.integers(0, len(data) - 1))] ^= 0xFF
        return bytes(data[:draw(st.integers(1, len(data)))])
    return draw(st.binary(min_size=1, max_size=80))


@st.composite
def bodies(draw: st.DrawFn) -> Body:
    kind = draw(st.integers(0, 11))
    snapshot = SnapshotId(draw(OFFSETS), draw(EPOCHS))
    try:
        match kind:
            case 0:
                return VoteRequest(draw(EPOCHS), draw(NODE_IDS), draw(EPOCHS), draw(OFFSETS),
                                   pre_vote=draw(st.booleans()))
            case 1:
                granted = draw(st.booleans())
                return VoteResponse(Errors.NONE if granted else draw(ERRORS), draw(EPOCHS),
                                    draw(HINT_IDS), granted)
            case 2:
                return BeginQuorumEpochRequest(draw(EPOCHS), draw(NODE_IDS))
            case 3:
                return BeginQuorumEpochResponse(draw(ERRORS), draw(EPOCHS), draw(HINT_IDS))
            case 4:
                successors = tuple(draw(st.lists(NODE_IDS, max_size=3, unique=True)))
                return EndQuorumEpochRequest(draw(EPOCHS), draw(NODE_IDS), successors)
            case 5:
                return EndQuorumEpochResponse(draw(ERRORS), draw(EPOCHS), draw(HINT_IDS))
            case 6:
                return FetchRequest(draw(st.sampled_from([-1, 1, 2, 3, 9])), draw(EPOCHS),
                                    draw(OFFSETS), draw(EPOCHS), draw(st.sampled_from([0, 50])),
                                    draw(st.sampled_from([1, 1 << 20])),
                                    # KIP-1166: none sent, unknown, or any claim at all
                                    high_watermark=draw(st.one_of(
                                        st.just(HIGH_WATERMARK_UNSUPPORTED),
                                        st.integers(-1, 60))))
            case 7:
                error = draw(st.sampled_from([Errors.NONE, Errors.NONE, draw(ERRORS)]))
                which = draw(st.integers(0, 2)) if error is Errors.NONE else -1
                return FetchResponse(
                    error, draw(EPOCHS), draw(HINT_IDS), draw(st.integers(-1, 60)),
                    draw(OFFSETS),
                    records=_records(draw) if which == 0 else b"",
                    diverging_epoch=(DivergingEpoch(draw(EPOCHS), draw(OFFSETS))
                                     if which == 1 else None),
                    snapshot_id=snapshot if which == 2 else None)
            case 8:
                return FetchSnapshotRequest(draw(st.sampled_from([-1, 1, 2, 3, 9])),
                                            draw(EPOCHS), snapshot, draw(OFFSETS),
                                            draw(st.integers(1, 100)))
            case 9:
                size = draw(st.integers(0, 50))
                position = draw(st.integers(0, size))
                chunk = draw(st.binary(max_size=size - position))
                return FetchSnapshotResponse(draw(st.sampled_from([Errors.NONE, draw(ERRORS)])),
                                             draw(EPOCHS), draw(HINT_IDS), snapshot, size,
                                             position, chunk)
            case 10:
                return DescribeQuorumRequest()
            case _:
                return FetchResponse(Errors.NONE, draw(EPOCHS), draw(HINT_IDS), -1, 0,
                                     records=_records(draw))
    except ValueError:
        assume(False)
        raise AssertionError("unreachable") from None


def _unattached() -> RaftTestContext:
    return RaftTestContext()


def _prospective() -> RaftTestContext:
    ctx = RaftTestContext()
    ctx.advance_time(ctx.config.election_timeout_ms * 2)
    return ctx


def _candidate() -> RaftTestContext:
    ctx = _prospective()
    env, _ = ctx.assert_sent(VoteRequest, 2, pre_vote=True)
    ctx.deliver(2, VoteResponse(Errors.NONE, 0, -1, True), env.correlation_id)
    return ctx


def _voted() -> RaftTestContext:
    ctx = RaftTestContext()
    ctx.deliver(2, VoteRequest(1, 2, 0, 0))
    return ctx


def _leader() -> RaftTestContext:
    ctx = RaftTestContext().with_elected_leader()
    ctx.propose(b"a")
    ctx.advance_time(ctx.config.append_linger_ms)
    ctx.follower_fetch(2, ctx.log.end_offset(), ctx.core.epoch)
    return ctx


def _resigned() -> RaftTestContext:
    ctx = _leader()
    ctx.core.resign(ctx.now_ms)
    ctx.drain()
    return ctx


def _follower() -> RaftTestContext:
    ctx = RaftTestContext().with_leader(3, epoch=1)
    ctx.answer_fetch(records=leader_batch(1, b"a", b"b"), high_watermark=1)
    return ctx


def _observer() -> RaftTestContext:
    ctx = RaftTestContext(local_id=9)
    ctx.advance_time(1)
    return ctx


ROLES: dict[str, Callable[[], RaftTestContext]] = {
    "unattached": _unattached, "prospective": _prospective, "candidate": _candidate,
    "voted": _voted, "leader": _leader, "resigned": _resigned, "follower": _follower,
    "observer": _observer,
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(role=st.sampled_from(sorted(ROLES)), data=st.data())
def test_style8_hostile_peer_messages_never_escape_step_in_any_role(role: str,
                                                                    data: Any) -> None:
    ctx = ROLES[role]()
    core = ctx.core
    epoch, hw, applied = core.epoch, core.high_watermark, core.applied_offset
    for _ in range(data.draw(st.integers(1, 12))):
        body = data.draw(bodies())
        source = data.draw(NODE_IDS)
        outstanding = [e.correlation_id for e in ctx.sent if e.destination == source]
        cid = data.draw(st.sampled_from(outstanding) if outstanding and data.draw(st.booleans())
                        else st.integers(0, 50))
        ctx.deliver(source, body, cid)  # steps and runs the whole Ready cycle
        ctx.advance_time(data.draw(st.sampled_from([0, 1, 30, 600])))
        # Monotonic invariants (STYLE.md section 9) and the log's own ones.
        assert core.epoch >= epoch
        assert core.high_watermark >= hw
        assert core.applied_offset >= applied
        assert ctx.log.start_offset() <= ctx.log.flushed_offset() <= ctx.log.end_offset()
        assert core.applied_offset <= max(core.high_watermark, ctx.log.start_offset())
        epoch, hw, applied = core.epoch, core.high_watermark, core.applied_offset
