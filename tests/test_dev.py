"""dev.py's choice of the Python that .venv is built on (`dev.base_python`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wrapper(tmp_path: Path) -> Path:
    """A python3.11 at another path than this one, that runs this one."""
    wrapper = tmp_path / "python3.11"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture
def dev(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv("RAFTLOG_PYTHON", raising=False)
    return _load_dev()


def test_the_distribution_python_is_preferred_when_it_can_make_a_venv(
        dev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Stand-in for /usr/bin/python3.11: a path of its own that runs this
    # interpreter, which the suite's venv proves can make a venv.
    system = _wrapper(tmp_path)
    monkeypatch.setattr(dev, "SYSTEM_PYTHON", system)
    assert dev.base_python() == system != Path(sys.executable)


def test_without_a_distribution_python_the_running_one_is_used(
        dev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dev, "SYSTEM_PYTHON", tmp_path / "no-such-python3.11")
    assert dev.base_python() == Path(sys.executable)


def test_a_distribution_python_that_cannot_make_a_venv_is_passed_over(
        dev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "python3.11"
    fake.write_text("#!/bin/sh\nexit 1\n")  # as one without ensurepip fails the probe
    fake.chmod(0o755)
    monkeypatch.setattr(dev, "SYSTEM_PYTHON", fake)
    assert dev.base_python() == Path(sys.executable)


def test_raftlog_python_names_the_base(
        dev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    chosen = _wrapper(tmp_path)
    monkeypatch.setattr(dev, "SYSTEM_PYTHON", Path(sys.executable))  # passed over
    monkeypatch.setenv("RAFTLOG_PYTHON", str(chosen))
    assert dev.base_python() == chosen


def test_raftlog_python_that_is_not_a_usable_python_stops_set_up_with_the_reason(
        dev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAFTLOG_PYTHON", str(tmp_path / "python9"))
    with pytest.raises(SystemExit) as stopped:
        dev.base_python()
    assert "RAFTLOG_PYTHON" in str(stopped.value)
    assert "not a Python 3.11 with venv and ensurepip" in str(stopped.value)


def test_the_venv_base_is_read_from_pyvenv_cfg(
        dev: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dev, "VENV", tmp_path)
    assert dev._venv_base() is None  # no venv yet
    (tmp_path / "pyvenv.cfg").write_text(
        "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n"
        "executable = /usr/bin/python3.11\ncommand = /usr/bin/python3.11 -m venv /x/.venv\n")
    assert dev._venv_base() == "/usr/bin/python3.11"
