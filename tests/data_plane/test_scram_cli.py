"""data_plane.scram_cli: kafka-configs.sh's SCRAM credential syntax, salted
by the CLI (no cluster: the request it would send)."""

from __future__ import annotations

import pytest

from data_plane.admin_cli import CliError
from data_plane.scram_cli import is_scram_key, scram_request
from raftlog.security.scram import salted_password


def test_upsertions_are_salted_here_and_carry_no_password() -> None:
    request = scram_request("alice", [
        ("SCRAM-SHA-256", "iterations=8192,password=alice,secret"),
        ("SCRAM-SHA-512", "password=alice-secret"),
        ("SCRAM-SHA-512", "iterations=-1,password=p"),  # -1: the default, as kafka-configs.sh
    ], ["SCRAM-SHA-256"])
    first, second, third = request.upsertions
    assert (first.name, int(first.mechanism), int(first.iterations)) == ("alice", 1, 8192)
    assert len(first.salt) == 32 and first.salt != second.salt  # a fresh random salt each
    # Everything after "password=" is the password, commas included.
    assert first.salted_password == salted_password("SCRAM-SHA-256", "alice,secret",
                                                    first.salt, 8192)
    assert (int(second.mechanism), int(second.iterations)) == (2, 4096)
    assert second.salted_password == salted_password("SCRAM-SHA-512", "alice-secret",
                                                     second.salt, 4096)
    assert int(third.iterations) == 4096
    assert [(d.name, int(d.mechanism)) for d in request.deletions] == [("alice", 1)]


def test_an_out_of_range_count_is_sent_unsalted_for_the_controller_to_refuse() -> None:
    for count in (100, 16385, 2**31 - 1):
        (upsertion,) = scram_request("u", [("SCRAM-SHA-256", f"iterations={count},password=p")],
                                     []).upsertions
        assert int(upsertion.iterations) == count and upsertion.salted_password == b""


@pytest.mark.parametrize("value", [
    "iterations=x,password=hunter2", "pass=hunter2", "iterations=8192", "hunter2",
    "iterations=8192;password=hunter2",
])
def test_a_bad_credential_is_refused_without_echoing_the_password(value: str) -> None:
    with pytest.raises(CliError) as raised:
        scram_request("u", [("SCRAM-SHA-256", value)], [])
    assert "hunter2" not in str(raised.value)


def test_only_kafkas_mechanism_names_are_scram_keys() -> None:
    assert is_scram_key("SCRAM-SHA-256") and is_scram_key("SCRAM-SHA-512")
    assert not is_scram_key("scram-sha-256") and not is_scram_key("producer_byte_rate")
