"""controller.quorum_controller: the facade over raftlog's listener and propose."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from mq_builders import incarnation, listeners

from metadata_quorum.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from metadata_quorum.controller import (
    AlterUserScramCredentialsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CommandFailedError,
    ControllerConfig,
    ControllerInvariantError,
    ControllerRole,
    CreatableTopic,
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    NotControllerError,
    QuorumController,
    ScramCredentialUpsertion,
)
from metadata_quorum.controller.acl_control import new_acl_id
from metadata_quorum.features import broker_features
from metadata_quorum.records import FenceBrokerRecord, build_metadata_batch, decode_record
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch
from raftlog.net.errors import ErrorCode
from raftlog.records import ControlRecordType, build_control_batch
from raftlog.security.scram import credential_from_password, salted_password


class FakeLog:
    """The propose side of KRaftCore: offsets from ``end``, values kept per call."""

    def __init__(self, end: int = 0) -> None:
        self.end = end
        self.proposed: list[tuple[int, list[bytes]]] = []
        self.skew = 0

    def propose(self, values: Sequence[bytes], now_ms: int) -> int:
        base = self.end + self.skew
        self.proposed.append((base, list(values)))
        self.end = base + len(values)
        return self.end - 1


def control_batch(offset: int, epoch: int) -> CommittedBatch:
    data = build_control_batch(ControlRecordType.LEADER_CHANGE, b"\x00", timestamp_ms=0,
                               base_offset=offset, partition_leader_epoch=epoch)
    return CommittedBatch(offset, offset, epoch, True, data)


def commit_all(log: FakeLog, epoch: int, *controllers: QuorumController) -> None:
    for base, values in log.proposed:
        records = [decode_record(v) for v in values]
        batch = CommittedBatch(base, base + len(values) - 1, epoch, False,
                               build_metadata_batch(records, base_offset=base, epoch=epoch))
        for controller in controllers:
            controller.handle_commit(batch)
    log.proposed.clear()


def active(epoch: int = 1) -> tuple[QuorumController, FakeLog]:
    log = FakeLog(end=1)
    controller = QuorumController(1, ControllerConfig(cluster_id="c"), log)
    controller.handle_leader_change(LeaderAndEpoch(1, epoch))
    controller.handle_commit(control_batch(0, epoch))
    assert controller.role is ControllerRole.ACTIVE
    return controller, log


def register(controller: QuorumController, broker_id: int, now_ms: int):  # type: ignore[no-untyped-def]
    return controller.submit(BrokerRegistrationRequest(
        broker_id, incarnation(broker_id), listeners(broker_id),
        features=broker_features()), now_ms)


def test_standby_and_claiming_controllers_refuse_commands() -> None:
    controller = QuorumController(1, ControllerConfig(), FakeLog())
    with pytest.raises(NotControllerError):
        register(controller, 1, 0)
    controller.handle_leader_change(LeaderAndEpoch(1, 3))
    assert controller.role is ControllerRole.CLAIMING
    with pytest.raises(NotControllerError) as info:
        register(controller, 1, 0)
    assert info.value.epoch == 3 and info.value.error_code is ErrorCode.not_controller
    controller.handle_commit(control_batch(0, 2))  # an older epoch's record: still claiming
    assert controller.role is ControllerRole.CLAIMING
    controller.handle_commit(control_batch(1, 3))
    assert controller.role is ControllerRole.ACTIVE and controller.next_write_offset == 2


def test_a_command_that_raises_writes_nothing_and_the_controller_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command that raises (a peer's request its checks let through) is
    a CommandFailedError for that request only: nothing is proposed, the
    latest image is unchanged, and the next command runs. Raised as
    anything else, it would stop the node's Raft driver."""
    import metadata_quorum.controller.quorum_controller as qc

    controller, log = active()
    before = controller.latest_image

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a record the request cannot make")

    monkeypatch.setattr(qc, "register_broker", broken)
    with pytest.raises(CommandFailedError, match="BrokerRegistrationRequest: ValueError"):
        register(controller, 1, 0)
    assert log.proposed == [] and controller.latest_image is before
    assert controller.role is ControllerRole.ACTIVE
    monkeypatch.undo()
    assert register(controller, 1, 0).response.error is ErrorCode.none


def test_broker_epoch_is_the_proposed_offset_and_response_waits_for_commit() -> None:
    controller, log = active()
    submission = register(controller, 1, 0)
    assert submission.response.broker_epoch == 1 == submission.commit_offset
    assert not controller.is_committed(submission)
    assert 1 in controller.latest_image.brokers and 1 not in controller.committed_image.brokers
    commit_all(log, 1, controller)
    assert controller.is_committed(submission)
    assert controller.latest_image == controller.committed_image


def test_commands_see_uncommitted_records_of_earlier_commands() -> None:
    controller, log = active()
    register(controller, 1, 0)
    controller.submit(BrokerHeartbeatRequest(1, 1, 1), 0)
    create = CreateTopicsRequest((CreatableTopic("t", 1, 1),))
    first = controller.submit(create, 0)
    second = controller.submit(create, 0)
    assert first.response[0].error is ErrorCode.none
    assert second.response[0].error is ErrorCode.topic_already_exists
    # A response without records still waits for everything proposed before it.
    assert second.records == () and second.commit_offset == first.commit_offset
    assert not controller.is_committed(second)
    commit_all(log, 1, controller)
    assert controller.is_committed(second)


def test_standby_replays_the_same_records_to_the_same_image() -> None:
    controller, log = active()
    standby = QuorumController(2, ControllerConfig(cluster_id="c"), FakeLog())
    standby.handle_leader_change(LeaderAndEpoch(1, 1))
    standby.handle_commit(control_batch(0, 1))
    for broker_id in (1, 2, 3):
        register(controller, broker_id, 0)
    for broker_id in (1, 2, 3):
        controller.submit(BrokerHeartbeatRequest(broker_id, broker_id, 3), 0)
    controller.submit(CreateTopicsRequest((CreatableTopic("t", 6, 3),)), 0)
    commit_all(log, 1, controller, standby)
    assert standby.committed_image == controller.committed_image
    assert standby.role is ControllerRole.STANDBY


def test_tick_fences_brokers_after_session_timeout() -> None:
    controller, log = active()
    register(controller, 1, 1_000)
    register(controller, 2, 1_000)
    controller.submit(BrokerHeartbeatRequest(1, 1, 2), 1_000)
    controller.submit(BrokerHeartbeatRequest(2, 2, 2), 1_000)
    commit_all(log, 1, controller)
    deadline = controller.tick(1_000)
    assert deadline == 10_000 and not log.proposed
    controller.submit(BrokerHeartbeatRequest(1, 1, 4), 9_000)
    controller.tick(10_000)
    [(_base, values)] = log.proposed
    assert [decode_record(v) for v in values] == [FenceBrokerRecord(2, 2)]
    commit_all(log, 1, controller)
    assert controller.committed_image.brokers[2].fenced


def test_new_active_controller_gives_brokers_fresh_sessions() -> None:
    controller, log = active()
    register(controller, 1, 0)
    controller.submit(BrokerHeartbeatRequest(1, 1, 1), 0)
    commit_all(log, 1, controller)
    controller.handle_leader_change(LeaderAndEpoch(2, 2))
    controller.handle_leader_change(LeaderAndEpoch(1, 3))
    controller.handle_commit(control_batch(log.end, 3))
    log.end += 1
    controller.tick(50_000)  # first contact of the new term: sessions start now
    assert not log.proposed
    controller.tick(59_000)
    assert [decode_record(v) for _b, vs in log.proposed for v in vs] == [FenceBrokerRecord(1, 1)]


def test_losing_leadership_drops_uncommitted_state() -> None:
    controller, _log = active()
    register(controller, 1, 0)
    assert 1 in controller.latest_image.brokers
    controller.handle_leader_change(LeaderAndEpoch(2, 2))
    assert controller.role is ControllerRole.STANDBY
    assert controller.latest_image.brokers == {}
    with pytest.raises(NotControllerError) as info:
        register(controller, 1, 0)
    assert info.value.leader_id == 2


def test_offset_mismatch_from_the_log_is_an_invariant_error() -> None:
    controller, log = active()
    log.skew = 5
    with pytest.raises(ControllerInvariantError):
        register(controller, 1, 0)


def test_foreign_epoch_commit_while_active_is_an_invariant_error() -> None:
    controller, _log = active(epoch=4)
    with pytest.raises(ControllerInvariantError):
        controller.handle_commit(control_batch(1, 5))


def test_snapshot_load_makes_an_active_controller_stand_by() -> None:
    from metadata_quorum.loader import build_snapshot_batches
    from raftlog.consensus.ready import SnapshotLoad
    from raftlog.consensus.snapshot import SnapshotId

    controller, log = active()
    register(controller, 1, 0)
    commit_all(log, 1, controller)
    image = controller.committed_image
    fresh = QuorumController(2, ControllerConfig(cluster_id="c"), FakeLog())
    fresh.handle_load_snapshot(SnapshotLoad(SnapshotId(2, 1), build_snapshot_batches(image)))
    assert fresh.committed_image == image
    controller.handle_load_snapshot(SnapshotLoad(SnapshotId(2, 1), build_snapshot_batches(image)))
    assert controller.role is ControllerRole.STANDBY


def test_large_results_are_proposed_in_batches_of_max_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from metadata_quorum.controller import quorum_controller

    monkeypatch.setattr(quorum_controller, "MAX_RECORDS_PER_BATCH", 2)
    controller, log = active()
    register(controller, 1, 0)
    controller.submit(BrokerHeartbeatRequest(1, 1, 1), 0)
    submission = controller.submit(CreateTopicsRequest((CreatableTopic("t", 3, 1),)), 0)
    assert [len(values) for _base, values in log.proposed] == [1, 1, 2, 2]
    assert submission.commit_offset == 6
    commit_all(log, 1, controller)
    assert controller.is_committed(submission)
    assert controller.latest_image == controller.committed_image


def test_scram_credentials_are_committed_through_the_log_to_every_controller() -> None:
    """KIP-554 through the facade: the answer waits for the commit, and a
    standby replays the same credential (derived keys, not the password)."""
    controller, log = active()
    standby = QuorumController(2, ControllerConfig(cluster_id="c"), FakeLog())
    standby.handle_leader_change(LeaderAndEpoch(1, 1))
    standby.handle_commit(control_batch(0, 1))
    salt = b"s" * 16
    submission = controller.submit(AlterUserScramCredentialsRequest(upsertions=(
        ScramCredentialUpsertion("alice", 2, 4096, salt,
                                 salted_password("SCRAM-SHA-512", "pw", salt, 4096)),)), 0)
    assert [(r.user, r.error) for r in submission.response] == [("alice", ErrorCode.none)]
    assert not controller.is_committed(submission)
    assert controller.committed_image.scram_credential("alice", "SCRAM-SHA-512") is None
    commit_all(log, 1, controller, standby)
    assert controller.is_committed(submission)
    expected = credential_from_password("SCRAM-SHA-512", "pw", 4096, salt)
    assert standby.committed_image.scram_credential("alice", "SCRAM-SHA-512") == expected
    assert controller.committed_image == standby.committed_image


def test_acls_are_committed_through_the_log_to_every_controller() -> None:
    """KIP-801 through the facade: each new ACL's id comes from the offset
    its record gets, a standby replays the same ACLs, and a delete waits for
    its commit too."""
    controller, log = active()
    standby = QuorumController(2, ControllerConfig(cluster_id="c"), FakeLog())
    standby.handle_leader_change(LeaderAndEpoch(1, 1))
    standby.handle_commit(control_batch(0, 1))
    bindings = tuple(AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*",
                                AclOperation.READ, AclPermissionType.ALLOW) for name in "ab")
    submission = controller.submit(CreateAclsRequest(bindings), 0)
    assert [r.error for r in submission.response] == [ErrorCode.none] * 2
    assert submission.commit_offset == 2 and not controller.is_committed(submission)
    assert not controller.committed_image.acls
    commit_all(log, 1, controller, standby)
    assert controller.is_committed(submission)
    config = ControllerConfig(cluster_id="c")
    assert list(standby.committed_image.acls) == [new_acl_id(config, 1, ()),
                                                  new_acl_id(config, 2, ())]
    assert controller.committed_image == standby.committed_image
    deletion = controller.submit(DeleteAclsRequest((AclBindingFilter(resource_name="a"),)), 0)
    assert [list(r.matching_acls) for r in deletion.response] == [[bindings[0]]]
    commit_all(log, 1, controller, standby)
    assert [a.binding for a in standby.committed_image.acls.values()] == [bindings[1]]
