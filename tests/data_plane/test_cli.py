"""The `raftlog` CLI: what a user sees."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from data_plane.cli import build_parser, main


def test_demo_recovers_a_torn_tail_and_reads_every_record_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--dir", str(tmp_path), "--batches", "20", "--records-per-batch", "8",
                 "--segment-bytes", "65536", "--torn-tail"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "appended 160 records in 20 batches" in out
    assert "recovered by scanning" in out
    assert "read back 160 records in 20 batches: OK" in out


def test_demo_reopens_cleanly_without_rescan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path), "--batches", "3", "--compression", "gzip"]) == 0
    assert "clean shutdown marker found, no rescan" in capsys.readouterr().out


def test_dump_log_prints_batches_and_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path), "--batches", "2", "--records-per-batch", "3",
                 "--compression", "none"]) == 0
    capsys.readouterr()
    segment = sorted(p for p in os.listdir(tmp_path) if p.endswith(".log"))[0]
    assert main(["dump-log", "--print-data-log", str(tmp_path / segment)]) == 0
    out = capsys.readouterr().out
    assert "baseOffset: 0 lastOffset: 2 count: 3" in out
    assert "baseOffset: 3 lastOffset: 5 count: 3" in out
    assert "| offset: 5 " in out and "key: key-1-2" in out


def test_dump_log_reports_a_partial_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path), "--batches", "2", "--compression", "none"]) == 0
    segment = tmp_path / sorted(p for p in os.listdir(tmp_path) if p.endswith(".log"))[0]
    segment.write_bytes(segment.read_bytes()[:-10])
    capsys.readouterr()
    assert main(["dump-log", str(segment)]) == 0
    out = capsys.readouterr().out
    assert "baseOffset: 0 " in out and "bytes of a partial batch at position" in out


def test_unreadable_file_is_one_readable_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log", "/nonexistent/segment.log"]) == 2
    assert capsys.readouterr().err.strip() == "raftlog: cannot read /nonexistent/segment.log: No such file or directory"


def test_bad_compression_name_is_rejected_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--compression", "brotli"])
    assert exc.value.code == 2
    assert "unknown compression 'brotli'" in capsys.readouterr().err


def test_chaos_subcommand_is_found_as_a_plugin_without_data_plane_importing_chaos(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`raftlog chaos ...` reaches chaos/cli.py through the raftlog.commands
    entry point, so data_plane never imports the layer above it."""
    import ast
    from pathlib import Path

    import data_plane.cli

    tree = ast.parse(Path(data_plane.cli.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.split(".")[0] == "chaos" for m in imported)
    with pytest.raises(SystemExit) as exc:
        main(["chaos", "run", "--help"])
    assert exc.value.code == 0
    assert "--nemesis" in capsys.readouterr().out


def test_chaos_help_lists_its_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    """`raftlog chaos -h` is the chaos CLI's help (argparse's REMAINDER used
    to reject a leading option)."""
    with pytest.raises(SystemExit) as exc:
        main(["chaos", "-h"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: raftlog chaos" in out
    assert "soak" in out and "scenario" in out


# --- --command-config -----------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_every_command_with_bootstrap_server_takes_command_config() -> None:
    with_brokers = {path: sub for path, sub in _commands(build_parser())
                    if any("--bootstrap-server" in a.option_strings for a in sub._actions)}
    assert ("groups", "describe") in with_brokers and ("produce",) in with_brokers
    missing = [" ".join(path) for path, sub in with_brokers.items()
               if not any("--command-config" in a.option_strings for a in sub._actions)]
    assert missing == []


# Each broker command, pointed at a port nothing listens on: the command
# config is read (and refused) before any client connects.
BROKER_COMMANDS = [
    ["topics", "list"],
    ["configs", "describe", "--topic", "t"],
    ["configs", "alter", "--user", "bob", "--add-config", "SCRAM-SHA-256=[password=p]"],
    ["quorum", "describe", "--status"],
    ["delete-records", "--topic", "t", "--partition", "0", "--offset", "-1"],
    ["leader-election", "--election-type", "preferred", "--all-topic-partitions"],
    ["reassign-partitions", "--list"],
    ["transactions", "list"],
    ["cluster", "unregister", "--id", "9"],
    ["produce", "--topic", "t"],
    ["consume", "--topic", "t"],
    ["consume", "--topic", "t", "--group", "g"],
    ["groups", "list"],
    ["groups", "describe", "g"],
    ["groups", "reset-offsets", "g", "--all-topics", "--to-earliest"],
    ["groups", "delete", "g"],
]


@pytest.mark.parametrize("command", BROKER_COMMANDS, ids=" ".join)
def test_an_unusable_command_config_is_one_line_and_exit_2(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    code = main([*command, "--bootstrap-server", "127.0.0.1:1", "--command-config", str(config)])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"raftlog: {config}: sasl.mechanism=GSSAPI is not supported "
        "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"]


def test_a_missing_command_config_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    missing = tmp_path / "nowhere.properties"
    assert main(["topics", "list", "--bootstrap-server", "127.0.0.1:1",
                 "--command-config", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"raftlog: --command-config: cannot read {missing}: No such file or directory")


def test_a_command_imports_only_its_own_modules() -> None:
    """`raftlog topics ...` leaves out the group, console, ACL, reassignment
    and transaction modules (a third of a second of every call); `raftlog
    groups ...` gets its own. Checked in fresh interpreters, as a user runs it."""
    import subprocess
    import sys

    probe = ("import sys; from data_plane.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.endswith('_cli')))")

    def loaded(*argv: str) -> str:
        result = subprocess.run([sys.executable, "-c", probe, *argv],
                                capture_output=True, text=True, timeout=60)
        return result.stdout.strip().splitlines()[-1]

    topics = loaded("topics", "describe", "--help")
    assert "data_plane.groups_cli" not in topics and "data_plane.console_cli" not in topics
    assert "data_plane.acls_cli" not in topics and "data_plane.admin_cli" in topics
    groups = loaded("groups", "list", "--help")
    assert "data_plane.groups_cli" in groups and "data_plane.acls_cli" not in groups


@pytest.mark.parametrize("command", ["groups", "produce", "consume", "acls", "transactions",
                                     "reassign-partitions", "topics", "cluster"])
def test_each_command_parses_with_the_parser_built_for_it(command: str) -> None:
    full = build_parser()
    mine = build_parser(command)
    help_of = {c: p.format_help() for c, p in _subcommands(full).items()}
    assert _subcommands(mine)[command].format_help() == help_of[command]


def test_an_unknown_command_is_refused_with_every_command_listed(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["topic", "list"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'topic'" in err
    for command in ("topics", "groups", "produce", "acls", "transactions", "reassign-partitions"):
        assert command in err


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)
