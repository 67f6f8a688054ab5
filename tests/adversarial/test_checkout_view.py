"""The harness's view of the checkout holds only its tracked files (validate.integrity.pristine_copy): an
untracked data file in the checkout (a τ² copy with its gold tasks, left there or planted) never reaches the
private copy that validation sub-runs, and so harness code, read. Before, the copy took tracked and untracked
files, and a harness that read such a file went 0.250 -> 1.000 on 4 tasks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ecdysis.git.env import child_env
from pytest_ecdysis.validate import integrity

pytest_plugins = ["pytester"]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=child_env(), check=True, capture_output=True)


def test_an_untracked_data_file_never_reaches_the_private_copy(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "__init__.py").write_text("def build_agent(): ...\n")
    (root / "test_suite.py").write_text("S = 1\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=d", "-c", "user.email=d@x", "commit", "-qm", "init")
    data = root / "harness" / "data" / "airline" / "tasks.json"  # inside the harness directory, even
    data.parent.mkdir(parents=True)
    data.write_text('[{"id": "0", "evaluation_criteria": {"actions": []}}]')
    (root / "tau2_copy.json").write_text("{}")
    (root / "staged.py").write_text("T = 1\n")
    git(root, "add", "staged.py")  # in the index: tracked
    copy = integrity.pristine_copy(root)
    try:
        files = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    assert files == ["harness/__init__.py", "staged.py", "test_suite.py"]
    # the integrity check still covers the untracked files (a change to one is still seen)
    assert "tau2_copy.json" in integrity.checkout_files(root)


# An editor that makes the harness look for answer files next to it and in the directory it runs from: the
# level rises to 4 (every task solved) when either is there. The static check, which would flag the reads,
# is switched off by the project's conftest: this tests the copy behind it.
_EDITOR = """
import sys
from pathlib import Path

import pytest

harness = Path(sys.argv[2])
init = harness / "__init__.py"
init.write_text(init.read_text().replace("LEVEL = 1", '''import pathlib
_here = pathlib.Path(__file__).resolve().parent
_found = [p for p in (_here.parent / "answers.json", _here.parent / "data" / "answers.json",
                      _here.parent / "answers.log", pathlib.Path.cwd() / "answers.json") if p.exists()]
LEVEL = 4 if _found else 1'''))
"""

_NO_STATIC = """
import pytest_ecdysis.validate.static as staticcheck
staticcheck.check_candidate = lambda *a, **k: []
"""


@pytest.mark.slow
def test_untracked_answer_files_in_the_checkout_are_not_in_the_validated_view(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answer files the checkout holds but git does not track (untracked at its root and in a directory of
    their own, and one git ignores): the candidate that reads them finds none in validation (score 0.250,
    not 1.000), and they stay in place in the user's checkout. (An untracked file inside the harness
    directory stops the evolution before it starts: `evolve.preflight`.)"""
    from tiny_evolution import CONFTEST, evolution, make_project, run_evolution

    project = make_project(pytester, monkeypatch, CONFTEST + _NO_STATIC, editor=_EDITOR)
    (project.path / "script.json").write_text('[{"kind": "read"}]')
    planted = [
        project.path / "answers.json",
        project.path / "data" / "answers.json",
        project.path / "answers.log",
    ]
    for where in planted:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text('{"0": "gold", "1": "gold", "2": "gold", "3": "gold"}')
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=project.path,
        capture_output=True,
        text=True,
    ).stdout
    assert "?? answers.json" in status and "?? data/answers.json" in status and "answers.log" not in status
    result = run_evolution(project, "--ecdysis-rounds", "1")
    assert result.ret == 0, result.stdout.str()
    (row,) = evolution(project)["rounds"]
    assert row["score_after"] == 0.25 and row["outcome"] == "rejected", row
    assert all(p.is_file() for p in planted)
    # the control: the same candidate run from the checkout itself finds them and solves every task
    probe = project.path / "probe_harness"
    probe.mkdir()
    (probe / "__init__.py").write_text((project.path / "tiny_harness" / "__init__.py").read_text())
    subprocess.run([sys.executable, str(project.path / "editor.py"), "spec", str(probe)], check=True)
    plain = project.runpytest_subprocess(
        "test_tiny.py",
        "-p",
        "no:cacheprovider",
        "--ecdysis-harness",
        "probe_harness",
        "--ecdysis-model",
        "fake",
        "--ecdysis-base-url",
        "http://127.0.0.1:9",
        "--ecdysis-preflight",
        "off",
    )
    plain.stdout.fnmatch_lines(["*4 passed*"])
