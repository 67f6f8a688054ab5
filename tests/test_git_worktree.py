"""Candidate worktrees and commits never touch the user's checkout, and a commit stages only the harness
files the edit changed: never ignored files, never unrelated changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_ecdysis.core.errors import GitError
from pytest_ecdysis.git import ops as gitops
from pytest_ecdysis.git import worktree as gitworktree


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("LEVEL = 1\n")
    (tmp_path / "harness" / "b.py").write_text("B = 1\n")
    (tmp_path / "suite.py").write_text("S = 1\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "config", "user.email", "dev@example.com")
    _git(tmp_path, "config", "user.name", "Dev")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "init")
    return tmp_path


def test_commit_stages_only_changed_harness_files(repo: Path) -> None:
    """Ignored files and the user's staged/unstaged changes stay out of the commit; the user's index,
    HEAD and working tree are unchanged; the branch points at the commit."""
    (repo / "suite.py").write_text("S = 2\n")
    _git(repo, "add", "suite.py")  # the user has something staged
    (repo / "notes.txt").write_text("mine\n")
    status_before = _git(repo, "status", "--porcelain")
    head = _git(repo, "rev-parse", "HEAD").strip()

    wt = gitworktree.add_worktree(repo / "harness")
    try:
        (wt.harness_dir / "__init__.py").write_text("LEVEL = 2\n")
        (wt.harness_dir / "new.py").write_text("N = 1\n")
        (wt.harness_dir / "debug.log").write_text("ignored\n")
        changed = wt.changed_paths()
        assert changed == ["harness/__init__.py", "harness/new.py"]
        diff = wt.diff(changed)
        assert "LEVEL = 2" in diff and "new.py" in diff and "debug.log" not in diff
        sha = wt.commit_paths(changed, "ecdysis round 1: raise LEVEL")
    finally:
        wt.remove()
    name = gitops.create_branch(repo / "harness", "r1", sha)
    assert _git(repo, "diff", "--name-only", "main", name).split() == [
        "harness/__init__.py",
        "harness/new.py",
    ]
    assert _git(repo, "rev-parse", "HEAD").strip() == head
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert _git(repo, "status", "--porcelain") == status_before
    assert _git(repo, "diff", "--cached", "--name-only").split() == ["suite.py"]
    assert (repo / "harness" / "__init__.py").read_text() == "LEVEL = 1\n"
    assert _git(repo, "worktree", "list").count("\n") == 1


def test_saved_diff_rebuilds_the_candidate(repo: Path) -> None:
    """A candidate diff re-applied to a fresh worktree gives the same files (resume)."""
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        (wt.harness_dir / "b.py").unlink()
        (wt.harness_dir / "c.py").write_text("C = 1\n")
        diff = wt.diff(wt.changed_paths())
    finally:
        wt.remove()
    again = gitworktree.add_worktree(repo / "harness")
    try:
        again.apply(diff)
        assert again.changed_paths() == ["harness/b.py", "harness/c.py"]
        assert not (again.harness_dir / "b.py").exists()
    finally:
        again.remove()


def test_empty_commit_and_taken_branch_are_refused(repo: Path) -> None:
    """No empty commits; a branch that exists at another commit is left as it was."""
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        with pytest.raises(GitError, match="empty commit"):
            wt.commit_paths([], "nothing")
    finally:
        wt.remove()
    _git(repo, "branch", "ecdysis/r2")
    (repo / "harness" / "b.py").write_text("B = 2\n")
    _git(repo, "commit", "-qam", "more")
    with pytest.raises(GitError, match="already exists"):
        gitops.create_branch(repo / "harness", "r2", _git(repo, "rev-parse", "HEAD").strip())
