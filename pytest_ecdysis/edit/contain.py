"""An external editor's command contained like a harness: every process it starts ends with it.

A process group is not enough: a `setsid` daemon leaves the group, outlived the run and edited the checkout
afterwards. Two layers, both always on where they can run:

1. A PID namespace (`namespace_prefix()`): the command runs as process 1 of a new PID namespace
   (util-linux `unshare --pid --fork --kill-child`, with `--user --map-current-user` for an unprivileged
   user). When process 1 exits, the kernel kills every process left in the namespace, whatever session or
   group it moved to, and `--kill-child` ends process 1 when `unshare` itself is killed (timeout). Chosen over
   a cgroup because it needs no delegated cgroup tree and no root (where unprivileged user namespaces are
   allowed), and over bubblewrap because the editor must see the user's whole home (its own config, its
   credentials for its model) like any coding agent run by hand; the harness sandbox is the other helper's.
   Probed once per process with `unshare ... true`; `None` when it cannot run (no util-linux, user
   namespaces disabled: `sysctl kernel.unprivileged_userns_clone=1` or run as root).
2. A per-call marker (`MARK_ENV=<random>`) in the command's environment: after it ends, every process of
   this user whose `/proc/<pid>/environ` carries the marker is killed (`kill_marked`), repeated until none
   is left. This catches what layer 1 cannot run for; a process that re-executes itself with a cleared
   environment escapes it, which is why layer 1 comes first (docs/evolution.md, threat model).

3. Under the session's sandbox decision (`ECDYSIS_SANDBOX=1`, `--ecdysis-sandbox`, default `auto`: wherever
   bubblewrap starts), the editor runs under bubblewrap (`editor_sandbox`): it still sees the whole disk
   (its config, its credentials for its model) and keeps the network, but the disk is read-only except the
   candidate's worktree, that worktree's own git directory and the repository's object store (so
   `git add` works in the candidate's index), a private `TMPDIR`, and a fresh `~/.cache` thrown away after
   the call; the run directories and the suites' answer keys (gold tasks) are covered, as for harness code,
   the spec it is given bound back. Writes to your checkout, `.git/config`, hooks, refs, the venv and your caches are prevented,
   not only detected (the integrity checks of `validate.integrity` still run after every call: they are
   the only protection where no sandbox starts). Its PID namespace replaces layer 1's.

This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_ecdysis.git.env import git_argv, git_env

#: Environment variable carrying the per-call marker.
MARK_ENV = "ECDYSIS_EDITOR_MARK"
#: The session's sandbox decision (`validate.sandbox.ENV_ON`, read here by name: edit sits below validate).
SANDBOX_ENV = "ECDYSIS_SANDBOX"
#: What the session covers in every sandbox of untrusted code (`validate.sandbox.ENV_HIDE`, read here by name):
#: run directories, the ledger, the suites' answer keys (`hookspecs.ecdysis_answer_keys`), `os.pathsep`-separated.
HIDE_ENV = "ECDYSIS_SANDBOX_HIDE"
#: Variables an editor's command never inherits: the simulated server's ground-truth credential (with it an
#: editor could read which quirks fired in which trial, the simulated world's answer key; `sim.server`), and
#: the session's limiter of model calls with its token (`endpoint.limiter_service`: the trusted side's only).
EDITOR_DROPPED_ENV = ("ECDYSIS_SIM_TOKEN", "ECDYSIS_LIMITER")
#: Directories the editor may write besides its worktree (`--ecdysis-editor-writable`'s environment form),
#: `os.pathsep`-separated.
WRITABLE_ENV = "ECDYSIS_EDITOR_WRITABLE"
#: Directories and files the editor may read besides what it runs (`--ecdysis-editor-readable`'s
#: environment form), `os.pathsep`-separated.
READABLE_ENV = "ECDYSIS_EDITOR_READABLE"
#: Said beside an editor's failure whose output names a read-only file system or a missing file.
READ_ONLY_HINT = (
    "the editor runs in the sandbox: it sees only the candidate's worktree, what its command runs, the "
    "system directories and the paths you name, read-only outside the worktree; let it read a path with "
    "--ecdysis-editor-readable PATH, write its own state with --ecdysis-editor-writable DIR, or pass "
    "--ecdysis-sandbox off"
)
#: Output of an editor call whose failure `READ_ONLY_HINT` explains.
HINTED = ("Read-only file system", "No such file or directory")


@functools.cache
def namespace_prefix() -> tuple[str, ...] | None:
    """The argv prefix that runs a command in its own PID namespace, or None where none can run."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    base = ("--pid", "--fork", "--kill-child")
    candidates: list[tuple[str, ...]] = [(unshare, *base)] if os.geteuid() == 0 else []
    candidates += [
        (unshare, "--user", "--map-current-user", *base),
        (unshare, "--user", "--map-root-user", *base),
    ]
    for prefix in candidates:
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=20).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def containment() -> str:
    """One line saying how an editor's descendants are ended here (for logs and docs)."""
    prefix = namespace_prefix()
    if prefix is None:
        return "process group + environment marker (no PID namespace: unshare unavailable or not permitted)"
    return f"PID namespace ({Path(prefix[0]).name} {' '.join(prefix[1:])}) + environment marker"


def contained(
    argv: list[str],
    env: dict[str, str],
    cwd: Path | None = None,
    scratch: Path | None = None,
    writable: tuple[str, ...] = (),
    readable: tuple[Path, ...] = (),
    readable_dirs: tuple[str, ...] = (),
) -> tuple[list[str], dict[str, str], str]:
    """(argv wrapped in the editor's sandbox when the session's decision is on and `cwd`, the candidate's
    worktree, and `scratch`, a private writable directory, are given, else in a PID namespace when one can
    run; `env` without `EDITOR_DROPPED_ENV`, with a fresh marker and, when `scratch` is given, the editor's
    own object directory (`object_env`; with `TMPDIR=scratch` in the sandbox); the marker)."""
    mark = secrets.token_hex(16)
    env = {**{k: v for k, v in env.items() if k not in EDITOR_DROPPED_ENV}, MARK_ENV: mark}
    if cwd is not None and scratch is not None and git_locations(cwd) is not None:
        env.update(object_env(scratch))
    if cwd is not None and scratch is not None:
        wrap = editor_sandbox(
            cwd, scratch, writable, readable, argv, readable_dirs=readable_dirs, path_env=env.get("PATH")
        )
        if wrap:
            return [*wrap, *argv], {**env, "TMPDIR": str(scratch)}, mark
        if GIT_OBJECT_ENV in env:  # no sandbox: the repository's store is its alternate where it lies
            common = git_locations(cwd)[1]  # type: ignore[index]
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(common / "objects")
    prefix = namespace_prefix()
    return [*(prefix or ()), *argv], env, mark


def git_locations(worktree: Path) -> tuple[Path, Path] | None:
    """(the worktree's own git directory, the repository's common git directory), absolute
    (`git rev-parse --absolute-git-dir --git-common-dir`); None outside a git work tree."""
    done = subprocess.run(
        git_argv("rev-parse", "--absolute-git-dir", "--git-common-dir"),
        cwd=worktree,
        env=git_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        return None
    own, common = (Path(line) for line in done.stdout.splitlines()[:2])
    common = common if common.is_absolute() else (worktree / common).resolve()
    return own.resolve(), common.resolve()


#: What the editor sees of the system besides the paths it is given (as `validate.sandbox.SYSTEM_DIRS`):
#: programs, shared libraries, /etc (resolver, certificates). Symlinks among them stay symlinks.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: The editor's own object directory inside its scratch directory, and where the repository's object store
#: is bound read-only for it (its alternate).
OWN_OBJECTS, BASE_OBJECTS = "objects", "base-objects"
GIT_OBJECT_ENV = "GIT_OBJECT_DIRECTORY"


def interpreter_paths() -> list[Path]:
    """This interpreter's prefixes and its executable's directory, as links and resolved."""
    found = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
    ]
    found.append(os.path.dirname(os.path.realpath(sys.executable)))
    return list(dict.fromkeys(q for p in found for q in (Path(p).absolute(), Path(p).resolve())))


def _prefix_of(executable: Path) -> list[Path]:
    """The tree an executable needs: its directory, and for one in a `bin/` directory (a venv, a
    `uv tool`, a pyenv interpreter) the directory above it and, for a venv, its base interpreter's
    (`pyvenv.cfg` `home`); the same for the file a symlink resolves to."""
    out: list[Path] = []
    for path in dict.fromkeys((executable.absolute(), executable.resolve())):
        out.append(path.parent)
        if path.parent.name == "shims" and (path.parent.parent / "libexec").is_dir():
            out.append(path.parent.parent)  # a pyenv shim runs `<root>/libexec/pyenv` and a version of it
        if path.parent.name == "bin" and str(path.parent.parent) != "/":
            root = path.parent.parent
            out.append(root)
            cfg = root / "pyvenv.cfg"
            try:
                home = next(
                    (
                        ln.split("=", 1)[1].strip()
                        for ln in cfg.read_text().splitlines()
                        if ln.startswith("home")
                    ),
                    "",
                )
            except OSError:
                home = ""
            if home:
                base = Path(home)
                out += [base, base.parent] if base.name == "bin" else [base]
    return out


def tool_paths(argv: list[str], path_env: str | None = None) -> list[Path]:
    """What the editor's command runs, to be bound read-only: its executable (found on `path_env`) with
    `_prefix_of`'s tree, the interpreter its `#!` line names with its tree, and the existing files its
    arguments name (a script run by an interpreter)."""
    if not argv:
        return []
    out: list[Path] = []
    found = shutil.which(argv[0], path=path_env) if "/" not in argv[0] else argv[0]
    if found and os.path.exists(found):
        exe = Path(found)
        out += [exe, *_prefix_of(exe)]
        try:
            with open(exe.resolve(), "rb") as fh:
                first = fh.readline(512)
        except OSError:
            first = b""
        if first.startswith(b"#!"):
            words = first[2:].decode(errors="replace").split()
            if words and words[0].startswith("/"):
                interp = (
                    words[0] if Path(words[0]).name != "env" or len(words) < 2 else shutil.which(words[1])
                )
                if interp and os.path.exists(interp):
                    out += [Path(interp), *_prefix_of(Path(interp))]
    for arg in argv[1:]:
        if arg.startswith("/") and os.path.isfile(arg):
            out.append(Path(arg))
    return [p for p in dict.fromkeys(out) if str(p) != "/"]


#: Where a tree bound for the editor may hold a τ² install's data (its tasks and their gold actions), as
#: `glob` patterns below the tree: a venv or prefix, a pyenv root's versions, a system prefix.
TAU2_DATA_GLOBS = (
    "lib/python3*/site-packages/tau2/data",
    "lib/python3*/dist-packages/tau2/data",
    "local/lib/python3*/*-packages/tau2/data",
    "versions/*/lib/python3*/site-packages/tau2/data",
    "versions/*/envs/*/lib/python3*/site-packages/tau2/data",
)


def tau2_data(trees: list[Path]) -> list[Path]:
    """The τ² data directories (`TAU2_DATA_GLOBS`) inside `trees`: covered for the editor, which needs no τ²
    data (an interpreter tree it runs, a pyenv root say, may hold another τ² install)."""
    import glob

    found = {
        Path(g).resolve()
        for t in trees
        if t.is_dir()
        for pat in TAU2_DATA_GLOBS
        for g in glob.glob(str(t / pat))
    }
    return sorted(found)


def named_paths(env_name: str, given: tuple[str, ...] = ()) -> list[Path]:
    """`given` and the `os.pathsep`-separated paths of `env_name`, absolute, existing ones only."""
    raw = [*given, *(p for p in os.environ.get(env_name, "").split(os.pathsep) if p)]
    return [
        Path(p).expanduser().absolute() for p in dict.fromkeys(raw) if os.path.exists(os.path.expanduser(p))
    ]


def editor_sandbox(
    worktree: Path,
    scratch: Path,
    writable: tuple[str, ...] = (),
    readable: tuple[Path, ...] = (),
    argv: list[str] | None = None,
    *,
    readable_dirs: tuple[str, ...] = (),
    path_env: str | None = None,
) -> list[str] | None:
    """The bwrap argv prefix for an editor working in `worktree` (item 3 above), or None when the session's
    sandbox is off or bwrap is missing.

    The file system is an allowlist: the system directories (`SYSTEM_DIRS`), this interpreter
    (`interpreter_paths`), what the command runs (`tool_paths(argv)`), the repository's git directory and
    `readable` files (the spec) and the directories named with `--ecdysis-editor-readable`
    (`readable_dirs`, `READABLE_ENV`) read-only; the candidate's worktree, its own git directory, `scratch`
    (its `TMPDIR` and its object directory) and the `--ecdysis-editor-writable` directories (`writable`,
    `WRITABLE_ENV`) writable; a fresh empty `/tmp` and home directory, thrown away after the call. No other
    checkout, τ² install, run directory or file of the home directory is there. The repository's object
    store is read-only: git in the editor writes new objects into `scratch/objects` (`GIT_OBJECT_DIRECTORY`,
    the repository's store its alternate); `import_objects` copies them after the call. What the session
    hides from harness code (`HIDE_ENV`) is covered inside what is bound, except a directory that holds a
    writable one. Shape: `[bwrap, args..., "--"]`."""
    bwrap = shutil.which("bwrap")
    if os.environ.get(SANDBOX_ENV) != "1" or bwrap is None:
        return None
    where = git_locations(worktree)
    own_git, common = where if where is not None else (None, None)
    write = [
        worktree.resolve(),
        *([own_git] if own_git is not None else []),
        scratch.resolve(),
        *(p.resolve() for p in named_paths(WRITABLE_ENV, writable) if p.is_dir()),
    ]
    read = [
        *interpreter_paths(),
        *tool_paths(list(argv or []), path_env),
        *([common] if common is not None else []),
        *named_paths(READABLE_ENV, readable_dirs),
    ]
    # a symlink's target, not the link (bwrap follows it); nothing inside another bound tree twice
    read = [p.resolve() if p.is_symlink() else p for p in read if p.exists()]
    read = [
        p
        for p in dict.fromkeys(read)
        if p not in write and not any(p != q and p.is_relative_to(q) for q in read)
    ]
    home = Path.home()
    args = [bwrap]
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    args += ["--dev-bind", "/dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if home != Path("/") and not any(home.is_relative_to(d) for d in SYSTEM_DIRS):
        # a fresh home with a ~/.cache: tools write their config and caches; thrown away
        args += ["--tmpfs", str(home), "--dir", str(home / ".cache")]
    resolv = Path("/etc/resolv.conf")
    if resolv.is_symlink() and not any(resolv.resolve().is_relative_to(d) for d in SYSTEM_DIRS):
        args += ["--ro-bind-try", str(resolv.resolve()), str(resolv.resolve())]  # /run/systemd/resolve
    # read-only first, then the writable ones (a writable tree may lie inside a read-only one)
    args += [
        a for path in sorted(read, key=lambda p: len(p.parts)) for a in ("--ro-bind", str(path), str(path))
    ]
    args += [a for path in dict.fromkeys(write) for a in ("--bind", str(path), str(path))]
    if common is not None:  # the repository's objects read-only, as the editor's alternate
        base = scratch.resolve() / BASE_OBJECTS
        (scratch / OWN_OBJECTS / "info").mkdir(parents=True, exist_ok=True)
        (scratch / OWN_OBJECTS / "pack").mkdir(parents=True, exist_ok=True)
        base.mkdir(exist_ok=True)
        args += ["--ro-bind", str(common / "objects"), str(base)]
    seen = [*read, *write]
    covered = []
    hide = [Path(p).resolve() for p in os.environ.get(HIDE_ENV, "").split(os.pathsep) if p]
    for hidden in [*hide, *tau2_data(read)]:
        if not any(hidden.is_relative_to(s) or s.is_relative_to(hidden) for s in seen):
            continue  # not in the editor's file system at all
        if hidden.is_dir() and not any(w.is_relative_to(hidden) for w in write):
            args += ["--tmpfs", str(hidden)]
            covered.append(hidden)
        elif hidden.is_file():
            args += ["--ro-bind", "/dev/null", str(hidden)]
    args += [a for path in readable if path.exists() for a in ("--ro-bind", str(path), str(path))]
    args += [a for path in covered for a in ("--remount-ro", str(path))]
    return [
        *args,
        # the sandbox's own root and /tmp (with the directories bwrap made for the mounts) read-only too
        *("--remount-ro", "/tmp", "--remount-ro", "/"),
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--chdir",
        str(worktree),
        "--",
    ]


def object_env(scratch: Path) -> dict[str, str]:
    """The editor's git variables: its own object directory under `scratch`, the repository's store (bound
    read-only at `scratch/base-objects`) its alternate."""
    (scratch / OWN_OBJECTS / "info").mkdir(parents=True, exist_ok=True)
    (scratch / OWN_OBJECTS / "pack").mkdir(parents=True, exist_ok=True)
    return {
        GIT_OBJECT_ENV: str(scratch.resolve() / OWN_OBJECTS),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(scratch.resolve() / BASE_OBJECTS),
    }


def import_objects(worktree: Path, scratch: Path) -> str | None:
    """Copy the objects the editor wrote into its own object directory (`scratch/objects`) into the
    repository: packed by git from the editor's store and unpacked by `git unpack-objects` in the
    repository, which checks every object's hash (a file there that is not a valid object is not
    imported). None when done (or nothing to do), else git's complaint."""
    store = scratch / OWN_OBJECTS
    if not store.is_dir():
        return None
    (store / "info" / "alternates").unlink(missing_ok=True)  # only the editor's own objects are listed
    env = git_env()
    names = [
        p.parent.name + p.name
        for p in store.glob("[0-9a-f][0-9a-f]/*")
        if len(p.parent.name + p.name) in (40, 64) and p.is_file()
    ]
    for idx in store.glob("pack/*.idx"):
        with open(idx, "rb") as fh:
            listed = subprocess.run(git_argv("show-index"), stdin=fh, capture_output=True, text=True, env=env)
        names += [line.split()[1] for line in listed.stdout.splitlines() if len(line.split()) >= 2]
    if not names:
        return None
    editor_env = {**env, **object_env(scratch)}
    editor_env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(git_locations(worktree)[1] / "objects")  # type: ignore[index]
    packed = subprocess.run(
        git_argv("pack-objects", "--stdout", "-q"),
        input="\n".join(dict.fromkeys(names)).encode() + b"\n",
        cwd=worktree,
        env=editor_env,
        capture_output=True,
        timeout=300,
    )
    if packed.returncode != 0:
        return packed.stderr.decode(errors="replace").strip() or f"git pack-objects: exit {packed.returncode}"
    done = subprocess.run(
        git_argv("unpack-objects", "-q"),
        input=packed.stdout,
        cwd=worktree,
        env=env,
        capture_output=True,
        timeout=300,
    )
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip() or f"git unpack-objects: exit {done.returncode}"
    return None


def scratch_dir() -> Path:
    """A private writable directory for one editor call (its `TMPDIR`); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix="ecdysis-editor-tmp-"))


def marked_pids(mark: str) -> list[int]:
    """Processes (readable by this user) whose environment carries `MARK_ENV=mark`."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_marked(mark: str, rounds: int = 5) -> int:
    """SIGKILL every process carrying the marker, until none is left (at most `rounds` passes; a process
    forking meanwhile is caught by the next pass). Returns how many were killed. No-op without /proc."""
    if not os.path.isdir("/proc"):
        return 0
    killed = 0
    for _ in range(rounds):
        pids = marked_pids(mark)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def run_in_group(
    argv: list[str],
    *,
    cwd: Path,
    timeout_s: float,
    env: dict[str, str],
    writable: tuple[str, ...] = (),
    readable: tuple[Path, ...] = (),
    readable_dirs: tuple[str, ...] = (),
) -> tuple[int, str]:
    """Run `argv` in a new session and process group, in the editor's sandbox (item 3 above) or else its own PID
    namespace where one can run, output to a temporary file (a grandchild holding a pipe cannot block us); when the
    command exits or after `timeout_s` seconds the group is killed, the namespace ends with its first
    process, and every process carrying the call's environment marker is killed, so no helper it
    started (a `setsid` daemon included) outlives it. Returns (exit status, its stderr, or stdout when
    stderr is empty). In a git work tree the command writes git objects into its own object directory
    (`object_env`), imported into the repository after it ended (`import_objects`; a failure to import is
    appended to the text and the status made non-zero).

    Raises:
        subprocess.TimeoutExpired: the command ran longer than `timeout_s` (its group was killed).
        OSError: the command could not start.
    """
    scratch = scratch_dir()
    try:
        argv, env, mark = contained(
            argv,
            env,
            cwd=cwd,
            scratch=scratch,
            writable=writable,
            readable=readable,
            readable_dirs=readable_dirs,
        )
        try:
            code, text = _run_marked(argv, cwd=cwd, timeout_s=timeout_s, env=env, mark=mark)
        finally:
            failed = import_objects(cwd, scratch) if GIT_OBJECT_ENV in env else None
        if failed:
            return code or 1, f"{text}\nthe git objects the editor wrote could not be imported: {failed}"
        return code, text
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_marked(
    argv: list[str], *, cwd: Path, timeout_s: float, env: dict[str, str], mark: str
) -> tuple[int, str]:
    """`run_in_group`'s run of the wrapped command, its group and marked processes killed after."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout_s)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            kill_marked(mark)
        out.seek(0)
        err.seek(0)
        err_text, out_text = err.read().decode(errors="replace"), out.read().decode(errors="replace")
        return code, err_text if err_text.strip() else out_text
