"""The repository's git control files, checksummed and put back around an editor call.

An external editor shares the user's repository: a `core.fsmonitor` or `core.hooksPath` in `.git/config`,
a hook in `.git/hooks/`, an `info/attributes` filter make git run a program (the loop's, or the user's next
`git switch`). `git_control(root)` digests them for `integrity.take` (a change is an `IntegrityError` that
rejects the candidate and stops the evolution) and puts them back to the bytes first seen in the process.
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

from pytest_ecdysis.git.env import git_argv, git_env

Digests = dict[str, str]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digests(root: Path, files: list[str]) -> Digests:
    """`{rel: sha256 | link:<target> | missing}` of `files` under `root`: a symlink's digest is its target
    text, never followed (`integrity.tree_digests` lists a tree's files and digests them here)."""
    out: Digests = {}
    for rel in files:
        path = root / rel
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = sha256(path.read_bytes())
        else:
            out[rel] = "missing"
    return out


#: The root name of `git_control`'s digests in `take`.
GIT_CONTROL = "git config, hooks and info"


def git_control(root: Path, scope: object = None) -> Digests:
    """Digests of the repository's files that make git run programs or change what it sees: `config`,
    every file under `hooks/` and `info/` (`attributes`, `exclude`, `sparse-checkout`) of the common git
    directory, and each linked worktree's `config.worktree` (`{path relative to the git dir: sha256}`;
    a missing `config` is `missing`). An editor shares them with the user's checkout.

    The first call for a repository and `scope` (the evolution's `protected_roots` object: one per
    evolution, so a change you make between two evolutions is not undone) keeps those files' bytes; a
    later call that finds them changed puts them back (`_restore_control`: changed and removed files
    rewritten, added ones deleted) after taking the digests, so the change is still reported (an
    `IntegrityError` for the caller) and the repository does not keep a planted `core.fsmonitor` or hook."""
    common = subprocess.run(
        git_argv("rev-parse", "--git-common-dir"),
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env=git_env(),
    ).stdout.strip()
    gitdir = (root / common).resolve()
    digests = _control_digests(gitdir)
    key = (gitdir, id(scope))
    if key not in _CONTROL_BYTES:  # the scope object is kept with the bytes: its id is not reused
        _CONTROL_BYTES[key] = (scope, {rel: _read_control(gitdir / rel) for rel in digests})
    saved = _CONTROL_BYTES[key][1]
    if digests != {rel: _digest_of(data) for rel, data in saved.items()}:
        _restore_control(gitdir, saved, digests)
    return digests


#: (git dir, id of the scope) -> (the scope, first-seen files: bytes and mode, `link:<target>`, or None)
_CONTROL_BYTES: dict[tuple[Path, int], tuple[object, dict[str, Any]]] = {}


def _read_control(path: Path) -> tuple[bytes, int] | str | None:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_file():
        return path.read_bytes(), path.stat().st_mode & 0o7777
    return None


def _digest_of(saved: tuple[bytes, int] | str | None) -> str:
    if saved is None:
        return "missing"
    return saved if isinstance(saved, str) else sha256(saved[0])


def _restore_control(gitdir: Path, saved: dict[str, Any], now: Digests) -> None:
    for rel in set(now) - set(saved):  # added (a planted hook): removed
        path = gitdir / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
    for rel, data in saved.items():
        if now.get(rel) == _digest_of(data):
            continue
        path = gitdir / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
        if isinstance(data, str):
            os.symlink(data.removeprefix("link:"), path)
        elif data is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data[0])
            os.chmod(path, data[1])


def _control_digests(gitdir: Path) -> Digests:
    files = ["config"]
    for sub in ("hooks", "info"):
        if (gitdir / sub).is_dir():
            files += sorted(
                p.relative_to(gitdir).as_posix()
                for p in (gitdir / sub).rglob("*")
                if p.is_file() or p.is_symlink()
            )
    if (gitdir / "worktrees").is_dir():
        files += sorted(
            p.relative_to(gitdir).as_posix() for p in (gitdir / "worktrees").glob("*/config.worktree")
        )
    return file_digests(gitdir, files)
