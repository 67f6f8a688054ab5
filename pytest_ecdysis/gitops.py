"""Git for the evolution loop: pre-flight checks, candidate worktrees, the result branch (GitPython).

What it guarantees (docs/evolution.md; issue 6 item 4, issue 8 case 8):

- the user's checkout, index, stash and current branch are never modified: candidates live in
  temporary *detached* worktrees (`git worktree add --detach`), each with its own index;
- an accepted round becomes a commit made inside the candidate's worktree, staging by name only the
  harness files the edit changed (never ignored files, never anything outside the harness directory);
  its parent is the previous incumbent (the user's HEAD for round 1), so no branch moves;
- only at the end, and only when at least one round was accepted, `ecdysis/<run-id>` is created
  pointing at the last accepted commit. No branch otherwise.

This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from .errors import GitError, UsageError

BRANCH_PREFIX = "ecdysis/"
DEFAULT_AUTHOR = git.Actor("pytest-ecdysis", "ecdysis@localhost")


def branch_name(run_id: str) -> str:
    """The branch an evolution run creates: `ecdysis/<run-id>`."""
    return BRANCH_PREFIX + run_id


def open_repo(path: Path) -> git.Repo:
    """The git repository containing `path`.

    Raises:
        UsageError: `path` is not inside a git working tree.
    """
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(
            f"--ecdysis-evolve needs a git repository: {path} is not inside one. Run `git init && git add "
            "-A && git commit -m 'harness'` in your project (evolution commits accepted edits to a new branch)"
        ) from None


def harness_relpath(repo: git.Repo, harness_dir: Path) -> Path:
    """`harness_dir` relative to the repository's working tree root.

    Raises:
        UsageError: the harness directory is outside the repository.
    """
    root = Path(repo.working_tree_dir).resolve()
    try:
        return harness_dir.resolve().relative_to(root)
    except ValueError:
        raise UsageError(
            f"the harness directory {harness_dir} is outside the git repository {root}; evolution edits and "
            "commits the harness, so copy it into the repository and pass --ecdysis-harness <that dir>"
        ) from None


def preflight(harness_dir: Path, run_id: str | None, *, resume: bool = False) -> None:
    """Check, before any trial, that an evolution run can end with a branch (issue 6 item 5).

    Checks: a git repository; HEAD on a branch with at least one commit (not detached); the harness
    directory tracked and without uncommitted changes; the branch `ecdysis/<run-id>` free (skipped on
    resume, where a finished run may already have made it).

    Raises:
        UsageError: the first check that fails, naming the fix.
    """
    repo = open_repo(harness_dir)
    rel = harness_relpath(repo, harness_dir)
    if not repo.head.is_valid():
        raise UsageError("the git repository has no commit yet; commit your harness first "
                         "(`git add <harness dir> && git commit -m 'harness'`), then run --ecdysis-evolve")
    if repo.head.is_detached:
        raise UsageError(
            f"HEAD is detached (at {repo.head.commit.hexsha[:12]}); evolution starts from a branch. Run "
            "`git switch <branch>` (or `git switch -c <new-branch>`) and start again"
        )
    pathspec = rel.as_posix() or "."
    if not repo.git.ls_files("--", pathspec):
        raise UsageError(f"the harness directory {rel} is not tracked by git; commit it first "
                         f"(`git add {pathspec} && git commit -m 'harness'`)")
    dirty = repo.git.status("--porcelain", "--untracked-files=all", "--", pathspec)
    if dirty.strip():
        files = ", ".join(line[3:] for line in dirty.splitlines()[:5])
        raise UsageError(
            f"the harness directory {rel} has uncommitted changes ({files}); evolution starts from the "
            "committed harness. Commit them (`git add {0} && git commit`) or stash them (`git stash push -- {0}`)"
            .format(pathspec)
        )
    if run_id and not resume and branch_name(run_id) in [h.name for h in repo.heads]:
        raise UsageError(f"branch {branch_name(run_id)} already exists; delete it (`git branch -D "
                         f"{branch_name(run_id)}`) or unset ECDYSIS_RUN_ID to get a fresh run id")


@dataclass
class Worktree:
    """A temporary detached worktree at `commit`; `harness_dir` is the harness inside it."""

    repo: git.Repo
    path: Path
    rel: Path
    commit: str

    @property
    def harness_dir(self) -> Path:
        return self.path / self.rel

    @property
    def git(self) -> git.Git:
        return git.Repo(self.path).git

    def changed_paths(self) -> list[str]:
        """Paths (relative to the repository root, POSIX) that differ from `commit`: modified, added,
        deleted or untracked, ignored files excluded. Reads only this worktree's state."""
        out = self.git.status("--porcelain=v1", "-z", "--untracked-files=all")
        paths: list[str] = []
        entries = out.split("\0")
        i = 0
        while i < len(entries):
            entry = entries[i]
            i += 1
            if not entry:
                continue
            code, path = entry[:2], entry[3:]
            if "R" in code or "C" in code:  # rename/copy: the next entry is the source path
                paths.append(entries[i])
                i += 1
            paths.append(path)
        return sorted(set(paths))

    def diff(self, paths: list[str]) -> str:
        """A `git apply`-able binary diff of `paths` against `commit` (new files included).

        Uses only this worktree's own index, never the user's.
        """
        if not paths:
            return ""
        self.git.add("-A", "--", *paths)
        text = self.git.diff("--cached", "--binary", self.commit, "--", *paths)
        self.git.reset("-q", "--", *paths)
        return text + ("\n" if text and not text.endswith("\n") else "")

    def apply(self, diff_text: str) -> None:
        """Apply a diff made by `diff` (used on resume to rebuild a candidate)."""
        if not diff_text.strip():
            return
        patch = self.path.parent / (self.path.name + ".patch")
        patch.write_text(diff_text)
        try:
            self.git.apply("--binary", str(patch))
        except git.GitCommandError as exc:
            raise GitError(f"could not re-apply the saved candidate diff: {exc.stderr.strip()}") from exc
        finally:
            patch.unlink(missing_ok=True)

    def commit_paths(self, paths: list[str], message: str) -> str:
        """Stage exactly `paths` (by name, deletions included) in this worktree and commit; returns the sha.

        Raises:
            GitError: nothing to commit, or git failed.
        """
        if not paths:
            raise GitError("refusing to make an empty commit: the accepted edit changed no file")
        wt = git.Repo(self.path)
        try:
            wt.git.add("-A", "--", *paths)
            reader = wt.config_reader()
            has_identity = reader.has_option("user", "name") and reader.has_option("user", "email")
            actor = None if has_identity else DEFAULT_AUTHOR
            sha = wt.index.commit(message, author=actor, committer=actor).hexsha
        except git.GitCommandError as exc:
            raise GitError(f"committing the accepted edit failed: {exc.stderr.strip()}") from exc
        self.git.checkout("-q", "--detach", sha)
        self.commit = sha
        return sha

    def remove(self) -> None:
        try:
            self.repo.git.worktree("remove", "--force", str(self.path))
        except git.GitCommandError:
            shutil.rmtree(self.path, ignore_errors=True)
            self.repo.git.worktree("prune")
        shutil.rmtree(self.path.parent, ignore_errors=True)


def add_worktree(harness_dir: Path, commit: str | None = None) -> Worktree:
    """A fresh detached worktree of the repository holding `harness_dir`, at `commit` (default HEAD).

    Raises:
        GitError: git could not create it (e.g. an unknown commit on resume).
    """
    repo = open_repo(harness_dir)
    rel = harness_relpath(repo, harness_dir)
    sha = commit or repo.head.commit.hexsha
    tmp = Path(tempfile.mkdtemp(prefix="ecdysis-wt-"))
    path = tmp / "candidate"
    try:
        repo.git.worktree("add", "--detach", str(path), sha)
    except git.GitCommandError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GitError(f"could not create a worktree at {sha[:12]}: {exc.stderr.strip()}") from exc
    return Worktree(repo=repo, path=path, rel=rel, commit=sha)


def create_branch(harness_dir: Path, run_id: str, commit: str) -> str:
    """Create `ecdysis/<run-id>` at `commit` without checking it out; returns the branch name.

    Raises:
        GitError: the branch already exists at another commit.
    """
    repo = open_repo(harness_dir)
    name = branch_name(run_id)
    existing = {h.name: h for h in repo.heads}
    if name in existing:
        if existing[name].commit.hexsha == commit:
            return name
        raise GitError(f"branch {name} already exists at another commit; it was left as it was")
    repo.create_head(name, commit)
    return name


def head_commit(harness_dir: Path) -> str:
    return open_repo(harness_dir).head.commit.hexsha


def commit_exists(harness_dir: Path, sha: str) -> bool:
    try:
        open_repo(harness_dir).commit(sha)
        return True
    except (ValueError, git.BadName):
        return False


def uncommitted_elsewhere(harness_dir: Path) -> int:
    """How many paths outside the harness directory have uncommitted changes (they are left alone)."""
    repo = open_repo(harness_dir)
    rel = harness_relpath(repo, harness_dir).as_posix()
    out = repo.git.status("--porcelain", "--untracked-files=no")
    return sum(1 for line in out.splitlines() if line[3:] and not line[3:].startswith(rel + "/"))
