"""What a candidate must not be able to change, checked by the controller (docs/evolution.md, threat model).

Three pieces, all controller-side (no candidate code ever runs in the process that uses them):

- `protected_roots(...)` / `take(...)` / `changes(before, after)`: sha256 of every file under the trees
  that decide a score: τ²'s installed package (its data and evaluator), the plugin, the packages the
  installed suites register (entry point group `pytest_ecdysis`), Python's startup files (`*.pth`,
  `sitecustomize.py`, `usercustomize.py` in the site directories), and the user's checkout (tracked and
  untracked, not ignored, files; the run directory excluded), its refs, and its git control files
  (`git_control`: `.git/config`, `hooks/`, `info/`), and its object store (`git_objects`: loose objects,
  packs, stray files, the refs' connectivity). Taken before and after each editor call and each
  validation; any difference rejects the candidate and stops the evolution (`IntegrityError`).
- `pristine_copy(...)`: the user's checkout as it was when the evolution started (its tracked files only),
  copied once into a private temporary directory; validation sub-runs run from copies of it
  (`validate.subrun.run_suite(trusted=...)`), never from the live checkout.
- `Ledger`: the sha256 of every checkpoint file the controller writes, kept in memory and in a file
  outside the run directory (`$XDG_STATE_HOME/pytest-ecdysis/ledgers/<run-id>.json`, default
  `~/.local/state/...`), whose path no sub-run is given. A checkpoint read back must match its digest;
  one that was changed, or that appeared without being written by the controller, is an `IntegrityError`.

Bytecode caches (`__pycache__`, `*.pyc`) are not checksummed (Python writes them legitimately); instead
those of the protected packages are checked against their sources (`validate.bytecode`): a cache file
Python would load that does not hold its source's code is deleted and reported (`take`, `changes`). This module must not import
tau2, task suites or harness code (roots are found with `importlib.util.find_spec`, which runs nothing).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import site
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import IntegrityError
from pytest_ecdysis.git.env import git_argv, git_env
from pytest_ecdysis.validate.bytecode import BYTECODE, poisoned
from pytest_ecdysis.validate.git_control import GIT_CONTROL, file_digests, git_control

#: Installed packages whose files decide a τ² score (data, evaluator, orchestrator).
PROTECTED_PACKAGES = ("tau2", "pytest_ecdysis")
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache", ".ruff_cache", ".mypy_cache"}

Digests = dict[str, str]
#: The files of a run directory that evolution reads back (scores, evidence).
#: Ledger updates are serialised: paired re-scoring (`evolve.paired.together`) runs two sub-runs in threads
#: and both record their files (one shared `.tmp` name, one digests dict).
_LEDGER_LOCK = threading.RLock()
RUN_FILES = ("summary.json", "trials.jsonl", "failures.jsonl", "groups.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def package_dir(name: str) -> Path | None:
    """The directory of an installed top-level package, found without importing it (None if absent)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def suite_packages() -> list[str]:
    """Top-level packages of the suites registered under the entry point group `pytest_ecdysis`."""
    names = {
        ep.value.split(":")[0].split(".")[0] for ep in importlib.metadata.entry_points(group="pytest_ecdysis")
    }
    return sorted(names)


def checkout_files(root: Path, *, untracked: bool = True) -> list[str]:
    """Tracked (in the index) and, with `untracked`, untracked (not ignored) files of the git checkout at
    `root`, POSIX, sorted."""
    out = subprocess.run(
        git_argv("ls-files", "-z", "--cached", *(("--others", "--exclude-standard") if untracked else ())),
        cwd=root,
        capture_output=True,
        check=True,
        env=git_env(),
    ).stdout.decode("utf-8", "surrogateescape")
    return sorted({p for p in out.split("\0") if p})


def protected_roots(checkout: Path | None, exclude: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The trees `take` checksums: `{name: (root, file list or None = every file under it)}`."""
    roots: dict[str, Any] = {}
    tracked = checkout_files(checkout.resolve()) if checkout is not None else []
    for name in (*PROTECTED_PACKAGES, *suite_packages()):
        path = package_dir(name)
        if path is None:
            continue
        if checkout is not None and path.is_relative_to(checkout.resolve()):
            rel = path.relative_to(checkout.resolve()).as_posix() + "/"
            if any(p.startswith(rel) for p in tracked):
                continue  # part of the checkout (an editable install): checksummed with it
        roots[f"package {name}"] = (path, None)
    for directory in {*site.getsitepackages(), site.getusersitepackages()}:
        d = Path(directory)
        if d.is_dir():
            files = sorted(p.name for p in d.iterdir() if p.name.endswith(".pth") or p.name in STARTUP_FILES)
            roots[f"startup files in {d}"] = (d, files)
            # every other installed file (τ²'s dependencies decide a score too: an editor that patched
            # pydantic rigged the evaluator): by size and times, cheap enough for every check
            roots[f"installed packages in {d}"] = (d, STAT)
    if checkout is not None:
        root = checkout.resolve()
        skip = [e.resolve() for e in exclude]
        files = [p for p in tracked if not any((root / p).resolve().is_relative_to(s) for s in skip)]
        roots["your checkout"] = (root, files)
    return roots


#: `protected_roots`' file list for a tree checked by `stat_digests` instead of content hashes.
STAT = "stat"


def stat_digests(root: Path) -> Digests:
    """`{relative POSIX path: "size:mtime_ns:ctime_ns"}` of every file under `root` (bytecode caches
    skipped). The change time cannot be set back by an unprivileged process, so a rewrite that restores
    size and modification time still shows. About 1 s for a 1 GB site-packages (22,000 files)."""
    out: Digests = {}
    stack = [(str(root), "")]
    while stack:
        path, rel = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            name = rel + entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIP_PARTS:
                    stack.append((entry.path, name + "/"))
            elif not entry.name.endswith((".pyc", ".pyo")):
                st = entry.stat(follow_symlinks=False)
                out[name] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return out


def tree_digests(root: Path, files: list[str] | None = None) -> Digests:
    """`{relative POSIX path: sha256}` of `files` (default: every file under `root`, caches skipped).
    A symlink's digest is that of its target text (`link:<target>`); a missing file is `missing`."""
    if files is None:
        files = sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if (p.is_file() or p.is_symlink())
            and not (SKIP_PARTS & set(p.relative_to(root).parts))
            and p.suffix not in (".pyc", ".pyo")
        )
    return file_digests(root, files)


def take(roots: dict[str, Any]) -> dict[str, Digests]:
    """Checksums of every root (`protected_roots`), plus the branches, tags and HEAD of the checkout's
    repository (`git refs`), which an editor sharing the repository could move, its git control files
    (`git_control`), and the bytecode caches of the protected packages that do not hold their source's
    code (`bytecode.poisoned`: found, deleted, and listed under `bytecode caches`)."""
    out = {
        name: stat_digests(root) if files == STAT else tree_digests(root, files)
        for name, (root, files) in roots.items()
    }
    packages = {name: package_dir(name) for name in (*PROTECTED_PACKAGES, *suite_packages())}
    out[BYTECODE] = {
        f"package {name}: {path.relative_to(root).as_posix()}": "planted"
        for name, root in packages.items()
        if root is not None
        for path in poisoned(root)
    }
    if "your checkout" in roots:
        out["git refs"] = git_refs(roots["your checkout"][0])
        out[GIT_CONTROL] = git_control(roots["your checkout"][0], scope=roots)
        out[GIT_OBJECTS] = git_objects(roots["your checkout"][0])
    return out


#: The name `take` reports the repository's object store under.
GIT_OBJECTS = "git objects"
#: Files of an object directory besides loose objects and packs that git itself writes (`gitrepository-layout`).
OBJECT_INFO = ("info/alternates", "info/http-alternates", "info/packs", "info/commit-graph", "info/exclude")
#: Suffixes of the files of one pack (`git help gitformat-pack`, `git help repack`).
PACK_SUFFIXES = (".pack", ".idx", ".rev", ".bitmap", ".keep", ".promisor", ".mtimes")
#: The entry of `git_objects` carrying `git fsck --connectivity-only`'s verdict.
CONNECTIVITY = "(connectivity of the refs)"


def _object_kind(rel: str) -> str | None:
    """`loose`, `pack` or `info` for a file git writes under `objects/` (relative POSIX path), else None."""
    parts = rel.split("/")
    hexdigits = set("0123456789abcdef")
    if len(parts) == 2 and len(parts[0]) == 2 and set(parts[0] + parts[1]) <= hexdigits:
        return "loose" if len(parts[0] + parts[1]) in (40, 64) else None
    if (
        len(parts) == 2
        and parts[0] == "pack"
        and parts[1].startswith("pack-")
        and parts[1].endswith(PACK_SUFFIXES)
    ):
        return "pack"
    if len(parts) == 2 and parts[0] == "pack" and parts[1].startswith("multi-pack-index"):
        return "info"
    if rel in OBJECT_INFO or rel.startswith("info/commit-graphs/"):
        return "info"
    return None


def git_objects(root: Path) -> Digests:
    """The object store of the repository holding `root`: `{objects/<path>: digest}` of every loose object
    (sha256 of its bytes: git never rewrites one, it only touches its time) and every pack file (its size
    and the sha256 of its first and last 4 KiB: a pack is never rewritten in place either, and its trailer is
    the checksum of the whole), `unexpected` for any other file (a script or a log an editor left there),
    and under `CONNECTIVITY` `ok` or the first lines `git fsck --connectivity-only` of the refs printed (an
    object renamed aside or deleted). `changes` reports objects removed or changed, unexpected files added
    and the connectivity lost; objects and packs added are what git does (the evolution's own commits)."""
    common = subprocess.run(
        git_argv("rev-parse", "--path-format=absolute", "--git-common-dir"),
        cwd=root,
        capture_output=True,
        text=True,
        env=git_env(),
    ).stdout.strip()
    objects = Path(common) / "objects"
    out: Digests = {}
    if not common or not objects.is_dir():
        return out
    for path in sorted(p for p in objects.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(objects).as_posix()
        kind = _object_kind(rel)
        key = f"objects/{rel}"
        try:
            if kind == "loose":
                out[key] = sha256(path.read_bytes())
            elif kind == "pack":
                size = path.stat().st_size
                with open(path, "rb") as fh:
                    head = fh.read(4096)
                    fh.seek(max(0, size - 4096))
                    out[key] = f"{size}:{sha256(head + fh.read())}"
            elif kind is None:
                out[key] = "unexpected"
        except OSError:
            out[key] = "unreadable"
    done = subprocess.run(
        git_argv("fsck", "--connectivity-only", "--no-dangling", "--no-progress"),
        cwd=root,
        capture_output=True,
        text=True,
        env=git_env(),
        timeout=600,
    )
    said = " | ".join((done.stderr + done.stdout).strip().splitlines()[:3])
    out[CONNECTIVITY] = (
        "ok" if done.returncode == 0 else f"broken: {said or f'exit status {done.returncode}'}"
    )
    return out


def object_changes(before: Digests, after: Digests, limit: int = 10) -> list[str]:
    """`changes`' lines for the object store (`git_objects`): what was removed, changed or planted."""
    diff = [f"{p} removed" for p in sorted(set(before) - set(after)) if p != CONNECTIVITY]
    diff += [
        f"{p} changed"
        for p in sorted(set(before) & set(after))
        if before[p] != after[p] and p != CONNECTIVITY
    ]
    diff += [
        f"{p} added (not a git object)" for p in sorted(set(after) - set(before)) if after[p] == "unexpected"
    ]
    if after.get(CONNECTIVITY, "ok") != "ok" and before.get(CONNECTIVITY, "ok") == "ok":
        diff.append(f"the refs no longer reach their objects: {after[CONNECTIVITY]}")
    out = [f"{GIT_OBJECTS}: {d}" for d in diff[:limit]]
    if len(diff) > limit:
        out.append(f"{GIT_OBJECTS}: and {len(diff) - limit} more")
    return out


def git_refs(root: Path) -> Digests:
    """`{ref name: sha}` of `refs/heads`, `refs/tags` and `HEAD`, except the branches evolution makes
    (`ecdysis/...`)."""
    listing = subprocess.run(
        git_argv("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags"),
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env=git_env(),
    ).stdout
    head = subprocess.run(
        git_argv("rev-parse", "HEAD"), cwd=root, capture_output=True, text=True, env=git_env()
    ).stdout.strip()
    refs = dict(line.split(" ", 1) for line in listing.splitlines() if line.strip())
    refs = {k: v for k, v in refs.items() if not k.startswith("refs/heads/ecdysis/")}
    return {**refs, "HEAD": head}


def checkout_root(path: Path) -> Path:
    """The working tree root of the git checkout holding `path`."""
    out = subprocess.run(
        git_argv("rev-parse", "--show-toplevel"),
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
        env=git_env(),
    ).stdout.strip()
    return Path(out).resolve()


def changes(before: dict[str, Digests], after: dict[str, Digests], limit: int = 10) -> list[str]:
    """What differs, as `"<root>: <path> changed|added|removed"` lines (at most `limit` per root)."""
    out: list[str] = []
    for name in sorted(set(before) | set(after)):
        if name in (GIT_CONTROL, GIT_OBJECTS) and name not in before:
            continue  # a ledger written before this root was checked (resume)
        if name == GIT_OBJECTS:
            out += object_changes(before[name], after.get(name, {}), limit)
            continue
        if name == BYTECODE:  # found now (and deleted): whatever was found before is gone already
            out += [
                f"{name}: {p} did not hold its source's code (removed)" for p in sorted(after.get(name, {}))
            ]
            continue
        a, b = before.get(name, {}), after.get(name, {})
        diff = [f"{p} changed" for p in sorted(set(a) & set(b)) if a[p] != b[p]]
        diff += [f"{p} added" for p in sorted(set(b) - set(a)) if b[p] != "missing"]
        diff += [f"{p} removed" for p in sorted(set(a) - set(b)) if a[p] != "missing"]
        out += [f"{name}: {d}" for d in diff[:limit]]
        if len(diff) > limit:
            out.append(f"{name}: and {len(diff) - limit} more")
    return out


def pristine_copy(checkout: Path, exclude: tuple[Path, ...] = ()) -> Path:
    """Copy the checkout's tracked files (`checkout_files(untracked=False)`, minus `exclude`) to a new private
    temporary directory; returns it. An untracked file (a τ² copy or a data file left in the checkout) never
    reaches the copy harness code reads in validation. The caller removes it (`shutil.rmtree`). Symlinks are
    copied as symlinks."""
    root = checkout.resolve()
    dest = Path(tempfile.mkdtemp(prefix="ecdysis-trusted-")) / "tree"
    skip = [e.resolve() for e in exclude]
    for rel in checkout_files(root, untracked=False):
        src = root / rel
        if any(src.resolve().is_relative_to(s) for s in skip) or not (src.is_file() or src.is_symlink()):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def ledger_path(run_id: str) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "pytest-ecdysis" / "ledgers" / f"{run_id}.json"


class Ledger:
    """Digests of the checkpoint files the controller wrote, by path relative to the run directory."""

    def __init__(self, run_path: Path, run_id: str, *, resume: bool) -> None:
        self.run_path = run_path
        self.path = ledger_path(run_id)
        self.digests: Digests = {}
        self.start: dict[str, Digests] | None = None
        if resume and self.path.is_file():
            saved = json.loads(self.path.read_text())
            self.digests, self.start = saved.get("files", {}), saved.get("start")

    def rel(self, path: Path) -> str:
        return Path(path).resolve().relative_to(self.run_path.resolve()).as_posix()

    def record(self, path: Path, data: bytes) -> None:
        with _LEDGER_LOCK:  # paired re-scoring records two sub-runs' files from two threads
            self.digests[self.rel(path)] = sha256(data)
            self._save()

    def write(self, path: Path, data: bytes) -> None:
        """Write `data` to `path` (atomically, known secrets redacted: `core.secrets`) and record its digest."""
        from pytest_ecdysis.core.secrets import redact_bytes

        data = redact_bytes(data)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        self.record(path, data)

    def read(self, path: Path) -> bytes:
        """The bytes of a checkpoint the controller wrote.

        Raises:
            IntegrityError: the file was never written by the controller, or changed since.
        """
        data = path.read_bytes()
        want = self.digests.get(self.rel(path))
        if want is None:
            raise IntegrityError(
                f"{path} was not written by this evolution's controller (no digest in its "
                f"ledger {self.path}): a candidate or another process made it; the evolution "
                "stops. Inspect the run directory and start a new run"
            )
        if sha256(data) != want:
            raise IntegrityError(
                f"{path} changed after the controller wrote it (digest mismatch with its "
                f"ledger {self.path}); the evolution stops. Inspect the run directory and start "
                "a new run"
            )
        return data

    def known(self, path: Path) -> bool:
        return self.rel(path) in self.digests

    def record_files(self, directory: Path) -> None:
        """Record every file under `directory` (a run directory the controller just wrote or copied)."""
        for path in sorted(directory.rglob("*")):
            if path.is_file() and not path.is_symlink():
                self.record(path, path.read_bytes())

    def record_files_named(self, run_path: Path) -> None:
        """Record the `RUN_FILES` of a run directory the controller's own session just wrote."""
        for name in RUN_FILES:
            if (run_path / name).is_file():
                self.record(run_path / name, (run_path / name).read_bytes())

    def verify_run(self, run_path: Path) -> None:
        """Check the files of a run directory the controller recorded (`RUN_FILES` that exist).

        Raises:
            IntegrityError: one of them is unknown to the ledger or changed.
        """
        for name in RUN_FILES:
            if (run_path / name).is_file():
                self.read(run_path / name)

    def save_start(self, checksums: dict[str, Digests]) -> None:
        """Keep the protected trees' checksums taken when the evolution started (compared on resume)."""
        self.start = checksums
        self._save()

    def _save(self) -> None:
        with _LEDGER_LOCK:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(
                json.dumps(
                    {
                        "run_path": str(self.run_path),
                        "files": self.digests,
                        "start": getattr(self, "start", None),
                    }
                )
            )
            tmp.replace(self.path)
