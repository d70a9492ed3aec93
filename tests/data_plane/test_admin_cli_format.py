"""`raftlog quorum describe --status` lines, as kafka-metadata-quorum.sh prints them."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.describe_quorum.v2 import response as dq
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from data_plane.admin_cli import CliError, format_quorum_status, parse_add_config


def _replica(node: int, leo: int, caught_up_ms: int) -> dq.ReplicaState:
    return dq.ReplicaState(
        replica_id=i32(node), replica_directory_id=uuid.UUID(int=0), log_end_offset=i64(leo),
        last_fetch_timestamp=i64(caught_up_ms), last_caught_up_timestamp=i64(caught_up_ms))


def _status(*voters: dq.ReplicaState, leader: int = 1) -> dict[str, str]:
    partition = dq.PartitionData(
        partition_index=i32(0), error_code=ErrorCode.none, error_message=None,
        leader_id=i32(leader), leader_epoch=i32(4), high_watermark=i64(100),
        current_voters=voters, observers=())
    rows = [line.split(":", 1) for line in format_quorum_status("cid", partition)]
    return {k.strip(): v.strip() for k, v in rows}


def test_caught_up_followers_have_zero_lag_time_even_if_their_timestamp_is_newer() -> None:
    # A follower's last caught-up time can be a few ms after the leader's own
    # (the leader stamps its row when it answers): never a negative lag time.
    status = _status(_replica(1, 100, 1_014), _replica(2, 100, 1_000), _replica(3, 100, 1_009),
                     leader=2)
    assert status["MaxFollowerLag"] == "0"
    assert status["MaxFollowerLagTimeMs"] == "0"


def test_lag_and_lag_time_come_from_the_furthest_behind_voter() -> None:
    status = _status(_replica(1, 100, 5_000), _replica(2, 90, 4_200), _replica(3, 97, 4_900))
    assert status["MaxFollowerLag"] == "10"
    assert status["MaxFollowerLagTimeMs"] == "800"
    assert status["CurrentVoters"] == "[1,2,3]"


def test_a_voter_never_heard_from_has_unknown_lag_time() -> None:
    status = _status(_replica(1, 100, 5_000), _replica(2, -1, -1), _replica(3, 100, 5_000))
    assert status["MaxFollowerLag"] == "101"
    assert status["MaxFollowerLagTimeMs"] == "-1"


def test_add_config_takes_kafka_configs_syntax_with_bracketed_lists() -> None:
    assert parse_add_config("retention.ms=1000,cleanup.policy=[delete,compact]") == [
        ("retention.ms", "1000"), ("cleanup.policy", "delete,compact")]
    assert parse_add_config("segment.ms=60000") == [("segment.ms", "60000")]
    for bad in ("retention.ms", "=5", "cleanup.policy=[delete", "a=1]"):
        with pytest.raises(CliError):
            parse_add_config(bad)
