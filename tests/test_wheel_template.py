"""The package as a team uses it, outside this repository: the wheel built from this tree is
installed with its τ² extra in a fresh virtual environment (no access to this checkout: no PYTHONPATH, pip
from the machine's package index), `ecdysis init` lays out the template in a new git repository, and the
action's run script (`python -m pytest_ecdysis.ci.action`, with the `INPUT_*` a workflow's `with:` gives
it) makes the baseline, gates (PASSED; FAILED once the agent is made worse) and runs one evolution round
with the simulated model. Also: the wheel installs only names of its own, and `--pyargs` finds the suite.

Slow: the install takes 2-5 minutes, the runs about as long again on a shared machine (8 airline tasks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
#: airline train tasks: 6 the example harness solves with the simulated model (nonce `ci`), each with a
#: write (so a harness that stops early fails them: the gate's paired sign test, p = 0.5^6 = 0.016 < 0.05;
#: the gate runs `gate-rule: paired`, as 10 tasks at 1 trial cannot decide the default non-inferiority),
#: and 4 it fails (evidence for the evolution round)
TASKS = "9,12,15,21,27,33,7,11,17,20"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh venv's python, the wheel): built from this tree, installed with `[tau2]`."""
    work = tmp_path_factory.mktemp("wheel")
    # from a copy without build/ and *.egg-info: setuptools reuses a source tree's build/lib, whose files of
    # an earlier layout would end up in the wheel
    source = work / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", ".ecdysis", "__pycache__", "node_modules"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = (work / "dist").glob("pytest_ecdysis-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, timeout=300)
    python = work / "venv" / "bin" / "python"
    # the versions this environment runs, as constraints: the same dependencies, and no resolver backtracking
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    (work / "constraints.txt").write_text(
        "\n".join(line for line in freeze if "==" in line and not line.lower().startswith("pytest-ecdysis"))
        + "\n"
    )
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[tau2]", "-c", str(work / "constraints.txt")],
        capture_output=True,
        text=True,
        timeout=3600,
        env=clean_env(work / "venv"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python, wheel


def clean_env(venv: Path) -> dict[str, str]:
    """A runner's environment: this checkout out of reach (no PYTHONPATH), the venv first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ECDYSIS_", "PYTEST_", "INPUT_", "GITHUB_", "PYTHON")) and k != "VIRTUAL_ENV"
    }
    env.update(
        PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        ECDYSIS_SIM_NONCE="ci",
    )  # as action.yml sets it (input sim-nonce)
    return env


def action(python: Path, repo: Path, run_id: str, **inputs: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The action's main step in `repo`, as action.yml runs it; returns (process, its outputs)."""
    runner = repo.parent / f"runner-{run_id}"
    runner.mkdir()
    env = clean_env(python.parents[1])
    env.update(
        {"INPUT_" + k.upper(): v for k, v in inputs.items()},
        GITHUB_OUTPUT=str(runner / "out"),
        GITHUB_STEP_SUMMARY=str(runner / "summary.md"),
        RUNNER_TEMP=str(runner),
        GITHUB_RUN_ID=run_id,
        GITHUB_RUN_ATTEMPT="1",
    )
    proc = subprocess.run(
        [str(python), "-m", "pytest_ecdysis.ci.action"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    out = runner / "out"
    return proc, dict(line.split("=", 1) for line in out.read_text().splitlines()) if out.exists() else {}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def test_a_team_repository_from_the_wheel_gates_and_evolves(venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, wheel = venv
    names = {
        n.split("/")[0]
        for n in zipfile.ZipFile(wheel).namelist()
        if not n.split("/")[0].endswith(".dist-info")
    }
    repo = tmp_path / "team"
    env = clean_env(python.parents[1])
    init = subprocess.run(
        [str(python.parent / "ecdysis"), "init", str(repo), "--action", "acme/pytest-ecdysis@v1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    assert {
        "harness/__init__.py",
        "harness/config.py",
        "pytest.ini",
        ".gitignore",
        ".github/workflows/ecdysis-gate.yml",
    } <= {str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file()}
    assert "uses: acme/pytest-ecdysis@v1" in (repo / ".github/workflows/ecdysis-gate.yml").read_text()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "team")
    git(repo, "config", "user.email", "team@example.com")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "harness and suite from ecdysis init")
    args = f"--ecdysis-tasks {TASKS}"

    proc, out = action(python, repo, "1", MODE="baseline", ARGS=args)
    assert proc.returncode == 0 and out["verdict"] == "saved", proc.stdout[-3000:] + proc.stderr[-2000:]
    baseline = json.loads((repo / ".ecdysis/baseline.json").read_text())
    assert baseline["harness_id"].startswith("harness@") and baseline["n_tasks"] == len(TASKS.split(","))
    git(repo, "add", ".ecdysis/baseline.json")
    git(repo, "commit", "-qm", "baseline")

    proc, out = action(python, repo, "2", MODE="gate", ARGS=args, GATE_RULE="paired")
    assert proc.returncode == 0 and out["verdict"] == "passed", proc.stdout[-3000:] + proc.stderr[-2000:]
    assert out["suite-score"] == f"{baseline['suite_score']:.4f}" and Path(out["report-path"]).is_file()

    config = repo / "harness" / "config.py"  # worse: a step budget of 2 model calls ends before any write
    config.write_text(config.read_text().replace("MAX_MODEL_CALLS = 60", "MAX_MODEL_CALLS = 2"))
    proc, out = action(python, repo, "3", MODE="gate", ARGS=args, GATE_RULE="paired")
    assert proc.returncode == 1 and out["verdict"] == "failed", proc.stdout[-3000:] + proc.stderr[-2000:]
    assert float(out["suite-score"]) < baseline["suite_score"]
    git(repo, "checkout", "--", "harness/config.py")

    proc, out = action(
        python,
        repo,
        "4",
        MODE="evolve",
        TOKEN="not-used-here",
        ROUNDS="1",
        ACCEPT="strict",
        ARGS=f"{args} --ecdysis-test-trials 0",
    )
    assert proc.returncode == 0 and out["verdict"] in ("improved", "unchanged"), (
        proc.stdout[-4000:] + proc.stderr[-2000:]
    )
    evolution = json.loads((repo / out["run-dir"] / "evolution.json").read_text())
    assert len(evolution["rounds"]) == 1 and evolution["branch"] == (out["branch"] or None)
    if out["branch"]:  # an accepted round is a commit of the harness on the branch, the checkout untouched
        changed = git(repo, "diff", "--name-only", f"main...{out['branch']}").split()
        assert changed and all(p.startswith("harness/") for p in changed)
        assert Path(out["pr-body-path"]).read_text().strip()
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""

    pyargs = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "--pyargs",
            "pytest_ecdysis_tau2.test_airline",
            "-q",
            "--ecdysis-tasks",
            "0",
            "-p",
            "no:cacheprovider",
            "--ecdysis-run-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pyargs.returncode == 0 and "1 passed" in pyargs.stdout, pyargs.stdout[-3000:]
    # names of its own only: nothing that shadows, or is shadowed by, a team's `tests`, `harness`, `suites`...
    assert names == {"pytest_ecdysis", "pytest_ecdysis_tau2"}, sorted(names)
