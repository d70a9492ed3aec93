"""data_plane.storage_format: meta.properties, format and the start-up check."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_plane.cli import main
from data_plane.config import NodeConfig, parse_config
from data_plane.storage_format import (
    AlreadyFormattedError,
    StorageError,
    StorageMismatchError,
    StorageNotFormattedError,
    check_formatted,
    format_storage,
    random_uuid,
    read_meta_properties,
    validate_cluster_id,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def make_config(tmp_path: Path, node_id: int = 1, *, metadata_dir: bool = True) -> NodeConfig:
    props = {
        "node.id": str(node_id),
        "process.roles": "controller",
        "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094",
        "listeners": f"CONTROLLER://127.0.0.1:{9092 + node_id}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": f"{tmp_path}/a,{tmp_path}/b",
    }
    if metadata_dir:
        props["metadata.log.dir"] = f"{tmp_path}/meta"
    return parse_config(props, {})


def test_format_writes_meta_properties_in_every_dir(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    written = format_storage(config, CLUSTER)
    assert sorted(written) == sorted(f"{tmp_path}/{d}" for d in ("a", "b", "meta"))
    ids = set()
    for directory in written:
        meta = read_meta_properties(directory)
        assert meta is not None
        assert (meta.cluster_id, meta.node_id) == (CLUSTER, 1)
        ids.add(meta.directory_id)
        text = (Path(directory) / "meta.properties").read_text()
        assert "version=1" in text
        assert not (Path(directory) / "meta.properties.tmp").exists()
    assert len(ids) == 3  # one directory.id per directory
    assert check_formatted(config) == CLUSTER


def test_reformat_is_refused_unless_ignore_formatted(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    format_storage(config, CLUSTER)
    before = (tmp_path / "a" / "meta.properties").read_text()
    with pytest.raises(AlreadyFormattedError, match="already formatted"):
        format_storage(config, random_uuid())
    assert format_storage(config, CLUSTER, ignore_formatted=True) == []
    assert (tmp_path / "a" / "meta.properties").read_text() == before


def test_ignore_formatted_formats_only_the_new_dirs(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, metadata_dir=False), CLUSTER)
    assert format_storage(make_config(tmp_path), CLUSTER, ignore_formatted=True) == [
        f"{tmp_path}/meta"
    ]


def test_unformatted_dir_refuses_to_start(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    with pytest.raises(StorageNotFormattedError, match="is not formatted"):
        check_formatted(config)
    format_storage(config, CLUSTER)
    (tmp_path / "b" / "meta.properties").unlink()  # a wiped disk (KAFKA-14077)
    with pytest.raises(StorageNotFormattedError, match=f"{tmp_path}/b is not formatted"):
        check_formatted(config)


def test_other_node_or_cluster_refuses_to_start(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, node_id=1), CLUSTER)
    with pytest.raises(StorageMismatchError, match=r"belongs to node\.id 1"):
        check_formatted(make_config(tmp_path, node_id=2))
    with pytest.raises(StorageMismatchError, match="belongs to cluster"):
        check_formatted(make_config(tmp_path), cluster_id=random_uuid())


def test_directories_disagreeing_on_cluster_refuse_to_start(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    format_storage(config, CLUSTER)
    meta = tmp_path / "b" / "meta.properties"
    meta.write_text(meta.read_text().replace(CLUSTER, random_uuid()))
    with pytest.raises(StorageMismatchError, match="belongs to cluster"):
        check_formatted(config)


def test_malformed_meta_properties(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    format_storage(config, CLUSTER)
    (tmp_path / "a" / "meta.properties").write_text("version=9\n")
    with pytest.raises(StorageError, match="unsupported version"):
        check_formatted(config)
    (tmp_path / "a" / "meta.properties").write_text("version=1\ncluster.id=x\n")
    with pytest.raises(StorageError, match="malformed"):
        check_formatted(config)


@pytest.mark.parametrize("bad", ["", "abc", "not a uuid at all!!!!!", "MkU3OEVBNTcwNTJENDM2Qk=="])
def test_cluster_id_must_be_a_base64_uuid(bad: str) -> None:
    with pytest.raises(StorageError, match="not a base64url UUID"):
        validate_cluster_id(bad)


def test_random_uuid_is_a_valid_cluster_id() -> None:
    ids = {random_uuid() for _ in range(20)}
    assert len(ids) == 20
    for value in ids:
        validate_cluster_id(value)


def _controller_config(tmp_path: Path) -> Path:
    """A one-node controller's server.properties under ``tmp_path``."""
    config_file = tmp_path / "server.properties"
    config_file.write_text(
        "node.id=1\nprocess.roles=controller\n"
        "controller.quorum.voters=1@127.0.0.1:9093\n"
        "listeners=CONTROLLER://127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path}/data\n"
    )
    return config_file


def test_cli_format_and_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = _controller_config(tmp_path)
    args = ["storage", "format", "--cluster-id", CLUSTER, "--config", str(config_file)]
    assert main(args) == 0
    assert "Formatting" in capsys.readouterr().out
    assert main(args) == 2
    assert "already formatted" in capsys.readouterr().err
    assert main([*args, "--ignore-formatted"]) == 0
    assert main(["storage", "format", "--cluster-id", "bad", "--config", str(config_file)]) == 2
    assert "not a base64url UUID" in capsys.readouterr().err
    assert main(["storage", "random-uuid"]) == 0
    validate_cluster_id(capsys.readouterr().out.strip())


def test_cli_server_start_refuses_unformatted_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = _controller_config(tmp_path)
    assert main(["server", "start", str(config_file)]) == 2
    assert "is not formatted" in capsys.readouterr().err
    config_file.write_text("node.id=1\n")
    assert main(["server", "start", str(config_file)]) == 2
    assert "invalid configuration: process.roles: is required" in capsys.readouterr().err


def test_cli_server_start_refuses_an_unknown_event_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = _controller_config(tmp_path)
    monkeypatch.setenv("RAFTLOG_EVENT_LOOP", "tokio")
    assert main(["server", "start", str(config_file)]) == 2
    assert "RAFTLOG_EVENT_LOOP must be auto, uvloop or asyncio" in capsys.readouterr().err


def test_cli_storage_info_shows_the_dirs_and_their_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-storage.sh info: exit 1 while the node could not start."""
    config_file = _controller_config(tmp_path)
    assert main(["storage", "info", "--config", str(config_file)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "Found no log directories.", "", "Found problem:", f"  {tmp_path}/data does not exist"]
    (tmp_path / "data").mkdir()
    assert main(["storage", "info", "-c", str(config_file)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == f"  {tmp_path}/data is not formatted."
    assert main(["storage", "format", "--cluster-id", CLUSTER, "--config", str(config_file)]) == 0
    capsys.readouterr()
    assert main(["storage", "info", "-c", str(config_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["Found log directories:", f"  {tmp_path}/data"]
    assert out[3].startswith(f"Found metadata in {tmp_path}/data: {{cluster.id={CLUSTER}, "
                             "directory.id=")
    assert out[3].endswith(", node.id=1, version=1}")
    config_file.write_text(config_file.read_text().replace("node.id=1", "node.id=2")
                           .replace("1@127", "2@127"))
    assert main(["storage", "info", "-c", str(config_file)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  {tmp_path}/data belongs to node.id 1, but node.id is 2")
