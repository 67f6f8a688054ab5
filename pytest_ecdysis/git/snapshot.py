"""A candidate as bytes: read once from the editor's worktree, then checked, validated and committed.

`snapshot(worktree, base)` reads the harness files (symlinks never followed, size caps `MAX_FILE_BYTES`
and `MAX_TOTAL_BYTES`) and the paths changed outside the harness; `reset_to_snapshot` puts a worktree back
at the base commit holding exactly those bytes, whatever the editor did after; `tree_files` and
`committed_files` read a commit's files with `git archive`. This module must not import tau2, task suites
or harness code.
"""

from __future__ import annotations

from dataclasses import dataclass

import git

from pytest_ecdysis.core.errors import GitError
from pytest_ecdysis.git.worktree import Worktree

#: Size caps of a candidate, in bytes: any one harness file, and all of them together (a harness is a few
#: dozen kB; the example harness is about 40 kB). Larger candidates are refused by the guard.
MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Snapshot:
    """A candidate as bytes, read once from the editor's worktree: exactly these bytes are checked,
    validated and committed, whatever the editor (or a process it left behind) does afterwards.

    `files`/`base_files` map harness-relative POSIX paths to bytes (`None`: a symlink, never followed);
    `outside` lists repository paths outside the harness that differ from the base commit, committed by
    the editor or not; `too_large` names files over the size caps.
    """

    base_commit: str
    rel: str
    files: dict[str, bytes | None]
    base_files: dict[str, bytes]
    outside: list[str]
    too_large: list[str]

    @property
    def changed(self) -> list[str]:
        """Repository paths of harness files added, modified or deleted against the base commit."""
        prefix = "" if self.rel in ("", ".") else self.rel + "/"
        names = {p for p in self.files if p not in self.base_files or self.files[p] != self.base_files[p]}
        names |= set(self.base_files) - set(self.files)
        return sorted(prefix + p for p in names)


def snapshot(worktree: Worktree, base_commit: str) -> Snapshot:
    """Read the candidate in `worktree` against `base_commit` (what the editor committed counts as much
    as what it left uncommitted; ignored files do not count).

    Raises:
        GitError: git could not list the worktree's files.
    """
    wt = worktree.git
    rel = worktree.rel.as_posix()
    prefix = "" if rel in ("", ".") else rel + "/"
    try:
        base_files = tree_files(wt, base_commit, rel)
        listed = wt.ls_files("-z", "--cached", "--others", "--exclude-standard").split("\0")
        differ = wt.diff("--name-only", "-z", base_commit).split("\0")
        committed = wt.diff("--name-only", "-z", base_commit, "HEAD").split("\0")
        untracked = wt.ls_files("-z", "--others", "--exclude-standard").split("\0")
    except git.GitCommandError as exc:
        raise GitError(f"could not read the candidate in {worktree.path}: {exc}") from exc
    files: dict[str, bytes | None] = {}
    too_large: list[str] = []
    total = 0
    for path in sorted({p for p in listed if p and p.startswith(prefix)}):
        full = worktree.path / path
        name = path[len(prefix) :]
        if full.is_symlink():
            files[name] = None
        elif full.is_file():
            size = full.stat().st_size
            total += size
            if size > MAX_FILE_BYTES:
                too_large.append(f"{name} ({size} bytes > {MAX_FILE_BYTES})")
                continue
            files[name] = full.read_bytes()
    if total > MAX_TOTAL_BYTES:
        too_large.append(f"the harness ({total} bytes > {MAX_TOTAL_BYTES} in all)")
    outside = sorted({p for p in (*differ, *committed, *untracked) if p and not p.startswith(prefix)})
    return Snapshot(
        base_commit=base_commit,
        rel=rel,
        files=files,
        base_files=base_files,
        outside=outside,
        too_large=too_large,
    )


def write_snapshot(worktree: Worktree, snap: Snapshot) -> list[str]:
    """Make the harness directory of `worktree` (a fresh worktree at `snap.base_commit`) hold exactly the
    snapshot's files; returns the changed repository paths (`snap.changed`). Symlinks are not written."""
    root = worktree.harness_dir
    for rel in snap.base_files:
        (root / rel).unlink(missing_ok=True)
    for rel, data in snap.files.items():
        if data is None:
            continue
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return snap.changed


def reset_to_snapshot(worktree: Worktree, snap: Snapshot) -> None:
    """Put `worktree` back at the snapshot's base commit (whatever the editor committed or left there),
    then write exactly the snapshot's harness files: what is validated and committed is these bytes.

    Raises:
        GitError: git could not reset the worktree.
    """
    try:
        worktree.git.checkout("-q", "--detach", "--force", snap.base_commit)
        worktree.git.clean("-fdq")
        worktree.git.clean("-fdqx", "--", snap.rel if snap.rel not in ("", ".") else ".")
    except git.GitCommandError as exc:
        raise GitError(
            f"could not reset the candidate worktree to {snap.base_commit[:12]}: {exc.stderr.strip()}"
        ) from exc
    worktree.commit = snap.base_commit
    write_snapshot(worktree, snap)


def tree_files(runner: git.Git, commit: str, rel: str) -> dict[str, bytes]:
    """The regular files under `rel` in `commit` (path relative to `rel` -> bytes), read with `git archive`."""
    import io
    import tarfile

    prefix = "" if rel in ("", ".") else rel + "/"
    data = runner.execute(
        ["git", "archive", "--format=tar", commit, "--", rel or "."], stdout_as_string=False
    )
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                body = tar.extractfile(member)  # None only for a member that is not a regular file
                if body is not None:
                    out[member.name[len(prefix) :]] = body.read()
    return out


def committed_files(worktree: Worktree, sha: str) -> dict[str, bytes]:
    """The harness files of commit `sha` (harness-relative path -> bytes)."""
    return tree_files(worktree.git, sha, worktree.rel.as_posix())
