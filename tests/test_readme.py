"""The README's docs check (issue 9 section 5: "every command in it is run by
a test, or by a docs check in CI").

- its first lines: the title, then exactly ``python3 dev.py up`` and
  ``python3 dev.py test``;
- every ``raftlog ...`` line in a code block parses with the real CLI parser
  (`data_plane.cli.build_parser`; ``chaos`` arguments with `chaos.cli`'s);
  nothing is run;
- the configuration table lists exactly `data_plane.config.KNOWN_SETTINGS`,
  with the defaults `NodeConfig` really has; the topic-config table names
  only configs the broker knows, with their defaults;
- every relative link points at a file that exists, every ``#anchor`` at a
  heading;
- every Python example compiles.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from chaos.cli import build_parser as chaos_parser
from chaos.generator import FAULT_KINDS
from data_plane import config as node_config
from data_plane.broker.log_configs import TOPIC_CONFIG_DEFAULTS
from data_plane.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")

_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)


def code_blocks() -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, indentation removed."""
    return [(lang, textwrap.dedent(body)) for _, lang, body in _FENCE.findall(TEXT)]


def raftlog_commands() -> list[str]:
    """Every command line in a non-Python code block that runs ``raftlog``
    (after a ``$`` prompt, a path such as ``.venv/bin/``, or a pipe)."""
    commands = []
    for lang, body in code_blocks():
        if lang == "python":
            continue
        for line in body.replace("\\\n", " ").splitlines():  # backslash continuations
            line = line.strip().removeprefix("$ ")
            for part in line.split("|"):
                words = shlex.split(part)
                if words and Path(words[0]).name == "raftlog":
                    commands.append(shlex.join(words))
    return commands


def section(title: str) -> str:
    """The text of a ``#``-heading section, up to the next heading of any level."""
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#)", TEXT, re.MULTILINE | re.DOTALL)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row in ``text`` (header and rule skipped)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))])
    return rows[1:] if rows else rows


def first_code(cell: str) -> str:
    match = re.match(r"`([^`]+)`", cell)
    assert match, f"no `name` in table cell {cell!r}"
    return match.group(1)


def test_starts_with_the_two_commands() -> None:
    assert TEXT.startswith("# raftlog\n\n```\npython3 dev.py up\npython3 dev.py test\n```\n")


def test_there_are_commands_to_check() -> None:
    commands = raftlog_commands()
    assert len(commands) >= 10
    for needed in ("cluster up", "cluster status", "cluster down", "chaos run", "chaos soak"):
        assert any(f"raftlog {needed}" in c for c in commands), needed


@pytest.mark.parametrize("command", raftlog_commands())
def test_command_parses(command: str) -> None:
    argv = shlex.split(command)[1:]
    args = build_parser().parse_args(argv)  # SystemExit(2) on anything it rejects
    assert callable(args.func)
    if argv[0] == "chaos":
        chaos_args = chaos_parser().parse_args(args.chaos_args)
        assert set(chaos_args.nemesis.split(",")) <= set(FAULT_KINDS)


def test_nemeses_named_exist() -> None:
    text = section("Chaos testing")
    named = re.search(r"\*\*Nemeses\*\*(.*?)A fault starts", text, re.DOTALL)
    assert named
    kinds = re.findall(r"`([a-z][a-z-]*)`", named.group(1))
    assert set(kinds) == set(FAULT_KINDS)


def test_bench_commands_use_real_options() -> None:
    lines = [line for lang, body in code_blocks() if lang != "python"
             for line in body.splitlines() if line.startswith(".venv/bin/python bench/")]
    assert len(lines) == 6
    for line in lines:
        script, *options = shlex.split(line)[1:]
        source = (ROOT / script).read_text(encoding="utf-8")
        for option in options:
            if option.startswith("--"):
                assert f'"{option}"' in source, f"{script} has no option {option}"


def test_config_table_is_every_setting() -> None:
    rows = table_rows(section("Configuration").split("### ")[0])
    names = [first_code(row[0]) for row in rows]
    assert len(names) == len(set(names)), "a setting is listed twice"
    assert set(names) == set(node_config.KNOWN_SETTINGS) | node_config.LISTENER_SETTINGS


def test_config_defaults_match_node_config() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(node_config.NodeConfig)}
    rows = {first_code(row[0]): row[1] for row in table_rows(section("Configuration"))}
    checked = 0
    for setting, (field_name, _) in node_config._SIMPLE.items():
        default = defaults[field_name]
        shown = rows[setting].split()[0]
        expected = str(default).lower() if isinstance(default, bool) else str(default)
        assert shown == expected, f"{setting}: README says {shown}, NodeConfig has {default}"
        checked += 1
    assert checked == len(node_config._SIMPLE)


def test_env_form_is_the_real_one() -> None:
    assert "`RAFTLOG_<NAME>`" in TEXT
    assert node_config.env_name("node.id") == "RAFTLOG_NODE_ID"
    assert "`RAFTLOG_NODE_ID=2` sets `node.id`" in TEXT


def test_topic_config_table() -> None:
    rows = table_rows(section("Topic configs"))
    assert rows
    for row in rows:
        name = first_code(row[0])
        assert name in TOPIC_CONFIG_DEFAULTS, f"{name} is not a topic config the broker knows"
        default = TOPIC_CONFIG_DEFAULTS[name]
        if name in ("flush.messages", "flush.ms", "max.compaction.lag.ms",
                    "message.timestamp.before.max.ms"):
            assert default == str((1 << 63) - 1) and row[1].startswith("2^63-1")
        elif default == "":
            assert row[1] == "(none)", f"{name}: README {row[1]}, broker has no default"
        elif name not in ("min.insync.replicas", "unclean.leader.election.enable"):
            assert row[1].split()[0] == default, f"{name}: README {row[1]}, broker {default}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_resolve() -> None:
    headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", TEXT, re.MULTILINE)}
    links = re.findall(r"\]\(([^)\s]+)\)", TEXT)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        if path:
            target = (README.parent / path).resolve()
            assert target.is_relative_to(ROOT), f"{link} points outside the repository"
            assert target.exists(), f"{link}: no such file"
        elif anchor:
            assert anchor in headings, f"#{anchor}: no such heading"


def test_named_files_exist() -> None:
    """Files named in code spans or commands (``bench/x.py``, ``docs/x.md``...)."""
    named = set(re.findall(r"\b((?:bench|docs|examples|chaos|data_plane|spark_sink|tests)"
                           r"/[\w./-]+\.(?:py|md|png))\b", TEXT))
    named |= {"Dockerfile", "docker-compose.yml", "dev.py", ".ci/run"}
    assert named
    for name in sorted(named):
        assert (ROOT / name).exists(), f"README names {name}, which does not exist"


def test_python_examples_compile() -> None:
    examples = [body for lang, body in code_blocks() if lang == "python"]
    assert len(examples) >= 3
    assert any("from kafka import" in body for body in examples)
    assert any("from confluent_kafka import" in body for body in examples)
    for i, body in enumerate(examples):
        compile(body, f"README.md python example {i + 1}", "exec")
