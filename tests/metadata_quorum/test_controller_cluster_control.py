"""controller.cluster_control: registration, heartbeats, fencing, controlled shutdown."""

from __future__ import annotations

import uuid

from mq_builders import Ctx, incarnation, listeners

from metadata_quorum.controller import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerSessions,
    ControllerResult,
    UnregisterBrokerRequest,
    broker_heartbeat,
    fence_stale_brokers,
    register_broker,
    unregister_broker,
)
from metadata_quorum.features import broker_features
from metadata_quorum.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    Endpoint,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from raftlog.net.errors import ErrorCode


def registration(ctx: Ctx, broker_id: int, generation: int = 0, **kw: object):  # type: ignore[no-untyped-def]
    kw.setdefault("features", broker_features())
    kw.setdefault("listeners", listeners(broker_id))
    return register_broker(
        ctx.image, ctx.sessions,
        BrokerRegistrationRequest(broker_id, incarnation(broker_id, generation),
                                  **kw),  # type: ignore[arg-type]
        ctx.config, next_offset=ctx.next_offset, now_ms=ctx.now_ms,
    )


# --- registration ------------------------------------------------------------------


def test_kip_631_broker_epoch_is_the_offset_of_the_registration_record() -> None:
    ctx = Ctx()
    result = registration(ctx, 1)
    assert result.records == (RegisterBrokerRecord(
        1, incarnation(1), 0, listeners(1), None, fenced=True, in_controlled_shutdown=False,
        features=broker_features()),)
    assert result.response.error is ErrorCode.none and result.response.broker_epoch == 0
    ctx.run(result)
    assert ctx.image.brokers[1].fenced


def test_every_new_incarnation_gets_a_new_larger_epoch() -> None:
    ctx = Ctx()
    epochs = []
    for generation in range(3):
        ctx.now_ms += 20_000  # the old incarnation's session has expired
        epochs.append(ctx.register(1, generation=generation))
        ctx.heartbeat(1)
    assert epochs == sorted(set(epochs))


def test_same_incarnation_retry_is_idempotent() -> None:
    ctx = Ctx()
    epoch = ctx.register(1)
    result = registration(ctx, 1)
    assert result.records == () and result.response.broker_epoch == epoch


def test_same_incarnation_with_new_listeners_amends_with_a_new_epoch() -> None:
    ctx = Ctx()
    epoch = ctx.register(1)
    result = registration(ctx, 1, rack="r9")
    assert result.response.error is ErrorCode.none and result.response.broker_epoch > epoch


def test_other_incarnation_in_session_is_a_duplicate_registration() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.now_ms += 8_999
    result = registration(ctx, 1, generation=1)
    assert result.response.error is ErrorCode.duplicate_broker_registration
    assert result.records == ()


def test_next_incarnation_registers_at_once_after_a_controlled_shutdown() -> None:
    # The shutdown fenced the old registration: a fenced broker has no session.
    ctx = Ctx()
    ctx.add_brokers(1, 2)
    ctx.create("t", 2, 2)
    assert ctx.run(hb(ctx, 1, want_shutdown=True)).should_shut_down
    ctx.now_ms += 100
    result = registration(ctx, 1, generation=1)
    assert result.response.error is ErrorCode.none
    ctx.run(result)
    assert ctx.image.brokers[1].incarnation_id == incarnation(1, 1)


def test_next_incarnation_of_a_fenced_broker_registers_at_once() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.heartbeat(1, want_fence=True)
    assert ctx.image.brokers[1].fenced
    result = registration(ctx, 1, generation=1)
    assert result.response.error is ErrorCode.none


def test_other_incarnation_after_session_expiry_registers() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    ctx.now_ms += 9_000
    result = registration(ctx, 1, generation=1)
    assert result.response.error is ErrorCode.none


def test_reregistering_a_leader_moves_leadership_first() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2)
    topic = ctx.create("t", 1, 2)
    part = ctx.image.partition(topic, 0)
    assert part is not None
    leader = part.leader
    ctx.now_ms += 10_000
    result = registration(ctx, leader, generation=1)
    assert isinstance(result.records[0], PartitionChangeRecord)
    assert isinstance(result.records[-1], RegisterBrokerRecord)
    assert result.response.broker_epoch == ctx.next_offset + len(result.records) - 1
    ctx.run(result)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader != leader and leader not in part.isr


def test_registration_with_another_cluster_id_is_rejected() -> None:
    ctx = Ctx()
    result = registration(ctx, 1, cluster_id="other")
    assert result.response.error is ErrorCode.inconsistent_cluster_id and not result.records


def test_negative_broker_id_is_an_invalid_request() -> None:
    ctx = Ctx()
    result = register_broker(ctx.image, ctx.sessions, BrokerRegistrationRequest(-1, uuid.uuid4()),
                             ctx.config, next_offset=0, now_ms=0)
    assert result.response.error is ErrorCode.invalid_request


def test_two_listeners_of_one_name_are_an_invalid_request() -> None:
    """A peer's registration the record could not carry is refused, not
    raised out of the controller."""
    ctx = Ctx()
    twice = (Endpoint("PLAINTEXT", "a", 1), Endpoint("PLAINTEXT", "b", 2))
    result = registration(ctx, 1, listeners=twice)
    assert result.response.error is ErrorCode.invalid_request and not result.records
    assert result.response.message == "a listener name appears more than once"


# --- heartbeats ----------------------------------------------------------------------


def hb(ctx: Ctx, broker_id: int, offset: int | None = None, epoch: int | None = None,
       **flags: bool):  # type: ignore[no-untyped-def]
    broker = ctx.image.brokers.get(broker_id)
    return broker_heartbeat(ctx.image, BrokerHeartbeatRequest(
        broker_id, epoch if epoch is not None else (broker.epoch if broker else 0),
        ctx.image.provenance.last_offset if offset is None else offset, **flags,
    ), ctx.config)


def test_heartbeat_from_unknown_broker() -> None:
    assert hb(Ctx(), 7).response.error is ErrorCode.broker_id_not_registered


def test_heartbeat_with_stale_epoch() -> None:
    ctx = Ctx()
    epoch = ctx.register(1)
    assert hb(ctx, 1, epoch=epoch - 1).response.error is ErrorCode.stale_broker_epoch


def test_fenced_broker_stays_fenced_until_caught_up_with_its_registration() -> None:
    ctx = Ctx()
    ctx.register(2)
    epoch = ctx.register(1)
    behind = hb(ctx, 1, offset=epoch - 1)
    assert behind.records == () and behind.response.is_fenced and not behind.response.is_caught_up
    caught_up = hb(ctx, 1, offset=epoch)
    assert caught_up.records == (UnfenceBrokerRecord(1, epoch),)
    assert caught_up.response.is_caught_up and not caught_up.response.is_fenced


def test_fenced_broker_wanting_fence_stays_fenced() -> None:
    ctx = Ctx()
    ctx.register(1)
    result = hb(ctx, 1, want_fence=True)
    assert result.records == () and result.response.is_fenced


def test_fenced_broker_wanting_shutdown_may_stop_at_once() -> None:
    ctx = Ctx()
    ctx.register(1)
    result = hb(ctx, 1, want_shutdown=True)
    assert result.records == () and result.response.should_shut_down


def test_unfenced_heartbeat_changes_nothing() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    result = hb(ctx, 1)
    assert result.records == () and not result.response.is_fenced


def test_unfence_elects_leaders_for_leaderless_partitions_it_is_in_the_isr_of() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    topic = ctx.create("t", 2, 1)
    ctx.heartbeat(1, want_fence=True)
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == NO_LEADER and part.isr == (1,)
    ctx.now_ms += 10_000
    ctx.register(1, generation=1)
    result = ctx.heartbeat(1)
    assert not result.is_fenced
    for pid in (0, 1):
        part = ctx.image.partition(topic, pid)
        assert part is not None and part.leader == 1 and part.leader_epoch == 2


def test_want_fence_moves_leadership_then_fences() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create("t", 6, 3)
    result = hb(ctx, 2, want_fence=True)
    assert isinstance(result.records[-1], FenceBrokerRecord)
    assert all(isinstance(r, PartitionChangeRecord) for r in result.records[:-1])
    ctx.run(result)
    for pid in range(6):
        part = ctx.image.partition(topic, pid)
        assert part is not None and part.leader != 2 and 2 not in part.isr


def test_controlled_shutdown_moves_leaders_and_isr_before_shut_down_ok() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create("t", 6, 2)
    result = hb(ctx, 1, want_shutdown=True)
    epoch = ctx.image.brokers[1].epoch
    # Kafka's SHUTDOWN_NOW: once it leads nothing, the broker is fenced as it is let go.
    assert result.records[-2:] == (
        BrokerRegistrationChangeRecord(1, epoch, in_controlled_shutdown=True),
        FenceBrokerRecord(1, epoch),
    )
    assert all(isinstance(r, PartitionChangeRecord) for r in result.records[:-2])
    assert result.response.should_shut_down and result.response.is_fenced
    ctx.run(result)
    assert ctx.image.brokers[1].in_controlled_shutdown and ctx.image.brokers[1].fenced
    for pid in range(6):
        part = ctx.image.partition(topic, pid)
        assert part is not None and part.leader != 1 and 1 not in part.isr
    again = hb(ctx, 1, want_shutdown=True)
    assert again.records == () and again.response.should_shut_down


def test_controlled_shutdown_of_the_only_isr_member_leaves_partition_leaderless() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    topic = ctx.create("t", 1, 1)
    response = ctx.run(hb(ctx, 1, want_shutdown=True))
    assert response.should_shut_down
    part = ctx.image.partition(topic, 0)
    assert part is not None and part.leader == NO_LEADER and part.isr == (1,)


# --- session expiry -------------------------------------------------------------------


def test_fence_stale_brokers_after_session_timeout() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create("t", 3, 3)
    ctx.now_ms += 8_999
    assert fence_stale_brokers(ctx.image, ctx.sessions, ctx.config, ctx.now_ms).records == ()
    ctx.sessions = ctx.sessions.touched(1, ctx.now_ms)
    ctx.now_ms += 1
    result = fence_stale_brokers(ctx.image, ctx.sessions, ctx.config, ctx.now_ms)
    assert result.response == (2, 3)
    fences = [r for r in result.records if isinstance(r, FenceBrokerRecord)]
    assert [f.broker_id for f in fences] == [2, 3]
    ctx.run(result)
    for pid in range(3):
        part = ctx.image.partition(topic, pid)
        assert part is not None and part.leader == 1 and part.isr == (1,)


def test_fence_stale_brokers_ignores_fenced_and_fences_shutting_down_ones() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 4)
    ctx.register(3)  # fenced, never heartbeats
    ctx.heartbeat(4, want_shutdown=True)  # let go: fenced by its shutdown
    # In controlled shutdown but not yet let go (as a log from before the
    # shutdown fenced brokers may hold), then silent.
    ctx.run(ControllerResult((BrokerRegistrationChangeRecord(
        2, ctx.image.brokers[2].epoch, in_controlled_shutdown=True),), None))
    ctx.now_ms += 20_000
    result = fence_stale_brokers(ctx.image, ctx.sessions, ctx.config, ctx.now_ms)
    assert result.response == (1, 2)


def test_broker_without_any_session_is_stale() -> None:
    ctx = Ctx()
    ctx.add_brokers(1)
    result = fence_stale_brokers(ctx.image, BrokerSessions(), ctx.config, ctx.now_ms)
    assert result.response == (1,)


# --- unregistration ----------------------------------------------------------------------


def test_unregister_unknown_broker() -> None:
    ctx = Ctx()
    result = unregister_broker(ctx.image, UnregisterBrokerRequest(5), ctx.config)
    assert result.response.error is ErrorCode.broker_id_not_registered


def test_unregister_moves_leadership_then_removes() -> None:
    ctx = Ctx()
    ctx.add_brokers(1, 2)
    topic = ctx.create("t", 2, 2)
    result = unregister_broker(ctx.image, UnregisterBrokerRequest(1), ctx.config)
    assert isinstance(result.records[-1], UnregisterBrokerRecord)
    ctx.run(result)
    assert 1 not in ctx.image.brokers
    for pid in range(2):
        part = ctx.image.partition(topic, pid)
        assert part is not None and part.leader == 2 and part.isr == (2,)
