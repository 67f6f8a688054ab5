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
#: editor could read which quirks fired in which trial, the simulated world's answer key; `sim.server`).
EDITOR_DROPPED_ENV = ("ECDYSIS_SIM_TOKEN",)
#: Directories the editor may write besides its worktree (`--ecdysis-editor-writable`'s environment form),
#: `os.pathsep`-separated.
WRITABLE_ENV = "ECDYSIS_EDITOR_WRITABLE"
#: Said beside an editor's failure whose output names a read-only file system.
READ_ONLY_HINT = (
    "the editor runs in the sandbox: the disk is read-only to it outside the candidate's worktree; "
    "let it write its own state with --ecdysis-editor-writable DIR, or pass --ecdysis-sandbox off"
)


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
) -> tuple[list[str], dict[str, str], str]:
    """(argv wrapped in the editor's sandbox when the session's decision is on and `cwd`, the candidate's
    worktree, and `scratch`, a private writable directory, are given, else in a PID namespace when one can
    run; `env` without `EDITOR_DROPPED_ENV`, with a fresh marker (and `TMPDIR=scratch` in the sandbox); the
    marker)."""
    mark = secrets.token_hex(16)
    env = {**{k: v for k, v in env.items() if k not in EDITOR_DROPPED_ENV}, MARK_ENV: mark}
    if cwd is not None and scratch is not None and (wrap := editor_sandbox(cwd, scratch, writable, readable)):
        return [*wrap, *argv], {**env, "TMPDIR": str(scratch)}, mark
    prefix = namespace_prefix()
    return [*(prefix or ()), *argv], env, mark


def git_dirs(worktree: Path) -> list[Path]:
    """The worktree's own git directory and the repository's object store (`git rev-parse --git-dir
    --git-common-dir`), absolute; empty outside a git work tree."""
    done = subprocess.run(
        git_argv("rev-parse", "--absolute-git-dir", "--git-common-dir"),
        cwd=worktree,
        env=git_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        return []
    own, common = (Path(line) for line in done.stdout.splitlines()[:2])
    common = common if common.is_absolute() else (worktree / common).resolve()
    return list(dict.fromkeys(p for p in (own, common / "objects") if p.is_dir()))


def editor_sandbox(
    worktree: Path, scratch: Path, writable: tuple[str, ...] = (), readable: tuple[Path, ...] = ()
) -> list[str] | None:
    """The bwrap argv prefix for an editor working in `worktree` (item 3 above), or None when the session's
    sandbox is off or bwrap is missing; `writable` (and `ECDYSIS_EDITOR_WRITABLE`'s) directories stay
    writable too. What the session hides from harness code (`HIDE_ENV`: run directories, the suites' answer
    keys, the warm scorer's socket) is covered, also inside a writable directory, except a directory that holds
    a writable one (the checkout's `.git`, which the worktree's git needs); `readable` files inside a covered directory (the spec) are bound back read-only.
    Shape: `[bwrap, args..., "--"]`."""
    bwrap = shutil.which("bwrap")
    if os.environ.get(SANDBOX_ENV) != "1" or bwrap is None:
        return None
    extra = [*writable, *(p for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p)]
    bound = [
        worktree.resolve(),
        *git_dirs(worktree),
        scratch.resolve(),
        *(Path(p).resolve() for p in extra if os.path.isdir(p)),
    ]
    args = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev-bind",
        "/dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
    ]
    cache = Path.home() / ".cache"
    if Path.home() != Path("/") and cache.is_dir():
        args += ["--tmpfs", str(cache)]  # tools write caches; a fresh one, thrown away
    # the writable directories first, then the covers (one inside a writable directory, the warm scorer's
    # under a writable /tmp say, is covered too), then the readable files inside a cover, then the covers
    # made read-only; a hidden directory that holds a writable one (the checkout's .git) is left readable
    args += [a for path in dict.fromkeys(bound) for a in ("--bind", str(path), str(path))]
    covered = []
    for hidden in (Path(p).resolve() for p in os.environ.get(HIDE_ENV, "").split(os.pathsep) if p):
        if hidden.is_dir() and not any(w.is_relative_to(hidden) for w in bound):
            args += ["--tmpfs", str(hidden)]
            covered.append(hidden)
        elif hidden.is_file():
            args += ["--ro-bind", "/dev/null", str(hidden)]
    args += [a for path in readable if path.exists() for a in ("--ro-bind", str(path), str(path))]
    args += [a for path in covered for a in ("--remount-ro", str(path))]
    return [*args, "--chdir", str(worktree), "--"]


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
) -> tuple[int, str]:
    """Run `argv` in a new session and process group, in the editor's sandbox (item 3 above) or else its own PID
    namespace where one can run, output to a temporary file (a grandchild holding a pipe cannot block us); when the
    command exits or after `timeout_s` seconds the group is killed, the namespace ends with its first
    process, and every process carrying the call's environment marker is killed, so no helper it
    started (a `setsid` daemon included) outlives it. Returns (exit status, its stderr, or stdout when
    stderr is empty).

    Raises:
        subprocess.TimeoutExpired: the command ran longer than `timeout_s` (its group was killed).
        OSError: the command could not start.
    """
    scratch = scratch_dir()
    try:
        argv, env, mark = contained(argv, env, cwd=cwd, scratch=scratch, writable=writable, readable=readable)
        return _run_marked(argv, cwd=cwd, timeout_s=timeout_s, env=env, mark=mark)
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
