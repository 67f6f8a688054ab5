"""An external editor's command contained like a harness: every process it starts ends with it (issue 27, item 6).

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

This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path

#: Environment variable carrying the per-call marker.
MARK_ENV = "ECDYSIS_EDITOR_MARK"


@functools.cache
def namespace_prefix() -> tuple[str, ...] | None:
    """The argv prefix that runs a command in its own PID namespace, or None where none can run."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    base = ("--pid", "--fork", "--kill-child")
    candidates = [(unshare, *base)] if os.geteuid() == 0 else []
    candidates += [(unshare, "--user", "--map-current-user", *base), (unshare, "--user", "--map-root-user", *base)]
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


def contained(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """(argv wrapped in a PID namespace when one can run, `env` with a fresh marker, the marker)."""
    mark = secrets.token_hex(16)
    prefix = namespace_prefix()
    return [*(prefix or ()), *argv], {**env, MARK_ENV: mark}, mark


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
