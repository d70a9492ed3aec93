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
    ["delete-records", "--offset-json-file", "nowhere.json"],
    ["leader-election", "--election-type", "preferred", "--all-topic-partitions"],
    ["reassign-partitions", "--list"],
    ["transactions", "list"],
    ["cluster", "unregister", "--id", "9"],
    ["cluster", "cluster-id"],
    ["broker-api-versions"],
    ["producer-perf-test", "--topic", "t", "--num-records", "1", "--record-size", "1",
     "--throughput", "-1"],
    ["consumer-perf-test", "--topic", "t", "--messages", "1"],
    ["produce", "--topic", "t"],
    ["consume", "--topic", "t"],
    ["consume", "--topic", "t", "--group", "g"],
    ["groups", "list"],
    ["groups", "describe", "g"],
    ["groups", "reset-offsets", "g", "--all-topics", "--to-earliest"],
    ["groups", "delete", "g"],
    ["groups", "delete-offsets", "g", "--topic", "t"],
    # The same, as Kafka's tools spell them.
    ["topics", "--list"],
    ["configs", "--describe", "--entity-type", "topics", "--entity-name", "t"],
    ["groups", "--list"],
    ["groups", "--describe", "--group", "g"],
    ["groups", "--reset-offsets", "--group", "g", "--all-topics", "--to-current"],
    ["groups", "--delete", "--group", "g", "--group", "h"],
    ["groups", "--delete-offsets", "--group", "g", "--topic", "t:0"],
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


@pytest.mark.parametrize(("argv", "error"), [
    (["topics"], "an action is needed: one of create, list, describe, alter, delete "
                 "(or --create, --list, --describe, --alter, --delete)"),
    (["topics", "list", "--describe"], "two actions given: list and --describe"),
    (["configs", "--describe", "--entity-name", "t"],
     "--entity-name and --entity-default need --entity-type"),
    (["configs", "--describe", "--entity-type", "topics", "--entity-default"],
     "--entity-default does not apply to --entity-type topics"),
    (["configs", "--alter", "--entity-type", "brokers", "--add-config", "a=b"],
     "give an --entity-name or --entity-default for each --entity-type"),
    (["configs", "--describe", "--entity-type", "topics", "--entity-type", "users"],
     "only --entity-type users and clients go together"),
    (["configs", "--describe", "--entity-type", "topics", "--entity-name", "t", "--topic", "t"],
     "give --entity-type or --topic/--broker/--client/--user/--ip, not both"),
    (["groups"], "one action is needed: --list, --describe, --delete, --reset-offsets, "
                 "--delete-offsets (or groups list|describe|reset-offsets|delete|delete-offsets)"),
    (["groups", "--describe"], "--describe needs --group G or --all-groups"),
    (["groups", "--describe", "--group", "g", "--all-groups"],
     "give --group or --all-groups, not both"),
    (["groups", "--describe", "--group", "g", "--members", "--offsets"],
     "--describe takes at most one of --members, --offsets, --state"),
    (["groups", "--describe", "--group", "g", "--state", "Stable"],
     "--describe --state takes no value (got 'Stable')"),
    (["groups", "--describe", "--group", "g", "--topic", "t"], "--describe takes no --topic"),
    (["groups", "--list", "--group", "g"], "--list takes no --group, --all-groups or --topic"),
    (["groups", "--delete", "--group", "g", "--topic", "t"],
     "--delete deletes whole groups; for a topic's offsets use --delete-offsets --group G "
     "--topic T"),
    (["groups", "--delete-offsets", "--group", "g"], "--delete-offsets needs --topic T[:P,...]"),
    (["groups", "--delete-offsets", "--group", "g", "--group", "h", "--topic", "t"],
     "--delete-offsets needs one --group"),
    (["groups", "--delete", "--group", "g", "--execute"],
     "--execute, --dry-run and --export go with --reset-offsets"),
    (["groups", "--reset-offsets", "--group", "g", "--all-topics"],
     "--reset-offsets needs exactly one of --to-earliest, --to-latest, --to-offset, "
     "--shift-by, --to-datetime, --to-current, --by-duration, --from-file"),
    (["groups", "--reset-offsets", "--group", "g", "--to-earliest"],
     "--reset-offsets needs --topic T[:P,...] or --all-topics"),
    (["groups", "--reset-offsets", "--group", "g", "--all-topics", "--to-earliest",
      "--execute", "--dry-run"], "give --execute or --dry-run, not both"),
    (["groups", "--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "PT"],
     "--by-duration 'PT': expected an ISO-8601 duration such as PT1H30M or P1DT12H "
     "(PnDTnHnMn.nS)"),
    (["groups", "--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
     "--to-datetime 'yesterday': expected YYYY-MM-DDTHH:mm:SS.sss"),
])
def test_kafka_tool_spellings_refused_with_one_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """topics, configs and groups in Kafka's tools' spelling: each is refused
    before a client connects (the port has no listener)."""
    assert main([*argv, "--bootstrap-server", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"raftlog: {error}"]


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1H30M", 5_400_000), ("P1D", 86_400_000), ("P1DT12H", 129_600_000), ("PT0.5S", 500),
    ("pt15m", 900_000), ("PT-10S", -10_000), ("-PT1M", -60_000), ("PT1.25S", 1_250),
])
def test_by_duration_reads_iso_8601_as_java_does(text: str, ms: int) -> None:
    from data_plane.groups_cli import _parse_duration_ms

    assert _parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "1H", "P1H", "PT1D", "P1Y", ""])
def test_by_duration_refuses_what_java_refuses(text: str) -> None:
    from data_plane.admin_cli import CliError
    from data_plane.groups_cli import _parse_duration_ms

    with pytest.raises(CliError, match="ISO-8601 duration"):
        _parse_duration_ms(text)


def test_to_datetime_without_a_zone_is_utc() -> None:
    from data_plane.groups_cli import _parse_datetime

    assert _parse_datetime("1970-01-01T00:00:01.500") == 1_500
    assert _parse_datetime("1970-01-01T01:00:00.000+01:00") == 0
    assert _parse_datetime("1970-01-01T00:00:00.000Z") == 0


def test_a_reset_file_takes_kafka_export_lines(tmp_path: Path) -> None:
    from data_plane.admin_cli import CliError
    from data_plane.groups.model import TopicPartition
    from data_plane.groups_cli import _read_reset_file

    one = tmp_path / "one.csv"
    one.write_text("t,0,5\nt,1,7\n")
    assert _read_reset_file(str(one), ["g"]) == {
        "g": {TopicPartition("t", 0): 5, TopicPartition("t", 1): 7}}
    several = tmp_path / "several.csv"
    several.write_text("g,t,0,5\n\nh,u,2,9\n")
    assert _read_reset_file(str(several), ["g", "h"]) == {
        "g": {TopicPartition("t", 0): 5}, "h": {TopicPartition("u", 2): 9}}
    with pytest.raises(CliError, match="no reset plan for group x"):
        _read_reset_file(str(several), ["g", "x"])
    with pytest.raises(CliError, match="line 1: expected group,topic,partition,offset"):
        _read_reset_file(str(one), ["g", "h"])
    bad = tmp_path / "bad.csv"
    bad.write_text("t,zero,5\n")
    with pytest.raises(CliError, match="line 1: expected topic,partition,offset or"):
        _read_reset_file(str(bad), ["g"])


def test_leader_election_json_file_is_kafkas(tmp_path: Path) -> None:
    from data_plane.admin_cli import CliError, _election_partitions

    path = tmp_path / "e.json"
    path.write_text('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "b", '
                    '"partition": 0}, {"topic": "a", "partition": 3}]}')
    assert _election_partitions(str(path)) == {"a": [1, 3], "b": [0]}
    for text, error in (('{"partitions": []}', "expected"), ("[1]", "expected"), ("{", "JSON"),
                        ('{"partitions": [{"topic": "a"}]}', "needs a topic and a partition"),
                        ('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", '
                         '"partition": 1}]}', "a-1 is listed twice")):
        path.write_text(text)
        with pytest.raises(CliError, match=error):
            _election_partitions(str(path))


@pytest.mark.parametrize("scenario", [["--to-offset", "0"], ["--shift-by", "0"],
                                      ["--to-current"], ["--by-duration", "PT1S"]])
def test_a_reset_scenario_of_zero_counts_as_given(scenario: list[str]) -> None:
    from data_plane.groups_cli import _check_scenario

    args = build_parser("groups").parse_args(
        ["groups", "--reset-offsets", "--group", "g", "--all-topics", *scenario])
    _check_scenario(args)  # no CliError: exactly one scenario


def test_broker_api_versions_lines_are_kafkas() -> None:
    from data_plane.admin_cli import api_version_lines
    from raftlog.net.registry import kio_version_range

    top = kio_version_range(0)[1]
    lines = api_version_lines({0: (3, top + 2), 18: (0, 0), 3: (0, 12), 9999: (1, 2)})
    assert lines[0] == f"Produce(0): 3 to {top + 2} [usable: {top}]"
    assert "ApiVersions(18): 0 [usable: 0]" in lines
    assert "Fetch(1): UNSUPPORTED" in lines
    assert "Vote(52): UNSUPPORTED" not in lines  # a controller listener's API
    assert lines[-1] == "UNKNOWN(9999): 1 to 2"
    keys = [int(line.split("(", 1)[1].split(")", 1)[0]) for line in lines]
    assert keys == sorted(keys)
