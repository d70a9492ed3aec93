"""data_plane.broker.clean_shutdown: the broker epoch a clean shutdown leaves
for the next registration (KIP-966's PreviousBrokerEpoch)."""

from __future__ import annotations

import json
from pathlib import Path

from data_plane.broker.clean_shutdown import (
    CLEAN_SHUTDOWN_FILE,
    take_previous_broker_epoch,
    write_clean_shutdown,
)


def test_written_epoch_is_read_once_then_gone(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        Path(d).mkdir()
    write_clean_shutdown(dirs, 42)
    assert json.loads((tmp_path / "a" / CLEAN_SHUTDOWN_FILE).read_text()) == {
        "version": 0, "brokerEpoch": 42}
    assert take_previous_broker_epoch(dirs) == 42
    # Taken: a crash from now on must count as unclean.
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    assert take_previous_broker_epoch(dirs) == -1


def test_a_missing_odd_or_disagreeing_file_is_unclean(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write_clean_shutdown([str(a)], 7)  # b has none: its logs may not have closed
    assert take_previous_broker_epoch([str(a), str(b)]) == -1
    assert not (a / CLEAN_SHUTDOWN_FILE).exists()
    write_clean_shutdown([str(a)], 7)
    write_clean_shutdown([str(b)], 8)
    assert take_previous_broker_epoch([str(a), str(b)]) == -1
    for body in ("not json", '{"version":0}', '{"version":0,"brokerEpoch":-3}',
                 '{"version":0,"brokerEpoch":true}', "[]"):
        (a / CLEAN_SHUTDOWN_FILE).write_text(body)
        assert take_previous_broker_epoch([str(a)]) == -1, body
        assert not (a / CLEAN_SHUTDOWN_FILE).exists()


def test_an_unwritable_directory_is_logged_not_raised(tmp_path: Path) -> None:
    write_clean_shutdown([str(tmp_path / "missing")], 5)
    assert take_previous_broker_epoch([str(tmp_path / "missing")]) == -1
