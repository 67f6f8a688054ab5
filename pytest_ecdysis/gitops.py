"""Git for the evolution loop: pre-flight checks, candidate worktrees, the result branch.

What it guarantees (docs/evolution.md; issue 6 item 4, issue 8 case 8, issue 11 cases 1-2):

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

This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from . import gitenv
from .errors import GitError, UsageError, shown

BRANCH_PREFIX = "ecdysis/"
#: Identity of the evolution's commits when neither git's configuration nor its environment gives one.
DEFAULT_NAME, DEFAULT_EMAIL = "pytest-ecdysis", "ecdysis@localhost"


class Git(git.Git):
    """GitPython's command runner, with every command run without the user's repository-local git
    variables (`gitenv.scrubbed`: inside a git hook they would point the command at the user's checkout)
    and without the repository's hooks (`-c core.hooksPath=/dev/null`: a `post-checkout` or `post-commit`
    hook is written for the user's own checkouts and commits, not for the tool's temporary worktrees)."""

    def execute(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(command, (list, tuple)) and command:
            command = [command[0], "-c", f"core.hooksPath={os.devnull}", *command[1:]]
        with gitenv.scrubbed():
            return super().execute(command, *args, **kwargs)


def _checkout_git(path: Path) -> Git:
    """A runner for read-only commands in the user's checkout: no optional locks (no index refresh)."""
    runner = Git(path)
    runner.update_environment(GIT_OPTIONAL_LOCKS="0")
    return runner


def branch_name(run_id: str) -> str:
    """The branch an evolution run creates: `ecdysis/<run-id>`."""
    return BRANCH_PREFIX + run_id


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


def preflight(harness_dir: Path, run_id: str | None, *, resume: bool = False) -> None:
    """Check, before any trial, that an evolution run can end with a branch (issue 6 item 5).

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
        raise UsageError("the git repository has no commit yet; commit your harness first "
                         "(`git add <harness dir> && git commit -m 'harness'`), then run --ecdysis-evolve")
    if not _ok(g, "symbolic-ref", "-q", "HEAD"):
        raise UsageError(
            f"HEAD is detached (at {g.rev_parse('--short=12', 'HEAD')}); evolution starts from a branch. Run "
            "`git switch <branch>` (or `git switch -c <new-branch>`) and start again"
        )
    pathspec = rel.as_posix() or "."
    if not g.ls_files("--", pathspec):
        raise UsageError(f"the harness directory {rel} is not tracked by git; commit it first "
                         f"(`git add {pathspec} && git commit -m 'harness'`)")
    dirty = g.status("--porcelain", "--untracked-files=all", "--", pathspec)
    if dirty.strip():
        files = shown([line[3:] for line in dirty.splitlines()])
        raise UsageError(
            f"the harness directory {rel} has uncommitted changes ({files}); evolution starts from the "
            "committed harness. Commit them (`git add {0} && git commit`) or stash them (`git stash push -- {0}`)"
            .format(pathspec)
        )
    if run_id and not resume and _ok(g, "rev-parse", "--verify", "-q", "refs/heads/" + branch_name(run_id)):
        raise UsageError(f"branch {branch_name(run_id)} already exists; delete it (`git branch -D "
                         f"{branch_name(run_id)}`) or unset ECDYSIS_RUN_ID to get a fresh run id")


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
    """`-c user.name=... -c user.email=...` defaults for what git's config does not set. The environment
    still wins as git lets it (`GIT_AUTHOR_*`/`GIT_COMMITTER_*` over config); `EMAIL` is kept when set."""
    out = []
    if not _ok(g, "config", "--get", "user.name"):
        out += ["-c", f"user.name={DEFAULT_NAME}"]
    if not _ok(g, "config", "--get", "user.email") and not os.environ.get("EMAIL"):
        out += ["-c", f"user.email={DEFAULT_EMAIL}"]
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
        name = path[len(prefix):]
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
    return Snapshot(base_commit=base_commit, rel=rel, files=files, base_files=base_files, outside=outside,
                    too_large=too_large)


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
        raise GitError(f"could not reset the candidate worktree to {snap.base_commit[:12]}: {exc.stderr.strip()}") \
            from exc
    worktree.commit = snap.base_commit
    write_snapshot(worktree, snap)


def tree_files(runner: git.Git, commit: str, rel: str) -> dict[str, bytes]:
    """The regular files under `rel` in `commit` (path relative to `rel` -> bytes), read with `git archive`."""
    import io
    import tarfile

    prefix = "" if rel in ("", ".") else rel + "/"
    data = runner.execute(["git", "archive", "--format=tar", commit, "--", rel or "."], stdout_as_string=False)
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                out[member.name[len(prefix):]] = tar.extractfile(member).read()
    return out


def committed_files(worktree: Worktree, sha: str) -> dict[str, bytes]:
    """The harness files of commit `sha` (harness-relative path -> bytes)."""
    return tree_files(worktree.git, sha, worktree.rel.as_posix())


def paths_changed_outside(harness_dir: Path, base: str, sha: str) -> list[str]:
    """Repository paths that differ between commits `base` and `sha` outside the harness directory."""
    root = repo_root(harness_dir)
    rel = harness_relpath(root, harness_dir).as_posix()
    names = [p for p in _checkout_git(root).diff("--name-only", "-z", base, sha).split("\0") if p]
    return [p for p in names if rel not in ("", ".") and not p.startswith(rel + "/")]
