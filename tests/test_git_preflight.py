"""Pre-flight checks of `--ecdysis-evolve` run at configure time, before any trial, each a usage error
naming the fix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.git import ops as gitops


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("LEVEL = 1\n")
    (tmp_path / "other.txt").write_text("x\n")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "-c", "user.name=a", "-c", "user.email=a@b", "add", "-A")
    _git(tmp_path, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "init")
    return tmp_path


def test_clean_repository_passes(repo: Path) -> None:
    """A clean harness on a branch passes, even with uncommitted changes elsewhere in the checkout."""
    (repo / "other.txt").write_text("changed\n")
    gitops.preflight(repo / "harness", "r1")


def test_not_a_repository(tmp_path: Path) -> None:
    """Outside a git repository: the error says to `git init` and commit."""
    (tmp_path / "h").mkdir()
    with pytest.raises(UsageError, match="needs a git repository.*git init"):
        gitops.preflight(tmp_path / "h", "r1")


def test_detached_head(repo: Path) -> None:
    """A detached HEAD is refused with the `git switch` fix."""
    _git(repo, "checkout", "-q", "--detach")
    with pytest.raises(UsageError, match="HEAD is detached.*git switch"):
        gitops.preflight(repo / "harness", "r1")


@pytest.mark.parametrize("untracked", [False, True])
def test_dirty_harness(repo: Path, untracked: bool) -> None:
    """Uncommitted (or untracked) changes in the harness directory are refused: commit or stash them."""
    target = repo / "harness" / ("new.py" if untracked else "__init__.py")
    target.write_text("LEVEL = 2\n")
    with pytest.raises(UsageError, match="uncommitted changes.*(commit|stash)"):
        gitops.preflight(repo / "harness", "r1")


def test_branch_taken(repo: Path) -> None:
    """An existing `ecdysis/<run-id>` branch is refused (and allowed on resume)."""
    _git(repo, "branch", "ecdysis/r1")
    with pytest.raises(UsageError, match="branch ecdysis/r1 already exists"):
        gitops.preflight(repo / "harness", "r1")
    gitops.preflight(repo / "harness", "r1", resume=True)


def test_untracked_harness_dir(repo: Path) -> None:
    """A harness directory git does not track cannot be evolved into commits."""
    (repo / "h2").mkdir()
    (repo / "h2" / "__init__.py").write_text("")
    with pytest.raises(UsageError, match="(not tracked|uncommitted)"):
        gitops.preflight(repo / "h2", "r1")


def test_plugin_runs_preflight_before_trials(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--ecdysis-evolve` outside a repository stops at configure time (exit 4) before any trial runs."""
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    pytester.makepyfile(test_x="def test_x():\n    open('ran', 'w')\n")
    pytester.mkpydir("h")
    (pytester.path / "h" / "__init__.py").write_text("def build_agent(**kw):\n    return None\n")
    result = pytester.runpytest_subprocess(
        "--ecdysis-evolve",
        "--ecdysis-harness",
        "h",
        "--ecdysis-model",
        "fake",
        "--ecdysis-base-url",
        "http://127.0.0.1:9",
        "--ecdysis-preflight",
        "off",  # no model at the closed port: the suite calls none
        "--ecdysis-editor",
        "sim",
    )
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*needs a git repository*"])
    assert not (pytester.path / "ran").exists()


def test_sim_editor_needs_recipes(repo: Path) -> None:
    """`--ecdysis-editor sim` with a harness without recipes names `builtin` and `cmd:`."""
    from pytest_ecdysis.edit.editors import check_editor

    with pytest.raises(UsageError, match="builtin.*cmd:"):
        check_editor("sim", repo / "harness")
