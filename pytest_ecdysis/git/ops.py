"""Git for the evolution loop: pre-flight checks, candidate worktrees, the result branch.

What it guarantees (docs/evolution.md):

- the user's checkout, index, stash and current branch are never modified: candidates live in
  temporary *detached* worktrees (`git worktree add --detach`), each with its own index; commands run in
  the user's checkout only read (`GIT_OPTIONAL_LOCKS=0`: `git status` does not even refresh the index);
- every git command runs without the user's repository-local git variables (`gitenv.REPO_VARS`:
  `GIT_DIR`, `GIT_INDEX_FILE`, ... exported inside a git hook), so none is redirected into the checkout;
- every command is git's own command line (through GitPython's `Git` runner), never GitPython's
  pure-Python index or refs, so any repository git accepts works (index format v4, split index, reftable);
- an accepted round becomes a commit made inside the candidate's worktree, staging by name only the
  harness files the edit changed (never ignored files, never anything outside the harness directory);
  its parent is the previous incumbent (the user's HEAD for round 1), so no branch moves. The commit is
  `git commit --no-verify`: the repository's identity, signing and encoding settings apply as git applies
  them; no hook of the repository runs for any of the tool's git commands (see docs/evolution.md, "Commits");
- only at the end, and only when at least one round was accepted, `ecdysis/<run-id>` is created
  pointing at the last accepted commit. No branch otherwise.

The parts: `git.run` (the runner, the repository's root), `git.worktree` (candidate worktrees and their
commits), `git.snapshot` (a candidate's bytes); this module checks before the first trial (`preflight`),
reads the user's checkout and creates the result branch. Callers import each part's names from that part.

This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

from pathlib import Path

import git

from pytest_ecdysis.core.errors import GitError, UsageError, shown
from pytest_ecdysis.git.run import Git, _checkout_git, _ok, harness_relpath, repo_root

BRANCH_PREFIX = "ecdysis/"


def branch_name(run_id: str) -> str:
    """The branch an evolution run creates: `ecdysis/<run-id>`."""
    return BRANCH_PREFIX + run_id


def preflight(harness_dir: Path, run_id: str | None, *, resume: bool = False) -> None:
    """Check, before any trial, that an evolution run can end with a branch.

    Checks: a git repository; HEAD on a branch with at least one commit (not detached); the harness
    directory tracked and without uncommitted changes; the branch `ecdysis/<run-id>` free (skipped on
    resume, where a finished run may already have made it). Reads only: the user's index is not rewritten.

    Raises:
        UsageError: the first check that fails, naming the fix.
    """
    root = repo_root(harness_dir)
    rel = harness_relpath(root, harness_dir)
    g = _checkout_git(root)
    if not _ok(g, "rev-parse", "--verify", "-q", "HEAD^{commit}"):
        raise UsageError(
            "the git repository has no commit yet; commit your harness first "
            "(`git add <harness dir> && git commit -m 'harness'`), then run --ecdysis-evolve"
        )
    if not _ok(g, "symbolic-ref", "-q", "HEAD"):
        raise UsageError(
            f"HEAD is detached (at {g.rev_parse('--short=12', 'HEAD')}); evolution starts from a branch. Run "
            "`git switch <branch>` (or `git switch -c <new-branch>`) and start again"
        )
    pathspec = rel.as_posix() or "."
    if not g.ls_files("--", pathspec):
        raise UsageError(
            f"the harness directory {rel} is not tracked by git; commit it first "
            f"(`git add {pathspec} && git commit -m 'harness'`)"
        )
    dirty = g.status("--porcelain", "--untracked-files=all", "--", pathspec)
    if dirty.strip():
        files = shown([line[3:] for line in dirty.splitlines()])
        raise UsageError(
            f"the harness directory {rel} has uncommitted changes ({files}); evolution starts from the "
            "committed harness. Commit them (`git add {0} && git commit`) or stash them (`git stash push -- {0}`)".format(
                pathspec
            )
        )
    if run_id and not resume and _ok(g, "rev-parse", "--verify", "-q", "refs/heads/" + branch_name(run_id)):
        raise UsageError(
            f"branch {branch_name(run_id)} already exists; delete it (`git branch -D "
            f"{branch_name(run_id)}`) or unset ECDYSIS_RUN_ID to get a fresh run id"
        )


def create_branch(harness_dir: Path, run_id: str, commit: str) -> str:
    """Create `ecdysis/<run-id>` at `commit` without checking it out; returns the branch name.

    Raises:
        GitError: the branch already exists at another commit, or git refused to create it.
    """
    g = Git(repo_root(harness_dir))
    name = branch_name(run_id)
    try:
        existing = g.rev_parse("--verify", "-q", "refs/heads/" + name)
    except git.GitCommandError:
        existing = ""
    if existing:
        if existing == commit:
            return name
        raise GitError(f"branch {name} already exists at another commit; it was left as it was")
    try:
        g.branch(name, commit)
    except git.GitCommandError as exc:
        raise GitError(f"could not create branch {name} at {commit[:12]}: {exc.stderr.strip()}") from exc
    return name


def head_commit(harness_dir: Path) -> str:
    return _checkout_git(repo_root(harness_dir)).rev_parse("HEAD")


def commit_exists(harness_dir: Path, sha: str) -> bool:
    return _ok(_checkout_git(repo_root(harness_dir)), "cat-file", "-e", f"{sha}^{{commit}}")


def uncommitted_elsewhere(harness_dir: Path) -> int:
    """How many paths outside the harness directory have uncommitted changes (they are left alone)."""
    root = repo_root(harness_dir)
    rel = harness_relpath(root, harness_dir).as_posix()
    out = _checkout_git(root).status("--porcelain", "--untracked-files=no")
    return sum(1 for line in out.splitlines() if line[3:] and not line[3:].startswith(rel + "/"))


def paths_changed_outside(harness_dir: Path, base: str, sha: str) -> list[str]:
    """Repository paths that differ between commits `base` and `sha` outside the harness directory."""
    root = repo_root(harness_dir)
    rel = harness_relpath(root, harness_dir).as_posix()
    names = [p for p in _checkout_git(root).diff("--name-only", "-z", base, sha).split("\0") if p]
    return [p for p in names if rel not in ("", ".") and not p.startswith(rel + "/")]
