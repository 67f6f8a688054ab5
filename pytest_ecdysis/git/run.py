"""The git runner every git command of the tool goes through, and where the user's repository is.

`Git` is GitPython's command runner (git's own command line, never GitPython's pure-Python index or refs)
without the user's repository-local git variables (`gitenv.scrubbed`) and without the repository's hooks;
`repo_root`/`harness_relpath` find the working tree holding the harness and the harness's place in it,
with one `UsageError` naming the fix when there is none. The guarantees these serve are in `gitops`'s
docstring (docs/evolution.md). This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.git import env as gitenv


class Git(git.Git):
    """GitPython's command runner, with every command run without the user's repository-local git
    variables (`gitenv.scrubbed`: inside a git hook they would point the command at the user's checkout),
    and with a fixed minimal config (`gitenv.SAFE_CONFIG`, `gitenv.GIT_ENV`): no hooks (a `post-checkout`
    or `post-commit` hook is written for the user's own checkouts and commits, not for the tool's temporary
    worktrees), no fsmonitor, no global or system config file (an editor that planted
    `core.fsmonitor` in the shared `.git/config` had the loop's git commands run its program)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.update_environment(**gitenv.GIT_ENV)

    def execute(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(command, (list, tuple)) and command:
            command = [command[0], *gitenv.SAFE_CONFIG, *command[1:]]
        with gitenv.scrubbed():
            return super().execute(command, *args, **kwargs)


def _checkout_git(path: Path) -> Git:
    """A runner for read-only commands in the user's checkout: no optional locks (no index refresh)."""
    runner = Git(path)
    runner.update_environment(GIT_OPTIONAL_LOCKS="0")
    return runner


def repo_root(path: Path) -> Path:
    """The root of the git working tree containing `path` (git's own discovery).

    Raises:
        UsageError: `path` is not inside a git working tree (or git refuses it, e.g. dubious ownership).
    """
    start = path if path.is_dir() else path.parent
    try:
        top = Git(start).rev_parse("--show-toplevel")
    except git.GitCommandError as exc:
        detail = (exc.stderr or "").strip().removeprefix("stderr:").strip(" '\n")
        raise UsageError(
            f"--ecdysis-evolve needs a git repository: {path} is not inside one ({detail}). Run `git init && "
            "git add -A && git commit -m 'harness'` in your project (evolution commits accepted edits to a new "
            "branch)"
        ) from None
    except git.GitCommandNotFound:
        raise UsageError("--ecdysis-evolve needs git on PATH; install git") from None
    if not top:
        raise UsageError(f"--ecdysis-evolve needs a working tree: {path} is inside a bare repository")
    return Path(top).resolve()


def harness_relpath(root: Path, harness_dir: Path) -> Path:
    """`harness_dir` relative to the repository's working tree root `root`.

    Raises:
        UsageError: the harness directory is outside the repository.
    """
    try:
        return harness_dir.resolve().relative_to(root)
    except ValueError:
        raise UsageError(
            f"the harness directory {harness_dir} is outside the git repository {root}; evolution edits and "
            "commits the harness, so copy it into the repository and pass --ecdysis-harness <that dir>"
        ) from None


def _ok(runner: git.Git, *args: str) -> bool:
    try:
        runner.execute(["git", *args])
        return True
    except git.GitCommandError:
        return False
