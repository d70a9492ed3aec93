"""`ControllerService` with a real Raft driver (one voter, in-process): a
request's answer comes after its records commit, and a command that raises
fails that request alone while the driver, and so the node, goes on."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.broker_heartbeat.v0 import request as hb
from kio.schema.broker_registration.v3 import request as reg
from kio.schema.create_topics.v7 import request as ct

import metadata_quorum.controller.quorum_controller as qc
from data_plane.testing.inprocess_controller import InProcessController
from metadata_quorum.controller.quorum_controller import CommandFailedError
from raftlog.net.errors import ErrorCode

REGISTRATION, HEARTBEAT, CREATE_TOPICS = 62, 63, 19


def _registration(broker_id: int) -> reg.BrokerRegistrationRequest:
    return reg.BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id="raftlog-cluster",  # type: ignore[arg-type]
        incarnation_id=uuid.uuid4(),
        listeners=(reg.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092,  # type: ignore[arg-type]
                                security_protocol=0),),  # type: ignore[arg-type]
        features=(), rack=None, is_migrating_zk_broker=False, log_dirs=(),
        previous_broker_epoch=-1)  # type: ignore[arg-type]


def test_a_write_is_answered_once_committed_and_read_from_the_committed_image() -> None:
    async def body() -> None:
        controller = InProcessController()
        await controller.start()
        try:
            answer = await controller.call(REGISTRATION, _registration(1))
            assert answer.error_code == ErrorCode.none
            quorum = controller.service.controller
            # The broker epoch is the registration record's offset, committed.
            assert 0 < answer.broker_epoch <= quorum.last_committed_offset
            assert quorum.committed_image.brokers[1].epoch == answer.broker_epoch
        finally:
            await controller.stop()

    asyncio.run(body())


def test_a_command_that_raises_fails_its_request_and_the_driver_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Raised inside the driver's task as anything but CommandFailedError,
    the command's exception would stop the Raft driver, and the node with it
    (`test_quorum_controller` checks the controller's side: nothing proposed).
    The handler raises it, and the server answers UNKNOWN_SERVER_ERROR."""

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a record the request cannot make")

    async def body() -> None:
        controller = InProcessController()
        await controller.start()
        try:
            quorum = controller.service.controller
            committed = quorum.last_committed_offset
            monkeypatch.setattr(qc, "register_broker", broken)
            with pytest.raises(CommandFailedError, match="ValueError"):
                await controller.call(REGISTRATION, _registration(1))
            assert controller.driver.running
            assert quorum.last_committed_offset == committed
            assert 1 not in quorum.committed_image.brokers
            monkeypatch.undo()
            # The same driver runs the next commands, and commits them.
            answer = await controller.call(REGISTRATION, _registration(1))
            assert answer.error_code == ErrorCode.none
            beat = await controller.call(HEARTBEAT, hb.BrokerHeartbeatRequest(
                broker_id=1, broker_epoch=answer.broker_epoch,  # type: ignore[arg-type]
                current_metadata_offset=2**40, want_fence=False,  # type: ignore[arg-type]
                want_shut_down=False))
            assert beat.error_code == ErrorCode.none and not beat.is_fenced
            created = await controller.call(CREATE_TOPICS, ct.CreateTopicsRequest(
                topics=(ct.CreatableTopic(name="t", num_partitions=1,  # type: ignore[arg-type]
                                          replication_factor=1, assignments=(),  # type: ignore[arg-type]
                                          configs=()),),
                timeout=0, validate_only=False))  # type: ignore[arg-type]
            assert created.topics[0].error_code == ErrorCode.none
            assert quorum.committed_image.topic_by_name("t") is not None
        finally:
            await controller.stop()

    asyncio.run(body())
