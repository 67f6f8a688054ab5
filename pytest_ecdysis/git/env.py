"""The environment every process the tool starts gets: without the user's repository-local git variables.

Inside a git hook, or any process git started, git exports variables that point at *the user's* repository:
`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`, `GIT_OBJECT_DIRECTORY`, `GIT_COMMON_DIR`, `GIT_PREFIX`, ...
Inherited by the evolution's own git calls (a candidate worktree), by a `cmd:` editor that runs `git add`,
or by a validation sub-run, they redirect that work into the user's index and working tree (a
leaked `GIT_INDEX_FILE` made `git worktree add` stage every file of the checkout as deleted).

- `REPO_VARS`: the variables removed. git's own list of repository-local variables
  (`git rev-parse --local-env-vars`, git 2.39) without the three that carry configuration
  (`GIT_CONFIG`, `GIT_CONFIG_PARAMETERS`, `GIT_CONFIG_COUNT`: `git -c` settings, which the user meant),
  plus `GIT_QUARANTINE_PATH` (set in `pre-receive` hooks; git refuses ref updates while it is set).
  Identity variables (`GIT_AUTHOR_NAME`, `GIT_COMMITTER_EMAIL`, ...) are kept: git would apply them.
- `child_env(base, **extra)`: a copy of `base` (default `os.environ`) without them, plus `extra`; for
  every subprocess the tool starts (editor, import check, validation sub-run).
- `scrubbed()`: a context manager that removes them from `os.environ` and puts them back on exit; GitPython
  reads `GIT_DIR`/`GIT_WORK_TREE`/`GIT_COMMON_DIR` when it opens a repository and copies `os.environ` for
  every git command, so `gitops` runs all its work inside it. Re-entrant. It mutates the process
  environment, so it is only used where no other thread of the process starts subprocesses (configure
  time, and the evolution loop after the run loop ended).

The tool's own git commands also run with a fixed, minimal configuration: an editor
shares the repository's `.git/config` with the loop, and a setting there (or in the user's global config)
can make git run a program: `core.fsmonitor`, `core.hooksPath`, `diff.external`, `filter.<x>.clean`.

- `SAFE_CONFIG`: `-c` options put before every git subcommand of the tool: no hooks
  (`core.hooksPath=/dev/null`), no fsmonitor (`core.fsmonitor=`: git reads an empty value as off). The
  command line wins over every config file (git's precedence), so a value planted in `.git/config` is
  overridden; no automatic `gc` or maintenance (`gc.auto=0`, `maintenance.auto=false`: the object store is
  part of the integrity check, `validate.integrity.git_objects`, and only additions are expected in it);
  an `alias` never replaces a built-in command, and external diff drivers and text conversion
  are switched off on the diff calls (`--no-ext-diff --no-textconv`, `git.worktree`).
- `GIT_ENV`: `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`: the user's global and system config
  files (with their `include`/`includeIf` and filter drivers) are not read by the tool's git commands.
  The repository's own `.git/config` still is (it holds the repository's format); it is checksummed with
  `.git/hooks` and `.git/info` before and after each editor call (`validate.integrity`), so an editor
  that changes it is an integrity error. The user's identity is read once from their full config
  (`user_identity`), never executed.
- `git_argv(*args)`, `git_env(base)`: the argv and environment of a git command run through `subprocess`.

This module must not import anything beyond the standard library.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

#: Repository-local git variables never passed on (see the module docstring for the source of the list).
REPO_VARS: tuple[str, ...] = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_GRAFT_FILE",
    "GIT_SHALLOW_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_QUARANTINE_PATH",
)

P = ParamSpec("P")
R = TypeVar("R")

#: `-c` options before every git subcommand of the tool (see the module docstring).
SAFE_CONFIG: tuple[str, ...] = (
    *("-c", f"core.hooksPath={os.devnull}", "-c", "core.fsmonitor="),
    *("-c", "gc.auto=0", "-c", "maintenance.auto=false"),
)
#: Environment of every git command of the tool: no global or system config file.
GIT_ENV: dict[str, str] = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git_argv(*args: str) -> list[str]:
    """`["git", *SAFE_CONFIG, *args]`."""
    return ["git", *SAFE_CONFIG, *args]


def git_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`child_env(base)` plus `GIT_ENV` (no global or system git config)."""
    return child_env(base, **GIT_ENV)


@functools.cache
def user_identity() -> dict[str, str]:
    """`{"user.name": ..., "user.email": ...}` as the user's own config sets them (global and system
    files included; reading config runs nothing), for the tool's commits; keys absent when unset."""
    import subprocess

    out = {}
    for key in ("user.name", "user.email"):
        try:
            value = subprocess.run(
                ["git", "config", "--get", key],
                capture_output=True,
                text=True,
                env=child_env(),
                cwd=os.path.expanduser("~"),
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            value = ""
        if value:
            out[key] = value
    return out


def child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A copy of `base` (default `os.environ`) without `REPO_VARS`, updated with `extra`."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in REPO_VARS}
    env.update(extra)
    return env


def present(env: Mapping[str, str] | None = None) -> list[str]:
    """The `REPO_VARS` set in `env` (default `os.environ`), in `REPO_VARS` order."""
    env = os.environ if env is None else env
    return [k for k in REPO_VARS if k in env]


@contextmanager
def scrubbed() -> Iterator[None]:
    """Remove `REPO_VARS` from `os.environ` for the block; restore the removed values afterwards."""
    saved = {k: os.environ.pop(k) for k in present()}
    try:
        yield
    finally:
        os.environ.update(saved)


def without_repo_vars(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator: run `func` inside `scrubbed()` (same parameters and return type)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with scrubbed():
            return func(*args, **kwargs)

    return wrapper
