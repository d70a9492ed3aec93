"""raftlog.runtime.quorum_state_store: Kafka's quorum-state file, durable and strict."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from raftlog.consensus.roles import ElectionState
from raftlog.runtime.quorum_state_store import (
    QUORUM_STATE_FILE,
    CorruptQuorumStateError,
    QuorumStateStore,
)
from raftlog.testing.disk import FakeFileSystem


def _store(tmp_path: Path) -> QuorumStateStore:
    return QuorumStateStore(str(tmp_path), voters=[1, 2, 3], cluster_id="abc")


def test_missing_file_reads_as_no_state(tmp_path: Path) -> None:
    assert _store(tmp_path).read() is None


@pytest.mark.parametrize(
    "state",
    [
        ElectionState(0),
        ElectionState(5, leader_id=2),
        ElectionState(6, voted_id=3),
        ElectionState(7, leader_id=1, voted_id=1),
        ElectionState(8, recovering=True),
    ],
)
def test_write_then_read_round_trips(tmp_path: Path, state: ElectionState) -> None:
    store = _store(tmp_path)
    store.write(state)
    assert _store(tmp_path).read() == state
    assert not (tmp_path / (QUORUM_STATE_FILE + ".tmp")).exists()


def test_file_has_kafkas_quorum_state_data_fields(tmp_path: Path) -> None:
    _store(tmp_path).write(ElectionState(5, leader_id=2))
    document = json.loads((tmp_path / QUORUM_STATE_FILE).read_text())
    assert document == {
        "clusterId": "abc",
        "leaderId": 2,
        "leaderEpoch": 5,
        "votedId": -1,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }


def test_reads_a_file_written_by_kafka(tmp_path: Path) -> None:
    # The shape Kafka 3.x writes (FileQuorumStateStore, data_version 0).
    (tmp_path / QUORUM_STATE_FILE).write_text(
        '{"clusterId":"","leaderId":-1,"leaderEpoch":12,"votedId":3,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert _store(tmp_path).read() == ElectionState(12, voted_id=3)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "not JSON"),
        (b'{"leaderId":1,"leaderEp', "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1,2]", "not a JSON object"),
        (b'{"leaderId":1,"votedId":-1}', "missing leaderEpoch"),
        (b'{"leaderId":1,"leaderEpoch":"5","votedId":-1}', "not an integer"),
        (b'{"leaderId":true,"leaderEpoch":5,"votedId":-1}', "not an integer"),
        (b'{"leaderId":1,"leaderEpoch":-2,"votedId":-1}', "negative leaderEpoch"),
        (b'{"leaderId":-7,"leaderEpoch":2,"votedId":-1}', "neither a node id"),
        (b'{"leaderId":9,"leaderEpoch":2,"votedId":-1}', "not a voter"),
        (b'{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":7}', "data_version"),
        (b'{"leaderId":1,"leaderEpoch":99999999999,"votedId":-1}', "int32"),
    ],
)
def test_corrupt_file_raises_never_reads_as_empty(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    (tmp_path / QUORUM_STATE_FILE).write_bytes(content)
    with pytest.raises(CorruptQuorumStateError, match=reason) as info:
        _store(tmp_path).read()
    assert info.value.path == os.path.join(str(tmp_path), QUORUM_STATE_FILE)


def test_writing_a_non_voter_leader_is_a_caller_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a voter"):
        _store(tmp_path).write(ElectionState(1, leader_id=9))
    assert _store(tmp_path).read() is None


def test_a_crash_keeps_the_last_completed_write() -> None:
    fs = FakeFileSystem()
    fs.make_dirs("/d")
    store = QuorumStateStore("/d", voters=[1, 2, 3], fs=fs)
    store.write(ElectionState(4, voted_id=2))
    store.write(ElectionState(5, leader_id=3))
    fs.crash()
    assert QuorumStateStore("/d", voters=[1, 2, 3], fs=fs).read() == ElectionState(5, leader_id=3)
