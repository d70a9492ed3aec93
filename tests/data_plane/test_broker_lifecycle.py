"""BrokerLifecycle, MetadataPublisher and the controller channel, with fakes.

A `FakeChannel` plays the active controller: each test scripts its answers
per request type and inspects what the broker sent.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest
from kio.schema.alter_partition.v3 import request as ap_req
from kio.schema.alter_partition.v3 import response as ap_resp
from kio.schema.broker_heartbeat.v0 import request as hb_req
from kio.schema.broker_heartbeat.v0 import response as hb_resp
from kio.schema.broker_registration.v3 import request as reg_req
from kio.schema.broker_registration.v3 import response as reg_resp
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from data_plane.broker.controller_channel import (
    ControllerUnavailableError,
    QuorumControllerChannel,
    is_not_controller,
)
from data_plane.broker.lifecycle import (
    BrokerFatalError,
    BrokerLifecycle,
    BrokerState,
    LifecycleConfig,
)
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.metadata_publisher import (
    BrokerMetadataListener,
    CombinedMetadataListener,
    MetadataPublisher,
)
from data_plane.replication.types import (
    AlterPartitionRequest,
    BrokerEpochPair,
)
from metadata_quorum.image import MetadataImage
from metadata_quorum.loader import MetadataLoader
from metadata_quorum.records import (
    Endpoint,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    build_metadata_batch,
)
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, SnapshotLoad
from raftlog.consensus.snapshot import SnapshotId
from raftlog.net.errors import DisconnectedError, ErrorCode

CLUSTER_ID = "cluster-a"
TOPIC_ID = uuid.UUID(int=7)
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))

Script = Callable[[Any], Any]


def async_test(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class FakeChannel:
    """Answers with ``script[type(request)](request)``; records every request."""

    def __init__(self, script: dict[type, Script]) -> None:
        self.script = script
        self.sent: list[Any] = []
        self.closed = False

    async def send(self, request: Any, *, timeout_ms: int) -> Any:
        self.sent.append(request)
        await asyncio.sleep(0)
        answer = self.script[type(request)](request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self) -> None:
        self.closed = True

    def of(self, kind: type) -> list[Any]:
        return [r for r in self.sent if isinstance(r, kind)]


def registered(epoch: int, error: ErrorCode = ErrorCode.none) -> Script:
    return lambda _: reg_resp.BrokerRegistrationResponse(
        throttle_time=NO_THROTTLE, error_code=error, broker_epoch=i64(epoch)
    )


def heartbeat_answer(
    *, fenced: bool = False, shut_down: bool = False, error: ErrorCode = ErrorCode.none
) -> hb_resp.BrokerHeartbeatResponse:
    return hb_resp.BrokerHeartbeatResponse(
        throttle_time=NO_THROTTLE, error_code=error, is_caught_up=True,
        is_fenced=fenced, should_shut_down=shut_down,
    )


def unfence_when_caught_up(request: hb_req.BrokerHeartbeatRequest) -> Any:
    """The controller's rule (KIP-631): unfenced once the offset reaches the epoch."""
    caught_up = int(request.current_metadata_offset) >= int(request.broker_epoch)
    return heartbeat_answer(fenced=request.want_fence or not caught_up)


def lifecycle_config(**overrides: Any) -> LifecycleConfig:
    settings: dict[str, Any] = dict(
        broker_id=5,
        cluster_id=CLUSTER_ID,
        listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),),
        rack="r1",
        heartbeat_interval_ms=50,
        retry_backoff_ms=5,
    )
    settings.update(overrides)
    return LifecycleConfig(**settings)


def image_at(offset: int, records: Sequence[MetadataRecord] = ()) -> MetadataImage:
    """An image holding ``records``, replayed as one batch ending at ``offset``."""
    loader = MetadataLoader()
    batch = records or [TopicRecord("filler", uuid.UUID(int=99))]
    base = offset - len(batch) + 1
    data = build_metadata_batch(batch, base_offset=base, epoch=1)
    return loader.handle_commit(CommittedBatch(base, offset, 1, False, data))


async def wait_until(condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


def test_the_lifecycle_is_a_broker_metadata() -> None:
    lifecycle: BrokerMetadata = BrokerLifecycle(
        lifecycle_config(), FakeChannel({}), MetadataPublisher()
    )
    assert lifecycle.broker_id == 5 and lifecycle.broker_epoch == -1
    assert lifecycle.image.provenance.last_offset == -1


@async_test
async def test_registers_with_its_identity_then_is_unfenced_once_caught_up() -> None:
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(40),
        hb_req.BrokerHeartbeatRequest: unfence_when_caught_up,
    })
    publisher = MetadataPublisher()
    config = lifecycle_config()
    lifecycle = BrokerLifecycle(config, channel, publisher)
    lifecycle.start()
    await lifecycle.wait_registered()
    assert lifecycle.broker_epoch == 40 and lifecycle.state is BrokerState.RECOVERY
    (registration,) = channel.of(reg_req.BrokerRegistrationRequest)
    assert registration.broker_id == 5 and registration.cluster_id == CLUSTER_ID
    assert registration.incarnation_id == config.incarnation_id
    assert registration.rack == "r1"
    assert [(lst.name, lst.host, int(lst.port)) for lst in registration.listeners] == [
        ("PLAINTEXT", "127.0.0.1", 9092)]
    assert registration.previous_broker_epoch == -1  # no clean shutdown known (KIP-966)

    # Not caught up: heartbeats ask to stay fenced and report the replayed offset.
    await wait_until(lambda: len(channel.of(hb_req.BrokerHeartbeatRequest)) >= 1)
    first = channel.of(hb_req.BrokerHeartbeatRequest)[0]
    assert first.broker_epoch == 40 and first.current_metadata_offset == -1
    assert first.want_fence and not first.want_shut_down
    assert lifecycle.fenced

    publisher.publish(image_at(45))  # includes the registration at 40
    await asyncio.wait_for(lifecycle.wait_unfenced(), 2)
    assert lifecycle.state is BrokerState.RUNNING
    last = channel.of(hb_req.BrokerHeartbeatRequest)[-1]
    assert last.current_metadata_offset == 45 and not last.want_fence
    await lifecycle.stop()
    assert channel.closed and lifecycle.state is BrokerState.SHUTTING_DOWN


@async_test
async def test_reaching_the_registration_offset_wakes_the_heartbeat_at_once() -> None:
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(3),
        hb_req.BrokerHeartbeatRequest: unfence_when_caught_up,
    })
    publisher = MetadataPublisher()
    # An interval far longer than the test: only the publish hook can unfence in time.
    lifecycle = BrokerLifecycle(lifecycle_config(heartbeat_interval_ms=60_000), channel, publisher)
    lifecycle.start()
    await wait_until(lambda: len(channel.of(hb_req.BrokerHeartbeatRequest)) == 1)
    publisher.publish(image_at(3))
    await asyncio.wait_for(lifecycle.wait_unfenced(), 1)
    await lifecycle.stop()


@async_test
async def test_stale_broker_epoch_makes_it_register_again_with_a_new_epoch() -> None:
    epochs = iter([10, 20])
    stale = {"once": True}

    def heartbeat(request: Any) -> Any:
        if stale["once"] and int(request.broker_epoch) == 10:
            stale["once"] = False
            return heartbeat_answer(error=ErrorCode.stale_broker_epoch)
        return heartbeat_answer(fenced=False)

    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: lambda _: registered(next(epochs))(None),
        hb_req.BrokerHeartbeatRequest: heartbeat,
    })
    publisher = MetadataPublisher()
    publisher.publish(image_at(30))
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, publisher)
    lifecycle.start()
    await wait_until(lambda: lifecycle.broker_epoch == 20 and not lifecycle.fenced)
    assert lifecycle.registrations == 2
    assert len(channel.of(reg_req.BrokerRegistrationRequest)) == 2
    # Same process, same incarnation id: the controller sees one broker re-registering.
    ids = {r.incarnation_id for r in channel.of(reg_req.BrokerRegistrationRequest)}
    assert len(ids) == 1
    await lifecycle.stop()


@async_test
async def test_a_fenced_answer_moves_a_running_broker_back_to_recovery() -> None:
    fenced = {"now": False}
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(1),
        hb_req.BrokerHeartbeatRequest: lambda _: heartbeat_answer(fenced=fenced["now"]),
    })
    publisher = MetadataPublisher()
    publisher.publish(image_at(2))
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, publisher)
    lifecycle.start()
    await asyncio.wait_for(lifecycle.wait_unfenced(), 2)
    assert lifecycle.state is BrokerState.RUNNING
    fenced["now"] = True  # e.g. its session expired while it was paused
    await wait_until(lambda: lifecycle.fenced)
    assert lifecycle.state is BrokerState.RECOVERY and lifecycle.broker_epoch == 1
    fenced["now"] = False  # same epoch: fencing alone does not end an epoch
    await wait_until(lambda: not lifecycle.fenced)
    assert lifecycle.state is BrokerState.RUNNING and lifecycle.registrations == 1
    await lifecycle.stop()


@async_test
async def test_duplicate_registration_is_retried_until_the_old_session_expires() -> None:
    answers = iter([ErrorCode.duplicate_broker_registration] * 3 + [ErrorCode.none])
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: lambda _: registered(8, next(answers))(None),
        hb_req.BrokerHeartbeatRequest: unfence_when_caught_up,
    })
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, MetadataPublisher())
    lifecycle.start()
    await asyncio.wait_for(lifecycle.wait_registered(), 2)
    assert lifecycle.broker_epoch == 8
    assert len(channel.of(reg_req.BrokerRegistrationRequest)) == 4
    await lifecycle.stop()


@async_test
async def test_a_foreign_cluster_id_is_fatal() -> None:
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(-1, ErrorCode.inconsistent_cluster_id),
    })
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, MetadataPublisher())
    lifecycle.start()
    await asyncio.wait_for(lifecycle.wait_failed(), 2)
    assert isinstance(lifecycle.failure, BrokerFatalError)
    assert lifecycle.broker_epoch == -1


@async_test
async def test_no_controller_means_retrying_not_failing() -> None:
    calls = {"n": 0}

    def flaky(_: Any) -> Any:
        calls["n"] += 1
        if calls["n"] < 3:
            return ControllerUnavailableError("nobody home")
        return registered(4)(None)

    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: flaky,
        hb_req.BrokerHeartbeatRequest: unfence_when_caught_up,
    })
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, MetadataPublisher())
    lifecycle.start()
    await asyncio.wait_for(lifecycle.wait_registered(), 2)
    assert lifecycle.failure is None and lifecycle.broker_epoch == 4
    await lifecycle.stop()


@async_test
async def test_controlled_shutdown_waits_for_should_shut_down() -> None:
    shutdown_polls = {"n": 0}

    def heartbeat(request: Any) -> Any:
        if request.want_shut_down:
            shutdown_polls["n"] += 1
            # Leadership moves over a few heartbeats; only then may it stop.
            return heartbeat_answer(shut_down=shutdown_polls["n"] >= 3)
        return heartbeat_answer(fenced=False)

    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(2),
        hb_req.BrokerHeartbeatRequest: heartbeat,
    })
    publisher = MetadataPublisher()
    publisher.publish(image_at(2))
    lifecycle = BrokerLifecycle(lifecycle_config(heartbeat_interval_ms=60_000), channel, publisher)
    lifecycle.start()
    await asyncio.wait_for(lifecycle.wait_unfenced(), 2)
    assert await lifecycle.controlled_shutdown(timeout_ms=2000)
    assert shutdown_polls["n"] == 3
    assert lifecycle.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    wanted = [r for r in channel.of(hb_req.BrokerHeartbeatRequest) if r.want_shut_down]
    assert all(not r.want_fence for r in wanted)
    await lifecycle.stop()


@async_test
async def test_controlled_shutdown_gives_up_at_its_timeout() -> None:
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(2),
        hb_req.BrokerHeartbeatRequest: lambda _: heartbeat_answer(shut_down=False),
    })
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, MetadataPublisher())
    lifecycle.start()
    await lifecycle.wait_registered()
    assert not await lifecycle.controlled_shutdown(timeout_ms=100)
    await lifecycle.stop()


@async_test
async def test_controlled_shutdown_before_registration_returns_at_once() -> None:
    lifecycle = BrokerLifecycle(lifecycle_config(), FakeChannel({}), MetadataPublisher())
    assert not await lifecycle.controlled_shutdown(timeout_ms=5000)


# ---- AlterPartition and forwarding ------------------------------------------------------


def topic_image() -> MetadataImage:
    return image_at(12, [
        TopicRecord("orders", TOPIC_ID),
        PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=(5, 6, 7), isr=(5, 6, 7),
                        leader=5, leader_epoch=3, partition_epoch=9),
    ])


def alter_request(**overrides: Any) -> AlterPartitionRequest:
    settings: dict[str, Any] = dict(
        change_id=77, topic="orders", partition=0, broker_id=5, broker_epoch=40,
        leader_epoch=3, partition_epoch=9,
        new_isr_with_epochs=(BrokerEpochPair(5, 40), BrokerEpochPair(6, 41)),
    )
    settings.update(overrides)
    return AlterPartitionRequest(**settings)


def alter_answer(error: ErrorCode = ErrorCode.none, top: ErrorCode = ErrorCode.none) -> Script:
    return lambda request: ap_resp.AlterPartitionResponse(
        throttle_time=NO_THROTTLE,
        error_code=top,
        topics=(ap_resp.TopicData(topic_id=TOPIC_ID, partitions=(ap_resp.PartitionData(
            partition_index=i32(0), error_code=error, leader_id=BrokerId(5),
            leader_epoch=i32(3), isr=(BrokerId(5), BrokerId(6)),
            leader_recovery_state=i8(0), partition_epoch=i32(10),
        ),)),),
    )


@async_test
async def test_alter_partition_sends_v3_with_the_topic_id_and_epochs() -> None:
    channel = FakeChannel({ap_req.AlterPartitionRequest: alter_answer()})
    publisher = MetadataPublisher()
    publisher.publish(topic_image())
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, publisher)
    response = await lifecycle.alter_partition(alter_request())
    assert (response.change_id, response.error) == (77, ErrorCode.none)
    assert (response.leader_id, response.leader_epoch, response.partition_epoch) == (5, 3, 10)
    assert response.isr == (5, 6)
    (sent,) = channel.of(ap_req.AlterPartitionRequest)
    assert sent.broker_id == 5 and sent.broker_epoch == 40
    (topic,) = sent.topics
    assert topic.topic_id == TOPIC_ID
    (part,) = topic.partitions
    assert (part.partition_index, part.leader_epoch, part.partition_epoch) == (0, 3, 9)
    assert [(b.broker_id, b.broker_epoch) for b in part.new_isr_with_epochs] == [(5, 40), (6, 41)]


@async_test
async def test_alter_partition_errors_come_back_as_codes() -> None:
    publisher = MetadataPublisher()
    publisher.publish(topic_image())

    async def answer(channel: FakeChannel, request: AlterPartitionRequest) -> ErrorCode:
        lifecycle = BrokerLifecycle(lifecycle_config(), channel, publisher)
        return (await lifecycle.alter_partition(request)).error

    stale = FakeChannel({ap_req.AlterPartitionRequest: alter_answer(ErrorCode.invalid_update_version)})
    assert await answer(stale, alter_request()) is ErrorCode.invalid_update_version
    fenced = FakeChannel({ap_req.AlterPartitionRequest: alter_answer(top=ErrorCode.stale_broker_epoch)})
    assert await answer(fenced, alter_request()) is ErrorCode.stale_broker_epoch
    down = FakeChannel({ap_req.AlterPartitionRequest: lambda _: ControllerUnavailableError("x")})
    assert await answer(down, alter_request()) is ErrorCode.request_timed_out
    unknown = FakeChannel({})
    assert await answer(unknown, alter_request(topic="nope")) is ErrorCode.unknown_topic_or_partition
    assert unknown.sent == []


def create_topics_request() -> ct_req.CreateTopicsRequest:
    return ct_req.CreateTopicsRequest(
        topics=(ct_req.CreatableTopic(name=TopicName("t"), num_partitions=i32(1),
                                      replication_factor=i16(1), assignments=(), configs=()),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        validate_only=False,
    )


def created(error: ErrorCode) -> ct_resp.CreateTopicsResponse:
    return ct_resp.CreateTopicsResponse(
        throttle_time=NO_THROTTLE,
        topics=(ct_resp.CreatableTopicResult(
            name=TopicName("t"), topic_id=uuid.UUID(int=1), error_code=error,
            error_message=None, num_partitions=i32(1), replication_factor=i16(1), configs=(),
        ),),
    )


@async_test
async def test_forward_returns_the_controllers_response_and_checks_the_api_key() -> None:
    answer = created(ErrorCode.none)
    channel = FakeChannel({ct_req.CreateTopicsRequest: lambda _: answer})
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, MetadataPublisher())
    assert await lifecycle.forward(19, create_topics_request()) is answer
    with pytest.raises(ValueError):
        await lifecycle.forward(20, create_topics_request())


# ---- the publisher ---------------------------------------------------------------------


def test_publisher_calls_subscribers_in_order_with_the_previous_image() -> None:
    publisher = MetadataPublisher()
    publisher.open_gate()  # the lifecycle's job; tested above
    seen: list[tuple[str, int, int | None]] = []
    for name in ("a", "b"):
        publisher.subscribe(
            lambda image, prev, name=name: seen.append(
                (name, image.provenance.last_offset,
                 None if prev is None else prev.provenance.last_offset)))
    first, second = image_at(3), image_at(9)
    publisher.publish(first)
    publisher.publish(first)  # the same image: no publish
    publisher.publish(second)
    assert seen == [("a", 3, None), ("b", 3, None), ("a", 9, 3), ("b", 9, 3)]
    with pytest.raises(ValueError):
        publisher.publish(image_at(5))  # replay never goes back


def test_a_failing_subscriber_fails_the_publish() -> None:
    publisher = MetadataPublisher()
    publisher.open_gate()

    def broken(image: MetadataImage, prev: MetadataImage | None) -> None:
        raise RuntimeError("data side bug")

    publisher.subscribe(broken)
    with pytest.raises(RuntimeError):
        publisher.publish(image_at(1))


def test_observer_listener_replays_publishes_and_tracks_the_leader() -> None:
    publisher = MetadataPublisher()
    listener = BrokerMetadataListener(publisher, snapshot_max_bytes=1)
    record = RegisterBrokerRecord(broker_id=5, incarnation_id=uuid.uuid4(), broker_epoch=0)
    data = build_metadata_batch([record], base_offset=0, epoch=1)
    listener.handle_commit(CommittedBatch(0, 0, 1, False, data))
    assert 5 in publisher.image.brokers and publisher.image.provenance.last_offset == 0
    assert listener.snapshots.due is not None and listener.snapshots.due[0] == 1
    listener.handle_leader_change(LeaderAndEpoch(2, 4))
    assert publisher.leader_id == 2
    # A snapshot replaces the image (KIP-630) and is published too.
    snapshot_data = build_metadata_batch([TopicRecord("t", TOPIC_ID)], base_offset=0, epoch=1)
    listener.handle_load_snapshot(SnapshotLoad(SnapshotId(10, 1), snapshot_data))
    assert publisher.image.provenance.last_offset == 9
    assert publisher.image.topic_by_name("t") is not None and not publisher.image.brokers
    assert listener.snapshots.due is not None  # the earlier plan is still the node's to write


class RecordingControllerListener:
    def __init__(self) -> None:
        self.loader = MetadataLoader()
        self.calls: list[str] = []

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.calls.append("commit")
        self.loader.handle_commit(batch)

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        self.calls.append("snapshot")

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.calls.append("leader")


def test_combined_listener_replays_once_and_publishes_the_controllers_image() -> None:
    controller = RecordingControllerListener()
    publisher = MetadataPublisher()
    publisher.open_gate()
    published: list[MetadataImage] = []
    publisher.subscribe(lambda image, prev: published.append(image))
    listener = CombinedMetadataListener(controller, lambda: controller.loader.image, publisher)
    data = build_metadata_batch([TopicRecord("t", TOPIC_ID)], base_offset=0, epoch=1)
    listener.handle_commit(CommittedBatch(0, 0, 1, False, data))
    listener.handle_leader_change(LeaderAndEpoch(1, 1))
    assert controller.calls == ["commit", "leader"]
    # The very image object the controller's loader holds: one replay per node.
    assert published == [controller.loader.image] and published[0] is controller.loader.image
    assert publisher.leader_id == 1


# ---- the controller channel ------------------------------------------------------------


def test_not_controller_is_recognised_top_level_and_per_topic() -> None:
    assert is_not_controller(heartbeat_answer(error=ErrorCode.not_controller))
    assert not is_not_controller(heartbeat_answer())
    assert is_not_controller(created(ErrorCode.not_controller))
    assert not is_not_controller(created(ErrorCode.topic_already_exists))


def test_not_controller_is_recognised_per_create_partitions_result() -> None:
    from kio.schema.create_partitions.v3 import response as cp_resp
    from kio.schema.types import TopicName

    def answer(*codes: ErrorCode) -> cp_resp.CreatePartitionsResponse:
        return cp_resp.CreatePartitionsResponse(
            throttle_time=datetime.timedelta(0),
            results=tuple(cp_resp.CreatePartitionsTopicResult(
                name=TopicName(f"t{i}"), error_code=c) for i, c in enumerate(codes)))
    assert is_not_controller(answer(ErrorCode.not_controller, ErrorCode.not_controller))
    assert not is_not_controller(answer(ErrorCode.not_controller, ErrorCode.none))


class FakeClient:
    def __init__(self, node_id: int, log: list[int], answer: Callable[[], Any]) -> None:
        self.node_id, self.log, self.answer = node_id, log, answer

    async def send(self, request: Any, version: int | None = None) -> Any:
        self.log.append(self.node_id)
        result = self.answer()
        if isinstance(result, Exception):
            raise result
        return result

    async def close(self) -> None:
        pass


def channel_with(
    answers: dict[int, Callable[[], Any]], hint: int | None, log: list[int]
) -> QuorumControllerChannel:
    channel = QuorumControllerChannel(
        {n: ("127.0.0.1", 1) for n in answers}, lambda: hint, retry_backoff_ms=1
    )
    clients = {n: FakeClient(n, log, a) for n, a in answers.items()}
    channel._client = lambda node_id: clients[node_id]  # type: ignore[method-assign,assignment,return-value]
    return channel


@async_test
async def test_channel_tries_the_leader_hint_then_follows_not_controller() -> None:
    log: list[int] = []
    channel = channel_with({
        1: lambda: heartbeat_answer(error=ErrorCode.not_controller),
        2: lambda: DisconnectedError("down"),
        3: lambda: heartbeat_answer(),
    }, hint=1, log=log)
    response = await channel.send(create_topics_request(), timeout_ms=1000)
    assert response.error_code == ErrorCode.none
    assert log[0] == 1 and log[-1] == 3 and channel.active_controller_id == 3
    log.clear()
    await channel.send(create_topics_request(), timeout_ms=1000)
    assert log == [3]  # sticks to the controller that answered


@async_test
async def test_channel_gives_up_at_the_deadline() -> None:
    channel = channel_with({1: lambda: heartbeat_answer(error=ErrorCode.not_controller)},
                           hint=None, log=[])
    with pytest.raises(ControllerUnavailableError):
        await channel.send(create_topics_request(), timeout_ms=50)


@async_test
async def test_the_data_side_hears_nothing_until_registered_and_caught_up() -> None:
    """A restarted broker must not act on the leadership or ISR membership its
    previous incarnation held: the image it replays first can still name it,
    and its log may have lost unflushed data (found by the chaos suite: a
    node restarted with an empty log led a partition and the followers
    truncated to it). Images reach the data side only once the broker has
    registered and replayed its own registration record, as Kafka installs
    its metadata publishers after that initial catch-up."""
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(40),
        hb_req.BrokerHeartbeatRequest: unfence_when_caught_up,
    })
    publisher = MetadataPublisher()
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, publisher)
    seen: list[tuple[int, int | None]] = []
    lifecycle.subscribe(lambda image, previous: seen.append((
        image.provenance.last_offset,
        None if previous is None else previous.provenance.last_offset)))

    publisher.publish(image_at(30))  # replayed before registering: not delivered
    lifecycle.start()
    await lifecycle.wait_registered()
    assert seen == [] and not publisher.gate_open
    publisher.publish(image_at(39))  # registered, but the record at 40 not replayed yet
    assert seen == []
    publisher.publish(image_at(45))
    assert seen == [(45, None)], "the first delivery is the caught-up image, with no previous"
    publisher.publish(image_at(50))
    assert seen == [(45, None), (50, 45)]
    await lifecycle.stop()


@async_test
async def test_a_caught_up_image_replayed_before_the_registration_answer_opens_the_gate() -> None:
    channel = FakeChannel({
        reg_req.BrokerRegistrationRequest: registered(40),
        hb_req.BrokerHeartbeatRequest: unfence_when_caught_up,
    })
    publisher = MetadataPublisher()
    lifecycle = BrokerLifecycle(lifecycle_config(), channel, publisher)
    seen: list[int] = []
    lifecycle.subscribe(lambda image, previous: seen.append(image.provenance.last_offset))
    publisher.publish(image_at(41))  # the observer replayed past 40 before the answer
    lifecycle.start()
    await lifecycle.wait_registered()
    assert seen == [41]
    await lifecycle.stop()
