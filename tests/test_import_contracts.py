"""The packages' import contracts (pyproject.toml [tool.importlinter]; docs/internals.md): the plugin's stages
and the τ² suite's rooms are layered, imports only go down, no package has an import circle among its
modules, and harness code never imports the suite's trusted side. Run through import-linter's
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
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_package_keeps_its_import_contracts():
    assert LINT.exists(), "import-linter is in the dev extra: pip install -e '.[dev]'"
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # an upward import: core (the bottom layer) importing the loop
        ("core/errors.py", "from pytest_ecdysis.evolve import loop  # noqa", "stages are layered"),
        # a circle inside one package: the loop's stage importing the loop back
        ("evolve/stages.py", "from pytest_ecdysis.evolve import loop  # noqa", "no import circle"),
        # the plugin importing τ² or the τ² suite, even lazily inside a function
        ("core/errors.py", "import tau2  # noqa", "never imports tau2"),
        (
            "gate/baseline.py",
            "def f():\n    from pytest_ecdysis_tau2 import suite  # noqa",
            "never imports tau2",
        ),
        # the τ² suite (paths from the checkout's root): its bottom room (τ² loaded) importing the trial above
        # it, even lazily
        (
            "pytest_ecdysis_tau2/tasks/suite.py",
            "def f():\n    from pytest_ecdysis_tau2.trial import runner  # noqa",
            "rooms are layered",
        ),
        # a circle inside one room: the worker's scorer client importing the warm server back
        (
            "pytest_ecdysis_tau2/scoring/scorer_client.py",
            "def f():\n    from . import warm_scorer  # noqa",
            "no import circle",
        ),
        # harness code reaching the trusted side (the scorer client it could patch)
        (
            "pytest_ecdysis_tau2/example_harness/tools.py",
            "from pytest_ecdysis_tau2.scoring import scorer_client  # noqa",
            "harness code never imports",
        ),
    ],
)
def test_an_added_upward_import_or_circle_breaks_the_contract(tmp_path, module, line, broken):
    for package in ("pytest_ecdysis", "pytest_ecdysis_tau2"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / (module if module.startswith("pytest_ecdysis_tau2/") else f"pytest_ecdysis/{module}")
    target.write_text(target.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout
    # the report names the offending module (and, for a layer break, the line)
    dotted = str(target.relative_to(tmp_path)).removesuffix(".py").replace("/", ".")
    assert dotted in result.stdout or "." + target.stem in result.stdout, result.stdout


OLD_PATHS = [
    "pytest_ecdysis.evolve_stages",
    "pytest_ecdysis.sim.agent_draws",
    "pytest_ecdysis.sim.roles_evidence",
    "pytest_ecdysis.sim.validity",
    "pytest_ecdysis_tau2.runner",
    "pytest_ecdysis_tau2.scorer",
    "pytest_ecdysis_tau2.agent_process",
    "pytest_ecdysis_tau2.sim_knowledge",
]


@pytest.mark.parametrize("old", OLD_PATHS)
def test_an_old_module_path_is_an_import_error_naming_it(old):
    """A module that moved has one address: its old path is a ModuleNotFoundError naming it, no shim."""
    result = subprocess.run(
        [sys.executable, "-c", f"import {old}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert f"No module named '{old}'" in result.stderr


def test_the_simulated_model_keeps_at_most_twelve_modules_at_its_top():
    """The simulated model is laid out by concern: server, protocol and profiles at the top, the rest in rooms."""
    top = ROOT / "pytest_ecdysis" / "sim"
    assert len(list(top.glob("*.py"))) <= 12
    rooms = sorted(p.name for p in top.iterdir() if (p / "__init__.py").is_file())
    assert rooms == ["agent", "editor", "roles", "truth", "user"]


def test_the_tau2_suite_keeps_its_face_on_top_and_the_rest_in_rooms():
    """At the package top only what pytest and the entry point find by path (the collected test modules,
    `registration`, `cases`); every other module lives in a room, so an old top-level path is gone."""
    top = ROOT / "pytest_ecdysis_tau2"
    modules = sorted(p.stem for p in top.glob("*.py"))
    rooms = sorted(p.name for p in top.iterdir() if (p / "__init__.py").is_file())
    assert modules == ["__init__", "cases", "registration", "test_airline", "test_retail", "test_telecom"]
    assert rooms == [
        "example_harness",
        "harness_process",
        "harnesses",
        "knowledge",
        "scoring",
        "tasks",
        "trial",
    ]


def test_the_public_names_are_the_documented_ones():
    import pytest_ecdysis

    for name in (
        "record_trial",
        "TrialResult",
        "get_state",
        "hookimpl",
        "FailureRecord",
        "ModificationSpec",
        "UsageError",
    ):
        assert name in pytest_ecdysis.__all__ and hasattr(pytest_ecdysis, name)
    assert pytest_ecdysis.TrialResult.__module__ == "pytest_ecdysis.core.records"
