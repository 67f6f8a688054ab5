"""Trusted processes kept warm for a whole session and its sub-runs: the suites' warm
services (the τ² suite: one scorer server, `pytest_ecdysis_tau2.scoring.warm_scorer`).

The rules are those of the scorers' bytecode cache (`validate.pycache`):

- services exist only while the sandbox is on (`validate.sandbox.enabled()`): harness processes then run
  under bubblewrap with an allowlisted file system, their own empty `/tmp` and no access to this
  directory (it is in `ECDYSIS_SANDBOX_HIDE`), so they cannot reach a service's socket. Without the sandbox a
  harness runs with your rights and could connect to any socket of yours: nothing is started, an inherited
  `ENV_DIR` is dropped, and every worker starts its own scorer, as before;
- the top session's controller (not a sub-run: its `ENV_DIR` is marked by `ENV_SUBRUN`) makes a fresh
  private `0700` directory (`tempfile.mkdtemp`), exports it in `ENV_DIR` for its workers and validation
  sub-runs (`validate.setup.subrun_env` keeps it), asks each installed suite to start its services there (`core.registry.warm_services`), and at exit closes their standard input
  (so they exit), then removes the directory. A service also exits when the controller dies (its standard
  input reaches end of file) and removes its own socket directory then;
- a session nested in another (an editor's or a harness's pytest) drops `ENV_DIR` first (`plugin.py`,
  with the outer session's run id) and so never uses the outer session's services.

This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The directory of the session's warm services' sockets (set by the top controller when the sandbox is on).
ENV_DIR = "ECDYSIS_WARM_DIR"
#: "1" where `ENV_DIR` was given to a validation sub-run by its evolution (`validate.setup.subrun_env`).
ENV_SUBRUN = "ECDYSIS_WARM_SUBRUN"
#: seconds a service gets to exit after its standard input closed, before it is killed.
STOP_GRACE_S = 5.0

_STARTED: list[subprocess.Popen] = []
_OWNED: list[Path] = []


def prepare(sandbox_on: bool) -> Path | None:
    """At the controller's configure time (after `sandbox.decide`): the session's warm directory, or None.

    Without the sandbox an inherited `ENV_DIR` is dropped and nothing starts; an inherited one that exists
    and is marked a sub-run's (`ENV_SUBRUN` = `1`, set by `validate.setup.subrun_env`) is kept, starting
    nothing; otherwise (any other inherited value is dropped: a session started by some other process's
    environment, nested sessions having dropped theirs in `plugin.py`) a new directory is made, exported
    and the suites' services started in it. A suite whose
    services fail to start is reported on stderr and the session goes on without them (each worker then
    starts its own scorer, as without the sandbox)."""
    inherited, subrun = os.environ.pop(ENV_DIR, None), os.environ.pop(ENV_SUBRUN, None)
    if not sandbox_on:
        return None
    if inherited and subrun == "1" and Path(inherited).is_dir():
        os.environ[ENV_DIR], os.environ[ENV_SUBRUN] = inherited, subrun  # for this sub-run's workers
        return Path(inherited)
    path = Path(tempfile.mkdtemp(prefix="ecdysis-warm-"))
    _OWNED.append(path)
    atexit.register(stop)
    from pytest_ecdysis.core.registry import warm_services

    try:
        _STARTED.extend(warm_services(str(path)))
    except Exception as exc:  # never a lost session: the workers start their own scorers
        print(
            f"ecdysis: warm services did not start ({type(exc).__name__}: {exc}); "
            "each worker starts its own scorer",
            file=sys.stderr,
        )
        return None
    os.environ[ENV_DIR] = str(path)
    return path


def freeze() -> None:
    """Tell the started services to write nothing more to the session's bytecode cache (`validate.pycache`):
    one line `freeze` on their standard input. Called by the evolution right before it records the cache's
    state, which it then checks after every editor call and sub-run; a service reads the line before its
    next connection. No-op in a session that started none."""
    for proc in _STARTED:
        if proc.stdin is None:  # not started with a pipe to its standard input: nothing to tell
            continue
        with contextlib.suppress(Exception):
            proc.stdin.write(b"freeze\n")
            proc.stdin.flush()


def stop() -> None:
    """Close the started services' standard input, wait up to `STOP_GRACE_S` for them (then kill), and
    remove the directories this process made. Idempotent."""
    while _STARTED:
        proc = _STARTED.pop()
        with contextlib.suppress(Exception):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=STOP_GRACE_S)
    while _OWNED:
        path = _OWNED.pop()
        shutil.rmtree(path, ignore_errors=True)
        if os.environ.get(ENV_DIR) == str(path):
            del os.environ[ENV_DIR]
