"""Candidate worktrees: temporary *detached* worktrees of the user's repository, each with its own index.

`add_worktree(harness_dir, commit)` makes one at `commit` (default HEAD); a `Worktree` lists what changed
in it, makes and applies its diff, commits an accepted edit (`git commit --no-verify`, staging the named
paths only) and removes itself. Nothing here touches the user's checkout, index or branches (`gitops`'s
docstring has the guarantees). This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from pytest_ecdysis.core.errors import GitError
from pytest_ecdysis.git.run import Git, _ok, harness_relpath, repo_root

#: Identity of the evolution's commits when neither git's configuration nor its environment gives one.
DEFAULT_NAME, DEFAULT_EMAIL = "pytest-ecdysis", "ecdysis@localhost"


@dataclass
class Worktree:
    """A temporary detached worktree at `commit`; `harness_dir` is the harness inside it."""

    root: Path  # the user's working tree root
    path: Path
    rel: Path
    commit: str

    @property
    def harness_dir(self) -> Path:
        return self.path / self.rel

    @property
    def git(self) -> Git:
        """A runner in the worktree (its own index; never the user's)."""
        return Git(self.path)

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
        text = self.git.diff(
            "--cached", "--binary", "--no-ext-diff", "--no-textconv", self.commit, "--", *paths
        )
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

        `git commit --no-verify`: identity, signing (`commit.gpgSign`) and encoding settings apply as git
        applies them; hooks do not run. Without any identity, `pytest-ecdysis <ecdysis@localhost>`.

        Raises:
            GitError: nothing to commit, or git failed (the message carries git's own words).
        """
        if not paths:
            raise GitError("refusing to make an empty commit: the accepted edit changed no file")
        g = self.git
        try:
            g.reset("-q")  # the worktree's index back to `commit`: an editor may have staged other paths
            g.add("-A", "--", *paths)
            g.execute(["git", *_identity_options(g), "commit", "--no-verify", "-q", "-m", message])
            sha = g.rev_parse("HEAD")
        except git.GitCommandError as exc:
            raise GitError(f"committing the accepted edit failed: {(exc.stderr or '').strip()}") from exc
        self.commit = sha
        return sha

    def remove(self) -> None:
        main = Git(self.root)
        try:
            main.worktree("remove", "--force", str(self.path))
        except git.GitCommandError:
            shutil.rmtree(self.path, ignore_errors=True)
            main.worktree("prune")
        shutil.rmtree(self.path.parent, ignore_errors=True)


def _identity_options(g: git.Git) -> list[str]:
    """`-c user.name=... -c user.email=...` for what the repository's config does not set: the user's
    own identity (`gitenv.user_identity`), else the tool's defaults. The environment
    still wins as git lets it (`GIT_AUTHOR_*`/`GIT_COMMITTER_*` over config); `EMAIL` is kept when set."""
    from pytest_ecdysis.git.env import user_identity

    out = []
    mine = user_identity()  # the user's global config is not read by the tool's git commands (git.env)
    if not _ok(g, "config", "--get", "user.name"):
        out += ["-c", f"user.name={mine.get('user.name', DEFAULT_NAME)}"]
    if not _ok(g, "config", "--get", "user.email") and not os.environ.get("EMAIL"):
        out += ["-c", f"user.email={mine.get('user.email', DEFAULT_EMAIL)}"]
    return out


def add_worktree(harness_dir: Path, commit: str | None = None) -> Worktree:
    """A fresh detached worktree of the repository holding `harness_dir`, at `commit` (default HEAD).

    Raises:
        GitError: git could not create it (e.g. an unknown commit on resume).
    """
    root = repo_root(harness_dir)
    rel = harness_relpath(root, harness_dir)
    main = Git(root)
    sha = commit or main.rev_parse("HEAD")
    tmp = Path(tempfile.mkdtemp(prefix="ecdysis-wt-"))
    path = tmp / "candidate"
    try:
        main.worktree("add", "-q", "--detach", str(path), sha)
    except git.GitCommandError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GitError(f"could not create a worktree at {sha[:12]}: {exc.stderr.strip()}") from exc
    return Worktree(root=root, path=path, rel=rel, commit=sha)
