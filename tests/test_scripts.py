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
    for pkg in ("pytest_ecdysis", "pytest_ecdysis_tau2"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pip ]; then echo "$@" >> pip.log; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    return tmp_path


def _setup(project: Path) -> tuple[str, list[str]]:
    proc = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=project, capture_output=True, text=True, timeout=60
    )
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


def _test_sh(project: Path, *args: str) -> list[str]:
    """The pytest arguments `scripts/test.sh ARGS` passes (a stand-in setup.sh and .venv python echo them)."""
    (project / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "test.sh", project / "scripts" / "test.sh")
    (project / "scripts" / "setup.sh").write_text("#!/bin/sh\nexit 0\n")
    (project / "scripts" / "setup.sh").chmod(0o755)
    (project / "scripts" / "checks.sh").write_text("#!/bin/sh\necho CHECKS\n")
    (project / "scripts" / "checks.sh").chmod(0o755)
    python = project / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    python.chmod(0o755)
    (project / "tests").mkdir(exist_ok=True)
    (project / "tests" / "test_x.py").write_text("")
    proc = subprocess.run(
        ["bash", "scripts/test.sh", *args], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_test_sh_runs_the_paths_it_is_given_else_everything(tmp_path: Path) -> None:
    """`./scripts/test.sh tests/test_x.py` collected the whole suite (it always passed `tests`): test paths
    among the arguments replace it; no argument, or options only (even `-k tests`), still run `tests`,
    after the static checks (scripts/checks.sh), which a run of named paths skips."""
    assert _test_sh(tmp_path) == ["CHECKS", "-m", "pytest", "tests", "-n", "2", "-q"]
    assert _test_sh(tmp_path, "tests/test_x.py") == ["-m", "pytest", "-n", "2", "-q", "tests/test_x.py"]
    assert _test_sh(tmp_path, "-n", "0", "tests/test_x.py::test_a", "-x") == [
        "-m",
        "pytest",
        "-n",
        "2",
        "-q",
        "-n",
        "0",
        "tests/test_x.py::test_a",
        "-x",
    ]
    assert _test_sh(tmp_path, "-k", "tests", "-x") == [
        "CHECKS",
        "-m",
        "pytest",
        "tests",
        "-n",
        "2",
        "-q",
        "-k",
        "tests",
        "-x",
    ]
    assert "tests" in _test_sh(tmp_path, "--ecdysis-tasks", "1,2")
