"""The user's repository survives any git environment: the user's repository-local
git variables (exported inside a git hook) never reach the tool's git calls, the editor or the sub-runs,
and commits work in any repository git accepts (index format v4).

Each test compares the user's `.git/index`, `HEAD`, branch refs and working tree byte for byte before and
after."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_evolution import CONFTEST, git, make_project, run_evolution, script

from pytest_ecdysis.git import env as gitenv
from pytest_ecdysis.git import ops as gitops
from pytest_ecdysis.git import worktree as gitworktree

#: The variables a git hook exports, pointing at the repository `r` the hook runs for (name -> value).
HOOK_VARS = {
    "GIT_INDEX_FILE": lambda r: str(r / ".git" / "index"),
    "GIT_DIR": lambda r: str(r / ".git"),
    "GIT_WORK_TREE": lambda r: str(r),
    "GIT_OBJECT_DIRECTORY": lambda r: str(r / ".git" / "objects"),
    "GIT_COMMON_DIR": lambda r: str(r / ".git"),
    "GIT_PREFIX": lambda r: "harness/",
}
#: Which repository the gitops test points a variable at: the user's own (a hook of that repository), or
#: another one (pytest started from a hook of another repository, e.g. a superproject's).
TARGET = {
    "GIT_INDEX_FILE": "same",
    "GIT_WORK_TREE": "same",
    "GIT_DIR": "other",
    "GIT_OBJECT_DIRECTORY": "other",
    "GIT_COMMON_DIR": "other",
}


def fingerprint(repo: Path) -> dict[str, str]:
    """sha256 of the user's index, HEAD, branch refs and every non-ignored working-tree file."""
    env = gitenv.child_env()
    files = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    out = {
        f: hashlib.sha256((repo / f).read_bytes()).hexdigest() for f in files if f and (repo / f).is_file()
    }
    for name in ("index", "HEAD"):
        out[".git/" + name] = hashlib.sha256((repo / ".git" / name).read_bytes()).hexdigest()
    out["refs"] = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out["staged"] = git(repo, "diff", "--cached", "--name-status")
    return out


def other_repo(path: Path) -> Path:
    """Another repository, with one commit on `main`."""
    (path / "o.txt").write_text("other\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "-c", "user.name=o", "-c", "user.email=o@o", "commit", "-qm", "other")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for rel, text in {
        "harness/__init__.py": "LEVEL = 1\n",
        "harness/b.py": "B = 1\n",
        "suite.py": "S = 1\n",
        "docs/a.md": "a\n",
        ".gitignore": "*.log\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "dev@example.com")
    git(tmp_path, "config", "user.name", "Dev")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "init")
    (tmp_path / "suite.py").write_text("S = 2\n")
    git(tmp_path, "add", "suite.py")  # the user has something staged
    (tmp_path / "notes.txt").write_text("untracked\n")
    return tmp_path


def test_repo_vars_cover_gits_own_list() -> None:
    """Every repository-local variable git itself lists is scrubbed, except the `git -c` configuration."""
    listed = set(
        subprocess.run(
            ["git", "rev-parse", "--local-env-vars"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert listed - {"GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT"} <= set(gitenv.REPO_VARS)
    env = gitenv.child_env({"GIT_DIR": "/x", "GIT_AUTHOR_NAME": "me", "PATH": "/bin"}, EXTRA="1")
    assert env == {"GIT_AUTHOR_NAME": "me", "PATH": "/bin", "EXTRA": "1"}


@pytest.mark.parametrize("var", sorted(TARGET))
def test_git_work_ignores_hook_variables(
    repo: Path, var: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one hook variable exported (for the user's repository or another one), pre-flight, a candidate
    worktree, its commit and the branch leave both repositories' index, HEAD and working tree byte-identical;
    the branch's commit, in the user's repository, changes only the harness file."""
    other = other_repo(tmp_path_factory.mktemp("other"))
    before, before_other = fingerprint(repo), fingerprint(other)
    monkeypatch.setenv(var, HOOK_VARS[var](repo if TARGET[var] == "same" else other))
    gitops.preflight(repo / "harness", "r1")
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        assert (wt.harness_dir / "b.py").read_text() == "B = 1\n"  # a real checkout of the commit
        (wt.harness_dir / "__init__.py").write_text("LEVEL = 2\n")
        sha = wt.commit_paths(wt.changed_paths(), "ecdysis round 1")
    finally:
        wt.remove()
    gitops.create_branch(repo / "harness", "r1", sha)
    assert gitops.uncommitted_elsewhere(repo / "harness") == 1  # the staged suite.py
    monkeypatch.delenv(var)
    assert fingerprint(repo) == before and fingerprint(other) == before_other
    assert git(repo, "diff", "--name-status", "main", "ecdysis/r1").split() == ["M", "harness/__init__.py"]
    assert git(other, "branch", "--list").split() == ["*", "main"]
    assert git(repo, "worktree", "list").count("\n") == 1


def test_editor_process_does_not_see_hook_variables(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `cmd:` editor that runs `git add -A` after editing (coding agents do) stages into the candidate's
    index, never the user's, with every hook variable exported; the editor sees none of them."""
    from pytest_ecdysis.edit.editors import CommandEditor

    agent = repo / "agent.py"
    agent.write_text(
        "import os, subprocess, sys\nfrom pathlib import Path\n"
        "h = Path(sys.argv[1]); (h / 'b.py').write_text('B = 2\\n')\n"
        "subprocess.run(['git', 'add', '-A'], check=True)\n"
        "import json\n"
        f"Path(sys.argv[2]).write_text(json.dumps({{k: os.environ[k] for k in os.environ if k in {sorted(HOOK_VARS)!r}}}))\n"
    )
    seen = repo.parent / "seen.txt"
    before = fingerprint(repo)
    for var, value in HOOK_VARS.items():
        monkeypatch.setenv(var, value(repo))
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        result = CommandEditor(f"{sys.executable} {agent} {{harness}} {seen} {{spec}}").edit(
            None, wt.harness_dir, spec_path=repo / "spec.json"
        )
        assert result.ok, result.detail
        assert wt.changed_paths() == ["harness/b.py"]
    finally:
        wt.remove()
    for var in HOOK_VARS:
        monkeypatch.delenv(var)
    # none of the hook's values; git's object variables are the editor's own object directory (edit.contain)
    seen_env = json.loads(seen.read_text())
    assert set(seen_env) <= {"GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"}, seen_env
    assert not any(v == HOOK_VARS[k](repo) for k, v in seen_env.items() if k in HOOK_VARS), seen_env
    assert "ecdysis-editor-tmp-" in seen_env.get("GIT_OBJECT_DIRECTORY", "ecdysis-editor-tmp-")
    assert fingerprint(repo) == before


def index_version(repo: Path) -> int:
    """The format version in the index header (`DIRC` + big-endian uint32)."""
    head = (repo / ".git" / "index").read_bytes()[:8]
    assert head[:4] == b"DIRC"
    return int.from_bytes(head[4:8], "big")


@pytest.fixture
def v4repo(repo: Path) -> Path:
    """`repo` with index format version 4 (`feature.manyFiles`, common in large repositories)."""
    git(repo, "config", "feature.manyFiles", "true")
    git(repo, "update-index", "--index-version", "4")
    assert index_version(repo) == 4
    return repo


def test_commit_in_an_index_v4_repository(v4repo: Path) -> None:
    """Index v4 (which GitPython's own index cannot read): the commit and the branch are made with git's
    command line; the user's index stays byte-identical."""
    before = fingerprint(v4repo)
    wt = gitworktree.add_worktree(v4repo / "harness")
    try:
        (wt.harness_dir / "b.py").unlink()
        (wt.harness_dir / "c.py").write_text("C = 1\n")
        sha = wt.commit_paths(wt.changed_paths(), "ecdysis round 1")
    finally:
        wt.remove()
    gitops.create_branch(v4repo / "harness", "r1", sha)
    assert fingerprint(v4repo) == before
    assert git(v4repo, "diff", "--name-status", "main", "ecdysis/r1").split() == [
        "D",
        "harness/b.py",
        "A",
        "harness/c.py",
    ]


def test_no_hook_of_the_repository_runs(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`post-checkout` (run by `git worktree add`), `pre-commit` and `post-commit` hooks do not run for the
    tool's worktrees and commits; the hooks still exist and still run for the user's own git commands."""
    marks = tmp_path_factory.mktemp("hook-marks")
    hooks = repo / ".git" / "hooks"
    for name in ("post-checkout", "pre-commit", "post-commit"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marks / name}\n")
        (hooks / name).chmod(0o755)
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        (wt.harness_dir / "b.py").write_text("B = 4\n")
        wt.commit_paths(["harness/b.py"], "ecdysis round 1")
    finally:
        wt.remove()
    assert sorted(p.name for p in marks.iterdir()) == []
    git(repo, "commit", "-qm", "the user's own commit")  # suite.py is staged in the fixture
    assert sorted(p.name for p in marks.iterdir()) == ["post-commit", "pre-commit"]


def test_commit_uses_the_repositorys_identity_or_a_default(repo: Path) -> None:
    """The repository's configured identity signs the commit; without one, `pytest-ecdysis`."""
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        (wt.harness_dir / "b.py").write_text("B = 3\n")
        sha = wt.commit_paths(["harness/b.py"], "ecdysis round 1")
    finally:
        wt.remove()
    assert git(repo, "log", "-1", "--format=%an <%ae> / %cn", sha).strip() == "Dev <dev@example.com> / Dev"


# --- the whole loop, as users run it -------------------------------------------------------------------

AGENT = """
import subprocess, sys
from pathlib import Path

subprocess.run([sys.executable, str(Path(__file__).parent / "editor.py"), *sys.argv[1:]], check=True)
subprocess.run(["git", "add", "-A"], check=True)  # coding agents stage their work
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    project = make_project(pytester, monkeypatch, CONFTEST)
    (project.path / "agent.py").write_text(AGENT)
    git(project.path, "add", "agent.py")
    git(project.path, "commit", "-qm", "agent")
    return project


def _evolve(project: pytest.Pytester, *extra: str) -> pytest.RunResult:
    """One round with the `git add -A` agent, under the run id the test exported."""
    return run_evolution(project, "--ecdysis-rounds", "1", *extra, run_id=None, editor="agent.py")


@pytest.mark.slow
@pytest.mark.parametrize(
    "var",
    [
        "GIT_INDEX_FILE",
        "GIT_DIR",
        "GIT_DIR:other",
        "GIT_WORK_TREE",
        "GIT_OBJECT_DIRECTORY:other",
        "GIT_COMMON_DIR:other",
    ],
)
def test_evolution_round_with_a_hook_variable(
    project: pytest.Pytester,
    var: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One accepted evolution round run with a hook variable exported (for the user's repository, or with
    `:other` for another one): both repositories' index, HEAD and working tree are byte-identical, and the
    branch's one commit changes only the harness file. The `cmd:` editor runs `git add -A`."""
    var, _, where = var.partition(":")
    other = other_repo(tmp_path_factory.mktemp("other"))
    script(project, [{"knob": "x", "value": 3}])
    (project.path / "notes.txt").write_text("uncommitted work\n")
    before, before_other = fingerprint(project.path), fingerprint(other)
    monkeypatch.setenv("ECDYSIS_RUN_ID", "hook1")
    monkeypatch.setenv(var, HOOK_VARS[var](other if where else project.path))
    result = _evolve(project)
    monkeypatch.delenv(var)
    assert result.ret == 0, result.stdout.str()
    assert fingerprint(project.path) == before and fingerprint(other) == before_other
    doc = json.loads((project.path / ".ecdysis" / "runs" / "hook1" / "evolution.json").read_text())
    assert [r["outcome"] for r in doc["rounds"]] == ["accepted"] and doc["status"] == "finished"
    assert git(project.path, "diff", "--name-only", "main", "ecdysis/hook1").split() == [
        "tiny_harness/__init__.py"
    ]


@pytest.mark.slow
def test_evolution_round_in_an_index_v4_repository(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`feature.manyFiles` (index v4): the accepted round is committed, the run finishes with its branch."""
    git(project.path, "config", "feature.manyFiles", "true")
    git(project.path, "update-index", "--index-version", "4")
    assert index_version(project.path) == 4
    script(project, [{"knob": "x", "value": 3}])
    before = fingerprint(project.path)
    monkeypatch.setenv("ECDYSIS_RUN_ID", "v4")
    result = _evolve(project)
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((project.path / ".ecdysis" / "runs" / "v4" / "evolution.json").read_text())
    assert doc["status"] == "finished" and doc["branch"] == "ecdysis/v4"
    assert fingerprint(project.path) == before
