"""KIP-900 bootstrap records (metadata_quorum.bootstrap): ``--add-scram``'s
syntax, the bootstrap file, and the first active controller writing the
records once per cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_quorum_controller import FakeLog, commit_all, control_batch

from metadata_quorum.bootstrap import (
    BOOTSTRAP_FEATURE,
    BootstrapError,
    parse_add_scram,
    read_bootstrap,
    write_bootstrap,
)
from metadata_quorum.controller import (
    AlterUserScramCredentialsRequest,
    ControllerConfig,
    ControllerRole,
    QuorumController,
    ScramCredentialDeletion,
)
from metadata_quorum.records import FeatureLevelRecord, UserScramCredentialRecord, decode_record
from metadata_quorum.records.types import ScramMechanism
from raftlog.consensus.ready import LeaderAndEpoch
from raftlog.security.scram import credential_from_salted, salted_password


def test_add_scram_derives_a_credential_kafka_style() -> None:
    record = parse_add_scram("SCRAM-SHA-512=[name=broker,password=broker-secret,iterations=8192]")
    assert (record.name, record.mechanism, record.iterations) == (
        "broker", ScramMechanism.SCRAM_SHA_512, 8192)
    # The stored key is the one the password gives with this salt: a login works.
    expected = credential_from_salted("SCRAM-SHA-512", record.salt, salted_password(
        "SCRAM-SHA-512", "broker-secret", record.salt, 8192), 8192)
    assert (record.stored_key, record.server_key) == (expected.stored_key, expected.server_key)
    default = parse_add_scram('SCRAM-SHA-256=[name="alice",password=alice-secret]')
    assert default.name == "alice" and default.iterations == 4096


@pytest.mark.parametrize("spec,words", [
    ("SCRAM-SHA-1=[name=a,password=b]", "is not MECHANISM="),
    ("SCRAM-SHA-256=[name=a]", "needs name= and password="),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=100]", "4096-16384"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=abc]", "salt is not supported"),
    ("SCRAM-SHA-256=[name=a,password=b,color=red]", "unknown key 'color'"),
])
def test_bad_add_scram_is_refused_readably(spec: str, words: str) -> None:
    with pytest.raises(BootstrapError, match=words):
        parse_add_scram(spec)


def test_the_bootstrap_file_round_trips_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    assert read_bootstrap(str(tmp_path)) == ()
    records = (parse_add_scram("SCRAM-SHA-256=[name=a,password=b]"),
               parse_add_scram("SCRAM-SHA-512=[name=c,password=d]"))
    path = write_bootstrap(str(tmp_path), records)
    assert read_bootstrap(str(tmp_path)) == records
    Path(path).write_bytes(Path(path).read_bytes()[:-3])
    with pytest.raises(BootstrapError, match="truncated"):
        read_bootstrap(str(tmp_path))


def _controller(node_id: int, records: tuple[UserScramCredentialRecord, ...],
                log: FakeLog) -> QuorumController:
    return QuorumController(node_id, ControllerConfig(cluster_id="c", bootstrap_records=records),
                            log)


def test_the_first_active_controller_writes_the_records_once() -> None:
    records = (parse_add_scram("SCRAM-SHA-256=[name=broker,password=s]"),)
    log = FakeLog(end=1)
    first = _controller(1, records, log)
    standby = _controller(2, records, FakeLog())
    first.handle_leader_change(LeaderAndEpoch(1, 1))
    standby.handle_leader_change(LeaderAndEpoch(1, 1))
    for controller in (first, standby):
        controller.handle_commit(control_batch(0, 1))
    assert first.role is ControllerRole.ACTIVE
    first.tick(0)
    first.tick(1)  # the marker is in the uncommitted image: not again
    written = [decode_record(v) for _, values in log.proposed for v in values]
    assert written == [FeatureLevelRecord(BOOTSTRAP_FEATURE, 1), *records]
    commit_all(log, 1, first, standby)
    assert standby.committed_image.scram_credential("broker", "SCRAM-SHA-256") is not None

    # An admin deletes the credential; the next leader does not write it again.
    first.submit(AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion("broker", ScramMechanism.SCRAM_SHA_256),)), 2)
    commit_all(log, 1, first, standby)
    standby.handle_leader_change(LeaderAndEpoch(2, 2))
    standby.handle_commit(control_batch(log.end, 2))
    assert standby.role is ControllerRole.ACTIVE
    proposed_before = len(log.proposed)
    standby.tick(3)
    assert len(log.proposed) == proposed_before
    assert standby.committed_image.scram_credential("broker", "SCRAM-SHA-256") is None


def test_without_bootstrap_records_nothing_is_written() -> None:
    log = FakeLog(end=1)
    controller = _controller(1, (), log)
    controller.handle_leader_change(LeaderAndEpoch(1, 1))
    controller.handle_commit(control_batch(0, 1))
    controller.tick(0)
    assert log.proposed == []
