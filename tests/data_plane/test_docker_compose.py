"""docker-compose.yml and the image's entry point use only what the node accepts.

No Docker engine runs on these machines, so the compose file is checked
three ways: `docker-compose config -q` (Debian's docker-compose) when it is
installed, every RAFTLOG_* variable maps to a real server.properties name and
each service's environment is a valid node configuration, and every raftlog
command the entry point runs parses with the real CLI.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from data_plane import config as node_config
from data_plane.cli import build_parser
from data_plane.storage_format import validate_cluster_id

ROOT = Path(__file__).resolve().parents[2]


def _services() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services: dict[str, dict[str, Any]] = doc["services"]
    return services


def _nodes() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items()
            if "RAFTLOG_NODE_ID" in s.get("environment", {})}


def test_docker_compose_config_is_valid() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (apt-get install --no-install-recommends docker-compose)")
    run = subprocess.run([exe, "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_three_combined_nodes_with_ids_1_to_3_and_one_volume_each() -> None:
    nodes = _nodes()
    assert sorted(s["environment"]["RAFTLOG_NODE_ID"] for s in nodes.values()) == ["1", "2", "3"]
    volumes = [v for s in nodes.values() for v in s["volumes"]]
    assert len(set(volumes)) == 3
    for s in nodes.values():
        assert s["environment"]["RAFTLOG_PROCESS_ROLES"] == "broker,controller"
        assert s["ports"], "Kafka ports are published"


def test_every_raftlog_variable_is_a_setting_the_node_knows() -> None:
    known = {node_config.env_name(name) for name in node_config.KNOWN_SETTINGS}
    for name, service in _services().items():
        for var in service.get("environment", {}):
            if var.startswith(node_config.ENV_PREFIX):
                assert var in known, f"{name}: {var} maps to no server.properties setting"


def test_each_node_environment_is_a_valid_configuration(tmp_path: Path) -> None:
    for name, service in _nodes().items():
        env = {k: str(v) for k, v in service["environment"].items()}
        env["RAFTLOG_LOG_DIRS"] = str(tmp_path / name)  # the container path, relocated
        parsed = node_config.parse_config({}, env)
        assert parsed.node_id == int(env["RAFTLOG_NODE_ID"])
        assert {v.node_id for v in parsed.voters} == {1, 2, 3}
        validate_cluster_id(env["CLUSTER_ID"])


def test_entrypoint_runs_only_real_raftlog_commands() -> None:
    script = (ROOT / "docker" / "entrypoint.sh").read_text()
    commands = [line.strip() for line in script.splitlines()
                if re.match(r"\s*(exec\s+)?raftlog\s", line)]
    assert len(commands) == 2, commands
    parser = build_parser()
    for line in commands:
        argv = shlex.split(line.replace('"$CLUSTER_ID"', "4L6g3nShT-eMCtK--X86sw")
                           .replace('"$CONFIG"', "/etc/raftlog/server.properties"))
        if argv[0] == "exec":
            argv = argv[1:]
        parser.parse_args(argv[1:])  # exits (fails the test) on an unknown command or flag


def test_dockerfile_uses_the_entrypoint_and_python_311_slim() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert "docker/entrypoint.sh" in dockerfile and 'ENTRYPOINT ["raftlog-entrypoint"]' in dockerfile


def test_the_optional_spark_job_runs_the_example_against_the_nodes() -> None:
    spark = _services()["spark-job"]
    assert spark["profiles"] == ["spark"], "off unless asked for (--profile spark)"
    assert (ROOT / spark["build"]["dockerfile"]).exists()
    script, *args = spark["command"]
    example = ROOT / script
    assert example.exists()
    source = example.read_text()
    flags = [a for a in args if a.startswith("--")]
    assert flags and all(f'"{flag}"' in source for flag in flags), "flags the example accepts"
    servers = args[args.index("--bootstrap-servers") + 1].split(",")
    assert {s.split(":")[0] for s in servers} == set(_nodes())
    dockerfile = (ROOT / spark["build"]["dockerfile"]).read_text()
    assert "openjdk-17-jre-headless" in dockerfile and '".[spark]"' in dockerfile
