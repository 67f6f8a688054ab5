"""The package's import contracts (pyproject.toml [tool.importlinter]; docs/internals.md): stages are layered,
imports only go down, and no package has an import circle among its modules. Run through import-linter's
`lint-imports`, on this tree and on a copy with a deliberately added upward import (the contract must fail
and name the offending line)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_package_keeps_its_import_contracts():
    assert LINT.exists(), "import-linter is in the dev extra: pip install -e '.[dev]'"
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    # an upward import: core (the bottom layer) importing the loop
    ("core/errors.py", "from pytest_ecdysis.evolve import loop  # noqa", "stages are layered"),
    # a circle inside one package: the loop's stage importing the loop back
    ("evolve/stages.py", "from pytest_ecdysis.evolve import loop  # noqa", "no import circle"),
    # the plugin importing τ² or the τ² suite, even lazily inside a function
    ("core/errors.py", "import tau2  # noqa", "never imports tau2"),
    ("gate/baseline.py", "def f():\n    from pytest_ecdysis_tau2 import suite  # noqa", "never imports tau2"),
])
def test_an_added_upward_import_or_circle_breaks_the_contract(tmp_path, module, line, broken):
    shutil.copytree(ROOT / "pytest_ecdysis", tmp_path / "pytest_ecdysis",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "pytest_ecdysis" / module
    target.write_text(target.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout
    # the report names the offending module (and, for a layer break, the line)
    dotted = "pytest_ecdysis." + module.removesuffix(".py").replace("/", ".")
    assert dotted in result.stdout or "." + module.split("/")[1].removesuffix(".py") in result.stdout, result.stdout


def test_an_old_module_path_is_an_import_error_naming_it():
    code = "import pytest_ecdysis.evolve_stages"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "No module named 'pytest_ecdysis.evolve_stages'" in result.stderr


def test_the_public_names_are_the_documented_ones():
    import pytest_ecdysis

    for name in ("record_trial", "TrialResult", "get_state", "hookimpl", "FailureRecord", "ModificationSpec", "UsageError"):
        assert name in pytest_ecdysis.__all__ and hasattr(pytest_ecdysis, name)
    assert pytest_ecdysis.TrialResult.__module__ == "pytest_ecdysis.core.records"
