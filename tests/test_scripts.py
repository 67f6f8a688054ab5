"""scripts/*.sh: setup.sh installs once and skips the install while nothing it depends on changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path) -> Path:
    """A stand-in checkout: the real setup.sh and pyproject.toml, a `.venv/bin/python` that logs pip calls
    (no network) and runs everything else with this Python, and importable stand-ins of the packages."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for pkg in ("pytest_ecdysis", "task_suites", "task_suites/tau2"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pip ]; then echo "$@" >> pip.log; exit 0; fi\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return tmp_path


def _setup(project: Path) -> tuple[str, list[str]]:
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=project, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    log = project / "pip.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return proc.stdout, calls


def test_setup_installs_once_then_skips_until_pyproject_changes(tmp_path: Path) -> None:
    """The first run installs; a second run calls no pip and prints nothing; a changed pyproject.toml or
    FORCE_INSTALL=1 installs again."""
    project = _project(tmp_path)
    out, calls = _setup(project)
    assert "installing" in out and any("install -q -e .[dev]" in c for c in calls)

    out, calls = _setup(project)
    assert (out, calls) == ("", [])

    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + "\n# changed\n")
    out, calls = _setup(project)
    assert any("install -q -e .[dev]" in c for c in calls)
    assert _setup(project) == ("", [])


def test_setup_reinstalls_when_venv_imports_another_checkout(tmp_path: Path) -> None:
    """A .venv whose pytest_ecdysis is not this checkout's (a copied venv) is reinstalled."""
    project = _project(tmp_path)
    _setup(project)
    shutil.rmtree(project / "pytest_ecdysis")
    _, calls = _setup(project)
    assert any("install -q -e .[dev]" in c for c in calls)
